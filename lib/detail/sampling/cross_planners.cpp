#include "detail/sampling/cross_planners.hpp"

#include <algorithm>
#include <cmath>

namespace shmreplay::detail {
namespace {

// The env whose cumulative weight interval holds u (envs of weight 0 are never chosen), and the offset of u in it.
struct EnvPick {
  std::size_t env;
  double offset;
};

// std::upper_bound without branches on the data (a conditional move per halving): the env is drawn at random,
// so a branchy search mispredicts about half of its steps. The same result as std::upper_bound.
const double* upper_bound_branchless(const double* first, std::size_t n, double u) noexcept {
  if (n == 0) return first;
  std::size_t len = n;  // the answer lies in [first, first + len]
  while (len > 1) {
    const std::size_t half = len / 2;
    first += first[half - 1] <= u ? half : 0;
    len -= half;
  }
  return first + (*first <= u ? 1 : 0);
}

EnvPick pick_env(const std::vector<double>& cumulative, double u) noexcept {
  auto it = cumulative.begin() + (upper_bound_branchless(cumulative.data(), cumulative.size(), u) - cumulative.data());
  if (it == cumulative.end()) [[unlikely]] {  // u rounded up to the total: the last env of positive weight
    --it;
    while (it != cumulative.begin() && *it == *(it - 1)) --it;
  }
  const auto e = static_cast<std::size_t>(it - cumulative.begin());
  return {e, std::max(0.0, u - (e == 0 ? 0.0 : cumulative[e - 1]))};
}

uint64_t longest_view(std::span<const EnvView> views) noexcept {
  uint64_t longest = 0;
  for (const EnvView& v : views) longest = std::max(longest, v.hi - v.lo);
  return longest;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// ClosedFormPlanner

bool ClosedFormPlanner::prepare(std::span<const EnvView> views, std::size_t length, double power,
                                const PlanOptions&) {
  views_ = views;
  length_ = length;
  const uint64_t L = length;
  const uint64_t r_max = std::min(longest_view(views), L);
  if (r_max == 0) return false;
  power_ = power;
  scale_ = r_max;
  // O(L) when (L, power, r_max) changes; r_max is L as soon as one env holds L steps.
  tail_.ensure(length, power, 1, r_max);
  cumulative_.resize(views.size());
  double total = 0.0;
  for (std::size_t e = 0; e < views.size(); ++e) {
    const uint64_t n = views[e].hi - views[e].lo;
    const uint64_t full = n >= L ? n - L + 1 : 0;
    const uint64_t tail = std::min<uint64_t>(n, L - 1);
    // A full-length start weighs (L / r_max)^p = 1: when r_max < L no env has one.
    total += static_cast<double>(full) + tail_[tail];
    cumulative_[e] = total;
  }
  return total > 0.0;
}

// The table's weights are (r / r_max)^power; times r_max^power they are r^power again.
double ClosedFormPlanner::total_weight() {
  return cumulative_.back() * std::pow(static_cast<double>(scale_), power_);
}

Draw ClosedFormPlanner::draw_one(Rng& rng) const noexcept {
  const double u = uniform01(rng) * cumulative_.back();
  const auto [e, offset] = pick_env(cumulative_, u);
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

// ---------------------------------------------------------------------------------------------------------------
// PeriodPlanner

bool PeriodPlanner::prepare(std::span<const EnvView> views, std::size_t length, double power,
                            const PlanOptions& options) {
  views_ = views;
  length_ = length;
  period_ = options.period;
  const uint64_t L = length;
  const uint64_t P = options.period;
  const uint64_t r_max = std::min(longest_view(views), L);  // the first grid point of the longest env has r_max left
  if (r_max == 0) return false;
  power_ = power;
  scale_ = r_max;
  tail_.ensure(length, power, P, r_max);
  cumulative_.resize(views.size());
  double total = 0.0;
  for (std::size_t e = 0; e < views.size(); ++e) {
    const uint64_t lo = views[e].lo;
    const uint64_t hi = views[e].hi;
    const uint64_t full = full_starts(lo, hi, L, P);
    const uint64_t tail_first = lo + full * P;
    total += static_cast<double>(full) + (tail_first < hi ? tail_[hi - tail_first] : 0.0);
    cumulative_[e] = total;
  }
  return total > 0.0;
}

double PeriodPlanner::total_weight() {
  return cumulative_.back() * std::pow(static_cast<double>(scale_), power_);
}

std::optional<Draw> PeriodPlanner::draw(Rng& rng) {
  const double u = uniform01(rng) * cumulative_.back();
  const auto [e, v] = pick_env(cumulative_, u);
  const uint64_t L = length_;
  const uint64_t P = period_;
  const uint64_t lo = views_[e].lo;
  const uint64_t hi = views_[e].hi;
  const uint64_t full = full_starts(lo, hi, L, P);
  const uint64_t tail_first = lo + full * P;
  uint64_t start = 0;
  if (v < static_cast<double>(full) || tail_first >= hi) {
    start = lo + std::min(static_cast<uint64_t>(v), full == 0 ? 0 : full - 1) * P;
  } else {
    start = hi - tail_.pick(hi - tail_first, P, v - static_cast<double>(full));
  }
  return Draw{e, start, std::min<uint64_t>(L, hi - start)};
}

}  // namespace shmreplay::detail
