// Checkpoint loads: save then load into a new or an existing segment, what a load keeps and refuses (schema,
// geometry, live leases), episode bookkeeping rebuilt, and the leases a load takes itself (no role's repair runs).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "detail/os/crc32.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"
#include "checkpoint/checkpoint_helpers.hpp"

TEST_CASE("save then load into a new segment restores every env's steps, head, claim and online start") {
  SegmentGuard source(unique_name("ckpt-src"));
  SegmentGuard loaded(unique_name("ckpt-dst"));
  FileGuard file(temp_path("ckpt"));
  {
    Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
    fill_mixed(b);
  }
  const Buffer src = Buffer::open(source.name(), {.read_only = true});
  const std::string before = slurp(source.path());
  std::vector<CheckpointProgress> reports;
  const CheckpointInfo saved =
      save_checkpoint(src, file.path(), {.progress = [&](const CheckpointProgress& p) { reports.push_back(p); }});
  CHECK(slurp(source.path()) == before);  // saving never writes the segment
  REQUIRE_FALSE(reports.empty());
  CHECK(reports.back().phase == "saving");
  CHECK(reports.back().done_bytes == reports.back().total_bytes);

  CHECK(saved.num_envs == 4);
  CHECK(saved.capacity == 16);
  CHECK(saved.schema == kPayloadSchema);
  CHECK(saved.source_name == source.name());
  REQUIRE(saved.envs.size() == 4);
  CHECK(saved.envs[0].steps == 0);
  CHECK(saved.envs[1].head == 5);
  CHECK(saved.envs[1].steps == 5);
  CHECK(saved.envs[2].head == 35);
  CHECK(saved.envs[2].first_step == 19);
  CHECK(saved.envs[2].steps == 16);
  CHECK(saved.envs[3].claimed == 36);  // the abandoned reservation: claimed = head + 1
  CHECK(saved.envs[3].first_step == 20);
  CHECK(saved.envs[3].steps == 15);
  CHECK(saved.envs[2].online_start == 5);
  CHECK(saved.total_steps == 0 + 5 + 16 + 15);

  const CheckpointInfo verified = verify_checkpoint(file.path());
  CHECK(verified.total_steps == saved.total_steps);
  CHECK(verified.file_bytes == slurp(file.path()).size());
  CHECK(verified.source_name == source.name());
  CHECK(verified.envs[3].claimed == 36);

  const LoadResult r = load_checkpoint(file.path(), loaded.name());
  CHECK(r.created);
  CHECK(r.name == loaded.name());
  const Buffer dst = Buffer::open(loaded.name());
  CHECK(dst.schema() == kPayloadSchema);
  CHECK(dst.num_envs() == 4);
  CHECK(dst.capacity() == 16);
  for (uint64_t e = 0; e < 4; ++e) {
    CAPTURE(e);
    CHECK(counters(dst, e) == counters(src, e));
    CHECK(check_env_payloads(dst, e) == "");
  }
  // The online view is where it was.
  CHECK(Inspector(Buffer::open(loaded.name(), {.read_only = true})).snapshot().online_steps ==
        Inspector(source.name()).snapshot().online_steps);
}

TEST_CASE("writers continue at the restored head after a load") {
  SegmentGuard source(unique_name("ckpt-src"));
  SegmentGuard loaded(unique_name("ckpt-dst"));
  FileGuard file(temp_path("ckpt"));
  {
    Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
    fill_mixed(b);
    save_checkpoint(b, file.path());
  }
  load_checkpoint(file.path(), loaded.name());
  Buffer dst = Buffer::open(loaded.name());
  {
    Writer w(dst, {0, 1, 2, 3});
    push_steps(w, {0, 1, 2, 3}, 3);
  }
  CHECK(counters(dst, 0).head == 3);
  CHECK(counters(dst, 2).head == 38);
  CHECK(counters(dst, 3).head == 38);  // the abandoned slot is reused by the next push
  for (uint64_t e = 0; e < 4; ++e) CHECK(check_env_payloads(dst, e) == "");
  Sampler learner(dst);
  Rng rng(1);
  SampleBatch batch;
  learner.sample(View::replay, 64, 4, 1.0, rng, batch);
  for (std::size_t row = 0; row < batch.rows(); ++row) CHECK(test::check_row(batch, row, 38) == "");
}

