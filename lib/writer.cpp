// lib/writer.cpp: a Writer's construction and its env leases: the env ids checked, each env's lease taken (a dead
// writer's taken over, and what it may have left: rate-limit admissions and a wait mark, an episode in progress,
// a priority tree walk), the leases handed over on a move and released, and refusing a Writer copied into a forked
// child (check_process, which every call runs first). The push paths are in writer_push.cpp, the wait for the rate
// limiter in writer_rate_limit.cpp.
//
// Who calls it: the env worker (C++ and the Python module), when it makes, moves or destroys a Writer; the lease
// words are in detail/protocol/lease.hpp.
#include "shmreplay/writer.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "detail/os/membarrier.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/env_takeover.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/storage/staged_kinds.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {

// ---------------------------------------------------------------------------------------------------------------
// Writer

Writer::Writer(Buffer& buffer, std::span<const uint64_t> env_ids, const WriterOptions& options)
    : buffer_(&buffer), seg_(&segment_of(buffer)), capacity_(buffer.capacity()),
      cold_capacity_(buffer.cold_capacity()), has_priorities_(buffer.has_priorities()),
      cap_words_(buffer.max_times_sampled() != 0 ? segment_of(buffer).cap_words(0) : nullptr),
      queue_tickets_(buffer.consuming_queue() ? segment_of(buffer).queue_tickets(0) : nullptr), options_(options) {
  const std::string& name = buffer.name();
  if (buffer.read_only()) {
    throw Error(Errc::read_only, fmt::format("cannot lease envs of '{}': the buffer is mapped read-only", name));
  }
  if (env_ids.empty()) {
    throw Error(Errc::invalid_argument, fmt::format("cannot lease envs of '{}': the list of env ids is empty", name));
  }
  const uint64_t num_envs = buffer.num_envs();
  local_.assign(static_cast<std::size_t>(num_envs), 0);
  for (std::size_t i = 0; i < env_ids.size(); ++i) {
    const uint64_t e = env_ids[i];
    detail::check_env_id(segment_of(buffer), e, "lease");
    if (local_[e] != 0) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot lease envs of '{}': env {} is listed twice (positions {} and {})", name, e,
                              local_[e] - 1, i));
    }
    local_[e] = static_cast<uint32_t>(i + 1);
  }
  global_ = &segment_of(buffer).global_control();
  if (buffer.reanalyse_chunk() != 0) {
    walk_ = &segment_of(buffer).walk_control();
    walk_chunk_ = buffer.reanalyse_chunk();
  }
  lease_word_ = detail::self_lease_word();
  fork_generation_ = detail::fork_generation();
  // Before the first push: whether this process may leave out the fence of notify_waiters (the learner's heavy
  // fence stands in; docs/design/waits.md).
  light_notify_ = detail::register_light_fence();
  envs_.reserve(env_ids.size());
  for (const uint64_t e : env_ids) {
    const detail::LeaseResult r =
        detail::try_take_lease(detail::env_lease_words(segment_of(buffer).env_control(e)), lease_word_);
    if (std::string problem = detail::env_lease_problem(name, e, r); !problem.empty()) {
      release_all();  // all or nothing
      throw Error(Errc::lease_held, std::move(problem));
    }
    envs_.push_back(e);
    if (r.outcome == detail::LeaseOutcome::taken_over) ++takeovers_;
  }
  seen_.assign(envs_.size(), std::numeric_limits<uint64_t>::max());
  locals_.assign(envs_.size(), 0);
  priorities_.reserve(envs_.size());
  reserved_.assign(envs_.size(), 0);
  for (const uint64_t e : envs_) {
    control_.push_back(&segment_of(buffer).env_control(e));
    // Only the lease holder moves head, so from here on the cursor follows it (advanced in publish).
    next_slot_.push_back(control_.back()->head.load(std::memory_order_relaxed) % buffer.capacity());
  }
  // What a dead predecessor left: its limiter admissions and wait mark, an episode record, a priority walk
  // (detail/protocol/env_takeover.hpp).
  detail::repair_env_takeover(segment_of(buffer), envs_, detail::EnvTakeover::writer);
  admit_envs_.reserve(envs_.size());
  // The kinds other than the plain ring go on after each env's newest published step (detail/storage/).
  auto staged = std::make_unique<detail::StagedKinds>(segment_of(buffer), envs_, detail::KindWriterMode::writer,
                                                      /*all_kinds=*/false);
  for (std::size_t f = 0; f < buffer.schema().size(); ++f) {
    const bool plain = !staged->staged(f);
    field_base_.push_back(plain ? segment_of(buffer).field_data(f) : nullptr);
    field_bytes_.push_back(buffer.schema()[f].bytes());
    if (plain) plain_fields_.push_back(static_cast<uint32_t>(f));
  }
  if (staged->any()) staged_ = std::move(staged);
  if (buffer.has_episodes()) roles_ = std::make_unique<detail::EpisodeRoles>(segment_of(buffer));
  policy_field_ = segment_of(buffer).episode_fields().policy_version;
  if (policy_field_) versions_.reserve(envs_.size());
}

