// The consuming queue across processes: a writer process pushes two envs through a small ring (so it blocks on the
// queue most of the time), three learner ranks consume in insertion order and at random, learners are SIGKILLed
// during their calls and replaced, and the writer once. Then a fresh learner drains the queue. No step is delivered
// twice; every step the learners' tallies lack was in a call that a killed learner had committed and not reported
// (the test's accounting: the slots' committed calls against the calls each rank reported).
//
// SHMREPLAY_SOAK_SECONDS=N bounds the kills' phase to N seconds (default 2).
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "caps/caps_helpers.hpp"
#include "shmreplay/internal/queue_layout.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

constexpr uint64_t kEnvs = 2;
constexpr uint64_t kCapacity = 16;
constexpr uint64_t kRanks = 3;
constexpr uint64_t kRows = 4;                  // rows per consuming call, at most (the accounting counts calls)
constexpr uint64_t kSteps = 2000;              // steps per env the writers push (a 16-slot ring: ~250 laps)
constexpr uint64_t kTallySteps = kSteps + 16;  // room past kSteps (a takeover may rewrite the last step)

struct Tally {
  std::atomic<uint32_t> delivered[kEnvs][kTallySteps];
  std::atomic<uint64_t> reported[kRanks + 1];  // calls each rank tallied
  std::atomic<uint64_t> bad_rows;
  std::atomic<uint64_t> failures;
};

Tally* map_tally() { return map_shared_tally<Tally>(); }

[[noreturn]] void child(Tally* t, const char* who, const std::function<void()>& body) { run_child(t, who, body); }

// Pushes both envs until each has kSteps (taking a killed writer's leases over), waiting on the queue; then idles.
[[noreturn]] void writer_main(const std::string& name, Tally* t) {
  child(t, "writer", [&] {
    Buffer b = Buffer::open(name);
    Writer w(b, {0, 1}, WriterOptions{.queue_timeout_ms = kWaitForever});
    for (uint64_t n = 0; w.head(0) < kSteps || w.head(1) < kSteps; ++n) {
      const uint64_t env = w.head(n % kEnvs) < kSteps ? n % kEnvs : (n + 1) % kEnvs;
      push_tagged(w, env);
    }
    for (;;) ::pause();
  });
}

// Consumes kRows rows a call with rank `rank` until killed (or, with `drain`, until the queue is empty), tallying.
void consume_loop(const std::string& name, uint64_t rank, uint64_t seed, Tally* t, bool drain) {
  Buffer b = Buffer::open(name);
  Sampler s(b, SamplerOptions{.rank = rank});
  Rng rng(seed);
  SampleBatch batch;
  std::size_t rows = kRows;  // the drain's last calls ask for what is left (no writer will bring more)
  for (;;) {
    const Consume order = drain || rng() % 2 == 0 ? Consume::fifo : Consume::random;
    const std::size_t length = 1 + static_cast<std::size_t>(rng() % 3);
    // Full batches: with fewer undelivered steps than kRows while the writer waits for one of them (the oldest of
    // its ring), the call returns a partial batch (docs/design/consuming_queue.md) instead of both waiting.
    try {
      s.sample(View::replay, rows, length, 0.0, rng, batch, {.consume = order, .consume_timeout_ms = drain ? 0u : 50u});
    } catch (const Error& e) {
      if (e.errc() != Errc::empty_view) throw;
      if (drain && rows == 1) return;
      if (drain) --rows;
      continue;
    }
    if (batch.rows() == 0 || batch.rows() > kRows) t->bad_rows.fetch_add(1);
    for (std::size_t r = 0; r < batch.rows(); ++r) {
      uint64_t env = 0, step = 0;
      std::memcpy(&env, batch.step(0, r, 0), 8);
      std::memcpy(&step, batch.step(1, r, 0), 8);
      if (env != batch.env_ids()[r] || step != batch.start_steps()[r] || env >= kEnvs || step >= kTallySteps) {
        t->bad_rows.fetch_add(1);
        continue;
      }
      t->delivered[env][step].fetch_add(1);
    }
    t->reported[rank].fetch_add(1);
  }
}

