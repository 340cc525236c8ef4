// shmreplay_bench_learners: rows sampled per second by one learner process against two on one buffer (issue 34,
// docs/design/learners.md), with no writer and with two writer processes pushing at full speed, against a
// baseline measured in the same run: one against two processes copying the same rows of the same segment with
// plain memcpy (no protocol), so that the learners' scaling can be read against the scaling the machine's memory
// system and cores give a trivially parallel copy.
//
//   shmreplay_bench_learners                     about 6 minutes: 5 rounds, buffers of about 1 GB each
//   shmreplay_bench_learners --quick             tiny buffers, one 50 ms trial per run, one round: ctest's smoke run
//   shmreplay_bench_learners --rounds 9 --seconds 2 --no-large
//
// One buffer per step size, created with max_learners = 2 and every ring filled before the run:
//   small  `obs:f32[17] action:f32[6] reward:f32 done:bool`, 97 B per step (MuJoCo-like), --capacity steps per env
//   large  `obs:f32[1024] action:f32[6] reward:f32 done:bool`, 4,125 B per step, --large-capacity steps per env
// Configurations: small steps with sequence length 1 and 10, large steps with length 1; each with 0 and 2 writer
// processes (each pushing its half of the envs, batched, at full speed). In each, four runs:
//   ours x1   one learner process: Sampler(buffer, {.rank = 0}), sample(View::replay, batch, L, power 0) in a loop
//   ours x2   two learner processes, ranks 0 and 1, each as above, at the same time
//   memcpy x1 one process copying `batch` rows of L steps per call from uniform random (env, start) positions of
//             the segment's own field arrays, a memcpy per field and row, into its own output (what a sample call
//             copies, without the draw, the seqlock, the mask and the retries)
//   memcpy x2 two such processes at the same time
// Every process is forked anew for its run and opens the segment by name (harness.hpp); a run is a warm-up and
// --trials trials of --seconds. The configurations and their runs alternate within each of --rounds rounds (the
// order reversed every other round), each ratio is taken within its round, then the median over rounds: the
// machine's noise falls on both sides of a ratio alike. Rows per CPU-second (the learners' own CPU time) say what
// a row costs whatever share of a core each process got. docs/benchmarks/learners.md has the method and figures.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench_cli.hpp"
#include "shmreplay/internal/segment.hpp"
#include "bench_support.hpp"
#include "bodies.hpp"
#include "harness.hpp"
#include "median_rate.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "staging.hpp"

