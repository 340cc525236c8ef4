// detail/protocol/learner_takeover.hpp: taking a learner slot's lease (layout 1.7: a buffer has max_learners slots;
// slot 0 is the one-learner buffer's learner lease), and what its new holder repairs when the last one died holding
// it. Who calls it: Sampler::Sampler (sampler.cpp) and a checkpoint load (lib/checkpoint/load_leases.cpp,
// every slot), the only takers of learner slots; docs/design/leases.md and docs/design/learners.md. Safe across
// processes: each lease word changes by CAS (lease.hpp), and only the process that won a slot repairs it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "detail/protocol/lease.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// Why `r` (try_take_lease of learner slot `slot`'s lease, in a segment of `slots` slots) leaves the caller without
/// it, as the message's tail ("cannot attach a learner to 'name': ..."), or "" when the caller holds it now.
std::string learner_lease_problem(const LeaseResult& r, uint64_t slot, uint64_t slots);

/// What take_learner_slot got.
struct SlotTaken {
  uint64_t slot = 0;                          ///< the slot taken (or, with a problem, the slot asked for)
  LeaseOutcome outcome = LeaseOutcome::taken;  ///< taken or taken_over, when problem is empty
  std::string problem;                        ///< why no slot was taken (learner_lease_problem's words), or ""
};

/// Takes learner slot `rank` of `seg` for lease word `me`, or without a rank the first slot that is free or
/// whose holder died (slots this process holds are skipped: another Sampler of it). With a rank whose slot a live
/// process holds, asks again every millisecond for up to 50 ms (the holder may be repairing the slot's dead
/// learner, repair_dead_updater); otherwise never blocks. O(max_learners) lease CASes and liveness checks. The caller repairs a slot taken over (repair_dead_learner).
SlotTaken take_learner_slot(Segment& seg, std::optional<uint64_t> rank, uint64_t me) noexcept;

/// For the process that just took learner slot `slot` over from a dead holder (LeaseOutcome::taken_over): the dead
/// learner may have died inside try_update (the update locks that name its slot are released, and an env whose
/// update_seq a dead checkpoint load left odd is ended), while waiting (its slot's waiter count is taken back from
/// the global one: it would make every push issue a futex wake; so does its waiting mark, the limiter's sign of a
/// waiting learner), or inside update_priorities' walk of a tree (its slot's walk is redone: priorities.hpp's
/// finish_dead_walk), or inside a consuming call (its claims are delivered or given back: consume.hpp's
/// repair_dead_claims, O(num_envs x capacity)). The other slots' state is left alone. O(num_envs), plus the walk.
void repair_dead_learner(Segment& seg, uint64_t slot) noexcept;

/// The holder of an env's update lock, as a tool shows it (Inspector, `info`, metrics).
struct UpdateLockHolder {
  bool held = false;    ///< the lock bit is set
  uint64_t slot = 0;    ///< the slot named in the lock (when held)
  bool dead = false;    ///< that slot's lease is free or its holder is not running: a repair is due
};
/// Who holds env `c`'s update lock, judged by the named slot's lease (pid and start time). Any process, read-only.
UpdateLockHolder update_lock_holder(const Segment& seg, const layout::EnvControl& c) noexcept;

/// For a reader that cannot repair (a read-only mapping: a save, `dump`, the Inspector): when `seq`, env c's
/// update_seq loaded with acquire, is odd and the section is a dead updater's (its lock names a slot whose holder
/// is dead), the bound its repair will set, update_step + 1: the reader may copy the env's steps at or above it and
/// must drop the others. 0 when the section is a live learner's or a checkpoint load's (the copy must wait), or
/// `seq` is even. The caller still compares update_seq after its copy: a repair or a new section meanwhile changes
/// it. One liveness check (a /proc read) when `seq` is odd.
uint64_t dead_section_bound(const Segment& seg, const layout::EnvControl& c, uint64_t seq) noexcept;

/// For a process that finds env `c`'s update lock held by a learner slot whose holder is dead (a writer waiting to
/// claim, a learner whose copies of the env keep failing): takes that slot's lease over (a live process now holds
/// it, so no other repairer, and no new learner of the slot, can act on the slot's locks meanwhile), repairs what
/// the dead learner left (repair_dead_learner: its update locks, whose torn steps leave the view, its waiters and
/// walk), then frees the lease for the next learner. Returns whether it repaired; false when the lock is free, its
/// holder is alive or this process, or the word names no slot of the segment (damaged). O(num_envs) when it repairs;
/// one liveness check (a /proc read) otherwise. Needs a writable mapping.
bool repair_dead_updater(Segment& seg, const layout::EnvControl& c) noexcept;

}  // namespace shmreplay::detail
