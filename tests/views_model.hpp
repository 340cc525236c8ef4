// tests/views_model.hpp: the reference model of the views that test_sampler and test_episodes check every sampled
// row against: per env every pushed step, the head at the last reset_online_queue(), and from them each env's
// replay window (its newest `capacity` steps) and online window (the part of it pushed since the reset). A test's
// own model derives from it to add what it checks (test_episodes: episode ends, weights, records).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "shmreplay/sampler.hpp"

namespace shmreplay::test {

/// The steps [lo, hi) of one env that a view holds.
struct Window {
  uint64_t lo;
  uint64_t hi;
};

/// Every env's pushed steps (`Step`: the test's own struct) and the views over them.
template <class Step>
struct ViewsModel {
  uint64_t capacity;
  std::vector<std::vector<Step>> steps;  ///< per env, every step pushed, oldest first
  std::vector<uint64_t> online_start;    ///< per env, the head at the last reset_online()

  ViewsModel(uint64_t num_envs, uint64_t cap) : capacity(cap), steps(num_envs), online_start(num_envs, 0) {}
  uint64_t num_envs() const { return steps.size(); }
  uint64_t head(uint64_t e) const { return steps[e].size(); }
  Window window(View view, uint64_t e) const {
    const uint64_t h = head(e);
    uint64_t lo = h > capacity ? h - capacity : 0;
    if (view == View::online) lo = std::max(lo, online_start[e]);
    return {std::min(lo, h), h};
  }
  uint64_t size(View view) const {
    uint64_t total = 0;
    for (uint64_t e = 0; e < num_envs(); ++e) total += window(view, e).hi - window(view, e).lo;
    return total;
  }
  void reset_online() {
    for (uint64_t e = 0; e < num_envs(); ++e) online_start[e] = head(e);
  }
};

}  // namespace shmreplay::test
