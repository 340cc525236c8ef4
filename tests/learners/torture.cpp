// Learner processes and writer processes SIGKILLed at random on one buffer with priorities (issue 34's torture).
// Part of test_learners (tests/CMakeLists.txt); the model and helpers they share are in processes_helpers.hpp.
#include "learners/processes_helpers.hpp"

namespace shmreplay::test::learner_processes {

// ---------------------------------------------------------------------------------------------------------------
// 1. The torture

// A writer process of the torture: leases `envs` (taking dead leases over) and pushes forever: batched pushes of
// random subsets with priorities, and reservations, some half-filled and held a moment, some abandoned.
[[noreturn]] void torture_writer(const std::string& name, std::vector<uint64_t> envs, uint64_t seed, Report* report) {
  child_main(report, "writer", [&] {
    Buffer b = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Writer w(b, envs);
    Rng rng(seed);
    PrioritizedPusher pusher;
    std::vector<uint64_t> ids;
    for (uint64_t n = 1;; ++n) {
      if (rng() % 5 != 0) {
        ids.clear();
        for (const uint64_t e : envs) {
          if (rng() % 3 != 0) ids.push_back(e);
        }
        for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng() % i]);
        if (!ids.empty()) pusher.push(w, ids, rng);
      } else {
        StepSlot slot = w.reserve(envs[rng() % envs.size()]);
        if (rng() % 4 == 0) {
          fill_slot(slot, 1);
          ::usleep(static_cast<useconds_t>(rng() % 200));
        }
        fill_slot(slot);
        if (b.has_priorities()) slot.set_priority(static_cast<double>(1 + rng() % 100) / 10);
        if (rng() % 8 != 0) slot.commit();
      }
      if (n % 4 == 0) ::usleep(300);  // leave the cores to the learners (CI has 2)
    }
  });
}

// A learner process of the torture: takes slot `preferred` (or, when it is held by a live learner or `preferred` is
// empty, the first free one), then samples every way, updates steps and priorities, waits and resets its online
// view, checking every row, until killed.
[[noreturn]] void torture_learner(const std::string& name, std::size_t index, std::optional<uint64_t> preferred,
                                  uint64_t seed, Report* report) {
  child_main(report, "learner", [&] {
    Buffer buf = Buffer::open(name, {.expected_schema = kPayloadSchema});
    std::optional<Sampler> s;
    if (preferred) {
      try {
        s.emplace(buf, SamplerOptions{.rank = preferred});
        report->ranked.fetch_add(1);
      } catch (const Error& e) {
        if (e.errc() != Errc::lease_held) throw;  // another new learner took it first (it is first-free's)
      }
    }
    if (!s) {
      s.emplace(buf);
      report->first_free.fetch_add(1);
    }
    const uint64_t slot = s->rank();
    const bool prio = buf.has_priorities();
    Rng rng(seed);
    SampleBatch batch;
    std::vector<uint64_t> heads;
    std::vector<float> prios;
    for (uint64_t call = 1;; ++call) {
      const int kind = static_cast<int>(rng() % 8);
      const std::size_t L = 1 + static_cast<std::size_t>(rng() % 8);
      read_heads(buf, heads);
      report->in_call[index].store(1, std::memory_order_relaxed);
      try {
        bool sampled = true;
        switch (kind) {
          case 0: s->sample(View::replay, 32, L, 0.0, rng, batch); break;
          case 1: s->sample(View::replay, 32, L, 1.0, rng, batch); break;  // length^power
          case 2: s->sample(View::online, 16, L, 2.0, rng, batch); break;
          case 3: s->sample_mixed(24, 8, L, 1.0, rng, batch); break;
          case 4:
            if (prio) {
              const View view = rng() % 2 == 0 ? View::replay : View::online;
              s->sample(view, 32, L, 0.0, rng, batch, {.prioritized = true, .importance_exponent = 0.4});
            } else {
              s->sample_transitions(View::replay, 32, rng, batch);
            }
            break;
          default: sampled = false;
        }
        if (sampled) {
          check_batch(buf, batch, heads, report, /*max_updaters=*/kMaxProcs);
          if (kind == 4 && prio) {
            prios.resize(batch.rows());
            for (float& p : prios) p = static_cast<float>(1 + rng() % 1000) / 100.0f;
            const PriorityUpdateResult u = s->update_priorities(batch.env_ids(), batch.start_steps(), prios);
            report->prio_applied.fetch_add(u.applied, std::memory_order_relaxed);
            report->prio_dropped.fetch_add(u.dropped, std::memory_order_relaxed);
          }
        } else if (kind == 5 || kind == 6) {
          // Rewrite a few of the newest steps of an env (where the other learners rewrite too), as version
          // (slot + 1) << 40 | call.
          const uint64_t env = rng() % buf.num_envs();
          const uint64_t head = heads[env];
          for (int i = 0; i < 3 && head > 8; ++i) {
            marked_update(*s, report, index, env, head - 1 - rng() % 8, ((slot + 1) << 40) | call);
          }
        } else if (rng() % 2 == 0) {
          report->waits.fetch_add(1, std::memory_order_relaxed);
          const uint64_t most = buf.num_envs() * buf.capacity();
          s->wait(View::online, std::min(most, s->size(View::online) + 4), 5);  // a kill here leaves the slot's sleeper counted
        } else {
          s->reset_online_queue(rng() % 2 == 0 ? OnlineReset::now : OnlineReset::sampled);
        }
      } catch (const Error& e) {
        if (e.errc() != Errc::empty_view) throw;
      }
      report->in_call[index].store(0, std::memory_order_relaxed);
      report->calls.fetch_add(1, std::memory_order_relaxed);
      if (call % 2 == 0) ::usleep(200);
    }
  });
}

