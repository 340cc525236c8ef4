// tests/processes/torture.cpp: the tortures: writer processes killed at random moments and replaced while this
// process samples and checks every row; learner processes killed and replaced. CI runs the torture case for two
// seconds; SHMREPLAY_SOAK_SECONDS=N runs it for N seconds (checked by the last test here, in a child).
// Part of test_processes (tests/CMakeLists.txt); its helpers are in processes_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "processes_helpers.hpp"

constexpr const char* kTortureName =
    "writer processes killed at random moments lose nothing published and never expose a torn step";

// Whether every env's lease is held by a live writer.
inline bool all_alive(const SegmentInfo& info) {
  return std::all_of(info.envs.begin(), info.envs.end(),
                     [](const EnvInfo& env) { return env.owner == OwnerState::alive; });
}

// The segment once every env's lease is held by a live writer and every writer counts (at most 20 s; never a timed
// assertion: the caller checks what it returns).
inline SegmentInfo settled(const std::string& name, std::size_t num_writers) {
  SegmentInfo info = Inspector(name).snapshot();
  for (const auto give_up = Clock::now() + std::chrono::seconds(20);
       !(all_alive(info) && info.live_writers == num_writers) && Clock::now() < give_up;
       info = Inspector(name).snapshot()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return info;
}

// Right after a writer's kill, before its replacement starts, nothing moves on its envs `envs`: every step it
// committed is still stored intact (up to capacity), the views hold exactly those steps, and the newest one can be
// peeked. Raises each env's `floor` to its head; counts in *claimed_envs the envs it left claimed but not
// published; whether there was one.
inline bool check_dead_writers_envs(const Buffer& buf, Sampler& learner, const std::vector<uint64_t>& envs,
                                    std::vector<uint64_t>& floor, uint64_t* claimed_envs) {
  const uint64_t capacity = buf.capacity();
  SampleBatch newest;
  bool left_claimed = false;
  for (const uint64_t e : envs) {
    const layout::EnvControl& c = segment_of(buf).env_control(e);
    const uint64_t head = c.head.load();
    const uint64_t claimed = c.claimed.load() & layout::kClaimMask;
    floor[e] = head;
    CHECK_MESSAGE((claimed == head || claimed == head + 1), fmt::format("env {}: head {}, claimed {}", e, head,
                                                                        claimed));
    // claimed = head + 1: killed between the claim and the head store (inside a push, or inside or after an
    // abandoned reservation); the slot being reclaimed holds step head - capacity, which leaves the view.
    if (claimed == head + 1) {
      left_claimed = true;
      ++*claimed_envs;
    }
    CHECK(check_env_payloads(buf, e) == "");
    const EnvSizes sz = learner.sizes(e);
    CHECK(sz.head == head);
    CHECK_MESSAGE(sz.replay == std::min(head, claimed == head ? capacity : capacity - 1),
                  fmt::format("env {}: head {}, claimed {}, replay {}", e, head, claimed, sz.replay));
    if (head > 0) {
      const uint64_t one[1] = {e};
      learner.peek(one, newest);
      CHECK(newest.valid(0, 0));
      CHECK(newest.start_steps()[0] == head - 1);
      CHECK(check_row(newest, 0, head, head) == "");
    }
  }
  return left_claimed;
}

// The dead writer's envs show as dead in the inspector until the replacement takes them over; their owner is the
// killed writer or the holder before it (a writer killed while it was starting, before it took the leases over,
// leaves them with its dead predecessor). The holder now.
inline pid_t check_dead_owner(const std::string& name, const std::vector<uint64_t>& envs, pid_t killed,
                              pid_t holder_before) {
  const SegmentInfo info = Inspector(name).snapshot();
  const uint64_t holder = info.envs[envs[0]].owner_pid;
  CHECK((holder == static_cast<uint64_t>(killed) || holder == static_cast<uint64_t>(holder_before)));
  for (const uint64_t e : envs) {
    CHECK(info.envs[e].owner == OwnerState::dead);
    CHECK(info.envs[e].owner_pid == holder);
  }
  return static_cast<pid_t>(holder);
}

// What the writer torture counts.
struct TortureTotals {
  uint64_t rows = 0, calls = 0, violations = 0, kills = 0, retries = 0, pushes = 0;
  uint64_t claimed_kills = 0, claimed_envs = 0;  // kills that left an env between its claim and its head store
  std::string first;
  double torture_s = 0;
};

// The writer torture on a new buffer of `name`: writer processes killed and replaced at random moments for
// run_seconds(2.0) from `start` (at least one kill), while this process samples and checks every row; then every
// writer stopped and the ring verified.
inline TortureTotals run_writer_torture(const std::string& name, const std::vector<std::vector<uint64_t>>& slices,
                                        uint64_t num_envs, uint64_t capacity, Clock::time_point start) {
  TortureTotals t;
  Buffer buf = Buffer::create(name, num_envs, capacity, kPayloadSchema);
  const std::size_t num_writers = slices.size();
  std::vector<pid_t> writers(num_writers);
  uint64_t seed = 1;
  for (std::size_t w = 0; w < num_writers; ++w) {
    writers[w] = spawn([&, w, s = seed++] { writer_main(name, slices[w], s, false); });
  }
  Sampler learner(buf);
  REQUIRE(learner.wait(View::replay, num_envs, 10'000));
  // Every first writer holds its leases before the first kill (num_envs steps can come from fewer writers than
  // all: a writer still starting would be killed holding nothing, and its envs show no owner at all).
  REQUIRE(all_alive(settled(name, num_writers)));
  std::vector<pid_t> holders = writers;  // per writer slot, the process that holds its envs' leases
  Rng rng(7);
  SampleBatch batch;
  std::vector<uint64_t> floor(num_envs, 0);  // heads seen after each kill: published steps never go away
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_seconds(2.0)));
  auto next_kill = Clock::now() + std::chrono::milliseconds(50);
  // A long soak reports its running totals every minute on stderr, so that a soak cut short still has figures.
  const bool soak = run_seconds(2.0) >= 60;
  auto next_report = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline || t.kills == 0) {  // at least one kill, however short the soak
    t.violations += sample_and_check(learner, rng, batch, t.calls++, &t.rows, &t.first);
    if (soak && Clock::now() >= next_report) {
      next_report += std::chrono::seconds(60);
      std::fprintf(stderr, "soak %.0f s: %llu kills, %llu sample calls, %llu rows checked, %llu retries, %llu "
                   "violations\n", std::chrono::duration<double>(Clock::now() - start).count(),
                   static_cast<unsigned long long>(t.kills), static_cast<unsigned long long>(t.calls),
                   static_cast<unsigned long long>(t.rows), static_cast<unsigned long long>(learner.retries()),
                   static_cast<unsigned long long>(t.violations));
    }
    for (uint64_t e = 0; e < num_envs; ++e) {
      if (segment_of(buf).env_control(e).head.load() < floor[e]) {
        if (t.violations++ == 0 && t.first.empty()) t.first = fmt::format("env {}'s head went backwards", e);
      }
    }
    if (Clock::now() >= next_kill) {
      const std::size_t w = rng() % num_writers;
      CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
      ++t.kills;
      if (check_dead_writers_envs(buf, learner, slices[w], floor, &t.claimed_envs)) ++t.claimed_kills;
      holders[w] = check_dead_owner(name, slices[w], writers[w], holders[w]);
      writers[w] = spawn([&, w, s = seed++] { writer_main(name, slices[w], s, false); });
      next_kill = Clock::now() + std::chrono::milliseconds(20 + rng() % 120);
    }
  }
  t.torture_s = std::chrono::duration<double>(Clock::now() - start).count();
  // The last replacement may not have taken its leases over yet: give it time (never a timed assertion).
  const SegmentInfo live = settled(name, num_writers);
  for (const EnvInfo& env : live.envs) {
    CHECK(env.owner == OwnerState::alive);
    CHECK(env.last_push_ns > 0);
  }
  CHECK(live.live_writers == num_writers);
  for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
  t.retries = learner.retries();
  t.pushes = total_heads(buf);
  for (uint64_t e = 0; e < num_envs; ++e) CHECK(segment_of(buf).env_control(e).head.load() >= floor[e]);
  std::string bad;
  CHECK_MESSAGE(verify_ring(buf, &bad) == 0, bad);
  CHECK(segment_of(buf).global_control().learner_takeovers.load() == 0);
  return t;
}

