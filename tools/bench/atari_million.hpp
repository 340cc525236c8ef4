// tools/bench/atari_million.hpp: shmreplay_bench's --atari-1e6 mode (atari_million.cpp; docs/benchmarks/pixels.md,
// "A buffer of 10^6 Atari steps"). Called by main.cpp. Never in CI.
#pragma once

#include <cstdint>
#include <string>

namespace shmreplay::bench {

/// --atari-1e6: a buffer of `envs` x `capacity` Atari steps with obs stacked, created, filled with Atari-like
/// steps and sampled in this process; prints its size, resident memory, fill and sample rates (markdown or JSON).
/// The segment's name is removed right after creation (the mapping stays): nothing is left behind, however the
/// process ends. Needs about 7.3 GB of /dev/shm at the default 16 x 62,500.
struct AtariMillionConfig {
  uint64_t envs = 16;
  uint64_t capacity = 62500;
  double seconds = 0.5;
  uint32_t trials = 5;
  bool json = false;
  bool populate = true;  ///< fault the segment's pages in at creation (Populate::always), as a large buffer should
};
int run_atari_million(const AtariMillionConfig& config, const std::string& command);

}  // namespace shmreplay::bench
