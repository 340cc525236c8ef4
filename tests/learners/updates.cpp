// Learners updating the same steps: priorities from two learners at once, the update lock under two learners, a lock
// left by a dead learner with no writer to clear it.
// Part of test_learners (tests/CMakeLists.txt); the model and helpers they share are in processes_helpers.hpp.
#include "learners/processes_helpers.hpp"

namespace shmreplay::test::learner_processes {

// ---------------------------------------------------------------------------------------------------------------
// 3. Two learners' update_priorities of the same steps

// Two learners (slots 0 and 1) setting the priorities of every step of a full buffer in rounds, and a third (slot 2)
// rewriting the same steps meanwhile; the main thread checks each leaf and tree between two rounds.
struct PriorityRace {
  static constexpr int kRounds = 150;
  static constexpr double kAlpha = 0.7;
  Buffer& buf;
  std::vector<uint64_t> envs, steps;  // every stored step
  std::barrier<> sync{3};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> dropped{0}, unweighted{0}, rewrites{0};
  uint64_t last_a = 0, last_b = 0, bad_leaves = 0;
  std::string first_bad;

  explicit PriorityRace(Buffer& b) : buf(b) {
    for (uint64_t e = 0; e < buf.num_envs(); ++e) {
      for (uint64_t s = 0; s < buf.capacity(); ++s) {
        envs.push_back(e);
        steps.push_back(s);
      }
    }
  }

  // Round k's values: learner A's and B's differ at every step, so the leaf tells whose update was last.
  static float value(int learner, int k, std::size_t i) {
    const auto round = static_cast<std::size_t>(k);
    return static_cast<float>(learner == 0 ? 1 + (round * 7 + i) % 50 : 100 + (round * 5 + i) % 50) / 4.0f;
  }

  void learner(int who) {
    Sampler s(buf, {.rank = static_cast<uint64_t>(who)});
    const std::size_t n = envs.size();
    std::vector<uint64_t> my_envs(n), my_steps(n);
    std::vector<float> prios(n);
    std::vector<double> weights(n);
    for (int k = 0; k < kRounds; ++k) {
      // Even rounds in the same order (each leaf contended), odd ones in opposite orders (they cross mid-way).
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t j = who == 1 && k % 2 == 1 ? n - 1 - i : i;
        my_envs[i] = envs[j];
        my_steps[i] = steps[j];
        prios[i] = value(who, k, j);
      }
      sync.arrive_and_wait();  // the round starts
      const PriorityUpdateResult u = s.update_priorities(my_envs, my_steps, prios);
      dropped += u.dropped;
      s.priority_weights(my_envs, my_steps, weights);
      for (const double w : weights) unweighted += w < 0;
      sync.arrive_and_wait();  // the round is over: the main thread checks
    }
  }

  // The third learner (slot 2): its update lock, bits 63 and 56-62 of claimed, must not make a stored step look
  // overwritten to the others.
  void rewriter() {
    Sampler s(buf, {.rank = 2});
    Rng rng(5);
    for (uint64_t k = 1; !stop.load(); ++k) {
      const uint64_t e = rng() % buf.num_envs(), step = rng() % buf.capacity();
      const Payload p = make_payload(e, step, (3ull << 40) | k);
      rewrites += s.try_update(e, step, {field_bytes(std::span<const uint64_t>(p.hdr, 4)),
                                         field_bytes(std::span<const float>(p.body, kBody)),
                                         field_bytes(std::span<const uint8_t>(p.tail, kTail))});
    }
  }

  // Between two rounds: each leaf holds A's or B's value of round k, and each tree equals its rebuild.
  void check_round(int k) {
    for (std::size_t i = 0; i < envs.size(); ++i) {
      const auto t = detail::priority_tree_of(segment_of(buf), envs[i]);
      const double w = detail::slot_weight(t, steps[i]);
      const double wa = static_cast<float>(detail::priority_weight(value(0, k, i), kAlpha));
      const double wb = static_cast<float>(detail::priority_weight(value(1, k, i), kAlpha));
      last_a += w == wa;
      last_b += w == wb;
      if (w != wa && w != wb && bad_leaves++ == 0) {
        first_bad = fmt::format("round {}: env {} step {} has weight {}, neither {} nor {}", k, envs[i], steps[i], w,
                                wa, wb);
      }
    }
    for (uint64_t e = 0; e < buf.num_envs(); ++e) {
      const std::string t = tree_vs_rebuild(buf, e);
      if (!t.empty() && bad_leaves++ == 0) first_bad = fmt::format("round {}: {}", k, t);
    }
  }
};

