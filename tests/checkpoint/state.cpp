// tests/checkpoint/state.cpp: checkpoints hold everything the segment holds (format 2.0, issue 33): a round trip
// into a new name or an existing buffer with the same settings gives back every step's bytes, every stored step's
// priority weight, the running maximum, the rate limiter's settings and state, the learner's counters, heads, claims
// and online starts, the completed-episode records still waiting, and a stacked buffer's restart reserve and
// continuity rule; a target whose settings differ is refused untouched, or with allow_mismatch converted as
// checkpoint.hpp's table says, with notes.
// Part of test_checkpoint (tests/CMakeLists.txt); its helpers are in checkpoint_helpers.hpp (namespace test::state).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/priorities.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"
#include "checkpoint/checkpoint_helpers.hpp"

namespace ckpt_state {

using namespace shmreplay::test::state;

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
  REQUIRE(segment_of(dst).stacks().size() == 1);
  CHECK(segment_of(dst).stacks()[0].depth == segment_of(src).stacks()[0].depth);
  CHECK(segment_of(dst).stacks()[0].frames == segment_of(src).stacks()[0].frames);
  CHECK(segment_of(dst).stacks()[0].frames == 8 + 2 * (1 + 2));  // capacity + (K - 1) x (1 + restarts)
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
  segment_of(low).global_control().max_priority.store(std::bit_cast<uint64_t>(2.0));
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

// The load with allow_mismatch of `file` (saved from a buffer whose state was `before`, alpha 0.6) into a target of
// alpha 0.3: every weight w becomes w^(0.3 / 0.6), the steps and the limiter's error as they were.
void check_alpha_converted(const std::string& file, const State& before) {
  const LoadOptions allow{.allow_mismatch = true};
  SegmentGuard target(unique_name("ckst-a03"));
  Buffer dst = Buffer::create(target.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options(0.3));
  fill_state(dst, 1, 90.0f);
  const LoadResult r = load_checkpoint(file, target.name(), allow);
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

  SUBCASE("another alpha: every weight w becomes w^(0.3 / 0.6)") { check_alpha_converted(file.path(), before); }
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

TEST_CASE("a save keeps only the waiting episode records of episodes that ended below the env's saved head, even when "
          "its writer ends an episode between the records' copy and the queue's") {
  // The writer pushes during the save, from its progress callback: after the one chunk of the env's records (a ring
  // not yet wrapped, so the copy ends at the head it first saw), before the save reads the env's queue. The episode
  // that ends then is not in the file's window, so neither is its record: a load would otherwise queue a record
  // whose steps the buffer does not hold.
  SegmentGuard source(unique_name("ckst-racerec"));
  SegmentGuard loaded(unique_name("ckst-racerec-new"));
  FileGuard file(temp_path("ckst-racerec"));
  const Schema schema = Schema::parse("x:u32 done:bool reward:f32");
  CreateOptions options;
  options.episodes.done = "done";
  options.episodes.reward = "reward";
  Buffer src = Buffer::create(source.name(), 1, 64, schema, options);
  Writer w(src, {0});
  const auto push = [&](uint32_t x, bool done) {
    const float reward = 1.0f;
    w.push_one(0, {value_bytes(x), value_bytes(done), value_bytes(reward)});
  };
  for (uint32_t s = 0; s < 10; ++s) push(s, s == 4);  // one episode ended (steps 0-4), one in progress (5-9)
  int calls = 0;
  SaveOptions save;
  save.progress = [&](const CheckpointProgress& p) {
    if (p.phase == "saving" && p.done_bytes > 0 && calls++ == 0) {
      for (uint32_t s = 10; s < 13; ++s) push(s, s == 12);  // ends the episode of steps 5-12, past the copy
    }
  };
  const CheckpointInfo saved = save_checkpoint(src, file.path(), save);
  REQUIRE(calls > 0);
  REQUIRE(saved.envs.size() == 1);
  CHECK(saved.envs[0].head == 10);      // the window the copy saw
  CHECK(saved.envs[0].queued == 1);     // the record of steps 0-4 only; not that of 5-12, which ends at 12
  CHECK(segment_of(src).episode_control(0).queue_tail.load() == 2);  // both records wait in the source

  load_checkpoint(file.path(), loaded.name());
  Buffer dst = Buffer::open(loaded.name());
  const std::vector<EpisodeRecord> records = pop_all(dst);
  REQUIRE(records.size() == 1);
  CHECK(records[0].first_step == 0);
  CHECK(records[0].length == 5);
}

}  // namespace ckpt_state

namespace ckpt_state {

TEST_CASE("a checkpoint of a buffer with several learner slots gives back each slot's counters and online view, "
          "and a target with fewer slots is refused unless allowed (format 2.1)") {
  SegmentGuard source(unique_name("ckst-slots-src"));
  SegmentGuard loaded(unique_name("ckst-slots-new"));
  SegmentGuard small(unique_name("ckst-slots-small"));
  FileGuard file(temp_path("ckst-slots"));
  Buffer src = Buffer::create(source.name(), 3, 16, kPayloadSchema, {.max_learners = 3});
  {
    Writer w(src, {0, 1, 2});
    test::PayloadPusher pusher;
    for (int i = 0; i < 20; ++i) pusher.push(w, {0, 1, 2});  // wrapped: heads 20, windows [4, 20)
    Sampler r1(src, {.rank = 1});
    Sampler r2(src, {.rank = 2});
    Rng rng(3);
    SampleBatch out;
    r1.sample(View::replay, 7, 1, 0.0, rng, out);
    r1.reset_online_queue();  // slot 1's view: empty at heads 20
    for (int i = 0; i < 3; ++i) pusher.push(w, {0, 1});
    r2.sample(View::replay, 5, 2, 0.0, rng, out);
    r2.sample(View::replay, 5, 2, 0.0, rng, out);
  }
  const CheckpointInfo saved = save_checkpoint(src, file.path());
  CHECK(saved.format_minor == checkpoint_format::kFormatMinor);
  CHECK(saved.max_learners == 3);
  REQUIRE(saved.learner_slots.size() == 2);
  CHECK(saved.learner_slots[0].counters.rows_sampled == 7);
  CHECK(saved.learner_slots[0].counters.online_resets == 1);
  CHECK(saved.learner_slots[0].online_starts == std::vector<uint64_t>{20, 20, 20});
  CHECK(saved.learner_slots[1].counters.rows_sampled == 10);
  CHECK(saved.learner_slots[1].counters.sample_calls == 2);
  CHECK(saved.learner_slots[1].online_starts == std::vector<uint64_t>{0, 0, 0});
  const CheckpointInfo verified = verify_checkpoint(file.path());
  CHECK(verified.max_learners == 3);
  CHECK(verified.learner_slots == saved.learner_slots);

  // Into a new name: three slots, each as saved; slot 1's online view holds the 3 steps pushed after its reset.
  const LoadResult r = load_checkpoint(file.path(), loaded.name());
  CHECK(r.notes.empty());
  Buffer dst = Buffer::open(loaded.name());
  CHECK(dst.max_learners() == 3);
  {
    Sampler s1(dst, {.rank = 1});
    Sampler s2(dst, {.rank = 2});
    CHECK(s1.size(View::online) == 6);
    CHECK(s1.sizes(2).online == 0);
    CHECK(s2.size(View::online) == 16 * 3);
    CHECK(detail::learner_slot(segment_of(dst), 1).rows_sampled.load() == 7);
    CHECK(detail::learner_slot(segment_of(dst), 2).sample_calls.load() == 2);
  }
  // Into a buffer with one slot: refused, naming the slots; allowed, slot 0 loads and a note says what is lost.
  Buffer one = Buffer::create(small.name(), 3, 16, kPayloadSchema);
  std::string msg;
  CHECK(test::error_of([&] { load_checkpoint_into(one, file.path()); }, &msg) ==
        static_cast<int>(Errc::schema_mismatch));
  CHECK(test::contains(msg, "learner slots: the segment has 1, the checkpoint 3"));
  std::vector<std::string> notes;
  load_checkpoint_into(one, file.path(), {.allow_mismatch = true}, &notes);
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return test::contains(n, "the counters and online views of slots 1 to 2 are not loaded");
  }));
}

}  // namespace ckpt_state