namespace {

using namespace shmreplay;
using namespace shmreplay::bench;

constexpr uint64_t kWriters = 2;
constexpr const char* kSmallSchema = "obs:f32[17] action:f32[6] reward:f32 done:bool";
constexpr const char* kLargeSchema = "obs:f32[1024] action:f32[6] reward:f32 done:bool";

struct Options {
  bool quick = false;
  bool large = true;
  double seconds = 1.0;
  uint32_t trials = 2;
  uint32_t rounds = 5;
  uint64_t envs = 16;
  uint64_t capacity = 655360;      // small steps per env: 16 x 655,360 x 97 B = 1.02 GB
  uint64_t large_capacity = 16384;  // large steps per env: 16 x 16,384 x 4,125 B = 1.08 GB
  std::size_t batch = 256;
};

// One learner process: its own Sampler on learner slot `rank`, uniform draws (power 0) from the replay view.
Body learner_body(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length, uint64_t rank,
                  uint64_t seed) {
  return [g, name, batch, length, rank, seed](Worker& worker) {
    Buffer buffer = Buffer::open(name, {.expected_schema = g.schema});
    populate(&segment_of(buffer).header(), static_cast<std::size_t>(buffer.total_bytes()));
    Sampler sampler(buffer, {.rank = rank});
    Rng rng(seed);
    SampleBatch out;
    sampler.sample(View::replay, batch, length, 0.0, rng, out);  // sizes (and touches) the output once
    if (!worker.start()) return;
    do {
      sampler.sample(View::replay, batch, length, 0.0, rng, out);
    } while (worker.done(batch));
    worker.set_retries(sampler.retries());
  };
}

// The baseline: the same rows of the same segment copied with a memcpy per field and row, no protocol at all.
Body memcpy_body(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length, uint64_t seed) {
  return [g, name, batch, length, seed](Worker& worker) {
    const Buffer buffer = Buffer::open(name, {.expected_schema = g.schema});
    populate(&segment_of(buffer).header(), static_cast<std::size_t>(buffer.total_bytes()));
    const std::size_t nf = g.schema.size();
    std::vector<const std::byte*> base(nf);
    std::vector<std::size_t> bytes(nf);
    for (std::size_t f = 0; f < nf; ++f) {
      base[f] = segment_of(buffer).field_data(f);
      bytes[f] = static_cast<std::size_t>(g.schema[f].bytes());
    }
    Rows out(g.schema, batch, length);
    std::vector<std::byte*> dst(nf);
    for (std::size_t f = 0; f < nf; ++f) dst[f] = out.data[f].data();
    SplitMix mix{seed};
    const uint64_t starts = g.capacity - length + 1;  // whole rows, never across the ring's end
    auto copy = [&] {
      for (std::size_t r = 0; r < batch; ++r) {
        const uint64_t slot = mix.below(g.num_envs) * g.capacity + mix.below(starts);
        for (std::size_t f = 0; f < nf; ++f) {
          std::memcpy(dst[f] + r * length * bytes[f], base[f] + slot * bytes[f], length * bytes[f]);
        }
      }
      clobber(dst[0]);
    };
    copy();
    if (!worker.start()) return;
    do {
      copy();
    } while (worker.done(batch));
  };
}

struct Shape {
  const char* label;
  Geometry g;
  std::string name;
};

struct Config {
  std::size_t shape = 0;  // index into the shapes
  std::size_t length = 1;
  uint64_t writers = 0;
};

enum Kind : std::size_t { kOurs = 0, kMemcpy = 1 };

// Per run kind (ours, memcpy) and process count (1, 2), per round.
struct Cell {
  std::vector<double> rows;      // rows/s of the learners (or copiers) together
  std::vector<double> cpu_rows;  // their rows per second of their own CPU time
  std::vector<double> cores;     // their CPU seconds per wall second, together
  std::vector<double> push;      // the writers' steps/s together
  uint64_t retries = 0;          // rows redrawn, over every round's whole runs (warm-ups included)
  uint64_t total_rows = 0;       // rows sampled, likewise
  bool late = false;
};

struct Figures {
  Cell cell[2][2];  // [kind][processes - 1]
};

struct Measured {
  double rows = 0, cpu_rows = 0, cores = 0, push = 0;
  uint64_t retries = 0, total_rows = 0;
  bool late = false;
};

// Units per second of a group of workers over the same trials: the sum of each one's units over its trial time.
Measured measure(const std::vector<WorkerTrials>& t, std::size_t first_learner) {
  Measured m;
  double units = 0, cpu = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    double u = 0, s = 0, c = 0;
    for (std::size_t k = 0; k < t[i].units.size(); ++k) {
      u += static_cast<double>(t[i].units[k]);
      s += t[i].seconds[k];
      c += t[i].cpu_seconds[k];
    }
    if (t[i].late) {  // starved past a trial boundary: its whole run instead (harness.hpp)
      u = static_cast<double>(t[i].run_units);
      s = t[i].run_seconds;
      c = t[i].run_cpu_seconds;
    }
    m.late = m.late || t[i].late;
    if (i < first_learner) {
      m.push += s > 0 ? u / s : 0;
      continue;
    }
    m.rows += s > 0 ? u / s : 0;
    m.cores += s > 0 ? c / s : 0;
    units += u;
    cpu += c;
    m.retries += t[i].retries;
    m.total_rows += t[i].total_units;
  }
  m.cpu_rows = cpu > 0 ? units / cpu : 0;
  return m;
}

