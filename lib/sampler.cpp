// lib/sampler.cpp: a Sampler's construction and its learner slot's lease, and its small calls. Construction takes
// the slot (the rank's or the first free one; a dead learner's is taken over, and what it may have left half done is
// repaired: its update locks, its waiter count, a priority tree walk); the lease is handed over on a move, released
// at the end, and refused in a forked child (check_process, which every call runs first). The small calls: the
// work counters, the views' sizes, wait, the online reset. The other files of the Sampler, one call path each, are
// listed in lib/sampler_parts.hpp.
//
// Who calls it: the learner (C++ and the Python module), one thread per Sampler at a time; the lease words are in
// detail/protocol/lease.hpp.
#include "shmreplay/sampler.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/wake.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay {

using layout::EnvControl;

// ---------------------------------------------------------------------------------------------------------------
// Construction and the lease

Sampler::Sampler(Buffer& buffer, const SamplerOptions& options) : buffer_(&buffer), options_(options) {
  if (buffer.read_only()) {
    throw Error(Errc::read_only,
                fmt::format("cannot attach a learner to '{}': the buffer is mapped read-only", buffer.name()));
  }
  const uint64_t slots = segment_of(buffer).max_learners();
  if (options.rank && *options.rank >= slots) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot attach a learner to '{}' as rank {}: it has {} learner slot{} (ranks 0 to {}); "
                            "create it with max_learners > {}",
                            buffer.name(), *options.rank, slots, slots == 1 ? "" : "s", slots - 1, *options.rank));
  }
  const uint64_t lease_word = detail::self_lease_word();
  const detail::SlotTaken taken = detail::take_learner_slot(segment_of(buffer), options.rank, lease_word);
  if (!taken.problem.empty()) throw Error(Errc::lease_held, fmt::format("cannot attach a learner to '{}': {}",
                                                                        buffer.name(), taken.problem));
  rank_ = taken.slot;
  lease_ = LearnerLease(&buffer, taken.slot, lease_word);
  if (taken.outcome == detail::LeaseOutcome::taken_over) detail::repair_dead_learner(segment_of(buffer), taken.slot);
  scratch_ = std::make_unique<Scratch>(buffer, taken.slot);
}

Sampler::Sampler(Sampler&& other) noexcept = default;

uint64_t Sampler::loads_seen() const noexcept {
  // relaxed: a load holds every learner lease while it rewrites the buffer and bumps the word; this Sampler's lease
  // CAS (acquire) came after its release.
  return segment_of(*buffer_).global_control().load_generation.load(std::memory_order_relaxed);
}
Sampler::~Sampler() = default;

Sampler::LearnerLease::LearnerLease(Buffer* buffer, uint64_t slot, uint64_t word) noexcept
    : buffer_(buffer), slot_(slot), word_(word), fork_generation_(detail::fork_generation()) {}

Sampler::LearnerLease& Sampler::LearnerLease::operator=(LearnerLease&& other) noexcept {
  if (this != &other) {
    release();
    buffer_ = std::exchange(other.buffer_, nullptr);
    slot_ = other.slot_;
    word_ = other.word_;
    fork_generation_ = other.fork_generation_;
  }
  return *this;
}

void Sampler::LearnerLease::release() noexcept {
  // A copy in a forked child leaves the lease alone: it is the parent's.
  if (buffer_ != nullptr && fork_generation_ == detail::fork_generation()) {
    detail::release_lease(detail::learner_slot(segment_of(*buffer_), slot_).lease, word_);
  }
  buffer_ = nullptr;
}

void Sampler::LearnerLease::check_process(const char* op) const {
  if (buffer_ != nullptr && fork_generation_ != detail::fork_generation()) {
    detail::throw_forked("Sampler", op, buffer_->name(), layout::owner_pid(word_));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Counters, views and sizes

const SamplerStats& Sampler::stats() const noexcept {
  static const SamplerStats kNone{};  // a moved-from Sampler has done no work
  return scratch_ != nullptr ? scratch_->stats : kNone;
}

using detail::view_range;

uint64_t Sampler::size(View view) const noexcept {
  uint64_t total = 0;
  const uint64_t cap = buffer_->capacity();
  const detail::LearnerSlotWords& me = scratch_->slot;
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    const detail::StepRange r = view_range(segment_of(*buffer_).env_control(e), view, cap, me.online_start(e));
    total += r.hi - r.lo;
  }
  return total;
}

EnvSizes Sampler::sizes(uint64_t env_id) const {
  detail::check_env_id(segment_of(*buffer_), env_id, "size");
  const EnvControl& c = segment_of(*buffer_).env_control(env_id);
  const std::atomic<uint64_t>& start = scratch_->slot.online_start(env_id);
  const detail::StepRange replay = view_range(c, View::replay, buffer_->capacity(), start);
  const detail::StepRange online = view_range(c, View::online, buffer_->capacity(), start);
  return {replay.hi, replay.hi - replay.lo, online.hi - online.lo};
}

bool Sampler::wait(View view, uint64_t min_steps, uint64_t timeout_ms) {
  lease_.check_process("wait on");
  const uint64_t most = buffer_->num_envs() * buffer_->capacity();
  if (min_steps > most) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot wait for {} steps in the {} view of '{}': it holds at most {} ({} envs x {} "
                            "steps)",
                            min_steps, to_string(view), buffer_->name(), most, buffer_->num_envs(),
                            buffer_->capacity()));
  }
  if (size(view) >= min_steps) return true;
  return detail::sleep_until(detail::learner_wake(segment_of(*buffer_).global_control(), scratch_->slot.waiters),
                             deadline_after_ms(timeout_ms), [&] { return size(view) >= min_steps; });
}

void Sampler::reset_online_queue(OnlineReset to) {
  lease_.check_process("reset the online queue of");
  const detail::LearnerSlotWords& me = scratch_->slot;
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    const EnvControl& c = segment_of(*buffer_).env_control(e);
    if (to == OnlineReset::now) {
      detail::reset_online_start(c, me.online_start(e));
    } else {
      detail::advance_online_start(c, me.online_start(e), scratch_->online.seen[static_cast<std::size_t>(e)]);
    }
  }
  me.online_resets.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace shmreplay
