// The rate limiter (shmreplay/rate_limit.hpp, detail/protocol/rate_limit): its settings and verdicts (Reverb's
// conditions), the learner's and waiting writers' waits in one process, a randomized model of the counting and
// wake-up protocol that checks every interleaving it draws, and real processes: three writers and a learner at
// different speeds with the ratio checked at many points, a learner SIGKILLed while writers wait, writers
// SIGKILLed while the learner waits, and a dead writer's admission given back when its envs are taken over.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "detail/protocol/rate_limit.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

const Schema kSchema = Schema::parse("x:u64");

// Pushes one step to each of `envs` (a u64 per step).
void push_steps(Writer& w, const std::vector<uint64_t>& envs) {
  std::vector<uint64_t> xs(envs.size(), 7);
  w.push(std::span<const uint64_t>(envs), {field_bytes(xs)});
}

SampleOptions no_wait() {
  SampleOptions o;
  o.rate_limit_timeout_ms = 0;
  return o;
}

// A sound reading of the error: samples read before and after the heads, retried until they agree (only the learner
// changes samples, and inserts only grow, so with samples fixed the sum of heads lies between its values at the
// two reads).
struct ErrorReading {
  uint64_t inserts;
  uint64_t samples;
};
ErrorReading read_error(const Buffer& b) {
  const layout::GlobalControl& g = b.segment().global_control();
  for (;;) {
    const uint64_t s0 = g.samples.load(std::memory_order_seq_cst);
    const uint64_t inserts = detail::count_inserts(b.segment()).inserts;
    if (g.samples.load(std::memory_order_seq_cst) == s0) return {inserts, s0};
  }
}

// Integer seconds from an environment variable, for the longer runs.
double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atof(v) : fallback;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Settings and verdicts

TEST_CASE("RateLimit::ratio and min_size give Reverb's SampleToInsertRatio and MinSize bounds") {
  const RateLimit r = RateLimit::ratio(4.0, 1000, 256.0);
  CHECK(r.min_size_to_sample == 1000);
  CHECK(r.samples_per_insert == 4.0);
  CHECK(r.min_diff == 4000.0 - 256.0);
  CHECK(r.max_diff == 4000.0 + 256.0);
  CHECK(r.has_ratio());
  CHECK(r.error_buffer() == 256.0);
  const RateLimit m = RateLimit::min_size(50);
  CHECK(m.min_size_to_sample == 50);
  CHECK_FALSE(m.has_ratio());
  CHECK(m.to_string() == "min size 50");
  CHECK(r.to_string().find("error buffer 256") != std::string::npos);
}

TEST_CASE("the verdicts hold samples back below min size and below min_diff, and waiting inserts above max_diff") {
  const detail::LimiterSettings s{RateLimit::ratio(2.0, 10, 8.0), 0};  // bounds 12 .. 28
  // Fewer than 10 stored: no sample, whatever the error.
  CHECK(detail::sample_verdict(s, 9, 9, 0, 1).reason == RateLimitReason::min_size);
  // 10 inserts, 0 samples: error 20; a batch of 8 leaves 12 >= 12, a batch of 9 would leave 11.
  CHECK(detail::sample_verdict(s, 10, 10, 0, 8).allowed());
  CHECK(detail::sample_verdict(s, 10, 10, 0, 9).reason == RateLimitReason::learner_ahead);
  CHECK(detail::sample_verdict(s, 10, 10, 0, 9).bound == 12.0);
  // Inserts are free up to min size; then (admitted + k) * 2 - samples <= 28.
  CHECK(detail::insert_verdict(s, 0, 0, 10).allowed());
  CHECK(detail::insert_verdict(s, 13, 0, 1).allowed());   // 14 * 2 = 28
  CHECK(detail::insert_verdict(s, 14, 0, 1).reason == RateLimitReason::writers_ahead);  // 30 > 28
  CHECK(detail::insert_verdict(s, 14, 2, 1).allowed());   // 30 - 2 = 28
  // An offset (after a change of the settings) shifts the error.
  const detail::LimiterSettings shifted{RateLimit::ratio(2.0, 10, 8.0), -10.0};
  CHECK(detail::insert_verdict(shifted, 18, 0, 1).allowed());  // 38 - 10 = 28
  // MinSize: only the size counts.
  const detail::LimiterSettings m{RateLimit::min_size(5), 0};
  CHECK(detail::sample_verdict(m, 5, 5, 1'000'000, 256).allowed());
  CHECK(detail::insert_verdict(m, 1'000'000, 0, 16).allowed());
}

