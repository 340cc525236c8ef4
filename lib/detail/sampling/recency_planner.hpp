// detail/sampling/recency_planner.hpp: the recency selector (SampleOptions::recency_half_life): cross sampling
// with period 1 whose weights also halve every `half_life` steps of a start's age. See planner.hpp for the
// interface, who calls it and what is safe; docs/design/sampling.md, "Recency", for the derivation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "detail/sampling/env_pick.hpp"
#include "detail/sampling/geometric_table.hpp"
#include "detail/sampling/planner.hpp"

namespace shmreplay::detail {

/// Cross sampling with period 1, weighted by recency: a start p of a view [lo, hi) has age a = hi - 1 - p (the
/// env's newest step has age 0; ages count each env's own steps, since each env's ring fills at its own pace) and
/// weighs min(hi - p, L)^power * 2^(-a / half_life). In closed form per env: the t = min(n, L - 1) newest starts
/// (fewer than L steps left, ages 0..t-1) sum to R[t], a table of L doubles built once per (L, power, half_life,
/// scale); the m = max(0, n - L + 1) older ones (L steps left, ages L-1..n-1) are a geometric series,
/// L^power q^(L-1) (1 - q^m) / (1 - q) with q = 2^(-1 / half_life), computed with expm1 so that a long half-life
/// loses no precision. prepare: O(num_envs); draw: one engine output, the env from the guide table (EnvPicker),
/// then a binary search over R (the newest starts) or, among the older ones, a guided lookup in the series' first
/// terms (GeometricTable), past them two (the block of kSize terms, then the term inside it), and past kSize^2
/// terms the series' inverse, one log1p.
/// Every weight is divided by r_max^power (r_max = min(longest view, L)), so the largest factor of power is 1; a
/// weight that underflows (an age of more than about 1074 half-lives) is drawn with probability 0, the right limit.
/// Of the options it takes the half-life (options.recency_half_life: finite, > 0); the planner table chooses it for
/// cross with period 1 only (and any mode with L = 1, where a single step never crosses an episode end).
class RecencyPlanner final : public Planner {
 public:
  RecencyPlanner() = default;
  explicit RecencyPlanner(const PlannerInputs& /*in: needs none*/) noexcept {}
  bool prepare(std::span<const EnvView> views, std::size_t length, double power, const PlanOptions& options) override;
  std::optional<Draw> draw(Rng& rng) override { return draw_one(rng); }
  /// draw(), for a caller that knows the type (no virtual call, never nullopt). Inline (below): once per row.
  Draw draw_one(Rng& rng) const noexcept;
  double total_weight() override;

  /// The weight of a start with `age` steps of age and `left` steps left (<= L) under the last prepare, in
  /// the units total_weight() returns: what a draw returns it with, times total_weight(). For tests and mixtures.
  double weight(uint64_t age, uint64_t left) const noexcept;
  /// weight(age, left) of a start in the view (its age behind the env's newest step, its steps left); 0 outside.
  double weight_of(std::size_t env, uint64_t start) const noexcept override {
    const EnvView v = views_[env];
    return start < v.lo || start >= v.hi ? 0.0 : weight(v.hi - 1 - start, v.hi - start);
  }

 private:
  void ensure_table(std::size_t length, double power, uint64_t scale);
  // The older starts' total over A (the weight of the newest of them): (1 - q^m) / (1 - q).
  double series(uint64_t m) const noexcept { return std::expm1(-static_cast<double>(m) * c_) / expm1_c_; }

