// shmreplay_bench: push and sample throughput of shmreplay, measured in one run against the physical limit
// (plain memcpy of the same bytes in the same pattern) and against a lock-based baseline (the same layout
// guarded by one Boost.Interprocess process-shared mutex). Prints a markdown table (or JSON with --json).
//
//   shmreplay_bench                        the full run (about a minute and a half)
//   shmreplay_bench --quick                tiny sizes and durations: a smoke run for CI
//   shmreplay_bench --only push --step small --trials 9 --seconds 0.5
//   shmreplay_bench --json > results.json
//
// Every writer and sampler is a forked process that opens the segment by name (harness.hpp); each figure is the
// median over trials, with the spread (half the min-max range, in % of the median). See docs/benchmarks.md.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/version.hpp"
#include "workloads.hpp"

namespace {

using namespace shmreplay::bench;
using shmreplay::Schema;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Options {
  bool quick = false;
  bool json = false;
  double seconds = 0.2;
  uint32_t trials = 5;
  std::vector<std::string> only;   // push, sample, contention
  std::vector<std::string> steps;  // small, atari
  std::size_t batch = 256;
};

// The median of the trials and the range around it.
struct Stat {
  double median = 0;
  double lo = 0;
  double hi = 0;
};

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

std::string pct(double x) { return fmt::format("{:.0f}%", x * 100); }

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

// -- Formatting ---------------------------------------------------------------------------------------------------

std::string num(double x) {
  if (!std::isfinite(x)) return "inf";
  const double a = std::fabs(x);
  if (a >= 1e9) return fmt::format("{:.2f}G", x / 1e9);
  if (a >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (a >= 1e4) return fmt::format("{:.1f}k", x / 1e3);
  if (a >= 100) return fmt::format("{:.0f}", x);
  if (a >= 10) return fmt::format("{:.1f}", x);
  return fmt::format("{:.2f}", x);
}

std::string with_spread(const Stat& s, bool late = false) {
  if (late) return num(s.median) + " (starved)";
  return fmt::format("{} ±{:.0f}%", num(s.median), spread_pct(s));
}

std::string ratio(double ours, double other, bool times) {
  if (!(other > 0)) return ours > 0 ? "inf" : "n/a";
  const double x = ours / other;
  if (!std::isfinite(x)) return "inf";
  return times ? fmt::format("{:.1f}x", x) : fmt::format("{:.0f}%", x * 100);
}

struct Target {
  std::string target;
  std::string case_;
  std::string measured;
  bool met = false;
};

std::vector<Target> evaluate(const std::vector<Result>& results, const std::vector<std::string>& steps) {
  std::vector<Target> out;
  for (const char* mode : {"batched", "single"}) {
    for (uint32_t w : {1u, 2u}) {
      if (const Result* r = find(results, "push", "small", mode, w, 0, Impl::ours)) {
        out.push_back({"small-step push <= 50 ns/step per writer",
                       fmt::format("{} push, {} writer{}", mode, w, w == 1 ? "" : "s"),
                       fmt::format("{} ns (CPU time {} ns, on-CPU {})", num(r->ns_per_step.median),
                                   num(r->cpu_ns_per_step.median), pct(r->writer_on_cpu.median)),
                       r->ns_per_step.median <= 50});
      }
    }
  }
  for (const char* mode : {"batched", "single"}) {
    for (uint32_t w : {1u, 2u}) {
      const Result* o = find(results, "push", "atari", mode, w, 0, Impl::ours);
      const Result* m = find(results, "push", "atari", mode, w, 0, Impl::memcpy);
      if (o && m) {
        const double x = o->steps_per_s.median / m->steps_per_s.median;
        out.push_back({"Atari-like push >= 70% of memcpy",
                       fmt::format("{} push, {} writer{}", mode, w, w == 1 ? "" : "s"), fmt::format("{:.0f}%", x * 100),
                       x >= 0.7});
      }
    }
  }
  // Issue 18: small rows at the memory system's limit.
  for (const char* mode : {"batched", "single"}) {
    const Result* o = find(results, "push", "small", mode, 1, 0, Impl::ours);
    const Result* m = find(results, "push", "small", mode, 1, 0, Impl::memcpy);
    if (o && m) {
      const double x = o->ns_per_step.median / m->ns_per_step.median;
      out.push_back({"small push within 1.5x of memcpy's time", fmt::format("{} push, 1 writer", mode),
                     fmt::format("{:.2f}x", x), x <= 1.5});
    }
  }
  for (const char* step : {"small", "small-1e7"}) {
    for (uint32_t w : {0u, 2u}) {
      const Result* o = find(results, "sample", step, "batched", w, 1, Impl::ours);
      const Result* m = find(results, "sample", step, "batched", w, 1, Impl::memcpy);
      const Result* p = find(results, "sample", step, "batched", w, 1, Impl::gather);
      if (!o || !m || !p) continue;
      const double xm = o->rows_per_s.median / m->rows_per_s.median;
      const double xp = o->rows_per_s.median / p->rows_per_s.median;
      out.push_back({"flat small sampling >= memcpy gather and >= 80% of the prefetching gather",
                     fmt::format("{}, {} writers", step, w), fmt::format("{:.0f}% / {:.0f}%", xm * 100, xp * 100),
                     xm >= 1.0 && xp >= 0.8});
    }
  }
  // With writers, three busy processes share the cores: the sampler's wall-clock rate is mostly the share of a
  // core the scheduler gave it (its on-CPU column), which moves by tens of % between runs. What the sampler costs
  // is its rate per second of its own CPU time, which is what it runs at with a core to itself; that is the
  // verdict with writers, and the wall-clock ratio is printed beside it.
  for (uint32_t w : {0u, 2u}) {
    const Result* o = find(results, "sample", "small", "batched", w, 64, Impl::ours);
    const Result* m = find(results, "sample", "small", "batched", w, 64, Impl::memcpy);
    if (o && m) {
      const double x = o->rows_per_s.median / m->rows_per_s.median;
      const double c = o->rows_per_cpu_s.median / m->rows_per_cpu_s.median;
      out.push_back({"small sequences (64 steps) >= 90% of memcpy", fmt::format("small, {} writers", w),
                     w == 0 ? fmt::format("{:.0f}%", x * 100)
                            : fmt::format("{:.0f}% per sampler CPU-second ({:.0f}% in wall-clock time)", c * 100,
                                          x * 100),
                     (w == 0 ? x : c) >= 0.9});
    }
  }
  for (const std::string& step : steps) {
    const Result* o = find(results, "sample", step, "batched", 2, 64, Impl::ours);
    const Result* m = find(results, "sample", step, "batched", 2, 64, Impl::memcpy);
    if (o && m) {
      const double x = o->sample_gbs.median / m->sample_gbs.median;
      out.push_back({"sampling, sequence length 64, 2 writers pushing: >= 60% of memcpy", step,
                     fmt::format("{:.0f}%", x * 100), x >= 0.6});
    }
  }
  for (const std::string& step : steps) {
    for (uint32_t L : {1u, 64u}) {
      const Result* o = find(results, "sample", step, "batched", 2, L, Impl::ours);
      const Result* m = find(results, "sample", step, "batched", 2, L, Impl::mutex);
      if (!o || !m) continue;
      const double s = o->sample_gbs.median / m->sample_gbs.median;
      const double w = o->steps_per_s.median / m->steps_per_s.median;
      const std::string name = ">= 3x the mutex baseline under contention (2 writers + 1 sampler)";
      out.push_back({name, fmt::format("{}, seq {}: sampler", step, L),
                     ratio(o->sample_gbs.median, m->sample_gbs.median, true), s >= 3});
      out.push_back({name, fmt::format("{}, seq {}: writers", step, L),
                     ratio(o->steps_per_s.median, m->steps_per_s.median, true), !(w < 3)});
      const auto po = progress(results, *o);
      const auto pm = progress(results, *m);
      if (po && pm) {
        out.push_back({name, fmt::format("{}, seq {}: progress of both sides", step, L),
                       fmt::format("{:.2f} vs {:.2f}: {}", *po, *pm, ratio(*po, *pm, true)), *po >= 3 * *pm});
      }
    }
  }
  return out;
}

struct Config {
  std::vector<Geometry> geometries;
  std::size_t batch = 256;
  double warmup_s = 0.1;
  double trial_s = 0.2;
  double patience_s = 0.5;
  uint32_t trials = 5;
};

void print_markdown(const std::string& command, const MachineInfo& m, const Config& cfg,
                    const std::vector<Result>& results, const std::vector<Target>& targets) {
  fmt::print("## shmreplay_bench\n\n");
  fmt::print("- command: `{}`\n", command);
  fmt::print("- cpu: {}; {} cores online ({} configured); {}; {}\n", m.cpu, m.cores_online, m.cores_configured,
             m.caches.empty() ? "caches unknown" : m.caches, m.virtualization);
  fmt::print("- memory: {:.1f} GiB; {} free: {:.1f} GiB\n", m.memory_gib, shmreplay::shm_directory(), m.shm_free_gib);
  fmt::print("- kernel: {}; load average at start: {}\n", m.kernel, m.load_average);
  fmt::print("- compiler: {}; build type {}; sanitizers: {}; shmreplay {}\n", m.compiler, m.build_type,
             m.sanitizers, shmreplay::kVersion);
  fmt::print("- method: every writer and sampler is a forked process that opens its segment by name; {:.2f} s "
             "warm-up, then {} trial{} of >= {:.2f} s; figures are the median over trials ± half the min-max "
             "range; GB = 1e9 bytes\n",
             cfg.warmup_s, cfg.trials, cfg.trials == 1 ? "" : "s", cfg.trial_s);
  for (const Geometry& g : cfg.geometries) {
    fmt::print("- {} step: `{}` = {} B; {} envs x {} steps = {:.1f} MB per store; {} envs per writer (a batched "
               "push writes all of them in one call)\n",
               g.label, g.schema.to_string(), g.schema.step_bytes(), g.num_envs, g.capacity,
               static_cast<double>(g.data_bytes()) * 1e-6, g.envs_per_writer);
  }
  fmt::print("- sampling: batch {} rows, replay view, distribution power 1; the memcpy reference copies rows of the "
             "same length from fresh uniform random positions (splitmix64); the mutex baseline holds its lock for "
             "each whole push or sample call\n\n",
             cfg.batch);

  bool any_push = false;
  for (const Result& r : results) any_push = any_push || r.section == "push";
  if (any_push) {
    fmt::print("### Push (writers alone)\n\n");
    fmt::print("| step | push | writers | ours ns/step/writer | ours CPU ns/step | ours GB/s | memcpy ns/step/writer | "
               "memcpy GB/s | ours/memcpy | mutex ns/step/writer | mutex GB/s | ours/mutex | on-CPU ours/memcpy/mutex "
               "|\n");
    fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Result& o : results) {
      if (o.section != "push" || o.impl != Impl::ours) continue;
      const Result* c = find(results, "push", o.step, o.mode, o.writers, 0, Impl::memcpy);
      const Result* x = find(results, "push", o.step, o.mode, o.writers, 0, Impl::mutex);
      if (!c || !x) continue;
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{}/{} |\n", o.step, o.mode,
                 o.writers, with_spread(o.ns_per_step), num(o.cpu_ns_per_step.median), num(o.push_gbs.median),
                 with_spread(c->ns_per_step), num(c->push_gbs.median),
                 ratio(o.steps_per_s.median, c->steps_per_s.median, false), with_spread(x->ns_per_step),
                 num(x->push_gbs.median), ratio(o.steps_per_s.median, x->steps_per_s.median, true),
                 pct(o.writer_on_cpu.median), pct(c->writer_on_cpu.median), pct(x->writer_on_cpu.median));
    }
    fmt::print("\n");
  }

