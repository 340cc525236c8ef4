// tests/planner/table.cpp: the pieces around the planners: the env picker against upper_bound, the planner table's
// choice for every combination of options, and a step's ring slot without a division. Part of test_planner
// (tests/CMakeLists.txt); its helpers are in planner_helpers.hpp.
#include "planner_helpers.hpp"

// The reference the picker must match: std::upper_bound over the cumulative weights, and where u rounded up to
// the total, the last env of positive weight.
std::size_t reference_env(const std::vector<double>& cumulative, double u) {
  auto it = std::upper_bound(cumulative.begin(), cumulative.end(), u);
  if (it == cumulative.end()) {
    --it;
    while (it != cumulative.begin() && *it == *(it - 1)) --it;
  }
  return static_cast<std::size_t>(it - cumulative.begin());
}

TEST_CASE("the env picker gives upper_bound's env for every draw, guided or not, at bucket edges and with zeros") {
  std::mt19937_64 gen(2024);
  detail::EnvPicker picker;
  std::size_t checked = 0;
  for (const std::size_t n : std::vector<std::size_t>{1, 2, 3, 7, 16, 17, 64, 255, 256, 257, 512, 1000, 1024, 1025}) {
    for (int shape = 0; shape < 5; ++shape) {
      // Weights: equal, random, with zeros (also first and last), one dominant env, and tiny ones next to it.
      std::vector<double> w(n);
      for (std::size_t e = 0; e < n; ++e) {
        const double x = static_cast<double>(gen() >> 11) * 0x1.0p-53;
        w[e] = shape == 0 ? 1.0 : shape == 1 ? x * 100 : shape == 2 ? (x < 0.4 ? 0.0 : x) : shape == 3 ? 1e-12 : x;
      }
      if (shape == 2) w.front() = 0.0;
      if (shape == 2 && n > 1) w.back() = 0.0;
      if (shape == 3) w[n / 2] = 1e6;
      if (shape == 4 && n > 2) w[n - 2] = 1e300;
      if (std::all_of(w.begin(), w.end(), [](double v) { return v == 0.0; })) w[n / 2] = 1.0;
      double* cumulative = picker.reset(n);
      std::vector<double> reference(n);
      double total = 0.0;
      for (std::size_t e = 0; e < n; ++e) reference[e] = cumulative[e] = total += w[e];
      picker.build();
      REQUIRE(picker.total() == total);
      // Random bits, and the bits around every bucket edge of any bucket count up to 2^12, and the extremes.
      std::vector<uint64_t> bits = {0, 1, (uint64_t{1} << 53) - 1, (uint64_t{1} << 53) - 2};
      for (int i = 0; i < 2000; ++i) bits.push_back(gen() >> 11);
      for (unsigned k = 1; k <= 12; ++k) {
        for (uint64_t b = 1; b < (uint64_t{1} << k); b += 1 + (b >> 3)) {
          const uint64_t edge = b << (53 - k);
          bits.insert(bits.end(), {edge - 1, edge, edge + 1});
        }
      }
      for (const uint64_t x : bits) {
        const double u = detail::unit_of_bits53(x) * total;  // as uniform01(rng) * total
        const detail::EnvPick got = picker.pick(x);
        const std::size_t want = reference_env(reference, u);
        REQUIRE_MESSAGE(got.env == want, "n = " << n << ", shape " << shape << ", bits " << x);
        CHECK(w[got.env] > 0.0);
        CHECK(got.offset == std::max(0.0, u - (want == 0 ? 0.0 : reference[want - 1])));
        ++checked;
      }
    }
  }
  CHECK(checked > 100000);
}