TEST_CASE("load into an existing segment with the same schema replaces its envs and its learner counters") {
  SegmentGuard source(unique_name("ckpt-src"));
  SegmentGuard target(unique_name("ckpt-dst"));
  FileGuard file(temp_path("ckpt"));
  {
    Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
    fill_mixed(b);
    save_checkpoint(b, file.path());
  }
  Buffer dst = Buffer::create(target.name(), 4, 16, kPayloadSchema);
  {
    Writer w(dst, {0, 1, 2, 3});
    push_steps(w, {0, 1, 2, 3}, 50);
    Sampler learner(dst);
    Rng rng(2);
    SampleBatch batch;
    learner.sample(View::replay, 8, 2, 0.0, rng, batch);
  }
  const LoadResult r = load_checkpoint(file.path(), target.name());
  CHECK_FALSE(r.created);
  const Buffer src = Buffer::open(source.name(), {.read_only = true});
  for (uint64_t e = 0; e < 4; ++e) {
    CAPTURE(e);
    CHECK(counters(dst, e) == counters(src, e));
    CHECK(check_env_payloads(dst, e) == "");
  }
  // The learner counters are the checkpoint's (format 2.0): the source sampled nothing, the target had 8 rows.
  CHECK(segment_of(dst).global_control().rows_sampled.load() == segment_of(src).global_control().rows_sampled.load());
  CHECK(segment_of(dst).global_control().rows_sampled.load() == 0);
  CHECK(segment_of(dst).env_control(0).lease.load() == 0);  // the leases taken for the load are released
  CHECK(segment_of(dst).global_control().learner_lease.load() == 0);

  // load_checkpoint_into does the same on an open Buffer.
  const CheckpointInfo info = load_checkpoint_into(dst, file.path());
  CHECK(info.total_steps == 36);
  CHECK(check_env_payloads(dst, 2) == "");
}

TEST_CASE("load into an existing segment refuses another schema or geometry and leaves it untouched") {
  SegmentGuard source(unique_name("ckpt-src"));
  FileGuard file(temp_path("ckpt"));
  {
    Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
    fill_mixed(b);
    save_checkpoint(b, file.path());
  }
  SUBCASE("another schema") {
    SegmentGuard target(unique_name("ckpt-other"));
    Buffer::create(target.name(), 4, 16, kOtherSchema);
    const std::string before = slurp(target.path());
    std::string message;
    CHECK(test::error_of([&] { load_checkpoint(file.path(), target.name()); }, &message) ==
          static_cast<int>(Errc::schema_mismatch));
    CHECK(message.find("field 'tail'") != std::string::npos);
    CHECK(slurp(target.path()) == before);
  }
  SUBCASE("another capacity") {
    SegmentGuard target(unique_name("ckpt-other"));
    Buffer::create(target.name(), 4, 17, kPayloadSchema);
    const std::string before = slurp(target.path());
    std::string message;
    CHECK(test::error_of([&] { load_checkpoint(file.path(), target.name()); }, &message) ==
          static_cast<int>(Errc::invalid_argument));
    CHECK(message.find("4 envs x 16 steps") != std::string::npos);
    CHECK(slurp(target.path()) == before);
  }
}

