#include "shmreplay/writer.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "detail/always_inline.hpp"
#include "detail/copy_bytes.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/wake.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay {

// ---------------------------------------------------------------------------------------------------------------
// StepSlot

StepSlot::StepSlot(StepSlot&& other) noexcept
    : writer_(std::exchange(other.writer_, nullptr)),
      env_(other.env_),
      step_(other.step_),
      local_(other.local_),
      priority_(other.priority_) {}

StepSlot::~StepSlot() {
  // Abandoned: the claim stays raised (claimed = head + 1), which is a state the next push handles; a rate-limit
  // admission of the step is given back.
  if (writer_ != nullptr) {
    writer_->reserved_[local_] = 0;
    layout::EnvControl* c = writer_->control_[local_];
    detail::withdraw(std::span<layout::EnvControl* const>(&c, 1));
  }
}

std::span<std::byte> StepSlot::field(std::size_t index) const noexcept {
  assert(writer_ != nullptr && index < writer_->field_base_.size());
  const uint64_t bytes = writer_->field_bytes_[index];
  const uint64_t cap = writer_->buffer_->capacity();
  return {writer_->field_base_[index] + (env_ * cap + step_ % cap) * bytes, static_cast<std::size_t>(bytes)};
}

void StepSlot::commit() {
  if (writer_ == nullptr) {
    throw Error(Errc::invalid_argument,
                fmt::format("step {} of env {} was already committed or abandoned", step_, env_));
  }
  writer_->check_process("commit a step of");
  const bool record_due = writer_->roles_ && writer_->stage_episode(env_, step_);
  writer_->set_priority(env_, step_, priority_);
  writer_->publish(local_, step_, detail::coarse_realtime_ns());
  if (record_due) detail::emit_record(writer_->buffer_->segment(), env_, step_ + 1);
  writer_->reserved_[local_] = 0;
  writer_->notify();
  writer_ = nullptr;
}

void StepSlot::set_priority(double priority) {
  if (writer_ == nullptr) {
    throw Error(Errc::invalid_argument,
                fmt::format("step {} of env {} was already committed or abandoned", step_, env_));
  }
  const Buffer& buffer = *writer_->buffer_;
  if (!detail::priority_fits(priority, buffer.priority_exponent())) {  // checked as given, before any conversion
    writer_->check_priorities(0, {});  // a buffer without priorities says so first, as a push with them does
    throw Error(Errc::invalid_argument,
                fmt::format("cannot set the priority of step {} of env {} of '{}': priority {} {}", step_, env_,
                            buffer.name(), priority, detail::priority_misfit(priority, buffer.priority_exponent())));
  }
  priority_ = priority;
}

// ---------------------------------------------------------------------------------------------------------------
// Writer

