// detail/protocol/learner_takeover.hpp: taking the learner lease, and what its new holder repairs when the last one
// died holding it. Who calls it: Sampler::Sampler (sampler_lease.cpp) and a checkpoint load (lib/checkpoint/
// load_leases.cpp), the only two takers of the learner lease; docs/design/leases.md. Safe across processes: the
// lease word changes by CAS (lease.hpp), and only the process that won it runs the repair.
#pragma once

#include <cstdint>
#include <string>

#include "detail/protocol/lease.hpp"
#include "shmreplay/segment.hpp"

namespace shmreplay::detail {

/// Why `r` (try_take_lease of the learner lease of segment `name`) leaves the caller without the lease, as the
/// message's tail ("cannot attach a learner to 'name': ..."), or "" when the caller holds it now.
std::string learner_lease_problem(const std::string& name, const LeaseResult& r);

/// For the process that just took a dead learner's lease over (LeaseOutcome::taken_over): the dead learner may
/// have died inside try_update (its update locks are released), while waiting (its waiter count goes: it would
/// make every push issue a futex wake; so do its waiting rows, the limiter's mark of a waiting learner), or inside
/// update_priorities' walk of a tree (redone: priorities.hpp's finish_dead_walk). O(num_envs), plus the walk.
void repair_dead_learner(Segment& segment) noexcept;

}  // namespace shmreplay::detail