  bool any_sample = false;
  for (const Result& r : results) any_sample = any_sample || r.section == "sample";
  if (any_sample) {
    fmt::print("### Sample (batch {}; with 0 or 2 writer processes pushing batched at full speed)\n\n", cfg.batch);
    fmt::print("gather: the prefetching gather of the same rows from the memcpy store (the limit of a copy).\n\n");
    fmt::print("| step | seq len | writers | ours rows/s | ours GB/s | memcpy GB/s | ours/memcpy | gather rows/s | "
               "gather GB/s | ours/gather | mutex rows/s | mutex GB/s | ours/mutex | ours retries/row | sampler "
               "on-CPU ours/memcpy/gather/mutex | ours/memcpy per sampler CPU-s |\n");
    fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Result& o : results) {
      if (o.section != "sample" || o.impl != Impl::ours) continue;
      const Result* c = find(results, "sample", o.step, o.mode, o.writers, o.length, Impl::memcpy);
      const Result* p = find(results, "sample", o.step, o.mode, o.writers, o.length, Impl::gather);
      const Result* x = find(results, "sample", o.step, o.mode, o.writers, o.length, Impl::mutex);
      if (!c || !p || !x) continue;
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2g} | {}/{}/{}/{} | {} |\n",
                 o.step, o.length, o.writers, with_spread(o.rows_per_s, o.sampler_late), num(o.sample_gbs.median),
                 with_spread(c->sample_gbs, c->sampler_late), ratio(o.sample_gbs.median, c->sample_gbs.median, false),
                 with_spread(p->rows_per_s, p->sampler_late), num(p->sample_gbs.median),
                 ratio(o.sample_gbs.median, p->sample_gbs.median, false),
                 with_spread(x->rows_per_s, x->sampler_late), num(x->sample_gbs.median),
                 ratio(o.sample_gbs.median, x->sample_gbs.median, true), o.retries_per_row,
                 pct(o.sampler_on_cpu.median), pct(c->sampler_on_cpu.median), pct(p->sampler_on_cpu.median),
                 pct(x->sampler_on_cpu.median), ratio(o.rows_per_cpu_s.median, c->rows_per_cpu_s.median, false));
    }
    fmt::print("\n");

    fmt::print("### Contention: 2 writer processes (batched) and 1 sampler at once, both sides\n\n");
    fmt::print("Progress: each side's rate as a fraction of its rate alone (the 2-writer push without a sampler, "
               "the sampler without writers), summed; 2 would mean that neither side slowed the other.\n\n");
    fmt::print("| step | seq len | ours sampler GB/s | mutex sampler GB/s | ours/mutex | ours writer ns/step | "
               "mutex writer ns/step | ours/mutex | ours progress | mutex progress | ours/mutex |\n");
    fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Result& o : results) {
      if (o.section != "sample" || o.impl != Impl::ours || o.writers != 2) continue;
      const Result* x = find(results, "sample", o.step, o.mode, o.writers, o.length, Impl::mutex);
      if (!x) continue;
      const auto po = progress(results, o);
      const auto px = progress(results, *x);
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", o.step, o.length,
                 with_spread(o.sample_gbs, o.sampler_late), with_spread(x->sample_gbs, x->sampler_late),
                 ratio(o.sample_gbs.median, x->sample_gbs.median, true),
                 with_spread(o.ns_per_step, o.writers_late), with_spread(x->ns_per_step, x->writers_late),
                 ratio(o.steps_per_s.median, x->steps_per_s.median, true),
                 po ? fmt::format("{:.2f}", *po) : "n/a", px ? fmt::format("{:.2f}", *px) : "n/a",
                 po && px ? ratio(*po, *px, true) : "n/a");
    }
    fmt::print("\n");
  }

  if (!targets.empty()) {
    fmt::print("### Targets\n\n| target | case | measured | verdict |\n|---|---|---:|---|\n");
    for (const Target& t : targets) {
      fmt::print("| {} | {} | {} | {} |\n", t.target, t.case_, t.measured, t.met ? "met" : "**missed**");
    }
    fmt::print("\n");
  }
  fmt::print("(starved): a worker missed a trial boundary (it waited for the lock for longer than {:.2f} s); its "
             "figure is over the whole run.\n",
             cfg.patience_s);
}

