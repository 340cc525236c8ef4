// tools/bench/compressed_seed.hpp: shmreplay_bench_compressed --seed-scale (compressed_seed.cpp;
// docs/benchmarks/seed_scale.md; issue 45, "The seed's run at paper scale"). By hand, never in CI.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "bench_cli.hpp"

namespace shmreplay::bench {

/// The seed's training run's shape: --writers processes of 16 envs (envpool's async batch of 16; 96 envs in all) fed
/// from the recorded frames (every Atari file, replayed cyclically), a buffer of 62,500 steps per env (6 x 10^6
/// frames) whose segment is at most --seed-segment-bytes, filled first; then a learner (this process) samples 96
/// sequences of 32 at length^2 weights, 95% replay / 5% online (sample_mixed), for --seed-seconds while the writers
/// push at --inflow steps/s.
struct SeedOptions {
  bool enabled = false;
  uint64_t writers = 6, envs_per_writer = 16, capacity = 62500, segment_bytes = 8000000000;
  uint64_t rows = 96, length = 32;
  std::string codec = "lz4";
  std::string save_dir;  // --seed-save: a checkpoint of the filled buffer there while the writers push, then removed
  double seconds = 30, inflow = 4000, power = 2.0, online_share = 0.05;

  void add_to(CLI::App& app) {
    app.add_flag("--seed-scale", enabled, "The seed's run at paper scale: writer processes and a learner");
    app.add_option("--writers", writers, "--seed-scale: writer processes (default 6)")->check(CLI::Range(1, 256));
    app.add_option("--envs-per-writer", envs_per_writer, "--seed-scale: envs per writer (default 16)")
        ->check(CLI::Range(1, 1024));
    app.add_option("--seed-capacity", capacity, "--seed-scale: steps per env (default 62500)")
        ->check(CLI::Range(64, 1 << 24));
    app.add_option("--seed-segment-bytes", segment_bytes, "--seed-scale: the most bytes of the segment (default 8e9)");
    app.add_option("--codec", codec, "--seed-scale: obs's codec (default lz4)");
    app.add_option("--seed-seconds", seconds, "--seed-scale: how long the learner samples (default 30)");
    app.add_option("--seed-save", save_dir, "--seed-scale: after sampling, save a checkpoint of the buffer into this "
                                            "directory while the writers push (its compressed records as they are), "
                                            "verify it, report bytes and seconds, and remove it");
    app.add_option("--inflow", inflow, "--seed-scale: steps/s of all writers while the learner samples (0: as fast "
                                       "as they can; default 4000)");
  }
  void quick_defaults(const QuickDefaults& given) {
    given("--writers", writers, 2);
    given("--envs-per-writer", envs_per_writer, 2);
    given("--seed-capacity", capacity, 256);
    given("--seed-segment-bytes", segment_bytes, 4000000);
    given("--seed-seconds", seconds, 0.5);
    rows = 8, length = 8;
  }
};
int run_seed_scale(const SeedOptions& options, const std::string& frames, const std::string& command);

}  // namespace shmreplay::bench