Writer::Writer(Buffer& buffer, std::span<const uint64_t> env_ids, const WriterOptions& options)
    : buffer_(&buffer), options_(options) {
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
    detail::check_env_id(buffer.segment(), e, "lease");
    if (local_[e] != 0) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot lease envs of '{}': env {} is listed twice (positions {} and {})", name, e,
                              local_[e] - 1, i));
    }
    local_[e] = static_cast<uint32_t>(i + 1);
  }
  global_ = &buffer.segment().global_control();
  lease_word_ = detail::self_lease_word();
  fork_generation_ = detail::fork_generation();
  envs_.reserve(env_ids.size());
  for (const uint64_t e : env_ids) {
    const detail::LeaseResult r = detail::try_take_lease(detail::env_lease_words(buffer.segment().env_control(e)), lease_word_);
    if (r.outcome == detail::LeaseOutcome::taken || r.outcome == detail::LeaseOutcome::taken_over) {
      envs_.push_back(e);
      if (r.outcome == detail::LeaseOutcome::taken_over) ++takeovers_;
      continue;
    }
    release_all();  // all or nothing
    if (r.outcome == detail::LeaseOutcome::held_by_us) {
      throw Error(Errc::lease_held,
                  fmt::format("cannot lease env {} of '{}': this process ({}) already leases it through another "
                              "Writer; an env has one writer at a time",
                              e, name, detail::holder_text(r.holder_lease, r.holder_start_ticks)));
    }
    throw Error(Errc::lease_held,
                fmt::format("cannot lease env {} of '{}': it is leased by {}, which is alive; an env has one "
                            "writer at a time",
                            e, name, detail::holder_text(r.holder_lease, r.holder_start_ticks)));
  }
  seen_.assign(envs_.size(), std::numeric_limits<uint64_t>::max());
  locals_.assign(envs_.size(), 0);
  priorities_.reserve(envs_.size());
  reserved_.assign(envs_.size(), 0);
  for (const uint64_t e : envs_) {
    control_.push_back(&buffer.segment().env_control(e));
    // Only the lease holder moves head, so from here on the cursor follows it (advanced in publish).
    next_slot_.push_back(control_.back()->head.load(std::memory_order_relaxed) % buffer.capacity());
  }
  // A dead predecessor's rate-limit admissions of steps it never published go, and so does its mark of a wait
  // (rate_limit.hpp).
  detail::withdraw(control_);
  detail::forget_dead_waiting(control_);
  admit_envs_.reserve(envs_.size());
  for (std::size_t f = 0; f < buffer.schema().size(); ++f) {
    field_base_.push_back(buffer.segment().field_data(f));
    field_bytes_.push_back(buffer.schema()[f].bytes());
  }
  if (buffer.has_episodes()) {
    roles_ = std::make_unique<detail::EpisodeRoles>(buffer.segment());
    for (const uint64_t e : envs_) detail::recover_env(buffer.segment(), e);
  }
  if (buffer.has_priorities()) {
    // A predecessor killed between its claim and its head store may have died inside the walk of the slot it was
    // writing: redo that walk (priorities.hpp). Outside a write (claimed == head) its last walk was complete.
    for (const uint64_t e : envs_) {
      const layout::EnvControl& c = buffer.segment().env_control(e);
      const uint64_t head = c.head.load(std::memory_order_acquire);  // pairs with publish_step's release store
      if ((c.claimed.load(std::memory_order_relaxed) & ~layout::kUpdateLockBit) != head) {
        detail::walk({buffer.segment().priority_tree(e), buffer.priority_leaves(), buffer.capacity()}, head % buffer.capacity());
      }
    }
  }
}

Writer Writer::range(Buffer& buffer, uint64_t first, uint64_t count, const WriterOptions& options) {
  std::vector<uint64_t> ids(static_cast<std::size_t>(count));
  for (uint64_t i = 0; i < count; ++i) ids[static_cast<std::size_t>(i)] = first + i;
  return Writer(buffer, ids, options);
}

Writer::Writer(Writer&& other) noexcept
    : buffer_(std::exchange(other.buffer_, nullptr)),
      envs_(std::move(other.envs_)),
      local_(std::move(other.local_)),
      seen_(std::move(other.seen_)),
      reserved_(std::move(other.reserved_)),
      control_(std::move(other.control_)),
      next_slot_(std::move(other.next_slot_)),
      field_base_(std::move(other.field_base_)),
      field_bytes_(std::move(other.field_bytes_)),
      global_(other.global_),
      locals_(std::move(other.locals_)),
      priorities_(std::move(other.priorities_)),
      calls_(other.calls_),
      lease_word_(other.lease_word_),
      fork_generation_(other.fork_generation_),
      takeovers_(other.takeovers_),
      roles_(std::move(other.roles_)),
      options_(other.options_),
      admit_envs_(std::move(other.admit_envs_)) {
  other.envs_.clear();
}

Writer::~Writer() { release_all(); }

void Writer::release_all() noexcept {
  if (buffer_ == nullptr) return;
  if (fork_generation_ != detail::fork_generation()) {  // a copy in a forked child: the leases are the parent's
    envs_.clear();
    return;
  }
  for (const uint64_t e : envs_) detail::release_lease(detail::env_lease_words(buffer_->segment().env_control(e)), lease_word_);
  envs_.clear();
}

