// detail/protocol/seqlock.hpp: the step seqlock of one env, every side of it in one place. The words are
// layout::EnvControl's `head`, `claimed` and `stacks_intact_from` (line 0) and `update_seq` (line 1);
// docs/design/seqlock.md, "Concurrency protocol", has the argument that a validated copy is whole and current, and
// docs/design/stacks.md the stacked fields' part of it.
//
//   word                  written by                                  read by
//   head                  the env's writer (publish_step)             every reader (view_range, read_counters, ...)
//   claimed, bits 0-62    the env's writer (claim_step)               readers after their copy (read_end)
//   claimed, bit 63       the learner (lock_for_update/unlock_update) the writer (claim_step waits while it is set)
//   update_seq            the learner and a checkpoint load           readers before and after their copy
//                         (UpdateSection: odd while rewriting)        (read_begin, read_end)
//   online_start          the learner (reset_online_start,            the online view (view_range, ...)
//                         advance_online_start)
//   stacks_intact_from    the env's writer, before it overwrites      the views' lower bound (view_range,
//                         frames (detail/protocol/stacks.hpp,         published_range) and readers after their
//                         store_stacks), and a checkpoint load        copy (read_end_loads, copy_intact); 0
//                         (layout 1.6, stacked fields only)           without stacked fields
//
// Who calls what, and what is safe across processes:
//   writer side    claim_step, publish_step: the Writer (push, push_one, reserve/commit), only for an env whose
//                  lease it holds: one writer per env, so head and the claim count have one writer each.
//   learner side   reset_online_start, advance_online_start: Sampler::reset_online_queue (the learner lease
//                  holder).
//   update side    lock_for_update, unlock_update, UpdateSection: Sampler::try_update, write_back (a slot's holder);
//                  UpdateSection and store_counters: a checkpoint load, which holds the learner lease and every
//                  env's lease. release_dead_update_lock: a learner that took over a dead learner's lease, or a
//                  writer that found the lock held by a dead learner; safe to race (CASes).
//   reader side    load_head, view_range, published_range, write_in_flight, has_published, read_counters(_stable),
//                  read_begin/read_end/copy_intact, and the two validated copies: BatchedReader (the Sampler's
//                  gather, many rows at a time) and copy_records (Inspector::read_steps behind `shmreplay dump`,
//                  save_checkpoint): any process, on a read-only mapping too. Readers never write the segment.
// Every function here is O(1) (copy_records: O(steps x fields); BatchedReader::validate: O(envs in the chunk)) and
// never blocks, except claim_step, which waits while the learner copies one step into the same env (try_update).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "detail/always_inline.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/stacks.hpp"
#include "detail/test_hooks.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay::detail {

using layout::kClaimMask;
using layout::kUpdateLockBit;

// ---------------------------------------------------------------------------------------------------------------
// Writer side: claim, fill, publish.

/// Waits while a learner holds `c`'s update lock and returns `claimed` without the lock bits. Spins briefly, then
/// yields; every millisecond it checks whether the learner (the lease of the slot in the lock's owner bits) is
/// alive, and if it died holding the lock, releases it (release_dead_update_lock), so a writer never hangs on a
/// dead learner.
uint64_t wait_update_unlocked(layout::EnvControl& c, Segment& seg) noexcept;

/// "Write begins": raises the env's claim to head + 1 and returns the step being written (head). After an
/// abandoned reservation or a takeover of a writer that died mid-write the claim is already raised, and it stays.
/// Then the caller stores the step's bytes (and meta) into slot step % capacity and calls publish_step.
/// Precondition: the caller holds the env's lease.
inline uint64_t claim_step(layout::EnvControl& c, Segment& seg) noexcept {
  const uint64_t step = c.head.load(std::memory_order_relaxed);  // only this writer stores head
  uint64_t cur = c.claimed.load(std::memory_order_relaxed);
  // The learner's update lock never covers the slot being claimed (try_update only rewrites steps
  // >= claimed - capacity), so with the bit set we only have to wait when the claim must still move.
  while ((cur & kClaimMask) != step + 1) {
    if (cur & kUpdateLockBit) {
      cur = wait_update_unlocked(c, seg);
      continue;
    }
    // acquire: pairs with the learner's release in unlock_update, so its update's bytes precede ours.
    if (c.claimed.compare_exchange_weak(cur, step + 1, std::memory_order_acquire, std::memory_order_relaxed)) break;
  }
  // release fence: orders the raised claim before the slot's data stores; pairs with the readers' acquire fence
  // in read_end, between their copy and their re-read of `claimed`.
  std::atomic_thread_fence(std::memory_order_release);
  return step;
}

