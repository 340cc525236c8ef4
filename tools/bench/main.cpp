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
// median over trials, with the spread (half the min-max range, in % of the median). See docs/benchmarks/README.md.
//
// Files: main.cpp (the options and the run: which measurements, in which order), results.cpp (the figures from
// the trials), targets.cpp (the verdicts), report.cpp (markdown and JSON), workloads.cpp and its parts (what the
// workers do), harness.cpp (processes, trials, the machine's description).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "harness.hpp"
#include "atari_million.hpp"
#include "pixels.hpp"
#include "report.hpp"
#include "results.hpp"
#include "shmreplay/schema.hpp"
#include "targets.hpp"
#include "workloads.hpp"

namespace {

using namespace shmreplay::bench;
using shmreplay::Schema;

struct Options {
  bool quick = false;
  bool json = false;
  double seconds = 0.2;
  uint32_t trials = 5;
  std::vector<std::string> only;   // push, sample, contention, pixels
  std::vector<std::string> steps;  // small, atari
  std::size_t batch = 256;
  bool atari_1e6 = false;
  uint64_t atari_capacity = 62500;
  bool atari_lazy = false;
};

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

// Runs the measurements of one run, each a Team of bodies, and keeps their results.
struct Measurer {
  const Config& cfg;
  std::vector<Result> results;

  void measure(Result r, std::vector<Body> bodies, std::vector<std::string> names) {
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
  }
};

// The push section of geometry g: batched and single pushes by 1 and 2 writers, each implementation.
void measure_pushes(Measurer& m, const Geometry& g, const Stores& stores) {
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
        m.measure(std::move(r), std::move(bodies), std::move(names));
      }
    }
  }
}

// The sample section of geometry g (without writers when `sample`; beside 2 writers, the contention section):
// sequences of 1 and 64 steps, each sampling implementation.
void measure_samples(Measurer& m, const Geometry& g, const Stores& stores, bool sample, uint64_t& seed) {
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
        bodies.push_back(sample_body(impl, g, stores, m.cfg.batch, length, seed++));
        names.push_back(fmt::format("{} sampler", to_string(impl)));
        m.measure(std::move(r), std::move(bodies), std::move(names));
      }
    }
  }
}

int run(const Options& o, const std::string& command) {
  install_signal_handlers();
  const MachineInfo machine = describe_machine();
  Config cfg;
  if (wanted(o, "push") || wanted(o, "sample") || wanted(o, "contention")) cfg.geometries = make_geometries(o);
  cfg.batch = o.batch;
  cfg.trials = o.trials;
  cfg.trial_s = o.seconds;
  cfg.warmup_s = std::max(o.seconds / 2, o.quick ? 0.005 : 0.1);
  cfg.patience_s = std::max(5 * o.seconds, o.quick ? 0.05 : 0.5);
  std::vector<std::string> steps;
  for (const Geometry& g : cfg.geometries) steps.push_back(g.label);

  Measurer m{cfg};

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
    if (wanted(o, "push") && !g.sample_only) measure_pushes(m, g, stores);
    const bool sample = wanted(o, "sample");
    if (sample || wanted(o, "contention")) measure_samples(m, g, stores, sample, seed);
  }
  std::optional<PixelReport> pixels;
  const PixelConfig pixel_cfg{.quick = o.quick, .seconds = o.seconds, .trials = o.trials};
  const bool atari = o.steps.empty() || std::find(o.steps.begin(), o.steps.end(), "atari") != o.steps.end();
  if (wanted(o, "pixels") && atari) {
    fmt::print(stderr, "shmreplay_bench: pixels: stacked Atari-like steps, push and sample ...");
    std::fflush(stderr);
    pixels = measure_pixels(pixel_cfg);
    fmt::print(stderr, " done\n");
  }
  const std::vector<Result>& results = m.results;
  const std::vector<Target> targets = evaluate(results, steps);
  if (o.json) {
    print_json(command, machine, cfg, results, targets, pixels ? pixels_json(*pixels) : nlohmann::json());
  } else {
    print_markdown(command, machine, cfg, results, targets);
    if (pixels) print_pixels_markdown(*pixels, pixel_cfg);
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
  app.add_option("--only", o.only, "Run only some sections: push, sample, contention, pixels (repeatable)")
      ->check(CLI::IsMember({"push", "sample", "contention", "pixels"}))
      ->type_name("SECTION");
  app.add_option("--step", o.steps, "Run only some step kinds: small (MuJoCo-like, 10^6 stored steps), small-1e7 (the same, 10^7 stored "
                 "steps, sampling only), atari (repeatable)")
      ->check(CLI::IsMember({"small", "small-1e7", "atari"}))
      ->type_name("KIND");
  app.add_flag("--atari-1e6", o.atari_1e6,
               "Only this: a buffer of 16 envs x 62,500 Atari steps with obs stacked (about 7.3 GB of /dev/shm), "
               "created, filled and sampled; prints its size, resident memory, fill and sample rates (never in CI)");
  app.add_option("--atari-capacity", o.atari_capacity, "Steps per env with --atari-1e6 (default 62500)")
      ->check(CLI::Range(uint64_t{16}, uint64_t{1} << 30));
  app.add_flag("--atari-lazy", o.atari_lazy,
               "With --atari-1e6: create without populating the pages (the first pass of the fill faults them in)");
  return shmreplay::bench::bench_main(
      app, argc, argv,
      [&](const shmreplay::bench::QuickDefaults& quick) {
        quick("--seconds", o.seconds, 0.01);
        quick("--trials", o.trials, 1);
        o.batch = 32;
      },
      [&](const std::string& command) {
        if (o.atari_1e6) {
          return run_atari_million({.capacity = o.atari_capacity,
                                    .seconds = app.count("--seconds") ? o.seconds : 0.5,
                                    .trials = o.trials,
                                    .json = o.json,
                                    .populate = !o.atari_lazy},
                                   command);
        }
        return run(o, command);
      });
}
