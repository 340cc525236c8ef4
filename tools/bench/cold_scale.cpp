// shmreplay_bench_cold_scale: issue 49's scale run at a size of one's choosing (docs/benchmarks/cold_tier.md). A
// tiered buffer of --steps small steps (97 bytes, as the issue says) over --envs envs, a ring of --ring steps per env
// in RAM and the rest on disk under --cold-dir, filled by --writers forked writer processes (each its share of the
// envs, one push_one per step); then, in this process: sequence sampling of it against an all-in-RAM buffer of the
// largest size asked to fit RAM (--ram-steps, filled in this process), interleaved trials, ratio per round; the
// disk bytes of the cold files, the peak RSS of each process (the writers' by wait4), and a chi-square of uniform
// single-step draws over 64 equal ranges of the tiered buffer's (env, step) space, both tiers. By hand only: ctest
// runs --quick as a smoke run; the buffer and its files are removed at the end.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "median_rate.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace {

using namespace shmreplay;

const Schema kStep = Schema::parse("obs:f32[17] act:f32[6] rew:f32 done:bool");  // 97 bytes

struct Options : bench::TrialOptions {
  uint64_t steps = 20'000'000;
  uint64_t ram_steps = 4'000'000;
  uint32_t envs = 16;
  uint32_t ring = 65536;
  uint32_t writers = 2;
  uint32_t length = 16;
  uint32_t batch = 256;
  uint64_t draws = 4'000'000;
  std::string cold_dir = "/var/tmp";
};

// Pushes steps [head, per_env) into every env of `envs` that `buf`'s writer leases, one push_one per step.
void push_envs(Buffer& buf, const std::vector<uint64_t>& envs, uint64_t per_env) {
  Writer w(buf, envs);
  std::vector<std::vector<std::byte>> data;
  std::vector<FieldBytes> fields;
  for (const Field& f : kStep.fields()) data.emplace_back(f.bytes(), std::byte{1});
  for (const auto& d : data) fields.push_back({d.data(), d.size()});
  for (uint64_t step = 0; step < per_env; ++step) {
    for (const uint64_t e : envs) w.push_one(e, fields);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double F(uint64_t v) { return static_cast<double>(v); }

uint64_t peak_rss_bytes(const rusage& u) { return static_cast<uint64_t>(u.ru_maxrss) * 1024; }

// Fills `name` through `o.writers` forked processes; returns the seconds and each writer's peak RSS.
std::pair<double, std::vector<uint64_t>> fill_by_writers(const Options& o, const std::string& name, uint64_t per_env) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (uint32_t w = 0; w < o.writers; ++w) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        Buffer buf = Buffer::open(name);
        std::vector<uint64_t> envs;
        for (uint64_t e = w; e < o.envs; e += o.writers) envs.push_back(e);
        push_envs(buf, envs, per_env);
        ::_exit(0);
      } catch (const std::exception& e) {
        fmt::print(stderr, "writer {}: {}\n", w, e.what());
        ::_exit(1);
      }
    }
    pids.push_back(pid);
  }
  std::vector<uint64_t> rss;
  for (const pid_t pid : pids) {
    int status = 0;
    rusage u{};
    ::wait4(pid, &status, 0, &u);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("a writer process failed");
    rss.push_back(peak_rss_bytes(u));
  }
  return {seconds_since(start), rss};
}

// Bytes the files under `dir` take on disk (allocated blocks).
uint64_t disk_bytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) == 0) bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

// Chi-square of `o.draws` uniform single-step rows drawn by `s` over 64 equal ranges of env * per_env + step.
void chi_square(const Options& o, Sampler& s, uint64_t per_env) {
  constexpr uint64_t kBins = 64;
  Rng rng(13);
  SampleBatch batch;
  std::vector<uint64_t> counts(kBins, 0);
  const uint64_t total = per_env * o.envs;
  for (uint64_t drawn = 0; drawn < o.draws; drawn += o.batch) {
    s.sample(View::replay, o.batch, 1, 0.0, rng, batch);
    for (std::size_t r = 0; r < batch.env_ids().size(); ++r) {
      ++counts[(batch.env_ids()[r] * per_env + batch.start_steps()[r]) * kBins / total];
    }
  }
  double drawn = 0;
  for (const uint64_t c : counts) drawn += F(c);
  const double expected = drawn / kBins;
  double chi2 = 0;
  for (const uint64_t c : counts) chi2 += (F(c) - expected) * (F(c) - expected) / expected;
  const double k = kBins - 1;  // the 0.999 quantile of chi-square(k), Wilson-Hilferty
  const double crit = k * std::pow(1 - 2 / (9 * k) + 3.090 * std::sqrt(2 / (9 * k)), 3);
  fmt::print("chi-square of {:.0f} uniform draws over {} equal ranges of both tiers: {:.1f} ({} degrees of freedom; "
             "0.999 quantile {:.1f}: {})\n\n",
             drawn, kBins, chi2, kBins - 1, crit, chi2 < crit ? "uniform" : "NOT uniform");
}

