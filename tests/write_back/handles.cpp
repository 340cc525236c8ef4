// Write-back by handle (docs/design/write_back.md): every sampling mode's handles name exactly the steps it
// returned, a write-back through them lands on those steps only, a step overwritten since is refused and counted,
// and only derived fields may be written back.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "write_back_helpers.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

// Each row's steps are the ones its handle names: step t of row r holds (env_ids[r], start_steps[r] + t).
void check_handles(const SampleBatch& b) {
  REQUIRE(b.rows() > 0);
  for (std::size_t r = 0; r < b.rows(); ++r) {
    for (std::size_t t = 0; t < b.sequence_length() && b.valid(r, t); ++t) {
      REQUIRE(word_at(b, 0, r, t) == b.env_ids()[r]);
      REQUIRE(word_at(b, 1, r, t) == b.start_steps()[r] + t);
    }
  }
}

// Writes every row's start step back with `tag`; all applied.
void write_back_rows(Sampler& s, const SampleBatch& b, uint64_t tag) {
  const std::vector<Target> rows = targets_for(b.env_ids(), b.start_steps(), tag);
  std::vector<uint8_t> refused(b.rows(), 9);
  const WriteBackResult r = s.write_back(b.env_ids(), b.start_steps(), target_fields(rows), refused);
  CHECK(r.applied == b.rows());
  CHECK(r.refused == 0);
  for (const uint8_t f : refused) CHECK(f == 0);
}

}  // namespace

TEST_CASE("every sampling mode returns handles naming exactly the steps it returned, and a write-back through them "
          "changes those steps and no other") {
  SegmentGuard guard(unique_name("wb-modes"));
  Buffer b = Buffer::create(guard.name(), 3, 64, kWriteBackSchema, {.episodes = {.done = "done"}});
  Writer w = Writer::range(b, 0, 3);
  for (int s = 0; s < 100; ++s) {
    for (uint64_t e = 0; e < 3; ++e) push_stamped(w, e);
  }
  Sampler s(b);
  Rng rng(5);
  SampleBatch batch;
  const std::vector<std::pair<std::string, std::function<void()>>> modes = {
      {"sequences", [&] { s.sample(View::replay, 32, 4, 0.0, rng, batch); }},
      {"transitions", [&] { s.sample_transitions(View::replay, 32, rng, batch); }},
      {"episodes stop", [&] { s.sample(View::replay, 32, 8, 0.0, rng, batch, {.episodes = Episodes::stop}); }},
      {"episodes within", [&] { s.sample(View::replay, 32, 3, 0.0, rng, batch, {.episodes = Episodes::within}); }},
      {"peek", [&] { s.peek(std::vector<uint64_t>{2, 0, 1}, batch); }},
      {"online", [&] { s.sample(View::online, 16, 2, 0.0, rng, batch); }},
      {"mixed", [&] { s.sample_mixed(8, 8, 2, 0.0, rng, batch); }},
      {"mixture", [&] {
         s.sample(View::replay, 30, 2, 0.0, rng, batch,
                  {.recency_half_life = 20, .mixture = {.uniform = 1, .recency = 1, .online = 1}});
       }},
  };
  uint64_t tag = 1;
  for (const auto& [mode, draw] : modes) {
    CAPTURE(mode);
    draw();
    check_handles(batch);
    write_back_rows(s, batch, tag);
    ++tag;
  }
  // Every stored step holds its own target: as pushed, or one of the write-backs meant for it.
  for (uint64_t e = 0; e < 3; ++e) {
    std::vector<uint64_t> ids(1, e);
    for (int k = 0; k < 4; ++k) {
      s.sample(View::replay, 256, 1, 0.0, rng, batch);
      for (std::size_t r = 0; r < batch.rows(); ++r) {
        CHECK(tag_of(target_at(batch, r, 0), batch.env_ids()[r], batch.start_steps()[r], tag).has_value());
      }
    }
  }
  CHECK(Inspector(guard.name()).snapshot().learner.counters[*counter_index(CounterScope::learner,
                                                                           "write_backs_applied")] > 0);
}