TEST_CASE(kTortureName) {
  const auto start = Clock::now();  // the torture runs run_seconds(2.0) from here, setup included
  const uint64_t num_envs = 12;
  const uint64_t capacity = 64;
  const std::size_t num_writers = 3;
  SegmentGuard guard(unique_name("torture"));
  std::vector<std::vector<uint64_t>> slices(num_writers);
  for (uint64_t e = 0; e < num_envs; ++e) slices[e % num_writers].push_back(e);
  const TortureTotals t = run_writer_torture(guard.name(), slices, num_envs, capacity, start);
  MESSAGE(fmt::format("{} writer processes, {} kills: {} pushes, {} sample calls, {} rows checked, {} retries, {} "
                      "violations; the torture ran for {:.3f} s",
                      num_writers, t.kills, t.pushes, t.calls, t.rows, t.retries, t.violations, t.torture_s));
  MESSAGE(fmt::format("{} of {} kills left {} env(s) claimed but not published (killed inside a push or a "
                      "reservation, or after abandoning one)",
                      t.claimed_kills, t.kills, t.claimed_envs));
  CHECK_MESSAGE(t.violations == 0, t.first);
  CHECK(t.kills > 0);

  // Every process that used the segment is gone; it is still there, with its data.
  Buffer again = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
  CHECK(total_heads(again) == t.pushes);
  std::string bad;
  CHECK_MESSAGE(verify_ring(again, &bad) == 0, bad);
  Sampler learner(again);  // the old learner released its lease
  // Full rings; an env whose writer died mid-write (or abandoned a reservation) has its oldest slot reclaimed.
  CHECK(learner.size(View::replay) <= num_envs * capacity);
  CHECK(learner.size(View::replay) >= num_envs * (capacity - 1));
}

