#include "shmreplay/writer.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "detail/os/futex.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/env_state.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/lease.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {
namespace {

using layout::EnvControl;
using layout::kUpdateLockBit;

detail::LeaseWords env_lease(EnvControl& c) noexcept {
  return {c.lease, c.owner_start_ticks, c.lease_since_ns, c.lease_takeovers};
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Waits while the learner holds `c`'s update lock (kUpdateLockBit in `claimed`) and returns the word without the
// bit. The learner holds it for one step's copy; if its process dies holding it, this breaks the lock, so a
// writer can never hang on a dead learner.
uint64_t wait_update_unlocked(EnvControl& c, layout::GlobalControl& g) noexcept {
  auto last_check = std::chrono::steady_clock::now();
  for (unsigned spins = 0;; ++spins) {
    // acquire: pairs with the learner's release store that clears the bit, so its update's bytes
    // happen-before the bytes we are about to write into a slot.
    const uint64_t cur = c.claimed.load(std::memory_order_acquire);
    if ((cur & kUpdateLockBit) == 0) return cur;
    if (spins < 64) {
      cpu_relax();
      continue;
    }
    ::sched_yield();
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check < std::chrono::milliseconds(1)) continue;
    last_check = now;
    const uint64_t learner = g.learner_lease.load(std::memory_order_relaxed);
    if (learner != 0 && detail::lease_holder_alive(learner)) continue;
    detail::release_dead_update_lock(c);  // the learner died inside try_update()
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// StepSlot

StepSlot::StepSlot(StepSlot&& other) noexcept
    : writer_(std::exchange(other.writer_, nullptr)), env_(other.env_), step_(other.step_), local_(other.local_) {}

StepSlot::~StepSlot() {
  // Abandoned: the claim stays raised (claimed = head + 1), which is a state the next push handles.
  if (writer_ != nullptr) writer_->reserved_[local_] = 0;
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
  const bool record_due = writer_->roles_ && writer_->stage_episode(env_, step_, {}, 0);
  writer_->publish(local_, step_, detail::coarse_realtime_ns());
  if (record_due) detail::emit_record(*writer_->buffer_, env_, step_ + 1);
  writer_->reserved_[local_] = 0;
  writer_->notify();
  writer_ = nullptr;
}

// ---------------------------------------------------------------------------------------------------------------
// Writer

Writer::Writer(Buffer& buffer, std::span<const uint64_t> env_ids) : buffer_(&buffer) {
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
    if (e >= num_envs) {
      throw Error(Errc::env_out_of_range,
                  fmt::format("cannot lease env {} of '{}': env ids run from 0 to {} ({} envs)", e, name,
                              num_envs - 1, num_envs));
    }
    if (local_[e] != 0) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot lease envs of '{}': env {} is listed twice (positions {} and {})", name, e,
                              local_[e] - 1, i));
    }
    local_[e] = static_cast<uint32_t>(i + 1);
  }
  lease_word_ = detail::self_lease_word();
  fork_generation_ = detail::fork_generation();
  envs_.reserve(env_ids.size());
  for (const uint64_t e : env_ids) {
    const detail::LeaseResult r = detail::try_take_lease(env_lease(buffer.env_control(e)), lease_word_);
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
  reserved_.assign(envs_.size(), 0);
  for (const uint64_t e : envs_) {
    control_.push_back(&buffer.env_control(e));
    // Only the lease holder moves head, so from here on the cursor follows it (advanced in publish).
    next_slot_.push_back(control_.back()->head.load(std::memory_order_relaxed) % buffer.capacity());
  }
  for (std::size_t f = 0; f < buffer.schema().size(); ++f) {
    field_base_.push_back(buffer.field_data(f));
    field_bytes_.push_back(buffer.schema()[f].bytes());
  }
  if (buffer.has_episodes()) {
    roles_ = std::make_unique<detail::EpisodeRoles>(buffer);
    for (const uint64_t e : envs_) detail::recover_env(buffer, e);
  }
}