TEST_CASE("two learners set the priorities of the same steps at once, while a third rewrites them: each leaf ends "
          "with one of the two values, nothing is dropped, and every tree equals its rebuild") {
  const uint64_t capacity = 64;
  SegmentGuard guard(unique_name("lproc-prio"));
  Buffer buf = Buffer::create(guard.name(), 2, capacity, kPayloadSchema,
                              {.priority_exponent = PriorityRace::kAlpha, .max_learners = 3});
  {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    PrioritizedPusher pusher;
    Rng rng(1);
    for (uint64_t i = 0; i < capacity; ++i) pusher.push(w, {0, 1}, rng);  // full rings; nothing is overwritten after
  }
  PriorityRace race(buf);
  std::thread rewriter([&] { race.rewriter(); });
  std::thread a([&] { race.learner(0); }), b([&] { race.learner(1); });
  for (int k = 0; k < PriorityRace::kRounds; ++k) {
    race.sync.arrive_and_wait();
    race.sync.arrive_and_wait();
    race.check_round(k);
  }
  a.join();
  b.join();
  race.stop = true;
  rewriter.join();
  MESSAGE(fmt::format("{} rounds of {} steps: the last value was A's {} times and B's {} times; {} rewrites by a "
                      "third learner meanwhile",
                      PriorityRace::kRounds, race.envs.size(), race.last_a, race.last_b, race.rewrites.load()));
  CHECK_MESSAGE(race.bad_leaves == 0, race.first_bad);
  CHECK(race.dropped.load() == 0);     // no writer ran: no step was overwritten, so no update may be dropped
  CHECK(race.unweighted.load() == 0);  // ... nor any stored step be reported as not stored
  CHECK(race.last_a > 0);
  CHECK(race.last_b > 0);
  CHECK(race.rewrites.load() > 0);
  std::set<StepKey> none;
  uint64_t unused = 0;
  CHECK(verify_stored(buf, none, &unused) == "");
}

// ---------------------------------------------------------------------------------------------------------------
// 4. The update lock under two learners

// An updater process of rank `rank`: rewrites the newest steps of env 0 (mostly) as versions (rank + 1) << 40 | k,
// until report->stop (then exits 0), or until killed (a victim).
[[noreturn]] void updater(const std::string& name, uint64_t rank, uint64_t seed, Report* report) {
  child_main(report, "updater", [&] {
    Buffer buf = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Sampler s(buf, {.rank = rank});
    Rng rng(seed);
    for (uint64_t k = 1; report->stop.load() == 0; ++k) {
      const uint64_t env = rng() % 4 == 0 ? 1 : 0;
      const uint64_t head = segment_of(buf).env_control(env).head.load(std::memory_order_acquire);
      if (head > 4) marked_update(s, report, static_cast<std::size_t>(rank), env, head - 1 - rng() % 4, ((rank + 1) << 40) | k);
      if (k % 64 == 0) ::usleep(100);
    }
    ::_exit(0);
  });
}

