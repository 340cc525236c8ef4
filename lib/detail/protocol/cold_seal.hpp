// detail/protocol/cold_seal.hpp: the cold seqlock (layout 1.11; internal/cold_layout.hpp, docs/design/cold_tier.md),
// both sides. Each env's cold ring has one writer, the env's lease holder, which seals step t (copies it from its
// hot ring slot into cold record t % cold_capacity) before its claim of step t + capacity reclaims that slot:
//
//   writer   cold_claim(t): claimed = t + 1, release fence; the record's stores; cold_publish(t): head = t + 1
//   reader   cold_sealed(): head (acquire); the copy of records of steps below it; end_copies() (the step
//            seqlock's acquire fence); cold_read_end(): claimed; cold_copy_intact(claimed, first)
//
// The same shape as the step seqlock (seqlock.hpp): a copy of steps first, first + 1, ... below the sealed head is
// whole when no seal of first + cold_capacity, which reuses first's record, had begun by the end of the copy.
// Every function is O(1), never blocks, never allocates. Writer side: the env's lease holder only. Reader side:
// any process, on a read-only mapping too.
#pragma once

#include <atomic>
#include <cstdint>

#include "shmreplay/internal/cold_layout.hpp"

namespace shmreplay::detail {

/// Whether cold step t still has to be sealed: head <= t (a predecessor killed after its seal of t did it).
inline bool cold_due(const layout::ColdEnv& c, uint64_t t) noexcept {
  return c.head.load(std::memory_order_relaxed) <= t;  // only this writer stores head
}

/// "Seal begins": claimed = t + 1, ordered before the record's stores.
inline void cold_claim(layout::ColdEnv& c, uint64_t t) noexcept {
  c.claimed.store(t + 1, std::memory_order_relaxed);
  // release fence: orders the raised cold claim before the record's stores; pairs with the readers' acquire fence
  // (end_copies) between their copy of a record and their load of the cold claim (cold_read_end).
  std::atomic_thread_fence(std::memory_order_release);
}

/// "Seal ends": head = t + 1.
inline void cold_publish(layout::ColdEnv& c, uint64_t t) noexcept {
  // release: pairs with the readers' acquire load in cold_sealed: the record's bytes happen-before it.
  c.head.store(t + 1, std::memory_order_release);
}

/// Cold steps sealed: records of steps below it were written whole before (a reader copies only those).
inline uint64_t cold_sealed(const layout::ColdEnv& c) noexcept {
  // acquire: pairs with the writer's release store in cold_publish.
  return c.head.load(std::memory_order_acquire);
}

/// After a copy and end_copies(): the cold claim, which only grows.
inline uint64_t cold_read_end(const layout::ColdEnv& c) noexcept { return c.claimed.load(std::memory_order_relaxed); }

/// Whether a copy of cold steps first, first + 1, ... (below a sealed head the reader acquired) that ended with
/// cold claim `claimed` is whole: no seal of first + cold_capacity had begun.
inline bool cold_copy_intact(uint64_t claimed, uint64_t first, uint64_t cold_capacity) noexcept {
  return claimed <= first + cold_capacity;
}

/// The oldest cold step whose record no seal had begun to overwrite when `claimed` was read.
inline uint64_t cold_intact_from(uint64_t claimed, uint64_t cold_capacity) noexcept {
  return claimed > cold_capacity ? claimed - cold_capacity : 0;
}

}  // namespace shmreplay::detail
