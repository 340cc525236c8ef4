// tests/planner/draws.cpp: what each planner draws: every row against the reference model, the draws' distribution
// (chi-square) and draw probability, the period grid, rejection's switch to the exact method, torn episode starts,
// empty views and a huge power. Part of test_planner (tests/CMakeLists.txt); its helpers are in planner_helpers.hpp.
#include "planner_helpers.hpp"

TEST_CASE("the closed form draws every start with probability min(remaining, L)^power over the total") {
  detail::ClosedFormPlanner planner;
  uint64_t seed = 1;
  for (const uint64_t length : {1u, 2u, 5u, 12u}) {
    for (const double power : {0.0, 1.0, 2.0}) {
      CAPTURE(length);
      CAPTURE(power);
      check_distribution(planner, kViews, nullptr, length, power, {}, seed++);
    }
  }
  // And the test has power: counts drawn with power 2 are far from power 1's proportions.
  const std::vector<Cell> p1 = reference(kViews, nullptr, 5, 1.0, {});
  REQUIRE(planner.prepare(kViews, 5, 2.0, {}));
  Rng rng(99);
  const Tally t = tally(planner, p1, rng, 60000);
  CHECK(chi_square(t, p1, 60000) > bound(p1));
}

TEST_CASE("with a period the draws are on each view's grid lo, lo + P, ... with the grid's weights") {
  detail::PeriodPlanner planner;
  uint64_t seed = 10;
  for (const uint64_t period : {2u, 3u, 5u}) {
    for (const uint64_t length : {1u, 4u, 9u}) {
      for (const double power : {0.0, 1.0, 2.0}) {
        CAPTURE(period);
        CAPTURE(length);
        CAPTURE(power);
        check_distribution(planner, kViews, nullptr, length, power, {Episodes::cross, period}, seed++);
      }
    }
  }
}

TEST_CASE("the period planner with period 1 draws exactly what the closed form draws") {
  detail::ClosedFormPlanner closed;
  detail::PeriodPlanner period;
  for (const uint64_t length : {1u, 3u, 8u}) {
    for (const double power : {0.0, 1.5}) {
      REQUIRE(closed.prepare(kViews, length, power, {}));
      REQUIRE(period.prepare(kViews, length, power, {Episodes::cross, 1}));
      Rng a(length * 7 + 1);
      Rng b(length * 7 + 1);
      for (int i = 0; i < 5000; ++i) REQUIRE(closed.draw(a) == period.draw(b));
    }
  }
}

TEST_CASE("stop and within by rejection follow their weights, on the grid, and count their work") {
  const TableStarts starts = episodes_of(kViews, 2, 9, 3);
  SamplerStats stats;
  detail::RejectionPlanner planner(stats, starts);
  uint64_t seed = 100;
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    for (const uint64_t period : {1u, 3u}) {
      for (const double power : {0.0, 1.0, 2.0}) {
        if (mode == Episodes::within && power != 0.0) continue;  // within ignores the power
        CAPTURE(to_string(mode));
        CAPTURE(period);
        CAPTURE(power);
        const uint64_t length = mode == Episodes::within ? 2 : 4;
        const SamplerStats before = stats;
        starts.loads = 0;
        check_distribution(planner, kViews, &starts, length, power, {mode, period}, seed++, 40000);
        CHECK_FALSE(planner.exact());  // these episodes are long enough: no row ran out of proposals
        CHECK(stats.rows - before.rows == 40000);
        CHECK(stats.tries - before.tries >= 40000);
        CHECK(stats.meta_loads - before.meta_loads == starts.loads);
        CHECK(stats.exact_fallbacks == before.exact_fallbacks);
      }
    }
  }
}

