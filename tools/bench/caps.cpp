// shmreplay_bench_caps: what a sample cap (CreateOptions::max_times_sampled; docs/design/sample_caps.md) costs a
// sample call: the load of each drawn start's count word before its copy and the compare-and-swap that claims its
// delivery after.
//
// One process, one thread, no writer running. Two buffers of the same shape, `envs` envs of `capacity` steps of a
// MuJoCo-like step (obs:f32[17] act:f32[6] rew:f32 done:bool), every slot filled: one without a cap, one with
// max_times_sampled 255 (so that no start reaches the cap during the run: the steady cost, not the rejections,
// whose cost the design document derives: 1/f draws per row with a fraction f of the probability mass uncapped).
// Per sequence length (1 and 16), a uniform call (power 0) of `batch` rows on each, their trials interleaved.
// ratio: the median over rounds of (time per call with the cap / time per call without), by wall clock and by the
// thread's CPU time.
// Then the consuming queue (CreateOptions::consuming_queue; docs/design/consuming_queue.md): a queue of the same
// shape, filled before each round and consumed by calls of `batch` rows (random, then fifo) from full to half full
// (the rest drained untimed, so that the next fill never waits), against as many uniform calls on the plain buffer,
// both timed by the thread's CPU time; ratio: the median over rounds of the consuming calls' time over the
// uniform calls'.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "median_rate.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/writer.hpp"

