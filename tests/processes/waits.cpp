// tests/processes/waits.cpp: blocking waits across processes: the learner woken by a writer in another process, the
// segment's futex word, and a writer that stops cannot hold the learner past its timeout.
// Part of test_processes (tests/CMakeLists.txt); its helpers are in processes_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "processes_helpers.hpp"

TEST_CASE("a learner blocked in wait() is woken by a writer in another process") {
  SegmentGuard guard(unique_name("wait"));
  Buffer buf = Buffer::create(guard.name(), 2, 16, kPayloadSchema);
  Sampler learner(buf);
  CHECK(learner.wait(View::replay, 0, 0));  // already true
  std::string msg;
  CHECK(error_of([&] { (void)learner.wait(View::replay, 33, 10); }, &msg) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(msg.find("at most 32") != std::string::npos);

  const uint64_t wakes_before = segment_of(buf).global_control().wake_seq.load();
  // The writer starts after the learner is asleep, and pushes slowly.
  const pid_t writer = spawn([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    writer_main(guard.name(), {0, 1}, 21, true);
  });
  CHECK(learner.wait(View::online, 20, 30'000));
  CHECK(learner.size(View::online) >= 20);
  CHECK(segment_of(buf).global_control().wake_seq.load() > wakes_before);  // woken through the futex, not by polling
  CHECK(segment_of(buf).global_control().waiters.load() == 0);
  CHECK(kill_and_reap(writer));
}

TEST_CASE("the segment's futex word wakes a waiter in another process, and a wait that nobody wakes times out") {
  SegmentGuard guard(unique_name("futex"));
  Buffer buf = Buffer::create(guard.name(), 1, 4, kPayloadSchema);
  std::atomic<uint64_t>& word = segment_of(buf).global_control().wake_seq;
  const auto seq = static_cast<uint32_t>(word.load());

  // Nobody wakes it: it sleeps the whole timeout (the kernel never shortens one), and no longer than a few
  // seconds more on a busy machine.
  auto t0 = Clock::now();
  detail::futex_wait(word, seq, 200'000'000ull);
  int64_t waited = ms_since(t0);
  CHECK(waited >= 199);
  CHECK(waited < 5'000);
  // A word that already differs from the expected value returns at once.
  t0 = Clock::now();
  detail::futex_wait(word, seq + 1, 10'000'000'000ull);
  CHECK(ms_since(t0) < 2'000);

  // Another process, with its own mapping of the segment (another address), wakes it without changing the word,
  // so the wait can only end by that wake (or its 10 s timeout). The child sleeps 100 ms first, then keeps
  // waking every 20 ms until the parent reports back, in case the parent was not asleep yet.
  int done[2];
  REQUIRE(::pipe(done) == 0);
  t0 = Clock::now();  // before the child exists: its first wake is at least 100 ms later
  const pid_t child = spawn([&] {
    child_body([&] {
      ::close(done[1]);
      Buffer b = Buffer::open(guard.name());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (int i = 0; i < 500; ++i) {
        detail::futex_wake_all(segment_of(b).global_control().wake_seq);
        pollfd p{done[0], POLLIN, 0};
        if (::poll(&p, 1, 20) != 0) break;
      }
    });
  });
  ::close(done[0]);
  detail::futex_wait(word, seq, 10'000'000'000ull);
  waited = ms_since(t0);
  ::close(done[1]);  // the child's poll sees the hang-up and stops waking
  CHECK(reap(child) == 0);
  MESSAGE(fmt::format("woken by another process after {} ms (the child woke it from 100 ms on)", waited));
  CHECK(waited >= 100);    // it slept until the child's wake, not less
  CHECK(waited < 2'000);   // and was woken, far sooner than the 10 s timeout
  CHECK(static_cast<uint32_t>(word.load()) == seq);
}

TEST_CASE("a push in another process wakes a futex waiter on the wake word directly, without the 50 ms re-check") {
  SegmentGuard guard(unique_name("futexpush"));
  Buffer buf = Buffer::create(guard.name(), 1, 4, kPayloadSchema);
  layout::GlobalControl& g = segment_of(buf).global_control();
  // Stand in for a learner in wait(): announce a waiter, then sleep on the word for up to 10 s.
  g.waiters.fetch_add(1);
  const auto seq = static_cast<uint32_t>(g.wake_seq.load());
  const auto t0 = Clock::now();
  const pid_t child = spawn([&] {
    child_body([&] {
      Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
      Writer w(b, {0});
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      PayloadPusher pusher;
      pusher.push(w, {0});
    });
  });
  detail::futex_wait(g.wake_seq, seq, 10'000'000'000ull);
  const int64_t waited = ms_since(t0);
  g.waiters.fetch_sub(1);
  CHECK(reap(child) == 0);
  MESSAGE(fmt::format("woken by a push in another process after {} ms", waited));
  CHECK(waited >= 100);
  CHECK(waited < 2'000);
  CHECK(static_cast<uint32_t>(g.wake_seq.load()) != seq);  // the push bumped the word
  CHECK(segment_of(buf).env_control(0).head.load() == 1);
}

TEST_CASE("a writer that stops cannot hold the learner past its timeout") {
  SegmentGuard guard(unique_name("waitstop"));
  Buffer buf = Buffer::create(guard.name(), 2, 16, kPayloadSchema);
  const pid_t writer = spawn([&] { writer_main(guard.name(), {0, 1}, 31, true); });
  Sampler learner(buf);
  REQUIRE(learner.wait(View::replay, 4, 30'000));
  CHECK(kill_and_reap(writer));  // it stops for good
  learner.reset_online_queue();
  const auto t0 = Clock::now();
  CHECK_FALSE(learner.wait(View::online, 1, 200));
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  CHECK(waited >= 200);
  CHECK(segment_of(buf).global_control().waiters.load() == 0);
}
