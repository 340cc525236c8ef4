// tests/priorities/crashes.cpp: killed parties: a walk left half done is redone by whoever takes the role over, and
// writer processes SIGKILLed while the learner samples by priority and updates.
// Part of test_priorities (tests/CMakeLists.txt); its helpers are in priorities_helpers.hpp.
#include "priorities_helpers.hpp"

TEST_CASE("a walk left half done by a killed writer or learner is redone by whoever takes its role over") {
  SegmentGuard guard(unique_name("priorepair"));
  const uint64_t cap = 16;
  Buffer buf = Buffer::create(guard.name(), 2, cap, kSchema, {.priority_exponent = 1.0});
  {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    for (int i = 0; i < 20; ++i) push(w, buf, static_cast<uint64_t>(i % 2), static_cast<float>(i % 5));
  }
  const detail::PriorityTree tree{segment_of(buf).priority_tree(0), buf.priority_leaves(), buf.capacity()};
  const auto scribble_path = [&](uint64_t slot) {  // what a walk killed before its first store leaves: stale sums
    for (uint64_t n = (tree.leaves + slot) / 2; n >= 1; n /= 2) tree.words[n].store(std::bit_cast<uint64_t>(1e9));
  };
  // A writer killed between its claim and its head store, after its leaf store: a child reserves a step of env 0
  // (claimed = head + 1) and stops; its walk is then undone, and it is killed.
  const pid_t child = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Writer w(b, std::vector<uint64_t>{0});
    StepSlot slot = w.reserve(0);
    for (;;) ::pause();
  });
  const uint64_t head = segment_of(buf).env_control(0).head.load();
  while ((segment_of(buf).env_control(0).claimed.load() & layout::kClaimMask) != head + 1) std::this_thread::yield();
  scribble_path(head % cap);
  REQUIRE(kill_and_reap(child));
  CHECK(check_sums(tree) != "");
  {
    Writer replacement(buf, std::vector<uint64_t>{0});  // takes the dead lease over and redoes the walk
    CHECK(replacement.takeovers() == 1);
    CHECK(check_sums(tree) == "");
  }
  // A learner killed inside update_priorities: its walk is recorded in priority_walk.
  const pid_t doomed = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Sampler s(b);
    for (;;) ::pause();
  });
  while (segment_of(buf).global_control().learner_lease.load() == 0) std::this_thread::yield();
  scribble_path(3);
  segment_of(buf).global_control().priority_walk.store((1ull << 40) | 3);  // env 0, slot 3
  REQUIRE(kill_and_reap(doomed));
  CHECK(check_sums(tree) != "");
  {
    Sampler next(buf);
    CHECK(check_sums(tree) == "");
    CHECK(segment_of(buf).global_control().priority_walk.load() == 0);
  }
  // A damaged word (an env past the buffer) left by a dead learner is cleared without a walk.
  const pid_t damaged = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Sampler s(b);
    for (;;) ::pause();
  });
  while (segment_of(buf).global_control().learner_lease.load() == 0) std::this_thread::yield();
  segment_of(buf).global_control().priority_walk.store((7ull << 40) | 3);  // env 6 of 2
  REQUIRE(kill_and_reap(damaged));
  Sampler after(buf);
  CHECK(segment_of(buf).global_control().priority_walk.load() == 0);
  CHECK(check_sums(tree) == "");
}

