// Policy versions, the learner's side: a sample with a window draws exactly from the steps inside it (chi-square,
// a wrong model rejected), never outside it with writers pushing and several learner ranks, reports the version it
// drew against, and counts the rows' version ages (docs/design/policy.md).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "policy/policy_helpers.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;
using namespace shmreplay::test::staggered;  // the buffer the tests below sample (policy_helpers.hpp)

TEST_CASE("a sample with a policy window draws uniformly from exactly the steps inside it (chi-square), and a "
          "model that ignores the window is rejected") {
  PolicyRig rig("policy-window", kEnvs, kCap);
  fill(rig.buf);
  Sampler s(rig.buf);
  constexpr uint64_t kVersion = 14;
  constexpr uint64_t kStale = 4;  // versions >= 10: env 0 steps 20..49 (of 18..49), env 1 30..39 (of 8..39), env 2 none
  const PolicyState st = s.publish_policy(kVersion, kStale);
  CHECK(st.version == kVersion);
  CHECK(st.max_staleness == kStale);
  std::vector<double> inside(kEnvs * kCap, 0.0), everything(kEnvs * kCap, 0.0);
  double n_inside = 0;
  for (uint64_t e = 0; e < kEnvs; ++e) {
    for (uint64_t p = kSteps[e] - kCap; p < kSteps[e]; ++p) {
      everything[cell(e, p)] = 1.0 / static_cast<double>(kEnvs * kCap);
      if (version_of(e, p) >= kVersion - kStale) {
        inside[cell(e, p)] = 1.0;
        ++n_inside;
      }
    }
  }
  REQUIRE(n_inside == 30 + 10);
  for (double& p : inside) p /= n_inside;
  Rng rng(7);
  SampleBatch batch;
  std::vector<uint64_t> counts(kEnvs * kCap, 0);
  uint64_t outside = 0;
  constexpr std::size_t kCalls = 200, kRows = 500;
  for (std::size_t c = 0; c < kCalls; ++c) {
    s.sample_transitions(View::replay, kRows, rng, batch);
    CHECK(batch.policy_version() == kVersion);
    REQUIRE(batch.policy_floor() == kVersion - kStale);
    const auto versions = batch.field_as<uint32_t>(0);
    const auto envs = batch.field_as<uint64_t>(1);
    const auto steps = batch.field_as<uint64_t>(2);
    for (std::size_t r = 0; r < kRows; ++r) {
      if (versions[r] < kVersion - kStale) ++outside;
      ++counts[cell(envs[r], steps[r])];
    }
  }
  const double n = kCalls * kRows;
  CHECK(outside == 0);
  CHECK(chi_square(counts, inside, n) < chi_square_bound(n_inside - 1));
  CHECK(chi_square(counts, everything, n) > chi_square_bound(kEnvs * kCap - 1));
  // The slot's version ages: every row counted, each of age 0 to 3.
  const SegmentInfo info = Inspector(rig.guard.name()).snapshot();
  CHECK(info.learner.counters[*counter_index(CounterScope::learner, "version_age_rows")] == n);
}

TEST_CASE("a call's max_staleness overrides the published window, and without either every step is drawn") {
  PolicyRig rig("policy-override", kEnvs, kCap);
  fill(rig.buf);
  Sampler s(rig.buf);
  Rng rng(3);
  SampleBatch batch;
  s.sample_transitions(View::replay, 2000, rng, batch);  // nothing published: no window
  CHECK_FALSE(batch.policy_floor().has_value());
  bool saw_old = false;
  for (const uint32_t v : batch.field_as<uint32_t>(0)) saw_old = saw_old || v == 0;
  CHECK(saw_old);  // env 2's steps 13..19 are version 0
  s.publish_policy(4, std::nullopt);  // a version without a window
  s.sample_transitions(View::replay, 2000, rng, batch);
  CHECK_FALSE(batch.policy_floor().has_value());
  CHECK(batch.policy_version() == 4);
  s.sample_transitions(View::replay, 2000, rng, batch, {.max_staleness = 1});  // versions >= 3
  REQUIRE(batch.policy_floor() == 3);
  for (const uint32_t v : batch.field_as<uint32_t>(0)) REQUIRE(v >= 3);
  std::string msg;
  CHECK(error_of([&] { s.sample_transitions(View::replay, 8, rng, batch, {.max_staleness = 0}); }, &msg) == 0);
  s.publish_policy(100, 5);  // every stored version is below 95
  CHECK(error_of([&] { s.sample_transitions(View::replay, 8, rng, batch); }, &msg) == code(Errc::empty_view));
  CHECK(contains(msg, "none of its 96 steps lies inside the policy window (version 100: versions >= 95)"));
  CHECK(s.total_weight(View::replay, 1, 0.0) == 0.0);
  CHECK(s.total_weight(View::replay, 1, 0.0, {.max_staleness = 100}) == 96.0);
}

