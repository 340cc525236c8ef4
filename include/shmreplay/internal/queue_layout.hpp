// shmreplay/internal/queue_layout.hpp: the consuming-queue section (layout 1.11): the insertion tickets, the words
// writers blocked by a full ring sleep on, each learner slot's call word and counters, each env's consumption
// frontier and blocking counters, then one insertion ticket per ring slot, [num_envs][capacity].
// docs/design/consuming_queue.md has the protocol; detail/protocol/consume.hpp both halves of it.
//
// Present only in a buffer created with CreateOptions::consuming_queue (SegmentHeader::consuming_queue != 0), which
// also has the sample-caps section with a cap of 1 (internal/caps_layout.hpp): the queue's state of each stored
// step is its count word there. Segment-resident: fixed-width atomics only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/layout.hpp"

namespace shmreplay::layout {

// A consuming queue's count word (caps_layout.hpp's, with a cap of 1) is in one of three states for its step p:
//   cap_word(p, 0)                       free: published, not delivered, nobody claims it
//   cap_word(p, kQueuePending | slot)    claimed by learner slot `slot` in a call not yet finished
//   cap_word(p, 1)                       delivered
/// The count bits of a pending claim: this bit and the claiming learner slot (below kMaxLearners = 64).
inline constexpr uint64_t kQueuePending = 0x80;
constexpr uint64_t queue_pending(uint64_t slot) noexcept { return kQueuePending | slot; }
/// Whether a count word's count is a pending claim, and whose.
constexpr bool queue_is_pending(uint64_t word) noexcept { return (cap_word_count(word) & kQueuePending) != 0; }
constexpr uint64_t queue_pending_slot(uint64_t word) noexcept { return cap_word_count(word) & ~kQueuePending; }

/// QueueLearner::call: (calls committed << 1) | 1 while a call claims. A call's rows are delivered at the store
/// that raises the committed count (its commit); a successor of a dead learner reads the low bit to tell a call that
/// must give its claims back (1) from one whose claims were delivered (0).
inline constexpr uint64_t kQueueClaiming = 1;

/// The segment-wide words, two cache lines.
struct alignas(kCacheLineBytes) QueueControl {
  // -- cache line 0: the insertion order, one fetch_add per push call of a writer --
  std::atomic<uint64_t> tickets;  ///< the next insertion ticket; a push call takes one for all its steps
  uint64_t pad0[7];
  // -- cache line 1: writers blocked by a full ring (a promise word: detail/protocol/wake.hpp), totals --
  std::atomic<uint64_t> writer_wake;          ///< low 32 bits: the futex word blocked writers sleep on
  std::atomic<uint64_t> writer_recheck_by_ns;  ///< the latest re-check a blocked writer promised (CLOCK_MONOTONIC)
  std::atomic<uint64_t> writers_blocked;      ///< push calls that waited for a step to be consumed (every env's)
  std::atomic<uint64_t> writer_timeouts;      ///< ... that gave up at their timeout
  uint64_t pad1[4];
};

/// One learner slot's words, one cache line. `call` is the slot's learner's (its successor's after a death);
/// the counters are relaxed and informational.
struct alignas(kCacheLineBytes) QueueLearner {
  std::atomic<uint64_t> call;       ///< (calls committed << 1) | kQueueClaiming while a call claims
  std::atomic<uint64_t> delivered;  ///< rows this slot's calls delivered (the commit adds them)
  std::atomic<uint64_t> refused;    ///< claims refused: the step was taken meanwhile, or no longer free
  std::atomic<uint64_t> waits;      ///< calls that waited for steps (fewer free than their rows)
  std::atomic<uint64_t> returned;   ///< claims given back: a call that could not fill its batch, or a repair of a
                                    ///< dead learner of the slot
  uint64_t pad[3];
};

/// One env's words, one cache line. `frontier` is any process's (a hint raised by CAS); the rest its writer's.
struct alignas(kCacheLineBytes) QueueEnv {
  std::atomic<uint64_t> frontier;        ///< every step below it is delivered (a lower bound: it only grows)
  std::atomic<uint64_t> blocked_pushes;  ///< push calls of this env that waited for a step to be consumed
  std::atomic<uint64_t> blocked_ns;      ///< nanoseconds they waited, in total
  std::atomic<uint64_t> blocked_since_ns;  ///< CLOCK_REALTIME when the current wait began, 0 when not waiting
  std::atomic<uint64_t> timeouts;        ///< blocked pushes that gave up at their timeout
  uint64_t pad[3];
};

/// Where the section's parts lie, from its start.
constexpr uint64_t queue_learners_at() noexcept { return sizeof(QueueControl); }
constexpr uint64_t queue_envs_at(uint64_t max_learners) noexcept {
  return sizeof(QueueControl) + max_learners * sizeof(QueueLearner);
}
constexpr uint64_t queue_tickets_at(uint64_t max_learners, uint64_t num_envs) noexcept {
  return queue_envs_at(max_learners) + num_envs * sizeof(QueueEnv);
}

static_assert(sizeof(QueueControl) == 2 * kCacheLineBytes && offsetof(QueueControl, writer_wake) == kCacheLineBytes,
              "the tickets and the blocked writers' words each own a cache line");
static_assert(sizeof(QueueLearner) == kCacheLineBytes && sizeof(QueueEnv) == kCacheLineBytes,
              "a slot's words and an env's words are one cache line each");
static_assert(kMaxLearners <= kQueuePending && queue_pending(kMaxLearners - 1) <= 0xff &&
                  queue_pending_slot(cap_word(7, queue_pending(63))) == 63,
              "a pending claim's count bits hold the flag and any learner slot");

}  // namespace shmreplay::layout