nlohmann::json stat_json(const Stat& s) {
  auto finite = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"median", finite(s.median)}, {"min", finite(s.lo)}, {"max", finite(s.hi)}};
}

void print_json(const std::string& command, const MachineInfo& m, const Config& cfg,
                const std::vector<Result>& results, const std::vector<Target>& targets) {
  nlohmann::json j;
  j["command"] = command;
  j["machine"] = {{"cpu", m.cpu},
                  {"cores_online", m.cores_online},
                  {"cores_configured", m.cores_configured},
                  {"caches", m.caches},
                  {"virtualization", m.virtualization},
                  {"memory_gib", m.memory_gib},
                  {"shm_free_gib", m.shm_free_gib},
                  {"kernel", m.kernel},
                  {"compiler", m.compiler},
                  {"build_type", m.build_type},
                  {"sanitizers", m.sanitizers},
                  {"load_average", m.load_average},
                  {"shmreplay", shmreplay::kVersion}};
  nlohmann::json geos = nlohmann::json::array();
  for (const Geometry& g : cfg.geometries) {
    geos.push_back({{"label", g.label},
                    {"schema", g.schema.to_string()},
                    {"step_bytes", g.schema.step_bytes()},
                    {"num_envs", g.num_envs},
                    {"capacity", g.capacity},
                    {"envs_per_writer", g.envs_per_writer}});
  }
  j["config"] = {{"batch", cfg.batch},           {"warmup_s", cfg.warmup_s}, {"trial_s", cfg.trial_s},
                 {"trials", cfg.trials},         {"patience_s", cfg.patience_s},
                 {"distribution_power", 1.0},    {"steps", geos}};
  nlohmann::json rs = nlohmann::json::array();
  for (const Result& r : results) {
    nlohmann::json x = {{"section", r.section}, {"step", r.step},        {"impl", to_string(r.impl)},
                        {"writers", r.writers}, {"writer_mode", r.mode}, {"step_bytes", r.step_bytes}};
    if (r.writers > 0) {
      x["writer_ns_per_step"] = stat_json(r.ns_per_step);
      x["writer_cpu_ns_per_step"] = stat_json(r.cpu_ns_per_step);
      x["writer_on_cpu"] = stat_json(r.writer_on_cpu);
      x["steps_per_s"] = stat_json(r.steps_per_s);
      x["push_gb_per_s"] = stat_json(r.push_gbs);
      x["writers_starved"] = r.writers_late;
    }
    if (r.section == "sample") {
      x["sequence_length"] = r.length;
      x["batch"] = cfg.batch;
      x["rows_per_s"] = stat_json(r.rows_per_s);
      x["rows_per_cpu_s"] = stat_json(r.rows_per_cpu_s);
      x["sample_gb_per_s"] = stat_json(r.sample_gbs);
      x["retries_per_row"] = r.retries_per_row;
      x["sampler_on_cpu"] = stat_json(r.sampler_on_cpu);
      if (r.writers > 0) {
        const auto p = progress(results, r);
        x["progress"] = p ? nlohmann::json(*p) : nlohmann::json(nullptr);
      }
      x["sampler_starved"] = r.sampler_late;
    }
    rs.push_back(x);
  }
  j["results"] = rs;
  nlohmann::json ts = nlohmann::json::array();
  for (const Target& t : targets) {
    ts.push_back({{"target", t.target}, {"case", t.case_}, {"measured", t.measured}, {"met", t.met}});
  }
  j["targets"] = ts;
  fmt::print("{}\n", j.dump(2));
}

