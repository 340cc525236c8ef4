// detail/sampling/geometric_table.hpp: the first kSize terms of a geometric series q^0, q^1, ..., their cumulative
// sums and a guide table over them, so that the recency planner (recency_planner.hpp) finds which term a draw falls
// in without a logarithm (a log1p is about 19 ns of latency; the guided lookup a load and a compare or two). Built
// once per half-life; no shared memory; one thread.
#pragma once

#include <cstdint>
#include <vector>

namespace shmreplay::detail {

/// G[k] = (1 - q^k) / (1 - q) = q^0 + ... + q^(k-1), for k = 0..kSize, with q = 2^(-1 / half_life), computed as
/// expm1(-k c) / expm1(-c) (c = ln 2 / half_life): the same expression as the recency planner's per-env sums, so that
/// the two agree. find(w) is the k whose interval [G[k], G[k + 1]) holds w, for 0 <= w < limit(), by a guide table
/// of 2 kSize buckets over [0, limit()) (each bucket holds the answer for a point at or below its lowest w, so a
/// forward scan ends on the answer; expected scan at most half a step, as EnvPicker's).
class GeometricTable {
 public:
  static constexpr uint32_t kSize = 4096;
  static_assert(kSize <= 65536, "the guide holds term indices as uint16_t (16 KB for its 2 kSize buckets)");

  /// Rebuilds the table when the half-life changed since the last call: O(kSize) (about 100 us), allocating once.
  void ensure(double half_life);

  /// G[kSize]: the table covers w below it.
  double limit() const noexcept { return g_[kSize]; }

  /// G[k], for k in [0, kSize].
  double cumulative(uint32_t k) const noexcept { return g_[k]; }
  /// q^-k, for k in [0, kSize] (+infinity where q^k underflows: never needed there, as a find() that returns k
  /// saw G[k + 1] > G[k], so q^k is at least about 2^-53 (1 - q)).
  double inverse_term(uint32_t k) const noexcept { return inverse_terms_[k]; }

  /// The k in [0, kSize) with G[k] <= w < G[k + 1]. Precondition: 0 <= w < limit().
  uint32_t find(double w) const noexcept {
    uint32_t k = guide_[static_cast<std::size_t>(w * bucket_scale_)];
    while (g_[k + 1] <= w) ++k;
    return k;
  }

 private:
  std::vector<double> g_;         // G[0..kSize], then +infinity (the scan's sentinel)
  std::vector<uint16_t> guide_;   // per bucket, an answer at or below its lowest w's; one extra bucket for rounding
  std::vector<double> inverse_terms_;  // q^-k, k = 0..kSize
  double bucket_scale_ = 0.0;     // buckets / limit()
  double half_life_ = 0.0;        // what the table was built for (0: not built)
};

}  // namespace shmreplay::detail