  std::span<const EnvView> views_;
  uint64_t length_ = 0;
  double power_ = 0.0;
  double half_life_ = 1.0;
  uint64_t scale_ = 1;      // r_max: the power factors are (r / r_max)^power
  double c_ = 0.0;          // ln 2 / half_life: q = exp(-c)
  double expm1_c_ = 0.0;    // expm1(-c) = q - 1 (< 0)
  double full_ = 0.0;       // A: (L / r_max)^power q^(L - 1), the weight of a start with L steps left and age L - 1
  double inverse_full_ = 0.0;     // 1 / A, so that a draw multiplies (0 when A is 0: never used then)
  double minus_inverse_c_ = 0.0;  // -1 / c = 1 / log q
  EnvPicker envs_;          // the envs' cumulative weights
  GeometricTable older_;    // the older starts' first cumulative weights, in units of A
  GeometricTable blocks_;   // blocks of kSize older starts: cumulative weights in units of older_.limit()
  double inverse_block_ = 0.0;    // 1 / older_.limit()
  std::vector<double> r_;   // r_[t]: the total weight of ages 0..t-1 (t < L)
  // The key r_ was built for.
  std::size_t table_length_ = 0;
  double table_power_ = -1.0;
  double table_half_life_ = 0.0;
  uint64_t table_scale_ = 0;
};

inline Draw RecencyPlanner::draw_one(Rng& rng) const noexcept {
  const auto [e, offset] = envs_.pick(draw_bits53(rng));  // u = uniform01(rng) * total weight
  const uint64_t L = length_;
  const uint64_t lo = views_[e].lo;
  const uint64_t hi = views_[e].hi;
  const uint64_t n = hi - lo;
  const uint64_t tail = std::min<uint64_t>(n, L - 1);
  const uint64_t m = n >= L ? n - L + 1 : 0;
  const double newest = r_[static_cast<std::size_t>(tail)];
  uint64_t age = 0;
  if (tail > 0 && (offset < newest || m == 0 || full_ == 0.0)) {
    // The age a in 0..tail-1 whose weight interval [R[a], R[a + 1]) holds the offset.
    // Branch-free (env_pick.hpp): the offset is random, so a branchy search mispredicts about half of its steps.
    const double* first = r_.data() + 1;
    age = std::min<uint64_t>(static_cast<uint64_t>(upper_bound_branchless(first, tail, offset) - first), tail - 1);
  } else {
    // The older starts, k = 0..m-1 from the newest of them, weigh A q^k: their cumulative weight up to k is
    // A (1 - q^k) / (1 - q), so the k whose interval holds v is floor(log(1 - v (1 - q) / A) / log q).
    const double w = std::max(0.0, offset - newest) * inverse_full_;  // in units of A: G(k) = (1 - q^k) / (1 - q)
    // The first GeometricTable::kSize of them from the table, without a logarithm (where most draws land unless
    // the half-life is long); the rest by the inverse.
    // log1p(x), not log(1 + x): with a long half-life the older starts' y = 1 + x spans (q^m, 1], an interval far
    // narrower than 1, where 1 + x would round away most of the draw's 53 bits (test_planner's 1e15 case shows it).
    uint64_t whole = 0;
    if (w < older_.limit()) {
      whole = std::min<uint64_t>(older_.find(w), m - 1);
    } else if (const double wb = w * inverse_block_; wb < blocks_.limit()) {
      // Past the first kSize terms, blocks of kSize: block b weighs G(kSize) Q^b (Q = q^kSize), so blocks_ (the
      // series of ratio Q) finds b, and the rest of w inside it, in units of its first term A q^(b kSize), is
      // found in older_ again: two guided lookups instead of a log1p (docs/design/sampling.md, "Recency").
      const uint32_t b = blocks_.find(wb);
      const double rest = (wb - blocks_.cumulative(b)) * older_.limit() * blocks_.inverse_term(b);
      const uint64_t k = rest <= 0.0 ? 0 : rest < older_.limit() ? older_.find(rest) : GeometricTable::kSize - 1;
      whole = std::min<uint64_t>(uint64_t{b} * GeometricTable::kSize + k, m - 1);
    } else {
      const double k = std::log1p(w * expm1_c_) * minus_inverse_c_;
      whole = k >= 0.0 ? static_cast<uint64_t>(std::min(k, static_cast<double>(m - 1))) : 0;
    }
    age = L - 1 + whole;
  }
  const uint64_t start = hi - 1 - age;
  return {e, start, std::min<uint64_t>(L, hi - start)};
}

}  // namespace shmreplay::detail
