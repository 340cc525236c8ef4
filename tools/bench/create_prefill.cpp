// shmreplay_bench_create_prefill: what creating a buffer and filling it once costs, with the segment's pages
// populated at creation (CreateOptions::populate = always) against left to the first writer (never), in the same
// run (docs/benchmarks/pages.md, "Creating and prefilling a buffer").
//
//   shmreplay_bench_create_prefill                    8 envs x 4096 Atari-like steps (0.92 GB), 3 trials
//   shmreplay_bench_create_prefill --envs 16          a larger buffer (--capacity too)
//   shmreplay_bench_create_prefill --quick            2 envs x 64 steps, one trial: a smoke run for CI
//
// Each trial creates the buffer (timed), then fills every slot once by a Writer pushing one step of every env per
// call (timed): in this process ("same process"), and, in a second buffer, in a forked child that opens it by
// name, as an env worker does ("other process"). MB/s are stored bytes per second of the prefill alone and of
// create + prefill; the median of the trials is reported, and the last row is always / never.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/writer.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace shmreplay;

struct Options {
  bool quick = false;
  uint64_t envs = 8;
  uint64_t capacity = 4096;
  uint32_t trials = 3;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void prefill(Buffer& buf) {
  Writer w = Writer::range(buf, 0, buf.num_envs());
  std::vector<std::vector<std::byte>> data;
  std::vector<FieldBytes> fields;
  for (const Field& f : buf.schema().fields()) {
    data.emplace_back(buf.num_envs() * f.bytes(), std::byte{1});
    fields.push_back({data.back().data(), data.back().size()});
  }
  std::vector<uint64_t> ids(buf.num_envs());
  for (uint64_t e = 0; e < ids.size(); ++e) ids[e] = e;
  for (uint64_t s = 0; s < buf.capacity(); ++s) w.push(std::span<const uint64_t>(ids), fields);
}

struct Times {
  double create_s = 0;
  double prefill_s = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Times trial(const Options& o, const Schema& schema, Populate populate, bool other_process) {
  const std::string name = fmt::format("shmreplay-create-prefill-{}", ::getpid());
  Times t;
  const auto c0 = Clock::now();
  Buffer buf = Buffer::create(name, o.envs, o.capacity, schema, {.replace = true, .populate = populate});
  t.create_s = seconds_since(c0);
  const auto p0 = Clock::now();
  if (!other_process) {
    prefill(buf);
  } else {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 0;
      try {
        Buffer mine = Buffer::open(name);
        prefill(mine);
      } catch (const std::exception& e) {
        fmt::print(stderr, "shmreplay_bench_create_prefill: child: {}\n", e.what());
        rc = 1;
      }
      ::_exit(rc);
    }
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      Buffer::remove(name);
      throw std::runtime_error("the prefilling child failed");
    }
  }
  t.prefill_s = seconds_since(p0);
  Buffer::remove(name);
  return t;
}

int run(const Options& o) {
  const Schema schema = Schema::parse("obs:u8[84,84,4] action:i32 reward:f32 done:bool");  // Atari-like
  const double mb = static_cast<double>(o.envs * o.capacity * schema.step_bytes()) / 1e6;
  fmt::print("Atari-like buffer: {} envs x {} steps x {} bytes = {:.0f} MB stored; median of {} trials\n\n", o.envs,
             o.capacity, schema.step_bytes(), mb, o.trials);
  fmt::print("| populate | prefill by | create ms | prefill MB/s | create + prefill MB/s |\n"
             "|---|---|---:|---:|---:|\n");
  for (const bool other : {false, true}) {
    double total_mbs[2] = {0, 0};
    for (const Populate p : {Populate::never, Populate::always}) {
      std::vector<double> create_ms;
      std::vector<double> prefill_mbs;
      std::vector<double> both_mbs;
      for (uint32_t i = 0; i < o.trials; ++i) {
        const Times t = trial(o, schema, p, other);
        create_ms.push_back(t.create_s * 1e3);
        prefill_mbs.push_back(mb / t.prefill_s);
        both_mbs.push_back(mb / (t.create_s + t.prefill_s));
      }
      const int k = p == Populate::always ? 1 : 0;
      total_mbs[k] = median(both_mbs);
      fmt::print("| {} | {} | {:.1f} | {:.0f} | {:.0f} |\n", k == 1 ? "always" : "never",
                 other ? "other process" : "same process", median(create_ms), median(prefill_mbs), total_mbs[k]);
    }
    fmt::print("| always / never | {} | | | {:.2f}x |\n", other ? "other process" : "same process",
               total_mbs[1] / total_mbs[0]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_create_prefill: create + prefill of an Atari-like buffer, populated or not");
  app.add_flag("--quick", o.quick, "2 envs x 64 steps, one trial: a smoke run for CI");
  app.add_option("--envs", o.envs, "Envs (default 8)")->check(CLI::Range(uint64_t{1}, uint64_t{4096}));
  app.add_option("--capacity", o.capacity, "Steps per env (default 4096)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  app.add_option("--trials", o.trials, "Trials per figure; the median is reported (default 3)")
      ->check(CLI::Range(1u, 101u));
  return shmreplay::bench::bench_main(
      app, argc, argv,
      [&](const shmreplay::bench::QuickDefaults& quick) {
        quick("--envs", o.envs, 2);
        quick("--capacity", o.capacity, 64);
        quick("--trials", o.trials, 1);
      },
      [&](const std::string&) { return run(o); });
}
