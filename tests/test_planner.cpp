// The planners (lib/detail/sampling) without shared memory: given per-env views, episode starts, a sequence
// length, a power and a period, every drawn row is one the reference model allows, with the steps the model
// gives it, and the draws follow the model's weights (chi-square); the period grid, rejection with its switch to
// the exact method, torn episode starts, empty views, a huge power, and the work counters; and the planner table,
// which chooses the planner for a call's options.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "detail/sampling/cross_planners.hpp"
#include "detail/sampling/episode_planners.hpp"
#include "detail/sampling/planner_table.hpp"
#include "detail/sampling/priority_planner.hpp"
#include "detail/sampling/ring_mod.hpp"
#include "shmreplay/sampler.hpp"

using namespace shmreplay;
using detail::Draw;
using detail::EnvView;
using detail::PlanOptions;

namespace {

// Episode starts from a table: start[e][s] is the first step of step s's episode. Steps below torn_below[e]
// read as torn (a value above the step, as a slot being overwritten reads). Counts its loads.
class TableStarts final : public detail::EpisodeStarts {
 public:
  std::vector<std::vector<uint64_t>> start;
  std::vector<uint64_t> torn_below;
  mutable uint64_t loads = 0;

  uint64_t episode_start(std::size_t env, uint64_t step) const noexcept override {
    ++loads;
    if (step < torn_below[env]) return step + 1;
    return start[env][step];
  }
};

// Steps [0, hi) of each env cut into episodes of lengths drawn from [shortest, longest].
TableStarts episodes_of(const std::vector<EnvView>& views, uint64_t shortest, uint64_t longest, uint64_t seed) {
  std::mt19937_64 gen(seed);
  TableStarts t;
  for (const EnvView& v : views) {
    std::vector<uint64_t> starts(v.hi);
    uint64_t first = 0;
    uint64_t left = 0;
    for (uint64_t s = 0; s < v.hi; ++s) {
      if (left == 0) {
        first = s;
        left = shortest + gen() % (longest - shortest + 1);
      }
      starts[s] = first;
      --left;
    }
    t.start.push_back(std::move(starts));
    t.torn_below.push_back(0);
  }
  return t;
}

// The reference model: every grid point of every view with a positive weight, its steps and its weight.
struct Cell {
  uint64_t env;
  uint64_t start;
  uint64_t steps;
  double weight;
};

std::vector<Cell> reference(const std::vector<EnvView>& views, const TableStarts* starts, uint64_t length,
                            double power, const PlanOptions& o) {
  std::vector<Cell> cells;
  for (uint64_t e = 0; e < views.size(); ++e) {
    const EnvView v = views[e];
    for (uint64_t p = v.lo; p < v.hi; p += o.period) {
      const uint64_t end = std::min(p + length, v.hi);  // cross: the row runs to here
      uint64_t steps = end - p;
      if (o.episodes != Episodes::cross) {
        uint64_t x = p + 1;  // the first step of a later episode, if any before `end`
        while (x < end && starts->start[e][x] <= p) ++x;
        if (o.episodes == Episodes::within && (x < end || p + length > v.hi)) continue;
        steps = x - p;
      }
      const double w = o.episodes == Episodes::within ? 1.0 : std::pow(static_cast<double>(steps), power);
      if (w > 0.0) cells.push_back({e, p, steps, w});
    }
  }
  return cells;
}

struct Tally {
  std::vector<uint64_t> counts;  // per cell
  uint64_t outside = 0;          // draws that are no cell of the model
  uint64_t wrong_steps = 0;      // draws of a cell with other steps than the model's
  uint64_t none = 0;             // draws that returned nullopt
};

Tally tally(detail::Planner& planner, const std::vector<Cell>& cells, Rng& rng, uint64_t draws) {
  std::map<std::pair<uint64_t, uint64_t>, std::size_t> index;
  for (std::size_t i = 0; i < cells.size(); ++i) index[{cells[i].env, cells[i].start}] = i;
  Tally t;
  t.counts.assign(cells.size(), 0);
  for (uint64_t i = 0; i < draws; ++i) {
    const std::optional<Draw> d = planner.draw(rng);
    if (!d) {
      ++t.none;
      continue;
    }
    const auto it = index.find({d->env, d->start});
    if (it == index.end()) {
      ++t.outside;
      continue;
    }
    ++t.counts[it->second];
    if (d->steps != cells[it->second].steps) ++t.wrong_steps;
  }
  return t;
}

double chi_square(const Tally& t, const std::vector<Cell>& cells, uint64_t draws) {
  double total = 0.0;
  for (const Cell& c : cells) total += c.weight;
  double x = 0.0;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const double expected = static_cast<double>(draws) * cells[i].weight / total;
    const double diff = static_cast<double>(t.counts[i]) - expected;
    x += diff * diff / expected;
  }
  return x;
}

