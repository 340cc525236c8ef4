// The learners' statistics (layout 1.8): each slot's histogram of the age of the rows it sampled (how far behind its
// env's head each row ended) and its sample calls that gave up waiting for the rate limiter; what a takeover and a
// checkpoint load do to them (docs/design/learners.md, "Sample ages and limiter timeouts").
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "detail/protocol/learner_slots.hpp"
#include "learners/learners_helpers.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

// A histogram counted the way the exporter reads it: rows, their ages' sum, rows per bucket (non-cumulative).
struct Ages {
  uint64_t rows = 0;
  uint64_t sum = 0;
  std::array<uint64_t, layout::kAgeBuckets> buckets{};

  // Adds one age, its bucket found by walking the bounds 0, 1, 4, ..., 4^11 (not by layout::age_bucket).
  void add(uint64_t age) {
    static constexpr uint64_t kLe[] = {0, 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304};
    ++rows;
    sum += age;
    for (uint32_t k = 0; k < layout::kAgeBuckets; ++k) {
      if (age <= kLe[k]) {
        ++buckets[k];
        return;
      }
    }
  }
  // Every row of `batch`: its env's head (no writer runs) minus its start and its valid steps (the mask's ones).
  void add(const SampleBatch& batch, const std::vector<uint64_t>& heads) {
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      uint64_t steps = 0;
      for (std::size_t t = 0; t < batch.sequence_length(); ++t) steps += batch.valid(row, t) ? 1u : 0u;
      const uint64_t head = heads[batch.env_ids()[row]];
      REQUIRE(batch.start_steps()[row] + steps <= head);
      add(head - batch.start_steps()[row] - steps);
    }
  }
  static Ages of(const layout::LearnerStats& s) {
    Ages a;
    a.rows = s.age_rows.load();
    a.sum = s.age_sum_steps.load();
    for (uint32_t k = 0; k < layout::kAgeBuckets; ++k) a.buckets[k] = s.age_buckets[k].load();
    return a;
  }
  static Ages of(const LearnerInfo& l) { return {l.age_rows, l.age_sum_steps, l.age_buckets}; }
  bool operator==(const Ages&) const = default;
};

doctest::String toString(const Ages& a) {
  std::string text = fmt::format("{} rows, sum {}, buckets", a.rows, a.sum);
  for (const uint64_t b : a.buckets) text += fmt::format(" {}", b);
  return text.c_str();
}

// `rounds` pushes of one step to each env in `envs` (payload steps).
void push(Writer& w, PayloadPusher& pusher, const std::vector<int32_t>& envs, std::size_t rounds) {
  for (std::size_t i = 0; i < rounds; ++i) pusher.push(w, envs);
}

std::vector<uint64_t> heads_of(const Buffer& b) {
  std::vector<uint64_t> heads;
  for (uint64_t e = 0; e < b.num_envs(); ++e) heads.push_back(segment_of(b).env_control(e).head.load());
  return heads;
}

SegmentInfo inspect(const std::string& name) {
  return Inspector(Buffer::open(name, OpenOptions{.expected_schema = std::nullopt, .read_only = true})).snapshot();
}

}  // namespace

TEST_CASE("each learner slot counts the ages of the rows it returned, exactly: head - start - valid steps, for sample "
          "calls of several lengths and views, mixed calls and peeks") {
  SegmentGuard guard(unique_name("ages"));
  // Envs of different depths (ages up to about 1000, buckets 0 to 6) in rings that hold them all.
  Buffer buf = Buffer::create(guard.name(), 3, 2048, kPayloadSchema, {.max_learners = 2});
  Writer w(buf, {0, 1, 2});
  PayloadPusher pusher;
  push(w, pusher, {0, 1, 2}, 40);
  push(w, pusher, {0, 1}, 300);
  push(w, pusher, {0}, 700);
  Sampler a(buf, {.rank = 0});
  Sampler b(buf, {.rank = 1});
  Rng ra = rank_rng(5, 0);
  Rng rb = rank_rng(5, 1);
  SampleBatch out;
  Ages want_a;
  Ages want_b;
  std::vector<uint64_t> heads = heads_of(buf);
  for (const std::size_t length : std::array<std::size_t, 4>{1, 3, 8, 64}) {
    CAPTURE(length);
    a.sample(View::replay, 200, length, 0.0, ra, out);
    want_a.add(out, heads);
    b.sample(View::replay, 50, length, 1.0, rb, out);
    want_b.add(out, heads);
  }
  // The online view after a reset and more steps; a mixed call; a peek (every row is its env's newest step: age 0,
  // also the row of an env with no step yet: there are none here, env 2 has 40).
  a.reset_online_queue();
  push(w, pusher, {0, 1, 2}, 20);
  heads = heads_of(buf);
  a.sample(View::online, 100, 4, 0.0, ra, out);
  want_a.add(out, heads);
  b.sample_mixed(30, 10, 5, 1.0, rb, out);
  want_b.add(out, heads);
  const uint64_t ids[] = {0, 2, 2, 1};
  a.peek(ids, out);
  for (int i = 0; i < 4; ++i) want_a.add(0);
  CHECK(Ages::of(detail::learner_slot(segment_of(buf), 0).stats) == want_a);
  CHECK(Ages::of(detail::learner_slot(segment_of(buf), 1).stats) == want_b);
  CHECK(want_a.buckets[0] > 0);   // rows ending at the head (the peek's, and rows cut short by it)
  CHECK(want_a.buckets[6] > 0);   // ages in (256, 1024]: env 0's oldest rows
  CHECK(want_a.rows == 4 * 200 + 100 + 4);
  CHECK(want_b.rows == 4 * 50 + 40);
  // Every row returned is counted: the histogram's count is the slot's rows.
  CHECK(detail::learner_slot(segment_of(buf), 0).rows_sampled.load() == want_a.rows);
  // The Inspector reads each slot's, and sums them.
  const SegmentInfo info = inspect(guard.name());
  CHECK(Ages::of(info.learners[0]) == want_a);
  CHECK(Ages::of(info.learners[1]) == want_b);
  Ages both = want_a;
  both.rows += want_b.rows;
  both.sum += want_b.sum;
  for (uint32_t k = 0; k < layout::kAgeBuckets; ++k) both.buckets[k] += want_b.buckets[k];
  CHECK(Ages::of(info.learner) == both);
}

