// detail/sampling/env_pick.hpp: the env a draw falls in, from the cumulative weights of the envs (the cross
// planners, cross_planners.hpp; the priority planner takes upper_bound_branchless). Inline, because it runs once per
// sampled row.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "detail/sampling/planner.hpp"  // unit_of_bits53

namespace shmreplay::detail {

// The env whose cumulative weight interval holds u (envs of weight 0 are never chosen), and the offset of u in it.
struct EnvPick {
  std::size_t env;
  double offset;
};

// std::upper_bound without branches on the data (a mask per halving): the env is drawn at random, so a branchy
// search mispredicts about half of its steps. The same result as std::upper_bound. (Written `cond ? half : 0`, g++ 12
// compiled it to a branch in the priority planner: perf showed a fifth of a prioritized sequence call in it.)
inline const double* upper_bound_branchless(const double* first, std::size_t n, double u) noexcept {
  if (n == 0) return first;
  std::size_t len = n;  // the answer lies in [first, first + len]
  while (len > 1) {
    const std::size_t half = len / 2;
    first += half & (std::size_t{0} - static_cast<std::size_t>(first[half - 1] <= u));
    len -= half;
  }
  return first + (*first <= u ? 1 : 0);
}

/// Picks envs by their cumulative weights, for draws of u = unit_of_bits53(bits) * total (bits: draw_bits53, so
/// that u is uniform01(rng) * total; total: the last cumulative weight). The answer is std::upper_bound's over the
/// cumulative weights (the first env whose cumulative weight exceeds u), or the last env of positive weight where
/// u rounded up to the total, exactly as a binary search would give it; what differs is how it is found.
///
/// With few envs (kGuidedEnvs or fewer) a guide table does it in about one step: bucket b of the 2^k buckets (the
/// top k of the 53 bits) holds the answer for the smallest u of the bucket, u_b = (b << (53 - k)) * 2^-53 * total,
/// and a draw in bucket b scans forward from there while the cumulative weight is <= u. Why that is the same
/// answer: every u of bucket b is >= u_b in floating point too (the integer and its scaling by 2^-53 are exact,
/// and rounding the product by total is monotone), so the answer for u is at or after the guide's entry, and
/// the scan stops at the first cumulative weight above u (a sentinel of +infinity after the last env stops it at
/// the end). The expected scan is at most num_envs / 2^k steps whatever the weights (each env boundary lies in
/// one bucket, and each bucket is drawn with probability 2^-k); 2^k is at least 4 num_envs up to kDenseGuideEnvs
/// envs and at least 2 num_envs above (half a step of scan, for half the table). Building the table is
/// O(2^k + num_envs) per prepare, which is why more envs than kGuidedEnvs use the branch-free binary search. At 512
/// envs and 256 rows per call (the peers' Python benchmark) the binary search cost about 85 instructions a row, the
/// table about 30 a row with its build (callgrind, shmreplay_bench_sample_cost --envs 512).
class EnvPicker {
 public:
  static constexpr std::size_t kGuidedEnvs = 1024;
  static constexpr std::size_t kDenseGuideEnvs = 256;

  /// The cumulative weights of `n` envs, to be filled by the caller (non-decreasing), then build().
  double* reset(std::size_t n) {
    n_ = n;
    bounds_.resize(n + 1);
    return bounds_.data();
  }

  /// Prepares picks over the weights filled in since reset(). O(num_envs) (guided: O(2^k + num_envs)).
  void build() {
    total_ = n_ == 0 ? 0.0 : bounds_[n_ - 1];
    bounds_[n_] = std::numeric_limits<double>::infinity();  // the scan's sentinel
    guided_ = n_ > 0 && n_ <= kGuidedEnvs;
    if (!guided_) return;
    const std::size_t buckets = (n_ <= kDenseGuideEnvs ? 4 : 2) * n_;
    const unsigned k = static_cast<unsigned>(std::bit_width(buckets - 1));  // 2^k >= 4 n (2 n above 256 envs)
    shift_ = 53 - k;
    guide_.resize(std::size_t{1} << k);
    uint32_t e = 0;
    for (uint64_t b = 0; b < guide_.size(); ++b) {
      const double lowest = unit_of_bits53(b << shift_) * total_;  // u_b, computed as a draw's u
      while (bounds_[e] <= lowest) ++e;
      guide_[b] = e;
    }
  }

  /// The total weight (the last cumulative weight) of the last build().
  double total() const noexcept { return total_; }

  /// The env of the draw with these 53 random bits (bits < 2^53), and u's offset in its weight interval.
  /// Precondition: build() ran and total() > 0.
  EnvPick pick(uint64_t bits) const noexcept {
    const double u = unit_of_bits53(bits) * total_;
    std::size_t e = 0;
    if (guided_) [[likely]] {
      e = guide_[bits >> shift_];
      while (bounds_[e] <= u) ++e;
    } else {
      e = static_cast<std::size_t>(upper_bound_branchless(bounds_.data(), n_, u) - bounds_.data());
    }
    if (e == n_) [[unlikely]] {  // u rounded up to the total: the last env of positive weight
      --e;
      while (e > 0 && bounds_[e] == bounds_[e - 1]) --e;
    }
    return {e, std::max(0.0, u - (e == 0 ? 0.0 : bounds_[e - 1]))};
  }

 private:
  std::vector<double> bounds_;   // bounds_[e] = total weight of envs 0..e; bounds_[n] = +infinity
  std::vector<uint32_t> guide_;  // per bucket, the answer for its smallest u
  std::size_t n_ = 0;
  double total_ = 0.0;
  unsigned shift_ = 0;  // a bucket is bits >> shift_
  bool guided_ = false;
};

}  // namespace shmreplay::detail
