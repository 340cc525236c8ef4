// tools/cli/option_checks.hpp: the checks of the CLI's option values that CLI11 does not make as the CLI means them:
// plain decimal counts, octal segment modes, finite numbers (a bad value is a usage error, exit code 2, before
// anything is read or created). Who uses them: main.cpp (the options of every subcommand).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace shmreplay::cli {

/// Parses all of `text` as an unsigned integer in `base`; nullopt when it is not one or does not fit.
std::optional<uint64_t> parse_unsigned(const std::string& text, int base);

/// A non-negative decimal integer (CLI11's own integer parsing accepts "-1" as 2^64-1 and reads "010" as octal).
extern const CLI::Validator kCount;
/// A count of at least 1 (`--count 0` would mean "no end" to a reader and to the code alike).
extern const CLI::Validator kPositiveCount;
/// A segment's mode: octal, and read/write bits only (the library's rule).
extern const CLI::Validator kOctalMode;
/// A finite number (CLI11 would take "inf" and "nan", which no rate-limit setting means).
extern const CLI::Validator kFiniteNumber;

/// `limit --max-staleness`'s value: a number of versions below UINT64_MAX (reserved for "none"), or "off" (a
/// window of nullopt).
struct WindowArg {
  std::optional<uint64_t> max_staleness;
};
/// The window `text` asks for; nullopt when it is neither a number nor "off".
std::optional<WindowArg> parse_window(const std::string& text);
/// A text parse_window takes.
extern const CLI::Validator kWindow;

}  // namespace shmreplay::cli