TEST_CASE("the exact planner alone draws from the same distributions as rejection") {
  const TableStarts starts = episodes_of(kViews, 1, 6, 4);
  SamplerStats stats;
  detail::ExactPlanner planner(stats, starts);
  uint64_t seed = 200;
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    for (const uint64_t period : {1u, 2u}) {
      for (const double power : {0.0, 1.0, 2.0}) {
        if (mode == Episodes::within && power != 0.0) continue;
        CAPTURE(to_string(mode));
        CAPTURE(period);
        CAPTURE(power);
        const uint64_t before = stats.exact_fallbacks;
        check_distribution(planner, kViews, &starts, mode == Episodes::within ? 2 : 5, power, {mode, period},
                           seed++);
        CHECK(stats.exact_fallbacks == before + 1);  // one enumeration per prepare
      }
    }
  }
}

TEST_CASE("a row refused kMaxTries times switches the call to the exact method, with the same distribution") {
  // Episodes of 1-3 steps and L = 16 with power 2: a stop proposal is accepted with probability about (2/16)^2, so
  // some row exhausts its 64 proposals.
  const std::vector<EnvView> views = {{0, 40}, {10, 70}};
  const TableStarts starts = episodes_of(views, 1, 3, 5);
  SamplerStats stats;
  detail::RejectionPlanner planner(stats, starts);
  const Tally t = check_distribution(planner, views, &starts, 16, 2.0, {Episodes::stop, 1}, 7, 40000);
  CHECK(planner.exact());
  CHECK(stats.exact_fallbacks == 1);
  CHECK(stats.segments_enumerated > 0);
  // A new call starts with rejection again; its later snapshots are enumerated once it has switched.
  planner.begin_call();
  CHECK_FALSE(planner.exact());
  REQUIRE(planner.prepare(views, 16, 2.0, {Episodes::stop, 1}));
  CHECK(stats.exact_fallbacks == 1);  // prepare alone does not enumerate
  Rng rng(8);
  while (!planner.exact()) REQUIRE(planner.draw(rng));
  REQUIRE(planner.prepare(views, 16, 2.0, {Episodes::stop, 1}));
  CHECK(stats.exact_fallbacks == 3);  // the switch, then the fresh snapshot
  // within with one fitting start among many proposals: found through the exact method too.
  TableStarts one = episodes_of(views, 1, 1, 6);  // every step is its own episode...
  for (uint64_t s = 20; s < 36; ++s) one.start[1][s] = 20;  // ...but env 1's steps 20..35, one of 16 steps
  detail::RejectionPlanner within(stats, one);
  within.begin_call();
  REQUIRE(within.prepare(views, 16, 0.0, {Episodes::within, 1}));
  for (int i = 0; i < 200; ++i) {
    const std::optional<Draw> d = within.draw(rng);
    REQUIRE(d);
    CHECK(*d == Draw{1, 20, 16});
  }
  CHECK(within.exact());
}

TEST_CASE("an env whose episode starts read torn is never drawn, and a snapshot with nothing left gives nullopt") {
  const std::vector<EnvView> views = {{0, 30}, {0, 30}};
  TableStarts starts = episodes_of(views, 4, 8, 9);
  starts.torn_below = {30, 12};  // env 0 entirely being overwritten; env 1 below step 12
  SamplerStats stats;
  Rng rng(10);
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    CAPTURE(to_string(mode));
    detail::ExactPlanner exact(stats, starts);
    const PlanOptions o{mode, 1};
    const uint64_t length = 3;
    REQUIRE(exact.prepare(views, length, 1.0, o));
    detail::RejectionPlanner rejection(stats, starts);
    rejection.begin_call();
    REQUIRE(rejection.prepare(views, length, 1.0, o));
    for (int i = 0; i < 2000; ++i) {
      for (detail::Planner* p : {static_cast<detail::Planner*>(&exact), static_cast<detail::Planner*>(&rejection)}) {
        const std::optional<Draw> d = p->draw(rng);
        REQUIRE(d);
        CHECK(d->env == 1);  // (rows that reach below step 12 of env 1 are possible: the copy rejects them)
      }
    }
  }
  // Every start torn: the exact method finds no piece, and a row that exhausts its proposals has nothing to fall
  // back on in this snapshot.
  starts.torn_below = {30, 30};
  detail::ExactPlanner exact(stats, starts);
  CHECK_FALSE(exact.prepare(views, 3, 1.0, {Episodes::stop, 1}));
  detail::RejectionPlanner rejection(stats, starts);
  rejection.begin_call();
  REQUIRE(rejection.prepare(views, 3, 1.0, {Episodes::stop, 1}));  // proposals exist: the grid is not empty
  CHECK_FALSE(rejection.draw(rng).has_value());
  CHECK(rejection.exact());
  CHECK_FALSE(rejection.prepare(views, 3, 1.0, {Episodes::stop, 1}));  // the next snapshot: still nothing
}

