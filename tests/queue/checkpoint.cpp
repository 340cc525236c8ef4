// Checkpoints of a consuming queue (format 2.3; docs/design/checkpoints.md, "Sampling policies"): a load makes a queue
// again in which no step delivered before the save is delivered after it, each undelivered one exactly once in the
// saved insertion order; a claim pending at the save counts as its call's verdict (free before the commit, delivered
// after); a save while a learner consumes; and a load between a queue and a buffer that is not one is refused unless
// allowed.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "caps/caps_helpers.hpp"
#include "detail/protocol/consume.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/internal/queue_layout.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

struct RemoveFile {
  std::string path;
  ~RemoveFile() { std::remove(path.c_str()); }
};

// Consumes (fifo) until the queue is empty; the (env, step) payloads in delivery order.
std::vector<std::pair<uint64_t, uint64_t>> drain_fifo(Buffer& buf) {
  Sampler s(buf);
  Rng rng(5);
  SampleBatch batch;
  std::vector<std::pair<uint64_t, uint64_t>> got;
  for (;;) {
    if (error_of([&] { s.sample_transitions(View::replay, 1, rng, batch, {.consume = Consume::fifo}); }) != 0) break;
    got.emplace_back(batch.field_as<uint64_t>(0)[0], batch.field_as<uint64_t>(1)[0]);
  }
  return got;
}

}  // namespace

TEST_CASE("a queue's checkpoint loads as a queue that delivers each undelivered step exactly once in insertion order "
          "and no step delivered before the save; a claim pending at the save is free unless its call committed") {
  SegmentGuard src(unique_name("qckpt-src"));
  SegmentGuard dst(unique_name("qckpt-dst"));
  RemoveFile file{fmt::format("/tmp/{}.ckpt", unique_name("qckpt"))};
  Buffer buf = Buffer::create(src.name(), 2, 8, kCapsSchema, {.max_learners = 3, .consuming_queue = true});
  std::vector<std::pair<uint64_t, uint64_t>> pushed;
  {
    Writer w(buf, {0, 1});
    for (const uint64_t e : {1u, 0u, 0u, 1u, 0u, 1u, 1u, 0u, 0u}) {
      pushed.emplace_back(e, w.head(e));
      push_tagged(w, e);
    }
  }
  {  // the first three steps delivered by a learner of rank 0
    Sampler s(buf, {.rank = 0});
    Rng rng(1);
    SampleBatch batch;
    s.sample_transitions(View::replay, 3, rng, batch, {.consume = Consume::fifo});
  }
  // Two calls left pending by learners of ranks 1 and 2 that died: rank 1's before its commit (its claim of env 1's
  // step 2 was never delivered), rank 2's after it (env 0's step 3 was delivered at the commit, its word not yet
  // stored). The save waits for them to settle, then takes the verdict the slots' repair would.
  Segment& seg = segment_of(buf);
  detail::begin_claims(seg.queue_learner(1));
  REQUIRE(detail::try_claim(seg.cap_words(1)[2], 2, 1));
  detail::begin_claims(seg.queue_learner(2));
  REQUIRE(detail::try_claim(seg.cap_words(0)[3], 3, 2));
  detail::commit(seg.queue_learner(2), 1);

  const CheckpointInfo info = save_checkpoint(buf, file.path);
  CHECK(info.consuming_queue);
  const LoadResult r = load_checkpoint(file.path, dst.name());
  CHECK(r.info.consuming_queue);
  Buffer loaded = Buffer::open(dst.name());
  REQUIRE(loaded.consuming_queue());
  CHECK(loaded.max_times_sampled() == 1);

  std::vector<std::pair<uint64_t, uint64_t>> expected(pushed.begin() + 3, pushed.end());
  std::erase(expected, std::pair<uint64_t, uint64_t>{0, 3});  // delivered at rank 2's commit
  CHECK(drain_fifo(loaded) == expected);  // env 1's step 2 among them, once, in its place
  // The writer goes on after the loaded steps, in the loaded order.
  {
    Writer w(loaded, {0, 1});
    push_tagged(w, 1);
    push_tagged(w, 0);
  }
  CHECK(drain_fifo(loaded) == std::vector<std::pair<uint64_t, uint64_t>>{{1, 4}, {0, 5}});
}