void run_one(const Options& o, const Shape& s, const Config& c, Kind kind, uint64_t processes, uint32_t round,
             Cell& cell) {
  std::vector<Body> bodies;
  std::vector<std::string> names;
  Geometry g = s.g;
  g.envs_per_writer = g.num_envs / kWriters;
  for (uint64_t w = 0; w < c.writers; ++w) {
    bodies.push_back(ours_push(g, s.name, PushMode::batched, w * g.envs_per_writer));
    names.push_back(fmt::format("writer {}", w));
  }
  for (uint64_t p = 0; p < processes; ++p) {
    const uint64_t seed = 1000 * (round + 1) + 10 * p + kind;
    bodies.push_back(kind == kOurs ? learner_body(g, s.name, o.batch, c.length, p, seed)
                                   : memcpy_body(g, s.name, o.batch, c.length, seed));
    names.push_back(fmt::format("{} {}", kind == kOurs ? "learner" : "memcpy", p));
  }
  std::vector<WorkerTrials> t;
  {
    Team team(std::move(bodies), std::move(names));
    t = team.run(o.quick ? 0.02 : 0.3, o.seconds, o.trials, std::max(5 * o.seconds, 2.0));
  }
  const Measured m = measure(t, c.writers);
  cell.rows.push_back(m.rows);
  cell.cpu_rows.push_back(m.cpu_rows);
  cell.cores.push_back(m.cores);
  cell.push.push_back(m.push);
  cell.retries += m.retries;
  cell.total_rows += m.total_rows;
  cell.late = cell.late || m.late;
}

std::string config_label(const std::vector<Shape>& shapes, const Config& c) {
  return fmt::format("{} ({} B), L {}, {} writers", shapes[c.shape].label, shapes[c.shape].g.schema.step_bytes(),
                     c.length, c.writers);
}


// Per round: a / b.
std::vector<double> ratios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(b[i] > 0 ? a[i] / b[i] : 0);
  return r;
}

// The median of the per-round ratios `r` over the rounds in which the two processes had two cores between them
// (cores used >= 1.8) and the one process a whole core (>= 0.9): what the machine's cores allowed, whatever the
// other tenants took in the other rounds. "-" when no round qualified; the count of rounds that did in brackets.
std::string on_free_cores(const Cell (&k)[2], const std::vector<double>& r) {
  std::vector<double> kept;
  for (std::size_t i = 0; i < r.size() && i < k[0].cores.size() && i < k[1].cores.size(); ++i) {
    if (k[1].cores[i] >= 1.8 && k[0].cores[i] >= 0.9) kept.push_back(r[i]);
  }
  if (kept.empty()) return fmt::format("- (0 of {})", r.size());
  return fmt::format("{:.2f} ({} of {})", median(kept), kept.size(), r.size());
}

// The shapes measured: small steps, and with --large large ones.
std::vector<Shape> make_shapes(const Options& o) {
  std::vector<Shape> shapes;
  shapes.push_back({"small", {}, fmt::format("shmreplay-bench-learners-small-{}", ::getpid())});
  shapes[0].g.schema = Schema::parse(kSmallSchema);
  shapes[0].g.capacity = o.capacity;
  if (o.large) {
    shapes.push_back({"large", {}, fmt::format("shmreplay-bench-learners-large-{}", ::getpid())});
    shapes[1].g.schema = Schema::parse(kLargeSchema);
    shapes[1].g.capacity = o.large_capacity;
  }
  return shapes;
}

