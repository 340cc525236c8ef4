// tests/checkpoint/format_1_0.cpp: the format 1.0 checkpoint the previous release wrote (data/format-1.0.shmrckpt,
// made as data/make_format_1_0.cpp.txt says) verifies as 1.0 and loads, into a new name and into an existing buffer,
// with its steps and with notes that name what the format lacks (priorities, limiter, counters, episode records,
// stack settings); in a target with priorities every loaded step enters at the running maximum.
// Part of test_checkpoint (tests/CMakeLists.txt); its helpers are in checkpoint_helpers.hpp (namespace test::state).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/ranges.h>

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

namespace ckpt_format_1_0 {

using namespace shmreplay::test::state;

const std::string kFixture = std::string(SHMREPLAY_TEST_DATA_DIR) + "/format-1.0.shmrckpt";

// The fixture's steps (make_format_1_0.cpp.txt): obs = [env, step, step / 2], act = 10 step + env, done every 4th
// step, reward = step; env 0 holds steps 3 .. 10, env 1 steps 0 .. 4.
void check_fixture_steps(const Buffer& b) {
  const uint64_t heads[2] = {11, 5};
  const uint64_t firsts[2] = {3, 0};
  for (uint64_t e = 0; e < 2; ++e) {
    CAPTURE(e);
    CHECK(segment_of(b).env_control(e).head.load() == heads[e]);
    CHECK(segment_of(b).env_control(e).online_start.load() == 0);
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

// Whether a load's notes name everything a format 1.0 file lacks.
bool names_what_it_lacks(const std::vector<std::string>& notes) {
  return std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return test::contains(n, "format 1.0") && test::contains(n, "priorities") && test::contains(n, "rate limiter") &&
           test::contains(n, "learner counters") && test::contains(n, "episode records") &&
           test::contains(n, "stack settings");
  });
}

// A buffer of the fixture's shape with priorities and a limiter, steps in both envs, a priority update and a
// sample: state of its own for a 1.0 load to keep.
Buffer target_with_state(const std::string& name) {
  CreateOptions o = state_options();
  o.episode_queue_capacity = 0;  // the default, as the generator's
  Buffer dst = Buffer::create(name, 2, 8, kStateSchema, o);
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
  return dst;
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
    Buffer dst = target_with_state(target.name());
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

}  // namespace ckpt_format_1_0
