// tools/bench/results.cpp: the benchmark's figures from its workers' trials (results.hpp). Called by main.cpp
// (summarize), targets.cpp and report.cpp (find, progress).
#include "results.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shmreplay::bench {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One worker in trial t: units per wall second and per CPU second, and its share of the wall time on a CPU.
// A worker that was starved is reported over its whole run.
struct Rates {
  double per_s = 0;
  double per_cpu_s = 0;
  double on_cpu = 0;
};

Rates rates(const WorkerTrials& w, std::size_t t) {
  const double units = static_cast<double>(w.late ? w.run_units : w.units[t]);
  const double wall = w.late ? w.run_seconds : w.seconds[t];
  const double cpu = w.late ? w.run_cpu_seconds : w.cpu_seconds[t];
  return {wall > 0 ? units / wall : 0, cpu > 0 ? units / cpu : 0, wall > 0 ? cpu / wall : 0};
}

}  // namespace

Stat stat_of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {median, v.front(), v.back()};
}

// Half the min-max range in % of the median.
double spread_pct(const Stat& s) {
  return s.median > 0 && std::isfinite(s.hi) ? (s.hi - s.lo) / 2 / s.median * 100 : 0;
}

const Result* find(const std::vector<Result>& results, const std::string& section, const std::string& step,
                   const std::string& mode, uint32_t writers, uint32_t length, Impl impl) {
  for (const Result& r : results) {
    if (r.section == section && r.step == step && r.mode == mode && r.writers == writers && r.length == length &&
        r.impl == impl) {
      return &r;
    }
  }
  return nullptr;
}

// Under contention, each side's rate as a fraction of its rate alone (the 2-writer push without a sampler; the
// sampler without writers), summed: 2 would mean neither side lost anything. nullopt without the solo runs.
std::optional<double> progress(const std::vector<Result>& results, const Result& r) {
  const Result* writers = find(results, "push", r.step, r.mode, r.writers, 0, r.impl);
  const Result* sampler = find(results, "sample", r.step, r.mode, 0, r.length, r.impl);
  if (!writers || !sampler || !(writers->steps_per_s.median > 0) || !(sampler->rows_per_s.median > 0)) {
    return std::nullopt;
  }
  return r.steps_per_s.median / writers->steps_per_s.median + r.rows_per_s.median / sampler->rows_per_s.median;
}

Result summarize(Result r, const std::vector<WorkerTrials>& workers, uint32_t trials) {
  std::vector<double> ns, cpu_ns, on_cpu, steps, gbs, rows, rows_cpu, sgbs, s_on_cpu;
  const std::size_t nw = r.writers;
  for (std::size_t t = 0; t < trials; ++t) {
    if (nw > 0) {
      double sum = 0, ns_sum = 0, cpu_ns_sum = 0, on_cpu_sum = 0;
      for (std::size_t w = 0; w < nw; ++w) {
        const Rates x = rates(workers[w], t);
        sum += x.per_s;
        ns_sum += x.per_s > 0 ? 1e9 / x.per_s : kInf;
        cpu_ns_sum += x.per_cpu_s > 0 ? 1e9 / x.per_cpu_s : kInf;
        on_cpu_sum += x.on_cpu;
      }
      const auto n = static_cast<double>(nw);
      ns.push_back(ns_sum / n);
      cpu_ns.push_back(cpu_ns_sum / n);
      on_cpu.push_back(on_cpu_sum / n);
      steps.push_back(sum);
      gbs.push_back(sum * static_cast<double>(r.step_bytes) * 1e-9);
    }
    if (r.section == "sample") {
      const Rates x = rates(workers[nw], t);
      rows.push_back(x.per_s);
      rows_cpu.push_back(x.per_cpu_s);
      sgbs.push_back(x.per_s * r.length * static_cast<double>(r.step_bytes) * 1e-9);
      s_on_cpu.push_back(x.on_cpu);
    }
  }
  for (std::size_t w = 0; w < nw; ++w) r.writers_late = r.writers_late || workers[w].late;
  if (nw > 0) {
    r.ns_per_step = stat_of(ns);
    r.cpu_ns_per_step = stat_of(cpu_ns);
    r.writer_on_cpu = stat_of(on_cpu);
    r.steps_per_s = stat_of(steps);
    r.push_gbs = stat_of(gbs);
  }
  if (r.section == "sample") {
    r.rows_per_s = stat_of(rows);
    r.rows_per_cpu_s = stat_of(rows_cpu);
    r.sample_gbs = stat_of(sgbs);
    r.sampler_on_cpu = stat_of(s_on_cpu);
    r.sampler_late = workers[nw].late;
    r.retries_per_row = workers[nw].total_units > 0
                            ? static_cast<double>(workers[nw].retries) / static_cast<double>(workers[nw].total_units)
                            : 0;
  }
  return r;
}

}  // namespace shmreplay::bench