TEST_CASE("a consuming queue's calls return handles of the steps they delivered, and write_back refuses a queue") {
  SegmentGuard guard(unique_name("wb-queue"));
  Buffer b = Buffer::create(guard.name(), 2, 32, kWriteBackSchema, {.consuming_queue = true});
  Writer w = Writer::range(b, 0, 2);
  for (int s = 0; s < 20; ++s) {
    for (uint64_t e = 0; e < 2; ++e) push_stamped(w, e);
  }
  Sampler s(b);
  Rng rng(3);
  SampleBatch batch;
  s.sample(View::replay, 8, 1, 0.0, rng, batch, {.consume = Consume::fifo});
  check_handles(batch);
  const std::vector<Target> rows = targets_for(batch.env_ids(), batch.start_steps(), 1);
  std::string message;
  CHECK(error_of([&] { (void)s.write_back(batch.env_ids(), batch.start_steps(), target_fields(rows)); }, &message) ==
        code(Errc::invalid_argument));
  CHECK(contains(message, "consuming queue"));
}

TEST_CASE("a write-back to a step a writer overwrote since is refused and counted, and leaves the newer step as "
          "pushed") {
  SegmentGuard guard(unique_name("wb-refused"));
  Buffer b = Buffer::create(guard.name(), 2, 16, kWriteBackSchema);
  Writer w = Writer::range(b, 0, 2);
  for (int s = 0; s < 16; ++s) push_stamped(w, 0);
  for (int s = 0; s < 16; ++s) push_stamped(w, 1);
  Sampler s(b);
  // Env 0's steps 0..15 and env 1's steps 0..15; then env 0 laps its ring: its handles name steps now gone.
  std::vector<uint64_t> envs, steps;
  for (uint64_t e = 0; e < 2; ++e) {
    for (uint64_t p = 0; p < 16; p += 3) {
      envs.push_back(e);
      steps.push_back(p);
    }
  }
  for (int k = 0; k < 10; ++k) push_stamped(w, 0);  // env 0 now holds steps 10..25
  const std::vector<Target> rows = targets_for(envs, steps, 7);
  std::vector<uint8_t> refused(envs.size(), 9);
  const WriteBackResult r = s.write_back(envs, steps, target_fields(rows), refused);
  uint64_t expect_refused = 0;
  for (std::size_t i = 0; i < envs.size(); ++i) {
    const bool gone = envs[i] == 0 && steps[i] < 10;
    CHECK(refused[i] == (gone ? 1 : 0));
    expect_refused += gone ? 1 : 0;
  }
  CHECK(r.refused == expect_refused);
  CHECK(r.applied == envs.size() - expect_refused);
  // The newer steps in the refused handles' ring slots are as pushed; the applied ones carry the write-back.
  SampleBatch batch;
  s.peek(std::vector<uint64_t>{0}, batch);  // env 0's newest step, 25, whose slot step 9 had
  CHECK(target_at(batch, 0, 0) == target_of(0, 25, 0));
  Rng rng(1);
  for (int k = 0; k < 20; ++k) {
    s.sample_transitions(View::replay, 64, rng, batch);
    for (std::size_t i = 0; i < batch.rows(); ++i) {
      const uint64_t e = batch.env_ids()[i], p = batch.start_steps()[i];
      const bool written = p < 16 && p % 3 == 0 && (e == 1 || p >= 10);
      CHECK(target_at(batch, i, 0) == target_of(e, p, written ? 7 : 0));
    }
  }
  const SegmentInfo info = Inspector(guard.name()).snapshot();
  CHECK(info.learner.counters[*counter_index(CounterScope::learner, "write_backs_refused")] == expect_refused);
  CHECK(info.learner.counters[*counter_index(CounterScope::learner, "write_backs_applied")] == r.applied);
}

