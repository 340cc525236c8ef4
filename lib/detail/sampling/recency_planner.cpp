#include "detail/sampling/recency_planner.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace shmreplay::detail {

// R[t] = sum over ages a < t of ((a + 1) / scale)^power q^a, for t = 0..L-1 (a start of age a < L - 1 has a + 1
// steps left). O(L) when the key changes: once per (L, power, half_life) as soon as one env holds L steps.
void RecencyPlanner::ensure_table(std::size_t length, double power, uint64_t scale) {
  if (length == table_length_ && power == table_power_ && half_life_ == table_half_life_ && scale == table_scale_) {
    return;
  }
  r_.resize(std::max<std::size_t>(length, 1));
  r_[0] = 0.0;
  const double s = static_cast<double>(scale);
  for (std::size_t t = 1; t < length; ++t) {
    const double age = static_cast<double>(t - 1);
    r_[t] = r_[t - 1] + std::pow(static_cast<double>(t) / s, power) * std::exp(-age * c_);
  }
  table_length_ = length;
  table_power_ = power;
  table_half_life_ = half_life_;
  table_scale_ = scale;
}

bool RecencyPlanner::prepare(std::span<const EnvView> views, std::size_t length, double power,
                             const PlanOptions& options) {
  views_ = views;
  half_life_ = options.recency_half_life;
  length_ = length;
  const uint64_t L = length;
  uint64_t longest = 0;
  for (const EnvView& v : views) longest = std::max(longest, v.hi - v.lo);
  const uint64_t r_max = std::min(longest, L);
  if (r_max == 0) return false;
  power_ = power;
  scale_ = r_max;
  c_ = std::numbers::ln2 / half_life_;
  expm1_c_ = std::expm1(-c_);
  ensure_table(length, power, r_max);
  // A start with L steps left exists only where r_max = L, so its power factor is 1.
  full_ = r_max == L ? std::exp(-static_cast<double>(L - 1) * c_) : 0.0;
  inverse_full_ = full_ > 0.0 ? 1.0 / full_ : 0.0;
  older_.ensure(half_life_);
  blocks_.ensure(half_life_ / GeometricTable::kSize);  // ratio q^kSize
  inverse_block_ = 1.0 / older_.limit();
  minus_inverse_c_ = -1.0 / c_;
  double* cumulative = envs_.reset(views.size());
  double total = 0.0;
  uint64_t last_m = 0;  // full rings share one m: their series is computed once (an expm1 costs ~20 ns)
  double last_older = 0.0;
  for (std::size_t e = 0; e < views.size(); ++e) {
    const uint64_t n = views[e].hi - views[e].lo;
    const uint64_t m = n >= L ? n - L + 1 : 0;
    if (m != last_m) {
      last_m = m;
      last_older = full_ * series(m);
    }
    total += r_[static_cast<std::size_t>(std::min<uint64_t>(n, L - 1))] + last_older;
    cumulative[e] = total;
  }
  envs_.build();
  return total > 0.0;
}

// The weights are scaled by r_max^-power (the decay needs no scale: the newest start's factor is 1).
double RecencyPlanner::total_weight() {
  return envs_.total() * std::pow(static_cast<double>(scale_), power_);
}

double RecencyPlanner::weight(uint64_t age, uint64_t left) const noexcept {
  return std::pow(static_cast<double>(std::min<uint64_t>(left, length_)), power_) *
         std::exp(-static_cast<double>(age) * c_);
}

}  // namespace shmreplay::detail
