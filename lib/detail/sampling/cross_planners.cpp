#include "detail/sampling/cross_planners.hpp"

#include <algorithm>
#include <cmath>

namespace shmreplay::detail {
namespace {

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
  double* cumulative = envs_.reset(views.size());
  double total = 0.0;
  for (std::size_t e = 0; e < views.size(); ++e) {
    const uint64_t n = views[e].hi - views[e].lo;
    const uint64_t full = n >= L ? n - L + 1 : 0;
    const uint64_t tail = std::min<uint64_t>(n, L - 1);
    // A full-length start weighs (L / r_max)^p = 1: when r_max < L no env has one.
    total += static_cast<double>(full) + tail_[tail];
    cumulative[e] = total;
  }
  envs_.build();
  return total > 0.0;
}

// The table's weights are (r / r_max)^power; times r_max^power they are r^power again.
double ClosedFormPlanner::total_weight() {
  return envs_.total() * std::pow(static_cast<double>(scale_), power_);
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
  double* cumulative = envs_.reset(views.size());
  double total = 0.0;
  for (std::size_t e = 0; e < views.size(); ++e) {
    const uint64_t lo = views[e].lo;
    const uint64_t hi = views[e].hi;
    const uint64_t full = full_starts(lo, hi, L, P);
    const uint64_t tail_first = lo + full * P;
    total += static_cast<double>(full) + (tail_first < hi ? tail_[hi - tail_first] : 0.0);
    cumulative[e] = total;
  }
  envs_.build();
  return total > 0.0;
}

double PeriodPlanner::total_weight() {
  return envs_.total() * std::pow(static_cast<double>(scale_), power_);
}

std::optional<Draw> PeriodPlanner::draw(Rng& rng) {
  const auto [e, v] = envs_.pick(draw_bits53(rng));  // u = uniform01(rng) * total weight
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