constexpr const char* kLearnerTortureName =
    "learner processes killed at random moments, beside writers killed at random moments: every row any learner "
    "checked was sound, and each new learner takes the dead one's lease over";

// What the learner processes of the learner torture report to the parent, in a shared anonymous mapping (a
// SIGKILLed child cannot report at exit): totals over the calls they completed, and the first violation's text.
struct LearnerTally {
  std::atomic<uint64_t> rows{0}, calls{0}, violations{0}, in_sample{0};
  std::atomic<uint64_t> first_taken{0};  // 0 until a child claims `first` (exchange) to write its violation
  char first[256] = {};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// The body of a learner process: take the learner lease (over a dead learner's), then sample every way and check
// every row until killed, adding each completed call's figures to `tally`.
[[noreturn]] void learner_main(const std::string& name, uint64_t seed, LearnerTally* tally) {
  try {
    Buffer buf = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Sampler learner(buf);
    Rng rng(seed);
    SampleBatch batch;
    for (uint64_t call = 0;; ++call) {
      uint64_t rows = 0;
      std::string first;
      tally->in_sample.store(1, std::memory_order_relaxed);  // whether a kill lands inside a call (a figure only)
      const uint64_t violations = sample_and_check(learner, rng, batch, call, &rows, &first);
      tally->in_sample.store(0, std::memory_order_relaxed);
      tally->rows.fetch_add(rows, std::memory_order_relaxed);
      tally->calls.fetch_add(1, std::memory_order_relaxed);
      if (violations > 0) {
        tally->violations.fetch_add(violations, std::memory_order_relaxed);
        // exchange pairs with the parent's read of `first` after every child is reaped (waitpid orders it too)
        if (tally->first_taken.exchange(1, std::memory_order_acq_rel) == 0) {
          std::snprintf(tally->first, sizeof tally->first, "%s", first.c_str());
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "learner %d: %s\n", static_cast<int>(::getpid()), e.what());
  }
  ::_exit(3);  // only reached when the learner failed: the parent reports an exit instead of a kill
}

TEST_CASE(kLearnerTortureName) {
  const auto start = Clock::now();
  const uint64_t num_envs = 12;
  const uint64_t capacity = 64;
  const std::size_t num_writers = 3;
  SegmentGuard guard(unique_name("ltorture"));
  std::vector<std::vector<uint64_t>> slices(num_writers);
  for (uint64_t e = 0; e < num_envs; ++e) slices[e % num_writers].push_back(e);
  void* mem = ::mmap(nullptr, sizeof(LearnerTally), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  auto* tally = new (mem) LearnerTally;
  const std::unique_ptr<void, std::function<void(void*)>> unmap(mem, [](void* m) { ::munmap(m, sizeof(LearnerTally)); });

  uint64_t writer_kills = 0, learner_kills = 0, kills_in_sample = 0, takeovers = 0, retries = 0;
  uint64_t holder_kills = 0;  // learner kills of a process that held the lease (one killed while it attached did not)
  double ran_s = 0;
  {
    Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kPayloadSchema);
    std::vector<pid_t> writers(num_writers);
    uint64_t seed = 1;
    for (std::size_t w = 0; w < num_writers; ++w) {
      writers[w] = spawn([&, w, s = seed++] { writer_main(guard.name(), slices[w], s, false); });
    }
    pid_t learner = spawn([&, s = seed++] { learner_main(guard.name(), s, tally); });
    Rng rng(11);
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_seconds(2.0)));
    const bool soak = run_seconds(2.0) >= 60;
    auto next_report = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline || learner_kills == 0 || writer_kills == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 120));
      if (rng() % 2 == 0) {
        kills_in_sample += tally->in_sample.load(std::memory_order_relaxed);
        CHECK_MESSAGE(kill_and_reap(learner), "a learner process exited on its own (see its stderr)");
        ++learner_kills;
        holder_kills += layout::owner_pid(segment_of(buf).global_control().learner_lease.load()) == static_cast<uint64_t>(learner);
        learner = spawn([&, s = seed++] { learner_main(guard.name(), s, tally); });
      } else {
        const std::size_t w = rng() % num_writers;
        CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
        ++writer_kills;
        writers[w] = spawn([&, w, s = seed++] { writer_main(guard.name(), slices[w], s, false); });
      }
      if (soak && Clock::now() >= next_report) {
        next_report += std::chrono::seconds(60);
        std::fprintf(stderr, "learner soak %.0f s: %llu learner kills, %llu writer kills, %llu rows checked, %llu "
                     "violations\n", std::chrono::duration<double>(Clock::now() - start).count(),
                     static_cast<unsigned long long>(learner_kills), static_cast<unsigned long long>(writer_kills),
                     static_cast<unsigned long long>(tally->rows.load()),
                     static_cast<unsigned long long>(tally->violations.load()));
      }
    }
    ran_s = std::chrono::duration<double>(Clock::now() - start).count();
    CHECK(kill_and_reap(learner));
    ++learner_kills;
    holder_kills += layout::owner_pid(segment_of(buf).global_control().learner_lease.load()) == static_cast<uint64_t>(learner);
    for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
    std::string bad;
    CHECK_MESSAGE(verify_ring(buf, &bad) == 0, bad);
    // A last learner here: it takes the last child's lease over and samples sound rows from what is left.
    Sampler last(buf);
    takeovers = segment_of(buf).global_control().learner_takeovers.load();
    retries = segment_of(buf).global_control().retries.load();
    Rng mine(99);
    SampleBatch batch;
    uint64_t rows = 0, violations = 0;
    std::string first;
    for (uint64_t call = 0; call < 50; ++call) violations += sample_and_check(last, mine, batch, call, &rows, &first);
    CHECK_MESSAGE(violations == 0, first);
  }
  MESSAGE(fmt::format("{} learner kills ({} inside a sample call, {} of a lease holder), {} writer kills: {} sample "
                      "calls completed, {} rows checked, {} retries, {} violations, {} learner takeovers; the learner "
                      "torture ran for {:.3f} s",
                      learner_kills, kills_in_sample, holder_kills, writer_kills, tally->calls.load(),
                      tally->rows.load(), retries, tally->violations.load(), takeovers, ran_s));
  CHECK_MESSAGE(tally->violations.load() == 0, std::string(tally->first));
  CHECK(tally->rows.load() > 0);
  // Every dead lease holder was taken over exactly once, by the next learner to attach (or by `last`). A learner
  // killed while it attached, before its compare-and-swap took the lease, held nothing to take over.
  CHECK(takeovers == holder_kills);
}

