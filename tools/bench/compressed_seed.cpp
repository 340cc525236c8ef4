// tools/bench/compressed_seed.cpp: shmreplay_bench_compressed --seed-scale (compressed_seed.hpp): the seed's
// training run at paper scale. This process creates the buffer (its obs compressed, its segment at most
// --seed-segment-bytes; pages left to the writers) and forks --writers writer processes, each pushing batches of its
// 16 envs' steps replayed from the recorded frames (recorded_feed.hpp: every Atari file, each env replaying one
// recorded env cyclically) until every env holds --seed-capacity steps; then it samples as the seed's learner does
// (sample_mixed: 95% replay, 5% online, sequences of 32 at length^2 weights; the online queue reset after each call)
// for --seed-seconds while the writers push at --inflow, and reports fill and sample rates, call latencies, the
// segment's counters and every process's memory; with --seed-save, a checkpoint's bytes and seconds. The recorded frames stand in for envpool: filling 6 x 10^6 frames
// with envpool on 2 cores would take hours.
#include "compressed_seed.hpp"

#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "compressed_store.hpp"
#include "shmreplay/checkpoint.hpp"
#include "proc_memory.hpp"

namespace shmreplay::bench {
namespace {

using Clock = std::chrono::steady_clock;
volatile std::sig_atomic_t g_stop = 0;
void on_term(int) { g_stop = 1; }

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What a writer process reports on its pipe when it stops.
struct WriterReport {
  double fill_s = 0, run_s = 0, cpu_s = 0;
  uint64_t fill_steps = 0, run_steps = 0, rss = 0;
};

// A writer process: fills its envs, says "filled", then pushes at its share of --inflow until SIGTERM; never returns.
[[noreturn]] void writer_process(const SeedOptions& o, const std::string& name,
                                 const std::vector<const Recording*>& recs, uint64_t w, int fd) {
  int rc = 0;
  try {
    Buffer buf = Buffer::open(name);
    const uint64_t first = w * o.envs_per_writer;
    Writer writer = Writer::range(buf, first, o.envs_per_writer);
    RecordedFeed feed(recs, o.envs_per_writer, first, o.writers * o.envs_per_writer, /*seed_fields=*/true);
    std::vector<uint64_t> ids(o.envs_per_writer);
    for (uint64_t i = 0; i < ids.size(); ++i) ids[i] = first + i;
    WriterReport r;
    auto t0 = Clock::now();
    while (feed.made() < o.capacity) {
      feed.next();
      writer.push(std::span<const uint64_t>(ids), feed.batch());
    }
    r.fill_s = since(t0);
    r.fill_steps = feed.made() * ids.size();
    if (::write(fd, "filled\n", 7) != 7) throw std::runtime_error("the pipe to the learner closed");
    const double per_batch_s = o.inflow > 0 ? static_cast<double>(o.writers * ids.size()) / o.inflow : 0;
    const auto interval = std::chrono::duration<double>(per_batch_s);
    t0 = Clock::now();
    for (auto next = t0; g_stop == 0;) {
      if (o.inflow > 0) {
        std::this_thread::sleep_until(next);
        next += std::chrono::duration_cast<Clock::duration>(interval);
      }
      feed.next();
      writer.push(std::span<const uint64_t>(ids), feed.batch());
      r.run_steps += ids.size();
    }
    r.run_s = since(t0);
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    r.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
              static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    r.rss = process_rss();
    const std::string line = fmt::format("report {} {} {} {} {} {}\n", r.fill_s, r.fill_steps, r.run_s, r.run_steps,
                                         r.rss, r.cpu_s);
    if (::write(fd, line.data(), line.size()) < 0) rc = 1;
  } catch (const std::exception& e) {
    const std::string line = fmt::format("error {}\n", e.what());
    if (::write(fd, line.data(), line.size()) < 0) rc = 1;
    rc = 1;
  }
  ::_exit(rc);
}

struct Child {
  pid_t pid = -1;
  FILE* in = nullptr;
  WriterReport report;
};

// SIGKILLs and reaps the writers not reaped yet, however the learner's scope ends.
struct ReapChildren {
  std::vector<Child>& kids;
  ~ReapChildren() {
    for (Child& k : kids) {
      if (k.pid > 0) {
        ::kill(k.pid, SIGKILL);
        ::waitpid(k.pid, nullptr, 0);
      }
      if (k.in != nullptr) std::fclose(k.in);
    }
  }
};

// The next line of a writer's pipe; throws when it closed or reported an error.
std::string read_line(Child& c, uint64_t w) {
  char buf[512];
  if (std::fgets(buf, sizeof buf, c.in) == nullptr) {
    throw std::runtime_error(fmt::format("writer {} (pid {}) ended without a word", w, c.pid));
  }
  std::string line(buf);
  if (line.rfind("error ", 0) == 0) throw std::runtime_error(fmt::format("writer {}: {}", w, line.substr(6)));
  return line;
}

uint64_t shm_used_bytes() {
  struct statvfs s {};
  if (::statvfs(shm_directory().c_str(), &s) != 0) return 0;
  return (s.f_blocks - s.f_bfree) * s.f_frsize;
}

// The online rows of a call: online_share of the rows, at least 1.
std::size_t online_rows(const SeedOptions& o) {
  return std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(o.rows) * o.online_share + 0.5));
}

