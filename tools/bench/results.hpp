// tools/bench/results.hpp: the benchmark's figures. A Result is one measurement (a section, a step kind, a
// writer mode and count, a sequence length, an implementation), summarized from its workers' trials (harness.hpp)
// into medians and ranges. main.cpp measures, targets.cpp judges, report.cpp prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness.hpp"
#include "workloads.hpp"

namespace shmreplay::bench {

// The median of the trials and the range around it.
struct Stat {
  double median = 0;
  double lo = 0;
  double hi = 0;
};

Stat stat_of(std::vector<double> v);

// Half the min-max range in % of the median.
double spread_pct(const Stat& s);

struct Result {
  std::string section;  // "push" or "sample"
  std::string step;     // the geometry's label
  std::string mode;     // the writers' push mode
  uint32_t writers = 0;
  uint32_t length = 0;  // sequence length (sample section)
  Impl impl = Impl::ours;
  uint64_t step_bytes = 0;
  // The writers' side (writers > 0).
  Stat ns_per_step;      // per writer: the mean over writers of each one's ns per step
  Stat cpu_ns_per_step;  // the same in CPU time: what a step costs while the writer runs
  Stat writer_on_cpu;    // the mean over writers of CPU time / wall time
  Stat steps_per_s;      // all writers together
  Stat push_gbs;
  bool writers_late = false;
  // The sampler's side (sample section).
  Stat rows_per_s;
  Stat rows_per_cpu_s;  // rows per second of the sampler's own CPU time: its cost, whatever share of a core it got
  Stat sample_gbs;
  Stat sampler_on_cpu;
  double retries_per_row = 0;
  bool sampler_late = false;
};

// What one run measured with: the step kinds, the sampler's batch, the durations and the number of trials.
struct Config {
  std::vector<Geometry> geometries;
  std::size_t batch = 256;
  double warmup_s = 0.1;
  double trial_s = 0.2;
  double patience_s = 0.5;
  uint32_t trials = 5;
};

// The result of `section` with these settings, or nullptr.
const Result* find(const std::vector<Result>& results, const std::string& section, const std::string& step,
                   const std::string& mode, uint32_t writers, uint32_t length, Impl impl);

// Under contention, each side's rate as a fraction of its rate alone (the 2-writer push without a sampler; the
// sampler without writers), summed: 2 would mean neither side lost anything. nullopt without the solo runs.
std::optional<double> progress(const std::vector<Result>& results, const Result& r);

// `r` with its figures filled in from its workers' trials (the writers first, then the sampler in the sample
// section).
Result summarize(Result r, const std::vector<WorkerTrials>& workers, uint32_t trials);

}  // namespace shmreplay::bench
