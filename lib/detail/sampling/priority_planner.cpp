// detail/sampling/priority_planner.cpp: prioritized draws over the envs' sum trees; see priority_planner.hpp.
#include "detail/sampling/priority_planner.hpp"

#include <algorithm>
#include <cmath>

namespace shmreplay::detail {

bool PriorityPlanner::prepare(std::span<const EnvView> views, std::size_t length, double /*power*/,
                              const PlanOptions& options) {
  views_ = views;
  length_ = length;
  options_ = options;
  cumulative_.resize(views.size());
  windows_ = false;
  if (trees_->has_fresh() && sum_views(/*fresh=*/true)) return true;  // fresh steps first
  if (trees_->sequence_length() != 0 && trees_->sequence_length() == length) return sum_windows();
  return sum_views(/*fresh=*/false);
}

// Sequence priorities: per env, eta * (window max total) + (1 - eta) * (window mean total) over its view.
bool PriorityPlanner::sum_windows() {
  fresh_ = false;
  windows_ = true;
  eta_ = options_.sequence_priority_eta;
  max_part_.resize(views_.size());
  total_ = 0;
  starts_in_view_ = 0;
  for (std::size_t e = 0; e < views_.size(); ++e) {
    const EnvView v = views_[e];
    max_part_[e] = 0;
    if (v.hi > v.lo) {
      const SequenceTreesView t = trees_->windows(e);
      max_part_[e] = eta_ == 0 ? 0.0 : eta_ * range_weight(t.max, v.lo, v.hi);
      total_ += max_part_[e] + (eta_ == 1 ? 0.0 : (1 - eta_) * range_weight(t.mean, v.lo, v.hi));
      starts_in_view_ += v.hi - v.lo;
    }
    cumulative_[e] = total_;
  }
  return total_ > 0 && std::isfinite(total_);
}

double PriorityPlanner::weight_of(std::size_t env, uint64_t start) const noexcept {
  const EnvView v = views_[env];
  if (start < v.lo || start >= v.hi) return 0.0;
  if (windows_) {
    const SequenceTreesView t = trees_->windows(env);
    return eta_ * slot_weight(t.max, start) + (1 - eta_) * slot_weight(t.mean, start);
  }
  return slot_weight(drawn_tree(env), start);
}

std::optional<Draw> PriorityPlanner::draw_window(Rng& rng) {
  for (uint32_t tries = 0; tries < kMaxTries; ++tries) {
    const double u = uniform01(rng) * total_;
    const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
    if (it == cumulative_.end()) continue;  // u rounded up to the total
    const auto env = static_cast<std::size_t>(it - cumulative_.begin());
    const double v = u - (env == 0 ? 0.0 : cumulative_[env - 1]);
    const EnvView view = views_[env];
    const SequenceTreesView t = trees_->windows(env);
    const uint64_t start = v < max_part_[env] ? find_step(t.max, view.lo, view.hi, v / eta_)
                                              : find_step(t.mean, view.lo, view.hi, (v - max_part_[env]) / (1 - eta_));
    const double w = eta_ * slot_weight(t.max, start) + (1 - eta_) * slot_weight(t.mean, start);
    if (!(w > 0)) continue;
    const uint64_t end = std::min(view.hi, start + length_);
    const uint64_t steps = options_.episodes == Episodes::stop ? steps_in_episode(env, start, end) : end - start;
    return Draw{env, start, steps, static_cast<double>(starts_in_view_) * w / total_};
  }
  return std::nullopt;
}

// The envs' running totals over their views, in the fresh trees or the priority trees; whether positive and finite.
bool PriorityPlanner::sum_views(bool fresh) {
  fresh_ = fresh;
  total_ = 0;
  starts_in_view_ = 0;
  for (std::size_t e = 0; e < views_.size(); ++e) {
    const EnvView v = views_[e];
    if (v.hi > v.lo) {
      total_ += range_weight(drawn_tree(e), v.lo, v.hi);
      starts_in_view_ += v.hi - v.lo;
    }
    cumulative_[e] = total_;
  }
  return total_ > 0 && std::isfinite(total_);
}

Shortfall PriorityPlanner::shortfall(bool scan) const noexcept {
  if (!std::isfinite(total_)) return Shortfall::not_finite;  // an internal sum, if no leaf below
  if (!scan) return Shortfall::unknown;
  bool any = false;
  bool positive = false;
  for (std::size_t e = 0; e < views_.size(); ++e) {
    const PriorityTreeView tree = trees_->tree(e);
    for (uint64_t p = views_[e].lo; p < views_[e].hi; ++p) {
      const double w = slot_weight(tree, p);
      if (!(w >= 0) || std::isinf(w)) return Shortfall::not_finite;
      any = true;
      positive |= w > 0;
    }
  }
  return !any ? Shortfall::no_start : positive ? Shortfall::positive : Shortfall::all_zero;
}

// Steps of a row from `start` up to `end` (exclusive) that belong to start's episode: the first step whose
// episode starts after `start` ends the row. Episode starts are non-decreasing in the step, so a binary search.
uint64_t PriorityPlanner::steps_in_episode(std::size_t env, uint64_t start, uint64_t end) const noexcept {
  if (starts_->episode_start(env, end - 1) <= start) return end - start;
  uint64_t lo = start + 1;  // the first step with a later episode start is in [lo, end - 1]
  uint64_t hi = end - 1;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (starts_->episode_start(env, mid) > start) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo - start;
}

std::optional<Draw> PriorityPlanner::draw(Rng& rng) {
  if (windows_) return draw_window(rng);
  for (uint32_t tries = 0; tries < kMaxTries; ++tries) {
    const double u = uniform01(rng) * total_;
    const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
    if (it == cumulative_.end()) continue;  // u rounded up to the total
    const auto env = static_cast<std::size_t>(it - cumulative_.begin());
    const double below = env == 0 ? 0.0 : cumulative_[env - 1];
    const EnvView v = views_[env];
    const PriorityTreeView tree = drawn_tree(env);
    const uint64_t start = find_step(tree, v.lo, v.hi, u - below);
    const double w = slot_weight(tree, start);
    if (!(w > 0)) continue;
    const uint64_t end = std::min(v.hi, start + length_);
    const uint64_t steps = options_.episodes == Episodes::stop ? steps_in_episode(env, start, end) : end - start;
    return Draw{env, start, steps, static_cast<double>(starts_in_view_) * w / total_};
  }
  return std::nullopt;
}

}  // namespace shmreplay::detail