TEST_CASE("two learner processes rewrite the same steps while a writer pushes, a third learner is SIGKILLed inside "
          "its rewrites and replaced, and a fourth samples: every step is one learner's whole bytes") {
  SegmentGuard guard(unique_name("lproc-lock"));
  Shared<Report> report;
  Buffer buf = Buffer::create(guard.name(), 2, 32, kPayloadSchema, {.max_learners = 4});
  const pid_t writer = spawn([&] {
    child_main(report.get(), "writer", [&] {
      Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
      Writer w(b, std::vector<uint64_t>{0, 1});
      PrioritizedPusher pusher;
      Rng rng(3);
      for (uint64_t n = 1; report->stop.load() == 0; ++n) {
        pusher.push(w, {0, 1}, rng);
        if (n % 2 == 0) ::usleep(150);
      }
      ::_exit(0);
    });
  });
  Sampler reader(buf, {.rank = 3});
  REQUIRE(reader.wait(View::replay, 16, 10'000));
  const pid_t a = spawn([&] { updater(guard.name(), 0, 11, report.get()); });
  const pid_t b = spawn([&] { updater(guard.name(), 1, 12, report.get()); });
  pid_t victim = spawn([&] { updater(guard.name(), 2, 13, report.get()); });
  std::set<StepKey> excused;
  uint64_t victim_kills = 0, victim_holders = 0, seed = 14;
  Rng rng(29);
  SampleBatch batch;
  std::vector<uint64_t> heads;
  const auto start = Clock::now();
  auto next_kill = start + std::chrono::milliseconds(20);
  while (Clock::now() - start < std::chrono::milliseconds(1500) || victim_kills < 3) {
    read_heads(buf, heads);
    reader.sample(View::replay, 32, 1 + rng() % 8, static_cast<double>(rng() % 2), rng, batch);
    check_batch(buf, batch, heads, report.get(), /*max_updaters=*/3);
    if (Clock::now() >= next_kill) {
      CHECK_MESSAGE(kill_and_reap(victim), "the victim exited on its own (see its stderr)");
      ++victim_kills;
      victim_holders += slot_of(buf, victim).has_value();
      excuse_marked(report.get(), 2, excused);  // before this process samples again
      victim = spawn([&, s = seed++] { updater(guard.name(), 2, s, report.get()); });
      next_kill = Clock::now() + std::chrono::milliseconds(10 + rng() % 40);
    }
  }
  CHECK(kill_and_reap(victim));  // before the stop flag, which would end it
  ++victim_kills;
  victim_holders += slot_of(buf, victim).has_value();
  excuse_marked(report.get(), 2, excused);
  report->stop = 1;
  CHECK(reap_child(a) == 0);
  CHECK(reap_child(b) == 0);
  CHECK(reap_child(writer) == 0);
  const Sampler last(buf, {.rank = 2});  // takes the last victim's slot over: releases its lock, if it held one
  // At least one takeover per victim that held the slot at its kill, at most one per kill (a repairer of the dead
  // victim's lock may take the slot over before this test looks at who held it).
  CHECK(detail::learner_slot(segment_of(buf), 2).lease.takeovers.load() >= victim_holders);
  CHECK(detail::learner_slot(segment_of(buf), 2).lease.takeovers.load() <= victim_kills);
  for (uint64_t e = 0; e < 2; ++e) {
    const layout::EnvControl& c = segment_of(buf).env_control(e);
    CHECK((c.claimed.load() & ~layout::kClaimMask) == 0);
    CHECK(c.update_seq.load() % 2 == 0);
  }
  uint64_t excused_stored = 0, excused_rows = 0;
  CHECK(verify_stored(buf, excused, &excused_stored) == "");
  const std::string bad = unexcused(report.get(), excused, &excused_rows);
  MESSAGE(fmt::format("{} rows checked, {} rewrites ({} applied) by 3 learners, {} victim kills; {} excused mixed "
                      "steps ({} rows, {} stored)",
                      report->rows.load(), report->updates.load(), report->updates_applied.load(), victim_kills,
                      excused.size(), excused_rows, excused_stored));
  CHECK_MESSAGE(bad == "", bad);
  CHECK(excused_rows == 0);    // no sampled row ever showed a killed learner's mixed step
  CHECK(excused_stored == 0);  // and none is left inside a view
  CHECK(report->failures.load() == 0);
  CHECK(report->updates_applied.load() > 0);
}

// ---------------------------------------------------------------------------------------------------------------
// 5. A lock left by a dead learner, and no writer to clear it

TEST_CASE("a learner's try_update of an env whose update lock a SIGKILLed learner holds returns, with no writer "
          "pushing to clear it") {
  SegmentGuard guard(unique_name("lproc-deadlock"));
  Shared<Report> report;
  Buffer buf = Buffer::create(guard.name(), 1, 16, kPayloadSchema, {.max_learners = 2});
  {
    Writer w(buf, std::vector<uint64_t>{0});
    PrioritizedPusher pusher;
    Rng rng(1);
    for (int i = 0; i < 8; ++i) pusher.push(w, {0}, rng);
  }  // the writer is gone: nobody will push to env 0
  layout::EnvControl& c = segment_of(buf).env_control(0);
  // Kill a learner of slot 1 that rewrites step 3 in a loop until one dies holding the lock (a few tries: it holds
  // it for most of each call).
  bool held = false;
  int tries = 0;
  for (; tries < 400 && !held; ++tries) {
    const pid_t victim = spawn([&] {
      child_main(report.get(), "updater", [&] {
        Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
        Sampler s(b, {.rank = 1});
        report->calls = 1;
        const Payload p = make_payload(0, 3, 2ull << 40);
        for (;;) {
          s.try_update(0, 3, {field_bytes(std::span<const uint64_t>(p.hdr, 4)),
                              field_bytes(std::span<const float>(p.body, kBody)),
                              field_bytes(std::span<const uint8_t>(p.tail, kTail))});
        }
      });
    });
    while (report->calls.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::this_thread::sleep_for(std::chrono::microseconds(500 + 97 * (tries % 13)));
    CHECK(kill_and_reap(victim));
    report->calls = 0;
    held = (c.claimed.load() & layout::kUpdateLockBit) != 0;
    if (!held) {
      // Its takeover by the next victim would repair any lock; start each try from a free lock.
      REQUIRE((c.claimed.load() & ~layout::kClaimMask) == 0);
    }
  }
  MESSAGE(fmt::format("a victim died holding the update lock after {} tries", tries));
  REQUIRE(held);
  CHECK(layout::update_lock_owner(c.claimed.load()) == 1);
  // The learner of slot 0, in a child with a deadline: its try_update must not spin forever on the dead learner's
  // lock (which only a writer's push or a takeover of slot 1 would clear today).
  const int code = run_in_child([&] {
    ::alarm(5);
    Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
    Sampler s(b, {.rank = 0});
    const Payload p = make_payload(0, 4, 1ull << 40);
    return s.try_update(0, 4, {field_bytes(std::span<const uint64_t>(p.hdr, 4)),
                               field_bytes(std::span<const float>(p.body, kBody)),
                               field_bytes(std::span<const uint8_t>(p.tail, kTail))});
  });
  CHECK_MESSAGE(code == 0, fmt::format("the learner's try_update ended with {} (128 + 14: still spinning on the "
                                       "dead learner's lock after 5 s)", code));
  const Sampler taker(buf, {.rank = 1});  // the takeover releases the lock, if it is still held
  CHECK((c.claimed.load() & ~layout::kClaimMask) == 0);
  CHECK(c.update_seq.load() % 2 == 0);
}

}  // namespace shmreplay::test::learner_processes