// The learner's figures.
struct LearnerFigures {
  std::vector<double> latency_s;  // per call
  double wall_s = 0;
  uint64_t rss = 0;
};

LearnerFigures learn(const SeedOptions& o, Buffer& buf) {
  Sampler sampler(buf);
  Rng rng(1);
  SampleBatch batch;
  const std::size_t online = online_rows(o), replay = o.rows - online;
  LearnerFigures f;
  sampler.reset_online_queue(OnlineReset::now);
  const auto t0 = Clock::now();
  while (since(t0) < o.seconds) {
    if (!sampler.wait(View::online, 1, 1000)) continue;
    const auto c0 = Clock::now();
    sampler.sample_mixed(replay, online, o.length, o.power, rng, batch);
    f.latency_s.push_back(since(c0));
    sampler.reset_online_queue(OnlineReset::sampled);
  }
  f.wall_s = since(t0);
  f.rss = process_rss();
  std::sort(f.latency_s.begin(), f.latency_s.end());
  return f;
}

double gb(uint64_t b) { return static_cast<double>(b) * 1e-9; }
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const auto at = static_cast<std::size_t>(q * static_cast<double>(sorted.size()));
  return sorted[std::min(sorted.size() - 1, at)];
}

// --seed-save: a checkpoint of the buffer while the writers push, its records as they are (format 2.3), then
// verified; the file removed.
struct SaveFigures {
  uint64_t file_bytes = 0, steps = 0;
  double save_s = 0, verify_s = 0;
};

SaveFigures save_while_pushing(const SeedOptions& o, const Buffer& buf) {
  SaveFigures f;
  if (o.save_dir.empty()) return f;
  const std::string path = fmt::format("{}/shmreplay-seed-{}.ckpt", o.save_dir, ::getpid());
  auto t0 = Clock::now();
  const CheckpointInfo info = save_checkpoint(buf, path);
  f.save_s = since(t0);
  t0 = Clock::now();
  (void)verify_checkpoint(path);
  f.verify_s = since(t0);
  f.file_bytes = info.file_bytes;
  f.steps = info.total_steps;
  std::remove(path.c_str());
  return f;
}

void print_seed(const SeedOptions& o, const std::string& command, const std::string& schema, uint64_t budget,
                const StoreCounters& c, uint64_t shm_growth, double fill_s, const LearnerFigures& l,
                const std::vector<Child>& kids, const SaveFigures& saved) {
  const uint64_t envs = o.writers * o.envs_per_writer, online = online_rows(o);
  double run_steps = 0, run_s = 0;
  for (const Child& k : kids) {
    run_steps += static_cast<double>(k.report.run_steps);
    run_s = std::max(run_s, k.report.run_s);
  }
  double total_latency = 0;
  for (double x : l.latency_s) total_latency += x;
  fmt::print("## shmreplay_bench_compressed --seed-scale\n\n- command: `{}`\n", command);
  fmt::print("- `{}`, {} envs x {} steps ({} frames), {} writer processes of {} envs fed from the recorded Atari "
             "frames (every game's file; each env replays one recorded env cyclically: envpool would take hours to "
             "fill this on 2 cores); the learner samples {} replay + {} online sequences of {} at length^{:g} weights "
             "(sample_mixed), resetting the online queue after each call, for {:g} s while the writers push at "
             "{} steps/s\n\n",
             schema, envs, o.capacity, envs * o.capacity, o.writers, o.envs_per_writer, o.rows - online, online,
             o.length, o.power, o.seconds, o.inflow > 0 ? fmt::format("{:g}", o.inflow) : "full speed");
  fmt::print("### The seed's run at paper scale\n\n| figure | value |\n|---|---:|\n");
  fmt::print("| segment (budget {:.2f} GB) | {:.2f} GB |\n", gb(budget), gb(c.segment_bytes));
  fmt::print("| segment resident after the fill (/dev/shm used, growth) | {:.2f} GB |\n", gb(shm_growth));
  fmt::print("| bytes per stored step (stored steps: {}; lost to the budget: {}) | {:.0f} |\n", c.stored_steps, c.lost,
             c.bytes_per_step);
  fmt::print("| fill: {} steps by {} writers | {:.1f} s, {:.0f} steps/s |\n", envs * o.capacity, o.writers, fill_s,
             static_cast<double>(envs * o.capacity) / fill_s);
  fmt::print("| push while sampled | {:.0f} steps/s |\n", run_s > 0 ? run_steps / run_s : 0.0);
  fmt::print("| sample calls ({} x {} steps) | {} in {:.1f} s: {:.2f} batches/s ({:.2f} per second of call time) |\n",
             o.rows, o.length, l.latency_s.size(), l.wall_s, static_cast<double>(l.latency_s.size()) / l.wall_s,
             static_cast<double>(l.latency_s.size()) / std::max(total_latency, 1e-9));
  fmt::print("| call latency p50 / p99 / max | {:.1f} / {:.1f} / {:.1f} ms |\n", 1e3 * quantile(l.latency_s, 0.5),
             1e3 * quantile(l.latency_s, 0.99), 1e3 * (l.latency_s.empty() ? 0.0 : l.latency_s.back()));
  fmt::print("| learner RSS (VmRSS, its batch and the pages it read included) | {:.2f} GB |\n", gb(l.rss));
  for (std::size_t w = 0; w < kids.size(); ++w) {
    const WriterReport& r = kids[w].report;
    fmt::print("| writer {} RSS; fill {:.0f} steps/s; CPU {:.1f} s | {:.2f} GB |\n", w,
               static_cast<double>(r.fill_steps) / r.fill_s, r.cpu_s, gb(r.rss));
  }
  if (saved.steps > 0) {
    fmt::print("| checkpoint while the writers push ({} steps, records as they are; decoded: {:.0f} GB) | {:.2f} GB in "
               "{:.1f} s ({:.0f} MB/s); verified in {:.1f} s |\n",
               saved.steps, gb(saved.steps * 4 * 84 * 84), gb(saved.file_bytes), saved.save_s,
               static_cast<double>(saved.file_bytes) * 1e-6 / saved.save_s, saved.verify_s);
  }
  fmt::print("\nRSS counts the segment's pages a process touched (shared, counted once in the segment's figure).\n");
}

}  // namespace