TEST_CASE("writer processes pushing with priorities are SIGKILLed while the learner samples by priority and updates "
          "what it sampled: rows are sound, and afterwards every env's tree sums exactly its stored weights") {
  SegmentGuard guard(unique_name("priotorture"));
  const uint64_t num_envs = 6;
  const uint64_t cap = 32;
  Buffer buf = Buffer::create(guard.name(), num_envs, cap, kSchema, {.priority_exponent = 0.6});
  // Every priority is positive: a view of a few steps that all had priority 0 would be refused (empty_view), rightly,
  // which is not what this test is about (it failed 3 runs in 20 that way before the priorities were kept above 0).
  const auto writer_body = [&](std::vector<uint64_t> envs, uint64_t seed) {
    Buffer b = Buffer::open(guard.name());
    Writer w(b, envs);
    std::mt19937_64 rng(seed);
    for (;;) {
      const uint64_t e = envs[rng() % envs.size()];
      if (rng() % 4 == 0) {
        StepSlot slot = w.reserve(e);
        const uint64_t step = slot.step();
        std::memcpy(slot.field(0).data(), &e, 8);
        std::memcpy(slot.field(1).data(), &step, 8);
        if (rng() % 2) slot.set_priority(static_cast<double>(1 + rng() % 100) / 10);
        slot.commit();
      } else {
        push(w, b, e, static_cast<float>(1 + rng() % 100) / 10);
      }
    }
  };
  std::vector<std::vector<uint64_t>> slices = {{0, 2, 4}, {1, 3, 5}};
  std::vector<pid_t> writers;
  uint64_t seed = 1;
  for (const auto& slice : slices) writers.push_back(spawn([&, slice, s = seed++] { writer_body(slice, s); }));
  Sampler learner(buf);
  REQUIRE(learner.wait(View::replay, num_envs * 4, 10'000));
  Rng rng(3);
  SampleBatch batch;
  uint64_t rows = 0, bad = 0, kills = 0, applied = 0, dropped = 0;
  std::vector<float> prios;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  auto next_kill = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  while (std::chrono::steady_clock::now() < until) {
    const View view = rng() % 2 != 0 && learner.size(View::online) > 0 ? View::online : View::replay;
    learner.sample(view, 64, 4, 0.0, rng, batch, {.prioritized = true, .importance_exponent = 0.4});
    learner.reset_online_queue();
    for (std::size_t r = 0; r < batch.rows(); ++r, ++rows) {
      for (std::size_t t = 0; t < 4 && batch.valid(r, t); ++t) {
        bad += batch.field_as<uint64_t>(0)[r * 4 + t] != batch.env_ids()[r] ||
               batch.field_as<uint64_t>(1)[r * 4 + t] != batch.start_steps()[r] + t;
      }
      bad += !(batch.weights()[r] > 0 && batch.weights()[r] <= 1);
    }
    prios.resize(batch.rows());
    for (float& p : prios) p = static_cast<float>(1 + rng() % 1000) / 100;
    const PriorityUpdateResult u = learner.update_priorities(batch.env_ids(), batch.start_steps(), prios);
    applied += u.applied;
    dropped += u.dropped;
    if (std::chrono::steady_clock::now() >= next_kill) {
      const std::size_t w = rng() % writers.size();
      CHECK(kill_and_reap(writers[w]));
      ++kills;
      writers[w] = spawn([&, w, s = seed++] { writer_body(slices[w], s); });
      next_kill = std::chrono::steady_clock::now() + std::chrono::milliseconds(10 + rng() % 60);
    }
  }
  for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
  MESSAGE(fmt::format("{} kills, {} rows checked, {} priority updates applied, {} dropped (overwritten)", kills, rows,
                      applied, dropped));
  CHECK(bad == 0);
  CHECK(kills > 0);
  // The last writers died unreplaced, possibly inside a walk: their replacement is what repairs it.
  Writer all(buf, std::vector<uint64_t>{0, 1, 2, 3, 4, 5});
  for (uint64_t e = 0; e < num_envs; ++e) {
    const detail::PriorityTree tree{segment_of(buf).priority_tree(e), buf.priority_leaves(), buf.capacity()};
    CHECK(check_sums(tree) == "");
    double leaves = 0;
    for (uint64_t s = 0; s < cap; ++s) leaves += detail::slot_weight(tree, s);
    CHECK(detail::range_weight(tree, 0, cap) == doctest::Approx(leaves));
  }
}
