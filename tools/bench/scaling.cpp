// shmreplay_bench_scaling: how shmreplay's rates and latencies change with the stored steps, the writer processes
// and the learner processes, each as a share of the machine's limit measured in the same run (issue 36;
// docs/benchmarks/scaling.md). One command prints a Markdown table per sweep (and, under each, what the measurements
// say of its curves) and, with --plot-dir, draws them (tools/bench/plot_tables.py).
//
//   shmreplay_bench_scaling                             every sweep (about 7 minutes on 2 cores; 10^8 small steps
//                                                       need 9.7 GB of /dev/shm: a size that does not fit is skipped)
//   shmreplay_bench_scaling --quick                     tiny sizes, 10-30 ms trials: ctest's bench_scaling_smoke
//   shmreplay_bench_scaling --sweep size --max-steps 1e7 --plot-dir out
//   shmreplay_bench_scaling --sweep writers --max-writers 16 --env-rate 500
//
// Sweeps (--sweep, repeatable; default all):
//   size      scaling_size.hpp: one process, no writer; small steps 10^3 .. --max-steps and Atari steps with stacked
//             frames 10^3 .. --max-atari-steps; sample (transitions, sequences) and push rates against the
//             prefetching gather, memcpy of the same rows over the same mapping, and memcpy pushes; the latency of
//             every sample call
//   writers   scaling_fleets.hpp: 1, 2, 4, .. --max-writers writer processes of --envs-per-writer envs, at full
//             speed and at --env-rate steps/s per env, beside one learner process
//   learners  1 .. --max-learners learner processes
//   latency   a learner's sample calls beside --latency-writers writer processes at full speed: p50/p99/p99.9 and
//             the goal, p99 within 2x of p50
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench_cli.hpp"
#include "harness.hpp"
#include "perf_probe.hpp"
#include "sched_stat.hpp"
#include "scaling_fleets.hpp"
#include "scaling_plots.hpp"
#include "scaling_report.hpp"
#include "scaling_size.hpp"

namespace {

using namespace shmreplay::bench;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> sweeps;
  bool quick = false;
  double max_steps = 1e8;
  double max_atari_steps = 1e6;
  double seconds = 0.2;
  uint32_t trials = 5;
  uint64_t max_writers = 64;
  uint64_t envs_per_writer = 8;
  double env_rate = 1000;
  uint64_t max_learners = 4;
  std::vector<uint64_t> latency_writers;
  double fleet_steps = 8388608;  // 2^23 small steps, 0.8 GB
  double fleet_seconds = 0.5;
  uint32_t fleet_trials = 3;
  uint32_t rounds = 2;
  double max_memory_gb = 12;
  double spare_gb = 2;
  double ref_gb = 1;
  std::string plot_dir;
  std::string python;
};

// 10^3, 10^4, .. up to `max` (and `max` itself when it is no power of ten).
std::vector<uint64_t> decades(double max) {
  std::vector<uint64_t> v;
  for (double s = 1e3; s <= max * 1.0001; s *= 10) v.push_back(static_cast<uint64_t>(std::llround(s)));
  if (v.empty() || static_cast<double>(v.back()) < max * 0.9999) v.push_back(static_cast<uint64_t>(std::llround(max)));
  return v;
}

std::vector<uint64_t> doublings(uint64_t max) {
  std::vector<uint64_t> v;
  for (uint64_t n = 1; n <= max; n *= 2) v.push_back(n);
  if (v.back() != max) v.push_back(max);
  return v;
}

// The size sweep's settings from the options (its sizes are set per step kind).
SizeConfig size_config(const Options& o) {
  const uint64_t gb = 1'000'000'000ull;
  SizeConfig size;
  size.trial_s = o.seconds;
  size.trials = o.trials;
  size.warm = std::chrono::milliseconds(o.quick ? 1 : 50);
  size.budget_bytes = static_cast<uint64_t>(o.max_memory_gb * static_cast<double>(gb));
  size.spare_bytes = static_cast<uint64_t>(o.spare_gb * static_cast<double>(gb));
  size.ref_store_bytes = static_cast<uint64_t>(o.ref_gb * static_cast<double>(gb));
  size.quick = o.quick;
  return size;
}

