// tests/episodes/records.cpp: completed-episode records and boundaries: per env in order, from every push path, after a
// writer dies between the steps of a publish, and after a tool rewrites an env (rebuild_env).
// Part of test_episodes (tests/CMakeLists.txt); its helpers are in episodes_helpers.hpp.
#include "episodes_helpers.hpp"

#include "detail/protocol/episode_queue.hpp"  // pop_records

TEST_CASE("completed-episode records arrive per env in order with their returns; a full queue drops and counts") {
  Rig rig("ep-records", Flavor::term_trunc, 3, 16, /*queue_capacity=*/4);
  std::mt19937_64 gen(4);
  // Env 0: 7 episodes, none popped: 4 kept, 3 dropped. Envs 1, 2: episodes through every push path.
  for (int k = 0; k < 7; ++k) {
    for (int i = 0; i <= k % 3; ++i) push_one_step(rig.w, rig.m, 0, false, i == k % 3, false, k % 3);
  }
  const SegmentInfo full = Inspector(rig.guard.name()).snapshot();
  CHECK(full.episode_queue_capacity == 4);
  CHECK(full.episode_fields.terminated == std::optional<std::size_t>(kTerm));
  CHECK(full.envs[0].episodes_completed == 7);
  CHECK(full.envs[0].episode_records_dropped == 3);
  CHECK(full.envs[0].episode_queue_depth == 4);
  const auto model0 = rig.m.records(0);
  CHECK(full.envs[0].last_episode_length == model0.back().length);
  CHECK(full.envs[0].last_episode_return == model0.back().episode_return);
  CHECK(full.envs[0].last_episode_end == EpisodeEnd::terminated);
  CHECK(full.envs[0].episode_start == rig.m.head(0));
  CHECK(full.episodes_completed == 7);
  std::vector<EpisodeRecord> got(16);
  REQUIRE(rig.s.pop_episodes(got) == 4);
  for (std::size_t k = 0; k < 4; ++k) CHECK(got[k] == model0[k]);  // the first four; the later ones were dropped

  // Envs 1 and 2, every push path, popped in small batches along the way: per env exactly the model's records,
  // in order, nothing dropped.
  std::map<uint64_t, std::vector<EpisodeRecord>> per_env;
  auto pop_some = [&](std::size_t most) {
    std::vector<EpisodeRecord> small(most);
    const std::size_t n = rig.s.pop_episodes(small);
    for (std::size_t k = 0; k < n; ++k) per_env[small[k].env].push_back(small[k]);
    return n;
  };
  for (int i = 0; i < 120; ++i) {
    const uint64_t env = 1 + gen() % 2;
    push_steps(rig.w, rig.m, {env}, {random_flags(gen, Flavor::term_trunc, 3)}, static_cast<int>(gen() % 3));
    if (gen() % 5 == 0) push_steps(rig.w, rig.m, {2, 1}, {{false, true, false}, {false, false, true}}, 0);
    if (i % 3 == 2) {  // often enough that the 4-record queues never fill
      while (pop_some(1 + gen() % 3) > 0) {
      }
    }
  }
  while (pop_some(3) > 0) {
  }
  const SegmentInfo after = Inspector(rig.guard.name()).snapshot();
  for (const uint64_t env : {1u, 2u}) {
    CAPTURE(env);
    CHECK(after.envs[env].episode_records_dropped == 0);
    CHECK(after.envs[env].episode_queue_depth == 0);
    CHECK(after.envs[env].episodes_completed == rig.m.records(env).size());
    CHECK(per_env[env] == rig.m.records(env));
    CHECK(per_env[env].size() > 10);
  }
  // Env 0's queue has room again: new records follow.
  push_one_step(rig.w, rig.m, 0, false, false, true);
  REQUIRE(rig.s.pop_episodes(got) == 1);
  CHECK(got[0] == rig.m.records(0).back());
  CHECK(got[0].end == EpisodeEnd::truncated);
}

TEST_CASE("records of every push path equal the model's exactly, round-robin across envs") {
  Rig rig("ep-records2", Flavor::done, 4, 8, 1024);
  std::mt19937_64 gen(12);
  for (int i = 0; i < 400; ++i) {
    std::vector<uint64_t> envs = {0, 1, 2, 3};
    std::shuffle(envs.begin(), envs.end(), gen);
    envs.resize(1 + gen() % 4);
    std::vector<std::array<bool, 3>> flags;
    for (std::size_t k = 0; k < envs.size(); ++k) flags.push_back(random_flags(gen, Flavor::done, 5));
    push_steps(rig.w, rig.m, envs, flags, static_cast<int>(gen() % 3));
  }
  std::map<uint64_t, std::vector<EpisodeRecord>> per_env;
  std::vector<EpisodeRecord> got(7);
  std::set<uint64_t> first_envs;
  for (std::size_t n; (n = rig.s.pop_episodes(got)) > 0;) {
    first_envs.insert(got[0].env);
    for (std::size_t k = 0; k < n; ++k) per_env[got[k].env].push_back(got[k]);
  }
  for (uint64_t e = 0; e < 4; ++e) CHECK(per_env[e] == rig.m.records(e));
  CHECK(first_envs.size() > 1);  // the starting env rotates
}

