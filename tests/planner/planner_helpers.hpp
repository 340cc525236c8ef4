// tests/planner/planner_helpers.hpp: what the parts of test_planner share (tests/CMakeLists.txt builds them into one
// executable): episode starts from a table, the reference model of every start's steps and weight, and the
// distribution check (chi-square) of a planner's draws against it (or against a model of the caller's: recency).
// test_planner: the planners (lib/detail/sampling) without shared memory: given per-env views, episode starts, a
// sequence length, a power and a period, every drawn row is one the reference model allows, with the steps the
// model gives it and the draw probability the planner owes it, and the draws follow the model's weights
// (chi-square); the period grid, rejection with its switch to the exact method, torn episode starts, empty views,
// a huge power, and the work counters; and the planner table, which chooses the planner for a call's options.
#pragma once

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
#include "detail/sampling/recency_planner.hpp"
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
  uint64_t corrected = 0;        // draws whose relative_probability is not 1 (an importance weight would change)
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
    if (d->relative_probability != 1.0) ++t.corrected;
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

// Prepares `planner`, draws `draws` rows and checks them against the model `cells`: all in it, with its steps, in
// its proportions, each with relative_probability 1 (the model's planners draw what the call asked for: no
// importance weight corrects them). Returns the tally for further checks.
Tally check_cells(detail::Planner& planner, const std::vector<EnvView>& views, const std::vector<Cell>& cells,
                  uint64_t length, double power, const PlanOptions& o, uint64_t seed, uint64_t draws = 60000) {
  REQUIRE(cells.size() >= 2);
  planner.begin_call();
  REQUIRE(planner.prepare(views, length, power, o));
  Rng rng(seed);
  const Tally t = tally(planner, cells, rng, draws);
  CHECK(t.none == 0);
  CHECK(t.outside == 0);
  CHECK(t.wrong_steps == 0);
  CHECK(t.corrected == 0);
  const double x = chi_square(t, cells, draws);
  CAPTURE(cells.size());
  CHECK(x < bound(cells));
  return t;
}

// check_cells against the reference model of the views, episode starts, length, power and options.
Tally check_distribution(detail::Planner& planner, const std::vector<EnvView>& views, const TableStarts* starts,
                         uint64_t length, double power, const PlanOptions& o, uint64_t seed, uint64_t draws = 60000) {
  return check_cells(planner, views, reference(views, starts, length, power, o), length, power, o, seed, draws);
}

// Views of four envs: never wrapped, wrapped, short, and empty.
const std::vector<EnvView> kViews = {{0, 7}, {18, 30}, {8, 20}, {5, 5}};

}  // namespace