// The bound the other distribution tests use: df + 6 standard deviations of a chi-square with df degrees.
double bound(const std::vector<Cell>& cells) {
  const double df = static_cast<double>(cells.size() - 1);
  return df + 6.0 * std::sqrt(2.0 * df);
}

// Prepares `planner`, draws `draws` rows and checks them against the model: all in it, with its steps, in its
// proportions. Returns the tally for further checks.
Tally check_distribution(detail::Planner& planner, const std::vector<EnvView>& views, const TableStarts* starts,
                         uint64_t length, double power, const PlanOptions& o, uint64_t seed, uint64_t draws = 60000) {
  const std::vector<Cell> cells = reference(views, starts, length, power, o);
  REQUIRE(cells.size() >= 2);
  planner.begin_call();
  REQUIRE(planner.prepare(views, length, power, o));
  Rng rng(seed);
  const Tally t = tally(planner, cells, rng, draws);
  CHECK(t.none == 0);
  CHECK(t.outside == 0);
  CHECK(t.wrong_steps == 0);
  const double x = chi_square(t, cells, draws);
  CAPTURE(cells.size());
  CHECK(x < bound(cells));
  return t;
}

// Views of four envs: never wrapped, wrapped, short, and empty.
const std::vector<EnvView> kViews = {{0, 7}, {18, 30}, {8, 20}, {5, 5}};

}  // namespace

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
  enum class Before { priority, closed_form, period, episodes };
  const auto before = [](const SampleOptions& o, std::size_t length) {
    if (o.prioritized) return Before::priority;
    if (o.period == 1 && (o.episodes == Episodes::cross || length == 1)) return Before::closed_form;
    return o.episodes == Episodes::cross ? Before::period : Before::episodes;
  };
  const std::map<Before, std::size_t> row_of = {
      {Before::priority, detail::kPlannerRowOf<detail::PriorityPlanner>},
      {Before::closed_form, detail::kPlannerRowOf<detail::ClosedFormPlanner>},
      {Before::period, detail::kPlannerRowOf<detail::PeriodPlanner>},
      {Before::episodes, detail::kPlannerRowOf<detail::RejectionPlanner>},
  };
  for (const auto& [kind, row] : row_of) REQUIRE(row < detail::kPlannerRows);  // every planner has its row

  // Planners made as the Sampler makes them; no planner is prepared here, so the trees are never read.
  struct NoTrees final : detail::PriorityTrees {
    detail::PriorityTree tree(std::size_t) const noexcept override { return {}; }
  };
  SamplerStats stats;
  const TableStarts starts;
  const NoTrees trees;
  detail::Planners planners(detail::PlannerInputs{stats, starts, trees});

  int combinations = 0;
  for (const bool prioritized : {false, true}) {
    for (const Episodes episodes : {Episodes::cross, Episodes::stop, Episodes::within}) {
      for (const uint64_t period : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{64}, UINT64_MAX}) {
        for (const std::size_t length : {std::size_t{1}, std::size_t{2}, std::size_t{5}, std::size_t{64}}) {
          for (const uint64_t min_steps : {uint64_t{0}, uint64_t{10}}) {
            SampleOptions o;
            o.prioritized = prioritized;
            o.episodes = episodes;
            o.period = period;
            o.min_steps = min_steps;
            CAPTURE(prioritized);
            CAPTURE(to_string(episodes));
            CAPTURE(period);
            CAPTURE(length);
            CAPTURE(min_steps);
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
  CHECK(combinations == 2 * 3 * 5 * 4 * 2);
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