TEST_CASE("a queue's checkpoint loaded into a buffer that is not a queue, or the reverse, is refused naming the "
          "difference; with allow_mismatch a plain buffer's steps enter a queue undelivered") {
  SegmentGuard q(unique_name("qckpt-q"));
  SegmentGuard plain(unique_name("qckpt-plain"));
  RemoveFile qfile{fmt::format("/tmp/{}.ckpt", unique_name("qckpt-qf"))};
  RemoveFile pfile{fmt::format("/tmp/{}.ckpt", unique_name("qckpt-pf"))};
  Buffer qb = Buffer::create(q.name(), 1, 4, kCapsSchema, {.consuming_queue = true});
  Buffer pb = Buffer::create(plain.name(), 1, 4, kCapsSchema, {.max_times_sampled = 1});
  {
    Writer wq(qb, {0});
    Writer wp(pb, {0});
    for (int i = 0; i < 3; ++i) {
      push_tagged(wq, 0);
      push_tagged(wp, 0);
    }
  }
  (void)save_checkpoint(qb, qfile.path);
  (void)save_checkpoint(pb, pfile.path);
  std::string msg;
  CHECK(error_of([&] { load_checkpoint(qfile.path, plain.name()); }, &msg) == static_cast<int>(Errc::schema_mismatch));
  CHECK(msg.find("consuming queue: the segment is not one, the checkpoint's buffer was") != std::string::npos);
  CHECK(error_of([&] { load_checkpoint(pfile.path, q.name()); }, &msg) == static_cast<int>(Errc::schema_mismatch));
  CHECK(msg.find("consuming queue: the segment is one, the checkpoint's buffer was not") != std::string::npos);
  (void)load_checkpoint(pfile.path, q.name(), {.allow_mismatch = true});
  CHECK(drain_fifo(qb) == std::vector<std::pair<uint64_t, uint64_t>>{{0, 0}, {0, 1}, {0, 2}});
}