Writer Writer::range(Buffer& buffer, uint64_t first, uint64_t count) {
  std::vector<uint64_t> ids(static_cast<std::size_t>(count));
  for (uint64_t i = 0; i < count; ++i) ids[static_cast<std::size_t>(i)] = first + i;
  return Writer(buffer, ids);
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
      calls_(other.calls_),
      lease_word_(other.lease_word_),
      fork_generation_(other.fork_generation_),
      takeovers_(other.takeovers_),
      roles_(std::move(other.roles_)) {
  other.envs_.clear();
}

Writer::~Writer() { release_all(); }

void Writer::release_all() noexcept {
  if (buffer_ == nullptr) return;
  if (fork_generation_ != detail::fork_generation()) {  // a copy in a forked child: the leases are the parent's
    envs_.clear();
    return;
  }
  for (const uint64_t e : envs_) detail::release_lease(env_lease(buffer_->env_control(e)), lease_word_);
  envs_.clear();
}

uint64_t Writer::head(uint64_t env_id) const noexcept {
  assert(env_id < local_.size() && local_[env_id] != 0);
  return buffer_->env_control(env_id).head.load(std::memory_order_relaxed);
}

// Refuses a Writer copied into a forked child: its leases belong to the parent, which may still be pushing.
void Writer::check_process(const char* op) const {
  if (fork_generation_ != detail::fork_generation()) {
    detail::throw_forked("Writer", op, buffer_->name(), layout::owner_pid(lease_word_));
  }
}

uint32_t Writer::local_of(uint64_t env_id, const char* op) const {
  const uint64_t num_envs = buffer_->num_envs();
  if (env_id >= num_envs) {
    throw Error(Errc::env_out_of_range, fmt::format("cannot {} env {} of '{}': env ids run from 0 to {}", op,
                                                    static_cast<int64_t>(env_id) < 0
                                                        ? std::to_string(static_cast<int64_t>(env_id))
                                                        : std::to_string(env_id),
                                                    buffer_->name(), num_envs - 1));
  }
  const uint32_t l = local_[static_cast<std::size_t>(env_id)];
  if (l == 0) {
    throw Error(Errc::not_leased,
                fmt::format("cannot {} env {} of '{}': this Writer does not lease it (it leases {} env{}: {}{})", op,
                            env_id, buffer_->name(), envs_.size(), envs_.size() == 1 ? "" : "s",
                            fmt::join(envs_.begin(), envs_.begin() + static_cast<std::ptrdiff_t>(
                                                                         std::min<std::size_t>(envs_.size(), 8)),
                                      ","),
                            envs_.size() > 8 ? ",..." : ""));
  }
  return l - 1;
}

// Raises the env's claim to head + 1 (the seqlock's "write begins") and returns the step being written.
uint64_t Writer::claim(uint32_t local) noexcept {
  EnvControl& c = *control_[local];
  const uint64_t step = c.head.load(std::memory_order_relaxed);  // only this writer stores head
  uint64_t cur = c.claimed.load(std::memory_order_relaxed);
  // After an abandoned reservation or a takeover of a writer that died mid-write, the claim is already raised.
  // The learner's update lock never covers the slot being claimed (try_update only rewrites steps
  // >= claimed - capacity), so with the bit set we only have to wait when the claim must still move.
  while ((cur & ~kUpdateLockBit) != step + 1) {
    if (cur & kUpdateLockBit) {
      cur = wait_update_unlocked(c, buffer_->global_control());
      continue;
    }
    // acquire: pairs with the learner's release that last cleared the update lock, so its bytes precede ours.
    if (c.claimed.compare_exchange_weak(cur, step + 1, std::memory_order_acquire, std::memory_order_relaxed)) break;
  }
  // release fence: orders the raised claim before the slot's data stores; pairs with the samplers' acquire
  // fence between their copy and their re-read of `claimed`.
  std::atomic_thread_fence(std::memory_order_release);
  return step;
}

void Writer::publish(uint32_t local, uint64_t step, uint64_t now_ns) noexcept {
  EnvControl& c = *control_[local];
  if (++next_slot_[local] == buffer_->capacity()) next_slot_[local] = 0;  // the slot of step + 1
  // release: pairs with the samplers' acquire load of head; every byte of the step happens-before it.
  c.head.store(step + 1, std::memory_order_release);
  c.last_push_ns.store(now_ns, std::memory_order_relaxed);
}

bool Writer::stage_episode(uint64_t env, uint64_t step, std::span<const FieldBytes> fields,
                           std::size_t row) noexcept {
  const uint64_t slot = env * buffer_->capacity() + step % buffer_->capacity();
  const detail::StepFlags flags = detail::read_step_flags(*roles_, [&](std::size_t f) -> const std::byte* {
    if (fields.empty()) return field_base_[f] + slot * field_bytes_[f];  // reserve/commit: the filled slot
    return static_cast<const std::byte*>(fields[f].data) + row * field_bytes_[f];
  });
  return detail::stage_step(*buffer_, env, step, flags);
}

void Writer::notify() noexcept {
  layout::GlobalControl& g = buffer_->global_control();
  // seq_cst fence: orders the head stores above before the load of `waiters`; pairs with the learner's seq_cst
  // increment of `waiters` before it re-reads the heads in Sampler::wait(). Either we see its increment and wake
  // it, or it sees our heads: no lost wake-up.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g.waiters.load(std::memory_order_relaxed) != 0) {
    // release: pairs with the waiter's load of wake_seq before it sleeps (FUTEX_WAIT compares it).
    g.wake_seq.fetch_add(1, std::memory_order_release);
    detail::futex_wake_all(g.wake_seq);
  }
}

