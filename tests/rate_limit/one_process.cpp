// tests/rate_limit/one_process.cpp: the limiter in one process: min size, a ratio holding the learner back, a waiting
// writer held back and giving up, an abandoned reservation, and wake-ups between threads.
// Part of test_rate_limit (tests/CMakeLists.txt); its helpers are in rate_limit_helpers.hpp.
#include "rate_limit_helpers.hpp"

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
  CHECK(segment_of(b).env_control(0).limiter_reserved.load() == 3);  // the admission attempt was withdrawn
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
  CHECK(segment_of(b).env_control(0).limiter_reserved.load() == 2);
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
