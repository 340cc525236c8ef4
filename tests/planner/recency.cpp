// tests/planner/recency.cpp: the recency planner (SampleOptions::recency_half_life) against its reference model:
// every start of a view weighs min(r, L)^power 2^(-age / half_life), age = hi - 1 - p in its env. The draws
// (chi-square), a wrong model rejected, the exact total weight, and the limits of a very long and a very short
// half-life. Part of test_planner (tests/CMakeLists.txt); its helpers are in planner_helpers.hpp.
#include <numbers>

#include "planner_helpers.hpp"
#include "support.hpp"

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

TEST_CASE("recency draws ages past the first table's 4096 terms in their exact proportions, block edges included") {
  // One env of 300,000 starts, L = 1: age a weighs q^a. Half-lives that put most draws past the first 4,096 ages
  // (the block lookup) and one so long that the blocks themselves are nearly even. Bins: each age around the first
  // block edges alone (an off-by-one between blocks shows there), the rest in bands of 512 ages, pooled where the
  // expected count is small.
  const uint64_t n = 300'000;
  const std::vector<EnvView> views = {{0, n}};
  const uint64_t kBlock = detail::GeometricTable::kSize;
  uint64_t seed = 77;
  for (const double half_life : {3000.0, 20'000.0, 1e6}) {
    CAPTURE(half_life);
    detail::RecencyPlanner planner;
    REQUIRE(planner.prepare(views, 1, 0.0, recency(half_life)));
    std::vector<uint64_t> edges;  // bin b holds ages [edges[b], edges[b + 1])
    for (uint64_t a = 0; a < n; a += 512) {
      edges.push_back(a);
      for (const uint64_t block : {kBlock, 2 * kBlock, 3 * kBlock}) {
        if (block >= a && block < a + 512) {
          for (uint64_t e = block - 3; e <= block + 3; ++e) edges.push_back(e);
          edges.push_back(block + 4);
        }
      }
    }
    edges.push_back(n);
    std::sort(edges.begin(), edges.end());
    edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
    const double c = std::numbers::ln2 / half_life;
    const auto mass = [&](uint64_t from, uint64_t to) {  // sum of q^a over [from, to), in long double
      return static_cast<double>((std::exp(-static_cast<long double>(from) * c) -
                                  std::exp(-static_cast<long double>(to) * c)) /
                                 (1.0L - std::exp(-static_cast<long double>(c))));
    };
    const double total = mass(0, n);
    const uint64_t draws = 400'000;
    std::vector<double> prob;
    for (std::size_t b = 0; b + 1 < edges.size(); ++b) prob.push_back(mass(edges[b], edges[b + 1]) / total);
    std::vector<uint64_t> counts(prob.size(), 0);
    Rng rng(seed++);
    uint64_t past_table = 0;
    for (uint64_t i = 0; i < draws; ++i) {
      const Draw d = planner.draw_one(rng);
      REQUIRE(d.start < n);
      const uint64_t age = n - 1 - d.start;
      past_table += age >= kBlock;
      const auto it = std::upper_bound(edges.begin(), edges.end(), age);
      ++counts[static_cast<std::size_t>(it - edges.begin()) - 1];
    }
    CHECK(past_table > draws / 4);  // the block lookup was exercised
    // Pool bins expected below 20 draws into their neighbour (the far tail of the short half-lives).
    std::vector<uint64_t> pooled_counts;
    std::vector<double> pooled_prob;
    for (std::size_t b = 0; b < prob.size(); ++b) {
      if (!pooled_prob.empty() && pooled_prob.back() * draws < 20) {
        pooled_prob.back() += prob[b];
        pooled_counts.back() += counts[b];
      } else {
        pooled_prob.push_back(prob[b]);
        pooled_counts.push_back(counts[b]);
      }
    }
    const double x = test::chi_square(pooled_counts, pooled_prob, static_cast<double>(draws));
    CAPTURE(pooled_prob.size());
    CHECK(x < test::chi_square_bound(static_cast<double>(pooled_prob.size() - 1)));
    CHECK(planner.total_weight() == doctest::Approx(total).epsilon(1e-9));
  }
}
