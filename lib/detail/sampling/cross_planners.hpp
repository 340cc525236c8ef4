// detail/sampling/cross_planners.hpp: the planners of Episodes::cross, which ignore episode boundaries: a start
// p of a view [lo, hi) has min(hi - p, L) steps left and weighs min(hi - p, L)^power. See planner.hpp for the
// interface, who calls it and what is safe; docs/design/sampling.md, "Sampling algorithm", for the derivation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "detail/sampling/env_pick.hpp"
#include "detail/sampling/planner.hpp"
#include "detail/sampling/tail_table.hpp"

namespace shmreplay::detail {

/// Cross sampling with period 1 (the default), in closed form: an env whose view holds n steps has
/// max(0, n - L + 1) starts with L steps left (weight 1 after scaling) and min(n, L - 1) with fewer, whose weights
/// sum to S[min(n, L - 1)] (TailTable, period 1). prepare: O(num_envs); draw: one engine output, the env from a
/// guide table (EnvPicker) and, in an env's tail, a binary search over S. Options are ignored (the Sampler also
/// uses it for stop and within when L = 1, where a single step never crosses an episode end).
class ClosedFormPlanner final : public Planner {
 public:
  ClosedFormPlanner() = default;
  explicit ClosedFormPlanner(const PlannerInputs& /*in: needs none*/) noexcept {}
  bool prepare(std::span<const EnvView> views, std::size_t length, double power, const PlanOptions& options) override;
  std::optional<Draw> draw(Rng& rng) override { return draw_one(rng); }
  /// draw(), for a caller that knows the type (no virtual call, never nullopt). Inline (below): it runs once per
  /// sampled row.
  Draw draw_one(Rng& rng) const noexcept;
  double total_weight() override;
  /// min(r, L)^power for a start in the view, r its steps left.
  double weight_of(std::size_t env, uint64_t start) const noexcept override {
    const EnvView v = views_[env];
    if (start < v.lo || start >= v.hi) return 0.0;
    return std::pow(static_cast<double>(std::min<uint64_t>(v.hi - start, length_)), power_);
  }

 private:
  std::span<const EnvView> views_;
  uint64_t length_ = 0;
  double power_ = 0.0;
  uint64_t scale_ = 1;              // r_max: the weights in envs_ are (r / r_max)^power
  EnvPicker envs_;  // the envs' cumulative weights
  TailTable tail_;
};

inline Draw ClosedFormPlanner::draw_one(Rng& rng) const noexcept {
  const auto [e, offset] = envs_.pick(draw_bits53(rng));  // u = uniform01(rng) * total weight
  const uint64_t L = length_;
  const uint64_t lo = views_[e].lo;
  const uint64_t hi = views_[e].hi;
  const uint64_t n = hi - lo;
  const uint64_t full = n >= L ? n - L + 1 : 0;
  const uint64_t tail = std::min<uint64_t>(n, L - 1);
  double v = offset;
  uint64_t start = 0;
  if (v < static_cast<double>(full)) {  // each full-length start weighs 1
    start = lo + std::min(static_cast<uint64_t>(v), full - 1);
  } else if (tail > 0) {
    v -= static_cast<double>(full);
    // The remaining length r in 1..tail whose weight interval holds v; that start is hi - r.
    const double* first = tail_.data() + 1;
    const double* found = std::upper_bound(first, first + tail, v);
    start = hi - std::min<uint64_t>(static_cast<uint64_t>(found - first) + 1, tail);
  } else {
    start = lo + full - 1;  // v rounded up past the last full start
  }
  return {e, start, std::min<uint64_t>(L, hi - start)};
}

/// Cross sampling with a period P > 1: starts lo, lo + P, ... of each view. The same closed form over the grid:
/// an env's full starts (L steps left) weigh 1, its tail's grid points S[r] with the table along residue class
/// r mod P (TailTable, period P). prepare: O(num_envs); draw: one engine output, binary searches.
class PeriodPlanner final : public Planner {
 public:
  PeriodPlanner() = default;
  explicit PeriodPlanner(const PlannerInputs& /*in: needs none*/) noexcept {}
  bool prepare(std::span<const EnvView> views, std::size_t length, double power, const PlanOptions& options) override;
  std::optional<Draw> draw(Rng& rng) override;
  double total_weight() override;

 private:
  std::span<const EnvView> views_;
  uint64_t length_ = 0;
  uint64_t period_ = 1;
  double power_ = 0.0;
  uint64_t scale_ = 1;              // r_max: the weights in envs_ are (r / r_max)^power
  EnvPicker envs_;  // the envs' cumulative weights
  TailTable tail_;
};

}  // namespace shmreplay::detail
