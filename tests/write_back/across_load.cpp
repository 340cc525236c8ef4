// Write-back handles across a checkpoint load into the same buffer (docs/design/write_back.md, "Across a checkpoint
// load"): a handle is (env, step, load generation); a load may give the same step indices other content (an older
// checkpoint's steps, then new pushes), so a write-back through a handle from before the load is refused and
// counted, whether the handle came from a sample call or from a reanalyse chunk. Checkpoints keep the write-back
// counters (format 2.4).
#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "checkpoint/checkpoint_helpers.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "write_back_helpers.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

const std::vector<uint64_t> kEnv0{0};

// The stored target of env 0's newest step, read back through a peek.
Target newest_target(Sampler& s) {
  SampleBatch peeked;
  s.peek(kEnv0, peeked);
  return target_at(peeked, 0, 0);
}

}  // namespace

TEST_CASE("a write-back through handles sampled before a checkpoint load into the same buffer is refused and "
          "counted, though their step indices are stored again; handles sampled after it are applied") {
  SegmentGuard guard(unique_name("wb-load"));
  FileGuard file(temp_path("wb-load"));
  Buffer b = Buffer::create(guard.name(), 1, 64, kWriteBackSchema, {.episodes = {.done = "done"}});
  {
    Writer w(b, {0});
    for (int i = 0; i < 10; ++i) push_stamped(w, 0);
  }
  (void)save_checkpoint(b, file.path());  // steps 0..9
  {
    Writer w(b, {0});
    for (int i = 0; i < 10; ++i) push_stamped(w, 0);  // steps 10..19
  }
  const std::vector<uint64_t> envs{0};
  const std::vector<uint64_t> steps{19};
  uint64_t before = 0;
  {
    Sampler s(b);
    SampleBatch peeked;
    s.peek(kEnv0, peeked);
    REQUIRE(peeked.start_steps()[0] == 19);
    before = peeked.load_generation();
  }
  (void)load_checkpoint_into(b, file.path());  // head back to 10
  {
    Writer w(b, {0});
    for (int i = 0; i < 10; ++i) push_stamped(w, 0);  // steps 10..19 again: other pushes
  }
  Sampler s(b);
  const std::vector<Target> rows = targets_for(envs, steps, 5);
  std::vector<uint8_t> refused(1, 9);
  const WriteBackResult r = s.write_back(envs, steps, target_fields(rows), refused, before);
  CHECK(r.applied == 0);
  CHECK(r.refused == 1);
  CHECK(refused[0] == 1);
  CHECK(newest_target(s) == target_of(0, 19, 0));  // as pushed after the load
  SampleBatch peeked;
  s.peek(kEnv0, peeked);
  CHECK(peeked.load_generation() != before);
  const WriteBackResult now = s.write_back(envs, steps, target_fields(rows), refused, peeked.load_generation());
  CHECK(now.applied == 1);
  CHECK(refused[0] == 0);
  CHECK(newest_target(s) == target_of(0, 19, 5));
}

TEST_CASE("a reanalyse chunk handed out before a checkpoint load carries a load generation its write-back is "
          "refused with") {
  SegmentGuard guard(unique_name("wb-load-walk"));
  FileGuard file(temp_path("wb-load-walk"));
  Buffer b = Buffer::create(guard.name(), 1, 64, kWriteBackSchema,
                            {.episodes = {.done = "done"}, .reanalyse_chunk = 4});
  {
    Writer w(b, {0});
    for (int i = 0; i < 8; ++i) push_stamped(w, 0);
  }
  (void)save_checkpoint(b, file.path());
  Reanalyser worker(b);
  const std::optional<ReanalyseChunk> c = worker.try_next(ReanalyseOrder::sweep);
  REQUIRE(c);
  (void)load_checkpoint_into(b, file.path());  // the same steps: a load may still have changed them
  std::vector<uint64_t> envs, steps;
  for (uint64_t step = c->first_step; step < c->end_step; ++step) {
    envs.push_back(c->env);
    steps.push_back(step);
  }
  const std::vector<Target> rows = targets_for(envs, steps, 3);
  Sampler s(b);
  const WriteBackResult r = s.write_back(envs, steps, target_fields(rows), {}, c->load_generation);
  CHECK(r.applied == 0);
  CHECK(r.refused == c->steps());
  CHECK_FALSE(worker.complete(*c, 1));  // the load reset the walk
  const std::optional<ReanalyseChunk> again = worker.try_next(ReanalyseOrder::sweep);
  REQUIRE(again);
  CHECK(again->load_generation != c->load_generation);
  const WriteBackResult ok = s.write_back(envs, steps, target_fields(rows), {}, again->load_generation);
  CHECK(ok.applied == c->steps());
}

TEST_CASE("a checkpoint keeps every learner slot's write-back counters") {
  SegmentGuard guard(unique_name("wb-ckpt"));
  SegmentGuard loaded(unique_name("wb-ckpt-load"));
  FileGuard file(temp_path("wb-ckpt"));
  Buffer b = Buffer::create(guard.name(), 1, 8, kWriteBackSchema, {.episodes = {.done = "done"}, .max_learners = 2});
  {
    Writer w(b, {0});
    for (int i = 0; i < 12; ++i) push_stamped(w, 0);  // steps 4..11 stored
  }
  const std::vector<uint64_t> envs{0, 0, 0};
  const std::vector<uint64_t> steps{2, 5, 6};  // step 2 was overwritten: refused
  const std::vector<Target> rows = targets_for(envs, steps, 1);
  {
    Sampler s0(b, {.rank = 0});
    Sampler s1(b, {.rank = 1});
    (void)s0.write_back(envs, steps, target_fields(rows));
    (void)s1.write_back(envs, steps, target_fields(rows));
    (void)s1.write_back(envs, steps, target_fields(rows));
  }
  const CheckpointInfo saved = save_checkpoint(b, file.path());
  CHECK(saved.learner.write_backs_applied == 2);
  CHECK(saved.learner.write_backs_refused == 1);
  REQUIRE(saved.learner_slots.size() == 1);
  CHECK(saved.learner_slots[0].counters.write_backs_applied == 4);
  CHECK(saved.learner_slots[0].counters.write_backs_refused == 2);
  const LoadResult r = load_checkpoint(file.path(), loaded.name());
  CHECK(r.info.learner == saved.learner);
  const SegmentInfo info = Inspector(Buffer::open(loaded.name())).snapshot();
  REQUIRE(info.learners.size() == 2);
  const auto counter = [&](std::size_t slot, std::string_view name) {
    return info.learners[slot].counters[*counter_index(CounterScope::learner, name)];
  };
  CHECK(counter(0, "write_backs_applied") == 2);
  CHECK(counter(0, "write_backs_refused") == 1);
  CHECK(counter(1, "write_backs_applied") == 4);
  CHECK(counter(1, "write_backs_refused") == 2);
}
