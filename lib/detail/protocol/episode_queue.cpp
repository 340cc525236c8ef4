// detail/protocol/episode_queue.cpp: see episode_queue.hpp.
#include "detail/protocol/episode_queue.hpp"

#include <algorithm>

#include "detail/protocol/episodes.hpp"  // f64_of
#include "detail/protocol/lease.hpp"

namespace shmreplay::detail {

using layout::EpisodeControl;

namespace {

// Takes `w`'s taker lock for `me`, or returns false when a live process holds it (this one too, through another
// Sampler). A dead holder's records in hand (head - delivered - lost: what it took and never handed over) are counted
// lost first; a free lock whose accounts do not add up to the head (records taken by a library before the lock)
// counts the difference delivered. Holding the lock, only we store the head, delivered and lost.
bool try_lock_queue(const QueueConsumerWords& w, uint64_t me) noexcept {
  uint64_t holder = w.taker.load(std::memory_order_acquire);  // pairs with hand_over_records' release CAS
  for (;;) {
    if (holder == me || (holder != 0 && lease_holder_alive(holder))) return false;
    // acq_rel: acquire pairs with the previous holder's release CAS in hand_over_records, so its head and account
    // stores happen-before our loads (a dead holder's stores are visible to whoever saw it dead, as for a lease
    // takeover: leases.md); release publishes our claim.
    if (w.taker.compare_exchange_strong(holder, me, std::memory_order_acq_rel, std::memory_order_acquire)) break;
  }
  const uint64_t head = w.head.load(std::memory_order_relaxed);
  const uint64_t delivered = w.delivered.load(std::memory_order_relaxed);
  const uint64_t lost = w.lost.load(std::memory_order_relaxed);
  if (delivered + lost == head) return true;
  // One store each way, recomputed from the same words by whoever comes next: a repair killed here is redone exactly.
  if (holder != 0 && delivered + lost < head) {
    w.lost.store(head - delivered, std::memory_order_relaxed);
  } else {
    w.delivered.store(head - std::min(lost, head), std::memory_order_relaxed);
    if (lost > head) w.lost.store(0, std::memory_order_relaxed);  // never but after a foreign rewrite: defensive
  }
  return true;
}

void unlock_queue(const QueueConsumerWords& w, uint64_t me) noexcept {
  uint64_t expected = me;
  // release: pairs with try_lock_queue's acquire CAS by the next taker; our head and account stores come first.
  w.taker.compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed);
}

}  // namespace

std::size_t take_records(Segment& seg, uint64_t env, std::span<EpisodeRecord> out, uint64_t me) noexcept {
  EpisodeControl& c = seg.episode_control(env);
  const QueueConsumerWords w = queue_consumer(seg, env);
  // An empty queue takes no lock (and judges no holder's liveness). acquire: pairs with emit_record's release store.
  if (out.empty() || c.queue_tail.load(std::memory_order_acquire) == w.head.load(std::memory_order_relaxed)) return 0;
  if (!try_lock_queue(w, me)) return 0;
  const uint64_t capacity = seg.episode_queue_capacity();
  const layout::EpisodeRecordSlot* slots = seg.episode_queue(env);
  uint64_t head = w.head.load(std::memory_order_relaxed);  // validated by the CAS below
  for (;;) {
    // acquire: pairs with the writer's release store of queue_tail in emit_record; the slots below it are whole.
    const uint64_t tail = c.queue_tail.load(std::memory_order_acquire);
    uint64_t from = head;
    if (from > tail || tail - from > capacity) from = tail > capacity ? tail - capacity : 0;  // never: defensive
    const uint64_t take = std::min<uint64_t>(tail - from, out.size());
    if (take == 0) {
      unlock_queue(w, me);
      return 0;
    }
    for (uint64_t i = 0; i < take; ++i) {
      const layout::EpisodeRecordSlot& slot = slots[(from + i) % capacity];
      EpisodeRecord& r = out[static_cast<std::size_t>(i)];
      r.env = env;
      r.first_step = slot.first_step.load(std::memory_order_relaxed);
      r.length = slot.length.load(std::memory_order_relaxed);
      r.episode_return = f64_of(slot.episode_return.load(std::memory_order_relaxed));
      r.end = static_cast<EpisodeEnd>(slot.end.load(std::memory_order_relaxed) & 3);
    }
    // release: pairs with the writer's acquire load of queue_head in emit_record before it reuses a slot; our reads
    // come first. Still a CAS under the lock: success means the head stayed `head` from our load to here, so no
    // writer reused a slot of [head, head + capacity) meanwhile and the copy is whole, and a consumer that ignores
    // the lock (a library before it) never shares a record with us.
    if (w.head.compare_exchange_strong(head, from + take, std::memory_order_release, std::memory_order_relaxed)) {
      return static_cast<std::size_t>(take);
    }
    // A consumer that ignores the lock took records first: `head` now holds its new head; copy again from there.
  }
}

void hand_over_records(Segment& seg, uint64_t env, uint64_t me, bool delivered) noexcept {
  const QueueConsumerWords w = queue_consumer(seg, env);
  // Relaxed: we hold the lock, so these are our own stores (or those try_lock_queue acquired).
  const uint64_t head = w.head.load(std::memory_order_relaxed);
  if (delivered) {
    w.delivered.store(head - w.lost.load(std::memory_order_relaxed), std::memory_order_relaxed);
  } else {
    w.lost.store(head - w.delivered.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  unlock_queue(w, me);
}

std::size_t pop_records(Segment& seg, uint64_t env, std::span<EpisodeRecord> out) noexcept {
  const uint64_t me = self_lease_word();
  const std::size_t n = take_records(seg, env, out, me);
  if (n > 0) hand_over_records(seg, env, me, /*delivered=*/true);
  return n;
}

void reset_queue_accounts(Segment& seg, uint64_t env) noexcept {
  const QueueConsumerWords w = queue_consumer(seg, env);
  // relaxed: the caller's released leases publish these with the rest of the env.
  w.taker.store(0, std::memory_order_relaxed);
  w.lost.store(0, std::memory_order_relaxed);
  w.delivered.store(w.head.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace shmreplay::detail
