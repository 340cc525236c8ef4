// detail/protocol/learner_slots.hpp: the words of one learner slot (layout 1.7), wherever they lie. Slot 0's are the
// words a one-learner buffer has always had (GlobalControl lines 0-1, priority_walk, learner_waiting_*,
// slot0_waiters, EnvControl::online_start); slots 1 to max_learners - 1 are a layout::LearnerSlot each in the learner
// section, with their online starts after them. Every slot, slot 0 included, has a layout::LearnerStats in the learner
// statistics section (layout 1.8). docs/design/learners.md has the protocols that use them.
//
// Who calls it: the Sampler (its own slot), a checkpoint load (every slot), a takeover's repair (the slot taken),
// a writer waiting on an update lock (the lock holder's lease), the Inspector (every slot, read-only). Safe across
// processes: every word is an atomic; which process may store to which word is said where the word is used.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "detail/protocol/lease.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// One learner slot's words: writable (LearnerSlotWords, from a mutable Segment: the slot's learner, a load, a
/// takeover's repair) or read-only (LearnerSlotReadWords, from a const one: the Inspector, a waiting writer).
template <bool Writable>
struct SlotWordsOf {
  using Word = std::conditional_t<Writable, std::atomic<uint64_t>, const std::atomic<uint64_t>>;
  using Stats = std::conditional_t<Writable, layout::LearnerStats, const layout::LearnerStats>;
  using Policy = std::conditional_t<Writable, layout::PolicyLearner, const layout::PolicyLearner>;
  LeaseWordsOf<Word> lease;   ///< the slot's lease (taken by its Sampler, or a load)
  Word& rows_sampled;         ///< the slot's counters, written by its learner only
  Word& sample_calls;
  Word& retries;
  Word& online_resets;
  Word& steps_updated;
  Word& write_backs_applied;  ///< (1.11) rows Sampler::write_back rewrote, and refused
  Word& write_backs_refused;
  Word& priority_walk;        ///< the slot's tree walk in progress (priorities.hpp)
  Word& waiting_rows;         ///< rows its sample call waits for the limiter to admit; 0 when none
  Word& waiting_since_ns;     ///< when that wait began
  Word& waiters;              ///< the slot's sleepers on wake_seq (also counted in GlobalControl)
  Word* online_starts;        ///< env e's online start is online_starts[e * online_stride]
  uint64_t online_stride;
  Stats& stats;               ///< the slot's sample ages and limiter timeouts (layout 1.8), written by its learner
                              ///< only; informational
  Policy& policy;             ///< the slot's version ages of sampled rows (layout 1.11), likewise

  /// The slot's online start of env `env` (EnvControl::online_start for slot 0).
  Word& online_start(uint64_t env) const noexcept { return online_starts[env * online_stride]; }
  /// The same words, read-only.
  SlotWordsOf<false> read() const noexcept {
    return {{lease.lease, lease.start_ticks, lease.since_ns, lease.takeovers}, rows_sampled, sample_calls, retries,
            online_resets, steps_updated, write_backs_applied, write_backs_refused, priority_walk, waiting_rows,
            waiting_since_ns, waiters, online_starts,
            online_stride, stats, policy};
  }
};
using LearnerSlotWords = SlotWordsOf<true>;
using LearnerSlotReadWords = SlotWordsOf<false>;

/// The words of learner slot `slot` of `seg`: writable from a mutable Segment (which needs a writable mapping),
/// read-only from a const one. Precondition: slot < seg.max_learners().
template <class Seg>
inline SlotWordsOf<!std::is_const_v<Seg>> learner_slot(Seg& seg, uint64_t slot) noexcept {
  if (slot == 0) {
    // Slot 0's words are the one-learner buffer's: GlobalControl lines 0-2 and each EnvControl's online_start.
    auto& g = seg.global_control();
    auto& env0 = seg.env_control(0);
    return {{g.learner_lease, g.learner_start_ticks, g.learner_since_ns, g.learner_takeovers},
            g.rows_sampled, g.sample_calls, g.retries, g.online_resets, g.steps_updated, g.write_backs_applied,
            g.write_backs_refused,
            g.priority_walk, g.learner_waiting_rows, g.learner_waiting_since_ns, g.slot0_waiters,
            &env0.online_start, sizeof(layout::EnvControl) / sizeof(std::atomic<uint64_t>),
            *seg.learner_stats(0), seg.policy_learner(0)};
  }
  auto& s = *seg.learner_slot(slot);
  return {{s.lease, s.start_ticks, s.since_ns, s.takeovers},
          s.rows_sampled, s.sample_calls, s.retries, s.online_resets, s.steps_updated, s.write_backs_applied,
          s.write_backs_refused,
          s.priority_walk, s.waiting_rows, s.waiting_since_ns, s.waiters,
          seg.learner_online_starts(slot), 1, *seg.learner_stats(slot), seg.policy_learner(slot)};
}

/// Sets every word of a slot's statistics (layout 1.8) to zero: what a checkpoint load does, holding every slot's
/// lease (relaxed: informational words, published with the rest of the load by its lease releases).
inline void clear_learner_stats(layout::LearnerStats& stats) noexcept {
  stats.age_rows.store(0, std::memory_order_relaxed);
  stats.age_sum_steps.store(0, std::memory_order_relaxed);
  for (std::atomic<uint64_t>& bucket : stats.age_buckets) bucket.store(0, std::memory_order_relaxed);
  stats.limiter_timeouts.store(0, std::memory_order_relaxed);
}

static_assert(sizeof(layout::EnvControl) % sizeof(std::atomic<uint64_t>) == 0 &&
                  offsetof(layout::EnvControl, online_start) % sizeof(std::atomic<uint64_t>) == 0,
              "slot 0's online starts are every EnvControl's online_start word, a whole number of words apart");

}  // namespace shmreplay::detail
