// lib/writer_push.cpp: the Writer's push paths, the writer side of the step seqlock: push (a batch of envs, one
// step each), push_one (its direct path for one step), and reserve / StepSlot::commit (zero-copy: the caller
// fills the slot). Each validates everything before it writes anything, then claims, fills and publishes each step
// (detail::claim_step, publish_step), with the step's episode record and priority when the buffer has them, and
// wakes a waiting learner.
//
// Who calls it: the env worker, through its Writer (one thread at a time). The hot path of a push: no allocation,
// the claim, copy and publish inlined into the loop over the envs.
#include "shmreplay/writer.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "detail/always_inline.hpp"
#include "detail/copy_bytes.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/sequence_priorities.hpp"
#include "shmreplay/internal/caps_layout.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/protocol/cold_seal.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/storage/staged_kinds.hpp"
#include "detail/protocol/walk.hpp"
#include "detail/protocol/wake.hpp"
#include "shmreplay/error.hpp"

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
  if (writer_->staged_ && writer_->staged_->staged(index)) {
    // A field of a staged kind (a stacked field): filled in the Writer's staging area, stored at commit.
    return {writer_->staged_->staging(local_, index), static_cast<std::size_t>(bytes)};
  }
  const uint64_t cap = writer_->buffer_->capacity();
  return {writer_->field_base_[index] + (env_ * cap + step_ % cap) * bytes, static_cast<std::size_t>(bytes)};
}

