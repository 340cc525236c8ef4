// tools/bench/policy_bench.hpp: shmreplay_bench_policy's two parts (docs/benchmarks/policy.md; issue 47, part 1's
// "Show" items): pacing against discard (policy_pacing.cpp) and the cost of a sample call with a window
// (policy_cost.cpp). tools/bench/policy.cpp has the command line and prints both.
#pragma once

#include <cstdint>
#include <vector>

namespace shmreplay::bench::policy {

/// Pacing against discard: env groups of a fixed speed ratio produce fixed-length episodes whose steps carry the
/// version their actor loaded at the episode's start; a learner samples with a window and moves its version every
/// `batches_per_version` batches. Run twice, one mode after the other: admission control (pacing) and the
/// discard-and-requeue baseline.
struct PacingOptions {
  uint32_t fast_envs = 4;          ///< envs of the fast group, one actor thread each
  uint32_t slow_envs = 4;          ///< envs of the slow group
  double fast_step_ms = 0.2;       ///< a fast actor's time per step (it sleeps to a schedule)
  double speed_ratio = 10;         ///< a slow actor's time per step is fast_step_ms * speed_ratio
  uint32_t episode_steps = 25;     ///< steps per episode, both groups
  uint64_t max_staleness = 2;      ///< the window k
  uint64_t max_lag = 0;            ///< paced mode's PolicyPublish::max_lag; 0: the window's k (the default)
  uint32_t batches_per_version = 20;  ///< the learner moves its version every this many batches
  uint32_t batch = 256;            ///< rows per sample call (single steps)
  double train_ms = 1.0;           ///< the learner's work per batch (a sleep standing for a gradient step)
  double seconds = 6;              ///< length of each mode's run
};

/// The cost of a window: a sample call with a window against a uniform call of the same shape.
struct CostOptions {
  uint32_t envs = 64;
  uint32_t capacity = 4096;
  uint32_t batch = 256;
  double seconds = 0.2;  ///< one trial
  uint32_t trials = 11;  ///< interleaved trials; the median ratio is reported
};

/// Runs both modes and prints their tables (Markdown).
void print_pacing(const PacingOptions& o);
/// The same for each number of batches between version moves: one row per value, the slow group's bias in each
/// mode against the window's span in slow episodes.
void print_pacing_sweep(const PacingOptions& o, const std::vector<uint32_t>& batches_per_version);
/// Measures and prints the cost table (Markdown).
void print_cost(const CostOptions& o);

}  // namespace shmreplay::bench::policy
