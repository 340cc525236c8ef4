// tools/bench/scaling_size.hpp: shmreplay_bench_scaling's size sweep: sample and push rates, and the latency of a
// sample call, against the stored steps, each beside the machine's limit measured in the same rounds over the same
// mapping. One process, no writer; one buffer at a time, created with its pages populated, filled, measured and
// dropped (its name removed at creation: nothing is left behind however the process ends). Called by scaling.cpp.
//
// Small steps (`obs:f32[17] action:f32[6] reward:f32 done:bool`, 97 B), 16 envs of stored/16 steps:
//   transitions   Sampler::sample_transitions, 256 rows per call
//   sequences     Sampler::sample, 256 rows of 64 steps, power 1
//   their limits  PlainSample over the segment's own field arrays (nothing writes meanwhile): the prefetching
//                 gather in the Sampler's 64 KiB chunks, and a memcpy per row and field, of the same rows drawn the
//                 same way (uniform (env, start))
//   push          Writer::push of the 16 envs per call into the full buffer, against memcpy of the same rows into
//                 the same field arrays at each env's next slot (a PlainStore over them: the same size, no second
//                 store), with and without the next slot prefetched for writing: the limit is the faster, per round
// Atari steps (`obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool`, atari_steps.hpp), 16 envs:
//   transitions   256 per call; sequences: 32 of 8 steps, power 1
//   their limits  the same output bytes (a stack's 4 frames per step) from random places of the segment's frame
//                 rings: memcpy per row, and the prefetching gather
//   push          16 envs per call of the cycle of Atari-like steps (its input from memory), against memcpy of the
//                 7,065 stored bytes (one frame and the other fields; with and without the next slot prefetched, the
//                 faster per round) into a plain store of the one-frame layout, and of the 28,233 pushed bytes into
//                 one of the unstacked layout; those stores at most --ref-gb together (their steps are reported)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "call_latency.hpp"

namespace shmreplay::bench {

enum class StepKind { small, atari };

struct SizeConfig {
  std::vector<uint64_t> sizes;  ///< stored steps asked for (rounded to 16 envs x a capacity of at least 64)
  double trial_s = 0.2;
  uint32_t trials = 5;
  std::chrono::milliseconds warm{50};
  uint64_t budget_bytes = 0;     ///< the most this sweep may hold at once (segment, references, staged steps)
  uint64_t spare_bytes = 0;      ///< left free in /dev/shm and MemAvailable
  uint64_t ref_store_bytes = 0;  ///< Atari: the most the push reference stores take together
  bool quick = false;
};

/// One sample case at one size: rows/s of ours and its two limits (median over rounds), ratios (median of the
/// per-round ratios) and the calls' latency.
struct SampleCase {
  double ours = 0, gather = 0, memcpy = 0;
  double over_gather = 0, over_memcpy = 0;
  LatencyStats ours_latency, gather_latency;
};

struct SizeRow {
  uint64_t asked = 0;          ///< the size asked for
  uint64_t stored = 0;         ///< envs x capacity
  uint64_t segment_bytes = 0;
  std::string skipped;         ///< non-empty: why this size was not measured
  double create_s = 0, fill_s = 0;
  SampleCase transitions, sequences;
  double push = 0;             ///< steps/s
  double push_ref = 0;         ///< the push's limit: memcpy of the stored bytes (small: the same rows; Atari: one
                               ///< frame per step), the faster of without and with the next slot prefetched
  double push_over_ref = 0;
  double push_ref_pushed = 0;  ///< Atari: memcpy of the pushed bytes (the unstacked layout); 0 for small steps
  double push_over_ref_pushed = 0;
  uint64_t ref_steps = 0;      ///< the push references' stored steps (small: the segment's; Atari: maybe fewer)
};

/// Measures every size of `c` for one step kind, printing progress to stderr.
std::vector<SizeRow> run_size_sweep(StepKind kind, const SizeConfig& c);

/// The schemas of the two step kinds.
const char* schema_of(StepKind kind) noexcept;

}  // namespace shmreplay::bench
