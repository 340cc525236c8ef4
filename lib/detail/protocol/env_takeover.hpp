// detail/protocol/env_takeover.hpp: what a new holder of env leases repairs of a predecessor that died holding them,
// beside the learner's (learner_takeover.hpp). Both halves of each repair are in the protocol files named below;
// this is the one list of them, so that a Writer and a checkpoint load cannot drift apart.
//
//   repair                                              whose half                    Writer  load
//   a dead writer's rate-limit admission of a step it   rate_limit.hpp: withdraw      yes     yes
//   never published
//   its mark of a wait for the limiter                  rate_limit.hpp:               yes     yes
//                                                       forget_dead_waiting
//   the record of an episode it ended without pushing   episodes.hpp: recover_env     yes     no: the load overwrites
//   the record, and the writer's journal                                                      the steps and rebuilds
//                                                                                             the journal (rebuild_env)
//   the walk of the priority tree slot it was writing   priorities.hpp: walk          yes     no: the load rebuilds
//                                                                                             every tree
//
// Who calls it: the Writer's constructor (EnvTakeover::writer, for the envs it leased, however it got them) and a
// checkpoint load (EnvTakeover::load, for every env, after taking every env's lease: load_leases.cpp). If a load
// fails after its repairs, an env it did not rewrite keeps what its dead writer left, with a free lease: its next
// Writer does the rest, exactly as before the load.
#pragma once

#include <cstdint>
#include <span>

#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

enum class EnvTakeover {
  writer,  ///< a Writer that took the envs' leases: every repair
  load,    ///< a checkpoint load, which rewrites the steps, the journals and the trees: the limiter's repairs only
};

/// The repairs of the table above for `envs`, whose leases the caller holds. Never throws.
void repair_env_takeover(Segment& seg, std::span<const uint64_t> envs, EnvTakeover who) noexcept;

}  // namespace shmreplay::detail
