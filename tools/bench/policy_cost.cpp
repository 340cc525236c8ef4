// tools/bench/policy_cost.cpp: what a window costs a sample call (policy_bench.hpp; docs/benchmarks/policy.md).
//
// One process, one thread, no writer running. The buffer: `envs` envs of `capacity` steps of a MuJoCo-like step
// with a policy version (version:u32 obs:f32[17] act:f32[6] rew:f32 done:bool), every slot filled, each env's
// versions 1 to 16 in equal runs; version 16 published without a window. Per sequence length (1 and 16), four
// calls of the same shape (`batch` rows, power 0: uniform over starts), their trials interleaved:
//   uniform        no window
//   window, all    max_staleness 15: floor 1, every stored step inside (the binary search runs, nothing is cut):
//                  the same steps as uniform, so the ratio is the window's own cost
//   window, 3/4    max_staleness 11: versions 5 to 16, the newest three quarters of each env
//   window, 1/4    max_staleness 3: versions 13 to 16, the newest quarter (rows from a quarter of the memory: the
//                  caches favour it)
// ratio: the median over rounds of (time per call with the window / time per call without), by wall clock and by
// the thread's CPU time (what the call costs whatever share of a core it got on a shared machine).
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "bench_cli.hpp"
#include "median_rate.hpp"
#include "policy_bench.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay::bench::policy {

namespace {

const Schema kStep = Schema::parse("version:u32 obs:f32[17] act:f32[6] rew:f32 done:bool");
constexpr uint32_t kVersions = 16;

void fill(Buffer& buf, uint64_t envs, uint64_t capacity) {
  Writer w = Writer::range(buf, 0, envs);
  std::vector<std::vector<std::byte>> data;
  for (const Field& f : kStep.fields()) data.emplace_back(f.bytes(), std::byte{1});
  std::vector<FieldBytes> fields;
  for (const auto& d : data) fields.push_back({d.data(), d.size()});
  const uint64_t run = std::max<uint64_t>(1, capacity / kVersions);
  for (uint64_t step = 0; step < capacity; ++step) {
    const auto version = static_cast<uint32_t>(std::min<uint64_t>(step / run, kVersions - 1) + 1);
    for (uint64_t e = 0; e < envs; ++e) {
      fields[0] = {&version, sizeof version};
      w.push_one(e, fields);
    }
  }
}

struct Case {
  const char* name;
  std::optional<uint64_t> max_staleness;
};

const std::array<Case, 4> kCases{Case{"uniform", std::nullopt}, Case{"window, all steps", kVersions - 1},
                                 Case{"window, newest 3/4", 11}, Case{"window, newest 1/4", 3}};

}  // namespace

void print_cost(const CostOptions& o) {
  const std::string name = fmt::format("bench-policy-cost-{}", ::getpid());
  Buffer buf = Buffer::create(name, o.envs, o.capacity, kStep, {.replace = true, .policy_version = "version"});
  const RemoveBuffer remove(name);
  fill(buf, o.envs, o.capacity);
  Sampler s(buf);
  s.publish_policy(kVersions, std::nullopt);
  Rng rng(7);
  SampleBatch batch;
  fmt::print("## The cost of a window\n\n");
  fmt::print("{} envs x {} steps (version:u32 obs:f32[17] act:f32[6] rew:f32 done:bool, versions 1 to {} per env, "
             "version {} published), {} rows per call, power 0; median of {} interleaved trials of {:g} s\n\n",
             o.envs, o.capacity, kVersions, kVersions, o.batch, o.trials, o.seconds);
  fmt::print("| sequence length | call | calls/s | rows/s | ratio (wall) | ratio (CPU time) |\n");
  fmt::print("|--:|---|--:|--:|--:|--:|\n");
  for (const std::size_t len : {std::size_t{1}, std::size_t{16}}) {
    std::vector<std::function<uint64_t()>> ops;
    for (const Case& c : kCases) {
      const SampleOptions options{.max_staleness = c.max_staleness};
      ops.emplace_back([&s, &rng, &batch, &o, len, options] {
        s.sample(View::replay, o.batch, len, 0.0, rng, batch, options);
        return uint64_t{1};
      });
    }
    std::vector<std::vector<double>> cpu;
    const auto wall = interleaved_rates(o.seconds, o.trials, std::chrono::milliseconds(20), ops, &cpu);
    for (std::size_t i = 0; i < kCases.size(); ++i) {
      const double calls = median(wall[i]);
      // time ratio = the uniform call's rate over this one's, per round, then the median
      fmt::print("| {} | {} | {:.0f} | {:.2f} M | {:.3f} | {:.3f} |\n", len, kCases[i].name, calls,
                 calls * o.batch / 1e6, median_ratio(wall[0], wall[i]), median_ratio(cpu[0], cpu[i]));
    }
  }
  fmt::print("\nratio: time per call over the uniform call's in the same round, median over rounds (goal <= 1.2)\n\n");
}

}  // namespace shmreplay::bench::policy
