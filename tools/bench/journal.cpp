// shmreplay_bench_journal: what the journal (shmreplay/journal.hpp) costs the push, and the lag it keeps, in one run.
//
// One writer process pushing every env (at full speed, or paced at a fixed rate) and one learner process sampling,
// alone and beside a journal process (Journal with --bound, its links into --dir); the configurations alternate
// within each round, each ratio is taken within its round against the same writer's run without a journal, then the
// median over rounds. The journal process logs each link's lag (its end minus the instant up to which every step
// was durable before it) and save time into a shared log; the table gives their distribution per writer.
//
//   shmreplay_bench_journal                         about a minute (a 256 MB buffer; the links go to /var/tmp)
//   shmreplay_bench_journal --quick                 a 16 MB buffer, short trials: a smoke run for CI
//   shmreplay_bench_journal --bound 2 --rounds 5 --dir /mnt/nvme
//
// docs/benchmarks/journal.md has the method and the figures.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "bodies.hpp"
#include "harness.hpp"
#include "median_rate.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/journal.hpp"
#include "shmreplay/writer.hpp"
#include "staging.hpp"

namespace {

using namespace shmreplay;
using namespace shmreplay::bench;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr uint64_t kEnvs = 16;
constexpr const char* kSchema = "obs:f32[17] action:f32[6] reward:f32 done:bool";
constexpr std::size_t kMaxLinks = 1 << 16;

struct Options {
  bool quick = false;
  double gb = 0.25;
  std::string dir = "/var/tmp";
  double bound = 2.0;
  double seconds = 2.0;       // one trial
  uint32_t trials = 3;
  uint32_t rounds = 3;
  double paced_rate = 160000;  // 16 envs at 10,000 steps/s each
};

// The journal process's links, in a shared anonymous mapping the parent reads after the Team is gone.
struct LinkLog {
  std::atomic<uint64_t> links;
  double lag_s[kMaxLinks];
  double save_s[kMaxLinks];
  uint64_t late;
  uint64_t failures;
};

LinkLog* shared_log() {
  void* p = ::mmap(nullptr, sizeof(LinkLog), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap of the link log failed");
  return new (p) LinkLog{};
}

// The journal process: its first link (the whole buffer) while the workers set up, then the journal's thread
// until the run stops, each later link logged.
Body journal_body(const std::string& name, const std::string& dir, double bound, LinkLog* log) {
  return [=](Worker& worker) {
    bool logging = false;
    JournalOptions options{.bound_s = bound, .keep = 2};
    options.on_link = [&logging, log](const JournalLink& l) {
      if (!logging || l.last) return;
      if (!l.error.empty()) {
        ++log->failures;
        return;
      }
      const uint64_t n = log->links.load(std::memory_order_relaxed);
      if (n >= kMaxLinks) return;
      log->lag_s[n] = l.lag_s;
      log->save_s[n] = l.seconds;
      log->late += l.late ? 1 : 0;
      log->links.store(n + 1, std::memory_order_release);
    };
    Journal j(name, dir, options);
    (void)j.write_link();
    // The thread starts at once, before the run's warm-up: a gap between the first link and the thread would be a
    // time without a journal, which the next link's lag would count.
    logging = true;  // before the thread starts, which makes it visible there
    j.start();
    if (worker.start()) {
      while (worker.done(0)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    j.stop();
  };
}

// A writer pushing every env at `rate` steps per second in all, on a fixed schedule.
Body paced_push(const Geometry& g, const std::string& name, double rate) {
  return [=](Worker& worker) {
    Buffer buffer = Buffer::open(name, {.expected_schema = g.schema});
    const std::vector<uint64_t> ids = env_range(0, kEnvs);
    Writer writer(buffer, ids);
    const Staging in(g.schema, kEnvs);
    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(static_cast<double>(kEnvs) / rate));
    if (!worker.start()) return;
    auto next = Clock::now();
    do {
      writer.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(in.all));
      next += period;
      const auto now = Clock::now();
      if (next > now) std::this_thread::sleep_for(next - now);
    } while (worker.done(kEnvs));
  };
}

double rate(const WorkerTrials& w) {
  double units = 0, s = 0;
  for (std::size_t i = 0; i < w.units.size(); ++i) {
    units += static_cast<double>(w.units[i]);
    s += w.seconds[i];
  }
  return s > 0 ? units / s : 0;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

struct Row {
  std::string writer;
  bool journal = false;
  std::vector<double> push, sample;  // per round
  std::vector<double> lags, saves;   // every logged link, all rounds
  uint64_t late = 0, failures = 0;
};

void measure(const Options& o, const std::string& name, const Geometry& g, const std::string& dir, Row& row,
             uint32_t round) {
  std::vector<Body> bodies;
  std::vector<std::string> names;
  bodies.push_back(row.writer == "full speed" ? ours_push(g, name, PushMode::batched, 0)
                                              : paced_push(g, name, o.paced_rate));
  names.push_back("writer");
  bodies.push_back(ours_sample(g, name, 256, 1, 1000 + round));
  names.push_back("learner");
  LinkLog* log = shared_log();
  const std::string chain = dir + "/chain";
  if (row.journal) {
    bodies.push_back(journal_body(name, chain, o.bound, log));
    names.push_back("journal");
  }
  std::vector<WorkerTrials> t;
  {
    Team team(std::move(bodies), std::move(names));
    t = team.run(o.quick ? 0.05 : 0.5, o.seconds, o.trials, std::max(5 * o.seconds, 2.0));
  }
  row.push.push_back(rate(t[0]));
  row.sample.push_back(rate(t[1]));
  const uint64_t n = log->links.load(std::memory_order_acquire);
  row.lags.insert(row.lags.end(), log->lag_s, log->lag_s + n);
  row.saves.insert(row.saves.end(), log->save_s, log->save_s + n);
  row.late += log->late;
  row.failures += log->failures;
  ::munmap(log, sizeof(LinkLog));
  fs::remove_all(chain);
}

void report(const Options& o, const std::vector<Row>& rows, const Geometry& g) {
  fmt::print("### Push and sample rates with and without a journal\n\n");
  fmt::print("One writer process pushing all {} envs of `{}` ({} B per step; batched, at full speed or paced at "
             "{:.0f} steps/s), one learner process sampling 256 transitions per call, and a journal process (bound "
             "{:g} s, links into `{}`); {} rounds of the four configurations in turn, each {} trials of {:g} s. "
             "Rates are medians over rounds; each ratio is taken within its round against the same writer's run "
             "without a journal, then the median. The lag of a link is its end minus the instant up to which every "
             "published step was durable before it: the longest any step waited to be durable.\n\n",
             kEnvs, kSchema, g.schema.step_bytes(), o.paced_rate, o.bound, o.dir, o.rounds, o.trials, o.seconds);
  fmt::print("| writer | journal | push, M steps/s | sample, M rows/s | push / no journal | sample / no journal | "
             "links | lag p50, s | lag p99, s | lag max, s | link p50, s | link max, s | late | failed |\n");
  fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& row : rows) {
    const Row& base = *std::find_if(rows.begin(), rows.end(),
                                    [&](const Row& r) { return r.writer == row.writer && !r.journal; });
    const std::string lag =
        row.journal ? fmt::format("{} | {:.3f} | {:.3f} | {:.3f} | {:.4f} | {:.4f} | {} | {}", row.lags.size(),
                                  quantile(row.lags, 0.5), quantile(row.lags, 0.99),
                                  row.lags.empty() ? 0.0 : *std::max_element(row.lags.begin(), row.lags.end()),
                                  quantile(row.saves, 0.5),
                                  row.saves.empty() ? 0.0 : *std::max_element(row.saves.begin(), row.saves.end()),
                                  row.late, row.failures)
                    : std::string("- | - | - | - | - | - | - | -");
    fmt::print("| {} | {} | {:.3f} | {:.3f} | {:.2f} | {:.2f} | {} |\n", row.writer, row.journal ? "yes" : "no",
               median(row.push) * 1e-6, median(row.sample) * 1e-6, median_ratio(row.push, base.push),
               median_ratio(row.sample, base.sample), lag);
  }
  fmt::print("\n");
}

int run(const Options& o, const std::string& command) {
  install_signal_handlers();
  const MachineInfo machine = describe_machine();
  Geometry g;
  g.label = "small";
  g.schema = Schema::parse(kSchema);
  g.num_envs = kEnvs;
  g.envs_per_writer = kEnvs;
  g.capacity = std::max<uint64_t>(
      64, static_cast<uint64_t>(o.gb * 1e9 / static_cast<double>(kEnvs * g.schema.step_bytes())));
  const std::string name = fmt::format("shmreplay-bench-journal-{}", ::getpid());
  const std::string dir = fmt::format("{}/shmreplay-bench-journal-{}", o.dir, ::getpid());
  const Janitor janitor({shm_directory() + "/" + name});
  register_segment_file(shm_directory() + "/" + name);
  const ScratchDir scratch(dir);
  fmt::print("## shmreplay_bench_journal\n\n`{}` on {} ({} cores online, {:.1f} GiB), {}, {} build, load "
             "average {}.\n\n",
             command, machine.cpu, machine.cores_online, machine.memory_gib, machine.kernel, machine.build_type,
             machine.load_average);
  {  // filled, so that the learner samples from the start (and the journal's first link is a whole buffer)
    Buffer buf = Buffer::create(name, kEnvs, g.capacity, g.schema, {.populate = Populate::always});
    const std::vector<uint64_t> ids = env_range(0, kEnvs);
    Writer w(buf, ids);
    const Staging in(g.schema, kEnvs);
    for (uint64_t s = 0; s < g.capacity; ++s) w.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(in.all));
  }
  std::vector<Row> rows;
  for (const char* writer : {"full speed", "paced"}) {
    for (const bool journal : {false, true}) rows.push_back({writer, journal, {}, {}, {}, {}, 0, 0});
  }
  for (uint32_t round = 0; round < o.rounds; ++round) {
    for (Row& row : rows) {
      fmt::print(stderr, "shmreplay_bench_journal: round {}: writer {}, {} ...", round + 1, row.writer,
                 row.journal ? "journal" : "no journal");
      std::fflush(stderr);
      measure(o, name, g, dir, row, round);
      fmt::print(stderr, " {:.2f} M steps/s\n", row.push.back() * 1e-6);
    }
  }
  report(o, rows, g);
  Buffer::remove(name);
  unregister_segment_file(shm_directory() + "/" + name);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_journal: push and sample rates with and without a journal, and the journal's lag, "
               "in one run");
  app.add_flag("--quick", o.quick, "A 16 MB buffer, one short trial per configuration, one round: a smoke run");
  app.add_option("--gb", o.gb, "The buffer's data, in GB (default 0.25)")->check(CLI::Range(0.001, 64.0));
  app.add_option("--dir", o.dir, "Where the chain directory goes (a folder made inside it; default /var/tmp)");
  app.add_option("--bound", o.bound, "The journal's bound in seconds (default 2)")
      ->check(CLI::Range(kJournalMinBoundS, 3600.0));
  app.add_option("--seconds", o.seconds, "One trial (default 2)")->check(CLI::Range(0.01, 60.0));
  app.add_option("--trials", o.trials, "Trials per configuration and round (default 3)")
      ->check(CLI::Range(1u, kMaxTrials));
  app.add_option("--rounds", o.rounds, "Rounds of the configurations (default 3)")->check(CLI::Range(1u, 100u));
  app.add_option("--paced-rate", o.paced_rate, "The paced writer's steps per second (default 160000)")
      ->check(CLI::Range(16.0, 1e9));
  return shmreplay::bench::bench_main(
      app, argc, argv,
      [&](const shmreplay::bench::QuickDefaults& quick) {
        quick("--gb", o.gb, 0.016);
        quick("--seconds", o.seconds, 0.3);
        quick("--trials", o.trials, 1);
        quick("--rounds", o.rounds, 1);
        quick("--bound", o.bound, 0.1);
        quick("--dir", o.dir, fs::temp_directory_path().string());
      },
      [&](const std::string& command) { return run(o, command); });
}
