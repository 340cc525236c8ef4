// detail/sampling/env_pick.hpp: the env a draw falls in, from the cumulative weights of the envs (the cross
// planners, cross_planners.hpp). Inline, because it runs once per sampled row.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace shmreplay::detail {

// The env whose cumulative weight interval holds u (envs of weight 0 are never chosen), and the offset of u in it.
struct EnvPick {
  std::size_t env;
  double offset;
};

// std::upper_bound without branches on the data (a conditional move per halving): the env is drawn at random,
// so a branchy search mispredicts about half of its steps. The same result as std::upper_bound.
inline const double* upper_bound_branchless(const double* first, std::size_t n, double u) noexcept {
  if (n == 0) return first;
  std::size_t len = n;  // the answer lies in [first, first + len]
  while (len > 1) {
    const std::size_t half = len / 2;
    first += first[half - 1] <= u ? half : 0;
    len -= half;
  }
  return first + (*first <= u ? 1 : 0);
}

inline EnvPick pick_env(const std::vector<double>& cumulative, double u) noexcept {
  auto it = cumulative.begin() + (upper_bound_branchless(cumulative.data(), cumulative.size(), u) - cumulative.data());
  if (it == cumulative.end()) [[unlikely]] {  // u rounded up to the total: the last env of positive weight
    --it;
    while (it != cumulative.begin() && *it == *(it - 1)) --it;
  }
  const auto e = static_cast<std::size_t>(it - cumulative.begin());
  return {e, std::max(0.0, u - (e == 0 ? 0.0 : cumulative[e - 1]))};
}

}  // namespace shmreplay::detail
