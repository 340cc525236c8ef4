// Reading and repairing one env's control block, shared by the Writer, the Sampler and the Inspector, so that
// every role computes the views, and undoes a dead learner's update lock, the same way (docs/design.md,
// "Concurrency protocol").
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "shmreplay/layout.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay::detail {

/// Steps [lo, hi) of one env's view.
struct StepRange {
  uint64_t lo;
  uint64_t hi;
};

/// The env's `view` from one acquire load of head (pairs with the writer's release store of head: every step
/// below it is fully written) and a later load of claimed. A slot that is being reclaimed (claimed = head + 1)
/// is not part of the view.
inline StepRange view_range(const layout::EnvControl& c, View view, uint64_t capacity) noexcept {
  const uint64_t head = c.head.load(std::memory_order_acquire);
  const uint64_t claimed = c.claimed.load(std::memory_order_relaxed) & ~layout::kUpdateLockBit;
  uint64_t lo = claimed > capacity ? claimed - capacity : 0;  // the oldest step whose slot is not being reclaimed
  if (view == View::online) lo = std::max(lo, c.online_start.load(std::memory_order_relaxed));
  return {std::min(lo, head), head};
}

/// Undoes the update lock of a learner that died inside try_update(): makes update_seq even (ending its seqlock
/// section) and clears kUpdateLockBit. Safe to race with another process doing the same (both are CASes).
/// Precondition: the learner that held the lock is dead.
inline void release_dead_update_lock(layout::EnvControl& c) noexcept {
  uint64_t seq = c.update_seq.load(std::memory_order_relaxed);
  // release: pairs with the samplers' acquire load of update_seq before their copies.
  if (seq & 1) c.update_seq.compare_exchange_strong(seq, seq + 1, std::memory_order_release);
  uint64_t cur = c.claimed.load(std::memory_order_relaxed);
  // release: pairs with the writer's acquire load that waits for the bit to clear.
  while ((cur & layout::kUpdateLockBit) &&
         !c.claimed.compare_exchange_weak(cur, cur & ~layout::kUpdateLockBit, std::memory_order_release)) {
  }
}

}  // namespace shmreplay::detail
