// tools/bench/pixels.hpp: shmreplay_bench's pixels section (stacked fields, issue 32; the --atari-1e6 mode is in
// atari_million.hpp). Called by main.cpp; the measurements are in pixels.cpp, the workload in atari_steps.hpp, the
// docs in docs/benchmarks/pixels.md.
//
// The pixels section runs in the benchmark's own process (no writer or sampler process: nothing else runs during
// it), every case of a table measured in interleaved trials (median_rate.hpp), so that the machine's noise falls
// on all of them alike:
//   push    Atari-like steps (obs u8[4,84,84], episodes of a few hundred steps with resets, both padding
//           conventions) pushed with obs stacked (`obs:u8[4,84,84]:stack=0`), against today's unstacked layout,
//           memcpy of the same pushed bytes (28,233 per step), an unstacked push of the newest frame only
//           (`obs:u8[1,84,84]`: the stacked push less its continuity compare) and memcpy of that frame's step.
//   sample  batches of 256 flat transitions and 32 sequences of 8 steps out of the stores the push filled,
//           stacked against unstacked, memcpy of the same output bytes from random places and the prefetching
//           gather (gather.hpp) of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shmreplay::bench {

struct PixelConfig {
  bool quick = false;   ///< tiny stores, a short cycle: a smoke run
  double seconds = 0.2;  ///< one trial of one case
  uint32_t trials = 5;   ///< interleaved trials per case; medians are reported
  bool push = true;      ///< the push table
  bool sample = true;    ///< the sample table
};

/// One push mode's figures: ns per step (median over trials) and time ratios (the median of per-trial ratios).
struct PixelPush {
  std::string mode;  ///< "batched" (Writer::push of every env per call) or "single" (push_one per env)
  double stacked_ns = 0, unstacked_ns = 0, memcpy_ns = 0, frame_ns = 0, memcpy_frame_ns = 0;
  double trusted_ns = 0;               ///< stacked under StackContinuity::episodes (no compare)
  double trusted_over_unstacked = 0;   ///< time
  double unstacked_episodes_ns = 0;    ///< today's layout with the episode field the episodes rule needs
  double trusted_over_unstacked_episodes = 0;  ///< time
  double stacked_over_unstacked = 0;   ///< time
  double stacked_over_memcpy = 0;      ///< time, against memcpy of the same pushed bytes
  double stacked_over_frame = 0;       ///< time, against the unstacked push of the newest frame only
  double stacked_over_memcpy_frame = 0;  ///< time, against memcpy of the bytes a stacked step stores at most
};

/// One sample kind's figures: rows/s (medians) and rate ratios (the median of per-trial ratios).
struct PixelSample {
  std::string kind;  ///< "transitions" or "sequences"
  std::size_t rows = 0, length = 0;
  double stacked = 0, unstacked = 0, memcpy = 0, gather = 0;  ///< rows/s
  double stacked_over_memcpy = 0, stacked_over_unstacked = 0, stacked_over_gather = 0, unstacked_over_memcpy = 0;
};

struct PixelReport {
  std::string stacked_schema, unstacked_schema, frame_schema;
  uint64_t envs = 0, capacity = 0, cycle_steps = 0, episode_min = 0, episode_max = 0;
  uint64_t step_bytes = 0;           ///< bytes of a step as pushed (28,233)
  double restarts_per_step = 0;      ///< pushed steps whose stack does not continue the previous step's
  double stored_bytes_per_step = 0;  ///< bytes a stacked push writes per step: frames, index word, other fields
  uint64_t stacked_segment_bytes = 0, unstacked_segment_bytes = 0;
  uint64_t stacked_sampleable = 0, stacked_stored = 0;  ///< after the run: steps the views hold, steps in the rings
  std::vector<PixelPush> push;
  std::vector<PixelSample> sample;
};

/// Builds the stores, fills them and measures (a few seconds per table at the defaults).
PixelReport measure_pixels(const PixelConfig& config);
void print_pixels_markdown(const PixelReport& report, const PixelConfig& config);
nlohmann::json pixels_json(const PixelReport& report);

}  // namespace shmreplay::bench