uint64_t Writer::head(uint64_t env_id) const noexcept {
  assert(env_id < local_.size() && local_[env_id] != 0);
  return buffer_->segment().env_control(env_id).head.load(std::memory_order_relaxed);
}

// Refuses a Writer copied into a forked child: its leases belong to the parent, which may still be pushing.
void Writer::check_process(const char* op) const {
  if (fork_generation_ != detail::fork_generation()) {
    detail::throw_forked("Writer", op, buffer_->name(), layout::owner_pid(lease_word_));
  }
}

SHMREPLAY_ALWAYS_INLINE uint32_t Writer::local_of(uint64_t env_id, const char* op) const {
  if (env_id < local_.size() && local_[static_cast<std::size_t>(env_id)] != 0) [[likely]] {
    return local_[static_cast<std::size_t>(env_id)] - 1;
  }
  throw_not_leased(env_id, op);
}

// Cold: env_id is out of range, or in range and not leased by this Writer.
void Writer::throw_not_leased(uint64_t env_id, const char* op) const {
  detail::check_env_id(buffer_->segment(), env_id, op);
  throw Error(Errc::not_leased,
              fmt::format("cannot {} env {} of '{}': this Writer does not lease it (it leases {} env{}: {}{})", op,
                          env_id, buffer_->name(), envs_.size(), envs_.size() == 1 ? "" : "s",
                          fmt::join(envs_.begin(),
                                    envs_.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(envs_.size(), 8)),
                                    ","),
                          envs_.size() > 8 ? ",..." : ""));
}

// Claims the next step of leased env `local` (detail::claim_step: the seqlock's "write begins").
SHMREPLAY_ALWAYS_INLINE uint64_t Writer::claim(uint32_t local) noexcept {
  return detail::claim_step(*control_[local], *global_);
}

// Publishes `step` (detail::publish_step: "write ends") and advances the env's slot cursor.
SHMREPLAY_ALWAYS_INLINE void Writer::publish(uint32_t local, uint64_t step, uint64_t now_ns) noexcept {
  if (++next_slot_[local] == buffer_->capacity()) next_slot_[local] = 0;  // the slot of step + 1
  detail::publish_step(*control_[local], step, now_ns);
}

bool Writer::stage_episode(uint64_t env, uint64_t step) noexcept {
  // The flags are read from the step as stored (just written, so in cache), never from the caller's arrays again:
  // another thread may change those after the copy, and the record must agree with the bytes samplers read.
  const uint64_t slot = env * buffer_->capacity() + step % buffer_->capacity();
  const detail::StepFlags flags = detail::read_step_flags(
      *roles_, [&](std::size_t f) -> const std::byte* { return field_base_[f] + slot * field_bytes_[f]; });
  return detail::stage_step(buffer_->segment(), env, step, flags);
}

void Writer::notify() noexcept { detail::notify_waiters(*global_); }

// Refuses priorities that do not fit the call or the buffer (before anything is written).
void Writer::check_priorities(std::size_t count, std::span<const float> priorities) const {
  if (!buffer_->has_priorities()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot push priorities to '{}': it was created without priorities (create it with a "
                            "priority exponent)",
                            buffer_->name()));
  }
  if (priorities.size() != count) {
    throw Error(Errc::size_mismatch, fmt::format("cannot push to '{}': {} priorities given for {} env{}",
                                                 buffer_->name(), priorities.size(), count, count == 1 ? "" : "s"));
  }
  const double alpha = buffer_->priority_exponent();
  for (std::size_t i = 0; i < count; ++i) {
    if (!detail::priority_fits(priorities[i], alpha)) {
      throw Error(Errc::invalid_argument, fmt::format("cannot push to '{}': priority {} (position {}) {}",
                                                      buffer_->name(), priorities[i], i,
                                                      detail::priority_misfit(priorities[i], alpha)));
    }
  }
}

