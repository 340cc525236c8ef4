// tools/bench/scaling_report.hpp: shmreplay_bench_scaling's output: a Markdown document (the header block, a table
// per sweep, and under each table the notes the measurements support), printed as it is made and kept for the plots
// (scaling_plots.hpp). Called by scaling.cpp.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "harness.hpp"
#include "scaling_fleets.hpp"
#include "scaling_size.hpp"

namespace shmreplay::bench {

/// Text printed to stdout at once (flushed: a long run shows each table when it is done) and kept.
class Markdown {
 public:
  template <class... Args>
  void print(fmt::format_string<Args...> f, Args&&... args) {
    const std::string s = fmt::format(f, std::forward<Args>(args)...);
    std::fputs(s.c_str(), stdout);
    std::fflush(stdout);
    text_ += s;
  }
  const std::string& text() const noexcept { return text_; }

 private:
  std::string text_;
};

/// What the header says besides the machine.
struct RunInfo {
  std::string command;
  std::string sweeps;    ///< the sweeps run
  std::string timing;    ///< the method's timing, in words
  std::string counters;  ///< hardware_counters()
};

void print_header(Markdown& md, const RunInfo& info, const MachineInfo& m);
void print_size_tables(Markdown& md, StepKind kind, const SizeConfig& c, const std::vector<SizeRow>& rows);
void print_fleet_tables(Markdown& md, const FleetConfig& c, const FleetResults& r, unsigned cores);

}  // namespace shmreplay::bench
