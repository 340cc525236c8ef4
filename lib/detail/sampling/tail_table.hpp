// detail/sampling/tail_table.hpp: the weights of the starts near the end of a run, tabulated once per
// (length, power, period, scale) for the closed-form, period and exact planners. No shared memory; one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shmreplay::detail {

/// S[r] = (r / scale)^power + S[r - period] (S = 0 below 1), for r = 0..length: the total weight of the grid points
/// from one with r steps left to the end of its run (r, r - period, ... > 0 steps left), each weighing
/// (steps left / scale)^power. With period 1 it is the prefix sum of 1^p, 2^p, ..., r^p over scale^p. The scale is
/// the longest remaining length in the snapshot, so that the largest weight is 1 and a large power cannot
/// overflow to infinity (weights that round to 0 are the right limit).
class TailTable {
 public:
  /// Rebuilds the table when any argument changed since the last call: O(length), allocating only to grow.
  void ensure(std::size_t length, double power, uint64_t period, uint64_t scale);

  double operator[](uint64_t r) const noexcept { return s_[static_cast<std::size_t>(r)]; }
  const double* data() const noexcept { return s_.data(); }

  /// Among the grid points of a run's tail, whose remaining lengths are r0, r0 - period, ..., c (c in [1, period])
  /// with cumulative weights S[c], S[c + period], ..., S[r0] counted from the run's end: the remaining length of the
  /// one whose weight interval holds v (0 <= v < S[r0]). Binary search, O(log(r0 / period)).
  uint64_t pick(uint64_t r0, uint64_t period, double v) const noexcept;

 private:
  std::vector<double> s_;
  std::size_t length_ = 0;
  double power_ = -1.0;
  uint64_t period_ = 0;
  uint64_t scale_ = 0;
};

}  // namespace shmreplay::detail