template <class Id>
void Writer::push_impl(std::span<const Id> env_ids, std::span<const FieldBytes> fields) {
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
    if (seen_[l] == call) {
      std::size_t first = 0;
      while (env_ids[first] != env_ids[i]) ++first;
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot push to '{}': env {} is listed twice in one push (positions {} and {}); a "
                              "push writes one step per env",
                              buffer_->name(), static_cast<int64_t>(env_ids[i]), first, i));
    }
    seen_[l] = call;
    if (reserved_[l]) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot push to env {} of '{}': it has a reserved step that is not committed yet",
                              static_cast<int64_t>(env_ids[i]), buffer_->name()));
    }
  }
  const uint64_t now = detail::coarse_realtime_ns();
  for (std::size_t i = 0; i < n; ++i) {
    const auto env = static_cast<uint64_t>(env_ids[i]);
    write_step(local_[static_cast<std::size_t>(env)] - 1, env, fields, i, now);
  }
  notify();
}

// Claims, fills from row `row` of `fields`, and publishes the next step of leased env `env` (local index `l`).
void Writer::write_step(uint32_t l, uint64_t env, std::span<const FieldBytes> fields, std::size_t row,
                        uint64_t now) noexcept {
  const uint64_t cap = buffer_->capacity();
  const uint64_t step = claim(l);
  assert(next_slot_[l] == step % cap);
  const uint64_t slot = env * cap + next_slot_[l];  // step % cap, without a division
  for (std::size_t f = 0; f < field_bytes_.size(); ++f) {
    const uint64_t b = field_bytes_[f];
    std::memcpy(field_base_[f] + slot * b, static_cast<const std::byte*>(fields[f].data) + row * b, b);
  }
  const bool record_due = roles_ && stage_episode(env, step, fields, row);
  publish(l, step, now);
  if (record_due) detail::emit_record(*buffer_, env, step + 1);
}

void Writer::push(std::span<const int32_t> env_ids, std::span<const FieldBytes> fields) {
  push_impl(env_ids, fields);
}

void Writer::push(std::span<const uint64_t> env_ids, std::span<const FieldBytes> fields) {
  push_impl(env_ids, fields);
}

void Writer::push_one(uint64_t env_id, std::span<const FieldBytes> fields) {
  // The direct path checks what one step needs (a leased env without an open reservation, every field's exact
  // size at a non-null pointer) and writes it. Anything else takes the general path, which validates the same
  // before writing anything and throws the precise error.
  const uint32_t l1 = env_id < local_.size() ? local_[static_cast<std::size_t>(env_id)] : 0;
  bool direct = l1 != 0 && !reserved_[l1 - 1] && fields.size() == field_bytes_.size() &&
                fork_generation_ == detail::fork_generation();
  for (std::size_t f = 0; direct && f < fields.size(); ++f) {
    direct = fields[f].data != nullptr && fields[f].bytes == field_bytes_[f];
  }
  if (!direct) {
    const uint64_t ids[1] = {env_id};
    push(std::span<const uint64_t>(ids, 1), fields);
    return;
  }
  write_step(l1 - 1, env_id, fields, 0, detail::coarse_realtime_ns());
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
  const uint64_t step = claim(l);
  reserved_[l] = 1;
  return StepSlot(this, env_id, step, l);
}

}  // namespace shmreplay
