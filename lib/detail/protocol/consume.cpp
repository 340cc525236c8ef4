// detail/protocol/consume.cpp: see consume.hpp.
#include "detail/protocol/consume.hpp"

#include <algorithm>
#include <atomic>

#include "detail/os/process.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/lease.hpp"

namespace shmreplay::detail {

void raise_frontier(Segment& seg, uint64_t env, uint64_t head) noexcept {
  std::atomic<uint64_t>& frontier = seg.queue_env(env).frontier;
  const std::atomic<uint64_t>* words = seg.cap_words(env);
  const uint64_t cap = seg.capacity();
  uint64_t from = frontier.load(std::memory_order_relaxed);
  uint64_t to = from;
  // A delivered word is the step's for good until the writer overwrites the slot, and the writer overwrites only
  // delivered steps, so a word that is not delivered for step `to` (free, pending, or a newer step's) stops the walk.
  while (to < head && words[to % cap].load(std::memory_order_relaxed) == layout::cap_word(to, 1)) ++to;
  while (to > from && !frontier.compare_exchange_weak(from, to, std::memory_order_relaxed)) {
  }
}

void repair_dead_claims(Segment& seg, uint64_t slot) noexcept {
  layout::QueueLearner& q = seg.queue_learner(slot);
  // acquire: pairs with commit's release store: a committed call's claims are its own.
  const uint64_t call = q.call.load(std::memory_order_acquire);
  const bool committed = (call & layout::kQueueClaiming) == 0;
  const uint64_t cap = seg.capacity();
  uint64_t returned = 0;
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    std::atomic<uint64_t>* words = seg.cap_words(e);
    const uint64_t head = seg.env_control(e).head.load(std::memory_order_acquire);
    const uint64_t lo = head > cap ? head - cap : 0;
    for (uint64_t s = std::max(lo, seg.queue_env(e).frontier.load(std::memory_order_relaxed)); s < head; ++s) {
      const uint64_t w = words[s % cap].load(std::memory_order_acquire);
      if (!layout::cap_word_for(w, s) || !layout::queue_is_pending(w) || layout::queue_pending_slot(w) != slot) {
        continue;
      }
      if (committed) {
        deliver(words[s % cap], s);
      } else {
        give_back(words[s % cap], s);
        ++returned;
      }
    }
    if (committed) raise_frontier(seg, e, head);
  }
  q.call.store((call >> 1) << 1, std::memory_order_release);
  if (returned != 0) q.returned.fetch_add(returned, std::memory_order_relaxed);
  notify(queue_writer_wake(seg.queue_control()), monotonic_ns());
}

bool repair_dead_claimer(Segment& seg, uint64_t slot) noexcept {
  if (slot >= seg.max_learners()) return false;  // a damaged word names no slot
  const auto words = learner_slot(seg, slot);
  const uint64_t lease = words.lease.lease.load(std::memory_order_relaxed);
  if (lease != 0 && lease_holder_alive(lease)) return false;
  const uint64_t me = self_lease_word();
  const LeaseResult r = try_take_lease(words.lease, me);
  if (r.outcome != LeaseOutcome::taken && r.outcome != LeaseOutcome::taken_over) return false;
  repair_dead_learner(seg, slot);
  release_lease(words.lease, me);
  return true;
}

}  // namespace shmreplay::detail