/// "Write ends": publishes `step` (head = step + 1) and stamps the push time. Precondition: the caller claimed
/// `step` with claim_step and stored every byte of it.
inline void publish_step(layout::EnvControl& c, uint64_t step, uint64_t now_ns) noexcept {
  // release: pairs with the readers' acquire loads of head; every byte of the step happens-before it.
  c.head.store(step + 1, std::memory_order_release);
  c.last_push_ns.store(now_ns, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------------------------
// Learner side: the online view's start.

/// Empties the env's online view of one learner slot: its online start (`start`, detail/protocol/learner_slots.hpp)
/// = head. Precondition: the caller holds the slot's lease (the only writer of the slot's starts).
inline void reset_online_start(const layout::EnvControl& c, std::atomic<uint64_t>& start) noexcept {
  // acquire: pairs with the writer's release store of head in publish_step. The store is relaxed: readers of
  // online_start clamp it to a head they acquired themselves.
  start.store(c.head.load(std::memory_order_acquire), std::memory_order_relaxed);
}

/// Empties the env's online view of one learner slot up to `step` (a head the caller read earlier): start =
/// max(start, min(step, head)); steps published at or after `step` stay in the view. Precondition: as
/// reset_online_start.
inline void advance_online_start(const layout::EnvControl& c, std::atomic<uint64_t>& start, uint64_t step) noexcept {
  // acquire: pairs with the writer's release store of head in publish_step (the clamp, as reset_online_start).
  const uint64_t to = std::min(step, c.head.load(std::memory_order_acquire));
  if (to > start.load(std::memory_order_relaxed)) start.store(to, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------------------------
// Update side: the learner's update lock (try_update) and the odd/even update_seq section (try_update, load).

/// Takes the env's update lock for learner slot `slot` of `seg` (sets kUpdateLockBit and the slot in
/// `claimed`: layout::update_lock_bits) and returns the claim count c without them. While the bit is set the writer
/// cannot raise its claim, so the only slot it may be writing is (c - 1) % cap, which belongs to step c - 1 - cap:
/// steps in [c - cap, head) are safe to rewrite. Another learner's lock excludes ours: the CAS expects the word
/// without lock bits, and while another slot holds it we wait as a writer does (wait_update_unlocked: it yields,
/// and releases the lock of a holder that died), so a dead learner's lock never holds us. Precondition: the caller
/// holds the lease of `slot`.
inline uint64_t lock_for_update(layout::EnvControl& c, Segment& seg, uint64_t slot) noexcept {
  uint64_t cur = c.claimed.load(std::memory_order_relaxed) & kClaimMask;
  // acquire: pairs with the writer's claim CAS and another learner's unlock_update (release), so our view of
  // `claimed` is the one the caller's check relies on and that learner's bytes precede ours.
  while (!c.claimed.compare_exchange_weak(cur, cur | layout::update_lock_bits(slot), std::memory_order_acquire,
                                          std::memory_order_relaxed)) {
    cur = ((cur & kUpdateLockBit) != 0 ? wait_update_unlocked(c, seg) : cur) & kClaimMask;
  }
  return cur;
}

/// Releases the lock taken by lock_for_update, which returned `claim`.
inline void unlock_update(layout::EnvControl& c, uint64_t claim) noexcept {
  // release: pairs with the writer's acquire in claim_step / wait_update_unlocked (and another learner's acquire
  // in lock_for_update), so our bytes precede its bytes.
  c.claimed.store(claim, std::memory_order_release);
}

/// The rewriting of an env's stored steps (and, for a load, its counters): update_seq is odd from construction
/// to destruction, so a reader whose copy overlaps any store in between rejects it (read_end). Ends (even again)
/// on every path, errors included, so readers never spin on an odd value. Precondition: the caller holds the
/// learner lease (the only writer of update_seq), and for steps a writer may reach, the update lock.
class UpdateSection {
 public:
  /// A checkpoint load's section (its counters and steps; the lock is free, every lease held).
  explicit UpdateSection(layout::EnvControl& c) noexcept : word_(c.update_seq) { open(); }
  /// try_update's section, rewriting `step` under the update lock: the step is stored first, so that whoever sees
  /// the odd update_seq sees it (a repair of a dead holder takes it out of the view: release_dead_update_lock; a
  /// read-only copy skips it: copy_records).
  UpdateSection(layout::EnvControl& c, uint64_t step) noexcept : word_(c.update_seq) {
    c.update_step.store(step, std::memory_order_relaxed);  // ordered before the odd value by open's release store
    open();
  }
  UpdateSection(const UpdateSection&) = delete;
  UpdateSection& operator=(const UpdateSection&) = delete;
  ~UpdateSection() {
    // release: pairs with the readers' acquire load in read_begin; the stores of the section precede it.
    word_.store(end_, std::memory_order_release);
  }

 private:
  void open() noexcept {
    uint64_t seq = word_.load(std::memory_order_relaxed);
    seq += seq & 1;  // even already, unless a dead learner's section was never ended
    end_ = seq + 2;
    // release: pairs with the acquire load of update_seq by a repairer (release_dead_update_lock) or a read-only
    // copy (copy_records) that finds it odd: update_step, stored before, is this section's.
    word_.store(seq + 1, std::memory_order_release);
    // release fence: orders the odd update_seq before the data stores; pairs with the readers' acquire fence in
    // read_end.
    std::atomic_thread_fence(std::memory_order_release);
  }

  std::atomic<uint64_t>& word_;
  uint64_t end_ = 0;
};

/// A checkpoint load's rewrite of an env's counters. Precondition: inside an UpdateSection of the env, holding
/// the env's lease and the learner lease (nobody else writes them).
inline void store_counters(layout::EnvControl& c, uint64_t head, uint64_t claimed, uint64_t online_start,
                           uint64_t last_push_ns) noexcept {
  c.head.store(head, std::memory_order_relaxed);
  c.claimed.store(claimed, std::memory_order_relaxed);
  c.online_start.store(online_start, std::memory_order_relaxed);
  c.last_push_ns.store(last_push_ns, std::memory_order_relaxed);
}

/// Undoes the update lock of learner slot `slot` if that slot holds it, and ends its UpdateSection: the step it
/// was rewriting (update_step) and every older one leave the view (stacks_intact_from raised past it, counted in
/// steps_lost_to_dead_updates), so a half-rewritten step is never read as valid; then update_seq is made even and
/// the lock bits cleared. An env whose lock is free but whose update_seq is odd was left by a checkpoint load that
/// died (a load holds every slot's lease, so any slot's successor may end it); a lock of another slot is left
/// alone (its update_seq is that learner's). Precondition: the caller holds slot `slot`'s lease, taken over from
/// its dead holder (repair_dead_learner, and through it repair_dead_slot): so nobody else can hold, release or take
/// this slot's lock meanwhile, and an odd update_seq under it is the dead holder's own section.
inline void release_dead_update_lock(layout::EnvControl& c, uint64_t slot, uint64_t capacity) noexcept {
  const uint64_t held = c.claimed.load(std::memory_order_relaxed);
  if ((held & kUpdateLockBit) != 0 && layout::update_lock_owner(held) != slot) return;
  if ((held & kUpdateLockBit) == 0) {
    // A free lock with an odd update_seq is a dead load's section, or a live learner's that took the lock after
    // our load of `claimed`: end it only while holding the lock ourselves, so that it cannot be a live one's. A
    // writer's claim moves the word: try again; a learner's lock ends the search (its UpdateSection makes an odd
    // update_seq even before it opens its own).
    test_hooks::call(test_hooks::in_dead_load_repair);  // a test's pause: a live learner may take the lock here
    uint64_t free = held;
    for (;;) {
      if ((c.update_seq.load(std::memory_order_relaxed) & 1) == 0) return;
      // acquire: pairs with the release that freed the lock (unlock_update): that learner's section is over.
      if (c.claimed.compare_exchange_weak(free, free | layout::update_lock_bits(slot), std::memory_order_acquire,
                                          std::memory_order_relaxed)) {
        break;
      }
      if ((free & kUpdateLockBit) != 0) return;
    }
    uint64_t seq = c.update_seq.load(std::memory_order_relaxed);
    // release: pairs with the readers' acquire load of update_seq in read_begin.
    if (seq & 1) c.update_seq.compare_exchange_strong(seq, seq + 1, std::memory_order_release);
    // release: pairs with the writer's acquire in claim_step / wait_update_unlocked (as unlock_update).
    c.claimed.store(free, std::memory_order_release);
    return;
  }
  // The lock is the dead holder's, and only we (its slot's lease holder now) may release it: the word moves no more
  // (a writer waits while the bit is set), update_seq is the dead holder's section if odd.
  // acquire: pairs with open()'s release store in UpdateSection: update_step is the section's.
  const uint64_t seq = c.update_seq.load(std::memory_order_acquire);
  if (seq & 1) {
    const uint64_t step = c.update_step.load(std::memory_order_relaxed);
    const uint64_t claim = held & kClaimMask;
    const uint64_t was = raise_intact_from(c, step + 1);
    const uint64_t lo = std::max(claim > capacity ? claim - capacity : 0, was);
    if (step + 1 > lo) c.steps_lost_to_dead_updates.fetch_add(step + 1 - lo, std::memory_order_relaxed);
    // release: pairs with the readers' acquire load of update_seq in read_begin: a reader that sees the section
    // ended sees the raised bound too (and rejects a copy of the torn step after its acquire fence, end_copies).
    c.update_seq.store(seq + 1, std::memory_order_release);
  }
  // release: pairs with the writer's acquire load in wait_update_unlocked that waits for the bit to clear.
  c.claimed.store(held & kClaimMask, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------------------------------
// Reader side: snapshots of the counters, and the validated copy.

/// Steps [lo, hi) of one env's view.
struct StepRange {
  uint64_t lo;
  uint64_t hi;
};

/// The env's head: every step below it is completely written.
inline uint64_t load_head(const layout::EnvControl& c) noexcept {
  // acquire: pairs with the writer's release store of head in publish_step.
  return c.head.load(std::memory_order_acquire);
}

/// The env's `view` from one acquire load of head and a later load of claimed. A slot that is being reclaimed (claimed
/// = head + 1) is not part of the view. The Sampler's snapshot, the Inspector's sizes. The online view is learner slot
/// `online_start`'s (detail/protocol/learner_slots.hpp); the overload without it reads slot 0's
/// (EnvControl::online_start: the Inspector's, a one-learner buffer's).
inline StepRange view_range(const layout::EnvControl& c, View view, uint64_t capacity,
                            const std::atomic<uint64_t>& online_start) noexcept {
  // acquire: pairs with the writer's release store of head in publish_step: every step below it is written.
  const uint64_t head = c.head.load(std::memory_order_acquire);
  const uint64_t claimed = c.claimed.load(std::memory_order_relaxed) & kClaimMask;
  uint64_t lo = claimed > capacity ? claimed - capacity : 0;  // the oldest step whose slot is not being reclaimed
  // With stacked fields (layout 1.6; detail/protocol/stacks.hpp): and whose frames are not (0 without).
  lo = std::max(lo, c.stacks_intact_from.load(std::memory_order_relaxed));
  if (view == View::online) lo = std::max(lo, online_start.load(std::memory_order_relaxed));
  return {std::min(lo, head), head};
}
inline StepRange view_range(const layout::EnvControl& c, View view, uint64_t capacity) noexcept {
  return view_range(c, view, capacity, c.online_start);
}

/// The published steps of `view` not yet overwritten by a completed write (a write in progress does not count
/// against it): what SampleOptions::min_steps is checked against. `online_start` as in view_range.
inline StepRange published_range(const layout::EnvControl& c, View view, uint64_t capacity,
                                 const std::atomic<uint64_t>& online_start) noexcept {
  // acquire: pairs with the writer's release store of head in publish_step.
  const uint64_t head = c.head.load(std::memory_order_acquire);
  uint64_t lo = std::max(head > capacity ? head - capacity : 0, c.stacks_intact_from.load(std::memory_order_relaxed));
  if (view == View::online) lo = std::max(lo, online_start.load(std::memory_order_relaxed));
  return {std::min(lo, head), head};
}

/// Whether the env's writer is between claim_step and publish_step (its view is one step short meanwhile).
inline bool write_in_flight(const layout::EnvControl& c) noexcept {
  const uint64_t head = c.head.load(std::memory_order_relaxed);
  return (c.claimed.load(std::memory_order_relaxed) & kClaimMask) > head;
}

/// Whether the env has published a step at or after the view's base (0, or the slot's `online_start`).
inline bool has_published(const layout::EnvControl& c, View view, const std::atomic<uint64_t>& online_start) noexcept {
  const uint64_t base = view == View::online ? online_start.load(std::memory_order_relaxed) : 0;
  // acquire: pairs with the writer's release store of head in publish_step.
  return c.head.load(std::memory_order_acquire) > base;
}

/// One reader's look at an env's counters (claimed without the lock bit).
struct EnvCounters {
  uint64_t head = 0;
  uint64_t claimed = 0;
  uint64_t online_start = 0;
  uint64_t stacks_intact_from = 0;  ///< (layout 1.6) 0 without stacked fields
  uint64_t update_seq = 0;          ///< read_counters_stable only: the (even) update_seq they were read under
};

/// head (acquire), then claimed, online_start and stacks_intact_from.
inline EnvCounters read_counters(const layout::EnvControl& c) noexcept {
  EnvCounters n;
  // acquire: pairs with the writer's release store of head in publish_step.
  n.head = c.head.load(std::memory_order_acquire);
  n.claimed = c.claimed.load(std::memory_order_relaxed) & kClaimMask;
  n.online_start = c.online_start.load(std::memory_order_relaxed);
  n.stacks_intact_from = c.stacks_intact_from.load(std::memory_order_relaxed);
  return n;
}

/// The same, bracketed by update_seq: nullopt when an UpdateSection (a checkpoint load rewriting the counters, or
/// try_update) was open or ended meanwhile, so the counters are never a mix of before and after a load. A section
/// left open by a learner that died in it (dead_section_bound) does not stop the reader: the counters come with
/// stacks_intact_from past its torn step, as its repair will leave them, and update_seq odd.
inline std::optional<EnvCounters> read_counters_stable(const Segment& seg, const layout::EnvControl& c) noexcept {
  // acquire: pairs with the release store that ends an UpdateSection, so head and claimed below are its own (and
  // with the one that opens it: dead_section_bound's update_step is the section's).
  const uint64_t u = c.update_seq.load(std::memory_order_acquire);
  const uint64_t dead_bound = dead_section_bound(seg, c, u);
  if ((u & 1) != 0 && dead_bound == 0) return std::nullopt;
  EnvCounters n = read_counters(c);
  n.stacks_intact_from = std::max(n.stacks_intact_from, dead_bound);
  n.update_seq = u;
  // acquire: pairs with the release store that ends an UpdateSection (as above); a section that began or ended
  // after the first load shows here as another value.
  if (c.update_seq.load(std::memory_order_acquire) != u) return std::nullopt;
  return n;
}

/// Before a copy: update_seq (acquire: pairs with the release store that ends an UpdateSection, so the bytes it
/// wrote are seen by the copy). Odd means an update is running: the copy will be rejected.
inline uint64_t read_begin(const layout::EnvControl& c) noexcept {
  return c.update_seq.load(std::memory_order_acquire);
}

/// After a copy: the claim count, update_seq and (layout 1.6) stacks_intact_from, ordered after every load of the
/// copy.
struct ReadEnd {
  uint64_t claimed;
  uint64_t update_seq;
  uint64_t stacks_intact_from;  ///< 0 without stacked fields
};
/// read_end in two parts, for a reader that validates many copies at once (BatchedReader): end_copies()
/// once after the last copy, then read_end_loads() once per env whose copies it validates. Loading claimed later
/// than right after a copy only sees a larger value (claimed's bits 0-62 never go down outside a checkpoint load,
/// which holds the learner lease), so it can only reject more, never accept a torn copy.
inline void end_copies() noexcept {
  // acquire fence: pairs with the writer's release fence in claim_step (and the one in UpdateSection's
  // constructor): if the copy read any byte stored after those, the loads after this fence see the raised claim
  // (or the odd or newer update_seq).
  std::atomic_thread_fence(std::memory_order_acquire);
}
/// Precondition: end_copies() ran after the copy and before this.
inline ReadEnd read_end_loads(const layout::EnvControl& c) noexcept {
  const uint64_t claimed = c.claimed.load(std::memory_order_relaxed) & kClaimMask;
  const uint64_t seq = c.update_seq.load(std::memory_order_relaxed);
  const uint64_t stacks = c.stacks_intact_from.load(std::memory_order_relaxed);  // same cache line as claimed
  return {claimed, seq, stacks};
}
inline ReadEnd read_end(const layout::EnvControl& c) noexcept {
  end_copies();
  return read_end_loads(c);
}

/// Whether a copy of steps first, first + 1, ... (all below a head the reader acquired) that began with
/// read_begin() == begin_seq and ended with `end` is whole: no update ran, no writer claimed step first + cap,
/// which reuses first's slot, and no writer began to overwrite first's frames (stacked fields; stacks.hpp).
/// `claimed` and stacks_intact_from are monotonic and frames only grow with the step, so the oldest step covers
/// the rest.
inline bool copy_intact(uint64_t begin_seq, const ReadEnd& end, uint64_t first, uint64_t capacity) noexcept {
  return (begin_seq & 1) == 0 && begin_seq == end.update_seq && end.claimed <= first + capacity &&
         end.stacks_intact_from <= first;
}

/// The views' lower bound from below as a reader that cannot repair sees it: stacks_intact_from, past the torn step
/// of a dead updater's open section (dead_section_bound) if there is one. A save's check that its run is the env's
/// whole view (save_env.cpp).
inline uint64_t settled_intact_from(const Segment& seg, const layout::EnvControl& c) noexcept {
  // acquire: pairs with UpdateSection's release store of an odd value (dead_section_bound reads its update_step)
  const uint64_t seq = c.update_seq.load(std::memory_order_acquire);
  return std::max(c.stacks_intact_from.load(std::memory_order_relaxed), dead_section_bound(seg, c, seq));
}

/// The oldest step whose slot (and frames) no writer had reclaimed when `end` was read.
inline uint64_t intact_from(const ReadEnd& end, uint64_t capacity) noexcept {
  return std::max(end.claimed > capacity ? end.claimed - capacity : 0, end.stacks_intact_from);
}

/// The batched reader: the validation of many copies at once, a chunk of rows at a time (the Sampler's gather stage,
/// lib/sampler_gather.hpp; docs/design/seqlock.md, "The batched gather"). Per chunk: begin_chunk(); add() for each row
/// before any copy of the chunk (the first row of an env in the chunk takes its read_begin); the copies; then
/// validate(), which takes end_copies() once and read_end_loads() once per env of the chunk. The validation is per env,
/// not per row: copy_intact(begin, end, first) depends on a row only through its first step, and only as `claimed <=
/// first + capacity`, so every row of an env is intact exactly when the row with the env's oldest first step is (add
/// keeps it). Only a chunk with an env that fails needs its rows judged one by one (row_intact), with that same test.
/// Reader side: any process; used by one thread at a time. Sized for every env when made: no call allocates.
class BatchedReader {
 public:
  explicit BatchedReader(std::size_t num_envs)
      : begin_mark_(num_envs, 0), begin_seq_(num_envs), min_start_(num_envs), end_(num_envs) {
    envs_.reserve(num_envs);
  }

  /// Starts a chunk: forgets the envs of the last one.
  void begin_chunk() noexcept {
    envs_.clear();
    ++mark_;
  }

  /// A row of the chunk: steps from `first` on (`steps` of them; 0 for a row with no step, which copies nothing
  /// and cannot fail) of env `env`. Before the chunk's copies. `control(e)` gives env e's control words, and is
  /// called only at an env's first row in the chunk.
  template <class ControlOf>
  SHMREPLAY_ALWAYS_INLINE void add(ControlOf&& control, uint64_t env, uint64_t first, uint64_t steps) noexcept {
    if (begin_mark_[env] != mark_) [[unlikely]] {  // the env's first row in this chunk: before its copies
      begin_mark_[env] = mark_;
      begin_seq_[env] = read_begin(control(env));
      min_start_[env] = UINT64_MAX;
      envs_.push_back(static_cast<uint32_t>(env));  // no allocation: reserved for every env
    }
    min_start_[env] = std::min(min_start_[env], steps > 0 ? first : UINT64_MAX);
  }

  /// After the chunk's last copy: whether every row of the chunk is intact. `control(e)`: as for add().
  template <class ControlOf>
  SHMREPLAY_ALWAYS_INLINE bool validate(ControlOf&& control, uint64_t capacity) noexcept {
    end_copies();
    bool intact = true;
    for (const uint32_t e : envs_) {
      end_[e] = read_end_loads(control(e));
      // Step min_start (and so every later one) is intact while no writer has claimed step min_start + cap.
      intact &= min_start_[e] == UINT64_MAX || copy_intact(begin_seq_[e], end_[e], min_start_[e], capacity);
    }
    return intact;
  }

  /// After validate(): whether a row of env `env` whose steps begin at `first` is intact.
  bool row_intact(uint64_t env, uint64_t first, uint64_t capacity) const noexcept {
    return copy_intact(begin_seq_[env], end_[env], first, capacity);
  }

  /// The envs with a row in the chunk (each costs 3 loads of control words: read_begin, read_end_loads).
  std::size_t chunk_envs() const noexcept { return envs_.size(); }

 private:
  uint64_t mark_ = 0;                 // the current chunk's number
  std::vector<uint32_t> envs_;        // the envs with a row in the chunk, in order of their first row
  std::vector<uint64_t> begin_mark_;  // per env, the chunk whose begin_seq and min_start are the env's
  std::vector<uint64_t> begin_seq_;   // per env, update_seq before the chunk's copies (read_begin)
  std::vector<uint64_t> min_start_;   // per env, the oldest first step of its rows with steps in the chunk
  std::vector<ReadEnd> end_;          // per env, claimed and update_seq after the chunk's copies
};

/// Byte offset of each field inside a record (one step, its fields in schema order, back to back).
std::vector<uint64_t> record_field_offsets(const Schema& schema);

enum class CopyOutcome {
  ok,      ///< the records were copied; those of steps below intact_from were overwritten meanwhile
  raced,   ///< the learner (or a checkpoint load) rewrote the env during the copy: copy again
  reset,   ///< the env's head is below the steps asked for: the env was reloaded; start over from a new snapshot
};

struct CopyResult {
  CopyOutcome outcome = CopyOutcome::raced;
  uint64_t intact_from = 0;  ///< for ok: the oldest step whose slot no writer had reclaimed by the end of the copy
};

/// What copy_records copies between its validation loads: steps [first, first + count) of env `env`, out of the
/// segment's storage into the caller's records (detail/storage/field_storage.hpp: RecordCopy). Its bytes count only
/// once copy_records' validation passes.
class StepCopier {
 public:
  virtual void copy(uint64_t env, uint64_t first, uint64_t count) const noexcept = 0;

 protected:
  ~StepCopier() = default;
};

/// The validated copy of readers that are not the learner and may map the segment read-only (Inspector::read_steps,
/// save_checkpoint): the Sampler's validation with two additions that make it safe against a checkpoint being
/// loaded into the segment meanwhile: update_seq is loaded before the head, and a head that went down is reported
/// instead of trusted. Copies steps [first, first + count) of `env` with `copy`; the records of steps >= intact_from
/// are exactly what their writers published, drop the others. Preconditions: env < num_envs, count >= 1, first +
/// count <= a head of the env that the caller loaded with acquire. O(count * num_fields); never blocks or writes.
CopyResult copy_records(const Segment& seg, uint64_t env, uint64_t first, uint64_t count,
                        const StepCopier& copy) noexcept;

}  // namespace shmreplay::detail