TEST_CASE("create refuses rate limits that cannot work, naming the setting and the expected value") {
  const std::string name = unique_name("rl-bad");
  SegmentGuard guard(name);
  std::string m;
  CHECK(error_of([&] { Buffer::create(name, 2, 8, kSchema, {.rate_limit = RateLimit::ratio(0.0, 1, 4.0)}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("samples_per_insert is 0") != std::string::npos);
  CHECK(error_of([&] { Buffer::create(name, 2, 8, kSchema, {.rate_limit = RateLimit::ratio(4.0, 1, 3.0)}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("expected at least 4") != std::string::npos);
  CHECK(error_of([&] { Buffer::create(name, 2, 8, kSchema, {.rate_limit = RateLimit::min_size(17)}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("at most 16 steps") != std::string::npos);
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("the settings live in the segment: another mapping reads them, set_rate_limit changes and removes them") {
  const std::string name = unique_name("rl-settings");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 64, kSchema, {.rate_limit = RateLimit::ratio(2.0, 4, 8.0)});
  Buffer other = Buffer::open(name);
  REQUIRE(other.rate_limit().has_value());
  CHECK(*other.rate_limit() == RateLimit::ratio(2.0, 4, 8.0));
  CHECK(other.rate_limit_state().error == 0.0);

  Writer w(b, {0, 1});
  for (int i = 0; i < 10; ++i) push_steps(w, {0, 1});  // 20 inserts: error 40
  CHECK(other.rate_limit_state().error == 40.0);
  // A change restarts the error at the middle of the new bounds, so history does not hold either side back.
  other.set_rate_limit(RateLimit::ratio(1.0, 4, 6.0));
  const RateLimitState s = b.rate_limit_state();
  CHECK(s.limit == RateLimit::ratio(1.0, 4, 6.0));
  CHECK(s.error == 4.0);  // (4 - 6 + 4 + 6) / 2
  CHECK(s.changes == 1);
  CHECK(s.inserts == 20);
  other.set_rate_limit(std::nullopt);
  CHECK_FALSE(b.rate_limit().has_value());
  CHECK(Buffer::open(name, {.read_only = true}).rate_limit_state().limit == std::nullopt);
  std::string m;
  CHECK(error_of([&] { Buffer::open(name, {.read_only = true}).set_rate_limit(RateLimit::min_size(1)); }, &m) ==
        static_cast<int>(Errc::read_only));
}

TEST_CASE("a rewriter of the settings killed halfway leaves the settings in force whole, and its lease is taken "
          "over") {
  const std::string name = unique_name("rl-rewriter");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 64, kSchema, {.rate_limit = RateLimit::ratio(2.0, 4, 8.0)});
  layout::GlobalControl& g = b.segment().global_control();
  // What a `shmreplay limit` killed while filling the spare slot leaves: its lease, and a half-written slot.
  const pid_t dead = spawn([] {});
  int status = 0;
  ::waitpid(dead, &status, 0);
  g.limiter_writer.store(layout::pack_owner(static_cast<uint64_t>(dead), 12345));
  layout::LimiterSlot& spare = g.limiter_slots[(g.limiter_index.load() & 1) ^ 1];
  spare.enabled.store(1);
  spare.samples_per_insert.store(std::bit_cast<uint64_t>(std::numeric_limits<double>::quiet_NaN()));
  CHECK(*b.rate_limit() == RateLimit::ratio(2.0, 4, 8.0));  // readers never see the half-written slot
  b.set_rate_limit(RateLimit::min_size(3));                 // the dead rewriter's lease is taken over
  CHECK(*Buffer::open(name).rate_limit() == RateLimit::min_size(3));
  CHECK(g.limiter_writer.load() == 0);
  CHECK(b.rate_limit_state().changes == 1);
}

// ---------------------------------------------------------------------------------------------------------------
// One process

TEST_CASE("min size: a sample is refused ('not now') until enough steps are stored, then admitted and counted") {
  const std::string name = unique_name("rl-minsize");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 64, kSchema, {.rate_limit = RateLimit::min_size(10)});
  Writer w(b, {0, 1});
  Sampler learner(b);
  Rng rng(1);
  SampleBatch batch;
  for (int i = 0; i < 4; ++i) push_steps(w, {0, 1});
  CHECK(learner.rate_limit_verdict(4) == RateLimitReason::min_size);
  std::string m;
  CHECK(error_of([&] { learner.sample_transitions(View::replay, 4, rng, batch, no_wait()); }, &m) ==
        static_cast<int>(Errc::rate_limited));
  CHECK(m.find("8 steps are stored, fewer than min_size_to_sample 10") != std::string::npos);
  push_steps(w, {0});
  push_steps(w, {1});
  CHECK(learner.rate_limit_verdict(4) == RateLimitReason::none);
  learner.sample_transitions(View::replay, 4, rng, batch, no_wait());
  // MinSize has no ratio: a thousand more rows pass.
  for (int i = 0; i < 250; ++i) learner.sample_transitions(View::replay, 4, rng, batch, no_wait());
  const RateLimitState s = b.rate_limit_state();
  CHECK(s.samples == 1004);
  CHECK(s.learner_limited == 1);
  // Peeks are not samples.
  const uint64_t ids[] = {0, 1};
  learner.peek(ids, batch);
  CHECK(b.rate_limit_state().samples == 1004);
}

TEST_CASE("a ratio holds the learner back when it is ahead; a non-waiting writer is never held back") {
  const std::string name = unique_name("rl-ratio");
  SegmentGuard guard(name);
  // 2 samples per insert after 4 steps, error buffer 8: bounds 0 .. 16.
  Buffer b = Buffer::create(name, 2, 1024, kSchema, {.rate_limit = RateLimit::ratio(2.0, 4, 8.0)});
  Writer w(b, {0, 1});
  Sampler learner(b);
  Rng rng(2);
  SampleBatch batch;
  for (int i = 0; i < 2; ++i) push_steps(w, {0, 1});  // 4 inserts: error 8
  learner.sample_transitions(View::replay, 8, rng, batch, no_wait());  // 8 - 8 = 0 >= 0
  std::string m;
  CHECK(error_of([&] { learner.sample_transitions(View::replay, 1, rng, batch, no_wait()); }, &m) ==
        static_cast<int>(Errc::rate_limited));
  CHECK(m.find("the error (inserts x samples_per_insert - samples) is 0") != std::string::npos);
  CHECK(m.find("below min_diff 0") != std::string::npos);
  // The default writer is not held back even far past max_diff.
  for (int i = 0; i < 100; ++i) push_steps(w, {0, 1});
  CHECK(b.rate_limit_state().error == 400.0);
  CHECK(b.rate_limit_state().writers_limited == 0);
  learner.sample_transitions(View::replay, 256, rng, batch, no_wait());
  // A batch larger than max_diff - min_diff is explained when it is refused.
  CHECK(error_of([&] { learner.sample_transitions(View::replay, 512, rng, batch, no_wait()); }, &m) ==
        static_cast<int>(Errc::rate_limited));
  CHECK(m.find("use batches of at most 16 rows") != std::string::npos);
}

TEST_CASE("a waiting writer is held back above max_diff and gives up at its timeout with nothing written") {
  const std::string name = unique_name("rl-writer");
  SegmentGuard guard(name);
  // 1 sample per insert after 2 steps, error buffer 4: writers may run 6 steps ahead of the samples.
  Buffer b = Buffer::create(name, 2, 64, kSchema, {.rate_limit = RateLimit::ratio(1.0, 2, 4.0)});
  Writer w(b, {0, 1}, {.wait_for_rate_limit = true, .rate_limit_timeout_ms = 100});
  for (int i = 0; i < 3; ++i) push_steps(w, {0, 1});  // 6 inserts, error 6 = max_diff
  std::string m;
  CHECK(error_of([&] { push_steps(w, {0}); }, &m) == static_cast<int>(Errc::rate_limited));
  CHECK(m.find("held this push of 1 step back for 100 ms") != std::string::npos);
  CHECK(m.find("above max_diff 6") != std::string::npos);
  CHECK(m.find("no learner is attached") != std::string::npos);
  CHECK(m.find("Nothing was written") != std::string::npos);
  CHECK(w.head(0) == 3);
  CHECK(b.segment().env_control(0).limiter_reserved.load() == 3);  // the admission attempt was withdrawn
  const RateLimitState s = b.rate_limit_state();
  CHECK(s.writers_limited == 1);
  CHECK(s.writer_timeouts == 1);
  CHECK(s.writer_waiters == 0);
  // A learner's samples let it in again; reserve/commit is admitted the same way.
  Sampler learner(b);
  Rng rng(3);
  SampleBatch batch;
  learner.sample_transitions(View::replay, 2, rng, batch, no_wait());
  push_steps(w, {0});
  StepSlot slot = w.reserve(1);
  slot.as<uint64_t>(0)[0] = 7;
  slot.commit();
  CHECK(error_of([&] { (void)w.reserve(1); }) == static_cast<int>(Errc::rate_limited));
  // A writer that timed out can go on without waiting.
  w.set_options({.wait_for_rate_limit = false});
  for (int i = 0; i < 10; ++i) push_steps(w, {0, 1});
  CHECK(w.head(0) == 14);
}

TEST_CASE("an abandoned reservation gives its admission back") {
  const std::string name = unique_name("rl-abandon");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 1, 64, kSchema, {.rate_limit = RateLimit::ratio(1.0, 1, 2.0)});  // max_diff 3
  Writer w(b, {0}, {.wait_for_rate_limit = true, .rate_limit_timeout_ms = 50});
  push_steps(w, {0});
  push_steps(w, {0});
  { StepSlot abandoned = w.reserve(0); }  // admitted (3rd step), then abandoned
  CHECK(b.segment().env_control(0).limiter_reserved.load() == 2);
  push_steps(w, {0});  // the 3rd step is admitted again
  CHECK(error_of([&] { push_steps(w, {0}); }) == static_cast<int>(Errc::rate_limited));
}

TEST_CASE("a waiting writer is woken by the learner's samples in another thread, and a waiting learner by pushes") {
  const std::string name = unique_name("rl-wake");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 4096, kSchema, {.rate_limit = RateLimit::ratio(1.0, 1, 8.0)});
  Writer w(b, {0, 1}, {.wait_for_rate_limit = true, .rate_limit_timeout_ms = 20'000});
  Sampler learner(b);
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> rows{0};
  std::thread t([&] {
    Rng rng(4);
    SampleBatch batch;
    SampleOptions o;
    o.rate_limit_timeout_ms = 20'000;
    while (!stop.load()) {
      learner.sample_transitions(View::replay, 4, rng, batch, o);
      rows += 4;
    }
    done = true;
  });
  for (int i = 0; i < 500; ++i) push_steps(w, {0, 1});
  stop = true;
  // Lets a learner that waits for rows finish its last call (without waiting for it in turn).
  w.set_options({.wait_for_rate_limit = false});
  while (!done.load()) {
    push_steps(w, {0, 1});
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  t.join();
  const RateLimitState s = b.rate_limit_state();
  CHECK(s.samples == rows.load());
  CHECK(s.inserts >= 1000);
  CHECK(s.writer_timeouts == 0);
  CHECK((s.writers_limited > 0 || s.learner_limited > 0));
}

// ---------------------------------------------------------------------------------------------------------------
// A randomized model of the counting and wake-up protocol
//
// Each actor runs the protocol's steps as the code does, one shared-memory access per step, and a scheduler
// picks the next actor at random (sequential consistency: the code's seq_cst handshakes; docs/design.md argues
// the weaker orders). A futex sleeper is blocked until its word changes. Checked after every step: the published
// error never leaves [min_diff, max_diff]; and when no actor can run, someone sleeps although its condition
// holds: a lost wake-up (with B + spi <= 2 * error buffer, writers or the learner can always go on).

namespace model {

struct Shared {
  std::vector<uint64_t> head, reserved;
  uint64_t admit_seq = 0, samples = 0;
  uint64_t wseq = 0, wpromise = 0;  // the writers' wake word and re-check promise (time does not pass here, so
                                    // a promise, once made, stays pending: wake.hpp's expiry only saves wakes)
  uint64_t lseq = 0, lwaiters = 0;  // the learner's wake word
};

struct Actor {
  int pc = 0;
  bool asleep = false;
  uint64_t sleep_seq = 0;
  bool waiting = false;  // registered as a waiter (the learner); waiting for the limiter (a writer)
  // scratch
  uint64_t v = 0, count = 0, s = 0;
  std::size_t e = 0;
};

struct Model {
  detail::LimiterSettings limit;
  uint64_t batch;
  Shared sh;
  std::vector<Actor> writers;
  Actor learner;

  Model(std::size_t w, const RateLimit& r, uint64_t b) : limit{r, 0}, batch(b), writers(w) {
    sh.head.assign(w, 0);
    sh.reserved.assign(w, 0);
  }

  uint64_t published() const {
    uint64_t t = 0;
    for (uint64_t h : sh.head) t += h;
    return t;
  }
  uint64_t admitted() const {
    uint64_t t = 0;
    for (std::size_t i = 0; i < sh.head.size(); ++i) t += std::max(sh.head[i], sh.reserved[i]);
    return t;
  }

  // Writer i pushes one step per call to its own env i.
  //  0: v = admit_seq, s = samples   1..: count env by env   2: verdict   3: reserve   4: CAS   5: publish
  //  6: notify learner (fence, waiters check, bump)    wait path, every round: 10 promise to re-check (the CAS),
  //  11 seq = wseq, then 0..4 with waiting set, 12 sleep if wseq == seq.
  void step_writer(std::size_t i) {
    Actor& a = writers[i];
    switch (a.pc) {
      case 0: a.v = sh.admit_seq; a.s = sh.samples; a.count = 0; a.e = 0; a.pc = 1; break;
      case 1:
        a.count += std::max(sh.head[a.e], sh.reserved[a.e]);
        if (++a.e == sh.head.size()) a.pc = 2;
        break;
      case 2:
        if (detail::insert_verdict(limit, a.count, a.s, 1).allowed()) {
          a.pc = 3;
        } else {
          a.pc = a.waiting ? 12 : 10;
        }
        break;
      case 3: sh.reserved[i] = sh.head[i] + 1; a.pc = 4; break;
      case 4:
        if (sh.admit_seq == a.v) {
          ++sh.admit_seq;
          a.waiting = false;  // nothing to take back: the promise runs out by itself
          a.pc = 5;
        } else {
          sh.reserved[i] = sh.head[i];  // withdraw, count again
          a.pc = 0;
        }
        break;
      case 5: ++sh.head[i]; a.pc = 6; break;
      case 6:
        if (sh.lwaiters != 0) ++sh.lseq;  // notify_waiters: wakes the learner
        a.pc = 0;
        break;
      case 10: sh.wpromise = 1; a.waiting = true; a.pc = 11; break;
      case 11: a.sleep_seq = sh.wseq; a.pc = 0; break;  // then the admission attempt
      case 12:
        if (sh.wseq == a.sleep_seq) a.asleep = true;  // FUTEX_WAIT
        a.pc = 10;
        break;
    }
  }

  //  0: s = samples, count   1: verdict   2: samples += B   3: notify writers (while a promise is pending)
  //  wait path: 10 waiters++,
  //  11 seq = lseq, then 0..1 with waiting set, 12 sleep if lseq == seq.
  void step_learner() {
    Actor& a = learner;
    switch (a.pc) {
      case 0: a.count = 0; a.e = 0; a.pc = 1; break;
      case 1:
        a.count += sh.head[a.e];
        if (++a.e == sh.head.size()) a.pc = 2;
        break;
      case 2:
        if (detail::sample_verdict(limit, a.count, a.count, sh.samples, batch).allowed()) {
          if (a.waiting) {
            --sh.lwaiters;
            a.waiting = false;
          }
          a.pc = 3;
        } else {
          a.pc = a.waiting ? 12 : 10;
        }
        break;
      case 3: sh.samples += batch; a.pc = 4; break;
      case 4:
        if (sh.wpromise != 0) ++sh.wseq;  // count_samples' notify
        a.pc = 0;
        break;
      case 10: ++sh.lwaiters; a.waiting = true; a.pc = 11; break;
      case 11: a.sleep_seq = sh.lseq; a.pc = 0; break;
      case 12:
        if (sh.lseq == a.sleep_seq) a.asleep = true;
        a.pc = 11;
        break;
    }
  }

  void wake_sleepers() {
    for (Actor& a : writers) {
      if (a.asleep && sh.wseq != a.sleep_seq) a.asleep = false;
    }
    if (learner.asleep && sh.lseq != learner.sleep_seq) learner.asleep = false;
  }
};

}  // namespace model

TEST_CASE("model: no interleaving drawn loses a wake-up or takes the published error outside its bounds") {
  struct Config {
    std::size_t writers;
    RateLimit limit;
    uint64_t batch;
  };
  const Config configs[] = {
      {3, RateLimit::ratio(1.0, 2, 4.0), 4},   // B + spi = 5 <= 8
      {2, RateLimit::ratio(4.0, 1, 4.0), 4},   // 8 <= 8: the tightest that still progresses
      {3, RateLimit::ratio(0.5, 4, 2.0), 3},   // fractional ratio
  };
  const int runs = static_cast<int>(env_seconds("SHMREPLAY_MODEL_RUNS", 3000));
  uint64_t steps_checked = 0;
  uint64_t samples_seen = 0;
  for (const Config& c : configs) {
    for (int run = 0; run < runs; ++run) {
      model::Model m(c.writers, c.limit, c.batch);
      std::mt19937_64 rng(static_cast<uint64_t>(run) * 7919 + c.writers);
      for (int step = 0; step < 600; ++step) {
        std::vector<int> runnable;
        for (std::size_t i = 0; i < c.writers; ++i) {
          if (!m.writers[i].asleep) runnable.push_back(static_cast<int>(i));
        }
        if (!m.learner.asleep) runnable.push_back(-1);
        if (runnable.empty()) {
          FAIL("every actor sleeps: a lost wake-up (run ", run, ", step ", step, ", ", c.limit.to_string(), ")");
        }
        const int who = runnable[rng() % runnable.size()];
        if (who < 0) {
          m.step_learner();
        } else {
          m.step_writer(static_cast<std::size_t>(who));
        }
        m.wake_sleepers();
        const double error = detail::limiter_error(m.limit, m.published(), m.sh.samples);
        if (error > c.limit.max_diff) {
          FAIL("the published error ", error, " exceeds max_diff ", c.limit.max_diff, " (run ", run, ")");
        }
        if (m.sh.samples > 0 && error < c.limit.min_diff) {
          FAIL("the published error ", error, " is below min_diff ", c.limit.min_diff, " (run ", run, ")");
        }
        ++steps_checked;
      }
      samples_seen += m.sh.samples;
    }
  }
  MESSAGE(steps_checked, " protocol steps checked, ", samples_seen, " rows sampled in the model");
  CHECK(samples_seen > 0);
}

// ---------------------------------------------------------------------------------------------------------------
// Real processes

namespace {

// Shared between the test and its children: a stop flag and a failure count.
struct Shared {
  std::atomic<uint64_t> stop{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> rows{0};
  std::atomic<uint64_t> pushes{0};
};

Shared* map_shared() {
  void* p = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return new (p) Shared{};
}

}  // namespace

TEST_CASE("three writer processes and a learner at different speeds keep the ratio within the error buffer") {
  struct Case {
    const char* what;
    bool writers_wait;
    int writer_sleep_us;
    int learner_sleep_us;
  };
  const Case cases[] = {
      {"waiting writers, a slow learner", true, 0, 2000},
      {"waiting writers, a fast learner", true, 500, 0},
      {"waiting writers, both fast", true, 0, 0},
      {"non-waiting writers, a fast learner", false, 500, 0},
  };
  const double seconds = env_seconds("SHMREPLAY_RATE_SECONDS", 1.0);
  const RateLimit limit = RateLimit::ratio(2.0, 64, 96.0);  // bounds 32 .. 224
  for (const Case& c : cases) {
    CAPTURE(std::string(c.what));
    const std::string name = unique_name("rl-procs");
    SegmentGuard guard(name);
    Buffer b = Buffer::create(name, 6, 4096, kSchema, {.rate_limit = limit});
    Shared* sh = map_shared();
    std::vector<pid_t> children;
    for (uint64_t w = 0; w < 3; ++w) {
      children.push_back(spawn([&, w] {
        try {
          Buffer mine = Buffer::open(name);
          Writer writer(mine, {2 * w, 2 * w + 1},
                        {.wait_for_rate_limit = c.writers_wait, .rate_limit_timeout_ms = 60'000});
          while (sh->stop.load() == 0) {
            push_steps(writer, {2 * w, 2 * w + 1});
            sh->pushes += 2;
            if (c.writer_sleep_us) ::usleep(static_cast<useconds_t>(c.writer_sleep_us));
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "writer: %s\n", e.what());
          sh->failures += 1;
        }
      }));
    }
    children.push_back(spawn([&] {
      try {
        Buffer mine = Buffer::open(name);
        Sampler learner(mine);
        Rng rng(5);
        SampleBatch batch;
        SampleOptions o;
        o.rate_limit_timeout_ms = 60'000;
        while (sh->stop.load() == 0) {
          learner.sample_transitions(View::replay, 32, rng, batch, o);
          sh->rows += 32;
          if (c.learner_sleep_us) ::usleep(static_cast<useconds_t>(c.learner_sleep_us));
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "learner: %s\n", e.what());
        sh->failures += 1;
      }
    }));
    uint64_t readings = 0, below = 0, above = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      const ErrorReading r = read_error(b);
      const double error = static_cast<double>(r.inserts) * limit.samples_per_insert - static_cast<double>(r.samples);
      if (r.samples > 0 && error < limit.min_diff) ++below;
      if (c.writers_wait && error > limit.max_diff) ++above;
      ++readings;
      ::usleep(200);
    }
    for (const pid_t p : children) kill_and_reap(p);
    const RateLimitState s = b.rate_limit_state();
    MESSAGE(std::string(c.what), ": ", readings, " readings, ", s.inserts, " inserts, ", s.samples, " samples (",
            static_cast<double>(s.samples) / static_cast<double>(std::max<uint64_t>(s.inserts, 1)),
            " per insert), held back: ", s.learner_limited, " sample calls, ", s.writers_limited, " pushes");
    CHECK(sh->failures.load() == 0);
    CHECK(readings > 100);
    CHECK(below == 0);
    CHECK(above == 0);
    CHECK(s.samples > 0);
    CHECK(s.writer_timeouts == 0);
    // Only where one side sleeps is it certain which side gets held back.
    if (c.writer_sleep_us > 0) CHECK(s.learner_limited > 0);
    if (c.writers_wait && c.learner_sleep_us > 0) CHECK(s.writers_limited > 0);
    ::munmap(sh, sizeof(Shared));
  }
}

TEST_CASE("a learner SIGKILLed while writers wait: they give up at their timeout naming it, and go on without "
          "waiting") {
  const std::string name = unique_name("rl-killlearner");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 1024, kSchema, {.rate_limit = RateLimit::ratio(1.0, 1, 8.0)});
  Shared* sh = map_shared();
  const pid_t learner = spawn([&] {
    Buffer mine = Buffer::open(name);
    Sampler s(mine);
    sh->rows = 1;  // attached
    for (;;) ::pause();
  });
  while (sh->rows.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const pid_t writer = spawn([&] {
    Buffer mine = Buffer::open(name);
    Writer w(mine, {0, 1}, {.wait_for_rate_limit = true, .rate_limit_timeout_ms = 1500});
    std::string m;
    int code = 0;
    for (int i = 0; i < 100 && code == 0; ++i) code = error_of([&] { push_steps(w, {0, 1}); }, &m);
    const bool named = code == static_cast<int>(Errc::rate_limited) &&
                       m.find(fmt::format("the learner (pid {}) is dead", learner)) != std::string::npos;
    if (!named) {
      std::fprintf(stderr, "writer: code %d, message: %s\n", code, m.c_str());
      sh->failures += 1;
    }
    w.set_options({.wait_for_rate_limit = false});
    for (int i = 0; i < 10; ++i) push_steps(w, {0, 1});
    sh->pushes = w.head(0);
  });
  // Kill the learner once the writer waits.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (b.rate_limit_state().writer_waiters == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(b.rate_limit_state().writer_waiters == 1);
  CHECK(kill_and_reap(learner));
  int status = 0;
  ::waitpid(writer, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(sh->failures.load() == 0);
  CHECK(sh->pushes.load() >= 14);  // at least the 4 admitted (max_diff 9), then 10 without waiting
  CHECK(b.rate_limit_state().writer_timeouts == 1);
  CHECK(b.rate_limit_state().writer_waiters == 0);
  ::munmap(sh, sizeof(Shared));
}

TEST_CASE("writers SIGKILLed while the learner waits: it times out cleanly, and a new writer takes their envs") {
  const std::string name = unique_name("rl-killwriters");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 1024, kSchema, {.rate_limit = RateLimit::min_size(100)});
  Shared* sh = map_shared();
  const pid_t writer = spawn([&] {
    Buffer mine = Buffer::open(name);
    Writer w(mine, {0, 1});
    for (int i = 0; i < 5; ++i) push_steps(w, {0, 1});
    sh->pushes = 10;
    for (;;) ::pause();
  });
  while (sh->pushes.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Sampler learner(b);
  std::thread killer([&] {
    while (b.rate_limit_state().learner_waiting_rows == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    kill_and_reap(writer);
  });
  Rng rng(6);
  SampleBatch batch;
  SampleOptions o;
  o.rate_limit_timeout_ms = 800;
  std::string m;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(error_of([&] { learner.sample_transitions(View::replay, 8, rng, batch, o); }, &m) ==
        static_cast<int>(Errc::rate_limited));
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(800));
  killer.join();
  CHECK(m.find("held the call back for 800 ms") != std::string::npos);
  CHECK(m.find("10 steps are stored, fewer than min_size_to_sample 100") != std::string::npos);
  const RateLimitState s = b.rate_limit_state();
  CHECK(s.learner_waiting_rows == 0);
  CHECK(s.learner_limited == 1);
  // A new writer takes the dead one's envs over and fills the buffer: the learner samples.
  Writer w(b, {0, 1});
  CHECK(w.takeovers() == 2);
  for (int i = 0; i < 45; ++i) push_steps(w, {0, 1});
  learner.sample_transitions(View::replay, 8, rng, batch, o);
  ::munmap(sh, sizeof(Shared));
}

TEST_CASE("a waiting writer killed after its admission leaves a reservation that a takeover gives back") {
  const std::string name = unique_name("rl-takeover");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 1024, kSchema, {.rate_limit = RateLimit::ratio(1.0, 1, 4.0)});  // max_diff 5
  // What a writer killed between its admission and its head store leaves: reservations above the heads.
  b.segment().env_control(0).limiter_reserved.store(3);
  b.segment().env_control(1).limiter_reserved.store(2);
  CHECK(detail::count_admitted(b.segment()) == 5);
  Writer other(b, {1}, {.wait_for_rate_limit = true, .rate_limit_timeout_ms = 50});
  CHECK(b.segment().env_control(1).limiter_reserved.load() == 0);  // taking the lease withdrew env 1's
  CHECK(detail::count_admitted(b.segment()) == 3);
  push_steps(other, {1});
  push_steps(other, {1});
  CHECK(error_of([&] { push_steps(other, {1}); }) == static_cast<int>(Errc::rate_limited));  // 3 + 2 + 1 > 5
  Writer taker(b, {0});
  CHECK(detail::count_admitted(b.segment()) == 2);
  push_steps(other, {1});
}
