#include "detail/protocol/seqlock.hpp"

#include <sched.h>

#include <chrono>
#include <cstring>

#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/lease.hpp"

namespace shmreplay::detail {
namespace {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

uint64_t wait_update_unlocked(layout::EnvControl& c, const Segment& segment) noexcept {
  auto last_check = std::chrono::steady_clock::now();
  for (unsigned spins = 0;; ++spins) {
    // acquire: pairs with the learner's release store in unlock_update (or release_dead_update_lock) that clears
    // the bit, so its update's bytes happen-before the bytes we are about to write into a slot.
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
    // The learner died inside try_update(): repaired under its slot's lease (learner_takeover.hpp).
    (void)repair_dead_updater(const_cast<Segment&>(segment), c);
  }
}

std::vector<uint64_t> record_field_offsets(const Schema& schema) {
  std::vector<uint64_t> offsets;
  offsets.reserve(schema.size());
  uint64_t at = 0;
  for (const Field& f : schema.fields()) {
    offsets.push_back(at);
    at += f.bytes();
  }
  return offsets;
}

CopyResult copy_records(const Segment& buffer, uint64_t env, uint64_t first, uint64_t count,
                        const StepCopier& copy) noexcept {
  const layout::EnvControl& c = buffer.env_control(env);
  const uint64_t cap = buffer.capacity();
  // Loaded before the head, so that a load that ends before this point shows its new head, and one that ends
  // after it changes update_seq.
  const uint64_t u0 = read_begin(c);
  // An open section is a live learner's (copy again later), or one a dead learner left: its torn step and the older
  // ones leave the view at its repair, the others are copied as they are (learner_takeover.hpp).
  const uint64_t dead_bound = dead_section_bound(buffer, c, u0);
  if ((u0 & 1) != 0 && dead_bound == 0) return {CopyOutcome::raced, 0};
  // acquire: pairs with the writer's release store of head in publish_step: every step below it is written.
  const uint64_t head = c.head.load(std::memory_order_acquire);
  if (head < first + count) return {CopyOutcome::reset, 0};
  copy.copy(env, first, count);
  const ReadEnd end = read_end(c);
  if (end.update_seq != u0) return {CopyOutcome::raced, 0};
  return {CopyOutcome::ok, std::max(intact_from(end, cap), dead_bound)};
}

}  // namespace shmreplay::detail
