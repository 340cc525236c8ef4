// shmreplay_bench_cold_tier: what a cold tier (CreateOptions::cold_capacity; docs/design/cold_tier.md) costs.
//
// One process, one thread. Sampling: two buffers that store the same steps per env, `envs` envs of a MuJoCo-like
// step (obs:f32[17] act:f32[6] rew:f32 done:bool, 97 bytes), every step filled: one all in RAM (a ring of capacity +
// cold steps), one tiered (a ring of `capacity` steps and `cold` more per env on disk, files under --cold-dir: most of
// its steps are in the cold tier). Per sequence length (1 and 16), uniform calls of `batch` rows on each, their
// trials interleaved; ratio: the median over rounds of the tiered buffer's rows/s over the all-in-RAM buffer's. The
// cold files are in the page cache (they were just written); a run on a cold page cache reads the disk instead.
// Pushing: one step into every env of a buffer without a tier and of the tiered one, both full (every push seals a
// step), interleaved; ratio likewise.
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "median_rate.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace {

using namespace shmreplay;

const Schema kStep = Schema::parse("obs:f32[17] act:f32[6] rew:f32 done:bool");  // 97 bytes

struct Options : bench::TrialOptions {
  uint32_t envs = 16;
  uint32_t capacity = 1024;
  uint32_t cold = 15 * 1024;
  uint32_t batch = 256;
  std::string cold_dir = "/var/tmp";
};

// One push of a step into every env (push_one per env), the fields' bytes reused.
struct Pusher {
  std::vector<std::vector<std::byte>> data;
  std::vector<FieldBytes> fields;
  Pusher() {
    for (const Field& f : kStep.fields()) data.emplace_back(f.bytes(), std::byte{1});
    for (const auto& d : data) fields.push_back({d.data(), d.size()});
  }
  uint64_t push_all(Writer& w, uint64_t envs) {
    for (uint64_t e = 0; e < envs; ++e) w.push_one(e, fields);
    return envs;
  }
};

void fill(Buffer& buf, uint64_t envs, uint64_t steps) {
  Writer w = Writer::range(buf, 0, envs);
  Pusher p;
  for (uint64_t step = 0; step < steps; ++step) p.push_all(w, envs);
}

void run_sampling(const Options& o, Buffer& ram, Buffer& tiered) {
  Sampler s_ram(ram);
  Sampler s_tiered(tiered);
  Rng rng(7);
  SampleBatch batch;
  fmt::print("## Sequence sampling over a buffer mostly on disk\n\n");
  fmt::print("{} envs x {} stored steps of 97 bytes each: all in RAM, against a ring of {} in RAM and {} on disk "
             "({:.0f}% of the steps); {} rows per call, uniform; median of {} interleaved trials of {:g} s\n\n",
             o.envs, o.capacity + o.cold, o.capacity, o.cold, 100.0 * o.cold / (o.capacity + o.cold), o.batch,
             o.trials, o.seconds);
  fmt::print("| sequence length | buffer | rows/s | ratio (wall) | ratio (CPU time) |\n|--:|---|--:|--:|--:|\n");
  for (const std::size_t len : {std::size_t{1}, std::size_t{16}}) {
    std::vector<std::function<uint64_t()>> ops;
    for (Sampler* s : {&s_ram, &s_tiered}) {
      ops.emplace_back([s, &rng, &batch, &o, len] {
        s->sample(View::replay, o.batch, len, 0.0, rng, batch);
        return uint64_t{o.batch};
      });
    }
    std::vector<std::vector<double>> cpu;
    const auto wall = bench::interleaved_rates(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 50), ops,
                                               &cpu);
    const char* names[] = {"all in RAM", "tiered"};
    for (std::size_t i = 0; i < ops.size(); ++i) {
      fmt::print("| {} | {} | {:.2f} M | {:.3f} | {:.3f} |\n", len, names[i], bench::median(wall[i]) / 1e6,
                 bench::median_ratio(wall[i], wall[0]), bench::median_ratio(cpu[i], cpu[0]));
    }
  }
  fmt::print("\nratio: rows/s over the all-in-RAM buffer's in the same round, median over rounds\n\n");
}

void run_pushing(const Options& o, const std::string& base, Buffer& tiered) {
  Buffer plain = Buffer::create(base + "-plain", o.envs, o.capacity, kStep, {.replace = true});
  const bench::RemoveBuffer remove_plain(plain.name());
  fill(plain, o.envs, o.capacity);
  Writer w_plain = Writer::range(plain, 0, o.envs);
  Writer w_tiered = Writer::range(tiered, 0, o.envs);
  Pusher p;
  std::vector<std::function<uint64_t()>> ops = {[&] { return p.push_all(w_plain, o.envs); },
                                                [&] { return p.push_all(w_tiered, o.envs); }};
  std::vector<std::vector<double>> cpu;
  const auto wall =
      bench::interleaved_rates(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 50), ops, &cpu);
  fmt::print("## Pushing with a cold tier\n\n");
  fmt::print("{} envs, a ring of {} steps of 97 bytes, full (every push of the tiered buffer seals a step into its "
             "page cache); median of {} interleaved trials of {:g} s\n\n",
             o.envs, o.capacity, o.trials, o.seconds);
  fmt::print("| buffer | steps/s | ratio (wall) | ratio (CPU time) |\n|---|--:|--:|--:|\n");
  const char* names[] = {"no cold tier", "cold tier"};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    fmt::print("| {} | {:.2f} M | {:.3f} | {:.3f} |\n", names[i], bench::median(wall[i]) / 1e6,
               bench::median_ratio(wall[i], wall[0]), bench::median_ratio(cpu[i], cpu[0]));
  }
  fmt::print("\nratio: steps/s over the buffer without a tier in the same round, median over rounds\n");
}

int run(const Options& o) {
  const std::string base = fmt::format("bench-cold-{}", ::getpid());
  Buffer ram = Buffer::create(base + "-ram", o.envs, o.capacity + o.cold, kStep, {.replace = true});
  const bench::RemoveBuffer remove_ram(ram.name());
  Buffer tiered = Buffer::create(base + "-tiered", o.envs, o.capacity, kStep,
                                 {.replace = true, .cold_capacity = o.cold, .cold_dir = o.cold_dir});
  const bench::RemoveBuffer remove_tiered(tiered.name());
  fill(ram, o.envs, o.capacity + o.cold);
  fill(tiered, o.envs, o.capacity + o.cold);
  run_sampling(o, ram, tiered);
  run_pushing(o, base, tiered);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_cold_tier: sampling and pushing with a cold tier against all in RAM");
  o.add_to(app, "one 10 ms trial of 2 envs x (256 + 768) steps: a smoke run for CI");
  app.add_option("--envs", o.envs, "Envs (default 16)")->check(CLI::Range(1u, 4096u));
  app.add_option("--capacity", o.capacity, "Ring steps per env (default 1024)")->check(CLI::Range(16u, 1u << 24));
  app.add_option("--cold", o.cold, "Steps per env on disk (default 15360)")->check(CLI::Range(1u, 1u << 30));
  app.add_option("--batch", o.batch, "Rows per call (default 256)")->check(CLI::Range(1u, 1u << 16));
  app.add_option("--cold-dir", o.cold_dir, "The cold tier's directory, on the disk to measure (default /var/tmp)");
  return bench::bench_main(
      app, argc, argv,
      [&](const bench::QuickDefaults& quick) {
        o.quick_defaults(quick);
        quick("--envs", o.envs, 2u);
        quick("--capacity", o.capacity, 256u);
        quick("--cold", o.cold, 768u);
      },
      [&](const std::string&) { return run(o); });
}
