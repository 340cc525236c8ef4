// detail/protocol/consume.hpp: the consuming queue (layout 1.11; internal/queue_layout.hpp), both halves of each
// handshake. docs/design/consuming_queue.md has the argument.
//
//   writers   slot_consumed: whether the ring slot the next step of an env overwrites holds a delivered step (a
//             writer of a consuming queue waits until it does: it never overwrites a step not yet delivered).
//             The ticket and the count word of each new step are stored before its head store.
//   learners  try_claim: a CAS of a step's count word from free to pending (the learner slot's); commit: the store
//             of the slot's call word that delivers every row the call claimed; deliver: each claimed word to
//             delivered (the call's last stores), then raise_frontier and wake the blocked writers; give_back: a
//             call that cannot fill its batch returns its claims to free.
//   repair    repair_dead_claims: for the process that holds a dead learner's slot lease now (its successor, or a
//             repairer that took the lease for the moment of the repair): its pending claims become delivered when
//             the call word says the call committed, free otherwise.
// Who calls what: Writer (lib/writer_queue.cpp), Sampler's consuming calls (lib/sampler_consume.cpp), the learner
// takeover (learner_takeover.cpp). Safe across processes: each count word moves only by CAS (the claims) or by the
// store of its one owner (the pending slot's learner, or the writer after delivery).
#pragma once

#include <atomic>
#include <cstdint>

#include "detail/protocol/wake.hpp"
#include "shmreplay/internal/queue_layout.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// Writer side: whether the writer of `env` may write step `step` now: the step the ring slot holds (step -
/// capacity) was delivered, or the ring has not wrapped yet. `words` is the env's count words.
inline bool slot_consumed(const std::atomic<uint64_t>* words, uint64_t capacity, uint64_t step) noexcept {
  if (step < capacity) return true;
  // acquire: pairs with the learner's release store of the delivered word (deliver): the learner's copies of the
  // step happened before, so the writer's stores into the slot cannot reach them.
  const uint64_t w = words[step % capacity].load(std::memory_order_acquire);
  return w == layout::cap_word(step - capacity, 1);
}

/// Learner side: claims `step` (count word `word`) for learner slot `slot`: a CAS from free to pending. False
/// when the step is not free (another learner's claim, delivered, or overwritten: no longer `step`'s word).
inline bool try_claim(std::atomic<uint64_t>& word, uint64_t step, uint64_t slot) noexcept {
  uint64_t free = layout::cap_word(step, 0);
  // acq_rel: acquire pairs with the writer's release store of head (via the caller's snapshot) and with a
  // give_back's release store of the free word; release orders the caller's call word (claiming) before it, so a
  // successor that finds the claim finds the call word that covers it.
  return word.compare_exchange_strong(free, layout::cap_word(step, layout::queue_pending(slot)),
                                      std::memory_order_acq_rel, std::memory_order_relaxed);
}

/// Learner side: the call word while a call of slot `q` claims: its committed count with the claiming bit.
inline void begin_claims(layout::QueueLearner& q) noexcept {
  const uint64_t calls = q.call.load(std::memory_order_relaxed) >> 1;  // only the slot's learner stores it
  q.call.store((calls << 1) | layout::kQueueClaiming, std::memory_order_relaxed);
}

/// Learner side: delivers every claim of the call (the one store that makes them delivered) and adds its rows.
inline void commit(layout::QueueLearner& q, uint64_t rows) noexcept {
  const uint64_t calls = q.call.load(std::memory_order_relaxed) >> 1;
  // release: the claims precede it; a successor reads it with acquire (repair_dead_claims).
  q.call.store((calls + 1) << 1, std::memory_order_release);
  q.delivered.fetch_add(rows, std::memory_order_relaxed);
}

/// Learner side: a call that claims nothing more ends without a commit (its claims were given back).
inline void end_claims(layout::QueueLearner& q) noexcept {
  const uint64_t calls = q.call.load(std::memory_order_relaxed) >> 1;
  q.call.store(calls << 1, std::memory_order_release);
}

/// Learner side, after commit: marks a claimed step delivered (only the claimer stores a pending word).
inline void deliver(std::atomic<uint64_t>& word, uint64_t step) noexcept {
  // release: pairs with the writer's acquire in slot_consumed: the learner's copies of the step precede it.
  word.store(layout::cap_word(step, 1), std::memory_order_release);
}

/// Learner side, without a commit: returns a claim to free (only the claimer stores a pending word).
inline void give_back(std::atomic<uint64_t>& word, uint64_t step) noexcept {
  // release: pairs with the next claimer's acquire CAS.
  word.store(layout::cap_word(step, 0), std::memory_order_release);
}

/// Raises env `env`'s frontier past the delivered steps from it, up to `head`. Any process; a CAS that only raises.
void raise_frontier(Segment& seg, uint64_t env, uint64_t head) noexcept;

/// The blocked writers' sleeping place (a promise word: a writer killed in its sleep is not replaced).
inline PromiseWord queue_writer_wake(layout::QueueControl& q) noexcept {
  return {q.writer_wake, q.writer_recheck_by_ns};
}

/// For the holder of learner slot `slot`'s lease, taken over from a dead holder: finishes its last call. Each word
/// still pending for the slot becomes delivered when its call word says the call committed, free otherwise; the
/// call word loses its claiming bit. Counts the claims given back in the slot's `returned`. O(num_envs x capacity)
/// loads (a takeover is rare); then wakes the blocked writers.
void repair_dead_claims(Segment& seg, uint64_t slot) noexcept;

/// For a process that finds a claim of learner slot `slot` whose holder is dead (a blocked writer, a consuming
/// learner): repairs it under the slot's lease, taken for the moment of the repair (repair_dead_learner, as
/// repair_dead_updater does for an update lock). Returns whether it
/// repaired.
bool repair_dead_claimer(Segment& seg, uint64_t slot) noexcept;

}  // namespace shmreplay::detail