TEST_CASE("a queue saved while a learner consumes loads with no step delivered before the save began and every step "
          "not delivered before it ended, each once") {
  using Clock = std::chrono::steady_clock;
  SegmentGuard src(unique_name("qckpt-live"));
  SegmentGuard dst(unique_name("qckpt-live-dst"));
  RemoveFile file{fmt::format("/tmp/{}.ckpt", unique_name("qckpt-live"))};
  constexpr uint64_t kSteps = 3000;
  Buffer buf = Buffer::create(src.name(), 2, 4096, kCapsSchema, {.consuming_queue = true});
  {
    Writer w(buf, {0, 1});
    for (uint64_t i = 0; i < kSteps; ++i) {
      push_tagged(w, 0);
      push_tagged(w, 1);
    }
  }
  struct Call {
    Clock::time_point start, end;
    std::pair<uint64_t, uint64_t> row;
  };
  std::vector<Call> calls;
  std::atomic<bool> stop{false};
  std::thread learner([&] {
    Sampler s(buf);
    Rng rng(3);
    SampleBatch batch;
    while (!stop.load()) {
      const Clock::time_point start = Clock::now();
      if (error_of([&] { s.sample_transitions(View::replay, 1, rng, batch, {.consume = Consume::fifo}); }) != 0) break;
      calls.push_back({start, Clock::now(), {batch.field_as<uint64_t>(0)[0], batch.field_as<uint64_t>(1)[0]}});
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const Clock::time_point began = Clock::now();
  (void)save_checkpoint(buf, file.path);
  const Clock::time_point ended = Clock::now();
  stop.store(true);
  learner.join();
  (void)load_checkpoint(file.path, dst.name());
  Buffer loaded = Buffer::open(dst.name());
  const std::vector<std::pair<uint64_t, uint64_t>> after = drain_fifo(loaded);
  std::set<std::pair<uint64_t, uint64_t>> once(after.begin(), after.end());
  CHECK(once.size() == after.size());
  std::set<std::pair<uint64_t, uint64_t>> before_end;
  uint64_t before_begin = 0;
  for (const Call& c : calls) {
    if (c.end < began) {
      ++before_begin;
      CHECK(once.count(c.row) == 0);
    }
    if (c.start < ended) before_end.insert(c.row);
  }
  uint64_t kept = 0;
  for (uint64_t e = 0; e < 2; ++e) {
    for (uint64_t s = 0; s < kSteps; ++s) {
      if (before_end.count({e, s}) != 0) continue;
      ++kept;
      CHECK(once.count({e, s}) == 1);
    }
  }
  CHECK(before_begin > 0);       // the learner was consuming when the save began
  CHECK(kept < 2 * kSteps);      // ... and the save read a queue that learner had partly consumed
  CHECK(kept > 0);
}

namespace {

constexpr uint64_t kKillSteps = 4096;  // per env: the ring, full (the learner takes a few ms to drain it)
constexpr uint64_t kKillRows = 4;      // rows per consuming call

// What the killed learner reported: each delivered row with its call's start and end (CLOCK_MONOTONIC ns).
struct KillTally {
  struct Row {
    int64_t start_ns, end_ns;
    uint64_t env, step;
  };
  Row rows[2 * kKillSteps];
  std::atomic<bool> go;            // the learner's first call waits for it
  std::atomic<uint64_t> n_rows;    // rows[0, n_rows) are written
  std::atomic<uint64_t> reported;  // calls whose rows were all written
  std::atomic<uint64_t> failures;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The learner that test kills: waits for `go`, consumes kKillRows rows a call at random and reports each call's
// rows; idles once the queue is empty.
void kill_learner_main(const std::string& name, KillTally* t, uint64_t seed) {
  Buffer b = Buffer::open(name);
  Sampler s(b, SamplerOptions{.rank = 0});
  Rng rng(seed);
  SampleBatch batch;
  while (!t->go.load()) {
  }
  for (;;) {
    const int64_t start = now_ns();
    const SampleOptions random{.consume = Consume::random};
    if (error_of([&] { s.sample_transitions(View::replay, kKillRows, rng, batch, random); }) != 0) {
      for (;;) ::pause();
    }
    const int64_t end = now_ns();
    const uint64_t n = t->n_rows.load();
    for (std::size_t r = 0; r < batch.rows(); ++r) {
      t->rows[n + r] = {start, end, batch.field_as<uint64_t>(0)[r], batch.field_as<uint64_t>(1)[r]};
    }
    t->n_rows.store(n + batch.rows());
    t->reported.fetch_add(1);
  }
}

}  // namespace

TEST_CASE("a learner SIGKILLed in its consuming calls while a save runs: the loaded queue holds no step the learner "
          "had delivered before the save began, and every step it never delivered, each once") {
  Rng dice(41);
  for (uint64_t round = 0; round < 6; ++round) {
    CAPTURE(round);
    SegmentGuard src(unique_name("qckpt-kill"));
    SegmentGuard dst(unique_name("qckpt-kill-dst"));
    RemoveFile file{fmt::format("/tmp/{}.ckpt", unique_name("qckpt-kill"))};
    Buffer buf = Buffer::create(src.name(), 2, 4096, kCapsSchema, {.max_learners = 2, .consuming_queue = true});
    {
      Writer w(buf, {0, 1});
      for (uint64_t i = 0; i < kKillSteps; ++i) {
        push_tagged(w, 0);
        push_tagged(w, 1);
      }
    }
    KillTally* t = map_shared_tally<KillTally>();
    struct Unmap {
      KillTally* t;
      ~Unmap() { ::munmap(t, sizeof(KillTally)); }
    } unmap{t};
    const std::string name = src.name();
    const pid_t learner = spawn([&] { run_child(t, "learner", [&] { kill_learner_main(name, t, 7 + round); }); });
    // Killed at a random call of its run (it drains the queue in a few ms, within the save), by a thread that
    // watches its reports: an instant inside a call or between two, whichever the kill meets.
    const uint64_t kill_at = 5 + dice() % (2 * kKillSteps / kKillRows - 5);
    t->go.store(true);
    while (t->reported.load() < 4) {
    }
    const int64_t began = now_ns();
    std::atomic<int64_t> killed_ns{0};
    std::thread killer([&] {
      while (t->reported.load() < kill_at) {
      }
      killed_ns = now_ns();
      CHECK(kill_and_reap(learner));
    });
    (void)save_checkpoint(buf, file.path);
    const int64_t ended = now_ns();
    killer.join();
    (void)load_checkpoint(file.path, dst.name());
    Buffer loaded = Buffer::open(dst.name());
    const std::vector<std::pair<uint64_t, uint64_t>> after = drain_fifo(loaded);
    const std::set<std::pair<uint64_t, uint64_t>> once(after.begin(), after.end());
    CHECK(once.size() == after.size());
    CHECK(t->failures.load() == 0);
    std::set<std::pair<uint64_t, uint64_t>> reported;
    uint64_t before_begin = 0, twice = 0;
    for (uint64_t i = 0; i < t->n_rows.load(); ++i) {
      const KillTally::Row& r = t->rows[i];
      CHECK(reported.insert({r.env, r.step}).second);  // the source delivered it once
      if (r.end_ns < began) {
        ++before_begin;
        twice += once.count({r.env, r.step});
      }
    }
    // The calls the learner committed (its slot's call word) and never reported: killed between the two.
    const uint64_t unreported = (segment_of(buf).queue_learner(0).call.load() >> 1) - t->reported.load();
    uint64_t missing = 0;
    for (uint64_t e = 0; e < 2; ++e) {
      for (uint64_t s = 0; s < kKillSteps; ++s) missing += reported.count({e, s}) + once.count({e, s}) == 0 ? 1u : 0u;
    }
    CHECK(twice == 0);
    CHECK(before_begin > 0);
    CHECK(unreported <= 1);
    CHECK(missing <= unreported * kKillRows);  // the rows of a call killed after its commit, before its report
    MESSAGE("round " << round << ": killed " << (killed_ns.load() - began) / 1000 << " us into a save of "
                     << (ended - began) / 1000 << " us; rows reported " << reported.size() << ", loaded "
                     << after.size() << ", missing " << missing << ", unreported calls " << unreported);
  }
}