// The process sweeps' settings from the options; `sweeps` says which of them run.
FleetConfig fleet_config(const Options& o, const std::set<std::string>& sweeps) {
  FleetConfig fleet;
  fleet.envs_per_writer = o.envs_per_writer;
  fleet.steps = static_cast<uint64_t>(o.fleet_steps);
  fleet.writer_counts = doublings(o.max_writers);
  fleet.env_rate = o.env_rate;
  for (uint64_t m = 1; m <= o.max_learners; ++m) fleet.learner_counts.push_back(m);
  fleet.latency_writers = o.latency_writers;
  fleet.timing = {o.quick ? 0.02 : 0.3, o.fleet_seconds, o.fleet_trials};
  fleet.rounds = o.rounds;
  fleet.writers = sweeps.count("writers") > 0;
  fleet.learners = sweeps.count("learners") > 0;
  fleet.latency = sweeps.count("latency") > 0;
  return fleet;
}

int run(Options o, const std::string& command) {
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  install_signal_handlers();
  const MachineCpu cpu_start = machine_cpu();
  const MachineInfo machine = describe_machine();
  const unsigned cores = machine.cores_online;
  std::set<std::string> sweeps(o.sweeps.begin(), o.sweeps.end());
  if (sweeps.empty() || sweeps.count("all")) sweeps = {"size", "writers", "learners", "latency"};
  std::vector<std::string> names;  // in the order they run
  for (const char* s : {"size", "writers", "learners", "latency"}) {
    if (sweeps.count(s)) names.emplace_back(s);
  }
  if (o.latency_writers.empty()) {
    o.latency_writers = o.quick ? std::vector<uint64_t>{0, 1} : std::vector<uint64_t>{0, std::max(cores, 2u) - 1, 2ull * cores};
  }
  std::sort(o.latency_writers.begin(), o.latency_writers.end());
  o.latency_writers.erase(std::unique(o.latency_writers.begin(), o.latency_writers.end()), o.latency_writers.end());
  SizeConfig size = size_config(o);
  const FleetConfig fleet = fleet_config(o, sweeps);

  Markdown md;
  RunInfo info;
  info.command = command;
  info.sweeps = fmt::format("{}", fmt::join(names, ", "));
  info.timing = fmt::format("size sweep: one process, {} rounds of {:.2f} s per case, interleaved; processes: {} "
                            "round{} per configuration, each run {:.2f} s of warm-up and {} trial{} of {:.2f} s",
                            o.trials, o.seconds, o.rounds, o.rounds == 1 ? "" : "s", fleet.timing.warmup_s,
                            o.fleet_trials, o.fleet_trials == 1 ? "" : "s", o.fleet_seconds);
  info.counters = hardware_counters();
  print_header(md, info, machine);

  if (sweeps.count("size")) {
    size.sizes = decades(o.max_steps);
    fmt::print(stderr, "shmreplay_bench_scaling: [{:.0f} s] size sweep, small steps: {}\n", elapsed(),
               fmt::join(size.sizes, ", "));
    print_size_tables(md, StepKind::small, size, run_size_sweep(StepKind::small, size));
    size.sizes = decades(o.max_atari_steps);
    fmt::print(stderr, "shmreplay_bench_scaling: [{:.0f} s] size sweep, Atari steps: {}\n", elapsed(),
               fmt::join(size.sizes, ", "));
    print_size_tables(md, StepKind::atari, size, run_size_sweep(StepKind::atari, size));
  }
  if (fleet.writers || fleet.learners || fleet.latency) {
    fmt::print(stderr, "shmreplay_bench_scaling: [{:.0f} s] processes\n", elapsed());
    const std::string why = fleet_room(fleet, size.budget_bytes, size.spare_bytes);
    if (!why.empty()) {
      md.print("The writers, learners and latency sweeps were skipped: their buffer {}.\n\n", why);
    } else {
      print_fleet_tables(md, fleet, run_fleet_sweeps(fleet), cores);
    }
  }
  const MachineCpu cpu_end = machine_cpu();
  const auto ticks = static_cast<double>(std::max<uint64_t>(cpu_end.total - cpu_start.total, 1));
  md.print("Run time: {:.0f} s; load average at the end: {}; over the run the machine's CPUs were busy {:.0f}% of the "
           "time (every process, this run's included) and the hypervisor stole {:.1f}%.\n",
           elapsed(), load_now(), 100 * static_cast<double>(cpu_end.busy - cpu_start.busy) / ticks,
           100 * static_cast<double>(cpu_end.steal - cpu_start.steal) / ticks);
  fmt::print(stderr, "shmreplay_bench_scaling: [{:.0f} s] done\n", elapsed());
  if (!o.plot_dir.empty()) {
    return draw_scaling_plots(o.plot_dir, md.text(), o.python.empty() ? default_plot_python() : o.python) == 0 ? 0 : 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_scaling: rates and latencies against the stored steps, the writer processes and the "
               "learner processes, each as a share of the machine's limit measured in the same run");
  app.add_option("--sweep", o.sweeps, "size, writers, learners, latency or all (repeatable; default all)")
      ->check(CLI::IsMember({"size", "writers", "learners", "latency", "all"}));
  app.add_flag("--quick", o.quick, "Tiny sizes, one short trial per figure: a smoke run (seconds)");
  app.add_option("--max-steps", o.max_steps, "Small steps: the largest size, from 10^3 by decades (default 1e8)")
      ->check(CLI::Range(1e3, 1e10));
  app.add_option("--max-atari-steps", o.max_atari_steps, "Atari steps: the largest size (default 1e6)")
      ->check(CLI::Range(1e3, 1e8));
  app.add_option("--seconds", o.seconds, "Size sweep: one trial of a case (default 0.2)")->check(CLI::Range(0.001, 60.0));
  app.add_option("--trials", o.trials, "Size sweep: interleaved rounds (default 5)")->check(CLI::Range(1u, 101u));
  app.add_option("--max-writers", o.max_writers, "Writers sweep: 1, 2, 4, .. up to this (default 64)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{64}));
  app.add_option("--envs-per-writer", o.envs_per_writer, "Envs each writer leases and pushes per call (default 8)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{64}));
  app.add_option("--env-rate", o.env_rate, "Writers sweep, fixed rate: steps per second per env (default 1000)")
      ->check(CLI::Range(1.0, 1e7));
  app.add_option("--max-learners", o.max_learners, "Learners sweep: 1 .. this (default 4)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{4}));
  app.add_option("--latency-writers", o.latency_writers,
                 "Latency sweep: writer counts (repeatable; default 0, cores - 1 and 2 x cores)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{64}));
  app.add_option("--fleet-steps", o.fleet_steps, "Stored small steps of the processes' buffer (default 2^23)")
      ->check(CLI::Range(1e3, 1e9));
  app.add_option("--fleet-seconds", o.fleet_seconds, "Processes: one trial (default 0.5)")->check(CLI::Range(0.01, 60.0));
  app.add_option("--fleet-trials", o.fleet_trials, "Processes: trials per run (default 3)")->check(CLI::Range(1u, 60u));
  app.add_option("--rounds", o.rounds, "Processes: rounds of ours and plain per configuration (default 2)")
      ->check(CLI::Range(1u, 20u));
  app.add_option("--max-memory-gb", o.max_memory_gb, "The most one buffer and its references may take (default 12)")
      ->check(CLI::Range(0.01, 4096.0));
  app.add_option("--spare-gb", o.spare_gb, "Left free in /dev/shm and MemAvailable (default 2)")
      ->check(CLI::Range(0.0, 4096.0));
  app.add_option("--ref-gb", o.ref_gb, "Atari: the most the push reference stores take together (default 1)")
      ->check(CLI::Range(0.001, 4096.0));
  app.add_option("--plot-dir", o.plot_dir, "Write scaling.md and the figures (PNG, matplotlib) into this folder");
  app.add_option("--python", o.python, "The Python with matplotlib for --plot-dir (default: .venv's, else python3)");
  return shmreplay::bench::bench_main(
      app, argc, argv,
      [&](const shmreplay::bench::QuickDefaults& quick) {
        quick("--max-steps", o.max_steps, 1e4);
        quick("--max-atari-steps", o.max_atari_steps, 1e3);
        quick("--seconds", o.seconds, 0.01);
        quick("--trials", o.trials, 1);
        quick("--max-writers", o.max_writers, 2);
        quick("--max-learners", o.max_learners, 2);
        quick("--fleet-steps", o.fleet_steps, 16384);
        quick("--fleet-seconds", o.fleet_seconds, 0.03);
        quick("--fleet-trials", o.fleet_trials, 1);
        quick("--rounds", o.rounds, 1);
      },
      [&](const std::string& command) { return run(o, command); });
}
