// tools/bench/fleet.hpp: shmreplay_bench_scaling's runs of many processes on one buffer (its writers, learners and
// latency sweeps): W writer processes, each leasing its own envs and pushing all of them per call (batched), at full
// speed or at a fixed rate per env, beside M learner processes, each sampling in a loop and timing every call
// (call_latency.hpp). The processes are a harness.hpp Team: forked, opening the buffer by name, measured over the
// same trials without a pause. Called by scaling.cpp.
//
// Two sides of every configuration:
//   ours   Writer::push, and Sampler::sample / sample_transitions (replay view, power 1), each learner its own rank
//   plain  the machine's limit for the same work: memcpy of the same rows into the same field arrays of the same
//          segment at each env's next slot, the next slot prefetched for writing as Writer::push does (a PlainStore
//          over the segment's arrays: no protocol, no control words), and the prefetching gather of the same kind
//          of rows from the segment's arrays in the Sampler's 64 KiB chunks (PlainSample): no draw weights, no
//          seqlock, no mask
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "call_latency.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay::bench {

/// The buffer every process of a fleet opens: created, filled (every ring full) and removed by the caller, with
/// max_learners at least the most learners of a run.
struct FleetBuffer {
  std::string name;
  Schema schema;
  uint64_t envs = 0;      ///< at least writers x envs_per_writer
  uint64_t capacity = 0;  ///< steps per env
  uint64_t envs_per_writer = 8;
};

enum class Side { ours, plain };
const char* to_string(Side side) noexcept;

/// One run.
struct FleetRun {
  Side writer_side = Side::ours;
  Side learner_side = Side::ours;
  uint64_t writers = 0;
  double env_rate = 0;  ///< steps per second per env; 0: full speed
  uint64_t learners = 1;
  std::size_t batch = 256;
  std::size_t length = 1;  ///< 1: sample_transitions; more: sample of sequences
  uint64_t seed = 1;
};

struct FleetTiming {
  double warmup_s = 0.3;
  double trial_s = 0.5;
  uint32_t trials = 3;
};

/// What a run measured, over its trials.
struct FleetFigures {
  double push = 0;            ///< steps/s of all writers together (median over trials of the sum)
  double push_cores = 0;      ///< the writers' CPU seconds per second, together
  double rows = 0;            ///< rows/s of all learners together (median over trials of the sum)
  double learner_cores = 0;   ///< the learners' CPU seconds per second, together
  double learner_wait = -1;   ///< the learners' time runnable but waiting for a CPU, of their wall time (-1: unknown)
  LatencyStats latency;       ///< every learner's calls of the trials
  std::vector<CallRecord> calls;  ///< those calls (to merge runs)
  double retries_per_m = 0;   ///< ours: rows redrawn per million rows sampled
  bool late = false;          ///< some worker missed a trial boundary (harness.hpp): its whole run was used
};

/// Forks the run's processes, measures them and reaps them. Throws on a worker's failure (with its message).
FleetFigures run_fleet(const FleetBuffer& buffer, const FleetRun& run, const FleetTiming& timing);

}  // namespace shmreplay::bench
