// shmreplay/policy.hpp: policy versions' public vocabulary (layout 1.11; docs/design/policy.md): how a learner
// publishes a version and a staleness window (Sampler::publish_policy; Buffer::set_policy_window sets the window
// alone, as `shmreplay limit --max-staleness` does), and the version and window in force.
#pragma once

#include <cstdint>
#include <optional>

namespace shmreplay {

/// How Sampler::publish_policy publishes (policy versions, docs/design/policy.md).
struct PolicyPublish {
  /// Pacing: before the new window is in force, wait while a writer that holds its env's lease (a live process)
  /// would be left behind by it (its env's newest version below version - max_staleness), woken by writers as
  /// their versions move; after pace_timeout_ms, Error(rate_limited) naming the env, with nothing published. So
  /// a fast learner waits for slow producers instead of discarding their steps (pause, not discard).
  bool pace = false;
  uint64_t pace_timeout_ms = 10'000;  ///< with pace: how long to wait (kWaitForever: no timeout)
  /// With pace: how many versions behind the new one a live writer may be (its env's newest version at least
  /// version - max_lag); nullopt: max_staleness (the window's own bound). 1 keeps the learner within one version
  /// of the slowest live producer, so that a slow producer's steps stay in the window as long as a fast one's
  /// (docs/benchmarks/policy.md); at least 1 (a writer cannot have a version not yet published).
  std::optional<uint64_t> max_lag;
};

/// The policy version and window in force (Sampler::policy, Buffer::policy).
struct PolicyState {
  uint64_t version = 0;                  ///< the current version the learners published (0 before any)
  std::optional<uint64_t> max_staleness;  ///< the window; nullopt when none
  uint64_t publishes = 0;                ///< publish calls that moved the version or changed the window
};

}  // namespace shmreplay