Writer Writer::range(Buffer& buffer, uint64_t first, uint64_t count, const WriterOptions& options) {
  std::vector<uint64_t> ids(static_cast<std::size_t>(count));
  for (uint64_t i = 0; i < count; ++i) ids[static_cast<std::size_t>(i)] = first + i;
  return Writer(buffer, ids, options);
}

Writer::Writer(Writer&& other) noexcept
    : buffer_(std::exchange(other.buffer_, nullptr)),
      seg_(other.seg_),
      capacity_(other.capacity_),
      cold_capacity_(other.cold_capacity_),
      has_priorities_(other.has_priorities_),
      cap_words_(other.cap_words_),
      queue_tickets_(other.queue_tickets_),
      ticket_(other.ticket_),
      envs_(std::move(other.envs_)),
      local_(std::move(other.local_)),
      seen_(std::move(other.seen_)),
      reserved_(std::move(other.reserved_)),
      control_(std::move(other.control_)),
      next_slot_(std::move(other.next_slot_)),
      field_base_(std::move(other.field_base_)),
      field_bytes_(std::move(other.field_bytes_)),
      plain_fields_(std::move(other.plain_fields_)),
      global_(other.global_),
      walk_(other.walk_),
      walk_chunk_(other.walk_chunk_),
      locals_(std::move(other.locals_)),
      priorities_(std::move(other.priorities_)),
      calls_(other.calls_),
      lease_word_(other.lease_word_),
      fork_generation_(other.fork_generation_),
      light_notify_(other.light_notify_),
      takeovers_(other.takeovers_),
      roles_(std::move(other.roles_)),
      staged_(std::move(other.staged_)),
      options_(other.options_),
      admit_envs_(std::move(other.admit_envs_)),
      policy_field_(other.policy_field_),
      versions_(std::move(other.versions_)) {
  other.envs_.clear();
}

Writer::~Writer() { release_all(); }

void Writer::release_all() noexcept {
  if (buffer_ == nullptr) return;
  if (fork_generation_ != detail::fork_generation()) {  // a copy in a forked child: the leases are the parent's
    envs_.clear();
    return;
  }
  for (const uint64_t e : envs_) {
    detail::release_lease(detail::env_lease_words(segment_of(*buffer_).env_control(e)), lease_word_);
  }
  envs_.clear();
}

uint64_t Writer::head(uint64_t env_id) const noexcept {
  assert(env_id < local_.size() && local_[env_id] != 0);
  return segment_of(*buffer_).env_control(env_id).head.load(std::memory_order_relaxed);
}

uint64_t Writer::stack_flagless_restarts() const noexcept { return staged_ ? staged_->flagless_restarts() : 0; }

// Refuses a Writer copied into a forked child: its leases belong to the parent, which may still be pushing.
void Writer::check_process(const char* op) const {
  if (fork_generation_ != detail::fork_generation()) {
    detail::throw_forked("Writer", op, buffer_->name(), layout::owner_pid(lease_word_));
  }
}

// Cold: env_id is out of range, or in range and not leased by this Writer.
void Writer::throw_not_leased(uint64_t env_id, const char* op) const {
  detail::check_env_id(segment_of(*buffer_), env_id, op);
  throw Error(Errc::not_leased,
              fmt::format("cannot {} env {} of '{}': this Writer does not lease it (it leases {} env{}: {}{})", op,
                          env_id, buffer_->name(), envs_.size(), envs_.size() == 1 ? "" : "s",
                          fmt::join(envs_.begin(),
                                    envs_.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(envs_.size(), 8)),
                                    ","),
                          envs_.size() > 8 ? ",..." : ""));
}

}  // namespace shmreplay
