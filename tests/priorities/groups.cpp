// tests/priorities/groups.cpp: drawing several rows at once (the priority planner's draw groups): a group of
// descents, planned from a view's sums read once, finds, row for row, what one find_step each finds, and a planner that draws in groups returns the
// same rows from the same engine as one that draws one row at a time.
// Part of test_priorities (tests/CMakeLists.txt); its helpers are in priorities_helpers.hpp.
#include "priorities_helpers.hpp"

#include "detail/sampling/priority_planner.hpp"

namespace {

// Env e's tree of `trees`, each a LocalTree of one capacity, for the planner.
struct LocalTrees final : detail::PriorityTrees {
  std::vector<std::unique_ptr<LocalTree>> trees;
  detail::PriorityTreeView tree(std::size_t env) const noexcept override { return trees[env]->tree; }
};

struct NoEpisodes final : detail::EpisodeStarts {
  uint64_t episode_start(std::size_t, uint64_t) const noexcept override { return 0; }
};

}  // namespace

TEST_CASE("a group of descents in several trees, planned from sums read before, finds the step one find_step finds") {
  std::mt19937_64 rng(5);
  for (const uint64_t cap : {1u, 2u, 5u, 8u, 13u, 100u}) {
    std::vector<std::unique_ptr<LocalTree>> trees;
    for (int t = 0; t < 3; ++t) {
      trees.push_back(std::make_unique<LocalTree>(cap));
      for (uint64_t s = 0; s < cap; ++s) {
        detail::set_new_priority(trees.back()->tree, s, static_cast<double>(rng() % 4) * 0.5);  // zeros too
      }
    }
    for (int round = 0; round < 200; ++round) {
      const std::size_t n = 1 + rng() % detail::kDescentGroup;
      std::vector<const std::atomic<uint64_t>*> words(n);
      std::vector<double> targets(n);
      std::vector<uint64_t> slots(n), lo(n), hi(n), expect(n);
      std::vector<detail::Descent> plans(n);
      for (std::size_t i = 0; i < n; ++i) {
        const detail::PriorityTree& t = trees[rng() % trees.size()]->tree;
        lo[i] = rng() % (3 * cap);
        hi[i] = lo[i] + 1 + rng() % cap;  // wrapped or not, partial or the whole ring
        const double total = detail::range_weight(t, lo[i], hi[i]);
        // Inside the range's total mostly; at and past it sometimes (clamped), and NaN once in a while.
        const double u = rng() % 17 == 0 ? std::nan("") : total * static_cast<double>(rng() % 1100) / 1000.0;
        expect[i] = detail::find_step(t, lo[i], hi[i], u);
        plans[i] = detail::plan_descent(t, lo[i], hi[i], u);
        // Planned from sums read before (the planner's prepare), the same descent.
        const detail::Descent from_sums =
            detail::plan_descent(detail::range_sums(t, lo[i], hi[i]), lo[i] % cap, hi[i] - lo[i], cap, u);
        CHECK(std::bit_cast<uint64_t>(from_sums.target) == std::bit_cast<uint64_t>(plans[i].target));
        CHECK(from_sums.first_slot == plans[i].first_slot);
        CHECK(from_sums.last_slot == plans[i].last_slot);
        CHECK(from_sums.lo_slot == plans[i].lo_slot);
        words[i] = t.words;
        targets[i] = plans[i].target;
      }
      detail::descend_group(words, std::bit_ceil(cap), targets, slots);
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(cap);
        CAPTURE(i);
        CHECK(plans[i].step_of(lo[i], cap, slots[i]) == expect[i]);
      }
    }
  }
}

TEST_CASE("a priority planner told how many rows come draws the same rows from the same engine as without") {
  // Without a leaf of weight 0, a draw takes one uniform and no redraw: the group's rows, aimed in the engine's
  // order and descended together, are the rows one draw at a time gives. (With zeros the redraws come in another
  // order: the chi-square tests through the Sampler cover those.)
  LocalTrees trees;
  std::mt19937_64 gen(9);
  const uint64_t cap = 50;
  for (int e = 0; e < 4; ++e) {
    trees.trees.push_back(std::make_unique<LocalTree>(cap));
    for (uint64_t s = 0; s < cap; ++s) {
      detail::set_new_priority(trees.trees.back()->tree, s, 0.25 + static_cast<double>(gen() % 7));
    }
  }
  const NoEpisodes starts;
  // Whole rings, partial views, a wrapped one, and an empty env.
  const std::vector<detail::EnvView> views = {{0, 50}, {60, 90}, {130, 160}, {7, 7}};
  detail::PriorityPlanner grouped(trees, starts), single(trees, starts);
  REQUIRE(grouped.prepare(views, 3, 0.0, {}));
  REQUIRE(single.prepare(views, 3, 0.0, {}));
  Rng a(17), b(17);
  for (const std::size_t rows : {1u, 5u, 16u, 40u}) {
    grouped.expect_draws(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::optional<detail::Draw> g = grouped.draw(a);
      const std::optional<detail::Draw> s = single.draw(b);
      REQUIRE(g.has_value());
      REQUIRE(s.has_value());
      CHECK(*g == *s);
    }
  }
  CHECK(a() == b());  // and the engines consumed alike
}