std::vector<Geometry> make_geometries(const Options& o) {
  std::vector<Geometry> out;
  for (const std::string& step : {std::string("small"), std::string("small-1e7"), std::string("atari")}) {
    if (!o.steps.empty() && std::find(o.steps.begin(), o.steps.end(), step) == o.steps.end()) continue;
    if (o.steps.empty() && o.quick && step == "small-1e7") continue;  // the smoke run keeps to the two kinds
    Geometry g;
    g.label = step;
    if (step == "small") {
      g.schema = Schema::parse("obs:f32[17] action:f32[6] reward:f32 done:bool");  // MuJoCo-like
      g.capacity = o.quick ? 1024 : 65536;
    } else if (step == "small-1e7") {  // the same step, 10x the stored steps (sampling only)
      g.schema = Schema::parse("obs:f32[17] action:f32[6] reward:f32 done:bool");
      g.capacity = o.quick ? 2048 : 655360;
      g.sample_only = true;
    } else {
      g.schema = Schema::parse("obs:u8[84,84,4] action:i32 reward:f32 done:bool");  // Atari-like
      g.capacity = o.quick ? 128 : 1024;
    }
    g.num_envs = o.quick ? 4 : 16;
    g.envs_per_writer = g.num_envs / 2;
    out.push_back(std::move(g));
  }
  return out;
}

