// tools/bench/scaling_fleets.cpp: shmreplay_bench_scaling's sweeps of processes (scaling_fleets.hpp).
#include "scaling_fleets.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detail/segment/rules.hpp"
#include "harness.hpp"
#include "median_rate.hpp"
#include "memory_room.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/writer.hpp"
#include "staging.hpp"

namespace shmreplay::bench {

namespace {

constexpr const char* kSchema = "obs:f32[17] action:f32[6] reward:f32 done:bool";
constexpr uint64_t kMaxLearnerSlots = 4;

struct Shape {
  uint64_t envs = 0, capacity = 0;
};

Shape shape_of(const FleetConfig& c) {
  uint64_t writers = 2;
  for (const uint64_t w : c.writer_counts) writers = std::max(writers, w);
  for (const uint64_t w : c.latency_writers) writers = std::max(writers, w);
  const uint64_t envs = std::max<uint64_t>(writers * c.envs_per_writer, 16);
  return {envs, std::max<uint64_t>(c.steps / envs, 128)};
}

// The fleets' buffer, named (the processes open it by name): created with its pages populated and every ring
// filled, removed by the destructor, by the signal handler (harness.hpp's registry) or, if this process is
// SIGKILLed, by the janitor.
class FleetStore {
 public:
  FleetStore(const std::string& name, const Shape& s)
      : path_(shm_directory() + "/" + name), janitor_({path_}), name_(name) {
    register_segment_file(path_);
    const Schema schema = Schema::parse(kSchema);
    Buffer buf = Buffer::create(name, s.envs, s.capacity, schema,
                                {.replace = true, .max_learners = kMaxLearnerSlots, .populate = Populate::always});
    Writer w = Writer::range(buf, 0, s.envs);
    const std::vector<uint64_t> ids = env_range(0, s.envs);
    const Staging in(schema, s.envs);
    for (uint64_t step = 0; step < s.capacity; ++step) {
      w.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(in.all));
    }
    bytes_ = buf.total_bytes();
  }
  ~FleetStore() {
    try {
      Buffer::remove(name_);
    } catch (...) {
    }
    unregister_segment_file(path_);
  }
  FleetStore(const FleetStore&) = delete;
  FleetStore& operator=(const FleetStore&) = delete;
  uint64_t bytes() const noexcept { return bytes_; }

 private:
  std::string path_;
  Janitor janitor_;
  std::string name_;
  uint64_t bytes_ = 0;
};

std::string describe(const FleetFigures& f) {
  return fmt::format("push {:.2f} M steps/s ({:.2f} cores), learners {:.3f} M rows/s ({:.2f} cores, waited {:.0f}%), "
                     "p50 {:.0f} µs, p99 {:.0f} µs{}",
                     f.push * 1e-6, f.push_cores, f.rows * 1e-6, f.learner_cores, 100 * std::max(f.learner_wait, 0.0),
                     f.latency.p50_us, f.latency.p99_us, f.late ? " (a worker was late)" : "");
}

// `rounds` rounds of ours and plain, adjacent (ours first in even rounds).
Paired run_pair(const FleetBuffer& b, FleetRun ours, FleetRun plain, const FleetConfig& c, const std::string& label) {
  Paired p;
  for (uint32_t round = 0; round < c.rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const bool ours_now = (k == 0) == (round % 2 == 0);
      FleetRun r = ours_now ? ours : plain;
      r.seed = 10 * round + (ours_now ? 1 : 2);
      FleetFigures f = run_fleet(b, r, c.timing);
      fmt::print(stderr, "  {}, {} (round {}): {}\n", label, ours_now ? "ours" : "plain", round + 1, describe(f));
      (ours_now ? p.ours : p.plain).push_back(std::move(f));
    }
  }
  return p;
}

std::vector<double> values(const std::vector<FleetFigures>& v, double FleetFigures::*figure) {
  std::vector<double> out;
  for (const FleetFigures& f : v) out.push_back(f.*figure);
  return out;
}