TEST_CASE("the planner table picks, for every combination of options, the planner the Sampler picked before it") {
  // The choice as lib/sampler.cpp made it before the table (its PlanKind and switches), the reference here.
  // Recency (issue 47) is a row of its own, after priority.
  enum class Before { priority, recency, closed_form, period, episodes };
  const auto before = [](const SampleOptions& o, std::size_t length) {
    if (o.prioritized) return Before::priority;
    if (o.recency_half_life > 0.0) return Before::recency;
    if (o.period == 1 && (o.episodes == Episodes::cross || length == 1)) return Before::closed_form;
    return o.episodes == Episodes::cross ? Before::period : Before::episodes;
  };
  const std::map<Before, std::size_t> row_of = {
      {Before::priority, detail::kPlannerRowOf<detail::PriorityPlanner>},
      {Before::recency, detail::kPlannerRowOf<detail::RecencyPlanner>},
      {Before::closed_form, detail::kPlannerRowOf<detail::ClosedFormPlanner>},
      {Before::period, detail::kPlannerRowOf<detail::PeriodPlanner>},
      {Before::episodes, detail::kPlannerRowOf<detail::RejectionPlanner>},
  };
  for (const auto& [kind, row] : row_of) REQUIRE(row < detail::kPlannerRows);  // every planner has its row

  // Planners made as the Sampler makes them; no planner is prepared here, so the trees are never read.
  struct NoTrees final : detail::PriorityTrees {
    detail::PriorityTreeView tree(std::size_t) const noexcept override { return {}; }
  };
  SamplerStats stats;
  const TableStarts starts;
  const NoTrees trees;
  detail::Planners planners(detail::PlannerInputs{stats, starts, trees});

  int combinations = 0;
  using Selectors = std::initializer_list<std::pair<bool, double>>;  // prioritized, recency_half_life
  for (const auto& [prioritized, half_life] : Selectors{{false, 0.0}, {true, 0.0}, {false, 8.0}, {true, 8.0}}) {
    for (const Episodes episodes : {Episodes::cross, Episodes::stop, Episodes::within}) {
      for (const uint64_t period : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{64}, UINT64_MAX}) {
        for (const std::size_t length : {std::size_t{1}, std::size_t{2}, std::size_t{5}, std::size_t{64}}) {
          for (const uint64_t min_steps : {uint64_t{0}, uint64_t{10}}) {
            SampleOptions o;
            o.prioritized = prioritized;
            o.episodes = episodes;
            o.period = period;
            o.min_steps = min_steps;
            o.recency_half_life = half_life;
            CAPTURE(prioritized);
            CAPTURE(to_string(episodes));
            CAPTURE(period);
            CAPTURE(length);
            CAPTURE(min_steps);
            CAPTURE(half_life);
            const std::size_t expected = row_of.at(before(o, length));
            CHECK(detail::planner_row(o, length) == expected);
            // The planner `with` hands over is the chosen row's, as its own type.
            const std::size_t handed = planners.with(o, length, [](auto& planner) {
              return detail::kPlannerRowOf<std::remove_cvref_t<decltype(planner)>>;
            });
            CHECK(handed == expected);
            ++combinations;
          }
        }
      }
    }
  }
  CHECK(combinations == 2 * 2 * 3 * 5 * 4 * 2);
  // The reanalysed rows (issue 48) are a row of their own, before every other (check_args refuses the others with it).
  SampleOptions fresh;
  fresh.reanalysed = true;
  CHECK(detail::planner_row(fresh, 3) == detail::kPlannerRowOf<detail::FreshPlanner>);
  CHECK(detail::kPlannerRowOf<detail::FreshPlanner> < detail::kPlannerRows);
}

TEST_CASE("a step's ring slot without a division is step % capacity for every capacity, below and above 2^52") {
  std::mt19937_64 gen(52);
  std::vector<uint64_t> caps = {1, 2, 3, 7, 64, 1000, 1954, 65536, 65537, (uint64_t{1} << 20) + 1, 1'000'000'007,
                                (uint64_t{1} << 40) - 3, (uint64_t{1} << 52) - 1, uint64_t{1} << 52};
  for (int i = 0; i < 50; ++i) caps.push_back(1 + (gen() >> (12 + gen() % 50)));
  std::size_t checked = 0;
  for (const uint64_t cap : caps) {
    const detail::RingMod mod(cap);
    std::vector<uint64_t> xs = {0, 1, cap - 1, cap, cap + 1, 2 * cap - 1, (uint64_t{1} << 52) - 1,
                                uint64_t{1} << 52, (uint64_t{1} << 53) + 5, ~uint64_t{0}};
    // Multiples of the capacity and their neighbours, where a quotient one off would show, up to 2^52.
    for (int i = 0; i < 200; ++i) {
      const uint64_t q = (gen() >> 12) / cap;
      for (const int64_t d : {-1, 0, 1}) xs.push_back(q * cap + static_cast<uint64_t>(d));
      xs.push_back(gen() >> (gen() % 64));
    }
    for (const uint64_t x : xs) {
      REQUIRE_MESSAGE(mod(x) == x % cap, "x = " << x << ", capacity = " << cap);
      ++checked;
    }
  }
  CHECK(checked > 40'000);
}
