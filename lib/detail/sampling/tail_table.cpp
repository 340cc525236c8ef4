#include "detail/sampling/tail_table.hpp"

#include <cmath>

namespace shmreplay::detail {

void TailTable::ensure(std::size_t length, double power, uint64_t period, uint64_t scale) {
  if (length == length_ && power == power_ && period == period_ && scale == scale_) return;
  s_.resize(length + 1);
  s_[0] = 0.0;
  const double s = static_cast<double>(scale);
  for (std::size_t r = 1; r <= length; ++r) {
    const double w = std::pow(static_cast<double>(r) / s, power);
    s_[r] = w + (r > period ? s_[r - period] : 0.0);
  }
  length_ = length;
  power_ = power;
  period_ = period;
  scale_ = scale;
}

uint64_t TailTable::pick(uint64_t r0, uint64_t period, double v) const noexcept {
  const uint64_t c = (r0 - 1) % period + 1;
  uint64_t lo = 0;
  uint64_t hi = (r0 - c) / period;  // the answer is in [lo, hi]
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (s_[static_cast<std::size_t>(c + mid * period)] > v) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return c + lo * period;
}

}  // namespace shmreplay::detail
