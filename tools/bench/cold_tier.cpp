// shmreplay_bench_cold_tier: what a cold tier (CreateOptions::cold_capacity; docs/design/cold_tier.md) costs.
//
// One process, one thread. Sampling: two buffers that store the same steps per env, `envs` envs of a MuJoCo-like
// step (obs:f32[17] act:f32[6] rew:f32 done:bool, 97 bytes), every step filled: one all in RAM (a ring of capacity +
// cold steps), one tiered (a ring of `capacity` steps and `cold` more per env on disk, files under --cold-dir: most of
// its steps are in the cold tier). Per sequence length (1 and 16), uniform calls of `batch` rows on each, their
// trials interleaved; ratio: the median over rounds of the tiered buffer's rows/s over the all-in-RAM buffer's. The
// cold files are in the page cache (they were just written); a run on a cold page cache reads the disk instead.
// Pushing: one step into every env of a buffer without a tier and of the tiered one, both full (every push seals a
// step), interleaved; ratio likewise. With --cold-cache, also sampling right after the tiered files' pages were
// evicted from the page cache (madvise(MADV_PAGEOUT) on this process's mapping, the only one), so that the calls read
// the disk: rows/s of the first calls, against the warm rate.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "median_rate.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/segment.hpp"
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
  bool cold_cache = false;
  uint32_t cold_calls = 16;
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

// Evicts the tiered buffer's cold files from the page cache (their pages are mapped by this process only; written
// back first, as reclaim skips dirty pages); returns the pages still resident after it, by mincore.
uint64_t evict_cold(Buffer& tiered) {
  const Segment& seg = segment_of(tiered);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uint64_t resident = 0;
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    const auto from = reinterpret_cast<uintptr_t>(seg.cold_column(e, 0)) & ~(page - 1);
    const auto to = reinterpret_cast<uintptr_t>(seg.cold_column(e, 0)) + seg.cold_capacity() * seg.cold_record_bytes();
    const std::size_t bytes = to - from;
    if (::msync(reinterpret_cast<void*>(from), bytes, MS_SYNC) != 0) throw_errno(errno, "msync");  // clean first
    if (::madvise(reinterpret_cast<void*>(from), bytes, MADV_PAGEOUT) != 0) {
      throw_errno(errno, "madvise(MADV_PAGEOUT)");
    }
    std::vector<unsigned char> in((bytes + page - 1) / page);
    if (::mincore(reinterpret_cast<void*>(from), bytes, in.data()) != 0) throw_errno(errno, "mincore");
    for (const unsigned char c : in) resident += c & 1u;
  }
  return resident;
}

// Sampling right after evict_cold: `cold_calls` calls per round, their rows/s, median over the trials.
void run_cold_cache(const Options& o, Buffer& tiered) {
  Sampler s(tiered);
  Rng rng(11);
  SampleBatch batch;
  fmt::print("## Sampling the tiered buffer on a cold page cache\n\n");
  fmt::print("The first {} calls of {} rows after its cold files' pages were evicted (madvise(MADV_PAGEOUT)), "
             "median of {} rounds; warm: the same calls with the pages cached\n\n",
             o.cold_calls, o.batch, o.trials);
  fmt::print("| sequence length | page cache | rows/s | ratio | pages still cached after the eviction |\n"
             "|--:|---|--:|--:|--:|\n");
  for (const std::size_t len : {std::size_t{1}, std::size_t{16}}) {
    std::vector<double> cold;
    std::vector<double> warm;
    uint64_t resident = 0;
    for (uint32_t t = 0; t < o.trials; ++t) {
      for (const bool evict : {true, false}) {
        if (evict) resident = std::max(resident, evict_cold(tiered));
        const auto start = std::chrono::steady_clock::now();
        for (uint32_t c = 0; c < o.cold_calls; ++c) s.sample(View::replay, o.batch, len, 0.0, rng, batch);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        (evict ? cold : warm).push_back(static_cast<double>(o.cold_calls) * o.batch / secs);
      }
    }
    fmt::print("| {} | warm | {:.3f} M | 1.000 | |\n", len, bench::median(warm) / 1e6);
    fmt::print("| {} | cold | {:.3f} M | {:.3f} | {} |\n", len, bench::median(cold) / 1e6,
               bench::median_ratio(cold, warm), resident);
  }
  fmt::print("\n");
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
  if (o.cold_cache) run_cold_cache(o, tiered);
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
  app.add_flag("--cold-cache", o.cold_cache, "Also sample right after evicting the cold files from the page cache");
  app.add_option("--cold-calls", o.cold_calls, "Calls timed after each eviction (default 16)")
      ->check(CLI::Range(1u, 1u << 20));
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