TEST_CASE("a peek counts ages 0, an env without steps included") {
  SegmentGuard guard(unique_name("ages-peek"));
  Buffer buf = Buffer::create(guard.name(), 2, 16, kPayloadSchema);
  Writer w(buf, {0});
  PayloadPusher pusher;
  push(w, pusher, {0}, 5);
  Sampler s(buf);
  SampleBatch out;
  const uint64_t ids[] = {0, 1, 0};
  s.peek(ids, out);
  const layout::LearnerStats& st = *segment_of(buf).learner_stats(0);
  CHECK(st.age_rows.load() == 3);
  CHECK(st.age_buckets[0].load() == 3);
  CHECK(st.age_sum_steps.load() == 0);
}

TEST_CASE("a learner's sample call that gives up waiting for the rate limiter counts in its slot's limiter_timeouts "
          "only, with a timeout of 0 too") {
  SegmentGuard guard(unique_name("ages-timeouts"));
  // 1 sample per insert once 4 steps are stored, error buffer 4: min_diff 0.
  Buffer buf = Buffer::create(guard.name(), 2, 64, kPayloadSchema,
                              {.rate_limit = RateLimit::ratio(1.0, 4, 4.0), .max_learners = 3});
  Writer w(buf, {0, 1});
  PayloadPusher pusher;
  push(w, pusher, {0, 1}, 4);  // 8 inserts
  Sampler a(buf, {.rank = 0});
  Sampler b(buf, {.rank = 2});
  Rng rng(3);
  SampleBatch out;
  SampleOptions now;
  now.rate_limit_timeout_ms = 0;
  a.sample(View::replay, 8, 1, 0.0, rng, out, now);  // error 8 - 8 = 0: the margin is spent
  CHECK(error_of([&] { b.sample(View::replay, 4, 1, 0.0, rng, out, now); }) == code(Errc::rate_limited));
  SampleOptions briefly;
  briefly.rate_limit_timeout_ms = 20;
  CHECK(error_of([&] { b.sample(View::replay, 4, 1, 0.0, rng, out, briefly); }) == code(Errc::rate_limited));
  CHECK(segment_of(buf).learner_stats(2)->limiter_timeouts.load() == 2);
  CHECK(segment_of(buf).learner_stats(0)->limiter_timeouts.load() == 0);
  CHECK(segment_of(buf).learner_stats(1)->limiter_timeouts.load() == 0);
  // The refused calls returned no rows: slot 2 counted no ages.
  CHECK(segment_of(buf).learner_stats(2)->age_rows.load() == 0);
  const RateLimitState st = buf.rate_limit_state();
  CHECK(st.learner_limited == 2);
  CHECK(st.learner_timeouts == 2);
  const SegmentInfo info = inspect(guard.name());
  CHECK(info.learners[2].limiter_timeouts == 2);
  CHECK(info.learners[0].limiter_timeouts == 0);
  CHECK(info.learner.limiter_timeouts == 2);
  CHECK(info.rate_limit.learner_timeouts == 2);
}

TEST_CASE("a takeover of a dead learner's slot keeps its statistics; a checkpoint load starts every slot's at zero") {
  SegmentGuard guard(unique_name("ages-ckpt"));
  const std::string file = fmt::format("/tmp/{}.shmrckpt", guard.name());
  DirGuard file_guard(file);  // removes the file (remove_all takes a file too)
  {
    Buffer buf = Buffer::create(guard.name(), 2, 32, kPayloadSchema, {.max_learners = 2});
    Writer w(buf, {0, 1});
    PayloadPusher pusher;
    push(w, pusher, {0, 1}, 20);
  }
  // A child samples in slot 1 and dies holding it.
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    Buffer mine = Buffer::open(guard.name());
    Sampler s(mine, {.rank = 1});
    Rng rng(1);
    SampleBatch out;
    s.sample(View::replay, 16, 2, 0.0, rng, out);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  Buffer buf = Buffer::open(guard.name());
  const Ages left = Ages::of(*segment_of(buf).learner_stats(1));
  CHECK(left.rows == 16);
  {
    Sampler heir(buf, {.rank = 1});  // takes the dead child's slot over
    CHECK(Ages::of(*segment_of(buf).learner_stats(1)) == left);
    Sampler first(buf, {.rank = 0});
    Rng rng(2);
    SampleBatch out;
    first.sample(View::replay, 8, 1, 0.0, rng, out);
    CHECK(segment_of(buf).learner_stats(0)->age_rows.load() == 8);
  }
  (void)save_checkpoint(buf, file);
  (void)load_checkpoint_into(buf, file);
  for (uint64_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(Ages::of(*segment_of(buf).learner_stats(r)) == Ages{});
    CHECK(segment_of(buf).learner_stats(r)->limiter_timeouts.load() == 0);
  }
  // The counters the checkpoint holds came back.
  CHECK(detail::learner_slot(segment_of(buf), 1).rows_sampled.load() == 16);
  CHECK(detail::learner_slot(segment_of(buf), 0).rows_sampled.load() == 8);
}
