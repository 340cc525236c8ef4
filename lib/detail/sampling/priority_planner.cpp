// detail/sampling/priority_planner.cpp: prioritized draws over the envs' sum trees; see priority_planner.hpp.
#include "detail/sampling/priority_planner.hpp"

#include <algorithm>
#include <cmath>

#include "detail/sampling/env_pick.hpp"  // upper_bound_branchless

namespace shmreplay::detail {

bool PriorityPlanner::prepare(std::span<const EnvView> views, std::size_t length, double /*power*/,
                              const PlanOptions& options) {
  views_ = views;
  length_ = length;
  options_ = options;
  cumulative_.resize(views.size());
  drawn_.resize(views.size());
  sums_.resize(views.size());
  lo_slot_.resize(views.size());
  for (std::size_t e = 0; e < views.size(); ++e) {
    drawn_[e] = trees_->tree(e);  // (sum_views replaces it by the fresh tree; every tree has one capacity)
    lo_slot_[e] = views[e].lo % drawn_[e].capacity;
  }
  windows_ = false;
  next_ = drawn_count_ = 0;  // draws made ahead are of the last snapshot
  ahead_ = 0;
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
  max_sums_.resize(views_.size());
  windows_of_.resize(views_.size());
  total_ = 0;
  starts_in_view_ = 0;
  for (std::size_t e = 0; e < views_.size(); ++e) {
    const EnvView v = views_[e];
    max_part_[e] = 0;
    windows_of_[e] = trees_->windows(e);
    if (v.hi > v.lo) {
      const SequenceTreesView& t = windows_of_[e];
      max_sums_[e] = eta_ == 0 ? RangeSums{} : range_sums(t.max, v.lo, v.hi);
      sums_[e] = eta_ == 1 ? RangeSums{} : range_sums(t.mean, v.lo, v.hi);  // the mean tree's
      max_part_[e] = eta_ == 0 ? 0.0 : eta_ * max_sums_[e].total;
      total_ += max_part_[e] + (eta_ == 1 ? 0.0 : (1 - eta_) * sums_[e].total);
      starts_in_view_ += v.hi - v.lo;
    }
    cumulative_[e] = total_;
  }
  return total_ > 0 && std::isfinite(total_);
}

double PriorityPlanner::weight_of(std::size_t env, uint64_t start) const noexcept {
  const EnvView v = views_[env];
  if (start < v.lo || start >= v.hi) return 0.0;
  return weight_at(env, start % drawn_[env].capacity);
}

// The envs' running totals over their views, in the fresh trees or the priority trees; whether positive and finite.
bool PriorityPlanner::sum_views(bool fresh) {
  fresh_ = fresh;
  total_ = 0;
  starts_in_view_ = 0;
  for (std::size_t e = 0; e < views_.size(); ++e) {
    const EnvView v = views_[e];
    drawn_[e] = drawn_tree(e);
    if (v.hi > v.lo) {
      sums_[e] = range_sums(drawn_[e], v.lo, v.hi);
      total_ += sums_[e].total;
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

std::size_t PriorityPlanner::env_at(double u) const noexcept {
  return static_cast<std::size_t>(upper_bound_branchless(cumulative_.data(), cumulative_.size(), u) -
                                  cumulative_.data());
}

// Where u goes: the env (by the running totals), then, with sequence priorities, the max tree for u below the env's
// max part, else the mean tree, and the descent in it. False when u rounded up to the total (no env).
bool PriorityPlanner::aim(double u, Aim& out) const noexcept {
  const std::size_t env = env_at(u);
  if (env == cumulative_.size()) return false;
  const double v = u - (env == 0 ? 0.0 : cumulative_[env - 1]);
  out.env = env;
  out.max_tree = windows_ && v < max_part_[env];
  const double target = !windows_ ? v : out.max_tree ? v / eta_ : (v - max_part_[env]) / (1 - eta_);
  // From the sums prepare read: no load, no division (a partial view's prefix sum is read once per snapshot, not
  // once per row).
  out.descent = plan_descent(out.max_tree ? max_sums_[env] : sums_[env], lo_slot_[env], views_[env].hi - views_[env].lo,
                             drawn_[env].capacity, target);
  return true;
}

double PriorityPlanner::weight_at(std::size_t env, uint64_t slot) const noexcept {
  if (windows_) {
    const SequenceTreesView& t = windows_of_[env];
    return eta_ * weight_at_slot(t.max, slot) + (1 - eta_) * weight_at_slot(t.mean, slot);
  }
  return weight_at_slot(drawn_[env], slot);
}

PriorityTreeView PriorityPlanner::aimed_tree(const Aim& a) const noexcept {
  if (!windows_) return drawn_[a.env];
  return a.max_tree ? windows_of_[a.env].max : windows_of_[a.env].mean;
}

Draw PriorityPlanner::make_draw(std::size_t env, uint64_t start, double weight) const noexcept {
  const uint64_t end = std::min(views_[env].hi, start + length_);
  const uint64_t steps = options_.episodes == Episodes::stop ? steps_in_episode(env, start, end) : end - start;
  return Draw{env, start, steps, static_cast<double>(starts_in_view_) * weight / total_};
}

std::optional<Draw> PriorityPlanner::draw_one(Rng& rng) {
  for (uint32_t tries = 0; tries < kMaxTries; ++tries) {
    Aim a;
    if (!aim(uniform01(rng) * total_, a)) continue;  // u rounded up to the total
    const PriorityTreeView tree = aimed_tree(a);
    const std::atomic<uint64_t>* words[1] = {tree.words};
    double target[1] = {a.descent.target};
    uint64_t slot[1];
    descend_group(words, tree.leaves, target, slot);
    const uint64_t clamped = a.descent.clamp(slot[0]);
    const double w = weight_at(a.env, clamped);
    if (w > 0) return make_draw(a.env, a.descent.step_at(views_[a.env].lo, tree.capacity, clamped), w);
  }
  return std::nullopt;
}

// `rows` draws at once: every row's uniform and aim first (in the engine's order), then their descents together
// (descend_group), then each row's weight; a row whose leaf reads 0, or whose u rounded up to the total, is drawn
// again alone (draw_one) in its place. A row that finds nothing ends the group there (nullopt: the Sampler retakes
// its snapshot).
void PriorityPlanner::draw_group(Rng& rng, std::size_t rows) {
  Aim aims[kDescentGroup];
  bool aimed[kDescentGroup];
  const std::atomic<uint64_t>* words[kDescentGroup];
  double targets[kDescentGroup];
  uint64_t slots[kDescentGroup];
  const PriorityTreeView any = aimed_tree(Aim{});  // env 0's: every tree of the buffer has the same geometry
  for (std::size_t i = 0; i < rows; ++i) {
    aimed[i] = aim(uniform01(rng) * total_, aims[i]);
    words[i] = aimed[i] ? aimed_tree(aims[i]).words : any.words;  // (a row not aimed descends for nothing)
    targets[i] = aimed[i] ? aims[i].descent.target : 0.0;
  }
  const uint64_t leaves = any.leaves;
  descend_group({words, rows}, leaves, {targets, rows}, {slots, rows});
  if (windows_) {  // a start's weight also reads the other window tree's leaf: those misses overlap too
    for (std::size_t i = 0; i < rows; ++i) {
      const SequenceTreesView& t = windows_of_[aims[i].env];
      __builtin_prefetch(&(aims[i].max_tree ? t.mean : t.max).words[leaves + slots[i]]);
    }
  }
  next_ = 0;
  drawn_count_ = rows;
  for (std::size_t i = 0; i < rows; ++i) {
    if (aimed[i]) {
      const Aim& a = aims[i];
      const uint64_t clamped = a.descent.clamp(slots[i]);
      const double w = weight_at(a.env, clamped);
      if (w > 0) {
        pending_[i] = make_draw(a.env, a.descent.step_at(views_[a.env].lo, any.capacity, clamped), w);
        continue;
      }
    }
    pending_[i] = draw_one(rng);
    if (!pending_[i]) {
      drawn_count_ = i + 1;
      return;
    }
  }
}

std::optional<Draw> PriorityPlanner::draw(Rng& rng) {
  if (next_ == drawn_count_ && ahead_ > 1) {
    const std::size_t rows = std::min(ahead_, kDescentGroup);
    ahead_ -= rows;
    draw_group(rng, rows);
  }
  if (next_ < drawn_count_) return pending_[next_++];
  return draw_one(rng);
}

}  // namespace shmreplay::detail
