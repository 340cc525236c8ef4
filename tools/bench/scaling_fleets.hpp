// tools/bench/scaling_fleets.hpp: shmreplay_bench_scaling's sweeps of processes (fleet.hpp runs): writers, learners
// and the latency of a sample call beside writers. All on one buffer of small steps, created with max_learners 4,
// its pages populated, every ring filled; each configuration runs on both sides (ours, then the plain limit; the
// order reversed every other round), and ratios are the median of the per-round ratios. Called by scaling.cpp.
//
//   writers    1 to --max-writers writer processes of --envs-per-writer envs each, with one learner sampling 256
//              transitions per call: at full speed (ours: Writer::push beside a Sampler; plain: memcpy of the same
//              rows into the same arrays beside the prefetching gather) and at --env-rate steps per second per env
//   learners   1 to 4 learner processes, no writer, transitions and sequences of 64 (ours: a Sampler each, its own
//              rank; plain: the gather in as many processes)
//   latency    --latency-writers writer processes (ours) at full speed beside one learner, transitions and
//              sequences of 64, the learner ours or the gather beside the same writers
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fleet.hpp"

namespace shmreplay::bench {

struct FleetConfig {
  uint64_t envs_per_writer = 8;
  uint64_t steps = 0;  ///< stored steps of the buffer (rounded to envs x a capacity)
  std::vector<uint64_t> writer_counts;
  double env_rate = 1000;
  std::vector<uint64_t> learner_counts;
  std::vector<uint64_t> latency_writers;
  std::vector<std::size_t> lengths = {1, 64};  ///< the learners' and latency sweeps' sequence lengths
  FleetTiming timing;
  uint32_t rounds = 2;
  bool writers = false, learners = false, latency = false;  ///< which sweeps run
};

/// One configuration over the rounds: each round's run of ours and of the plain limit.
struct Paired {
  std::vector<FleetFigures> ours, plain;
  /// The median over rounds of a figure, and of the per-round ratio ours / plain.
  double ours_median(double FleetFigures::*figure) const;
  double plain_median(double FleetFigures::*figure) const;
  double ratio(double FleetFigures::*figure) const;
  /// Every round's calls together.
  LatencyStats ours_latency() const;
  LatencyStats plain_latency() const;
  bool late() const;
};

struct WritersRow {
  uint64_t writers = 0;
  Paired full, fixed;
};
struct LearnersRow {
  uint64_t learners = 0;
  std::size_t length = 1;
  Paired run;
};
struct LatencyRow {
  uint64_t writers = 0;
  std::size_t length = 1;
  Paired run;  ///< ours: our learner; plain: the gather, beside the same (our) writers
};

struct FleetResults {
  uint64_t envs = 0, capacity = 0, segment_bytes = 0, envs_per_writer = 0;
  std::vector<WritersRow> writers;
  std::vector<LearnersRow> learners;
  std::vector<LatencyRow> latency;
};

/// Creates the buffer, runs the chosen sweeps, removes the buffer; progress on stderr.
FleetResults run_fleet_sweeps(const FleetConfig& c);

/// Whether a buffer of the fleets' shape fits (empty) or why not.
std::string fleet_room(const FleetConfig& c, uint64_t budget_bytes, uint64_t spare_bytes);

}  // namespace shmreplay::bench