TEST_CASE("SHMREPLAY_SOAK_SECONDS=N runs the torture for N seconds in total, not a multiple of N") {
  // The torture case itself, in a child test runner with N = 1 (below its CI default of 2 s, and a third of what
  // the old rule, max(2, 3 N), made of it): it reports how long it ran, setup included, up to the end of its loop.
  int out_pipe[2];
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::setenv("SHMREPLAY_SOAK_SECONDS", "1", 1);
    const std::string filter = fmt::format("--test-case={}", kTortureName);
    ::execl("/proc/self/exe", "test_processes", filter.c_str(), "--no-version", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  std::string out;
  char chunk[4096];
  for (ssize_t got; (got = ::read(out_pipe[0], chunk, sizeof chunk)) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    out.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(out_pipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE_MESSAGE(WIFEXITED(status), out);
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, out);
  const std::string marker = "the torture ran for ";
  const std::size_t at = out.find(marker);
  REQUIRE_MESSAGE(at != std::string::npos, out);
  const double ran_s = std::stod(out.substr(at + marker.size()));
  MESSAGE(fmt::format("with SHMREPLAY_SOAK_SECONDS=1 the torture ran for {:.3f} s", ran_s));
  CHECK(ran_s >= 1.0);
  CHECK(ran_s < 1.5);
}
