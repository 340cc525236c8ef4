// tools/bench/call_latency.hpp: the latency of single calls (shmreplay_bench_scaling's sample calls): each call
// timed with steady_clock and recorded in 32 bits, with a flag saying whether the thread was preempted during it
// (an involuntary context switch, getrusage(RUSAGE_THREAD) before and after) and whether it took a page fault, so
// that a tail can be split into the calls that waited for a CPU and those that did not; and the percentiles of a set
// of records.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace shmreplay::bench {

/// One call: bits 0-29 its wall time in ns (at most 2^30 - 1, 1.07 s), bit 30 set when it took a page fault (minor
/// or major), bit 31 when it was preempted.
using CallRecord = uint32_t;
inline constexpr CallRecord kPreempted = 1u << 31;
inline constexpr CallRecord kFaulted = 1u << 30;
inline constexpr CallRecord kNsMask = kFaulted - 1;

/// This thread's involuntary context switches and page faults so far.
struct ThreadEvents {
  long switches = 0, faults = 0;
};
inline ThreadEvents thread_events() noexcept {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return {u.ru_nivcsw, u.ru_minflt + u.ru_majflt};
}

/// Runs op() and returns its record. The two getrusage calls (about a µs together in a VM) lie outside the timed
/// interval; a preemption during them is counted against the call (rare: they are short).
template <class Op>
CallRecord timed_call(Op&& op) {
  using Clock = std::chrono::steady_clock;
  const ThreadEvents before = thread_events();
  const auto t0 = Clock::now();
  op();
  const auto t1 = Clock::now();
  const ThreadEvents after = thread_events();
  const auto ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  return static_cast<CallRecord>(std::min<uint64_t>(ns, kNsMask)) |
         (after.switches != before.switches ? kPreempted : 0u) | (after.faults != before.faults ? kFaulted : 0u);
}

/// Percentiles of a set of calls, in µs (nearest rank), over all calls and over the calls not preempted.
struct LatencyStats {
  uint64_t calls = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
  double preempted_share = 0;                    ///< calls that were preempted, of all
  double faulted_share = 0;                      ///< calls that took a page fault, of all
  double quiet_p50_us = 0, quiet_p99_us = 0, quiet_p999_us = 0;  ///< over the calls not preempted
  /// The goal for a sample call: p99 within 2x of p50.
  bool tail_met() const noexcept { return calls > 0 && p99_us <= 2 * p50_us; }
};

/// The value at quantile q (0 < q <= 1) of sorted `v`, nearest rank; 0 when empty.
inline double quantile_us(const std::vector<uint32_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return static_cast<double>(sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1]) * 1e-3;
}

inline LatencyStats latency_stats(const std::vector<CallRecord>& records) {
  LatencyStats s;
  std::vector<uint32_t> all, quiet;
  all.reserve(records.size());
  uint64_t faulted = 0;
  for (const CallRecord r : records) {
    faulted += (r & kFaulted) != 0 ? 1 : 0;
    all.push_back(r & kNsMask);
    if ((r & kPreempted) == 0) quiet.push_back(r & kNsMask);
  }
  std::sort(all.begin(), all.end());
  std::sort(quiet.begin(), quiet.end());
  s.calls = all.size();
  if (all.empty()) return s;
  s.p50_us = quantile_us(all, 0.5);
  s.p99_us = quantile_us(all, 0.99);
  s.p999_us = quantile_us(all, 0.999);
  s.max_us = static_cast<double>(all.back()) * 1e-3;
  s.preempted_share = 1.0 - static_cast<double>(quiet.size()) / static_cast<double>(all.size());
  s.faulted_share = static_cast<double>(faulted) / static_cast<double>(all.size());
  s.quiet_p50_us = quantile_us(quiet, 0.5);
  s.quiet_p99_us = quantile_us(quiet, 0.99);
  s.quiet_p999_us = quantile_us(quiet, 0.999);
  return s;
}

/// Like median_rate.hpp's interleaved_rates, with every call of the trials timed alone (timed_call) and recorded in
/// records[op] (the warm-up's are not): runs every op for `warm`, then `trials` rounds in each of which every op runs,
/// in turn, until its calls add up to `seconds`. Returns per op its units per second of call time in each round.
/// For calls of a µs or more (each call costs two getrusage and two clock reads besides).
inline std::vector<std::vector<double>> interleaved_timed_rates(double seconds, uint32_t trials,
                                                                std::chrono::milliseconds warm,
                                                                const std::vector<std::function<uint64_t()>>& ops,
                                                                std::vector<std::vector<CallRecord>>& records) {
  using Clock = std::chrono::steady_clock;
  for (const auto& op : ops) {
    for (const auto until = Clock::now() + warm; Clock::now() < until;) op();
  }
  records.assign(ops.size(), {});
  std::vector<std::vector<double>> rates(ops.size());
  const auto trial_ns = static_cast<uint64_t>(seconds * 1e9);
  for (uint32_t t = 0; t < trials; ++t) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      uint64_t units = 0, ns = 0;
      do {
        uint64_t u = 0;
        const CallRecord r = timed_call([&] { u = ops[i](); });
        units += u;
        ns += r & kNsMask;
        records[i].push_back(r);
      } while (ns < trial_ns);
      rates[i].push_back(static_cast<double>(units) / (static_cast<double>(ns) * 1e-9));
    }
  }
  return rates;
}

}  // namespace shmreplay::bench