TEST_CASE("a writer that dies between the steps of a publish leaves boundaries and records consistent") {
  // Simulated crash points, with the library's own steps (the real-process version follows).
  Rig rig("ep-crashsim", Flavor::done, 1, 4, 16);
  Model& m = rig.m;
  for (int i = 0; i < 3; ++i) push_one_step(rig.w, m, 0, false);  // an episode in progress: steps 0-2
  const std::string name = rig.guard.name();
  Buffer& buf = rig.buf;
  auto stage_without_head = [&](bool done) {
    // Claim step head, write its bytes with `done`, stage its meta and journal, and "die" before the head store.
    layout::EnvControl& c = segment_of(buf).env_control(0);
    const uint64_t step = c.head.load();
    c.claimed.store(step + 1);
    const Step s = make_step(0, step, done, false, false);
    const auto f = fields_of(s);
    for (std::size_t k = 0; k < f.size(); ++k) {
      std::memcpy(segment_of(buf).field_data(k) + (step % 4) * kSchema[k].bytes(), f[k].data, f[k].bytes);
    }
    detail::EpisodeRoles roles(segment_of(buf));
    return detail::stage_step(segment_of(buf), 0, step, detail::read_step_flags(roles, [&](std::size_t k) {
      return static_cast<const std::byte*>(f[k].data);
    }));
  };
  {
    // 1. Died after staging an episode end for step 3, before publishing it; the replacement republishes step 3
    //    without the flag. Nothing may show the phantom end.
    Writer gone = std::move(rig.w);
  }
  CHECK(stage_without_head(true));
  Writer w2(buf, {0});
  push_one_step(w2, m, 0, false);  // step 3, no end
  push_one_step(w2, m, 0, true);   // step 4 ends the episode 0-4
  EpisodeRecord rec[4];
  REQUIRE(rig.s.pop_episodes(rec) == 1);
  CHECK(rec[0] == m.records(0)[0]);
  CHECK(rec[0].length == 5);
  Rng rng(2);
  SampleBatch out;
  rig.s.sample(View::replay, 50, 4, 1.0, rng, out, {.episodes = Episodes::stop});
  CHECK(check_rows(out, m, View::replay, 0, 50, 4, 1.0, {.episodes = Episodes::stop}) == "");

  // 2. Died after publishing an episode's last step (step 6), before queueing its record: the next writer to
  //    lease the env queues it, exactly once.
  push_one_step(w2, m, 0, false);
  {
    Writer gone = std::move(w2);
  }
  CHECK(stage_without_head(true));
  segment_of(buf).env_control(0).head.store(segment_of(buf).env_control(0).head.load() + 1);  // published; the record push never ran
  m.steps[0].push_back(make_step(0, 6, true, false, false));
  CHECK(rig.s.pop_episodes(rec) == 0);
  {
    Writer w3(buf, {0});
    REQUIRE(rig.s.pop_episodes(rec) == 1);
    CHECK(rec[0] == m.records(0)[1]);
    CHECK(rec[0].first_step == 5);
    CHECK(rec[0].length == 2);
  }
  Writer w4(buf, {0});  // a clean hand-over owes nothing
  CHECK(rig.s.pop_episodes(rec) == 0);
  push_one_step(w4, m, 0, true);
  REQUIRE(rig.s.pop_episodes(rec) == 1);
  CHECK(rec[0] == m.records(0)[2]);
  const SegmentInfo info = Inspector(name).snapshot();
  CHECK(info.envs[0].episodes_completed == 3);
  CHECK(info.envs[0].episode_records_dropped == 0);
}

