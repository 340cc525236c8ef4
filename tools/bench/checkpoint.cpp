// shmreplay_bench_checkpoint: what checkpoints cost (issue 33), measured in one run.
//
//   1. Incremental against full: a buffer of about --gb GB of small steps (MuJoCo-like, with priorities), filled,
//      then a whole save (save_checkpoint) and the chain's first link (whole), then incremental links
//      (save_link) after 0.1%, 1% and 10% of the stored steps were pushed anew: seconds and bytes of each, and
//      the restore of the chain (load_chain) against the restore of the whole file (load_checkpoint).
//   2. Push and sample rates while a checkpoint runs: a writer process pushing every env (at full speed, or paced
//      at a fixed env rate) and a learner process sampling, alone and beside a saver process that either writes
//      whole checkpoints back to back or adds a link every --every seconds (`shmreplay save NAME DIR --every`);
//      the configurations alternate within each round and each ratio is taken within its round (the machine's
//      noise falls on both sides alike), then the median over rounds.
//
//   shmreplay_bench_checkpoint                   about 2 minutes at --gb 1 (the files go to --dir, default /var/tmp)
//   shmreplay_bench_checkpoint --quick           a 16 MB buffer, short trials: a smoke run for CI
//   shmreplay_bench_checkpoint --gb 4 --rounds 5 --saver-nice 0
//
// Every process is forked from this one and opens the segment by name (harness.hpp); the segment and the files
// are removed however the run ends (the Janitor; the directory at the end). docs/benchmarks/checkpoints.md has
// the method and the figures.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <utility>
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
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/writer.hpp"
#include "staging.hpp"

