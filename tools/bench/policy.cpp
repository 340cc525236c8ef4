// shmreplay_bench_policy: policy versions (issue 47, part 1; docs/benchmarks/policy.md), two tables in one run:
//   pacing against discard   env groups of a 10x speed difference, a learner sampling with a staleness window:
//                            admission control (paced publishes, held writers) against a discard-and-requeue
//                            baseline written in the benchmark; each group's shares of the steps produced,
//                            inserted and sampled, and the learner's version moves per second (policy_pacing.cpp)
//   the cost of a window     a sample call with a window against a uniform call of the same shape (policy_cost.cpp)
//
//   shmreplay_bench_policy            6 s per pacing mode; cost: 11 interleaved trials of 0.2 s
//   shmreplay_bench_policy --quick    0.5 s per pacing mode, 3 trials of 10 ms: a smoke run for CI
//   shmreplay_bench_policy --sweep 5,20,60,150,400 --seconds 4
//                                     the pacing table's summary for each number of batches between version moves
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "policy_bench.hpp"

namespace {

using namespace shmreplay::bench;

struct Options {
  bool quick = false;
  bool pacing_only = false;
  bool cost_only = false;
  std::vector<uint32_t> sweep;
  policy::PacingOptions pacing;
  policy::CostOptions cost;
};

void add_options(CLI::App& app, Options& o) {
  app.add_flag("--quick", o.quick, "0.5 s per pacing mode, 3 cost trials of 10 ms: a smoke run for CI");
  app.add_flag("--pacing-only", o.pacing_only, "Only the pacing table");
  app.add_flag("--cost-only", o.cost_only, "Only the cost table");
  app.add_option("--sweep", o.sweep, "Also the pacing table's summary for each of these batches per version")
      ->delimiter(',');
  policy::PacingOptions& p = o.pacing;
  app.add_option("--seconds", p.seconds, "Length of each pacing mode's run")->check(CLI::Range(0.1, 600.0));
  app.add_option("--fast-envs", p.fast_envs, "Envs of the fast group")->check(CLI::Range(1u, 64u));
  app.add_option("--slow-envs", p.slow_envs, "Envs of the slow group")->check(CLI::Range(1u, 64u));
  app.add_option("--fast-step-ms", p.fast_step_ms, "A fast actor's time per step")->check(CLI::Range(0.01, 100.0));
  app.add_option("--speed-ratio", p.speed_ratio, "How many times slower the slow group is")
      ->check(CLI::Range(1.0, 1000.0));
  app.add_option("--episode-steps", p.episode_steps, "Steps per episode")->check(CLI::Range(1u, 100000u));
  app.add_option("--max-staleness", p.max_staleness, "The window k");
  app.add_option("--max-lag", p.max_lag, "Paced mode's PolicyPublish::max_lag (0: the window's k)");
  app.add_option("--batches-per-version", p.batches_per_version, "Batches between the learner's version moves")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--train-ms", p.train_ms, "The learner's work per batch (a sleep)")->check(CLI::Range(0.0, 1000.0));
  app.add_option("--cost-seconds", o.cost.seconds, "One cost trial")->check(CLI::Range(0.001, 60.0));
  app.add_option("--cost-trials", o.cost.trials, "Interleaved cost trials")->check(CLI::Range(1u, 101u));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_policy: policy versions: pacing against discard, and the cost of a window");
  add_options(app, o);
  return bench_main(
      app, argc, argv,
      [&](const QuickDefaults& quick) {
        quick("--seconds", o.pacing.seconds, 0.5);
        quick("--cost-seconds", o.cost.seconds, 0.01);
        quick("--cost-trials", o.cost.trials, 3);
      },
      [&](const std::string& command) {
        fmt::print("# shmreplay_bench_policy\n\n`{}`\n\n", command);
        if (!o.cost_only) policy::print_pacing(o.pacing);
        if (!o.cost_only && !o.sweep.empty()) policy::print_pacing_sweep(o.pacing, o.sweep);
        if (!o.pacing_only) policy::print_cost(o.cost);
        return 0;
      });
}
