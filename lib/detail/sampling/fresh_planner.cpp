// detail/sampling/fresh_planner.cpp: FreshPlanner (fresh_planner.hpp).
#include "detail/sampling/fresh_planner.hpp"

#include <algorithm>
#include <tuple>

namespace shmreplay::detail {

bool FreshPlanner::prepare(std::span<const EnvView> views, std::size_t length, double, const PlanOptions&) {
  views_ = views;
  length_ = length;
  ranges_.clear();
  ends_.clear();
  total_ = 0;
  if (fresh_ == nullptr) return false;
  fresh_->fresh_ranges(read_);
  for (const FreshRange& r : read_) {
    if (r.env >= views.size()) continue;
    const EnvView v = views[r.env];
    const uint64_t lo = std::max(r.lo, v.lo);
    const uint64_t hi = std::min(r.hi, v.hi);
    if (lo >= hi) continue;
    ranges_.push_back({r.env, lo, hi});
    total_ += hi - lo;
    ends_.push_back(total_);
  }
  return total_ > 0;
}

std::optional<Draw> FreshPlanner::draw(Rng& rng) {
  const uint64_t u = std::min(static_cast<uint64_t>(uniform01(rng) * static_cast<double>(total_)), total_ - 1);
  const std::size_t i = static_cast<std::size_t>(std::upper_bound(ends_.begin(), ends_.end(), u) - ends_.begin());
  const FreshRange& r = ranges_[i];
  const uint64_t start = r.hi - (ends_[i] - u);  // the (u - ends_[i - 1])-th start of the range
  const uint64_t steps = std::min<uint64_t>(length_, views_[r.env].hi - start);
  return Draw{r.env, start, steps, 1.0};
}

double FreshPlanner::weight_of(std::size_t env, uint64_t start) const noexcept {
  const auto after = std::upper_bound(ranges_.begin(), ranges_.end(), std::make_tuple(uint64_t{env}, start),
                                      [](const std::tuple<uint64_t, uint64_t>& key, const FreshRange& r) {
                                        return key < std::make_tuple(r.env, r.lo);
                                      });
  if (after == ranges_.begin()) return 0.0;
  const FreshRange& r = *(after - 1);
  return r.env == env && start >= r.lo && start < r.hi ? 1.0 : 0.0;
}

}  // namespace shmreplay::detail