// The slot whose lease `pid` holds, if any (the pid is dead and reaped: its lease words no longer move).
inline std::optional<uint64_t> slot_of(const Buffer& buf, pid_t pid) {
  for (uint64_t r = 0; r < segment_of(buf).max_learners(); ++r) {
    if (layout::owner_pid(detail::learner_slot(segment_of(buf), r).lease.lease.load()) == static_cast<uint64_t>(pid)) {
      return r;
    }
  }
  return std::nullopt;
}

// The torture's processes and what the parent counts of their kills.
struct Torture {
  static constexpr uint64_t kEnvs = 8;
  static constexpr uint64_t kSlots = 3;
  static constexpr std::size_t kWriters = 2;
  const std::string name;
  Report* report;
  const Buffer& buf;
  std::vector<std::vector<uint64_t>> slices = std::vector<std::vector<uint64_t>>(kWriters);
  std::vector<pid_t> writers = std::vector<pid_t>(kWriters), learners = std::vector<pid_t>(kSlots);
  uint64_t seed = 1;
  std::vector<uint64_t> holder_kills = std::vector<uint64_t>(kSlots, 0);  // kills of the slot's lease holder
  std::set<StepKey> excused;  // steps a killed learner may have left mixed (documented)
  uint64_t learner_kills = 0, writer_kills = 0, kills_in_call = 0, kills_in_update = 0;
  Rng rng{17};

