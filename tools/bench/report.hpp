// tools/bench/report.hpp: the benchmark's output, markdown tables or JSON, and the number formatting both the
// tables and the targets (targets.cpp) use. Called by main.cpp.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "results.hpp"
#include "targets.hpp"

namespace shmreplay::bench {

// x as a whole percentage: 0.5 -> "50%".
std::string pct(double x);
// x with three significant figures and a k/M/G suffix; "inf" when not finite.
std::string num(double x);
// The median and the spread around it, or the median and "(starved)".
std::string with_spread(const Stat& s, bool late = false);
// ours / other as "1.2x" (times) or "80%"; "inf" or "n/a" when other is not positive.
std::string ratio(double ours, double other, bool times);

void print_markdown(const std::string& command, const MachineInfo& m, const Config& cfg,
                    const std::vector<Result>& results, const std::vector<Target>& targets);
// `pixels`: the pixels section's figures (pixels_json), or null when it did not run.
void print_json(const std::string& command, const MachineInfo& m, const Config& cfg,
                const std::vector<Result>& results, const std::vector<Target>& targets, const nlohmann::json& pixels);

}  // namespace shmreplay::bench