int run_seed_scale(const SeedOptions& o, const std::string& frames, const std::string& command) {
  const std::vector<Recording> recs = atari_recordings(frames, "");
  std::vector<const Recording*> ptrs;
  for (const Recording& r : recs) ptrs.push_back(&r);
  const uint64_t envs = o.writers * o.envs_per_writer;
  const std::string schema_text = recorded_schema(recs.front(), ":" + o.codec, /*seed_fields=*/true);
  const Schema schema = Schema::parse(schema_text);
  const uint64_t budget = budget_for_segment(envs, o.capacity, schema, o.segment_bytes);
  const std::string name = fmt::format("shmreplay-bench-{}-seed-scale", ::getpid());
  RemoveBuffer guard(name);
  const uint64_t shm_before = shm_used_bytes();
  Buffer buf = Buffer::create(name, envs, o.capacity, schema, {.replace = true, .compressed_bytes = budget});
  std::fflush(nullptr);
  std::vector<Child> kids(o.writers);
  ReapChildren reap{kids};
  for (uint64_t w = 0; w < o.writers; ++w) {
    int p[2];
    if (::pipe(p) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      std::signal(SIGTERM, on_term);
      writer_process(o, name, ptrs, w, p[1]);
    }
    ::close(p[1]);
    kids[w] = {pid, ::fdopen(p[0], "r"), {}};
  }
  fmt::print(stderr, "shmreplay_bench_compressed --seed-scale: {} writers filling {} x {} steps\n", o.writers, envs,
             o.capacity);
  const auto t0 = Clock::now();
  for (uint64_t w = 0; w < o.writers; ++w) read_line(kids[w], w);
  const double fill_s = since(t0);
  const uint64_t shm_growth = shm_used_bytes() - shm_before;
  const SegmentInfo info = Inspector(name).snapshot();
  StoreCounters c{.bytes_per_step = stored_bytes_per_step(info), .lost = info.steps_lost_to_budget,
                  .segment_bytes = info.total_bytes, .stored_steps = info.replay_steps};
  fmt::print(stderr, "shmreplay_bench_compressed --seed-scale: filled in {:.1f} s; sampling\n", fill_s);
  const LearnerFigures l = learn(o, buf);
  const SaveFigures saved = save_while_pushing(o, buf);
  for (Child& k : kids) ::kill(k.pid, SIGTERM);
  for (uint64_t w = 0; w < o.writers; ++w) {
    std::string line = read_line(kids[w], w);
    WriterReport& r = kids[w].report;
    std::sscanf(line.c_str(), "report %lf %lu %lf %lu %lu %lf", &r.fill_s, &r.fill_steps, &r.run_s, &r.run_steps,
                &r.rss, &r.cpu_s);
    std::fclose(kids[w].in);
    kids[w].in = nullptr;
    ::waitpid(kids[w].pid, nullptr, 0);
    kids[w].pid = -1;
  }
  print_seed(o, command, schema_text, budget, c, shm_growth, fill_s, l, kids, saved);
  return 0;
}

}  // namespace shmreplay::bench