TEST_CASE("the published version only grows, and a window needs a policy-version field") {
  PolicyRig rig("policy-grows", 1, 8);
  Sampler s(rig.buf);
  CHECK(s.publish_policy(5, 2).version == 5);
  const PolicyState st = s.publish_policy(3, 4);  // an older version does not go back; the window changes
  CHECK(st.version == 5);
  CHECK(st.max_staleness == 4);
  CHECK(st.publishes == 2);
  CHECK_FALSE(s.publish_policy(5, std::nullopt).max_staleness.has_value());
  SegmentGuard g(unique_name("policy-none"));
  Buffer plain = Buffer::create(g.name(), 1, 8, Schema::parse("x:f32"));
  Sampler p(plain);
  std::string msg;
  CHECK(error_of([&] { p.publish_policy(1, 2); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "it has no policy-version field"));
  CHECK(p.publish_policy(1, std::nullopt).version == 1);  // a version alone needs no field
  Rng rng(1);
  SampleBatch b;
  CHECK(error_of([&] { p.sample_transitions(View::replay, 1, rng, b, {.max_staleness = 1}); }, &msg) ==
        code(Errc::invalid_argument));
}

TEST_CASE("with a writer pushing newer versions and three learner ranks sampling, no row comes from outside the "
          "window in 10^7 draws") {
  PolicyRig rig("policy-race", 4, 64, 3);
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> newest{0};
  {
    Writer w(rig.buf, {0, 1, 2, 3});
    for (uint64_t e = 0; e < 4; ++e) push_versioned(w, e, 0);
    Sampler first(rig.buf);
    first.publish_policy(0, 2);
  }
  std::thread writer([&] {
    Writer w(rig.buf, {0, 1, 2, 3});
    for (uint64_t i = 0; !stop.load(); ++i) {
      const uint64_t e = (i * i) % 4;  // 0 or 1: envs 2 and 3 keep their first step, which the window leaves
      const uint32_t v = static_cast<uint32_t>(i / 16);
      push_versioned(w, e, v);
      uint32_t seen = newest.load();
      while (seen < v && !newest.compare_exchange_weak(seen, v)) {
      }
    }
  });
  std::atomic<uint64_t> rows{0}, outside{0};
  std::vector<std::string> failures(3);  // an unexpected error of a rank's thread, reported on the test's thread
  std::vector<std::thread> learners;
  for (uint64_t rank = 0; rank < 3; ++rank) {
    learners.emplace_back([&, rank] {
      Sampler s(rig.buf, {.rank = rank});
      Rng rng = rank_rng(11, rank);
      SampleBatch batch;
      while (rows.load() < 10'000'000) {
        if (rank == 0) s.publish_policy(newest.load(), 2);
        try {
          s.sample_transitions(View::replay, 1000, rng, batch);
        } catch (const Error& e) {
          // contended: the unthrottled writer laps the 64-step rings while a rank, descheduled (three learners and a
          // writer on fewer cores), copies its rows, every round of a call; the call returns nothing, and the next
          // one goes on (what this test counts is rows outside the window, which a refused call cannot return).
          if (e.code() != make_error_code(Errc::contended)) {
            failures[rank] = e.what();
            return;
          }
          continue;
        }
        const uint64_t floor = *batch.policy_floor();
        for (const uint32_t v : batch.field_as<uint32_t>(0)) outside += v < floor ? 1 : 0;
        rows += 1000;
      }
    });
  }
  for (auto& t : learners) t.join();
  stop = true;
  writer.join();
  for (const std::string& f : failures) CHECK(f.empty());
  CHECK(rows.load() >= 10'000'000);
  CHECK(outside.load() == 0);
}

TEST_CASE("a window search whose view writers overwrote entirely says nothing of the window, not that no step is "
          "inside it") {
  // The race of the test above, made deterministic: a learner's snapshot holds steps 0..7 (versions 0..7); before
  // its search reads them, the writer laps the ring twice with versions 100 and up. The snapshot's steps are gone,
  // so the search must not conclude "none inside" (which made a call throw empty_view with the env's newer steps
  // inside the window); it reports the lap, and the next round takes a new snapshot.
  PolicyRig rig("policy-lapped", 1, 8);
  Writer w(rig.buf, {0});
  for (uint32_t v = 0; v < 8; ++v) push_versioned(w, 0, v);
  const detail::EnvView snapshot{0, 8};
  for (uint32_t v = 100; v < 116; ++v) push_versioned(w, 0, v);
  const Segment& seg = segment_of(rig.buf);
  CHECK_FALSE(sampler_parts::window_lo(seg, 0, 0, snapshot, 50).has_value());
  // A view the writer did not touch is searched as before: its first step of version >= 110, and none >= 200.
  CHECK(sampler_parts::window_lo(seg, 0, 0, {16, 24}, 110) == 18u);  // step s >= 8 has version 92 + s
  CHECK(sampler_parts::window_lo(seg, 0, 0, {16, 24}, 200) == 24u);
  CHECK(sampler_parts::window_lo(seg, 0, 0, {24, 24}, 0) == 24u);  // an empty view
}

TEST_CASE("the bounds a sampler learns follow a window that moves up, one that looks further back, and new steps") {
  PolicyRig rig("policy-bounds", kEnvs, kCap);
  fill(rig.buf);
  Sampler s(rig.buf);
  Rng rng(5);
  SampleBatch batch;
  // The oldest version each window admits, and which of env e's stored steps (18..49, 8..39, 13..44) are inside.
  const auto check = [&](uint64_t floor) {
    std::vector<uint64_t> seen(kEnvs * kCap, 0);
    for (int c = 0; c < 40; ++c) {
      s.sample_transitions(View::replay, 500, rng, batch);
      REQUIRE(batch.policy_floor() == floor);
      const auto envs = batch.field_as<uint64_t>(1);
      const auto steps = batch.field_as<uint64_t>(2);
      for (std::size_t r = 0; r < batch.rows(); ++r) {
        REQUIRE(version_of(envs[r], steps[r]) >= floor);
        ++seen[cell(envs[r], steps[r])];
      }
    }
    for (uint64_t e = 0; e < kEnvs; ++e) {
      for (uint64_t p = kSteps[e] - kCap; p < kSteps[e]; ++p) {
        CAPTURE(e);
        CAPTURE(p);
        if (version_of(e, p) >= floor) CHECK(seen[cell(e, p)] > 0);  // 20,000 draws over at most 96 steps
      }
    }
  };
  s.publish_policy(14, 4);
  check(10);
  s.publish_policy(16, 4);  // up: env 0 from step 24, env 1 from 36
  check(12);
  s.publish_policy(16, 10);  // further back: env 2's last steps too (versions 0..2 stay out)
  check(6);
  s.publish_policy(16, 14);
  check(2);
  {
    Writer w(rig.buf, {2});
    for (uint64_t p = kSteps[2]; p < kSteps[2] + 8; ++p) push_versioned(w, 2, 12);  // env 2 catches up
  }
  s.publish_policy(16, 4);
  std::vector<uint64_t> env2;
  for (int c = 0; c < 20; ++c) {
    s.sample_transitions(View::replay, 500, rng, batch);
    for (std::size_t r = 0; r < batch.rows(); ++r) {
      REQUIRE(batch.field_as<uint32_t>(0)[r] >= 12);
      if (batch.field_as<uint64_t>(1)[r] == 2) env2.push_back(batch.field_as<uint64_t>(2)[r]);
    }
  }
  CHECK(!env2.empty());
  for (const uint64_t p : env2) CHECK(p >= kSteps[2]);
}

TEST_CASE("three learner ranks drawing sequences with a window follow its exact distribution together (chi-square), "
          "and the same draws reject the distribution without the window") {
  PolicyRig rig("policy-ranks", kEnvs, kCap, 3);
  fill(rig.buf);
  {
    Sampler first(rig.buf);
    first.publish_policy(14, 4);  // versions >= 10, as the first test's window
  }
  constexpr std::size_t kLength = 4;
  constexpr double kPower = 1.0;
  // A start p of env e weighs min(head - p, L)^power; inside the window only.
  std::vector<double> inside(kEnvs * kCap, 0.0), everything(kEnvs * kCap, 0.0);
  for (uint64_t e = 0; e < kEnvs; ++e) {
    for (uint64_t p = kSteps[e] - kCap; p < kSteps[e]; ++p) {
      const double w = std::pow(static_cast<double>(std::min<uint64_t>(kSteps[e] - p, kLength)), kPower);
      everything[cell(e, p)] = w;
      if (version_of(e, p) >= 10) inside[cell(e, p)] = w;
    }
  }
  const auto normalise = [](std::vector<double>& p) {
    double total = 0;
    for (const double x : p) total += x;
    for (double& x : p) x /= total;
  };
  normalise(inside);
  normalise(everything);
  std::vector<std::vector<uint64_t>> counts(3, std::vector<uint64_t>(kEnvs * kCap, 0));
  std::vector<std::thread> ranks;
  for (uint64_t r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      Sampler s(rig.buf, {.rank = r});
      Rng rng = rank_rng(21, r);
      SampleBatch batch;
      for (int c = 0; c < 60; ++c) {
        s.sample(View::replay, 500, kLength, kPower, rng, batch);
        for (std::size_t row = 0; row < batch.rows(); ++row) {
          ++counts[r][cell(batch.env_ids()[row], batch.start_steps()[row])];
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  std::vector<uint64_t> total(kEnvs * kCap, 0);
  uint64_t outside = 0;
  for (const auto& c : counts) {
    for (std::size_t i = 0; i < c.size(); ++i) {
      total[i] += c[i];
      if (inside[i] == 0) outside += c[i];
    }
  }
  const double n = 3.0 * 60 * 500;
  CHECK(outside == 0);
  CHECK(chi_square(total, inside, n) < chi_square_bound(39));
  CHECK(chi_square(total, everything, n) > chi_square_bound(kEnvs * kCap - 1));
}