void StepSlot::commit() {
  if (writer_ == nullptr) {
    throw Error(Errc::invalid_argument,
                fmt::format("step {} of env {} was already committed or abandoned", step_, env_));
  }
  writer_->check_process("commit a step of");
  if (writer_->policy_field_) {  // the step's version, read from the slot as filled
    writer_->locals_[0] = local_;  // position 0 of a "call" of one step
    writer_->admit_policy({}, 1, "commit a step of");
  }
  if (writer_->queue_tickets_ != nullptr) {  // the step's insertion ticket: its place in the queue is its commit's
    writer_->ticket_ = writer_->seg_->queue_control().tickets.fetch_add(1, std::memory_order_relaxed);
  }
  if (writer_->staged_) {  // the staged kinds' fields, from the staging area they were filled in
    writer_->staged_->store_staged(local_, env_, step_, writer_->step_ends_episode(env_, step_));
  }
  writer_->finish_step(local_, env_, step_, priority_, detail::coarse_realtime_ns());
  writer_->reserved_[local_] = 0;
  writer_->notify(&local_, 1);
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
// Writer: the push paths

SHMREPLAY_ALWAYS_INLINE uint32_t Writer::local_of(uint64_t env_id, const char* op) const {
  if (env_id < local_.size() && local_[static_cast<std::size_t>(env_id)] != 0) [[likely]] {
    return local_[static_cast<std::size_t>(env_id)] - 1;
  }
  throw_not_leased(env_id, op);
}

// Seals step head - capacity of leased env `local` into the env's cold tier (detail/protocol/cold_seal.hpp), before the
// claim of step head reclaims its slot: the union of the tiers stays contiguous. A chunk is one step in this slice.
void Writer::seal_cold(uint32_t local) noexcept {
  const uint64_t head = control_[local]->head.load(std::memory_order_relaxed);  // only this writer stores head
  if (head < capacity_) return;  // no slot is reclaimed yet
  const uint64_t t = head - capacity_;
  const uint64_t env = envs_[local];
  layout::ColdEnv& cold = seg_->cold_env(env);
  if (!detail::cold_due(cold, t)) return;  // a predecessor killed after its seal of t did it
  detail::cold_claim(cold, t);
  const uint64_t index = t % cold_capacity_;  // the step's index in each field's column
  const uint64_t slot = env * capacity_ + t % capacity_;
  const uint64_t next = t % capacity_ + 1 == capacity_ ? slot + 1 - capacity_ : slot + 1;  // step t + 1's slot
  for (const uint32_t f : plain_fields_) {  // every field is plain in a tiered buffer (create refuses the others)
    std::byte* to = seg_->cold_column(env, f) + index * field_bytes_[f];
    detail::copy_bytes(to, field_base_[f] + slot * field_bytes_[f], field_bytes_[f]);
    __builtin_prefetch(field_base_[f] + next * field_bytes_[f]);  // the next seal's step, written a lap ago
    __builtin_prefetch(to + field_bytes_[f], 1);                  // its value's place in the column
  }
  detail::cold_publish(cold, t);
}

// Claims the next step of leased env `local` (detail::claim_step: the seqlock's "write begins"), after sealing the
// step whose slot it reclaims with a cold tier.
SHMREPLAY_ALWAYS_INLINE uint64_t Writer::claim(uint32_t local) noexcept {
  if (cold_capacity_ != 0) [[unlikely]] seal_cold(local);
  return detail::claim_step(*control_[local], *seg_);
}

// Publishes `step` (detail::publish_step: "write ends") and advances the env's slot cursor.
SHMREPLAY_ALWAYS_INLINE void Writer::publish(uint32_t local, uint64_t step, uint64_t now_ns) noexcept {
  if (++next_slot_[local] == capacity_) next_slot_[local] = 0;  // the slot of step + 1
  detail::publish_step(*control_[local], step, now_ns);
}

// The one publish sequence of a claimed step whose fields are all stored (write_step's and StepSlot::commit's): its
// episode bookkeeping (before the head store), its priority, the head store, then the record of the episode it
// ended (after: detail/protocol/episodes.hpp).
SHMREPLAY_ALWAYS_INLINE void Writer::finish_step(uint32_t l, uint64_t env, uint64_t step, double priority,
                                                  uint64_t now_ns) noexcept {
  const bool record_due = roles_ && stage_episode(env, step);
  if (has_priorities_) set_priority(env, step, priority);  // (no call per step without)
  // The sample cap's count word (layout 1.11): step's tag, count 0; the head store's release publishes it with the
  // step (docs/design/sample_caps.md).
  if (cap_words_ != nullptr) {
    assert(next_slot_[l] == step % capacity_);
    cap_words_[env * capacity_ + next_slot_[l]].store(layout::cap_word(step, 0), std::memory_order_relaxed);
    // A consuming queue's insertion ticket of the step (its push call's), published with it likewise.
    if (queue_tickets_ != nullptr) queue_tickets_[env * capacity_ + next_slot_[l]].store(ticket_, std::memory_order_relaxed);
  }
  publish(l, step, now_ns);
  if (record_due) detail::emit_record(*seg_, env, step + 1);
}

bool Writer::step_ends_episode(uint64_t env, uint64_t step) const noexcept {
  // The step's own end flags (not its reward), from the ring slot as written, as stage_episode reads them; only the
  // frame ring's episodes rule asks.
  if (!roles_ || seg_->stack_continuity() != StackContinuity::episodes) return false;
  const uint64_t slot = env * capacity_ + step % capacity_;
  const int flags[3] = {roles_->done, roles_->terminated, roles_->truncated};
  for (int k = 0; k < 3; ++k) {
    const auto f = static_cast<std::size_t>(flags[k]);
    if (flags[k] >= 0 && detail::flag_set(field_base_[f] + slot * field_bytes_[f], roles_->flag_bytes[k])) return true;
  }
  return false;
}

bool Writer::stage_episode(uint64_t env, uint64_t step) noexcept {
  // The flags are read from the step as stored (just written, so in cache), never from the caller's arrays again:
  // another thread may change those after the copy, and the record must agree with the bytes samplers read.
  const uint64_t slot = env * capacity_ + step % capacity_;
  const detail::StepFlags flags = detail::read_step_flags(
      *roles_, [&](std::size_t f) -> const std::byte* { return field_base_[f] + slot * field_bytes_[f]; });
  return detail::stage_step(*seg_, env, step, flags);
}

SHMREPLAY_ALWAYS_INLINE void Writer::notify(const uint32_t* locals, std::size_t n) noexcept {
  detail::notify_waiters(*global_, !light_notify_);
  // After notify_waiters: its fence (or, registered, the sleeper's heavy fence) orders the head stores before the
  // load of the walk's sleepers too.
  if (walk_ != nullptr) [[unlikely]] wake_walkers(locals, n);
}

// A push call filled a chunk when one of its envs' heads is now a multiple of the chunk (each env got one step).
void Writer::wake_walkers(const uint32_t* locals, std::size_t n) noexcept {
  detail::walk_notify_filled(*walk_, [&] {
    for (std::size_t i = 0; i < n; ++i) {
      if (control_[locals[i]]->head.load(std::memory_order_relaxed) % walk_chunk_ == 0) return true;
    }
    return false;
  });
}

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
// A negative priority means none was given (CreateOptions::initial_priority). The priority was checked
// (priority_fits) by the caller.
void Writer::set_priority(uint64_t env, uint64_t step, double priority) noexcept {
  if (!has_priorities_) return;
  layout::GlobalControl& g = seg_->global_control();
  if (priority < 0) {  // none given: CreateOptions::initial_priority, a fixed one or the running maximum
    const std::optional<double> initial = seg_->initial_priority();
    priority = initial && !seg_->fresh_trees() ? *initial : detail::max_priority(g.max_priority);
  } else {
    detail::raise_max_priority(g.max_priority, priority);
  }
  detail::set_new_priority(detail::priority_tree_of(*seg_, env), step,
                           detail::priority_weight(priority, seg_->priority_exponent()));
  // Initial priority +infinity: the step is fresh (drawn before any step a prioritized draw has returned).
  if (seg_->fresh_trees()) detail::set_new_priority(detail::fresh_tree_of(*seg_, env), step, 1.0);
  // Sequence priorities: the windows that hold the step (starts step - L + 1 .. step), its own first.
  if (seg_->sequence_priority_length() != 0) {
    detail::refresh_windows(detail::sequence_trees_of(*seg_, env), step, step, step);
  }
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
  if (policy_field_) admit_policy(fields, n, "push to");
  if (options_.wait_for_rate_limit) {
    admit_envs_.clear();
    for (std::size_t i = 0; i < n; ++i) admit_envs_.push_back(control_[locals_[i]]);
    wait_for_rate_limit("push to");
  }
  if (queue_tickets_ != nullptr) admit_queue(n, "push to");
  const uint64_t now = detail::coarse_realtime_ns();
  for (std::size_t i = 0; i < n; ++i) {
    write_step(locals_[i], envs_[locals_[i]], fields, i, priorities ? priorities[i] : -1.0, now);
  }
  notify(locals_.data(), n);
}

// Claims, fills from row `row` of `fields`, and publishes the next step of leased env `env` (local index `l`).
SHMREPLAY_ALWAYS_INLINE void Writer::write_step(uint32_t l, uint64_t env, std::span<const FieldBytes> fields,
                                                 std::size_t row, double priority, uint64_t now) noexcept {
  const uint64_t step = claim(l);
  assert(next_slot_[l] == step % capacity_);
  const uint64_t slot = env * capacity_ + next_slot_[l];  // step % cap, without a division
  for (const uint32_t f : plain_fields_) {
    const uint64_t b = field_bytes_[f];
    std::byte* dst = field_base_[f] + slot * b;
    detail::copy_bytes(dst, static_cast<const std::byte*>(fields[f].data) + row * b, b);
    // The cache lines of the env's next slot (at the ring's end, lines of the next env or field: harmless), asked
    // for writing now, so that they are on their way by the next push to the env. Without this, the next
    // claim's locked instruction waits for the misses of this step's stores, and the next step's stores miss in
    // turn: shmreplay_bench_push_cost measured 1.7-2.1x memcpy's time per small step without it, 1.1-1.5x with
    // (docs/benchmarks/small_rows.md, "Push cost"). A prefetch is not ordered with locked instructions: nothing
    // waits for it.
    // (Addresses as integers: past the last slot they point past the mapping, which a prefetch never faults on.)
    const uintptr_t next = reinterpret_cast<uintptr_t>(dst) + b;
    __builtin_prefetch(reinterpret_cast<const void*>(next), 1, 3);
    __builtin_prefetch(reinterpret_cast<const void*>(next + b - 1), 1, 3);
  }
  if (staged_) [[unlikely]] {  // the other kinds' fields (a stacked field's frames: detail/storage/)
    staged_->store(l, env, step, step_ends_episode(env, step), [&](std::size_t f) {
      return static_cast<const std::byte*>(fields[f].data) + row * field_bytes_[f];
    });
  }
  finish_step(l, env, step, priority, now);
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
                fork_generation_ == detail::fork_generation_registered() && !options_.wait_for_rate_limit &&
                !policy_field_ && queue_tickets_ == nullptr;
  for (std::size_t f = 0; direct && f < fields.size(); ++f) {
    direct = fields[f].data != nullptr && fields[f].bytes == field_bytes_[f];
  }
  if (!direct) [[unlikely]] {
    const uint64_t ids[1] = {env_id};
    push(std::span<const uint64_t>(ids, 1), fields);
    return;
  }
  write_step(l1 - 1, env_id, fields, 0, -1.0, detail::coarse_realtime_ns());
  const uint32_t local = l1 - 1;
  notify(&local, 1);
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
  if (queue_tickets_ != nullptr) {
    locals_[0] = l;  // position 0 of a "call" of one step
    admit_queue(1, "reserve a step of");
  }
  // Where the staged kinds' fields are filled until the commit stores them (before the claim: it may throw
  // bad_alloc).
  if (staged_) staged_->prepare_staging(l);
  const uint64_t step = claim(l);
  reserved_[l] = 1;
  return StepSlot(this, env_id, step, l);
}

}  // namespace shmreplay