// The caller's priorities copied into priorities_ (its capacity is the leased envs: no allocation for a push that
// can succeed), then checked: the push uses the copy, so a value another thread changes after the check is never
// stored. Returns the copy.
const float* Writer::copy_priorities(std::size_t count, std::span<const float> priorities) {
  priorities_.assign(priorities.begin(), priorities.end());
  check_priorities(count, priorities_);
  return priorities_.data();
}

// The writer half of the priority protocol for a claimed step: its leaf and the walk, before the head store.
// A negative priority means the running maximum. The priority was checked (priority_fits) by the caller.
void Writer::set_priority(uint64_t env, uint64_t step, double priority) noexcept {
  if (!buffer_->has_priorities()) return;
  layout::GlobalControl& g = buffer_->segment().global_control();
  if (priority < 0) {
    priority = detail::max_priority(g.max_priority);
  } else {
    detail::raise_max_priority(g.max_priority, priority);
  }
  detail::set_new_priority({buffer_->segment().priority_tree(env), buffer_->priority_leaves(), buffer_->capacity()}, step,
                           detail::priority_weight(priority, buffer_->priority_exponent()));
}

template <class Id>
void Writer::push_impl(std::span<const Id> env_ids, std::span<const FieldBytes> fields, const float* priorities) {
  const std::size_t n = env_ids.size();
  const std::size_t num_fields = field_bytes_.size();
  // Validate everything before writing anything.
  check_process("push to");
  if (fields.size() != num_fields) {
    throw Error(Errc::size_mismatch, fmt::format("cannot push to '{}': {} field arrays given, the schema has {} ({})",
                                                 buffer_->name(), fields.size(), num_fields,
                                                 buffer_->schema().to_string()));
  }
  for (std::size_t f = 0; f < num_fields; ++f) {
    const uint64_t expected = field_bytes_[f] * n;
    if (fields[f].bytes != expected || (fields[f].data == nullptr && expected != 0)) {
      const Field& fd = buffer_->schema()[f];
      throw Error(Errc::size_mismatch,
                  fmt::format("cannot push to '{}': field '{}' ({}) has {} bytes{}, expected {} = {} env{} x {} "
                              "bytes",
                              buffer_->name(), fd.name, fd.to_string(), fields[f].bytes,
                              fields[f].data == nullptr ? " at a null pointer" : "", expected, n,
                              n == 1 ? "" : "s", field_bytes_[f]));
    }
  }
  const uint64_t call = ++calls_;
  for (std::size_t i = 0; i < n; ++i) {
    // A negative int32 id becomes a huge uint64 and is reported as out of range (printed as negative).
    const uint32_t l = local_of(static_cast<uint64_t>(static_cast<int64_t>(env_ids[i])), "push to");
    // From here on the push uses l (and envs_[l]), never env_ids[i] again: the caller's array may change.
    if (seen_[l] == call) {
      std::size_t first = 0;
      while (locals_[first] != l) ++first;
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot push to '{}': env {} is listed twice in one push (positions {} and {}); a "
                              "push writes one step per env",
                              buffer_->name(), envs_[l], first, i));
    }
    seen_[l] = call;
    locals_[i] = l;  // i < envs_.size(): the envs so far are distinct and leased
    if (reserved_[l]) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot push to env {} of '{}': it has a reserved step that is not committed yet",
                              envs_[l], buffer_->name()));
    }
  }
  if (options_.wait_for_rate_limit) {
    admit_envs_.clear();
    for (std::size_t i = 0; i < n; ++i) admit_envs_.push_back(control_[locals_[i]]);
    wait_for_rate_limit("push to");
  }
  const uint64_t now = detail::coarse_realtime_ns();
  for (std::size_t i = 0; i < n; ++i) {
    write_step(locals_[i], envs_[locals_[i]], fields, i, priorities ? priorities[i] : -1.0, now);
  }
  notify();
}

