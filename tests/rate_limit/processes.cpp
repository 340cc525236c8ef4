// tests/rate_limit/processes.cpp: real processes: three writers and a learner at different speeds keep the ratio, a
// learner SIGKILLed while writers wait, writers SIGKILLed while the learner waits, and a dead writer's admission
// given back at takeover.
// Part of test_rate_limit (tests/CMakeLists.txt); its helpers are in rate_limit_helpers.hpp.
#include "rate_limit_helpers.hpp"

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

// A case of the speeds test: whether the writers wait for the limiter, and how long each side sleeps per call.
struct SpeedCase {
  const char* what;
  bool writers_wait;
  int writer_sleep_us;
  int learner_sleep_us;
};

// Three writer processes (envs 0-1, 2-3, 4-5) and a learner on `name` at the speeds of `c`, until sh->stop.
std::vector<pid_t> spawn_at_speeds(const std::string& name, const SpeedCase& c, Shared* sh) {
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
  return children;
}

}  // namespace

TEST_CASE("three writer processes and a learner at different speeds keep the ratio within the error buffer") {
  const SpeedCase cases[] = {
      {"waiting writers, a slow learner", true, 0, 2000},
      {"waiting writers, a fast learner", true, 500, 0},
      {"waiting writers, both fast", true, 0, 0},
      {"non-waiting writers, a fast learner", false, 500, 0},
  };
  const double seconds = env_seconds("SHMREPLAY_RATE_SECONDS", 1.0);
  const RateLimit limit = RateLimit::ratio(2.0, 64, 96.0);  // bounds 32 .. 224
  for (const SpeedCase& c : cases) {
    CAPTURE(std::string(c.what));
    const std::string name = unique_name("rl-procs");
    SegmentGuard guard(name);
    Buffer b = Buffer::create(name, 6, 4096, kSchema, {.rate_limit = limit});
    Shared* sh = map_shared();
    const std::vector<pid_t> children = spawn_at_speeds(name, c, sh);
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
  segment_of(b).env_control(0).limiter_reserved.store(3);
  segment_of(b).env_control(1).limiter_reserved.store(2);
  CHECK(detail::count_admitted(segment_of(b)) == 5);
  Writer other(b, {1}, {.wait_for_rate_limit = true, .rate_limit_timeout_ms = 50});
  CHECK(segment_of(b).env_control(1).limiter_reserved.load() == 0);  // taking the lease withdrew env 1's
  CHECK(detail::count_admitted(segment_of(b)) == 3);
  push_steps(other, {1});
  push_steps(other, {1});
  CHECK(error_of([&] { push_steps(other, {1}); }) == static_cast<int>(Errc::rate_limited));  // 3 + 2 + 1 > 5
  Writer taker(b, {0});
  CHECK(detail::count_admitted(segment_of(b)) == 2);
  push_steps(other, {1});
}