TEST_CASE("empty views give no start in every planner") {
  const std::vector<EnvView> empty = {{4, 4}, {0, 0}};
  const TableStarts starts = episodes_of(empty, 1, 1, 1);
  SamplerStats stats;
  detail::ClosedFormPlanner closed;
  detail::PeriodPlanner period;
  detail::RejectionPlanner rejection(stats, starts);
  detail::ExactPlanner exact(stats, starts);
  CHECK_FALSE(closed.prepare(empty, 3, 1.0, {}));
  CHECK_FALSE(period.prepare(empty, 3, 1.0, {Episodes::cross, 2}));
  rejection.begin_call();
  CHECK_FALSE(rejection.prepare(empty, 3, 1.0, {Episodes::stop, 1}));
  CHECK_FALSE(exact.prepare(empty, 3, 1.0, {Episodes::stop, 1}));
  // within needs L steps before the head: views shorter than L have no start either.
  CHECK_FALSE(rejection.prepare(kViews, 13, 0.0, {Episodes::within, 1}));
}

TEST_CASE("views at the top of the 64-bit step range draw only inside themselves (no lo + length overflow)") {
  // A hostile segment's head can be any 64-bit value (fuzz_segment found head = 2^64 - 1): lo + length wraps.
  constexpr uint64_t kTop = ~uint64_t{0};
  const std::vector<EnvView> views = {{kTop - 3, kTop - 3}, {kTop, kTop}, {kTop - 9, kTop - 1}};
  detail::ClosedFormPlanner closed;
  detail::PeriodPlanner period;
  Rng rng(5);
  for (detail::Planner* p : {static_cast<detail::Planner*>(&closed), static_cast<detail::Planner*>(&period)}) {
    for (const uint64_t length : {uint64_t{5}, uint64_t{12}}) {
      REQUIRE(p->prepare(views, length, 1.0, {Episodes::cross, p == &closed ? 1u : 3u}));
      for (int i = 0; i < 2000; ++i) {
        const std::optional<Draw> d = p->draw(rng);
        REQUIRE(d);
        REQUIRE(d->env == 2);  // the only env with steps
        CHECK(d->start >= views[2].lo);
        CHECK(d->start < views[2].hi);
        CHECK(d->steps <= views[2].hi - d->start);
      }
    }
  }
}

TEST_CASE("a huge power puts all the weight on the longest starts without overflowing") {
  detail::ClosedFormPlanner closed;
  detail::PeriodPlanner period;
  Rng rng(11);
  for (detail::Planner* p : {static_cast<detail::Planner*>(&closed), static_cast<detail::Planner*>(&period)}) {
    REQUIRE(p->prepare(kViews, 5, 1e6, {Episodes::cross, p == &closed ? 1u : 2u}));
    std::vector<uint64_t> per_env(kViews.size(), 0);
    for (int i = 0; i < 20000; ++i) {
      const std::optional<Draw> d = p->draw(rng);
      REQUIRE(d);
      CHECK(d->steps == 5);
      ++per_env[d->env];
    }
    CHECK(per_env[1] > 0);  // every env with full-length starts is drawn
    CHECK(per_env[2] > 0);
    CHECK(per_env[3] == 0);
  }
  // Views all shorter than L: the longest remaining length is the scale, so those starts weigh 1 and are drawn.
  const std::vector<EnvView> short_views = {{0, 2}, {0, 3}};
  REQUIRE(closed.prepare(short_views, 8, 1e6, {}));
  for (int i = 0; i < 1000; ++i) {
    const std::optional<Draw> d = closed.draw(rng);
    REQUIRE(d);
    CHECK(*d == Draw{1, 0, 3});
  }
}
