// tests/planner/recency.cpp: the recency planner (SampleOptions::recency_half_life) against its reference model:
// every start of a view weighs min(r, L)^power 2^(-age / half_life), age = hi - 1 - p in its env. The draws
// (chi-square), a wrong model rejected, the exact total weight, and the limits of a very long and a very short
// half-life. Part of test_planner (tests/CMakeLists.txt); its helpers are in planner_helpers.hpp.
#include "planner_helpers.hpp"

namespace {

// The reference model of recency: cross's cells, each weight times 2^(-age / half_life).
std::vector<Cell> recency_cells(const std::vector<EnvView>& views, uint64_t length, double power, double half_life) {
  std::vector<Cell> cells = reference(views, nullptr, length, power, {});
  for (Cell& c : cells) c.weight *= std::exp2(-static_cast<double>(views[c.env].hi - 1 - c.start) / half_life);
  return cells;
}

double total_of(const std::vector<Cell>& cells) {
  double total = 0.0;
  for (const Cell& c : cells) total += c.weight;
  return total;
}

PlanOptions recency(double half_life) { return {Episodes::cross, 1, half_life}; }

// Views whose older parts hold many starts with L steps left (the geometric series), beside short ones.
const std::vector<EnvView> kLongViews = {{0, 40}, {100, 160}, {3, 9}, {7, 7}};

}  // namespace

TEST_CASE("recency draws every start with probability min(r, L)^power 2^(-age / half_life) over the total") {
  detail::RecencyPlanner planner;
  uint64_t seed = 500;
  for (const auto* views : {&kViews, &kLongViews}) {
    for (const uint64_t length : {1u, 2u, 5u, 12u}) {
      for (const double power : {0.0, 1.0, 2.0}) {
        for (const double half_life : {0.7, 3.0, 16.0, 1e4}) {
          CAPTURE(views->size());
          CAPTURE(length);
          CAPTURE(power);
          CAPTURE(half_life);
          const std::vector<Cell> cells = recency_cells(*views, length, power, half_life);
          // Pool nothing: the smallest expected count must stay sizeable for the chi-square to hold.
          double smallest = 1.0;
          for (const Cell& c : cells) smallest = std::min(smallest, c.weight / total_of(cells));
          if (smallest * 60000 < 5) continue;
          check_cells(planner, *views, cells, length, power, recency(half_life), seed++);
          // total_weight is the model's sum, in the same units.
          CHECK(planner.total_weight() == doctest::Approx(total_of(cells)).epsilon(1e-12));
        }
      }
    }
  }
  CHECK(seed > 540);  // most combinations were checked
}

TEST_CASE("recency draws are rejected against a wrong half-life and against no decay: the test has power") {
  detail::RecencyPlanner planner;
  const uint64_t length = 5;
  const double power = 1.0;
  REQUIRE(planner.prepare(kLongViews, length, power, recency(16.0)));
  for (const auto& wrong : {recency_cells(kLongViews, length, power, 20.0),
                            reference(kLongViews, nullptr, length, power, {})}) {
    Rng rng(77);
    const Tally t = tally(planner, wrong, rng, 60000);
    CHECK(t.outside == 0);
    CHECK(chi_square(t, wrong, 60000) > bound(wrong));
  }
}

TEST_CASE("the total weight is exact where the series is long: a million starts, half-lives short to huge") {
  detail::RecencyPlanner planner;
  const std::vector<EnvView> views = {{0, 1'000'000}, {5, 300'000}};
  for (const double half_life : {0.5, 100.0, 1e5, 1e12}) {
    for (const uint64_t length : {1u, 64u}) {
      CAPTURE(half_life);
      CAPTURE(length);
      REQUIRE(planner.prepare(views, length, 1.0, recency(half_life)));
      // The sum start by start, in long double (a sum of a million terms in double would carry its own error).
      long double sum = 0.0L;
      for (const EnvView& v : views) {
        for (uint64_t p = v.lo; p < v.hi; ++p) {
          const long double age = static_cast<long double>(v.hi - 1 - p);
          sum += static_cast<long double>(std::min<uint64_t>(v.hi - p, length)) * std::exp2(-age / half_life);
        }
      }
      CHECK(planner.total_weight() == doctest::Approx(static_cast<double>(sum)).epsilon(1e-9));
    }
  }
}

TEST_CASE("a huge half-life draws what the closed form draws, and a tiny one only each env's newest step") {
  detail::RecencyPlanner planner;
  detail::ClosedFormPlanner closed;
  REQUIRE(planner.prepare(kViews, 5, 1.0, recency(1e15)));
  REQUIRE(closed.prepare(kViews, 5, 1.0, {}));
  CHECK(planner.total_weight() == doctest::Approx(closed.total_weight()).epsilon(1e-9));
  check_distribution(planner, kViews, nullptr, 5, 1.0, recency(1e15), 901);

  REQUIRE(planner.prepare(kViews, 3, 2.0, recency(1e-3)));  // older steps weigh 2^-1000 and less
  Rng rng(5);
  for (int i = 0; i < 2000; ++i) {
    const Draw d = planner.draw_one(rng);
    REQUIRE(d.start == kViews[d.env].hi - 1);
    CHECK(d.steps == 1);
  }
  // Three non-empty envs, each newest start weighing 1^2 = 1.
  CHECK(planner.total_weight() == doctest::Approx(3.0));
}

TEST_CASE("recency draws stay inside the views with their steps left, for half-lives short and long") {
  detail::RecencyPlanner planner;
  for (const double half_life : {0.01, 2.0, 1e6}) {
    REQUIRE(planner.prepare(kLongViews, 7, 0.5, recency(half_life)));
    Rng rng(3);
    for (int i = 0; i < 20000; ++i) {
      const Draw d = planner.draw_one(rng);
      const EnvView v = kLongViews[d.env];
      REQUIRE(d.start >= v.lo);
      REQUIRE(d.start < v.hi);
      REQUIRE(d.steps == std::min<uint64_t>(7, v.hi - d.start));
      CHECK(d.relative_probability == 1.0);
    }
  }
}
