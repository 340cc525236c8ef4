// tools/bench/median_rate.hpp: the single-process benchmarks' measurement (shmreplay_bench_priorities,
// _rate_limit, _sample_cost): units per second of an operation, the median over trials; and for comparisons, the
// trials of several operations interleaved, so that the machine's noise falls on all of them alike.
#pragma once

#include <time.h>

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

/// The calling thread's CPU time, in seconds.
inline double thread_cpu_seconds() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// Runs every op of `ops` for `warm` first, then `trials` rounds in each of which every op runs for `seconds`, in
/// turn. Returns per op its units per second in each round (rates[op][round]); `cpu_rates`, when given, gets the
/// same per second of the thread's CPU time (what an op costs, whatever share of a core the thread got: for
/// runs beside other busy processes).
inline std::vector<std::vector<double>> interleaved_rates(double seconds, uint32_t trials,
                                                          std::chrono::milliseconds warm,
                                                          const std::vector<std::function<uint64_t()>>& ops,
                                                          std::vector<std::vector<double>>* cpu_rates = nullptr) {
  using Clock = std::chrono::steady_clock;
  for (const auto& op : ops) {
    for (const auto until = Clock::now() + warm; Clock::now() < until;) op();
  }
  std::vector<std::vector<double>> rates(ops.size());
  if (cpu_rates != nullptr) cpu_rates->assign(ops.size(), {});
  for (uint32_t t = 0; t < trials; ++t) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      uint64_t units = 0;
      const double cpu_start = thread_cpu_seconds();
      const auto start = Clock::now();
      const auto until = start + std::chrono::duration<double>(seconds);
      do {
        units += ops[i]();
      } while (Clock::now() < until);
      const auto u = static_cast<double>(units);
      rates[i].push_back(u / std::chrono::duration<double>(Clock::now() - start).count());
      if (cpu_rates != nullptr) (*cpu_rates)[i].push_back(u / std::max(thread_cpu_seconds() - cpu_start, 1e-9));
    }
  }
  return rates;
}

/// An operation measured with an untimed preparation before each call (what the caller does between calls, say an
/// env worker writing the next step's observations): interleaved_prepared_rates times `op` alone.
struct PreparedOp {
  std::function<void()> prepare;
  std::function<uint64_t()> op;
};

/// interleaved_rates for PreparedOps: every round runs each op, in turn, until its calls add up to `seconds` of
/// op time (the preparations not counted); returns per op its units per second of op time in each round. The clock
/// is read around every call: for calls of a microsecond or more.
inline std::vector<std::vector<double>> interleaved_prepared_rates(double seconds, uint32_t trials,
                                                                   std::chrono::milliseconds warm,
                                                                   const std::vector<PreparedOp>& ops) {
  using Clock = std::chrono::steady_clock;
  for (const auto& op : ops) {
    for (const auto until = Clock::now() + warm; Clock::now() < until;) {
      op.prepare();
      op.op();
    }
  }
  std::vector<std::vector<double>> rates(ops.size());
  const auto trial = std::chrono::duration<double>(seconds);
  for (uint32_t t = 0; t < trials; ++t) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      uint64_t units = 0;
      Clock::duration timed{};
      do {
        ops[i].prepare();
        const auto start = Clock::now();
        units += ops[i].op();
        timed += Clock::now() - start;
      } while (timed < trial);
      rates[i].push_back(static_cast<double>(units) / std::chrono::duration<double>(timed).count());
    }
  }
  return rates;
}

/// The median of `v` (by value: it sorts a copy).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// The median over rounds of a[round] / b[round]: a ratio taken within each round, then the median.
inline double median_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return median(r);
}

}  // namespace shmreplay::bench
