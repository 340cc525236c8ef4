// detail/protocol/policy.cpp: the policy versions' handshakes (policy.hpp).
#include "detail/protocol/policy.hpp"

#include <atomic>

#include "detail/protocol/lease.hpp"

namespace shmreplay::detail {

PolicyWindow publish_policy(layout::PolicyControl& p, uint64_t version, uint64_t max_staleness) noexcept {
  uint64_t seen = p.version.load(std::memory_order_relaxed);
  // release: pairs with load_policy_window's acquire (a reader that sees the new version sees what came before it).
  while (seen < version &&
         !p.version.compare_exchange_weak(seen, version, std::memory_order_release, std::memory_order_relaxed)) {
  }
  // release: pairs with load_policy_window's acquire load of max_staleness.
  const uint64_t old_window = p.max_staleness.exchange(max_staleness, std::memory_order_release);
  if (seen < version || old_window != max_staleness) {
    p.publishes.fetch_add(1, std::memory_order_relaxed);
    notify(policy_writer_wake(p));  // the held writers re-check the window
  }
  return load_policy_window(p);
}

std::optional<uint64_t> pace_blocker(const Segment& seg, uint64_t floor) noexcept {
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    // acquire: pairs with note_newest's release store; relaxed would do for a check that is re-done on every wake,
    // but the learner reports the value it read.
    const uint64_t newest = seg.policy_env(e).newest.load(std::memory_order_acquire);
    if (newest == layout::kNoPolicyVersion || newest >= floor) continue;
    // A writer the window already holds back cannot catch up by itself (it needs a newer policy): pacing does not
    // wait for it, or a paced learner and a held writer would wait for each other until both time out.
    if (seg.policy_env(e).held_since_ns.load(std::memory_order_relaxed) != 0) continue;
    if (lease_holder_alive(seg.env_control(e).lease.load(std::memory_order_acquire))) return e;
  }
  return std::nullopt;
}

void note_newest(Segment& seg, uint64_t env, uint64_t v) noexcept {
  layout::PolicyControl& p = seg.policy_control();
  // release: pairs with pace_blocker's acquire load; stored before the claim of the step that carries v, so the
  // stored value is never below a published step's version, whatever instruction the writer dies at.
  seg.policy_env(env).newest.store(v, std::memory_order_release);
  notify(policy_learner_wake(p));
}

}  // namespace shmreplay::detail
