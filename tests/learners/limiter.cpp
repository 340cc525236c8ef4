// Three learner processes and waiting writers under a rate limiter, learners SIGKILLed while they wait.
// Part of test_learners (tests/CMakeLists.txt); the model and helpers they share are in processes_helpers.hpp.
#include "learners/processes_helpers.hpp"

namespace shmreplay::test::learner_processes {

// ---------------------------------------------------------------------------------------------------------------
// 2. The rate limiter with three learners

// A writer process that waits for the limiter: pushes one payload step to each of its envs per call, forever.
[[noreturn]] void limited_writer(const std::string& name, std::vector<uint64_t> envs, uint64_t seed, Report* report) {
  child_main(report, "writer", [&] {
    Buffer b = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Writer w(b, envs, {.wait_for_rate_limit = true, .rate_limit_timeout_ms = 60'000});
    Rng rng(seed);
    PrioritizedPusher pusher;
    for (uint64_t n = 1;; ++n) {
      pusher.push(w, envs, rng);
      if (n % 8 == 0) ::usleep(static_cast<useconds_t>(rng() % 400));
    }
  });
}

// A learner process of rank `rank` under the limiter: sample calls of kLimitedBatch rows (now and then a mixed one,
// whose empty online view gives its reservation back), every row checked, until killed.
constexpr std::size_t kLimitedBatch = 16;
[[noreturn]] void limited_learner(const std::string& name, uint64_t rank, uint64_t seed, Report* report) {
  child_main(report, "learner", [&] {
    Buffer buf = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Sampler s(buf, {.rank = rank});
    Rng rng(seed);
    SampleBatch batch;
    std::vector<uint64_t> heads;
    SampleOptions o;
    o.rate_limit_timeout_ms = 60'000;
    for (uint64_t call = 1;; ++call) {
      const std::size_t L = 1 + static_cast<std::size_t>(rng() % 4);
      read_heads(buf, heads);
      report->in_call[rank].store(1, std::memory_order_relaxed);
      try {
        if (rng() % 8 == 0) {
          s.sample_mixed(kLimitedBatch - 4, 4, L, 1.0, rng, batch, o);
        } else {
          s.sample(View::replay, kLimitedBatch, L, static_cast<double>(rng() % 2), rng, batch, o);
        }
        check_batch(buf, batch, heads, report, /*max_updaters=*/0);  // adds the rows of every completed call
      } catch (const Error& e) {
        if (e.errc() != Errc::empty_view) throw;
      }
      report->in_call[rank].store(0, std::memory_order_relaxed);
      report->calls.fetch_add(1, std::memory_order_relaxed);
      if (call % 4 == 0) s.reset_online_queue(OnlineReset::sampled);
      if (rng() % 4 == 0) ::usleep(static_cast<useconds_t>(rng() % 1500));
    }
  });
}

// The processes of the limiter case and what the parent sees of them: the readings of the limiter's error, and
// the kills (a learner's, a writer's) with what the learner was doing when it died.
struct LimiterRun {
  static constexpr uint64_t kSlots = 3;
  const RateLimit limit = RateLimit::ratio(2.0, 64, 96.0);  // error bounds 32 .. 224
  // Above max_diff only by rows a failed call gives back after writers were admitted against them: a batch per
  // learner.
  const double slack = static_cast<double>(kSlots * kLimitedBatch);
  const std::string name;
  Report* report;
  Buffer& buf;
  const layout::GlobalControl& g;
  uint64_t seed = 100;
  std::vector<std::vector<uint64_t>> slices = {{0, 1}, {2, 3}, {4, 5}};
  std::vector<pid_t> writers, learners;
  uint64_t readings = 0, below = 0, above = 0, learner_kills = 0, writer_kills = 0;
  uint64_t killed_waiting = 0, killed_in_call = 0;
  double lowest = 1e300, highest = -1e300;
  std::string first_out;
  Rng rng{23};

  LimiterRun(std::string n, Report* r, Buffer& b)
      : name(std::move(n)), report(r), buf(b), g(segment_of(b).global_control()) {
    for (const auto& slice : slices) {
      writers.push_back(spawn([&, slice, s = seed++] { limited_writer(name, slice, s, report); }));
    }
    for (uint64_t rank = 0; rank < kSlots; ++rank) {
      learners.push_back(spawn([&, rank, s = seed++] { limited_learner(name, rank, s, report); }));
    }
  }

  // A sound reading of the error: samples read before and after the heads and equal (inserts only grow, so the
  // pair lies between the errors at the two reads, and both lie within the bounds).
  bool read(uint64_t& inserts, uint64_t& samples) const {
    for (int tries = 0; tries < 100; ++tries) {
      samples = g.samples.load(std::memory_order_seq_cst);
      inserts = detail::count_inserts(segment_of(buf)).inserts;
      if (g.samples.load(std::memory_order_seq_cst) == samples) return true;
    }
    return false;
  }

  // One reading of the error, against the bounds.
  void observe() {
    uint64_t inserts = 0, samples = 0;
    if (!read(inserts, samples)) return;
    ++readings;
    const double error = static_cast<double>(inserts) * limit.samples_per_insert - static_cast<double>(samples);
    if (samples > 0) lowest = std::min(lowest, error);
    highest = std::max(highest, error);
    if (samples > 0 && error < limit.min_diff && below++ == 0) {
      first_out = fmt::format("error {} below min_diff {} ({} inserts, {} samples)", error, limit.min_diff,
                              inserts, samples);
    }
    if (error > limit.max_diff + slack && above++ == 0) {
      first_out = fmt::format("error {} above max_diff {} + {} ({} inserts, {} samples)", error, limit.max_diff,
                              slack, inserts, samples);
    }
  }

  void kill_learner(uint64_t r) {
    const bool in_call = report->in_call[r].load() != 0;
    CHECK_MESSAGE(kill_and_reap(learners[r]), "a learner process exited on its own (see its stderr)");
    ++learner_kills;
    // The dead learner's waiting mark stays as it died: rows waiting for the limiter, or 0.
    if (detail::learner_slot(segment_of(buf), r).waiting_rows.load() != 0) {
      ++killed_waiting;
    } else if (in_call) {
      ++killed_in_call;  // drawing, checking, or between its reservation and its draw
    }
    report->in_call[r].store(0);
  }

  // Kills a learner (3 times in 4) or a writer, and starts its successor.
  void kill_one() {
    if (rng() % 4 != 0) {
      const uint64_t r = rng() % kSlots;
      kill_learner(r);
      learners[r] = spawn([&, r, s = seed++] { limited_learner(name, r, s, report); });
    } else {
      const std::size_t w = rng() % writers.size();
      CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
      ++writer_kills;
      writers[w] = spawn([&, w, s = seed++] { limited_writer(name, slices[w], s, report); });
    }
  }

  // Live after the kills: the new learners and writers make progress (no wait left hanging on a dead learner's
  // reservation, sleeper count or waiting mark).
  bool live_after_kills() const {
    const uint64_t samples_at_end = g.samples.load(), inserts_at_end = detail::count_inserts(segment_of(buf)).inserts;
    bool live = false;
    for (const auto give_up = Clock::now() + std::chrono::seconds(20); !live && Clock::now() < give_up;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      live = g.samples.load() >= samples_at_end + 8 * kLimitedBatch &&
             detail::count_inserts(segment_of(buf)).inserts >= inserts_at_end + 4 * kLimitedBatch;
    }
    return live;
  }
};

TEST_CASE("three learner processes and waiting writers under a rate limiter, learners SIGKILLed while they wait or "
          "sample: the error never leaves [min_diff, max_diff + a batch per learner], and it stays live") {
  const uint64_t slots = LimiterRun::kSlots;
  SegmentGuard guard(unique_name("lproc-limit"));
  Shared<Report> report;
  Buffer buf = Buffer::create(guard.name(), 6, 1024, kPayloadSchema,
                              {.rate_limit = RateLimit::ratio(2.0, 64, 96.0), .max_learners = slots});
  LimiterRun run(guard.name(), report.get(), buf);
  const layout::GlobalControl& g = run.g;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_seconds(2.5)));
  auto next_kill = Clock::now() + std::chrono::milliseconds(40);
  // Past the deadline it goes on (10 s at most) until a kill has landed in a learner's wait or call: which moment a
  // kill meets is chance, and the check below wants one.
  const auto last_chance = deadline + std::chrono::seconds(10);
  while (Clock::now() < deadline || run.learner_kills < 4 ||
         (run.killed_waiting + run.killed_in_call == 0 && Clock::now() < last_chance)) {
    run.observe();
    if (Clock::now() >= next_kill) {
      run.kill_one();
      next_kill = Clock::now() + std::chrono::milliseconds(30 + run.rng() % 120);
    }
    ::usleep(300);
  }
  CHECK_MESSAGE(run.live_after_kills(), "no progress after the last kill");
  for (uint64_t r = 0; r < slots; ++r) run.kill_learner(r);
  for (const pid_t pid : run.writers) CHECK(kill_and_reap(pid));
  // Rows reserved and never drawn: only by learners killed between their reservation and the end of their call.
  const uint64_t leaked = g.samples.load() - report->rows.load();
  CHECK(g.samples.load() >= report->rows.load());
  CHECK(leaked <= run.learner_kills * kLimitedBatch);
  std::vector<Sampler> mine;  // every slot taken over: the dead learners' sleepers and waiting marks go
  for (uint64_t r = 0; r < slots; ++r) mine.emplace_back(buf, SamplerOptions{.rank = r});
  const RateLimitState st = buf.rate_limit_state();
  CHECK(g.waiters.load() == 0);
  CHECK(st.learners_waiting == 0);
  CHECK(st.learner_waiting_rows == 0);
  CHECK(st.writer_timeouts == 0);
  std::set<StepKey> none;
  uint64_t unused = 0;
  const std::string bad = unexcused(report.get(), none, &unused);
  MESSAGE(fmt::format("{} readings, error within [{}, {}] (bounds [{}, {}] + {}); {} learner kills ({} waiting, {} "
                      "in a call), {} writer kills; {} inserts, {} samples, {} rows drawn by completed calls, {} "
                      "reserved rows never drawn; held back: {} sample calls, {} pushes",
                      run.readings, run.lowest, run.highest, run.limit.min_diff, run.limit.max_diff, run.slack,
                      run.learner_kills, run.killed_waiting, run.killed_in_call, run.writer_kills, st.inserts,
                      st.samples, report->rows.load(), leaked, st.learner_limited, st.writers_limited));
  CHECK_MESSAGE(run.below == 0, run.first_out);
  CHECK_MESSAGE(run.above == 0, run.first_out);
  CHECK(run.readings > 100);
  CHECK(run.killed_waiting + run.killed_in_call > 0);
  CHECK_MESSAGE(bad == "", bad);
  CHECK(report->failures.load() == 0);
}

}  // namespace shmreplay::test::learner_processes
