// Write-backs across real processes (issue 48, "Show"): write-back processes racing a writer that laps its ring and a
// learner that samples the same steps, one write-back process SIGKILLed again and again wherever it is (inside
// write_back too). Each written target encodes the (env, step) it was meant for and the call's tag, so the learner
// can tell: zero write-backs applied to another step, zero torn rows (a row's target is whole: as pushed or one
// write-back's), and the counters' applied and refused rows equal what the calls returned.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "caps/caps_helpers.hpp"
#include "detail/protocol/seqlock.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/internal/segment.hpp"
#include "write_back_helpers.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

constexpr uint64_t kEnvs = 4;
constexpr uint64_t kCap = 128;
constexpr uint64_t kTags = 1u << 12;  // tags the check recognises: (worker << 10) | call % 1024, worker < 4

// The children's tallies, in a shared mapping.
struct Tally {
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> applied{0};     // rows the finished calls applied (the worker that is never killed)
  std::atomic<uint64_t> refused{0};     // ... and refused
  std::atomic<uint64_t> bad_refusals{0};  // refused rows whose step was still stored after the call
  std::atomic<uint64_t> calls{0};       // finished write_back calls, every worker
};

// A write-back worker of learner slot `rank`: samples handles, then writes every row back with its tag.
void write_back_worker(Buffer& b, uint64_t rank, uint64_t worker, Tally* t, bool tally) {
  Sampler s(b, {.rank = rank});
  Rng rng(worker * 7 + 1);
  SampleBatch batch;
  std::vector<uint8_t> refused;
  for (uint64_t call = 0;; ++call) {
    try {
      s.sample_transitions(View::replay, 96, rng, batch);
    } catch (const Error& e) {
      if (e.errc() == Errc::empty_view) continue;  // a repair took a whole env out for a moment
      throw;
    }
    const std::vector<Target> rows = targets_for(batch.env_ids(), batch.start_steps(), (worker << 10) | (call % 1024));
    refused.assign(batch.rows(), 0);
    const WriteBackResult r = s.write_back(batch.env_ids(), batch.start_steps(), target_fields(rows), refused);
    for (std::size_t i = 0; i < batch.rows(); ++i) {
      if (refused[i] == 0) continue;
      // A refused step is gone for good: its slot was claimed again, or it left the view.
      const layout::EnvControl& c = segment_of(b).env_control(batch.env_ids()[i]);
      const uint64_t claimed = c.claimed.load() & layout::kClaimMask;
      if (batch.start_steps()[i] + kCap >= claimed && batch.start_steps()[i] >= c.stacks_intact_from.load()) {
        t->bad_refusals.fetch_add(1);
      }
    }
    if (tally) {
      t->applied.fetch_add(r.applied);
      t->refused.fetch_add(r.refused);
    }
    t->calls.fetch_add(1);
  }
}

}  // namespace

TEST_CASE("write-backs racing a lapping writer, a sampling learner and SIGKILLs never land on another step, are "
          "never torn, and are counted as the calls returned") {
  SegmentGuard guard(unique_name("wb-race"));
  Buffer b = Buffer::create(guard.name(), kEnvs, kCap, kWriteBackSchema, {.max_learners = 4});
  {
    Writer w = Writer::range(b, 0, kEnvs);
    for (uint64_t s = 0; s < kCap; ++s) {
      for (uint64_t e = 0; e < kEnvs; ++e) push_stamped(w, e);
    }
  }
  Tally* t = map_shared_tally<Tally>();
  const pid_t writer = spawn([&] {
    run_child(t, "writer", [&] {
      Writer w = Writer::range(b, 0, kEnvs);
      for (uint64_t n = 0;; ++n) {
        push_stamped(w, n % kEnvs);
        if (n % 64 == 0) ::usleep(200);  // laps each ring every few ms
      }
    });
  });
  const pid_t steady = spawn([&] { run_child(t, "worker", [&] { write_back_worker(b, 1, 1, t, true); }); });
  uint64_t kills = 0;
  pid_t victim = spawn([&] { run_child(t, "victim", [&] { write_back_worker(b, 2, 2, t, false); }); });
  Sampler learner(b, {.rank = 0});
  Rng rng(99);
  SampleBatch batch;
  uint64_t rows = 0, written = 0, bad = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (uint64_t round = 0; std::chrono::steady_clock::now() < end; ++round) {
    try {
      learner.sample(View::replay, 64, 2, 0.0, rng, batch);
    } catch (const Error& e) {
      if (e.errc() != Errc::empty_view) throw;  // a repair took a whole env out for a moment
      continue;
    }
    for (std::size_t r = 0; r < batch.rows(); ++r) {
      for (std::size_t k = 0; k < batch.sequence_length() && batch.valid(r, k); ++k) {
        const uint64_t e = batch.env_ids()[r], p = batch.start_steps()[r] + k;
        const std::optional<uint64_t> tag = tag_of(target_at(batch, r, k), e, p, kTags);
        bad += tag ? 0u : 1u;
        written += tag.value_or(0) != 0 ? 1u : 0u;
        ++rows;
      }
    }
    if (round % 40 == 39) {  // the victim dies wherever it is, and a new one takes its slot over
      ::usleep(static_cast<useconds_t>(round % 7) * 300);
      REQUIRE(kill_and_reap(victim));
      ++kills;
      victim = spawn([&] { run_child(t, "victim", [&] { write_back_worker(b, 2, 2, t, false); }); });
    }
  }
  REQUIRE(kill_and_reap(victim));
  REQUIRE(kill_and_reap(steady));
  REQUIRE(kill_and_reap(writer));
  CHECK(t->failures.load() == 0);
  CHECK(bad == 0);
  CHECK(t->bad_refusals.load() == 0);
  MESSAGE(rows << " steps checked, " << written << " of them written back; " << t->calls.load() << " calls, "
                << t->refused.load() << " rows refused by the steady worker; " << kills << " kills");
  CHECK(written > 0);
  CHECK(t->refused.load() > 0);  // the writer lapped handles the workers held
  // Slot 1's counters are what its calls returned (it was killed only after its last call's tally: at most one
  // call's rows apart, counted after the tally).
  const SegmentInfo info = Inspector(guard.name()).snapshot();
  const auto counter = [&](const char* name) {
    return info.learners[1].counters[*counter_index(CounterScope::learner, name)];
  };
  CHECK(counter("write_backs_applied") >= t->applied.load());
  CHECK(counter("write_backs_applied") <= t->applied.load() + 96);
  CHECK(counter("write_backs_refused") >= t->refused.load());
  CHECK(counter("write_backs_refused") <= t->refused.load() + 96);
}
