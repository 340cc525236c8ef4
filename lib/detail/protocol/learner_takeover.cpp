// detail/protocol/learner_takeover.cpp: see learner_takeover.hpp.
#include "detail/protocol/learner_takeover.hpp"

#include <atomic>

#include <fmt/format.h>

#include "detail/protocol/priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/wake.hpp"

namespace shmreplay::detail {

std::string learner_lease_problem(const std::string& name, const LeaseResult& r) {
  if (r.outcome == LeaseOutcome::held_by_us) {
    return fmt::format("cannot attach a learner to '{}': this process already has a Sampler on it; a buffer has one "
                       "learner at a time",
                       name);
  }
  if (r.outcome == LeaseOutcome::held_alive) {
    return fmt::format("cannot attach a learner to '{}': its learner is {}, which is alive; a buffer has one learner "
                       "at a time",
                       name, holder_text(r.holder_lease, r.holder_start_ticks));
  }
  return {};
}

void repair_dead_learner(Segment& segment) noexcept {
  layout::GlobalControl& g = segment.global_control();
  for (uint64_t e = 0; e < segment.num_envs(); ++e) release_dead_update_lock(segment.env_control(e));
  forget_waiters(g);
  g.learner_waiting_rows.store(0, std::memory_order_relaxed);
  if (segment.has_priorities()) {
    finish_dead_walk(g.priority_walk, segment.num_envs(), segment.capacity(),
                     [&](uint64_t e) { return priority_tree_of(segment, e); });
  }
}

}  // namespace shmreplay::detail
