// tests/checkpoint/checkpoint_helpers.hpp: what the parts of test_checkpoint share (format.cpp, reads.cpp, save.cpp,
// load.cpp, state.cpp, format_1_0.cpp; tests/CMakeLists.txt builds them into one executable): files removed in a
// scope guard, file contents read and written whole, a source segment with every kind of env, its counters; and
// (namespace test::state) a buffer with every kind of state a checkpoint holds, read back whole for comparison.
#pragma once

#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "detail/protocol/priorities.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"

namespace shmreplay::test {

/// Removes a file when it goes out of scope.
class FileGuard {
 public:
  explicit FileGuard(std::string path) : path_(std::move(path)) {}
  FileGuard(const FileGuard&) = delete;
  FileGuard& operator=(const FileGuard&) = delete;
  ~FileGuard() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string temp_path(const std::string& tag) { return fmt::format("/tmp/{}.ckpt", unique_name(tag)); }

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes a new file (removing the old one first: truncating a file on ext4 flushes its pending writes, slowly).
inline void spit(const std::string& path, std::string_view bytes) {
  std::remove(path.c_str());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Pushes `steps` payload steps into each env of `envs`, one batched push per step.
inline void push_steps(shmreplay::Writer& w, const std::vector<int32_t>& envs, uint64_t steps) {
  PayloadPusher pusher;
  for (uint64_t i = 0; i < steps; ++i) pusher.push(w, envs);
}

struct EnvCounters {
  uint64_t head, claimed, online_start;
  friend bool operator==(const EnvCounters&, const EnvCounters&) = default;
};

inline EnvCounters counters(const shmreplay::Buffer& b, uint64_t env) {
  const shmreplay::layout::EnvControl& c = segment_of(b).env_control(env);
  return {c.head.load(), c.claimed.load(), c.online_start.load()};
}

// A source segment with four kinds of env: empty, partly filled, wrapped, and wrapped with an abandoned
// reservation (claimed = head + 1); the online queue was reset midway.
inline void fill_mixed(shmreplay::Buffer& b) {
  shmreplay::Writer w(b, {0, 1, 2, 3});
  push_steps(w, {1, 2, 3}, 5);
  {
    shmreplay::Sampler learner(b);
    learner.reset_online_queue();
  }
  push_steps(w, {2, 3}, 30);
  shmreplay::StepSlot slot = w.reserve(3);
  fill_slot(slot, 1);  // abandoned half-filled: never published
}

inline const shmreplay::Schema kOtherSchema = shmreplay::Schema::parse("hdr:u64[4] body:f32[13] tail:u8[30]");

}  // namespace shmreplay::test

// -- A buffer with every kind of state a checkpoint holds (state.cpp, format.cpp, format_1_0.cpp) --
namespace shmreplay::test::state {

inline const Schema kStateSchema = Schema::parse("obs:f32[3] act:i32 done:bool reward:f32");
inline constexpr uint64_t kStateEnvs = 4;
inline constexpr uint64_t kStateCapacity = 8;
// Bounds wide enough that no push or sample of these tests is held back; the counts and error still move.
inline const RateLimit kLimit = RateLimit::ratio(0.5, 4, 1000.0);

// Episodes (done and reward), 4 records per env queue (env 0 overflows it), priorities and a limiter.
inline CreateOptions state_options(std::optional<double> alpha = 0.6, std::optional<RateLimit> limit = kLimit) {
  CreateOptions o;
  o.episodes.done = "done";
  o.episodes.reward = "reward";
  o.episode_queue_capacity = 4;
  o.priority_exponent = alpha;
  o.rate_limit = limit;
  return o;
}

// Pushes `steps` more steps into env `env`, one at a time, each with its own priority: obs = [env, step, seed +
// step / 2], act = 1000 seed + 10 step + env, done every 4th step (shifted by env), reward = step + env / 4 + seed,
// priority 1 + step + 10 env + seed / 2.
inline void push_env(Writer& w, uint64_t env, uint64_t steps, uint64_t seed) {
  for (uint64_t i = 0; i < steps; ++i) {
    const uint64_t step = w.head(env);
    const float obs[3] = {static_cast<float>(env), static_cast<float>(step),
                          static_cast<float>(seed) + static_cast<float>(step) * 0.5f};
    const int32_t act = static_cast<int32_t>(1000 * seed + 10 * step + env);
    const uint8_t done = (step + env) % 4 == 3 ? 1 : 0;
    const float reward = static_cast<float>(step) + 0.25f * static_cast<float>(env) + static_cast<float>(seed);
    const float priority = 1.0f + static_cast<float>(step + 10 * env) + 0.5f * static_cast<float>(seed);
    const int32_t id = static_cast<int32_t>(env);
    const std::array<FieldBytes, 4> fields = {value_bytes(obs), value_bytes(act), value_bytes(done),
                                              value_bytes(reward)};
    if (w.buffer().has_priorities()) {
      w.push(std::span<const int32_t>(&id, 1), fields, std::span<const float>(&priority, 1));
    } else {
      w.push(std::span<const int32_t>(&id, 1), fields);
    }
  }
}

// A buffer in the middle of a run: envs wrapped (0, 2) and not (1, 3); its limiter's settings set again; a learner
// that sampled, set priorities (the largest `top_priority`, the running maximum), rewrote a step and reset the online
// queue, after which env 1 and env 2 pushed more; two completed-episode records popped, others left waiting (env 0's
// queue overflowed: a record dropped); env 2's writer abandoned a reservation (claimed = head + 1). `seed` shifts the
// values and the counts.
inline void fill_state(Buffer& b, uint64_t seed, float top_priority) {
  Writer w = Writer::range(b, 0, kStateEnvs);
  push_env(w, 0, 20 + 3 * seed, seed);
  push_env(w, 1, 5 + seed, seed);
  push_env(w, 2, 13 + 5 * seed, seed);
  push_env(w, 3, 3, seed);
  // The same settings again: a change, which restarts the error at the middle of the bounds (an offset to keep).
  if (const std::optional<RateLimit> limit = b.rate_limit()) b.set_rate_limit(*limit);
  {
    Sampler s(b);
    Rng rng(7 + seed);
    SampleBatch batch;
    s.sample(View::replay, 16 + 8 * seed, 1, 0.0, rng, batch);
    s.sample(View::online, 4, 2, 0.0, rng, batch);
    if (b.has_priorities()) {
      const std::vector<uint64_t> envs = {0, 2, 1};
      const std::vector<uint64_t> steps = {w.head(0) - 1, w.head(2) - 2, w.head(1) - 1};
      const std::vector<float> priorities = {top_priority, 0.5f, 7.0f};
      REQUIRE(s.update_priorities(envs, steps, priorities).applied == 3);
    }
    const int32_t act = -5 - static_cast<int32_t>(seed);
    REQUIRE(s.try_update(1, w.head(1) - 2, {FieldBytes{}, value_bytes(act), FieldBytes{}, FieldBytes{}}));
    s.reset_online_queue(OnlineReset::now);
  }
  push_env(w, 1, 2, seed);
  push_env(w, 2, 4, seed);
  {
    Sampler s(b);
    std::vector<EpisodeRecord> some(2);
    REQUIRE(s.pop_episodes(some) == 2);
  }
  StepSlot abandoned = w.reserve(2);
}

// What a round trip must keep, read from the segment's words (nothing here takes a lease or writes).
struct State {
  std::vector<EnvCounters> counters;                          // head, claimed, online_start per env
  std::vector<StepRecords> steps;                             // each env's stored steps
  std::vector<std::vector<double>> weights;                   // each stored step's priority^alpha
  std::vector<std::array<uint64_t, 3>> queues;                // queue head, tail, records dropped per env
  std::vector<uint64_t> stacks_intact_from;                   // per env (a stacked buffer)
  uint64_t max_priority_bits = 0;                             // GlobalControl::max_priority
  RateLimitState limiter;                                     // settings, counts, error
  CheckpointLearner learner;                                  // GlobalControl's learner words
};

inline State state_of(const Buffer& b) {
  const Segment& seg = segment_of(b);
  State s;
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    const layout::EnvControl& c = seg.env_control(e);
    s.counters.push_back(counters(b, e));
    const uint64_t head = c.head.load();
    s.steps.push_back(read_steps(b, e, 0, head));  // clamped to the replay view
    std::vector<double> w;
    if (seg.has_priorities()) {
      const detail::PriorityTreeView tree = detail::priority_tree_of(seg, e);
      for (uint64_t step = s.steps.back().first_step; step < head; ++step) {
        w.push_back(detail::step_weight(tree, c, step));
      }
    }
    s.weights.push_back(std::move(w));
    if (seg.has_episodes()) {
      const layout::EpisodeControl& q = seg.episode_control(e);
      s.queues.push_back({q.queue_head.load(), q.queue_tail.load(), q.records_dropped.load()});
    }
    s.stacks_intact_from.push_back(c.stacks_intact_from.load());
  }
  const layout::GlobalControl& g = seg.global_control();
  s.max_priority_bits = g.max_priority.load();
  s.limiter = b.rate_limit_state();
  s.learner = {g.rows_sampled.load(),   g.sample_calls.load(),     g.retries.load(),
               g.online_resets.load(),  g.steps_updated.load(),    g.priority_updates.load(),
               g.priority_updates_dropped.load()};
  return s;
}

// Every equality a round trip promises, but the running maximum (the caller checks it: an existing target keeps
// the larger).
inline void check_same_state(const State& a, const State& b) {
  REQUIRE(a.counters.size() == b.counters.size());
  for (std::size_t e = 0; e < a.counters.size(); ++e) {
    CAPTURE(e);
    CHECK(a.counters[e] == b.counters[e]);
    CHECK(a.steps[e].first_step == b.steps[e].first_step);
    CHECK(a.steps[e].count == b.steps[e].count);
    CHECK(a.steps[e].bytes == b.steps[e].bytes);
    CHECK(a.weights[e] == b.weights[e]);
    CHECK(a.stacks_intact_from[e] == b.stacks_intact_from[e]);
  }
  CHECK(a.queues == b.queues);
  CHECK(a.limiter.limit == b.limiter.limit);
  CHECK(a.limiter.inserts == b.limiter.inserts);
  CHECK(a.limiter.samples == b.limiter.samples);
  CHECK(a.limiter.error == b.limiter.error);
  CHECK(a.limiter.changes == b.limiter.changes);
  CHECK(a.limiter.last_sample_ns == b.limiter.last_sample_ns);
  CHECK(a.limiter.learner_limited == b.limiter.learner_limited);
  CHECK(a.limiter.writers_limited == b.limiter.writers_limited);
  CHECK(a.limiter.writer_timeouts == b.limiter.writer_timeouts);
  CHECK(a.learner == b.learner);
}

// Every completed-episode record waiting in `b`'s queues, popped (as the next learner would get them).
inline std::vector<EpisodeRecord> pop_all(Buffer& b) {
  Sampler s(b);
  std::vector<EpisodeRecord> out(64);
  out.resize(s.pop_episodes(out));
  return out;
}

inline double max_priority_of(const State& s) { return std::bit_cast<double>(s.max_priority_bits); }

}  // namespace shmreplay::test::state

using namespace shmreplay;
using test::FileGuard;
using test::SegmentGuard;
using test::UmaskGuard;
using test::check_env_payloads;
using test::counters;
using test::file_mode;
using test::fill_mixed;
using test::kOtherSchema;
using test::kPayloadSchema;
using test::payload_bytes;
using test::push_steps;
using test::slurp;
using test::spit;
using test::stored_step;
using test::temp_path;
using test::unique_name;