// Claims, fills from row `row` of `fields`, and publishes the next step of leased env `env` (local index `l`).
SHMREPLAY_ALWAYS_INLINE void Writer::write_step(uint32_t l, uint64_t env, std::span<const FieldBytes> fields,
                                                 std::size_t row, double priority, uint64_t now) noexcept {
  const uint64_t step = claim(l);
  assert(next_slot_[l] == step % buffer_->capacity());
  const uint64_t slot = env * buffer_->capacity() + next_slot_[l];  // step % cap, without a division
  for (std::size_t f = 0; f < field_bytes_.size(); ++f) {
    const uint64_t b = field_bytes_[f];
    std::byte* dst = field_base_[f] + slot * b;
    detail::copy_bytes(dst, static_cast<const std::byte*>(fields[f].data) + row * b, b);
    // The cache lines of the env's next slot (at the ring's end, lines of the next env or field: harmless), asked
    // for writing now, so that they are on their way by the next push to the env. Without this, the next
    // claim's locked instruction waits for the misses of this step's stores, and the next step's stores miss in
    // turn: shmreplay_bench_push_cost measured 1.7-2.1x memcpy's time per small step without it, 1.1-1.5x with
    // (docs/benchmarks.md, "Push cost"). A prefetch is not ordered with locked instructions: nothing waits for it.
    // (Addresses as integers: past the last slot they point past the mapping, which a prefetch never faults on.)
    const uintptr_t next = reinterpret_cast<uintptr_t>(dst) + b;
    __builtin_prefetch(reinterpret_cast<const void*>(next), 1, 3);
    __builtin_prefetch(reinterpret_cast<const void*>(next + b - 1), 1, 3);
  }
  const bool record_due = roles_ && stage_episode(env, step);
  if (buffer_->has_priorities()) set_priority(env, step, priority);  // (no call per step without)
  publish(l, step, now);
  if (record_due) detail::emit_record(buffer_->segment(), env, step + 1);
}

void Writer::push(std::span<const int32_t> env_ids, std::span<const FieldBytes> fields) {
  push_impl(env_ids, fields, nullptr);
}

void Writer::push(std::span<const uint64_t> env_ids, std::span<const FieldBytes> fields) {
  push_impl(env_ids, fields, nullptr);
}

void Writer::push(std::span<const int32_t> env_ids, std::span<const FieldBytes> fields,
                  std::span<const float> priorities) {
  push_impl(env_ids, fields, copy_priorities(env_ids.size(), priorities));
}

void Writer::push(std::span<const uint64_t> env_ids, std::span<const FieldBytes> fields,
                  std::span<const float> priorities) {
  push_impl(env_ids, fields, copy_priorities(env_ids.size(), priorities));
}

void Writer::push_one(uint64_t env_id, std::span<const FieldBytes> fields) {
  // The direct path checks what one step needs (a leased env without an open reservation, every field's exact
  // size at a non-null pointer) and writes it. Anything else takes the general path, which validates the same
  // before writing anything and throws the precise error.
  const uint32_t l1 = env_id < local_.size() ? local_[static_cast<std::size_t>(env_id)] : 0;
  bool direct = l1 != 0 && !reserved_[l1 - 1] && fields.size() == field_bytes_.size() &&
                fork_generation_ == detail::fork_generation() && !options_.wait_for_rate_limit;
  for (std::size_t f = 0; direct && f < fields.size(); ++f) {
    direct = fields[f].data != nullptr && fields[f].bytes == field_bytes_[f];
  }
  if (!direct) {
    const uint64_t ids[1] = {env_id};
    push(std::span<const uint64_t>(ids, 1), fields);
    return;
  }
  write_step(l1 - 1, env_id, fields, 0, -1.0, detail::coarse_realtime_ns());
  notify();
}

StepSlot Writer::reserve(uint64_t env_id) {
  check_process("reserve a step of");
  const uint32_t l = local_of(env_id, "reserve a step of");
  if (reserved_[l]) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot reserve a step of env {} of '{}': step {} is reserved and not committed yet",
                            env_id, buffer_->name(), head(env_id)));
  }
  if (options_.wait_for_rate_limit) {
    admit_envs_.assign(1, control_[l]);
    wait_for_rate_limit("reserve a step of");
  }
  const uint64_t step = claim(l);
  reserved_[l] = 1;
  return StepSlot(this, env_id, step, l);
}

