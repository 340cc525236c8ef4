// tools/bench/bench_cli.hpp: what every benchmark's main() shares: parsing the command line (--help exits 0, a
// usage error 2, as for the shmreplay CLI), the defaults --quick sets for the options not given, the command line
// echoed into the report, an error reported as "NAME: error: ..." with exit status 1; and a scope guard that
// removes a benchmark's buffer however the scope ends.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "shmreplay/buffer.hpp"

namespace shmreplay::bench {

/// Handed to a benchmark's --quick hook: sets an option to its --quick value unless the command line gave it.
class QuickDefaults {
 public:
  explicit QuickDefaults(const CLI::App& app) : app_(app) {}
  /// `value = quick_value` unless `option` ("--seconds") was on the command line.
  template <class T, class V>
  void operator()(const char* option, T& value, const V& quick_value) const {
    if (app_.count(option) == 0) value = static_cast<T>(quick_value);
  }

 private:
  const CLI::App& app_;
};

/// The options of a benchmark whose figures are each the median of trials of one operation: --quick, --seconds
/// (one trial) and --trials; and the rate of an operation measured with them (median_rate.hpp).
struct TrialOptions {
  bool quick = false;
  double seconds = 0.2;
  uint32_t trials = 5;

  /// Registers --quick (its help `quick_help`), --seconds and --trials.
  void add_to(CLI::App& app, const std::string& quick_help) {
    app.add_flag("--quick", quick, quick_help);
    app.add_option("--seconds", seconds, fmt::format("Duration of one trial (default {:g})", seconds))
        ->check(CLI::Range(0.001, 60.0));
    app.add_option("--trials", trials, fmt::format("Trials per figure; the median is reported (default {})", trials))
        ->check(CLI::Range(1u, 101u));
  }
  /// --quick's values of those not given: one 10 ms trial.
  void quick_defaults(const QuickDefaults& given) {
    given("--seconds", seconds, 0.01);
    given("--trials", trials, 1);
  }
};

/// The benchmarks' main: parses `argv` into `app`, calls `quick` when --quick was given (an app without --quick
/// never calls it), then returns `run(command)`, where `command` is the benchmark's name and its arguments, as the
/// reports print it. `app`'s name is the benchmark's name (its description starts with it: "NAME: what it
/// measures"). Returns 0 for --help, 2 for a usage error, 1 (after "NAME: error: ..." on stderr) when `run` throws.
inline int bench_main(CLI::App& app, int argc, char** argv, const std::function<void(const QuickDefaults&)>& quick,
                      const std::function<int(const std::string& command)>& run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const std::string description = app.get_description();
  const std::string name = description.substr(0, description.find(':'));
  if (quick && app.get_option_no_throw("--quick") != nullptr && app.count("--quick") > 0) quick(QuickDefaults(app));
  std::string command = name;
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  try {
    return run(command);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "\n{}: error: {}\n", name, e.what());
    return 1;
  }
}

/// Removes a benchmark's buffer however the scope ends (a buffer already gone is no error).
struct RemoveBuffer {
  std::string name;
  explicit RemoveBuffer(std::string buffer_name) : name(std::move(buffer_name)) {}
  RemoveBuffer(const RemoveBuffer&) = delete;
  RemoveBuffer& operator=(const RemoveBuffer&) = delete;
  ~RemoveBuffer() {
    try {
      Buffer::remove(name);
    } catch (...) {
    }
  }
};

}  // namespace shmreplay::bench
