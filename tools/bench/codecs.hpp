// tools/bench/codecs.hpp: shmreplay_bench_codecs's figures, shared by its measurement (codecs.cpp) and its tables
// (codecs_report.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codec_kinds.hpp"

namespace shmreplay::bench {

/// What one compressed record holds: one frame; four consecutive frames of an env (a group, aligned to the env's
/// step 0); or the stack of one step as pushed (depth frames, repeats included).
enum class Unit : uint8_t { frame, group, stack };
inline constexpr std::size_t kGroupFrames = 4;

inline const char* unit_name(Unit u) noexcept {
  return u == Unit::frame ? "frame" : u == Unit::group ? "4 frames" : "stack as pushed";
}

/// The figures of one codec, record unit and delta on one source (a frames file). Per step: a frame record stores
/// one step's new frame, a group record four steps', a stack record one step's stack.
struct Figures {
  std::string source;            // the frames file's name (e.g. "Pong-v5")
  bool atari = false;            // a stacked gray source (depth 4), else RGB pixels
  std::string codec;
  Unit unit = Unit::frame;
  Delta delta = Delta::none;
  std::size_t raw_step_bytes = 0;   // the uncompressed bytes per step of this unit
  std::size_t raw_record_bytes = 0; // ... per record
  std::vector<double> step_bytes;   // per record: its compressed bytes / its steps
  std::size_t max_record_bytes = 0; // the largest compressed record
  std::size_t bound_bytes = 0;      // the codec's bound for a record of raw_record_bytes
  double compress_ns = 0, decompress_ns = 0;  // per step, the median over trials
  double compress_x = 0, decompress_x = 0;    // ... over memcpy of one frame per step, the median of per-trial ratios
};

/// One source's memcpy baseline: ns to copy one frame, the median over trials.
struct Baseline {
  std::string source;
  bool atari = false;
  std::size_t frame_bytes = 0;
  double memcpy_ns = 0;
};

/// Prints the benchmark's tables (codecs_report.cpp): per game, the codecs pooled, the deltas, the record units and
/// the worst case; `per_source` prints the pooled tables once per source instead.
void print_codec_tables(const std::string& command, const std::vector<Baseline>& baselines,
                        const std::vector<Figures>& figures, const std::vector<std::string>& codecs, bool per_source,
                        double seconds, uint32_t trials);

}  // namespace shmreplay::bench
