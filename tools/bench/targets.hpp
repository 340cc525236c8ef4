// tools/bench/targets.hpp: the benchmark's targets (the figures the project promises, docs/benchmarks/core.md) and
// their verdicts on one run's results. Called by main.cpp; printed by report.cpp.
#pragma once

#include <string>
#include <vector>

#include "results.hpp"

namespace shmreplay::bench {

struct Target {
  std::string target;
  std::string case_;
  std::string measured;
  bool met = false;
};

// Every target the results have the measurements for, met or missed; `steps` are the step kinds that ran.
std::vector<Target> evaluate(const std::vector<Result>& results, const std::vector<std::string>& steps);

}  // namespace shmreplay::bench