TEST_CASE("after a tool rewrites an env wholesale, rebuild_env restores boundaries and the episode in progress") {
  // What a checkpoint load does to an env (new steps and counters, stale episode bookkeeping), then the repair.
  Rig rig("ep-rebuild", Flavor::term_trunc, 1, 8, 16);
  std::mt19937_64 gen(6);
  for (int i = 0; i < 21; ++i) push_one_step(rig.w, rig.m, 0, false, gen() % 4 == 0, gen() % 5 == 0);
  push_one_step(rig.w, rig.m, 0, false, true, false);
  push_one_step(rig.w, rig.m, 0, false);
  push_one_step(rig.w, rig.m, 0, false);  // an episode of 2 steps in progress: steps 22, 23
  EpisodeRecord rec[32];
  const std::size_t before = rig.s.pop_episodes(rec);
  CHECK(before == rig.m.records(0).size());
  layout::EpisodeControl& c = segment_of(rig.buf).episode_control(0);
  for (auto& j : c.journal) j.for_head.store(12345);  // stale: no slot is for the head
  for (uint64_t s = 0; s < 8; ++s) segment_of(rig.buf).step_meta(0)[s].store(0);
  detail::rebuild_env(segment_of(rig.buf), 0);
  Rng rng(3);
  SampleBatch out;
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    const SampleOptions o{.episodes = mode};
    rig.s.sample(View::replay, 100, 2, 1.0, rng, out, o);
    CHECK(check_rows(out, rig.m, View::replay, 0, 100, 2, 1.0, o) == "");
  }
  // The episode in progress continues: its record counts all of its steps (they are all stored here).
  push_one_step(rig.w, rig.m, 0, false, false, true);
  REQUIRE(rig.s.pop_episodes(rec) == 1);
  CHECK(rec[0] == rig.m.records(0).back());
  CHECK(rec[0].first_step == 22);
  CHECK(rec[0].length == 3);
}

TEST_CASE("consumers racing for one env's record queue take each record exactly once, whole, while its writer "
          "pushes episodes") {
  // Issue 34 (several learners) has several consumers of one queue; today's single learner has one. The protocol's
  // consumer, pop_records, is raced here directly from four threads while the writer pushes: a record taken twice,
  // lost, or copied from a slot the writer had reused would differ from the model's.
  Rig rig("ep-racing", Flavor::done, 1, 64, /*queue_capacity=*/8);
  constexpr std::size_t kConsumers = 4;
  constexpr int kEpisodes = 100000;
  std::atomic<bool> writing{true};
  std::vector<std::vector<EpisodeRecord>> taken(kConsumers);
  std::vector<std::thread> consumers;
  for (std::size_t k = 0; k < kConsumers; ++k) {
    consumers.emplace_back([&, k] {
      std::vector<EpisodeRecord> out(1 + k % 3);
      for (;;) {
        const bool last_round = !writing.load(std::memory_order_acquire);
        const std::size_t n = detail::pop_records(segment_of(rig.buf), 0, out);
        taken[k].insert(taken[k].end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
        if (n == 0 && last_round) return;
        if (n == 0) std::this_thread::yield();
      }
    });
  }
  // Episodes of 1 to 3 steps, each record distinct (its first step). The writer waits for room before an episode's
  // last step, so that no record is dropped and the consumers keep racing for a queue that is rarely empty.
  const layout::EpisodeControl& q = segment_of(rig.buf).episode_control(0);
  for (int e = 0; e < kEpisodes; ++e) {
    for (int i = 0; i <= e % 3; ++i) {
      while (i == e % 3 && q.queue_tail.load() - q.queue_head.load() >= 8) std::this_thread::yield();
      push_one_step(rig.w, rig.m, 0, i == e % 3);
    }
  }
  writing.store(false, std::memory_order_release);
  for (std::thread& t : consumers) t.join();

  const std::vector<EpisodeRecord> model = rig.m.records(0);
  REQUIRE(model.size() == static_cast<std::size_t>(kEpisodes));
  std::map<uint64_t, EpisodeRecord> by_first;  // the model's records by their first step
  for (const EpisodeRecord& r : model) by_first[r.first_step] = r;
  std::set<uint64_t> seen;
  std::size_t total = 0;
  for (std::size_t k = 0; k < kConsumers; ++k) {
    uint64_t previous = 0;
    for (const EpisodeRecord& r : taken[k]) {
      ++total;
      CHECK(seen.insert(r.first_step).second);  // taken once
      const auto it = by_first.find(r.first_step);
      REQUIRE(it != by_first.end());
      CHECK(r == it->second);  // whole: the record the writer pushed
      CHECK((previous == 0 || r.first_step > previous));  // each consumer's records come oldest first
      previous = r.first_step;
    }
  }
  const SegmentInfo info = Inspector(rig.guard.name()).snapshot();
  CHECK(info.envs[0].episode_queue_depth == 0);
  CHECK(info.envs[0].episode_records_dropped == 0);
  CHECK(total == model.size());  // every record taken
}
