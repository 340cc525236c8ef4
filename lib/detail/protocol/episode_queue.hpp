// detail/protocol/episode_queue.hpp: the consumer side of an env's completed-episode record queue (EpisodeControl
// line 3 and the env's record slots; the producer, emit_record, is in episodes.hpp beside the journal it reads): the
// learners' take and hand-over (take_records, hand_over_records; pop_records is both), and what the Inspector reads
// (queue_accounts).
// docs/design/episodes.md, "Episode records reach the learners", has the protocol and its crash argument.
//
// A single-producer ring with monotonic counters. The env's writer produces (advancing queue_tail, release); a
// learner consumes holding the env's taker lock (a lease word, as an env's or a slot's lease): it takes records by a
// CAS of queue_head and keeps the lock until the records are in its caller's hands, then counts them delivered and
// releases it. Whoever finds the lock held by a dead process counts what that process had in hand as lost. So every
// record that left the queue is delivered to exactly one caller or counted lost, exactly:
// queue_head == records_delivered + records_lost whenever nobody alive holds the lock.
//
// Who calls it: Sampler::pop_episodes (take and hand over), tests (pop_records), the Inspector (queue_accounts) and a
// checkpoint load (reset_queue_accounts). Safe across processes as each function says.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay::detail {

/// The consumer words of an env's queue, all on EpisodeControl line 3 (the learners' line): writable (`Word` =
/// std::atomic<uint64_t>, from a mutable Segment) or read-only (const, from a const one: the Inspector).
template <class Word>
struct QueueConsumerWordsOf {
  Word& head;       ///< queue_head: records taken from the queue since creation
  Word& taker;      ///< the taker lock: the lease word (pack_owner) of the process whose learner holds records of
                    ///< this queue in hand; 0 when none
  Word& delivered;  ///< records handed to a caller of pop_episodes (written by the lock holder)
  Word& lost;       ///< records taken by a learner that died holding them, or whose delivery threw (written by the
                    ///< lock holder, or whoever takes a dead holder's lock)
};
using QueueConsumerWords = QueueConsumerWordsOf<std::atomic<uint64_t>>;

/// The consumer words of `env`'s queue: writable from a mutable Segment (a writable mapping), read-only from a const
/// one. Precondition: the buffer has episode fields.
template <class Seg>
inline auto queue_consumer(Seg& seg, uint64_t env) noexcept {
  auto& c = seg.episode_control(env);
  return QueueConsumerWordsOf<std::remove_reference_t<decltype((c.queue_head))>>{c.queue_head, c.queue_taker,
                                                                               c.records_delivered, c.records_lost};
}

/// A learner's first half: takes `env`'s taker lock for lease word `me` (first counting as lost what a dead holder
/// had in hand), then moves up to out.size() records, oldest first, into `out` and returns how many. With records
/// taken the lock stays held: the caller must call hand_over_records(env, me, ...) once they are in its caller's
/// hands. Returns 0, holding nothing, when the queue is empty or another live process (this one included, through
/// another Sampler) holds the lock. Precondition: the buffer has episode fields. Never blocks; O(records), plus a
/// /proc read when the lock is held by another process.
std::size_t take_records(Segment& seg, uint64_t env, std::span<EpisodeRecord> out, uint64_t me) noexcept;

/// A learner's second half, after take_records returned records: counts them delivered (or, with
/// `delivered = false`, lost: the caller could not hand them on) and releases the lock. O(1).
void hand_over_records(Segment& seg, uint64_t env, uint64_t me, bool delivered) noexcept;

/// take_records then hand_over_records for this process: each record goes to exactly one caller, whole.
std::size_t pop_records(Segment& seg, uint64_t env, std::span<EpisodeRecord> out) noexcept;

/// What the Inspector shows of a queue: relaxed loads, so a snapshot of a busy queue is approximate.
struct QueueAccounts {
  uint64_t depth = 0;    ///< records waiting (queue_tail - queue_head)
  uint64_t lost = 0;     ///< records lost to dead learners: records_lost, plus what a dead lock holder has in hand
  uint64_t in_hand = 0;  ///< records a live learner has taken and not yet handed over
};
/// `alive(lease)` judges a lock holder's liveness (the Inspector caches it per process).
template <class Alive>
QueueAccounts queue_accounts(const Segment& seg, uint64_t env, Alive&& alive) noexcept {
  const auto w = queue_consumer(seg, env);
  const uint64_t head = w.head.load(std::memory_order_relaxed);
  const uint64_t tail = seg.episode_control(env).queue_tail.load(std::memory_order_relaxed);
  const uint64_t lost = w.lost.load(std::memory_order_relaxed);
  const uint64_t taker = w.taker.load(std::memory_order_relaxed);
  const uint64_t accounted = w.delivered.load(std::memory_order_relaxed) + lost;  // <= head, unless loads raced
  const uint64_t in_hand = taker == 0 || head < accounted ? 0 : head - accounted;
  QueueAccounts a;
  a.depth = tail > head ? tail - head : 0;
  const bool dead = taker != 0 && !alive(taker);
  a.lost = lost + (dead ? in_hand : 0);
  a.in_hand = dead ? 0 : in_hand;
  return a;
}

/// Makes the consumer accounts agree with a queue_head that a tool rewrote wholesale (a checkpoint load, which holds
/// every learner slot's lease): no taker, nothing lost, every record below the head delivered. O(1).
void reset_queue_accounts(Segment& seg, uint64_t env) noexcept;

}  // namespace shmreplay::detail
