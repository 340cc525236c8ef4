// detail/protocol/walk.hpp: the reanalyse walk (layout 1.11; internal/walk_layout.hpp), both halves of its
// handshake and its repair. docs/design/reanalyse.md has the argument.
//
//   claim     walk_claim_next: scans every env's stored full chunks, picks the best due one (a chunk is due when
//             its last completion's pass is below the walk's pass) in the asked order, and takes its chunk slot's
//             claim word by CAS from "not held" (or from an overwritten chunk's word) to "held by my worker slot".
//             When nothing is due and nothing is held, it opens the next pass (a CAS of the pass word).
//   complete  walk_complete: stores the chunk's pass and target version, then lets the claim go with a release
//             CAS; walk_give_back lets it go without recording anything.
//   wait      walk_wake: the workers' sleeping place (Reanalyser::next sleeps there with wake.hpp's sleep_until,
//             counted in WalkControl::waiters and its slot's own word); walk_notify wakes it after a completion,
//             a give-back, a repair or a load's reset; a Writer wakes it after a push call that filled a chunk,
//             only while a worker sleeps (walk_notify_filled: one load per push call otherwise).
//   repair    walk_repair_slot: for the process that holds a dead worker slot's lease now (a successor, or a
//             claimer that met the dead slot's claim and took its lease for the moment of the repair): every claim
//             of the slot is let go (its chunk is due again, in the same pass).
// Who calls what: Reanalyser (lib/reanalyse.cpp) for all of it; the Inspector reads the words. Safe across
// processes: a claim word moves only by CAS; a chunk slot's other words only by the claim's holder.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include <vector>

#include "detail/protocol/wake.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/internal/walk_layout.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay::detail {

/// A chunk one worker slot holds: env, its steps [first_step, end_step) as stored when it was handed out, its
/// chunk index (steps [chunk C, (chunk + 1) C)) and the pass it was handed in.
struct WalkHeld {
  uint64_t env = 0;
  uint64_t first_step = 0;
  uint64_t end_step = 0;
  uint64_t chunk = 0;
  uint64_t pass = 0;
};

/// Takes a free worker slot, or a dead worker's (after repairing it), for `me` (self_lease_word()); nullopt when
/// every slot is held by a live process. Counts a takeover on the slot it repaired.
std::optional<uint64_t> walk_attach(const Segment& seg, uint64_t me) noexcept;
/// Lets every claim of `slot` go, then its lease (a CAS: a slot taken over meanwhile is left alone).
void walk_detach(const Segment& seg, uint64_t slot, uint64_t me) noexcept;

/// Claim side: the next due chunk in `order` for worker slot `slot`, held by it on return; nullopt when no stored
/// full chunk is due (all are done in this pass and some are held, or none is stored). Repairs a dead worker's
/// slot it meets. O(stored chunks) (largest_return: O(stored steps), it sums the rewards). Never blocks.
std::optional<WalkHeld> walk_claim_next(const Segment& seg, uint64_t slot, uint64_t me, ReanalyseOrder order);

/// Complete side: records `target_version` and the pass for the chunk and lets its claim go. False (nothing
/// recorded, counted as stale) when the slot no longer holds it: writers overwrote the chunk and a claim of a newer
/// chunk took its chunk slot.
bool walk_complete(const Segment& seg, uint64_t slot, const WalkHeld& held, uint64_t target_version) noexcept;
/// Lets the chunk's claim go without a completion (it is due again); false when the slot no longer holds it.
bool walk_give_back(const Segment& seg, uint64_t slot, const WalkHeld& held) noexcept;

