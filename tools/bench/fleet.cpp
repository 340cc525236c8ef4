// tools/bench/fleet.cpp: shmreplay_bench_scaling's runs of writer and learner processes on one buffer (fleet.hpp).
#include "shmreplay/internal/segment.hpp"
#include "fleet.hpp"

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "harness.hpp"
#include "median_rate.hpp"
#include "plain_sample.hpp"
#include "plain_store.hpp"
#include "sched_stat.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "staging.hpp"

namespace shmreplay::bench {

const char* to_string(Side side) noexcept { return side == Side::ours ? "ours" : "plain"; }

namespace {

constexpr std::size_t kMaxLearners = 4;
constexpr std::size_t kMaxCalls = std::size_t{1} << 20;  // per learner and run: 4 MB, touched only as used
constexpr std::size_t kChunkBytes = std::size_t{64} << 10;  // the gather's chunk, the Sampler's (kGatherBytes)

// What a learner process leaves for the parent: every call's record, where each epoch's calls begin, and the
// scheduler's figures over the trials. Written by the learner only; read by the parent after the learner exited.
struct LearnerLog {
  uint64_t calls = 0;
  uint64_t bounds[kMaxMarks] = {};  // bounds[e]: the first record whose call ended in epoch e (Worker::epoch)
  SchedStat start, end;             // at the start of the first trial and the end of the last
  uint64_t start_ns = 0, end_ns = 0;
  CallRecord records[kMaxCalls];
};

// The learners' logs: an anonymous shared mapping, inherited by the forked learners.
class Logs {
 public:
  explicit Logs(std::size_t learners) : bytes_(std::max<std::size_t>(learners, 1) * sizeof(LearnerLog)) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error(fmt::format("mmap of the learners' logs: {}", std::strerror(errno)));
    logs_ = static_cast<LearnerLog*>(p);
    for (std::size_t i = 0; i < std::max<std::size_t>(learners, 1); ++i) new (logs_ + i) LearnerLog;  // records untouched
  }
  ~Logs() { ::munmap(logs_, bytes_); }
  Logs(const Logs&) = delete;
  Logs& operator=(const Logs&) = delete;
  LearnerLog* operator[](std::size_t i) const noexcept { return logs_ + i; }