// ---------------------------------------------------------------------------------------------------------------
// Waiting for the rate limiter (the writer half of detail/protocol/rate_limit.hpp; the learner half is in
// Sampler::wait_for_rate_limit)

namespace {

// What the learner is doing, for the message of a writer that gave up.
std::string learner_state_text(const layout::GlobalControl& g) {
  const uint64_t lease = g.learner_lease.load(std::memory_order_relaxed);
  if (lease == 0) return "no learner is attached";
  const std::string who = fmt::format("the learner (pid {})", layout::owner_pid(lease));
  if (!detail::lease_holder_alive(lease)) return who + " is dead";
  const uint64_t last = g.last_sample_ns.load(std::memory_order_relaxed);
  const uint64_t now = detail::realtime_ns();
  std::string text = last == 0 ? who + " is alive and has not sampled yet"
                               : fmt::format("{} is alive and last sampled {:.1f} s ago", who,
                                             static_cast<double>(now > last ? now - last : 0) / 1e9);
  if (const uint64_t rows = g.learner_waiting_rows.load(std::memory_order_relaxed); rows != 0) {
    text += fmt::format(", and is itself waiting for the limiter to admit {} rows", rows);
  }
  return text;
}

}  // namespace

void Writer::wait_for_rate_limit(const char* op) {
  if (admit_envs_.empty()) return;  // a push of no steps inserts nothing
  layout::GlobalControl& g = buffer_->segment().global_control();
  auto settings = detail::load_rate_limit(g);
  if (!settings) return;
  detail::RateLimitVerdict verdict = detail::try_admit(buffer_->segment(), *settings, admit_envs_);
  if (verdict.allowed()) return;
  g.writers_limited.fetch_add(1, std::memory_order_relaxed);
  const auto deadline = deadline_after_ms(options_.rate_limit_timeout_ms);
  bool admitted = false;
  {
    // Counted as waiting (info, the learner's messages) while this call sleeps, through the first env of the push.
    // An interrupt (InterruptCheck, between slices) leaves by exception with nothing admitted: try_admit returns
    // only "admitted" (then ready() is true and no check follows) or "held back" (nothing reserved).
    const detail::WaitingMark mark(*admit_envs_.front(), detail::realtime_ns());
    admitted = detail::sleep_until(
        detail::writer_wake(g), deadline,
        [&] {
          settings = detail::load_rate_limit(g);
          if (!settings) return true;  // the limiter was removed meanwhile
          verdict = detail::try_admit(buffer_->segment(), *settings, admit_envs_);
          return verdict.allowed();
        });
  }
  if (admitted) return;
  g.writer_timeouts.fetch_add(1, std::memory_order_relaxed);
  const RateLimit& limit = settings->limit;
  const uint64_t k = admit_envs_.size();
  std::string why = fmt::format(
      "the error (inserts x samples_per_insert - samples) is {:g}, and {} more step{} would take it above max_diff "
      "{:g} ({})",
      verdict.error, k, k == 1 ? "" : "s", limit.max_diff, limit.to_string());
  const uint64_t waiting_rows = g.learner_waiting_rows.load(std::memory_order_relaxed);
  if (waiting_rows != 0 && static_cast<double>(waiting_rows) + static_cast<double>(k) * limit.samples_per_insert >
                               limit.max_diff - limit.min_diff) {
    why += fmt::format("; a batch of {} rows and a push of {} steps can never both pass: the error buffer must be at "
                       "least {:g}",
                       waiting_rows, k,
                       (static_cast<double>(waiting_rows) + static_cast<double>(k) * limit.samples_per_insert) / 2);
  }
  throw Error(Errc::rate_limited,
              fmt::format("cannot {} '{}': the rate limiter held this push of {} step{} back for {} ms (the writer's "
                          "timeout): {}; {}. Nothing was written. To go on without waiting, set the writer's "
                          "wait_for_rate_limit to false",
                          op, buffer_->name(), k, k == 1 ? "" : "s", options_.rate_limit_timeout_ms, why,
                          learner_state_text(g)));
}

}  // namespace shmreplay