int run(const Options& o) {
  const std::string base = fmt::format("bench-cold-scale-{}", ::getpid());
  const uint64_t per_env = o.steps / o.envs;
  const uint64_t ram_per_env = std::min(o.ram_steps / o.envs, per_env);
  if (per_env <= o.ring) throw std::runtime_error("--steps / --envs must exceed --ring (most steps on disk)");
  Buffer tiered = Buffer::create(base + "-tiered", o.envs, o.ring, kStep,
                                 {.replace = true, .cold_capacity = per_env - o.ring, .cold_dir = o.cold_dir});
  const bench::RemoveBuffer remove_tiered(tiered.name());
  const auto [fill_s, writer_rss] = fill_by_writers(o, tiered.name(), per_env);
  const uint64_t disk = disk_bytes(o.cold_dir + "/" + tiered.name() + ".cold");
  Buffer ram = Buffer::create(base + "-ram", o.envs, ram_per_env, kStep, {.replace = true});
  const bench::RemoveBuffer remove_ram(ram.name());
  std::vector<uint64_t> all;
  for (uint64_t e = 0; e < o.envs; ++e) all.push_back(e);
  push_envs(ram, all, ram_per_env);

  fmt::print("## A buffer mostly on disk: fill, sample, draws\n\n");
  fmt::print("{} steps of 97 bytes over {} envs: a ring of {} per env in RAM, {} per env on disk ({:.1f}% of the "
             "steps) under {}; {} writer processes\n\n",
             per_env * o.envs, o.envs, o.ring, per_env - o.ring, 100.0 * F(per_env - o.ring) / F(per_env), o.cold_dir,
             o.writers);
  fmt::print("| figure | value |\n|---|--:|\n");
  fmt::print("| fill | {:.1f} s, {:.2f} M steps/s |\n", fill_s, F(per_env * o.envs) / fill_s / 1e6);
  fmt::print("| cold files on disk | {:.2f} GB |\n", F(disk) / 1e9);
  for (std::size_t w = 0; w < writer_rss.size(); ++w) {
    fmt::print("| writer {} peak RSS | {:.1f} MB |\n", w, F(writer_rss[w]) / 1e6);
  }
  Sampler s_ram(ram);
  Sampler s_tiered(tiered);
  Rng rng(7);
  SampleBatch batch;
  std::vector<std::function<uint64_t()>> ops;
  for (Sampler* s : {&s_ram, &s_tiered}) {
    ops.emplace_back([s, &rng, &batch, &o] {
      s->sample(View::replay, o.batch, o.length, 0.0, rng, batch);
      return uint64_t{o.batch};
    });
  }
  const auto wall = bench::interleaved_rates(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 200), ops);
  fmt::print("| sampling, all in RAM ({} steps), sequences of {} | {:.2f} M rows/s |\n", ram_per_env * o.envs, o.length,
             bench::median(wall[0]) / 1e6);
  fmt::print("| sampling, tiered, sequences of {} | {:.2f} M rows/s |\n", o.length, bench::median(wall[1]) / 1e6);
  fmt::print("| ratio (median over {} interleaved rounds of {:g} s) | {:.3f} |\n", o.trials, o.seconds,
             bench::median_ratio(wall[1], wall[0]));
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  fmt::print("| this process's peak RSS (both buffers' pages it touched) | {:.1f} MB |\n\n",
             F(peak_rss_bytes(self)) / 1e6);
  chi_square(o, s_tiered, per_env);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_cold_scale: a buffer of many small steps mostly on disk, filled and sampled");
  o.add_to(app, "2 envs x 4096 steps (a ring of 256), 2 writers, 10,000 draws: a smoke run for CI");
  app.add_option("--steps", o.steps, "Steps in all, mostly on disk (default 2e7)");
  app.add_option("--ram-steps", o.ram_steps, "Steps of the all-in-RAM buffer (default 4e6)");
  app.add_option("--envs", o.envs, "Envs (default 16)")->check(CLI::Range(1u, 4096u));
  app.add_option("--ring", o.ring, "Ring steps per env (default 65536)")->check(CLI::Range(16u, 1u << 24));
  app.add_option("--writers", o.writers, "Writer processes (default 2)")->check(CLI::Range(1u, 64u));
  app.add_option("--length", o.length, "Sequence length (default 16)")->check(CLI::Range(1u, 4096u));
  app.add_option("--batch", o.batch, "Rows per call (default 256)")->check(CLI::Range(1u, 1u << 16));
  app.add_option("--draws", o.draws, "Uniform draws for the chi-square (default 4e6)");
  app.add_option("--cold-dir", o.cold_dir, "The cold tier's directory (default /var/tmp)");
  return bench::bench_main(
      app, argc, argv,
      [&](const bench::QuickDefaults& quick) {
        o.quick_defaults(quick);
        quick("--steps", o.steps, uint64_t{8192});
        quick("--ram-steps", o.ram_steps, uint64_t{8192});
        quick("--envs", o.envs, 2u);
        quick("--ring", o.ring, 256u);
        quick("--draws", o.draws, uint64_t{10'000});
      },
      [&](const std::string&) { return run(o); });
}