 private:
  std::size_t bytes_;
  LearnerLog* logs_ = nullptr;
};

std::vector<const std::byte*> field_bases(const Buffer& buffer, std::size_t fields) {
  std::vector<const std::byte*> v;
  for (std::size_t f = 0; f < fields; ++f) v.push_back(segment_of(buffer).field_data(f));
  return v;
}

std::vector<std::size_t> field_bytes(const Schema& schema) {
  std::vector<std::size_t> v;
  for (const Field& f : schema.fields()) v.push_back(static_cast<std::size_t>(f.bytes()));
  return v;
}

Body learner_body(const FleetBuffer& b, const FleetRun& r, uint64_t rank, LearnerLog* log, uint32_t trials) {
  return [b, r, rank, log, trials](Worker& worker) {
    Buffer buffer = Buffer::open(b.name, {.expected_schema = b.schema});
    populate(&segment_of(buffer).header(), static_cast<std::size_t>(buffer.total_bytes()));
    const uint64_t seed = r.seed * 1000 + rank;
    std::optional<Sampler> sampler;
    std::optional<PlainSample> plain;
    Rng rng(seed);
    SampleBatch out;
    std::function<void()> op;
    if (r.learner_side == Side::ours) {
      sampler.emplace(buffer, SamplerOptions{.rank = rank});
      if (r.length == 1) {
        op = [&] { sampler->sample_transitions(View::replay, r.batch, rng, out); };
      } else {
        op = [&] { sampler->sample(View::replay, r.batch, r.length, 1.0, rng, out); };
      }
    } else {
      plain.emplace(field_bases(buffer, b.schema.size()), field_bytes(b.schema), b.capacity, b.envs, r.batch,
                    r.length, seed);
      op = [&] { plain->gather_rows(kChunkBytes); };
    }
    op();  // sizes and touches the output
    if (!worker.start()) return;
    uint32_t seen = worker.epoch();
    bool go = true;
    do {
      const CallRecord rec = timed_call(op);
      if (log->calls < kMaxCalls) log->records[log->calls++] = rec;
      go = worker.done(r.batch);
      const uint32_t now = worker.epoch();
      for (uint32_t e = seen + 1; e <= now && e < kMaxMarks; ++e) {
        log->bounds[e] = log->calls;
        if (e == 2) {
          log->start = sched_stat();
          log->start_ns = monotonic_ns();
        }
        if (e == trials + 2) {
          log->end = sched_stat();
          log->end_ns = monotonic_ns();
        }
      }
      seen = now;
    } while (go);
    if (sampler) worker.set_retries(sampler->retries());
  };
}

void sleep_until_ns(uint64_t t) noexcept {
  timespec ts{static_cast<time_t>(t / 1'000'000'000ull), static_cast<long>(t % 1'000'000'000ull)};
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

Body writer_body(const FleetBuffer& b, const FleetRun& r, uint64_t first_env) {
  return [b, r, first_env](Worker& worker) {
    Buffer buffer = Buffer::open(b.name, {.expected_schema = b.schema});
    const uint64_t k = b.envs_per_writer;
    const std::vector<std::size_t> bytes = field_bytes(b.schema);
    std::vector<std::byte*> fields;
    for (std::size_t f = 0; f < bytes.size(); ++f) {
      fields.push_back(segment_of(buffer).field_data(f));
      populate(fields.back() + first_env * b.capacity * bytes[f], k * b.capacity * bytes[f]);  // its own envs' rows
    }
    const Staging in(b.schema, k);
    std::vector<int32_t> ids;
    for (uint64_t e = first_env; e < first_env + k; ++e) ids.push_back(static_cast<int32_t>(e));
    std::optional<Writer> writer;
    std::optional<PlainStore> plain;
    if (r.writer_side == Side::ours) {
      writer.emplace(buffer, env_range(first_env, k));
    } else {
      plain.emplace(fields, bytes, b.envs, b.capacity);
    }
    auto push = [&] {
      if (writer) {
        writer->push(std::span<const int32_t>(ids), std::span<const FieldBytes>(in.all));
      } else {
        for (uint64_t i = 0; i < k; ++i) plain->push_row_ahead(first_env + i, in.all.data(), i);
      }
    };
    push();
    // At a fixed rate: one call (a step of each env) per period, on a schedule of absolute times; a writer that
    // falls more than 64 periods behind (starved of CPU) starts the schedule again rather than bursting.
    const uint64_t period = r.env_rate > 0 ? static_cast<uint64_t>(1e9 / r.env_rate) : 0;
    if (!worker.start()) return;
    uint64_t next = monotonic_ns();
    do {
      if (period > 0) {
        next += period;
        const uint64_t now = monotonic_ns();
        if (now < next) {
          sleep_until_ns(next);
        } else if (now - next > 64 * period) {
          next = now;
        }
      }
      push();
    } while (worker.done(k));
  };
}

FleetFigures figures(const std::vector<WorkerTrials>& t, std::size_t writers, const Logs& logs, uint32_t trials) {
  FleetFigures f;
  std::vector<double> push(trials, 0.0), rows(trials, 0.0);
  double wcpu = 0, lcpu = 0;
  uint64_t retries = 0, total_rows = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const WorkerTrials& w = t[i];
    const bool writer = i < writers;
    f.late = f.late || w.late;
    double cpu = 0, wall = 0;
    for (uint32_t k = 0; k < trials; ++k) {
      // A late worker's trials are unreliable: its whole run's rate stands for each (harness.hpp).
      const double rate = w.late ? static_cast<double>(w.run_units) / std::max(w.run_seconds, 1e-9)
                                 : static_cast<double>(w.units[k]) / std::max(w.seconds[k], 1e-9);
      (writer ? push : rows)[k] += rate;
      cpu += w.cpu_seconds[k];
      wall += w.seconds[k];
    }
    if (w.late) {
      cpu = w.run_cpu_seconds;
      wall = w.run_seconds;
    }
    (writer ? wcpu : lcpu) += wall > 0 ? cpu / wall : 0;
    if (!writer) {
      retries += w.retries;
      total_rows += w.total_units;
    }
  }
  f.push = writers > 0 ? median(push) : 0;
  f.rows = t.size() > writers ? median(rows) : 0;
  f.push_cores = wcpu;
  f.learner_cores = lcpu;
  f.retries_per_m = total_rows > 0 ? 1e6 * static_cast<double>(retries) / static_cast<double>(total_rows) : 0;
  std::vector<CallRecord> calls;
  double wait = 0, wall = 0;
  bool known = true;
  for (std::size_t l = 0; l + writers < t.size(); ++l) {
    const LearnerLog& log = *logs[l];
    const uint64_t from = log.bounds[2], to = std::max(log.bounds[trials + 2], from);
    calls.insert(calls.end(), log.records + from, log.records + std::min<uint64_t>(to, log.calls));
    known = known && log.start.known && log.end.known && log.end_ns > log.start_ns;
    wait += static_cast<double>(log.end.wait_ns - log.start.wait_ns);
    wall += static_cast<double>(log.end_ns - log.start_ns);
  }
  f.latency = latency_stats(calls);
  f.calls = std::move(calls);
  if (known && wall > 0) f.learner_wait = wait / wall;
  return f;
}

}  // namespace

FleetFigures run_fleet(const FleetBuffer& b, const FleetRun& r, const FleetTiming& timing) {
  if (r.learners > kMaxLearners) throw std::invalid_argument("a fleet has at most 4 learners");
  if (r.writers * b.envs_per_writer > b.envs) throw std::invalid_argument("more writers than the buffer has envs for");
  if (r.writers + r.learners > kMaxWorkers) throw std::invalid_argument("too many processes for one Team");
  const Logs logs(r.learners);
  std::vector<Body> bodies;
  std::vector<std::string> names;
  for (uint64_t w = 0; w < r.writers; ++w) {
    bodies.push_back(writer_body(b, r, w * b.envs_per_writer));
    names.push_back(fmt::format("{} writer {}", to_string(r.writer_side), w));
  }
  for (uint64_t l = 0; l < r.learners; ++l) {
    bodies.push_back(learner_body(b, r, l, logs[l], timing.trials));
    names.push_back(fmt::format("{} learner {}", to_string(r.learner_side), l));
  }
  std::vector<WorkerTrials> t;
  {
    Team team(std::move(bodies), std::move(names));
    t = team.run(timing.warmup_s, timing.trial_s, timing.trials, std::max(5 * timing.trial_s, 2.0));
  }
  return figures(t, static_cast<std::size_t>(r.writers), logs, timing.trials);
}

}  // namespace shmreplay::bench