// Creates the shape's buffer (max_learners 2, its pages populated) and fills every ring.
void fill(const Shape& s) {
  fmt::print(stderr, "shmreplay_bench_learners: creating and filling {}: {} envs x {} steps of {} B ({:.1f} MB)\n",
             s.label, s.g.num_envs, s.g.capacity, s.g.schema.step_bytes(),
             static_cast<double>(s.g.data_bytes()) * 1e-6);
  Buffer buf = Buffer::create(s.name, s.g.num_envs, s.g.capacity, s.g.schema,
                              {.max_learners = 2, .populate = Populate::always});
  const std::vector<uint64_t> ids = env_range(0, s.g.num_envs);
  Writer w(buf, ids);
  const Staging in(s.g.schema, s.g.num_envs);
  for (uint64_t step = 0; step < s.g.capacity; ++step) {
    w.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(in.all));
  }
}

// The configurations: (shape, sequence length, writers) for 0 and kWriters writers.
std::vector<Config> make_configs(const Options& o) {
  std::vector<Config> configs;
  for (const uint64_t writers : {uint64_t{0}, kWriters}) {
    configs.push_back({0, 1, writers});
    configs.push_back({0, 10, writers});
    if (o.large) configs.push_back({1, 1, writers});
  }
  return configs;
}

// Every configuration's runs (ours and memcpy, 1 and 2 processes) in each round, every other round backwards, into
// `figures`. The load average at the start of each round.
std::vector<std::string> run_rounds(const Options& o, const std::vector<Shape>& shapes,
                                    const std::vector<Config>& configs, std::vector<Figures>& figures) {
  struct Run {
    std::size_t config;
    Kind kind;
    uint64_t processes;
  };
  std::vector<Run> order;
  for (std::size_t c = 0; c < configs.size(); ++c) {
    for (const Kind k : {kOurs, kMemcpy}) {
      for (const uint64_t p : {uint64_t{1}, uint64_t{2}}) order.push_back({c, k, p});
    }
  }
  std::vector<std::string> loads;  // the load average at the start of each round
  for (uint32_t round = 0; round < o.rounds; ++round) {
    loads.push_back(load_now());
    fmt::print(stderr, "shmreplay_bench_learners: round {} of {} (load average {})\n", round + 1, o.rounds,
               loads.back());
    for (std::size_t i = 0; i < order.size(); ++i) {
      const Run& r = order[round % 2 == 0 ? i : order.size() - 1 - i];  // every other round backwards
      const Config& c = configs[r.config];
      Cell& cell = figures[r.config].cell[r.kind][r.processes - 1];
      run_one(o, shapes[c.shape], c, r.kind, r.processes, round, cell);
      fmt::print(stderr, "  {}: {} x{}: {:.3f} M rows/s, {:.2f} cores{}\n", config_label(shapes, c),
                 r.kind == kOurs ? "ours" : "memcpy", r.processes, cell.rows.back() * 1e-6, cell.cores.back(),
                 c.writers > 0 ? fmt::format(", push {:.2f} M steps/s", cell.push.back() * 1e-6) : "");
    }
  }
  return loads;
}

// The table of rows per second, one learner against two.
void print_scaling_table(const std::vector<Shape>& shapes, const std::vector<Config>& configs,
                         const std::vector<Figures>& figures) {
  fmt::print("### Rows per second, one learner against two\n\n");
  fmt::print("| configuration | 1 learner, M rows/s | 2 learners, M rows/s | 2 / 1 | memcpy 2 / 1 | "
             "ours 2/1 over memcpy 2/1 | 2 / 1 on free cores, ours | 2 / 1 on free cores, memcpy | "
             "push, M steps/s, 1 / 2 learners |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  bool any_late = false;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    const Cell(&k)[2][2] = figures[i].cell;
    const std::vector<double> ours = ratios(k[kOurs][1].rows, k[kOurs][0].rows);
    const std::vector<double> base = ratios(k[kMemcpy][1].rows, k[kMemcpy][0].rows);
    const double scaling = median(ours);
    fmt::print("| {} | {:.3f} | {:.3f} | {:.2f}{} | {:.2f} | {:.2f} | {} | {} | {} |\n", config_label(shapes, c),
               median(k[kOurs][0].rows) * 1e-6, median(k[kOurs][1].rows) * 1e-6, scaling, scaling >= 1.7 ? "" : " *",
               median(base), median(ratios(ours, base)), on_free_cores(k[kOurs], ours),
               on_free_cores(k[kMemcpy], base),
               c.writers > 0 ? fmt::format("{:.2f} / {:.2f}", median(k[kOurs][0].push) * 1e-6,
                                           median(k[kOurs][1].push) * 1e-6)
                             : std::string("-"));
    for (const auto& kind : k) {
      for (const Cell& cell : kind) any_late = any_late || cell.late;
    }
  }
  fmt::print("\n`*`: below the issue's 1.7x. memcpy: one against two processes copying the same rows of the same "
             "segment (no protocol); \"ours 2/1 over memcpy 2/1\" near 1 means two learners scale as far as two plain "
             "copies do here. On free cores: the median ratio over the rounds in which the two processes had two "
             "cores between them (cores used >= 1.8) and the one process a whole core (>= 0.9), with the count of "
             "such rounds: what the cores allowed when other tenants left them free.{}\n\n",
             any_late ? " Some worker missed a trial boundary (starved): its whole run was used instead." : "");
}