double soak_seconds() {
  const char* v = std::getenv("SHMREPLAY_SOAK_SECONDS");
  return v != nullptr ? std::max(0.5, std::atof(v)) : 2.0;
}

}  // namespace

TEST_CASE("three consuming learner processes, SIGKILLed mid-call and replaced while a writer (killed once) pushes, "
          "deliver no step twice and lose none the test's accounting cannot place") {
  SegmentGuard guard(unique_name("queue-procs"));
  Buffer buf = Buffer::create(guard.name(), kEnvs, kCapacity, kCapsSchema,
                              {.max_learners = kRanks + 1, .consuming_queue = true});
  Tally* t = map_tally();
  struct Unmap {
    Tally* t;
    ~Unmap() { ::munmap(t, sizeof(Tally)); }
  } unmap{t};
  const std::string name = guard.name();
  pid_t writer = spawn([&] { writer_main(name, t); });
  std::vector<pid_t> learners;
  uint64_t seed = 100;
  auto learner = [&](uint64_t r) { return spawn([&] { child(t, "learner", [&] { consume_loop(name, r, seed, t, false); }); }); };
  for (uint64_t r = 0; r < kRanks; ++r, ++seed) learners.push_back(learner(r));
  Segment& seg = segment_of(buf);
  auto written = [&] { return seg.env_control(0).head.load() >= kSteps && seg.env_control(1).head.load() >= kSteps; };
  Rng rng(17);
  uint64_t kills = 0;
  bool writer_killed = false;
  const auto start = std::chrono::steady_clock::now();
  const auto soak = std::chrono::duration<double>(soak_seconds());
  while (!written() || std::chrono::steady_clock::now() - start < soak) {
    REQUIRE(std::chrono::steady_clock::now() - start < soak + std::chrono::seconds(60));
    ::usleep(static_cast<useconds_t>(5000 + rng() % 20000));
    if (!writer_killed && std::chrono::steady_clock::now() - start > soak / 3) {
      CHECK(kill_and_reap(writer));
      writer = spawn([&] { writer_main(name, t); });
      writer_killed = true;
    }
    if (std::chrono::steady_clock::now() - start >= soak) continue;  // past the kills: let the writer finish
    const uint64_t r = rng() % kRanks;
    CHECK(kill_and_reap(learners[r]));  // false: it had exited by itself (a failure it reported)
    ++kills;
    ++seed;
    learners[r] = learner(r);
  }
  for (const pid_t p : learners) CHECK(kill_and_reap(p));
  CHECK(kill_and_reap(writer));
  // The accounting: calls each slot committed (its call word) that its ranks never reported.
  uint64_t unreported_calls = 0;
  for (uint64_t r = 0; r < kRanks; ++r) {
    const uint64_t committed = seg.queue_learner(r).call.load() >> 1;
    REQUIRE(committed >= t->reported[r].load());
    unreported_calls += committed - t->reported[r].load();
  }
  consume_loop(name, kRanks, 1, t, /*drain=*/true);  // repairs the dead slots' claims as it meets them

  CHECK(t->failures.load() == 0);
  CHECK(t->bad_rows.load() == 0);
  CHECK(kills >= 10);
  uint64_t twice = 0, missing = 0;
  for (uint64_t e = 0; e < kEnvs; ++e) {
    const uint64_t head = seg.env_control(e).head.load();
    REQUIRE(head >= kSteps);
    for (uint64_t s = 0; s < kTallySteps; ++s) {
      const uint32_t n = t->delivered[e][s].load();
      twice += n > 1 ? 1 : 0;
      missing += s < head && n == 0 ? 1 : 0;
    }
    for (uint64_t s = head - kCapacity; s < head; ++s) {  // the ring after the drain: every step delivered
      CHECK(seg.cap_words(e)[s % kCapacity].load() == layout::cap_word(s, 1));
    }
  }
  CHECK(twice == 0);
  CHECK(missing <= unreported_calls * kRows);  // each one in a call committed by a learner killed before its report
  CHECK(unreported_calls <= kills);
  MESSAGE("kills " << kills << ", steps missing from the tallies " << missing << ", unreported calls "
                   << unreported_calls);
}