TEST_CASE("write_back refuses data for a field that is not derived, and mismatched lengths, before writing "
          "anything") {
  SegmentGuard guard(unique_name("wb-args"));
  Buffer b = Buffer::create(guard.name(), 1, 16, kWriteBackSchema);
  Writer w = Writer::range(b, 0, 1);
  for (int s = 0; s < 4; ++s) push_stamped(w, 0);
  Sampler s(b);
  const std::vector<uint64_t> envs{0, 0}, steps{1, 2};
  const std::vector<Target> rows = targets_for(envs, steps, 3);
  std::vector<FieldBytes> fields = target_fields(rows);
  const uint64_t other_step = 99;
  const std::vector<uint64_t> obs{other_step, other_step};
  fields[1] = field_bytes(obs);  // "step" is not derived
  std::string message;
  CHECK(error_of([&] { (void)s.write_back(envs, steps, fields); }, &message) == code(Errc::invalid_argument));
  CHECK(contains(message, "field 'step'"));
  CHECK(contains(message, "not derived"));
  fields[1] = {};
  CHECK(error_of([&] { (void)s.write_back(envs, std::vector<uint64_t>{1}, fields); }) == code(Errc::size_mismatch));
  fields[kTargetField].bytes -= 8;
  CHECK(error_of([&] { (void)s.write_back(envs, steps, fields); }) == code(Errc::size_mismatch));
  CHECK(error_of([&] { (void)s.write_back(envs, std::vector<uint64_t>{1, 4}, target_fields(rows)); }, &message) ==
        code(Errc::invalid_argument));
  CHECK(contains(message, "never published"));
  SampleBatch batch;
  s.peek(std::vector<uint64_t>{0}, batch);
  CHECK(target_at(batch, 0, 0) == target_of(0, 3, 0));
  Rng rng(2);
  s.sample_transitions(View::replay, 64, rng, batch);
  for (std::size_t i = 0; i < batch.rows(); ++i) {
    CHECK(word_at(batch, 1, i, 0) == batch.start_steps()[i]);
    CHECK(target_at(batch, i, 0) == target_of(0, batch.start_steps()[i], 0));
  }
  // try_update keeps rewriting any field that is not fixed at push, derived or not (existing users).
  const uint64_t step_value = 1234;
  CHECK(s.try_update(0, 1, {{}, value_bytes(step_value), {}, {}}));
}

TEST_CASE("a derived field is declared ':derived', kept by the segment and compared by checkpoints") {
  CHECK(kWriteBackSchema[kTargetField].derived);
  CHECK(kWriteBackSchema[kTargetField].to_string() == "target:u64[256]:derived");
  CHECK(Schema::parse(kWriteBackSchema.to_string()) == kWriteBackSchema);
  std::string message;
  CHECK(error_of([] { (void)Schema::parse("obs:u8[4,8]:stack=0:derived"); }, &message) ==
        code(Errc::invalid_schema));
  CHECK(contains(message, "stored as pushed"));
  CHECK(error_of([] { (void)Schema::parse("obs:u8[8]:lz4:derived"); }) == code(Errc::invalid_schema));
  CHECK(error_of([] { (void)Schema::parse("v:f32:derived:derived"); }, &message) == code(Errc::invalid_schema));
  CHECK(contains(message, "given twice"));
  const Schema plain = Schema::parse("env:u64 step:u64 done:bool target:u64[256]");
  const std::vector<std::string> diff = Schema::differences(kWriteBackSchema, plain);
  REQUIRE(diff.size() == 1);
  CHECK(diff[0] == "field 'target': expected derived, actual not derived");

  SegmentGuard guard(unique_name("wb-schema"));
  DirGuard dir(std::filesystem::temp_directory_path() / unique_name("wb-ckpt"));
  std::filesystem::create_directories(dir.path());
  {
    Buffer b = Buffer::create(guard.name(), 1, 8, kWriteBackSchema);
    Writer w = Writer::range(b, 0, 1);
    push_stamped(w, 0);
    (void)save_checkpoint(b, dir.path() + "/a.ckpt");
  }
  CHECK(Buffer::open(guard.name()).schema() == kWriteBackSchema);
  SegmentGuard other(unique_name("wb-plain"));
  Buffer target = Buffer::create(other.name(), 1, 8, plain);
  CHECK(error_of([&] { (void)load_checkpoint_into(target, dir.path() + "/a.ckpt"); }, &message) ==
        code(Errc::schema_mismatch));
  CAPTURE(message);
  CHECK(contains(message, "field 'target': expected not derived, actual derived"));
}
