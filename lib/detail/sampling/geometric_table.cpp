#include "detail/sampling/geometric_table.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace shmreplay::detail {

void GeometricTable::ensure(double half_life) {
  if (half_life == half_life_) return;
  const double c = std::numbers::ln2 / half_life;
  const double step = std::expm1(-c);
  g_.resize(kSize + 2);
  for (uint32_t k = 0; k <= kSize; ++k) g_[k] = std::expm1(-static_cast<double>(k) * c) / step;
  g_[kSize + 1] = std::numeric_limits<double>::infinity();
  inverse_terms_.resize(kSize + 1);
  for (uint32_t k = 0; k <= kSize; ++k) inverse_terms_[k] = std::exp(static_cast<double>(k) * c);
  const uint32_t buckets = 2 * kSize;
  guide_.resize(buckets + 1);
  bucket_scale_ = static_cast<double>(buckets) / g_[kSize];
  // Bucket b's lowest w is about b / bucket_scale_; a point a little below it (rounding either way) is at or below
  // every w of the bucket, so its answer is at or before theirs.
  uint32_t k = 0;
  for (uint32_t b = 0; b <= buckets; ++b) {
    const double below = static_cast<double>(b) / bucket_scale_ * (1.0 - 1e-12);
    while (k < kSize - 1 && g_[k + 1] <= below) ++k;
    guide_[b] = static_cast<uint16_t>(k);
  }
  half_life_ = half_life;
}

}  // namespace shmreplay::detail