// The table of where it goes: bandwidth, CPU, retries.
void print_cost_table(const std::vector<Shape>& shapes, const std::vector<Config>& configs,
                      const std::vector<Figures>& figures) {
  fmt::print("### Where it goes: bandwidth, CPU, retries\n\n");
  fmt::print("| configuration | row GB/s, ours 1 / 2 | row GB/s, memcpy 1 / 2 | rows per CPU-s 2 / 1, ours | "
             "rows per CPU-s 2 / 1, memcpy | cores used, ours 1 / 2 | cores used, memcpy 1 / 2 | "
             "retried rows per M, 1 / 2 learners |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    const Cell(&k)[2][2] = figures[i].cell;
    const double gb = static_cast<double>(c.length * shapes[c.shape].g.schema.step_bytes()) * 1e-9;
    auto per_m = [](const Cell& cell) {
      return cell.total_rows > 0 ? 1e6 * static_cast<double>(cell.retries) / static_cast<double>(cell.total_rows)
                                 : 0.0;
    };
    fmt::print("| {} | {:.2f} / {:.2f} | {:.2f} / {:.2f} | {:.2f} | {:.2f} | {:.2f} / {:.2f} | {:.2f} / {:.2f} | "
               "{:.0f} / {:.0f} |\n",
               config_label(shapes, c), median(k[kOurs][0].rows) * gb, median(k[kOurs][1].rows) * gb,
               median(k[kMemcpy][0].rows) * gb, median(k[kMemcpy][1].rows) * gb,
               median_ratio(k[kOurs][1].cpu_rows, k[kOurs][0].cpu_rows),
               median_ratio(k[kMemcpy][1].cpu_rows, k[kMemcpy][0].cpu_rows), median(k[kOurs][0].cores),
               median(k[kOurs][1].cores), median(k[kMemcpy][0].cores), median(k[kMemcpy][1].cores),
               per_m(k[kOurs][0]), per_m(k[kOurs][1]));
  }
}