/// The walk's sleeping place for worker slot `slot`: WalkControl's wake_seq and waiters, and the slot's own count.
inline WakeWord walk_wake(const Segment& seg, uint64_t slot) noexcept {
  layout::WalkControl& c = seg.walk_control();
  return {c.wake_seq, c.waiters, &seg.walk_worker(slot).waiters};
}
/// Wakes the workers sleeping in Reanalyser::next (after a store that can make a chunk due: a completion, a
/// give-back, a repair, a reset). Its own seq_cst fence: rare calls.
inline void walk_notify(const Segment& seg) noexcept {
  layout::WalkControl& c = seg.walk_control();
  notify(WakeWord{c.wake_seq, c.waiters});
}
/// Writer side, after a push call's head stores and notify_waiters (whose fence, or the sleeper's heavy fence,
/// orders those stores before this load): when a worker sleeps and `filled` says the call filled a chunk, wakes
/// it. One relaxed load per push call while nobody sleeps; `filled` is asked only while someone does.
template <class Filled>
inline void walk_notify_filled(layout::WalkControl& c, Filled&& filled) noexcept {
  if (c.waiters.load(std::memory_order_relaxed) == 0) [[likely]] return;
  if (!filled()) return;
  // release: pairs with the sleeper's seq_cst load of wake_seq before it sleeps (FUTEX_WAIT compares it).
  c.wake_seq.fetch_add(1, std::memory_order_release);
  futex_wake_all(c.wake_seq);
}

/// Repair: lets every claim of worker slot `slot` go, counts them per env (WalkEnv::rehanded; given_back when
/// `own` says the caller is the slot's live worker detaching) and takes back the slot's sleeper count
/// (forget_waiters). The caller holds the slot's lease and its previous holder is dead (or gone), or `own`. Wakes
/// the sleeping workers when it let a claim go. Returns the claims let go. O(chunk slots).
uint64_t walk_repair_slot(const Segment& seg, uint64_t slot, bool own = false) noexcept;

/// A checkpoint load's side: every chunk slot to "not held, never completed" and the newest version to none (the
/// pass stays: it only grows). A worker that held a chunk finds its completion refused. O(chunk slots).
void walk_reset(const Segment& seg) noexcept;

/// A checkpoint's side (format 2.4): the target version + 1 of the last completion of each full chunk k of `env`
/// with a step in [first_step, head), k from first_step / C to head / C - 1 (0: never completed), into `out`.
/// Relaxed loads of words workers may be changing: a snapshot, as the counters are. O(chunks).
void walk_save_versions(const Segment& seg, uint64_t env, uint64_t first_step, uint64_t head,
                        std::vector<uint64_t>& out);
/// A load's side, after walk_reset and the env's rewrite: each saved version != 0 recorded as a completion of its
/// chunk in the pass in progress (not held). Then walk_restored, once. The load holds no walk word: a worker that
/// claims meanwhile loses its claim (its completion is refused).
void walk_restore_versions(const Segment& seg, uint64_t env, uint64_t first_step, uint64_t head,
                           const std::vector<uint64_t>& versions) noexcept;
/// After every env's walk_restore_versions: the newest version is the largest restored, the next pass opens (every
/// restored chunk is due again, in the order of its version) and the sleeping workers are woken.
void walk_restored(const Segment& seg) noexcept;

/// The learner's mix (SampleOptions::reanalysed): replaces `out` with the steps of every env's stored full chunks
/// whose last completion recorded the newest target version, [max(k C, tail), (k + 1) C) each, by env and step;
/// empty without a walk or before any completion. Relaxed loads: one snapshot, whose rows the Sampler validates as
/// any other. O(chunk slots).
struct WalkRange {
  uint64_t env = 0;
  uint64_t lo = 0;
  uint64_t hi = 0;
};
void walk_fresh_ranges(const Segment& seg, std::vector<WalkRange>& out);

/// The target-version age buckets of an env's stored full chunks, in steps: never reanalysed, then versions behind
/// the newest completed version 0, 1, 2-3, 4-7, 8 and more (kWalkAgeBuckets). Relaxed loads: a snapshot for
/// counters, not a synchronisation.
inline constexpr std::size_t kWalkAgeBuckets = 6;
std::array<uint64_t, kWalkAgeBuckets> walk_age_steps(const Segment& seg, uint64_t env) noexcept;

}  // namespace shmreplay::detail
