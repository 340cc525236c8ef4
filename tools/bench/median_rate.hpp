// tools/bench/median_rate.hpp: the single-process benchmarks' measurement (shmreplay_bench_priorities,
// _rate_limit, _sample_cost): units per second of an operation, the median over trials.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace shmreplay::bench {

/// Runs `op` (which returns the units of work it did) for `warm` first, then for `trials` trials of `seconds`
/// each, and returns the median units per second.
inline double median_rate(double seconds, uint32_t trials, std::chrono::milliseconds warm,
                          const std::function<uint64_t()>& op) {
  using Clock = std::chrono::steady_clock;
  for (const auto until = Clock::now() + warm; Clock::now() < until;) op();
  std::vector<double> per_s;
  for (uint32_t t = 0; t < trials; ++t) {
    uint64_t units = 0;
    const auto start = Clock::now();
    const auto until = start + std::chrono::duration<double>(seconds);
    do {
      units += op();
    } while (Clock::now() < until);
    per_s.push_back(static_cast<double>(units) / std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(per_s.begin(), per_s.end());
  return per_s[per_s.size() / 2];
}

}  // namespace shmreplay::bench