bool wanted(const Options& o, const char* what) {
  return o.only.empty() || std::find(o.only.begin(), o.only.end(), what) != o.only.end();
}

int run(const Options& o, const std::string& command) {
  install_signal_handlers();
  const MachineInfo machine = describe_machine();
  Config cfg;
  cfg.geometries = make_geometries(o);
  cfg.batch = o.batch;
  cfg.trials = o.trials;
  cfg.trial_s = o.seconds;
  cfg.warmup_s = std::max(o.seconds / 2, o.quick ? 0.005 : 0.1);
  cfg.patience_s = std::max(5 * o.seconds, o.quick ? 0.05 : 0.5);
  std::vector<std::string> steps;
  for (const Geometry& g : cfg.geometries) steps.push_back(g.label);

  std::vector<Result> results;
  auto measure = [&](Result r, std::vector<Body> bodies, std::vector<std::string> names) {
    fmt::print(stderr, "shmreplay_bench: {} {} {} writers={}{} {} ...", r.section, r.step, r.mode, r.writers,
               r.section == "sample" ? fmt::format(" seq={}", r.length) : "", to_string(r.impl));
    std::fflush(stderr);
    std::vector<WorkerTrials> trials;
    {
      Team team(std::move(bodies), std::move(names));
      trials = team.run(cfg.warmup_s, cfg.trial_s, cfg.trials, cfg.patience_s);
    }
    r = summarize(std::move(r), trials, cfg.trials);
    if (r.section == "push") {
      fmt::print(stderr, " {} ns/step/writer\n", num(r.ns_per_step.median));
    } else {
      fmt::print(stderr, " {} GB/s\n", num(r.sample_gbs.median));
    }
    results.push_back(std::move(r));
  };

  const std::string prefix = fmt::format("shmreplay-bench-{}", ::getpid());
  std::vector<std::string> all_paths;
  for (const Geometry& g : cfg.geometries) {
    for (const std::string& path : Stores::paths(g, fmt::format("{}-{}", prefix, g.label))) all_paths.push_back(path);
  }
  const Janitor janitor(all_paths);
  uint64_t seed = 1;
  for (const Geometry& g : cfg.geometries) {
    fmt::print(stderr, "shmreplay_bench: creating and filling the {} stores ({:.1f} MB each)\n", g.label,
               static_cast<double>(g.data_bytes()) * 1e-6);
    const Stores stores(g, fmt::format("{}-{}", prefix, g.label));  // removes its segments when it goes
    if (wanted(o, "push") && !g.sample_only) {
      for (const PushMode mode : {PushMode::batched, PushMode::single}) {
        for (const uint32_t writers : {1u, 2u}) {
          for (const Impl impl : kImpls) {
            Result r{.section = "push", .step = g.label, .mode = to_string(mode), .writers = writers, .impl = impl,
                     .step_bytes = g.schema.step_bytes()};
            std::vector<Body> bodies;
            std::vector<std::string> names;
            for (uint32_t w = 0; w < writers; ++w) {
              bodies.push_back(push_body(impl, g, stores, mode, w * g.envs_per_writer));
              names.push_back(fmt::format("{} writer {}", to_string(impl), w));
            }
            measure(std::move(r), std::move(bodies), std::move(names));
          }
        }
      }
    }
    const bool sample = wanted(o, "sample");
    if (sample || wanted(o, "contention")) {
      for (const uint32_t length : {1u, 64u}) {
        for (const uint32_t writers : {0u, 2u}) {
          if (writers == 0 && !sample) continue;
          for (const Impl impl : kSampleImpls) {
            Result r{.section = "sample", .step = g.label, .mode = "batched", .writers = writers, .length = length,
                     .impl = impl, .step_bytes = g.schema.step_bytes()};
            std::vector<Body> bodies;
            std::vector<std::string> names;
            for (uint32_t w = 0; w < writers; ++w) {
              const Impl writer = impl == Impl::gather ? Impl::memcpy : impl;  // gather reads memcpy's store
              bodies.push_back(push_body(writer, g, stores, PushMode::batched, w * g.envs_per_writer));
              names.push_back(fmt::format("{} writer {}", to_string(writer), w));
            }
            bodies.push_back(sample_body(impl, g, stores, cfg.batch, length, seed++));
            names.push_back(fmt::format("{} sampler", to_string(impl)));
            measure(std::move(r), std::move(bodies), std::move(names));
          }
        }
      }
    }
  }
  const std::vector<Target> targets = evaluate(results, steps);
  if (o.json) {
    print_json(command, machine, cfg, results, targets);
  } else {
    print_markdown(command, machine, cfg, results, targets);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench: push and sample throughput of shmreplay against plain memcpy (the physical "
               "limit) and a Boost.Interprocess mutex baseline, measured in one run");
  app.add_flag("--quick", o.quick, "Tiny stores, batch 32, one 10 ms trial: a smoke run for CI (a few seconds)");
  app.add_flag("--json", o.json, "Print the results as JSON instead of markdown tables");
  app.add_option("--seconds", o.seconds, "Duration of one trial (default 0.2; --quick: 0.01)")
      ->check(CLI::Range(0.001, 60.0));
  app.add_option("--trials", o.trials, "Trials per measurement; the median is reported (default 5; --quick: 1)")
      ->check(CLI::Range(1u, kMaxTrials));
  app.add_option("--only", o.only, "Run only some sections: push, sample, contention (repeatable)")
      ->check(CLI::IsMember({"push", "sample", "contention"}))
      ->type_name("SECTION");
  app.add_option("--step", o.steps, "Run only some step kinds: small (MuJoCo-like, 10^6 stored steps), small-1e7 (the same, 10^7 stored "
                 "steps, sampling only), atari (repeatable)")
      ->check(CLI::IsMember({"small", "small-1e7", "atari"}))
      ->type_name("KIND");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is 0; a usage error is 2, as for the shmreplay CLI
  }
  if (o.quick) {
    if (app.count("--seconds") == 0) o.seconds = 0.01;
    if (app.count("--trials") == 0) o.trials = 1;
    o.batch = 32;
  }
  std::string command = "shmreplay_bench";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  try {
    return run(o, command);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "\nshmreplay_bench: error: {}\n", e.what());
    return 1;
  }
}
