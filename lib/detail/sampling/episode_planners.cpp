#include "detail/sampling/episode_planners.hpp"

#include <algorithm>
#include <cmath>

namespace shmreplay::detail {

// ---------------------------------------------------------------------------------------------------------------
// ExactPlanner

bool ExactPlanner::prepare(std::span<const EnvView> views, std::size_t length, double power,
                           const PlanOptions& options) {
  ++stats_->exact_fallbacks;
  pieces_.clear();
  length_ = length;
  options_ = options;
  const uint64_t L = length;
  const uint64_t P = options.period;
  const bool within = options.episodes == Episodes::within;
  uint64_t r_max = 0;
  for (std::size_t e = 0; e < views.size(); ++e) {
    const uint64_t lo = views[e].lo;
    for (uint64_t b = views[e].hi; b > lo;) {
      const uint64_t q = b - 1;
      const uint64_t s = starts_->episode_start(e, q);
      ++stats_->segments_enumerated;
      ++stats_->meta_loads;
      if (s > q) break;  // a torn read: the env's steps from here down are being overwritten
      const uint64_t a = std::max(s, lo);
      const uint64_t first = grid_ceil(lo, P, a);
      if (first < b) {
        const uint64_t full = full_starts(first, b, L, P);
        if (!within || full > 0) {
          pieces_.push_back({e, first, b, full, 0.0});
          r_max = std::max(r_max, std::min(L, b - first));
        }
      }
      b = a;
    }
  }
  if (pieces_.empty()) return false;
  power_ = power;
  scale_ = r_max;
  if (!within) tail_.ensure(length, power, P, r_max);
  double total = 0.0;
  for (Piece& piece : pieces_) {
    // A full start weighs (L / r_max)^p = 1: there are full starts only when r_max = L.
    total += static_cast<double>(piece.full);
    const uint64_t tail_first = piece.first_grid + piece.full * P;
    if (!within && tail_first < piece.end) total += tail_[piece.end - tail_first];
    piece.cumulative = total;
  }
  return total > 0.0;
}

double ExactPlanner::total_weight() {
  const double total = pieces_.back().cumulative;
  return options_.episodes == Episodes::within ? total : total * std::pow(static_cast<double>(scale_), power_);
}

std::optional<Draw> ExactPlanner::draw(Rng& rng) {
  const uint64_t P = options_.period;
  const uint64_t L = length_;
  const double u = uniform01(rng) * pieces_.back().cumulative;
  auto it = std::upper_bound(pieces_.begin(), pieces_.end(), u,
                             [](double x, const Piece& s) { return x < s.cumulative; });
  if (it == pieces_.end()) --it;
  while (it != pieces_.begin() && it->cumulative == (it - 1)->cumulative) --it;
  const double v = std::max(0.0, u - (it == pieces_.begin() ? 0.0 : (it - 1)->cumulative));
  const Piece& piece = *it;
  const uint64_t tail_first = piece.first_grid + piece.full * P;
  uint64_t start = 0;
  uint64_t steps = L;
  if (v < static_cast<double>(piece.full) || options_.episodes == Episodes::within || tail_first >= piece.end) {
    start = piece.first_grid + std::min(static_cast<uint64_t>(v), piece.full == 0 ? 0 : piece.full - 1) * P;
    steps = std::min(L, piece.end - start);
  } else {
    steps = tail_.pick(piece.end - tail_first, P, v - static_cast<double>(piece.full));
    start = piece.end - steps;
  }
  return Draw{piece.env, start, steps};
}

// ---------------------------------------------------------------------------------------------------------------
// RejectionPlanner

bool RejectionPlanner::prepare(std::span<const EnvView> views, std::size_t length, double power,
                               const PlanOptions& options) {
  views_ = views;
  length_ = length;
  power_ = power;
  options_ = options;
  const uint64_t L = length;
  const uint64_t P = options.period;
  const bool within = options.episodes == Episodes::within;
  grid_cumulative_.resize(views.size());
  uint64_t total = 0;
  for (std::size_t e = 0; e < views.size(); ++e) {
    const uint64_t n = views[e].hi - views[e].lo;
    total += within ? full_starts(views[e].lo, views[e].hi, L, P) : (n == 0 ? 0 : (n - 1) / P + 1);
    grid_cumulative_[e] = total;
  }
  if (total == 0) return false;
  // Once a call has switched to the exact method, every fresh snapshot of the call is enumerated too.
  return !use_exact_ || exact_.prepare(views, length, power, options);
}

double RejectionPlanner::total_weight() {
  if (use_exact_) return exact_.total_weight();
  return exact_.prepare(views_, length_, power_, options_) ? exact_.total_weight() : 0.0;
}

std::optional<Draw> RejectionPlanner::draw(Rng& rng) {
  ++stats_->rows;
  if (!use_exact_) {
    if (const std::optional<Draw> d = propose(rng)) return d;
    use_exact_ = true;
    if (!exact_.prepare(views_, length_, power_, options_)) return std::nullopt;
  }
  return exact_.draw(rng);
}

// Episode starts are read without validation here: a start whose meta a writer was overwriting is itself being
// overwritten, and the Sampler's validation of the row's copy (which covers every step >= its start, meta
// included) rejects it.
std::optional<Draw> RejectionPlanner::propose(Rng& rng) noexcept {
  const uint64_t L = length_;
  const uint64_t P = options_.period;
  const bool within = options_.episodes == Episodes::within;
  const uint64_t total = grid_cumulative_.back();
  for (uint32_t attempt = 0; attempt < kMaxTries; ++attempt) {
    ++stats_->tries;
    const uint64_t g = uniform_below(rng, total);
    const auto e = static_cast<std::size_t>(
        std::upper_bound(grid_cumulative_.begin(), grid_cumulative_.end(), g) - grid_cumulative_.begin());
    const uint64_t p = views_[e].lo + (g - (e == 0 ? 0 : grid_cumulative_[e - 1])) * P;
    // The last step the row could hold; its episode started at or before p iff no episode starts in (p, q].
    const uint64_t q = std::min(p + L, views_[e].hi) - 1;
    const uint64_t s = starts_->episode_start(e, q);
    ++stats_->meta_loads;
    if (s > q) continue;  // a torn read (the slot is being reused): this start is going away
    uint64_t steps = q - p + 1;
    if (s > p) {
      if (within) continue;  // an episode ends inside the sequence
      // stop: the row ends where the next episode starts: the first x in (p, q] with start(x) > p.
      uint64_t a = p + 1;
      uint64_t b = q;
      while (a < b) {
        const uint64_t mid = a + (b - a) / 2;
        ++stats_->meta_loads;
        if (starts_->episode_start(e, mid) > p) {
          b = mid;
        } else {
          a = mid + 1;
        }
      }
      steps = a - p;
    }
    if (!within && steps < L && power_ != 0.0) {
      const double w = std::pow(static_cast<double>(steps) / static_cast<double>(L), power_);
      if (!(uniform01(rng) < w)) continue;
    }
    return Draw{e, p, steps};
  }
  return std::nullopt;
}

}  // namespace shmreplay::detail