  Torture(std::string n, Report* r, Buffer& b) : name(std::move(n)), report(r), buf(b) {
    for (uint64_t e = 0; e < kEnvs; ++e) slices[e % kWriters].push_back(e);
    for (std::size_t w = 0; w < kWriters; ++w) {
      writers[w] = spawn([&, w, s = seed++] { torture_writer(name, slices[w], s, report); });
    }
    {
      Sampler first(b);  // the learners start once every env has steps (the parent's slot is released after)
      REQUIRE(first.wait(View::replay, kEnvs * 8, 10'000));
    }
    for (std::size_t i = 0; i < kSlots; ++i) {
      learners[i] = spawn([&, i, s = seed++] { torture_learner(name, i, i, s, report); });
    }
  }

  // Kills learner process i; the slot its lease held, if any.
  std::optional<uint64_t> kill_learner(std::size_t i) {
    kills_in_call += report->in_call[i].load();
    kills_in_update += report->updating[i].load() != 0;
    CHECK_MESSAGE(kill_and_reap(learners[i]), "a learner process exited on its own (see its stderr)");
    ++learner_kills;
    excuse_marked(report, i, excused);
    report->in_call[i].store(0);
    const std::optional<uint64_t> held = slot_of(buf, learners[i]);
    if (held) ++holder_kills[*held];
    return held;
  }

  // Kills a learner (2 times in 3) or a writer, and starts its successor.
  void kill_one() {
    if (rng() % 3 != 0) {
      const std::size_t i = rng() % kSlots;
      const std::optional<uint64_t> held = kill_learner(i);
      // Half of the new learners ask for the dead one's slot by rank, half take the first free (or dead) slot.
      std::optional<uint64_t> preferred;
      if (rng() % 2 == 0) preferred = held ? *held : i;
      learners[i] = spawn([&, i, preferred, s = seed++] { torture_learner(name, i, preferred, s, report); });
    } else {
      const std::size_t w = rng() % kWriters;
      CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
      ++writer_kills;
      writers[w] = spawn([&, w, s = seed++] { torture_writer(name, slices[w], s, report); });
    }
  }

  void kill_all() {
    for (std::size_t i = 0; i < kSlots; ++i) kill_learner(i);
    for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
  }
};

// After the torture, with a new Sampler of every slot and a Writer of every env (each took its dead holder's lease
// over and repaired what it left: locks, walks, sleepers): at least one takeover per dead holder, none without a
// death, no walk, sleeper or lock left, no update section open, every tree exact. The takeovers in all.
uint64_t check_repaired(const Buffer& buf, const Torture& t) {
  const layout::GlobalControl& g = segment_of(buf).global_control();
  uint64_t takeovers_total = 0;
  for (uint64_t r = 0; r < Torture::kSlots; ++r) {
    const auto w = detail::learner_slot(segment_of(buf), r);
    CAPTURE(r);
    // At least one takeover per dead holder seen at its kill, and at most one per death: a repairer of a dead
    // updater (or a new learner taking the first dead slot) may take the slot over between the kill and this test's
    // look at who held it, and a repairer killed while it held a slot is a dead holder of that slot too.
    CHECK(w.lease.takeovers.load() >= t.holder_kills[r]);
    takeovers_total += w.lease.takeovers.load();
    CHECK(w.priority_walk.load() == 0);
    CHECK(w.waiters.load() == 0);
    CHECK(w.waiting_rows.load() == 0);
  }
  CHECK(g.waiters.load() == 0);  // every dead learner's sleepers were taken back, nobody else's
  for (uint64_t e = 0; e < Torture::kEnvs; ++e) {
    const layout::EnvControl& c = segment_of(buf).env_control(e);
    CAPTURE(e);
    CHECK((c.claimed.load() & ~layout::kClaimMask) == 0);  // no update lock left held
    CHECK(c.update_seq.load() % 2 == 0);                  // no update section left open
    CHECK(tree_vs_rebuild(buf, e) == "");
  }
  CHECK(takeovers_total <= t.learner_kills + t.writer_kills);  // no takeover without a death
  return takeovers_total;
}

TEST_CASE("learner processes and writer processes SIGKILLed at random on one buffer with priorities: no torn row, "
          "one takeover per dead slot holder, exact trees, no lock held and no update_seq odd afterwards") {
  const auto start = Clock::now();
  const uint64_t slots = Torture::kSlots;
  SegmentGuard guard(unique_name("lproc-torture"));
  Shared<Report> report;
  Buffer buf = Buffer::create(guard.name(), Torture::kEnvs, 64, kPayloadSchema,
                              {.priority_exponent = 0.6, .max_learners = slots});
  Torture t(guard.name(), report.get(), buf);
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_seconds(3.0)));
  while (Clock::now() < deadline || t.learner_kills < 3 || t.writer_kills == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(15 + t.rng() % 60));
    t.kill_one();
  }
  const double ran_s = std::chrono::duration<double>(Clock::now() - start).count();
  t.kill_all();

  std::vector<Sampler> mine;
  for (uint64_t r = 0; r < slots; ++r) mine.emplace_back(buf, SamplerOptions{.rank = r});
  std::vector<uint64_t> every_env(Torture::kEnvs);
  for (uint64_t e = 0; e < Torture::kEnvs; ++e) every_env[e] = e;
  const Writer all(buf, every_env);
  check_repaired(buf, t);
  uint64_t excused_stored = 0, excused_rows = 0;
  CHECK(verify_stored(buf, t.excused, &excused_stored) == "");
  const std::string bad = unexcused(report.get(), t.excused, &excused_rows);

  // The parent's learners sample sound rows (by priority too) from what is left.
  Rng mine_rng(99);
  SampleBatch batch;
  std::vector<uint64_t> heads;
  for (uint64_t r = 0; r < slots; ++r) {
    read_heads(buf, heads);
    mine[r].sample(View::replay, 64, 4, 0.0, mine_rng, batch, {.prioritized = true});
    check_batch(buf, batch, heads, report.get(), kMaxProcs);
  }
  MESSAGE(fmt::format("{} learner kills ({} inside a call, {} inside try_update; holders per slot {}/{}/{}), {} "
                      "writer kills; new learners: {} by rank, {} first free; {} calls, {} rows checked, {} "
                      "try_update ({} applied), {} priorities set, {} dropped, {} waits; {} excused mixed steps "
                      "({} rows, {} stored); the torture ran for {:.3f} s",
                      t.learner_kills, t.kills_in_call, t.kills_in_update, t.holder_kills[0], t.holder_kills[1],
                      t.holder_kills[2], t.writer_kills, report->ranked.load(), report->first_free.load(),
                      report->calls.load(), report->rows.load(), report->updates.load(),
                      report->updates_applied.load(), report->prio_applied.load(), report->prio_dropped.load(),
                      report->waits.load(), t.excused.size(), excused_rows, excused_stored, ran_s));
  CHECK_MESSAGE(bad == "", bad);
  CHECK(excused_rows == 0);    // no sampled row ever showed a killed learner's mixed step
  CHECK(excused_stored == 0);  // and none is left inside a view
  CHECK(report->failures.load() == 0);
  CHECK(report->rows.load() > 0);
  CHECK(report->updates_applied.load() > 0);
  CHECK(report->prio_applied.load() > 0);
  CHECK(t.holder_kills[0] + t.holder_kills[1] + t.holder_kills[2] > 0);
}

}  // namespace shmreplay::test::learner_processes
