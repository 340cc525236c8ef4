// tools/bench/scaling_plots.hpp: shmreplay_bench_scaling's --plot-dir: its Markdown saved as DIR/scaling.md, and
// tools/bench/plot_tables.py run on it for each figure (log-x lines of the rate ratios and the latencies against
// the stored steps, the writers and the learners). Called by scaling.cpp.
#pragma once

#include <string>

namespace shmreplay::bench {

/// Writes `markdown` to dir/scaling.md and draws the figures of the tables it holds into dir/*.png with `python`
/// (matplotlib). Returns how many figures failed (each failure is said on stderr).
int draw_scaling_plots(const std::string& dir, const std::string& markdown, const std::string& python);

/// The interpreter used when --python is not given: the source tree's .venv if it has one, else python3.
std::string default_plot_python();

}  // namespace shmreplay::bench
