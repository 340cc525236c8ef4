// detail/sampling/ring_mod.hpp: step % capacity without a division, for the sampler's per-env snapshot (every env,
// every round: at 512 envs the 64-bit divisions were a fifth of a 256-row call; shmreplay_bench_sample_cost
// --envs 512). Who calls it: the Sampler (sampler_sample.cpp). Pure arithmetic.
#pragma once

#include <cstdint>

namespace shmreplay::detail {

/// x % capacity by a double-precision reciprocal and one correction. Exact for every x: below 2^52 (one env pushing
/// a million steps a second reaches 2^52 after 143 years) the estimated quotient is off by at most one either way
/// and the correction fixes it; from 2^52 up it divides.
class RingMod {
 public:
  explicit RingMod(uint64_t capacity) noexcept : capacity_(capacity), inverse_(1.0 / static_cast<double>(capacity)) {}

  uint64_t operator()(uint64_t x) const noexcept {
    if (x >= (uint64_t{1} << 52)) [[unlikely]] return x % capacity_;
    // x < 2^52 is exact as a double; inverse_ is 1/capacity within half an ulp, and the product rounds once more,
    // so the estimate differs from x / capacity by less than x / capacity * 2^-52 < 1: q is floor(x / capacity) or
    // one off it.
    const auto q = static_cast<uint64_t>(static_cast<double>(x) * inverse_);
    const auto r = static_cast<int64_t>(x - q * capacity_);  // in (-capacity, 2 capacity)
    const auto c = static_cast<int64_t>(capacity_);
    return static_cast<uint64_t>(r < 0 ? r + c : (r >= c ? r - c : r));
  }

 private:
  uint64_t capacity_;
  double inverse_;
};

}  // namespace shmreplay::detail
