// shmreplay_bench_rate_limit: what the rate limiter costs, against the same calls without a limiter in the same run
// (docs/benchmarks/priorities_rate_limit.md, "Rate limiting"). One process, one thread; the limiter's bounds are
// set so wide that nothing is ever held back, so the figures are the bookkeeping alone.
//
//   shmreplay_bench_rate_limit               16, 256 and 4096 envs, 5 trials of 0.2 s
//   shmreplay_bench_rate_limit --quick       16 and 256 envs, one 10 ms trial: a smoke run for CI
//
// Per number of envs (a 97-byte MuJoCo-like step, 256 steps per env, pushes of 16 envs per call):
//   push            steps/s without a limiter
//   push, counted   the same into a buffer with a limiter, by a writer that does not wait (the default)
//   push, waiting   the same by a writer made with wait_for_rate_limit (one pass over every env's counters and
//                   one CAS per push call)
//   sample          rows/s of sample_transitions (256 rows per call) without a limiter
//   sample, limited the same with a limiter (one pass over the envs' heads per call)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "median_rate.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace shmreplay;

using Options = bench::TrialOptions;

double rate(const Options& o, const std::function<uint64_t()>& op) {
  return bench::median_rate(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 20), op);
}

const Schema kStep = Schema::parse("obs:f32[17] act:f32[6] rew:f32 done:bool");  // 97 bytes

struct Row {
  uint64_t envs;
  double push, push_counted, push_waiting, sample, sample_limited;
};

Row measure(const Options& o, uint64_t envs) {
  const uint64_t cap = 256;
  const std::string base = fmt::format("bench-rl-{}-{}", ::getpid(), envs);
  // Bounds so wide that nothing is held back: only the bookkeeping is measured.
  const RateLimit wide = RateLimit::ratio(1.0, 1, 1e15);
  Buffer plain = Buffer::create(base + "-plain", envs, cap, kStep, {.replace = true});
  Buffer limited = Buffer::create(base + "-limited", envs, cap, kStep, {.replace = true, .rate_limit = wide});
  Buffer::remove(plain.name());
  Buffer::remove(limited.name());

  const uint64_t per_call = 16;
  std::vector<std::vector<std::byte>> data;
  std::vector<FieldBytes> fields;
  for (const Field& f : kStep.fields()) data.emplace_back(f.bytes() * per_call, std::byte{1});
  for (std::size_t f = 0; f < kStep.size(); ++f) fields.push_back({data[f].data(), data[f].size()});

  Row row{envs, 0, 0, 0, 0, 0};
  const auto push_rate = [&](Buffer& b, const WriterOptions& wo) {
    Writer w = Writer::range(b, 0, envs, wo);
    std::vector<uint64_t> ids(per_call);
    uint64_t next = 0;
    return rate(o, [&] {
      for (uint64_t i = 0; i < per_call; ++i) ids[i] = (next + i) % envs;
      next = (next + per_call) % envs;
      w.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(fields));
      return per_call;
    });
  };
  row.push = push_rate(plain, {});
  row.push_counted = push_rate(limited, {});
  row.push_waiting = push_rate(limited, {.wait_for_rate_limit = true});

  const auto sample_rate = [&](Buffer& b) {
    Sampler s(b);
    Rng rng(1);
    SampleBatch batch;
    return rate(o, [&] {
      s.sample_transitions(View::replay, 256, rng, batch);
      return uint64_t{256};
    });
  };
  row.sample = sample_rate(plain);
  row.sample_limited = sample_rate(limited);
  return row;
}

std::string mega(double per_s) { return fmt::format("{:.2f} M", per_s / 1e6); }

int run(const Options& o) {
  const std::vector<uint64_t> sizes = o.quick ? std::vector<uint64_t>{16, 256} : std::vector<uint64_t>{16, 256, 4096};
  fmt::print("rate limiter cost: 97-byte steps, pushes of 16 envs, samples of 256 rows; median of {} x {} s\n\n",
             o.trials, o.seconds);
  fmt::print("{:>6}  {:>10} {:>14} {:>7} {:>14} {:>7}  {:>10} {:>15} {:>7}\n", "envs", "push", "push, counted",
             "ratio", "push, waiting", "ratio", "sample", "sample, limited", "ratio");
  for (const uint64_t envs : sizes) {
    const Row r = measure(o, envs);
    fmt::print("{:>6}  {:>10} {:>14} {:>7.2f} {:>14} {:>7.2f}  {:>10} {:>15} {:>7.2f}\n", envs, mega(r.push),
               mega(r.push_counted), r.push_counted / r.push, mega(r.push_waiting), r.push_waiting / r.push,
               mega(r.sample), mega(r.sample_limited), r.sample_limited / r.sample);
  }
  fmt::print("\nsteps/s for pushes, rows/s for samples; ratio: with the limiter over without\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_rate_limit: the rate limiter's cost against the same calls without one");
  o.add_to(app, "16 and 256 envs, one 10 ms trial: a smoke run for CI");
  return shmreplay::bench::bench_main(
      app, argc, argv, [&](const shmreplay::bench::QuickDefaults& quick) { o.quick_defaults(quick); },
      [&](const std::string&) { return run(o); });
}