int run(const Options& o, const std::string& command) {
  install_signal_handlers();
  const MachineInfo machine = describe_machine();
  std::vector<Shape> shapes = make_shapes(o);
  std::vector<std::string> paths;
  for (Shape& s : shapes) {
    s.g.label = s.label;
    s.g.num_envs = o.envs;
    paths.push_back(shm_directory() + "/" + s.name);
  }
  const Janitor janitor(paths);
  for (const std::string& p : paths) register_segment_file(p);

  fmt::print("## shmreplay_bench_learners\n\n`{}` on {} ({} cores online, {}, {:.1f} GiB), {}, {}, {} build, "
             "load average {} at the start.\n\n",
             command, machine.cpu, machine.cores_online, machine.caches, machine.memory_gib, machine.kernel,
             machine.virtualization, machine.build_type, load_now());
  for (const Shape& s : shapes) fill(s);

  const std::vector<Config> configs = make_configs(o);
  std::vector<Figures> figures(configs.size());
  const std::vector<std::string> loads = run_rounds(o, shapes, configs, figures);

  fmt::print("Buffers (max_learners 2, every ring full before the run): ");
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    fmt::print("{}{} `{}`, {} B per step, {} envs x {} steps ({:.0f} MB)", i ? "; " : "", s.label, s.g.schema.to_string(),
               s.g.schema.step_bytes(), s.g.num_envs, s.g.capacity, static_cast<double>(s.g.data_bytes()) * 1e-6);
  }
  fmt::print(". Learners: {} rows per call from the replay view, power 0 (uniform over starts), each its own "
             "Sampler and rank. Writers: {} processes, each pushing its half of the envs (batched) at full speed. "
             "{} rounds; each run {} trials of {:g} s after a warm-up, its processes forked anew. Rates are medians "
             "over rounds; each ratio is taken within its round, then the median.\n\n",
             o.batch, kWriters, o.rounds, o.trials, o.seconds);
  print_scaling_table(shapes, configs, figures);
  print_cost_table(shapes, configs, figures);
  fmt::print("\nRow GB/s: rows/s x L x step bytes (the bytes a row holds, not the memory traffic). Rows per CPU-s: "
             "the processes' rows over their own CPU time, two against one, within each round: what a row costs "
             "whatever share of a core each process got (1.00: no dearer with a second learner). Cores used: the "
             "learners' (copiers') CPU seconds per wall second, together.\n\nLoad average (1, 5, 15 min) and CPU pressure "
             "(/proc/pressure/cpu, some avg10: the share of the last 10 s in which a runnable task waited for a "
             "core) at the start of each round: {}; at the end: {}.\n\n",
             fmt::join(loads, "; "), load_now());
  for (const Shape& s : shapes) Buffer::remove(s.name);
  for (const std::string& p : paths) unregister_segment_file(p);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_learners: rows/s of one learner process against two on one buffer, with 0 and 2 "
               "writers, against one and two memcpy processes, in one run");
  app.add_flag("--quick", o.quick, "Tiny buffers, one 50 ms trial per run, one round: a smoke run");
  app.add_option("--seconds", o.seconds, "One trial (default 1)")->check(CLI::Range(0.01, 60.0));
  app.add_option("--trials", o.trials, "Trials per run (default 2)")->check(CLI::Range(1u, kMaxTrials));
  app.add_option("--rounds", o.rounds, "Rounds of every configuration (default 5)")->check(CLI::Range(1u, 100u));
  app.add_option("--envs", o.envs, "Envs per buffer, even (default 16)")->check(CLI::Range(2u, 1024u));
  app.add_option("--capacity", o.capacity, "Small steps per env (default 655360: about 1 GB)")
      ->check(CLI::Range(16u, 1u << 30));
  app.add_option("--large-capacity", o.large_capacity, "Large steps per env (default 16384: about 1 GB)")
      ->check(CLI::Range(16u, 1u << 24));
  app.add_option("--batch", o.batch, "Rows per sample call (default 256)")->check(CLI::Range(1u, 65536u));
  app.add_flag("!--no-large", o.large, "Leave out the large steps");
  app.get_option("--envs")->check(
      [](const std::string& text) {
        return std::stoul(text) % 2 == 0 ? std::string() : std::string("must be even (two writers, half each)");
      },
      "EVEN");
  return shmreplay::bench::bench_main(
      app, argc, argv,
      [&](const shmreplay::bench::QuickDefaults& quick) {
        quick("--capacity", o.capacity, 1024);
        quick("--large-capacity", o.large_capacity, 64);
        quick("--seconds", o.seconds, 0.05);
        quick("--trials", o.trials, 1);
        quick("--rounds", o.rounds, 1);
      },
      [&](const std::string& command) { return run(o, command); });
}