namespace {

using namespace shmreplay;

const Schema kStep = Schema::parse("obs:f32[17] act:f32[6] rew:f32 done:bool");  // 97 bytes

struct Options : bench::TrialOptions {
  uint32_t envs = 64;
  uint32_t capacity = 4096;
  uint32_t batch = 256;
};

void fill(Buffer& buf, uint64_t envs, uint64_t capacity) {
  Writer w = Writer::range(buf, 0, envs);
  std::vector<std::vector<std::byte>> data;
  for (const Field& f : kStep.fields()) data.emplace_back(f.bytes(), std::byte{1});
  std::vector<FieldBytes> fields;
  for (const auto& d : data) fields.push_back({d.data(), d.size()});
  for (uint64_t step = 0; step < capacity; ++step) {
    for (uint64_t e = 0; e < envs; ++e) w.push_one(e, fields);
  }
}

// The consuming calls against uniform calls of the same shape (see the top of the file).
void run_queue(const Options& o, const std::string& base, Sampler& s_plain, Rng& rng, SampleBatch& batch) {
  Buffer queue = Buffer::create(base + "-queue", o.envs, o.capacity, kStep, {.replace = true, .consuming_queue = true});
  const bench::RemoveBuffer remove_queue(queue.name());
  Sampler s_queue(queue);
  fmt::print("\n## The cost of a consuming call\n\n");
  fmt::print("| sequence length | order | consuming rows/s | uniform rows/s | ratio (CPU time) |\n|--:|---|--:|--:|--:|\n");
  for (const std::size_t len : {std::size_t{1}, std::size_t{16}}) {
    for (const Consume order : {Consume::random, Consume::fifo}) {
      const SampleOptions consume{.consume = order, .consume_timeout_ms = 0};
      const uint64_t calls = std::max<uint64_t>(1, o.envs * (o.capacity - len + 1) / 2 / o.batch);
      std::vector<double> ratios;
      double queue_s = 0.0;
      double plain_s = 0.0;
      for (uint32_t round = 0; round < o.trials; ++round) {
        fill(queue, o.envs, o.capacity);
        double t0 = bench::thread_cpu_seconds();
        for (uint64_t c = 0; c < calls; ++c) s_queue.sample(View::replay, o.batch, len, 0.0, rng, batch, consume);
        const double tq = bench::thread_cpu_seconds() - t0;
        t0 = bench::thread_cpu_seconds();
        for (uint64_t c = 0; c < calls; ++c) s_plain.sample(View::replay, o.batch, len, 0.0, rng, batch);
        const double tu = bench::thread_cpu_seconds() - t0;
        ratios.push_back(tq / tu);
        queue_s += tq;
        plain_s += tu;
        for (const std::size_t rows : {std::size_t{o.batch}, std::size_t{1}}) {  // the rest, untimed: every slot
          try {                                                                  // delivered, so that the next fill
            while (true) s_queue.sample(View::replay, rows, 1, 0.0, rng, batch, consume);  // pushes without waiting
          } catch (const Error& e) {
            if (e.code() != Errc::empty_view) throw;
          }
        }
      }
      const double rows = static_cast<double>(calls * o.batch * o.trials);
      fmt::print("| {} | {} | {:.2f} M | {:.2f} M | {:.3f} |\n", len, to_string(order), rows / queue_s / 1e6,
                 rows / plain_s / 1e6, bench::median(ratios));
    }
  }
  fmt::print("\nratio: the consuming calls' CPU time over as many uniform calls' on the plain buffer, median over "
             "rounds; each round consumes the queue from full to half full\n");
}

int run(const Options& o) {
  const std::string base = fmt::format("bench-caps-{}", ::getpid());
  Buffer plain = Buffer::create(base + "-plain", o.envs, o.capacity, kStep, {.replace = true});
  const bench::RemoveBuffer remove_plain(plain.name());
  Buffer capped = Buffer::create(base + "-capped", o.envs, o.capacity, kStep,
                                 {.replace = true, .max_times_sampled = 255});
  const bench::RemoveBuffer remove_capped(capped.name());
  fill(plain, o.envs, o.capacity);
  fill(capped, o.envs, o.capacity);
  Sampler s_plain(plain);
  Sampler s_capped(capped);
  Rng rng(7);
  SampleBatch batch;
  fmt::print("## The cost of a sample cap\n\n");
  fmt::print("{} envs x {} steps (obs:f32[17] act:f32[6] rew:f32 done:bool), {} rows per call, power 0; median of {} "
             "interleaved trials of {:g} s\n\n",
             o.envs, o.capacity, o.batch, o.trials, o.seconds);
  fmt::print("| sequence length | call | calls/s | rows/s | ratio (wall) | ratio (CPU time) |\n");
  fmt::print("|--:|---|--:|--:|--:|--:|\n");
  for (const std::size_t len : {std::size_t{1}, std::size_t{16}}) {
    std::vector<std::function<uint64_t()>> ops;
    for (Sampler* s : {&s_plain, &s_capped}) {
      ops.emplace_back([s, &rng, &batch, &o, len] {
        s->sample(View::replay, o.batch, len, 0.0, rng, batch);
        return uint64_t{1};
      });
    }
    std::vector<std::vector<double>> cpu;
    const auto wall = bench::interleaved_rates(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 20), ops,
                                               &cpu);
    const char* names[] = {"no cap", "max_times_sampled 255"};
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const double calls = bench::median(wall[i]);
      fmt::print("| {} | {} | {:.0f} | {:.2f} M | {:.3f} | {:.3f} |\n", len, names[i], calls, calls * o.batch / 1e6,
                 bench::median_ratio(wall[0], wall[i]), bench::median_ratio(cpu[0], cpu[i]));
    }
  }
  fmt::print("\nratio: time per call over the uncapped call's in the same round, median over rounds\n");
  run_queue(o, base, s_plain, rng, batch);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_caps: a sample cap's cost against the same calls without one");
  o.add_to(app, "one 10 ms trial of 4 envs x 4096 steps: a smoke run for CI");
  app.add_option("--envs", o.envs, "Envs (default 64)")->check(CLI::Range(1u, 4096u));
  app.add_option("--capacity", o.capacity, "Steps per env (default 4096)")->check(CLI::Range(16u, 1u << 20));
  return bench::bench_main(
      app, argc, argv,
      [&](const bench::QuickDefaults& quick) {
        o.quick_defaults(quick);
        quick("--envs", o.envs, 4u);
        quick("--capacity", o.capacity, 4096u);
      },
      [&](const std::string&) { return run(o); });
}