LatencyStats merged(const std::vector<FleetFigures>& v) {
  std::vector<CallRecord> all;
  for (const FleetFigures& f : v) all.insert(all.end(), f.calls.begin(), f.calls.end());
  return latency_stats(all);
}

}  // namespace

double Paired::ours_median(double FleetFigures::*figure) const { return median(values(ours, figure)); }
double Paired::plain_median(double FleetFigures::*figure) const { return median(values(plain, figure)); }
double Paired::ratio(double FleetFigures::*figure) const {
  return median_ratio(values(ours, figure), values(plain, figure));
}
LatencyStats Paired::ours_latency() const { return merged(ours); }
LatencyStats Paired::plain_latency() const { return merged(plain); }
bool Paired::late() const {
  bool any = false;
  for (const auto* v : {&ours, &plain}) {
    for (const FleetFigures& f : *v) any = any || f.late;
  }
  return any;
}

std::string fleet_room(const FleetConfig& c, uint64_t budget_bytes, uint64_t spare_bytes) {
  const Shape s = shape_of(c);
  const uint64_t bytes =
      detail::plan_segment(s.envs, s.capacity, Schema::parse(kSchema), 0, false, 0, kMaxLearnerSlots).total_bytes;
  return why_not_room(bytes, budget_bytes, spare_bytes);
}

FleetResults run_fleet_sweeps(const FleetConfig& c) {
  const Shape s = shape_of(c);
  FleetResults res;
  res.envs = s.envs;
  res.capacity = s.capacity;
  res.envs_per_writer = c.envs_per_writer;
  const std::string name = fmt::format("shmreplay-bench-scaling-{}-fleet", ::getpid());
  fmt::print(stderr, "shmreplay_bench_scaling: fleets: creating and filling {} envs x {} small steps\n", s.envs,
             s.capacity);
  const FleetStore store(name, s);
  res.segment_bytes = store.bytes();
  const FleetBuffer b{name, Schema::parse(kSchema), s.envs, s.capacity, c.envs_per_writer};

  if (c.writers) {
    for (const uint64_t n : c.writer_counts) {
      WritersRow row;
      row.writers = n;
      FleetRun ours{.writers = n, .learners = 1, .length = 1};
      FleetRun plain = ours;
      plain.writer_side = plain.learner_side = Side::plain;
      fmt::print(stderr, "shmreplay_bench_scaling: writers: {} at full speed\n", n);
      row.full = run_pair(b, ours, plain, c, fmt::format("{} writers, full speed", n));
      ours.env_rate = plain.env_rate = c.env_rate;
      fmt::print(stderr, "shmreplay_bench_scaling: writers: {} at {} steps/s per env\n", n, c.env_rate);
      row.fixed = run_pair(b, ours, plain, c, fmt::format("{} writers, fixed rate", n));
      res.writers.push_back(std::move(row));
    }
  }
  if (c.learners) {
    for (const std::size_t length : c.lengths) {
      for (const uint64_t m : c.learner_counts) {
        fmt::print(stderr, "shmreplay_bench_scaling: learners: {}, sequence length {}\n", m, length);
        const FleetRun ours{.learners = m, .length = length};
        FleetRun plain = ours;
        plain.learner_side = Side::plain;
        res.learners.push_back({m, length, run_pair(b, ours, plain, c, fmt::format("{} learners, L {}", m, length))});
      }
    }
  }
  if (c.latency) {
    for (const std::size_t length : c.lengths) {
      for (const uint64_t w : c.latency_writers) {
        fmt::print(stderr, "shmreplay_bench_scaling: latency: {} writers at full speed, sequence length {}\n", w,
                   length);
        const FleetRun ours{.writers = w, .learners = 1, .length = length};
        FleetRun plain = ours;
        plain.learner_side = Side::plain;  // the gather, beside the same writers (ours)
        res.latency.push_back({w, length, run_pair(b, ours, plain, c, fmt::format("{} writers, L {}", w, length))});
      }
    }
  }
  return res;
}

}  // namespace shmreplay::bench
