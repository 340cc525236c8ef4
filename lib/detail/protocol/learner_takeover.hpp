// detail/protocol/learner_takeover.hpp: taking a learner slot's lease (layout 1.7: a buffer has max_learners slots;
// slot 0 is the one-learner buffer's learner lease), and what its new holder repairs when the last one died holding
// it. Who calls it: Sampler::Sampler (sampler_lease.cpp) and a checkpoint load (lib/checkpoint/load_leases.cpp,
// every slot), the only takers of learner slots; docs/design/leases.md and docs/design/learners.md. Safe across
// processes: each lease word changes by CAS (lease.hpp), and only the process that won a slot repairs it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "detail/protocol/lease.hpp"
#include "shmreplay/segment.hpp"

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

/// Takes learner slot `rank` of `segment` for lease word `me`, or without a rank the first slot that is free or
/// whose holder died (slots this process holds are skipped: another Sampler of it). Never blocks; O(max_learners)
/// lease CASes and liveness checks. The caller repairs a slot taken over (repair_dead_learner).
SlotTaken take_learner_slot(Segment& segment, std::optional<uint64_t> rank, uint64_t me) noexcept;

/// For the process that just took learner slot `slot` over from a dead holder (LeaseOutcome::taken_over): the dead
/// learner may have died inside try_update (the update locks that name its slot are released, and an env whose
/// update_seq a dead checkpoint load left odd is ended), while waiting (its slot's waiter count is taken back from
/// the global one: it would make every push issue a futex wake; so does its waiting mark, the limiter's sign of a
/// waiting learner), or inside update_priorities' walk of a tree (its slot's walk is redone: priorities.hpp's
/// finish_dead_walk). The other slots' state is left alone. O(num_envs), plus the walk.
void repair_dead_learner(Segment& segment, uint64_t slot) noexcept;

}  // namespace shmreplay::detail
