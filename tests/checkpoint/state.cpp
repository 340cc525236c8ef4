// Checkpoints hold everything the segment holds (format 2.0, issue 33): a round trip into a new name or an existing
// buffer with the same settings gives back every step's bytes, every stored step's priority weight, the running
// maximum, the rate limiter's settings and state, the learner's counters, heads, claims and online starts, the
// completed-episode records still waiting, and a stacked buffer's restart reserve and continuity rule; a target whose
// settings differ is refused untouched, or with allow_mismatch converted as checkpoint.hpp's table says, with notes;
// the format 1.0 fixture that the previous release wrote (data/format-1.0.shmrckpt) still loads, with notes.
// Part of test_checkpoint (tests/CMakeLists.txt); its helpers are in checkpoint_helpers.hpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "detail/os/crc32.hpp"
#include "detail/protocol/priorities.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"
#include "checkpoint/checkpoint_helpers.hpp"

#ifndef SHMREPLAY_TEST_DATA_DIR
#error "tests/CMakeLists.txt defines SHMREPLAY_TEST_DATA_DIR, the folder of tests/checkpoint/data"
#endif

namespace ckpt_state {

const Schema kStateSchema = Schema::parse("obs:f32[3] act:i32 done:bool reward:f32");
constexpr uint64_t kStateEnvs = 4;
constexpr uint64_t kStateCapacity = 8;
// Bounds wide enough that no push or sample of these tests is held back; the counts and error still move.
const RateLimit kLimit = RateLimit::ratio(0.5, 4, 1000.0);
const std::string kFixture = std::string(SHMREPLAY_TEST_DATA_DIR) + "/format-1.0.shmrckpt";

// Episodes (done and reward), 4 records per env queue (env 0 overflows it), priorities and a limiter.
CreateOptions state_options(std::optional<double> alpha = 0.6, std::optional<RateLimit> limit = kLimit) {
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
void push_env(Writer& w, uint64_t env, uint64_t steps, uint64_t seed) {
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
void fill_state(Buffer& b, uint64_t seed, float top_priority) {
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
  std::vector<test::EnvCounters> counters;                    // head, claimed, online_start per env
  std::vector<StepRecords> steps;                             // each env's stored steps
  std::vector<std::vector<double>> weights;                   // each stored step's priority^alpha
  std::vector<std::array<uint64_t, 3>> queues;                // queue head, tail, records dropped per env
  std::vector<uint64_t> stacks_intact_from;                   // per env (a stacked buffer)
  uint64_t max_priority_bits = 0;                             // GlobalControl::max_priority
  RateLimitState limiter;                                     // settings, counts, error
  CheckpointLearner learner;                                  // GlobalControl's learner words
};

State state_of(const Buffer& b) {
  const Segment& seg = b.segment();
  State s;
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    const layout::EnvControl& c = seg.env_control(e);
    s.counters.push_back(test::counters(b, e));
    const uint64_t head = c.head.load();
    s.steps.push_back(read_steps(b, e, 0, head));  // clamped to the replay view
    std::vector<double> w;
    if (seg.has_priorities()) {
      const detail::PriorityTree tree = detail::priority_tree_of(seg, e);
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
void check_same_state(const State& a, const State& b) {
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
std::vector<EpisodeRecord> pop_all(Buffer& b) {
  Sampler s(b);
  std::vector<EpisodeRecord> out(64);
  out.resize(s.pop_episodes(out));
  return out;
}

double max_priority_of(const State& s) { return std::bit_cast<double>(s.max_priority_bits); }

// A stacked buffer (layout 1.6): obs is a stack of K = 3 frames of 4 bytes along axis 0, episodes of 5 steps whose
// first step repeats its first frame (padding), the continuity rule trusting the episode flags.
const Schema kStackSchema = Schema::parse("obs:u8[3,4]:stack=0 done:bool reward:f32");

CreateOptions stack_options(StackContinuity rule) {
  CreateOptions o;
  o.episodes.done = "done";
  o.episodes.reward = "reward";
  o.priority_exponent = 0.6;
  o.stack_restarts = 2;
  o.stack_continuity = rule;
  return o;
}

void push_stacked(Writer& w, uint64_t env, uint64_t steps) {
  for (uint64_t i = 0; i < steps; ++i) {
    const uint64_t step = w.head(env);
    const uint64_t start = step - step % 5;
    std::array<uint8_t, 12> stack{};
    for (uint64_t k = 0; k < 3; ++k) {
      const uint64_t g = std::max(start, step + k + 1 >= 3 ? step + k + 1 - 3 : 0);
      for (uint64_t j = 0; j < 4; ++j) stack[k * 4 + j] = static_cast<uint8_t>((env * 31 + g * 7 + j) % 251);
    }
    const uint8_t done = step % 5 == 4 ? 1 : 0;
    const float reward = static_cast<float>(step);
    w.push_one(env, {value_bytes(stack), value_bytes(done), value_bytes(reward)});
  }
}

TEST_CASE("a checkpoint loaded into a new name gives back every step, weight, counter, limiter state and waiting "
          "episode record of its source exactly") {
  SegmentGuard source(unique_name("ckst-src"));
  SegmentGuard loaded(unique_name("ckst-new"));
  FileGuard file(temp_path("ckst"));
  Buffer src = Buffer::create(source.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
  fill_state(src, 0, 40.0f);
  const State before = state_of(src);
  // The state is the interesting kind: wrapped and partial envs, a claim, a moved online start, a dropped record,
  // records waiting, counters and limiter that moved, a running maximum above every pushed priority.
  REQUIRE(before.counters[0].head > kStateCapacity);
  REQUIRE(before.counters[1].head < kStateCapacity);
  REQUIRE(before.counters[2].claimed == before.counters[2].head + 1);
  REQUIRE(before.counters[1].online_start > 0);
  REQUIRE(before.counters[1].online_start < before.counters[1].head);
  REQUIRE(before.queues[0][2] > 0);
  REQUIRE(before.learner.rows_sampled > 0);
  REQUIRE(before.learner.steps_updated == 1);
  REQUIRE(before.learner.priority_updates == 3);
  REQUIRE(before.limiter.samples > 0);
  REQUIRE(before.limiter.changes == 1);
  REQUIRE(max_priority_of(before) == 40.0);

  const CheckpointInfo saved = save_checkpoint(src, file.path());
  CHECK(saved.format_major == 2);
  CHECK(saved.holds_state());
  CHECK(saved.priority_exponent == std::optional<double>(0.6));
  CHECK(saved.max_priority == 40.0);
  CHECK(saved.limiter.limit == std::optional<RateLimit>(kLimit));
  CHECK(saved.limiter.error_offset != 0.0);  // the settings were set again: the error restarted at the middle
  CHECK(saved.learner.rows_sampled == before.learner.rows_sampled);
  uint64_t waiting = 0;
  for (const CheckpointEnv& e : saved.envs) waiting += e.queued;
  CHECK(waiting > 0);

  const LoadResult r = load_checkpoint(file.path(), loaded.name());
  CHECK(r.created);
  CHECK(r.notes.empty());
  Buffer dst = Buffer::open(loaded.name());
  CHECK(dst.priority_exponent() == 0.6);
  CHECK(dst.rate_limit() == std::optional<RateLimit>(kLimit));
  CHECK(dst.episode_queue_capacity() == 4);
  CHECK(dst.episode_fields() == src.episode_fields());
  const State after = state_of(dst);
  check_same_state(before, after);
  CHECK(after.max_priority_bits == before.max_priority_bits);

  const std::vector<EpisodeRecord> a = pop_all(src);
  const std::vector<EpisodeRecord> b = pop_all(dst);
  CHECK(a.size() == waiting);
  CHECK(a == b);
}

TEST_CASE("a checkpoint of a stacked buffer carries its restart reserve and continuity rule into a new segment, "
          "with every stack and weight exact") {
  SegmentGuard source(unique_name("ckst-stk"));
  SegmentGuard loaded(unique_name("ckst-stk-new"));
  FileGuard file(temp_path("ckst-stk"));
  Buffer src = Buffer::create(source.name(), 2, 8, kStackSchema, stack_options(StackContinuity::episodes));
  {
    Writer w = Writer::range(src, 0, 2);
    push_stacked(w, 0, 20);
    push_stacked(w, 1, 6);
  }
  const State before = state_of(src);
  const CheckpointInfo saved = save_checkpoint(src, file.path());
  CHECK(saved.stack_restarts == 2);
  CHECK(saved.stack_continuity == StackContinuity::episodes);
  CHECK(verify_checkpoint(file.path()).stack_restarts == 2);

  const LoadResult r = load_checkpoint(file.path(), loaded.name());
  CHECK(r.created);
  CHECK(r.notes.empty());
  const Buffer dst = Buffer::open(loaded.name());
  CHECK(dst.stack_continuity() == StackContinuity::episodes);
  REQUIRE(dst.segment().stacks().size() == 1);
  CHECK(dst.segment().stacks()[0].depth == src.segment().stacks()[0].depth);
  CHECK(dst.segment().stacks()[0].frames == src.segment().stacks()[0].frames);
  CHECK(dst.segment().stacks()[0].frames == 8 + 2 * (1 + 2));  // capacity + (K - 1) x (1 + restarts)
  check_same_state(before, state_of(dst));
  CHECK(before.steps[0].count == 8);  // every stored step of the wrapped env kept its frames

  // A target with the compare rule is another buffer: refused untouched, or loaded with a note when allowed.
  SegmentGuard other(unique_name("ckst-stk-cmp"));
  Buffer cmp = Buffer::create(other.name(), 2, 8, kStackSchema, stack_options(StackContinuity::compare));
  const std::string untouched = slurp(other.path());
  std::string message;
  CHECK(test::error_of([&] { load_checkpoint_into(cmp, file.path()); }, &message) ==
        static_cast<int>(Errc::schema_mismatch));
  CHECK(test::contains(message, "stack continuity: the segment's rule is compare, the checkpoint's episodes"));
  CHECK(slurp(other.path()) == untouched);
  std::vector<std::string> notes;
  load_checkpoint_into(cmp, file.path(), {.allow_mismatch = true}, &notes);
  REQUIRE(notes.size() == 1);
  CHECK(test::contains(notes[0], "stack continuity"));
  CHECK(cmp.stack_continuity() == StackContinuity::compare);
  const State into = state_of(cmp);
  for (uint64_t e = 0; e < 2; ++e) CHECK(into.steps[e].bytes == before.steps[e].bytes);
}

TEST_CASE("a checkpoint loaded into an existing buffer with the same settings replaces its steps, weights, counters "
          "and waiting records with the source's, and keeps the larger running maximum") {
  SegmentGuard source(unique_name("ckst-src"));
  SegmentGuard target(unique_name("ckst-dst"));
  FileGuard file(temp_path("ckst"));
  Buffer src = Buffer::create(source.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
  fill_state(src, 0, 40.0f);
  const State before = state_of(src);
  save_checkpoint(src, file.path());

  Buffer dst = Buffer::create(target.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
  fill_state(dst, 1, 90.0f);  // other values, heads, counters and records; a larger running maximum
  const State own = state_of(dst);
  REQUIRE(own.counters[0].head != before.counters[0].head);
  REQUIRE(own.queues != before.queues);
  REQUIRE_FALSE(own.learner == before.learner);
  REQUIRE(own.limiter.samples != before.limiter.samples);
  REQUIRE(max_priority_of(own) == 90.0);

  const LoadResult r = load_checkpoint(file.path(), target.name());
  CHECK_FALSE(r.created);
  CHECK(r.notes.empty());
  const State after = state_of(dst);
  check_same_state(before, after);
  CHECK(max_priority_of(after) == 90.0);  // the larger of the target's and the file's
  CHECK(pop_all(dst) == pop_all(src));

  // The other way round: a target whose running maximum is smaller takes the file's.
  Buffer low = Buffer::open(target.name());
  low.segment().global_control().max_priority.store(std::bit_cast<uint64_t>(2.0));
  load_checkpoint_into(low, file.path());
  CHECK(max_priority_of(state_of(low)) == 40.0);
}

TEST_CASE("a load into a buffer whose priorities, limiter or stack rule differ is refused naming each difference, "
          "and leaves the target untouched") {
  SegmentGuard source(unique_name("ckst-src"));
  SegmentGuard flat(unique_name("ckst-flat"));
  FileGuard file(temp_path("ckst"));
  FileGuard flat_file(temp_path("ckst-flat"));
  {
    Buffer src = Buffer::create(source.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
    fill_state(src, 0, 40.0f);
    save_checkpoint(src, file.path());
    Buffer without = Buffer::create(flat.name(), kStateEnvs, kStateCapacity, kStateSchema,
                                    state_options(std::nullopt));
    fill_state(without, 0, 40.0f);
    save_checkpoint(without, flat_file.path());
  }
  const RateLimit other_limit = RateLimit::ratio(0.5, 4, 500.0);
  struct Case {
    const char* what;
    CreateOptions target;
    const FileGuard* file;
    std::vector<std::string> named;
  };
  const std::vector<Case> cases = {
      {"another alpha", state_options(0.8), &file, {"priorities: the segment has alpha 0.8, the checkpoint alpha 0.6"}},
      {"no priorities in the target", state_options(std::nullopt), &file,
       {"priorities: the segment has no priorities, the checkpoint alpha 0.6"}},
      {"no priorities in the file", state_options(0.6), &flat_file,
       {"priorities: the segment has alpha 0.6, the checkpoint no priorities"}},
      {"another limiter", state_options(0.6, other_limit), &file,
       {"rate limiter: the segment has " + other_limit.to_string() + ", the checkpoint " + kLimit.to_string()}},
      {"no limiter in the target", state_options(0.6, std::nullopt), &file,
       {"rate limiter: the segment has no rate limiter, the checkpoint " + kLimit.to_string()}},
      {"alpha and limiter", state_options(0.3, RateLimit::min_size(4)), &file,
       {"2 places", "the segment has alpha 0.3", "the segment has min size 4"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    SegmentGuard target(unique_name("ckst-dst"));
    Buffer dst = Buffer::create(target.name(), kStateEnvs, kStateCapacity, kStateSchema, c.target);
    fill_state(dst, 1, 90.0f);
    const std::string untouched = slurp(target.path());
    const State own = state_of(dst);
    std::string message;
    CHECK(test::error_of([&] { load_checkpoint(c.file->path(), target.name()); }, &message) ==
          static_cast<int>(Errc::schema_mismatch));
    for (const std::string& part : c.named) CHECK_MESSAGE(test::contains(message, part), message);
    CHECK(test::contains(message, "allow_mismatch"));
    CHECK(test::error_of([&] { load_checkpoint_into(dst, c.file->path()); }) ==
          static_cast<int>(Errc::schema_mismatch));
    CHECK(slurp(target.path()) == untouched);
    check_same_state(own, state_of(dst));
  }
}

TEST_CASE("with allow_mismatch a load converts the weights to the target's alpha, keeps the target's limiter with "
          "its error restarted at the middle, and says so in its notes") {
  SegmentGuard source(unique_name("ckst-src"));
  SegmentGuard flat(unique_name("ckst-flat"));
  FileGuard file(temp_path("ckst"));
  FileGuard flat_file(temp_path("ckst-flat"));
  Buffer src = Buffer::create(source.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
  fill_state(src, 0, 40.0f);
  const State before = state_of(src);
  save_checkpoint(src, file.path());
  {
    Buffer without = Buffer::create(flat.name(), kStateEnvs, kStateCapacity, kStateSchema,
                                    state_options(std::nullopt));
    fill_state(without, 0, 40.0f);
    save_checkpoint(without, flat_file.path());
  }
  const LoadOptions allow{.allow_mismatch = true};

  SUBCASE("another alpha: every weight w becomes w^(0.3 / 0.6)") {
    SegmentGuard target(unique_name("ckst-a03"));
    Buffer dst = Buffer::create(target.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options(0.3));
    fill_state(dst, 1, 90.0f);
    const LoadResult r = load_checkpoint(file.path(), target.name(), allow);
    REQUIRE(r.notes.size() == 2);
    CHECK(test::contains(r.notes[0], "allow_mismatch"));
    CHECK(test::contains(r.notes[1], "weights converted from alpha 0.6 to alpha 0.3"));
    const State after = state_of(dst);
    for (std::size_t e = 0; e < kStateEnvs; ++e) {
      CAPTURE(e);
      REQUIRE(after.weights[e].size() == before.weights[e].size());
      for (std::size_t i = 0; i < before.weights[e].size(); ++i) {
        CAPTURE(i);
        CHECK(after.weights[e][i] == doctest::Approx(std::pow(before.weights[e][i], 0.5)).epsilon(1e-6));
      }
      CHECK(after.steps[e].bytes == before.steps[e].bytes);
    }
    CHECK(max_priority_of(after) == 90.0);  // a priority, not a weight: the larger one, unconverted
    CHECK(after.limiter.error == before.limiter.error);  // the limiter was the same: its error carries over
  }
  SUBCASE("another limiter: the target's settings, the file's counts, the error at the middle of the bounds") {
    SegmentGuard target(unique_name("ckst-lim"));
    const RateLimit mine = RateLimit::ratio(0.5, 4, 500.0);
    Buffer dst = Buffer::create(target.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options(0.6, mine));
    fill_state(dst, 1, 90.0f);
    std::vector<std::string> notes;
    load_checkpoint_into(dst, file.path(), allow, &notes);
    REQUIRE(notes.size() == 2);
    CHECK(test::contains(notes[0], "rate limiter"));
    CHECK(test::contains(notes[1], "the segment keeps its settings"));
    const State after = state_of(dst);
    CHECK(after.limiter.limit == std::optional<RateLimit>(mine));
    CHECK(after.limiter.samples == before.limiter.samples);
    CHECK(after.limiter.inserts == before.limiter.inserts);
    CHECK(after.limiter.error == doctest::Approx((mine.min_diff + mine.max_diff) / 2));
    CHECK(after.limiter.error != doctest::Approx(before.limiter.error));
    for (std::size_t e = 0; e < kStateEnvs; ++e) CHECK(after.weights[e] == before.weights[e]);
    CHECK(after.learner == before.learner);
  }
  SUBCASE("a target without priorities leaves the file's out") {
    SegmentGuard target(unique_name("ckst-nop"));
    Buffer dst =
        Buffer::create(target.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options(std::nullopt));
    const LoadResult r = load_checkpoint(file.path(), target.name(), allow);
    REQUIRE(r.notes.size() == 2);
    CHECK(test::contains(r.notes[1], "the segment has none; the checkpoint's are left out"));
    const State after = state_of(dst);
    for (std::size_t e = 0; e < kStateEnvs; ++e) CHECK(after.steps[e].bytes == before.steps[e].bytes);
    CHECK(pop_all(dst) == pop_all(src));
  }
  SUBCASE("a file without priorities: every loaded step enters at the running maximum") {
    SegmentGuard target(unique_name("ckst-max"));
    Buffer dst = Buffer::create(target.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
    fill_state(dst, 1, 90.0f);
    std::vector<std::string> notes;
    load_checkpoint_into(dst, flat_file.path(), allow, &notes);
    REQUIRE(notes.size() == 2);
    CHECK(test::contains(notes[1], "the checkpoint has none; every loaded step has the running maximum"));
    const State after = state_of(dst);
    const double expected = static_cast<float>(detail::priority_weight(90.0, 0.6));
    for (std::size_t e = 0; e < kStateEnvs; ++e) {
      CAPTURE(e);
      REQUIRE_FALSE(after.weights[e].empty());
      for (const double w : after.weights[e]) CHECK(w == expected);
    }
  }
}

// A checkpoint's bytes with env 0's first weight replaced (its section's extra_crc and header_crc recomputed), or
// with its header's words changed (its header_crc recomputed): files whose checksums hold.
std::string with_weight(const std::string& bytes, const CheckpointInfo& info, float weight) {
  using checkpoint_format::EnvSection;
  std::string out = bytes;
  const CheckpointEnv& e = info.envs[0];
  const uint64_t at = e.records_offset + e.steps * info.schema.step_bytes();
  std::memcpy(out.data() + at, &weight, sizeof weight);
  EnvSection section;
  std::memcpy(&section, out.data() + e.offset, sizeof section);
  const uint64_t extra =
      section.weights * sizeof(float) + section.queued * sizeof(checkpoint_format::EpisodeRecordBytes);
  section.extra_crc = detail::crc32(0, out.data() + at, extra);
  section.header_crc = 0;
  section.header_crc = detail::crc32(0, &section, sizeof section);
  std::memcpy(out.data() + e.offset, &section, sizeof section);
  return out;
}

std::string with_header(const std::string& bytes, uint64_t checkpoint_format::CheckpointHeader::*word, double value) {
  checkpoint_format::CheckpointHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  h.*word = std::bit_cast<uint64_t>(value);
  h.header_crc = 0;
  h.header_crc = detail::crc32(0, &h, sizeof h);
  std::string out = bytes;
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

TEST_CASE("verify refuses a checkpoint whose weights, running maximum or limiter offset no segment could hold, even "
          "with its checksums right, and a load of it changes nothing") {
  SegmentGuard source(unique_name("ckst-src"));
  SegmentGuard target(unique_name("ckst-dst"));
  FileGuard file(temp_path("ckst"));
  FileGuard bad(temp_path("ckst-bad"));
  Buffer src = Buffer::create(source.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
  fill_state(src, 0, 40.0f);
  const CheckpointInfo info = save_checkpoint(src, file.path());
  const std::string good = slurp(file.path());
  REQUIRE(info.envs[0].weights > 0);
  {  // the helpers' files are right but for the value: the same value verifies
    spit(bad.path(), with_weight(good, info, 2.5f));
    CHECK_NOTHROW(verify_checkpoint(bad.path()));
    spit(bad.path(), with_header(good, &checkpoint_format::CheckpointHeader::max_priority_bits, 7.0));
    CHECK(verify_checkpoint(bad.path()).max_priority == 7.0);
  }
  Buffer dst = Buffer::create(target.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
  const std::string untouched = slurp(target.path());
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  constexpr auto kMax = &checkpoint_format::CheckpointHeader::max_priority_bits;
  constexpr auto kOffset = &checkpoint_format::CheckpointHeader::limiter_offset_bits;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a NaN weight", with_weight(good, info, static_cast<float>(nan))},
      {"an infinite weight", with_weight(good, info, static_cast<float>(inf))},
      {"a negative weight", with_weight(good, info, -1.0f)},
      {"a NaN running maximum", with_header(good, kMax, nan)},
      {"a negative running maximum", with_header(good, kMax, -2.0)},
      {"a running maximum below 1, where every segment's starts", with_header(good, kMax, 0.5)},
      {"an infinite running maximum", with_header(good, kMax, inf)},
      {"an infinite limiter offset", with_header(good, kOffset, inf)},
      {"a NaN limiter offset", with_header(good, kOffset, nan)},
  };
  for (const auto& [what, bytes] : cases) {
    CAPTURE(what);
    spit(bad.path(), bytes);
    std::string message;
    CHECK(test::error_of([&] { verify_checkpoint(bad.path()); }, &message) == static_cast<int>(Errc::corrupt));
    CHECK_MESSAGE(test::contains(message, bad.path()), message);
    CHECK(test::error_of([&] { load_checkpoint(bad.path(), target.name()); }) == static_cast<int>(Errc::corrupt));
    CHECK(slurp(target.path()) == untouched);
  }
}

// The fixture's steps (make_format_1_0.cpp.txt): obs = [env, step, step / 2], act = 10 step + env, done every 4th
// step, reward = step; env 0 holds steps 3 .. 10, env 1 steps 0 .. 4.
void check_fixture_steps(const Buffer& b) {
  const uint64_t heads[2] = {11, 5};
  const uint64_t firsts[2] = {3, 0};
  for (uint64_t e = 0; e < 2; ++e) {
    CAPTURE(e);
    CHECK(b.segment().env_control(e).head.load() == heads[e]);
    CHECK(b.segment().env_control(e).online_start.load() == 0);
    const StepRecords r = read_steps(b, e, 0, heads[e]);
    CHECK(r.first_step == firsts[e]);
    REQUIRE(r.count == heads[e] - firsts[e]);
    for (uint64_t i = 0; i < r.count; ++i) {
      const uint64_t step = r.first_step + i;
      CAPTURE(step);
      float obs[3];
      int32_t act = 0;
      uint8_t done = 0;
      float reward = 0;
      std::memcpy(obs, r.field(i, 0).data(), sizeof obs);
      std::memcpy(&act, r.field(i, 1).data(), sizeof act);
      std::memcpy(&done, r.field(i, 2).data(), sizeof done);
      std::memcpy(&reward, r.field(i, 3).data(), sizeof reward);
      CHECK(obs[0] == static_cast<float>(e));
      CHECK(obs[1] == static_cast<float>(step));
      CHECK(obs[2] == static_cast<float>(step) * 0.5f);
      CHECK(act == static_cast<int32_t>(step * 10 + e));
      CHECK(done == (step % 4 == 3 ? 1 : 0));
      CHECK(reward == static_cast<float>(step));
    }
  }
}

TEST_CASE("the format 1.0 checkpoint of the previous release verifies as 1.0 and loads with its steps and notes "
          "that name what it lacks") {
  const CheckpointInfo info = verify_checkpoint(kFixture);
  CHECK(info.format_major == 1);
  CHECK(info.format_minor == 0);
  CHECK_FALSE(info.holds_state());
  CHECK(info.num_envs == 2);
  CHECK(info.capacity == 8);
  CHECK(info.schema == kStateSchema);
  CHECK(info.episode_fields.done == std::optional<std::size_t>(2));
  CHECK(info.episode_fields.reward == std::optional<std::size_t>(3));
  CHECK_FALSE(info.priority_exponent);
  REQUIRE(info.envs.size() == 2);
  CHECK(info.envs[0].first_step == 3);
  CHECK(info.envs[0].head == 11);
  CHECK(info.envs[1].head == 5);
  CHECK(info.total_steps == 8 + 5);

  const auto names_what_it_lacks = [](const std::vector<std::string>& notes) {
    return std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
      return test::contains(n, "format 1.0") && test::contains(n, "priorities") &&
             test::contains(n, "rate limiter") && test::contains(n, "learner counters") &&
             test::contains(n, "episode records") && test::contains(n, "stack settings");
    });
  };

  SUBCASE("into a new name") {
    SegmentGuard loaded(unique_name("ckst-v1"));
    const LoadResult r = load_checkpoint(kFixture, loaded.name());
    CHECK(r.created);
    CHECK(r.info.format_major == 1);
    CHECK_MESSAGE(names_what_it_lacks(r.notes), fmt::format("{}", fmt::join(r.notes, " | ")));
    CHECK(test::contains(r.notes.back(), "the new segment has none of them"));
    const Buffer b = Buffer::open(loaded.name());
    CHECK(b.schema() == kStateSchema);
    CHECK(b.has_episodes());
    CHECK_FALSE(b.has_priorities());
    CHECK(b.rate_limit() == std::nullopt);
    check_fixture_steps(b);
  }
  SUBCASE("into an existing buffer with priorities and a limiter: each step at the running maximum, the target's "
          "counters and limiter kept") {
    SegmentGuard target(unique_name("ckst-v1-into"));
    CreateOptions o = state_options();
    o.episode_queue_capacity = 0;  // the default, as the generator's
    Buffer dst = Buffer::create(target.name(), 2, 8, kStateSchema, o);
    {
      Writer w = Writer::range(dst, 0, 2);
      push_env(w, 0, 3, 0);
      push_env(w, 1, 2, 0);
      Sampler s(dst);
      const std::vector<uint64_t> envs = {1};
      const std::vector<uint64_t> steps = {1};
      const std::vector<float> priorities = {9.0f};
      REQUIRE(s.update_priorities(envs, steps, priorities).applied == 1);
      Rng rng(3);
      SampleBatch batch;
      s.sample(View::replay, 6, 1, 0.0, rng, batch);
    }
    const State own = state_of(dst);
    REQUIRE(max_priority_of(own) == 12.0);  // env 1's step 1 was pushed with 1 + 1 + 10 x 1
    std::vector<std::string> notes;
    const CheckpointInfo loaded = load_checkpoint_into(dst, kFixture, {}, &notes);
    CHECK(loaded.format_major == 1);
    CHECK_MESSAGE(names_what_it_lacks(notes), fmt::format("{}", fmt::join(notes, " | ")));
    CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
      return test::contains(n, "a format 1.0 checkpoint has none; every loaded step has the running maximum");
    }));
    check_fixture_steps(dst);
    const State after = state_of(dst);
    const double expected = static_cast<float>(detail::priority_weight(12.0, 0.6));
    for (std::size_t e = 0; e < 2; ++e) {
      CAPTURE(e);
      REQUIRE(after.weights[e].size() == (e == 0 ? 8u : 5u));
      for (const double w : after.weights[e]) CHECK(w == expected);
    }
    CHECK(after.max_priority_bits == own.max_priority_bits);
    CHECK(after.learner == own.learner);
    CHECK(after.limiter.limit == own.limiter.limit);
    CHECK(after.limiter.samples == own.limiter.samples);
    // The error follows the inserts (the heads the file gave): inserts x samples_per_insert - samples + offset.
    CHECK(after.limiter.inserts == 11 + 5);
  }
}

}  // namespace ckpt_state