TEST_CASE("load refuses a segment whose writer or learner is alive in another process") {
  SegmentGuard source(unique_name("ckpt-src"));
  FileGuard file(temp_path("ckpt"));
  Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
  fill_mixed(b);
  save_checkpoint(b, file.path());

  for (const bool learner : {false, true}) {
    CAPTURE(learner);
    int ready[2];
    int release[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(release) == 0);
    std::fflush(nullptr);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(ready[0]);
      ::close(release[1]);
      Buffer mine = Buffer::open(source.name());
      char byte = 1;
      if (learner) {
        Sampler s(mine);
        (void)!::write(ready[1], &byte, 1);
        (void)!::read(release[0], &byte, 1);
      } else {
        Writer w(mine, {2});
        (void)!::write(ready[1], &byte, 1);
        (void)!::read(release[0], &byte, 1);
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(release[0]);
    char byte = 0;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    std::string message;
    CHECK(test::error_of([&] { load_checkpoint(file.path(), source.name()); }, &message) ==
          static_cast<int>(Errc::lease_held));
    CHECK(message.find(fmt::format("pid {}", child)) != std::string::npos);
    CHECK(segment_of(b).env_control(0).lease.load() == 0);  // nothing half-taken is left behind
    CHECK((segment_of(b).global_control().learner_lease.load() == 0) == !learner);
    ::close(release[1]);
    ::close(ready[0]);
    ::waitpid(child, nullptr, 0);
  }
  CHECK_NOTHROW(load_checkpoint(file.path(), source.name()));
}

TEST_CASE("a buffer with episode fields keeps them through save and load, and its episode bookkeeping is rebuilt") {
  SegmentGuard source(unique_name("ckpt-ep"));
  SegmentGuard loaded(unique_name("ckpt-ep-copy"));
  SegmentGuard plain(unique_name("ckpt-ep-plain"));
  FileGuard file(temp_path("ckpt-ep"));
  const Schema schema = Schema::parse("obs:f32[2] reward:f32 done:bool");
  CreateOptions options;
  options.episodes.done = "done";
  options.episodes.reward = "reward";
  options.episode_queue_capacity = 16;
  {
    Buffer b = Buffer::create(source.name(), 2, 8, schema, options);
    Writer w(b, {0, 1});
    // env 0: episodes of 3 steps, 20 steps in all (wrapped); env 1: one episode in progress, 5 steps.
    for (uint64_t step = 0; step < 20; ++step) {
      const float obs[2] = {static_cast<float>(step), 0.5f};
      const float reward = 1.0f;
      const uint8_t done = step % 3 == 2 ? 1 : 0;
      w.push_one(0, {value_bytes(obs), value_bytes(reward), value_bytes(done)});
      if (step < 5) {
        const uint8_t never = 0;
        w.push_one(1, {value_bytes(obs), value_bytes(reward), value_bytes(never)});
      }
    }
  }
  const Buffer src = Buffer::open(source.name(), {.read_only = true});
  REQUIRE(src.has_episodes());
  const CheckpointInfo saved = save_checkpoint(src, file.path());
  CHECK(saved.episode_fields == src.episode_fields());
  CHECK(saved.episode_queue_capacity == 16);
  const CheckpointInfo verified = verify_checkpoint(file.path());
  CHECK(verified.episode_fields.done == std::optional<std::size_t>(2));
  CHECK(verified.episode_fields.reward == std::optional<std::size_t>(1));
  CHECK_FALSE(verified.episode_fields.terminated);

  const LoadResult r = load_checkpoint(file.path(), loaded.name());
  CHECK(r.created);
  const Buffer dst = Buffer::open(loaded.name(), {.read_only = true});
  CHECK(dst.episode_fields() == src.episode_fields());
  CHECK(dst.episode_queue_capacity() == 16);
  for (uint64_t e = 0; e < 2; ++e) {
    CAPTURE(e);
    CHECK(counters(dst, e) == counters(src, e));
    // Every stored step's meta word (its episode's first step, whether it ends one) is the source's: env 0's
    // window [12, 20) starts an episode and env 1's holds all of its one, so nothing starts before a window.
    const uint64_t head = segment_of(dst).env_control(e).head.load();
    for (uint64_t step = head > 8 ? head - 8 : 0; step < head; ++step) {
      CAPTURE(step);
      CHECK(segment_of(dst).step_meta(e)[step % 8].load() == segment_of(src).step_meta(e)[step % 8].load());
    }
  }
  const SegmentInfo a = Inspector(Buffer::open(source.name(), {.read_only = true})).snapshot();
  const SegmentInfo b = Inspector(Buffer::open(loaded.name(), {.read_only = true})).snapshot();
  CHECK(b.envs[0].episode_start == a.envs[0].episode_start);  // 18: the episode in progress
  CHECK(b.envs[1].episode_start == 0);

  // A segment without the episode fields is not the same buffer: refused, untouched.
  Buffer::create(plain.name(), 2, 8, schema);
  const std::string before = slurp(plain.path());
  std::string message;
  CHECK(test::error_of([&] { load_checkpoint(file.path(), plain.name()); }, &message) ==
        static_cast<int>(Errc::schema_mismatch));
  CHECK(message.find("episode fields") != std::string::npos);
  CHECK(slurp(plain.path()) == before);
}

TEST_CASE("a load runs no writer's recovery: a dead writer's record of a step it overwrites is not queued") {
  // A load takes the leases itself (lib/checkpoint/load.cpp); it does not build a Writer, whose construction
  // pushes the record of an episode whose last step a dead writer published without pushing the record
  // (detail::recover_env). That record would describe steps the load overwrites.
  SegmentGuard source(unique_name("ckpt-rec-src"));
  SegmentGuard target(unique_name("ckpt-rec-dst"));
  FileGuard file(temp_path("ckpt-rec"));
  const Schema schema = Schema::parse("obs:f32[2] reward:f32 done:bool");
  CreateOptions options;
  options.episodes.done = "done";
  options.episodes.reward = "reward";
  options.episode_queue_capacity = 16;
  const auto push = [](Writer& w, uint64_t steps, bool end) {
    for (uint64_t step = 0; step < steps; ++step) {
      const float obs[2] = {static_cast<float>(step), 0.5f};
      const float reward = 1.0f;
      const uint8_t done = end && step + 1 == steps ? 1 : 0;
      w.push_one(0, {value_bytes(obs), value_bytes(reward), value_bytes(done)});
    }
  };
  {
    Buffer b = Buffer::create(source.name(), 1, 8, schema, options);
    Writer w(b, {0});
    push(w, 2, false);  // one episode in progress, none ended
    save_checkpoint(b, file.path());
  }
  Buffer dst = Buffer::create(target.name(), 1, 8, schema, options);
  {
    Writer w(dst, {0});
    push(w, 3, true);  // an episode of 3 steps ends: its record is queued
  }
  // Its writer "died" after publishing the episode's last step and before pushing the record: unpush it.
  layout::EpisodeControl& ec = segment_of(dst).episode_control(0);
  REQUIRE(ec.queue_tail.load() == 1);
  ec.queue_tail.store(0);

  load_checkpoint_into(dst, file.path());
  CHECK(ec.queue_tail.load() == 0);  // no record of the overwritten episode
  CHECK(ec.records_dropped.load() == 0);
  CHECK(segment_of(dst).env_control(0).head.load() == 2);
  CHECK(segment_of(dst).env_control(0).lease.load() == 0);
  CHECK(segment_of(dst).global_control().learner_lease.load() == 0);
  Sampler learner(dst);
  std::vector<EpisodeRecord> records(4);
  CHECK(learner.pop_episodes(records) == 0);
}

TEST_CASE("a load that takes over a dead learner's lease repairs what that learner left, as a new learner would") {
  // The load takes the leases itself, but a dead learner's waiter count and waiting rows are words it does not
  // rewrite, and the lease is free after the load: it repairs them as Sampler's takeover does.
  SegmentGuard guard(unique_name("ckpt-dead-learner"));
  FileGuard file(temp_path("ckpt-dead-learner"));
  Buffer b = Buffer::create(guard.name(), 4, 16, kPayloadSchema);
  fill_mixed(b);
  save_checkpoint(b, file.path());
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    Buffer mine = Buffer::open(guard.name());
    Sampler s(mine);
    ::_exit(0);  // dies holding the learner lease
  }
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  layout::GlobalControl& g = segment_of(b).global_control();
  REQUIRE(g.learner_lease.load() != 0);
  g.waiters.store(1);               // it died asleep on the wake word (counted in its slot too) ...
  g.slot0_waiters.store(1);
  g.learner_waiting_rows.store(8);  // ... waiting for the rate limiter
  const uint64_t takeovers = g.learner_takeovers.load();

  load_checkpoint_into(b, file.path());
  CHECK(g.learner_lease.load() == 0);
  CHECK(g.learner_takeovers.load() == takeovers + 1);
  CHECK(g.waiters.load() == 0);
  CHECK(g.learner_waiting_rows.load() == 0);
  for (uint64_t e = 0; e < 4; ++e) CHECK(check_env_payloads(b, e) == "");
}

TEST_CASE("a load refused by a live learner of a buffer with several learner slots names the slot and says that a "
          "load needs every slot, not that a buffer has one learner") {
  SegmentGuard source(unique_name("ckpt-slots"));
  FileGuard file(temp_path("ckpt-slots"));
  CreateOptions options;
  options.max_learners = 3;
  Buffer b = Buffer::create(source.name(), 2, 16, kPayloadSchema, options);
  save_checkpoint(b, file.path());
  {
    Sampler learner(b, {.rank = 2});
    std::string message;
    CHECK(test::error_of([&] { load_checkpoint(file.path(), source.name()); }, &message) ==
          static_cast<int>(Errc::lease_held));
    CHECK(test::contains(message, "learner slot 2 (of 3)"));
    CHECK(test::contains(message, "every learner slot"));
    CHECK(test::contains(message, "close it first"));
    CHECK_FALSE(test::contains(message, "one learner at a time"));
  }
  CHECK_NOTHROW(load_checkpoint(file.path(), source.name()));
}
