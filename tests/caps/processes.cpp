// Sample caps across processes: three learner ranks sample while a writer process pushes, learners are SIGKILLed
// mid-call and replaced, and no start is ever delivered more than max_times_sampled times in total (counted from
// what every learner returned, and against the count words left in the segment).
//
// SHMREPLAY_SOAK_SECONDS=N runs it for N seconds (default 2).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
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
#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

constexpr uint64_t kEnvs = 2;
constexpr uint64_t kCapacity = 64;
constexpr uint64_t kMaxTimes = 2;
constexpr uint64_t kRanks = 3;
constexpr uint64_t kMaxSteps = uint64_t{1} << 15;  // steps per env the writer pushes, at most

// What the children report, in a shared anonymous mapping: per (env, step) the rows returned that started there.
struct Tally {
  std::atomic<uint32_t> delivered[kEnvs][kMaxSteps];
  std::atomic<uint64_t> rows;
  std::atomic<uint64_t> calls;
  std::atomic<uint64_t> bad_rows;  // a row whose payload is not the step its batch entry names
  std::atomic<uint64_t> failures;  // a child that threw what it should not have
};

Tally* map_tally() { return map_shared_tally<Tally>(); }

[[noreturn]] void child(Tally* t, const char* who, const std::function<void()>& body) { run_child(t, who, body); }

// Pushes both envs, a push or a committed reservation at a time, until kMaxSteps each; then idles until killed.
[[noreturn]] void writer_main(const std::string& name, Tally* t) {
  child(t, "writer", [&] {
    Buffer b = Buffer::open(name);
    Writer w(b, {0, 1});
    for (uint64_t n = 0; w.head(0) + 1 < kMaxSteps && w.head(1) + 1 < kMaxSteps; ++n) {
      const uint64_t env = n % kEnvs;
      if (n % 5 == 0) {
        StepSlot slot = w.reserve(env);
        const uint64_t step = slot.step();
        std::memcpy(slot.field(0).data(), &env, 8);
        std::memcpy(slot.field(1).data(), &step, 8);
        slot.commit();
      } else {
        push_tagged(w, env);
      }
      ::usleep(40);
    }
    for (;;) ::pause();
  });
}

// Samples with rank `rank` (taking a dead learner's slot over) until killed, tallying every row it returns.
[[noreturn]] void learner_main(const std::string& name, uint64_t rank, uint64_t seed, Tally* t) {
  child(t, "learner", [&] {
    Buffer b = Buffer::open(name);
    Sampler s(b, SamplerOptions{.rank = rank});
    Rng rng(seed);
    SampleBatch batch;
    for (;;) {
      const std::size_t rows = 1 + static_cast<std::size_t>(rng() % 16);
      const std::size_t length = 1 + static_cast<std::size_t>(rng() % 3);
      try {
        s.sample(View::replay, rows, length, 0.0, rng, batch);
      } catch (const Error& e) {
        if (e.errc() != Errc::empty_view && e.errc() != Errc::contended) throw;
        ::usleep(100);
        continue;
      }
      for (std::size_t r = 0; r < rows; ++r) {
        uint64_t env = 0, step = 0;
        std::memcpy(&env, batch.step(0, r, 0), 8);
        std::memcpy(&step, batch.step(1, r, 0), 8);
        if (env != batch.env_ids()[r] || step != batch.start_steps()[r] || env >= kEnvs || step >= kMaxSteps) {
          t->bad_rows.fetch_add(1);
          continue;
        }
        t->delivered[env][step].fetch_add(1);
      }
      t->rows.fetch_add(rows);
      t->calls.fetch_add(1);
    }
  });
}

double soak_seconds() {
  const char* v = std::getenv("SHMREPLAY_SOAK_SECONDS");
  return v != nullptr ? std::max(0.5, std::atof(v)) : 2.0;
}

}  // namespace

TEST_CASE("three learner processes, SIGKILLed mid-call and replaced while a writer pushes, never deliver a start "
          "more than max_times_sampled times in total") {
  CapsRig rig("caps-procs", kEnvs, kCapacity, kMaxTimes, kRanks);
  Tally* t = map_tally();
  struct Unmap {
    Tally* t;
    ~Unmap() { ::munmap(t, sizeof(Tally)); }
  } unmap{t};
  const std::string name = rig.guard.name();
  const pid_t writer = spawn([&] { writer_main(name, t); });
  std::vector<pid_t> learners;
  uint64_t seed = 100;
  for (uint64_t r = 0; r < kRanks; ++r) learners.push_back(spawn([&] { learner_main(name, r, ++seed, t); }));
  Rng rng(17);
  uint64_t kills = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(soak_seconds());
  while (std::chrono::steady_clock::now() < end) {
    ::usleep(static_cast<useconds_t>(20000 + rng() % 60000));
    const uint64_t r = rng() % kRanks;
    CHECK(kill_and_reap(learners[r]));  // false: it had exited by itself (a failure it reported)
    ++kills;
    ++seed;
    learners[r] = spawn([&] { learner_main(name, r, seed, t); });
  }
  for (const pid_t p : learners) CHECK(kill_and_reap(p));
  CHECK(kill_and_reap(writer));

  CHECK(t->failures.load() == 0);
  CHECK(t->bad_rows.load() == 0);
  CHECK(kills >= 10);
  CHECK(t->rows.load() > 1000);
  uint64_t over = 0, at_cap = 0;
  for (uint64_t e = 0; e < kEnvs; ++e) {
    for (uint64_t s = 0; s < kMaxSteps; ++s) {
      const uint32_t n = t->delivered[e][s].load();
      over += n > kMaxTimes ? 1 : 0;
      at_cap += n == kMaxTimes ? 1 : 0;
    }
  }
  CHECK(over == 0);
  CHECK(at_cap > 100);  // the cap was reached, many times over
  // The words of the stored steps count at least what was returned from them (a kill after a claim loses a row).
  Segment& seg = segment_of(rig.buf);
  for (uint64_t e = 0; e < kEnvs; ++e) {
    const uint64_t head = seg.env_control(e).head.load();
    for (uint64_t s = head > kCapacity ? head - kCapacity : 0; s < head; ++s) {
      const uint64_t w = seg.cap_words(e)[s % kCapacity].load();
      REQUIRE(layout::cap_word_for(w, s));
      CHECK(layout::cap_word_count(w) <= kMaxTimes);
      CHECK(layout::cap_word_count(w) >= t->delivered[e][s].load());
    }
  }
}