namespace {

using namespace shmreplay;
using namespace shmreplay::bench;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr uint64_t kEnvs = 16;
constexpr double kAlpha = 0.6;
constexpr const char* kSchema = "obs:f32[17] action:f32[6] reward:f32 done:bool";

struct Options {
  bool quick = false;
  double gb = 1.0;             // the buffer's data bytes, in GB
  std::string dir = "/var/tmp";
  double seconds = 1.0;        // one trial of part 2
  uint32_t trials = 3;         // trials per configuration and round (part 2), saves per figure (part 1)
  uint32_t rounds = 3;         // part 2's rounds
  double every = 1.0;          // the link saver's period
  double paced_rate = 160000;  // the paced writer's steps per second (16 envs at 10,000 steps/s each)
  int saver_nice = 10;         // the saver process's nice value (shmreplay save's and the Checkpointer's default)
  bool only_costs = false, only_rates = false;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs `save` `trials` times (`before` first each time, untimed); the median wall and CPU seconds (this thread's,
// user and system: the process has no other thread).
std::pair<double, double> timed(uint32_t trials, const std::function<void()>& before,
                                const std::function<void()>& save) {
  std::vector<double> wall, cpu;
  for (uint32_t i = 0; i < trials; ++i) {
    before();
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    save();
    wall.push_back(seconds_since(t0));
    cpu.push_back(thread_cpu_seconds() - c0);
  }
  return {median(wall), median(cpu)};
}
double mb(uint64_t bytes) { return static_cast<double>(bytes) * 1e-6; }

// Pushes `steps` steps into every env (batched: one call per step, every env).
void push_all(Writer& w, const Staging& in, const std::vector<uint64_t>& ids, uint64_t steps) {
  for (uint64_t s = 0; s < steps; ++s) w.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(in.all));
}

// -- Part 1: incremental against full -------------------------------------------------------------------------------

struct SaveFigure {
  std::string what;
  double new_fraction = 0;  // steps pushed since the previous link, as a fraction of the stored steps
  double seconds = 0;       // median
  double cpu_seconds = 0;   // median: this process's CPU time (user and system) during the save
  uint64_t bytes = 0;       // the file
  uint64_t record_bytes = 0;
};

void part_costs(const Options& o, const std::string& name, const Geometry& g, const std::string& dir) {
  Buffer buf = Buffer::open(name, {.expected_schema = g.schema});
  const std::vector<uint64_t> ids = env_range(0, kEnvs);
  const Staging in(g.schema, kEnvs);
  std::vector<SaveFigure> figures;
  const std::string full = dir + "/full.shmrckpt";
  {
    CheckpointInfo info;
    const auto [wall, cpu] = timed(o.trials, [&] { fs::remove(full); }, [&] { info = save_checkpoint(buf, full); });
    figures.push_back({"whole file (save_checkpoint)", 1.0, wall, cpu, info.file_bytes,
                       info.total_steps * g.schema.step_bytes()});
  }
  const std::string chain = dir + "/chain";
  {
    LinkResult r;
    const auto [wall, cpu] = timed(o.trials, [&] { fs::remove_all(chain); },
                                   [&] { r = save_link(buf, chain, {.keep = 2}); });
    figures.push_back({"first link (whole)", 1.0, wall, cpu, r.info.file_bytes, r.record_bytes});
  }
  Writer w(buf, ids);
  for (const double fraction : {0.0, 0.001, 0.01, 0.1}) {
    const auto steps = static_cast<uint64_t>(fraction * static_cast<double>(g.capacity));
    LinkResult r;
    const auto [wall, cpu] = timed(o.trials, [&] { push_all(w, in, ids, steps); },
                                   [&] { r = save_link(buf, chain, {.keep = 2}); });
    figures.push_back({fmt::format("link after {:g}% new steps", fraction * 100), fraction, wall, cpu,
                       r.info.file_bytes, r.record_bytes});
  }
  // Restores into a new name: the whole file against the chain's newest link and the links it needs.
  const std::string restored = name + "-restored";
  register_segment_file(shm_directory() + "/" + restored);
  auto restore = [&](const std::function<void()>& load) {
    std::vector<double> t;
    for (uint32_t i = 0; i < o.trials; ++i) {
      const auto t0 = Clock::now();
      load();
      t.push_back(seconds_since(t0));
      Buffer::remove(restored);
    }
    return median(t);
  };
  const double load_full = restore([&] { load_checkpoint(full, restored); });
  const double load_chain_s = restore([&] { load_chain(chain, restored); });
  unregister_segment_file(shm_directory() + "/" + restored);
  uint64_t chain_bytes = 0;
  for (const ChainLink& l : list_links(chain)) chain_bytes += l.file_bytes;

  const SaveFigure& whole = figures.front();
  fmt::print("### Incremental against full\n\n");
  fmt::print("{} envs x {} steps of `{}` ({} B per step, alpha {}): {:.1f} MB of records, {} steps. Files in `{}`; "
             "each time is the median of {} saves (CPU: this process's user and system time) and includes the "
             "fsyncs. Besides the records, every link holds each stored step's priority weight (4 B) and the "
             "buffer's state whole.\n\n",
             kEnvs, g.capacity, kSchema, g.schema.step_bytes(), kAlpha, mb(g.data_bytes()), kEnvs * g.capacity,
             o.dir, o.trials);
  fmt::print("| save | new steps | seconds | CPU seconds | MB written | of which records | MB/s | time / whole | "
             "bytes / whole |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const SaveFigure& f : figures) {
    fmt::print("| {} | {:g}% | {:.3f} | {:.3f} | {:.1f} | {:.1f} | {:.0f} | {:.3f} | {:.4f} |\n", f.what,
               f.new_fraction * 100, f.seconds, f.cpu_seconds, mb(f.bytes), mb(f.record_bytes),
               mb(f.bytes) / f.seconds, f.seconds / whole.seconds,
               static_cast<double>(f.bytes) / static_cast<double>(whole.bytes));
  }
  fmt::print("\nRestore into a new name (every CRC verified first): the whole file {:.3f} s, the chain's newest "
             "link and the links it needs {:.3f} s ({:.2f}x); the chain's directory holds {:.1f} MB (keep 2).\n\n",
             load_full, load_chain_s, load_chain_s / load_full, mb(chain_bytes));
  fs::remove(full);
  fs::remove_all(chain);
}

// -- Part 2: rates while a checkpoint runs --------------------------------------------------------------------------

enum class Saver { none, whole, links };
const char* to_string(Saver s) {
  switch (s) {
    case Saver::none: return "no saver";
    case Saver::whole: return "whole saves back to back";
    case Saver::links: return "a link every period";
  }
  return "?";
}

// Thrown from a save's progress callback to end the saver when the run stops (the save removes its temporary).
struct Stopped {};

// The saver process: units are bytes of records written. It reports to the harness after each chunk of about
// 1 MiB (the save's progress callback), so that its trial marks stay prompt, and between links.
Body saver_body(const std::string& name, const std::string& dir, Saver kind, double every, int nice) {
  return [=](Worker& worker) {
    if (nice != 0) (void)::setpriority(PRIO_PROCESS, 0, nice);
    const Buffer buf = Buffer::open(name, {.read_only = true});
    uint64_t reported = 0;
    SaveOptions save;
    save.progress = [&](const CheckpointProgress& p) {
      const uint64_t add = p.done_bytes - reported;
      reported = p.done_bytes;
      if (!worker.done(add)) throw Stopped{};
    };
    if (!worker.start()) return;
    try {
      for (;;) {
        const auto t0 = Clock::now();
        reported = 0;
        if (kind == Saver::whole) {
          save_checkpoint(buf, dir + "/run.shmrckpt", save);
          continue;
        }
        save_link(buf, dir + "/run-chain", {.keep = 2, .save = save});
        const auto next = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(every));
        while (Clock::now() < next) {
          if (!worker.done(0)) return;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
    } catch (const Stopped&) {
    }
  };
}

// A writer pushing every env at `rate` steps per second in all (one call of every env per 16 steps), on a fixed
// schedule: an env worker whose envs take their time.
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

struct RateRow {
  std::string writer;
  Saver saver = Saver::none;
  std::vector<double> push, sample, save;  // per round: steps/s, rows/s, bytes/s
};

double rate(const WorkerTrials& w) {
  double units = 0, s = 0;
  for (std::size_t i = 0; i < w.units.size(); ++i) {
    units += static_cast<double>(w.units[i]);
    s += w.seconds[i];
  }
  return s > 0 ? units / s : 0;
}

void part_rates(const Options& o, const std::string& name, const Geometry& g, const std::string& dir) {
  std::vector<RateRow> rows;
  for (const char* writer : {"full speed", "paced"}) {
    for (const Saver s : {Saver::none, Saver::whole, Saver::links}) rows.push_back({writer, s, {}, {}, {}});
  }
  const std::size_t batch = 256;
  for (uint32_t round = 0; round < o.rounds; ++round) {
    for (RateRow& row : rows) {
      fmt::print(stderr, "shmreplay_bench_checkpoint: round {}: writer {}, {} ...", round + 1, row.writer,
                 to_string(row.saver));
      std::fflush(stderr);
      std::vector<Body> bodies;
      std::vector<std::string> names;
      bodies.push_back(row.writer == std::string("full speed") ? ours_push(g, name, PushMode::batched, 0)
                                                               : paced_push(g, name, o.paced_rate));
      names.push_back("writer");
      bodies.push_back(ours_sample(g, name, batch, 1, 1000 + round));
      names.push_back("learner");
      if (row.saver != Saver::none) {
        bodies.push_back(saver_body(name, dir, row.saver, o.every, o.saver_nice));
        names.push_back("saver");
      }
      std::vector<WorkerTrials> t;
      {
        Team team(std::move(bodies), std::move(names));
        t = team.run(o.quick ? 0.05 : 0.5, o.seconds, o.trials, std::max(5 * o.seconds, 2.0));
      }
      row.push.push_back(rate(t[0]));
      row.sample.push_back(rate(t[1]));
      row.save.push_back(t.size() > 2 ? static_cast<double>(t[2].total_units) /
                                            std::max(t[2].run_seconds, 1e-9)
                                      : 0);
      fmt::print(stderr, " {:.2f} M steps/s, {:.2f} M rows/s\n", row.push.back() * 1e-6, row.sample.back() * 1e-6);
      fs::remove_all(dir + "/run-chain");
      fs::remove(dir + "/run.shmrckpt");
    }
  }
  fmt::print("### Push and sample rates while a checkpoint runs\n\n");
  fmt::print("One writer process pushing all {} envs (batched, at full speed or paced at {:.0f} steps/s), one "
             "learner process sampling {} transitions per call (replay view, power 1), and a saver process "
             "(nice {}) writing whole checkpoints back to back or a link every {:g} s into `{}`; {} rounds of the "
             "six configurations in turn, each {} trials of {:g} s. Rates are medians over rounds; each ratio is "
             "taken within its round against the same writer's run with no saver, then the median.\n\n",
             kEnvs, o.paced_rate, batch, o.saver_nice, o.every, o.dir, o.rounds, o.trials, o.seconds);
  fmt::print("| writer | saver | push, M steps/s | sample, M rows/s | push / no saver | sample / no saver | "
             "saver MB/s |\n");
  fmt::print("|---|---|---:|---:|---:|---:|---:|\n");
  for (const RateRow& row : rows) {
    const RateRow& base = *std::find_if(rows.begin(), rows.end(), [&](const RateRow& r) {
      return r.writer == row.writer && r.saver == Saver::none;
    });
    fmt::print("| {} | {} | {:.3f} | {:.3f} | {:.2f} | {:.2f} | {} |\n", row.writer, to_string(row.saver),
               median(row.push) * 1e-6, median(row.sample) * 1e-6, median_ratio(row.push, base.push),
               median_ratio(row.sample, base.sample),
               row.saver == Saver::none ? std::string("-") : fmt::format("{:.0f}", median(row.save) * 1e-6));
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
  const std::string name = fmt::format("shmreplay-bench-ckpt-{}", ::getpid());
  const std::string dir = fmt::format("{}/shmreplay-bench-ckpt-{}", o.dir, ::getpid());
  const Janitor janitor({shm_directory() + "/" + name});
  register_segment_file(shm_directory() + "/" + name);
  const ScratchDir scratch(dir);

  fmt::print("## shmreplay_bench_checkpoint\n\n`{}` on {} ({} cores online, {:.1f} GiB), {}, {} build, load "
             "average {}.\n\n",
             command, machine.cpu, machine.cores_online, machine.memory_gib, machine.kernel, machine.build_type,
             machine.load_average);
  fmt::print(stderr, "shmreplay_bench_checkpoint: creating and filling {} envs x {} steps ({:.1f} MB)\n", kEnvs,
             g.capacity, mb(g.data_bytes()));
  {
    Buffer buf = Buffer::create(name, kEnvs, g.capacity, g.schema,
                                {.priority_exponent = kAlpha, .populate = Populate::always});
    Writer w(buf, env_range(0, kEnvs));
    const Staging in(g.schema, kEnvs);
    push_all(w, in, env_range(0, kEnvs), g.capacity);
  }
  if (!o.only_rates) part_costs(o, name, g, dir);
  if (!o.only_costs) part_rates(o, name, g, dir);
  Buffer::remove(name);
  unregister_segment_file(shm_directory() + "/" + name);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_checkpoint: incremental against whole checkpoints, and push and sample rates while "
               "a checkpoint runs against without, in one run");
  app.add_flag("--quick", o.quick, "A 16 MB buffer, one 50 ms trial per configuration, one round: a smoke run");
  app.add_option("--gb", o.gb, "The buffer's data, in GB (default 1)")->check(CLI::Range(0.001, 64.0));
  app.add_option("--dir", o.dir, "Where the checkpoint files go (a folder made inside it; default /var/tmp)");
  app.add_option("--seconds", o.seconds, "One trial of the rates (default 1)")->check(CLI::Range(0.01, 60.0));
  app.add_option("--trials", o.trials, "Trials per configuration and round; saves per figure (default 3)")
      ->check(CLI::Range(1u, kMaxTrials));
  app.add_option("--rounds", o.rounds, "Rounds of the rate configurations (default 3)")->check(CLI::Range(1u, 100u));
  app.add_option("--every", o.every, "The link saver's period in seconds (default 1)")->check(CLI::Range(0.0, 3600.0));
  app.add_option("--paced-rate", o.paced_rate, "The paced writer's steps per second (default 160000)")
      ->check(CLI::Range(16.0, 1e9));
  app.add_option("--saver-nice", o.saver_nice,
                 "The saver process's nice value (default 10, as `shmreplay save` and the Checkpointer lower theirs)")
      ->check(CLI::Range(-20, 19));
  app.add_flag("--only-costs", o.only_costs, "Only part 1: incremental against whole");
  app.add_flag("--only-rates", o.only_rates, "Only part 2: rates while a checkpoint runs");
  return shmreplay::bench::bench_main(
      app, argc, argv,
      [&](const shmreplay::bench::QuickDefaults& quick) {
        quick("--gb", o.gb, 0.016);
        quick("--seconds", o.seconds, 0.05);
        quick("--trials", o.trials, 1);
        quick("--rounds", o.rounds, 1);
        quick("--dir", o.dir, fs::temp_directory_path().string());
      },
      [&](const std::string& command) { return run(o, command); });
}
