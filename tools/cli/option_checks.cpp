// tools/cli/option_checks.cpp: the checks of the CLI's option values (option_checks.hpp).
#include "option_checks.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include <fmt/format.h>

#include "detail/os/file.hpp"

namespace shmreplay::cli {

// Parses all of `text` as an unsigned integer in `base`; nullopt when it is not one or does not fit.
std::optional<uint64_t> parse_unsigned(const std::string& text, int base) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, base);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// CLI11's own integer parsing accepts "-1" (as 2^64-1) and reads "010" as octal; counts here are plain decimal.
const CLI::Validator kCount(
    [](std::string& text) {
      return parse_unsigned(text, 10) ? std::string() : fmt::format("'{}' is not a non-negative decimal integer", text);
    },
    "", "count");

// A count of at least 1 (`--count 0` would mean "no end" to a reader and to the code alike).
const CLI::Validator kPositiveCount(
    [](std::string& text) {
      const auto n = parse_unsigned(text, 10);
      return n && *n >= 1 ? std::string() : fmt::format("'{}' is not a decimal integer of at least 1", text);
    },
    "", "count");

// A segment's mode: octal, and read/write bits only (the library's rule, checked here too so that a bad --mode
// is a usage error, exit code 2, before anything is read or created).
const CLI::Validator kOctalMode(
    [](std::string& text) {
      const auto mode = parse_unsigned(text, 8);
      if (!mode || *mode > 07777) return fmt::format("'{}' is not an octal file mode (0 to 0666, e.g. 0600)", text);
      const std::string problem = shmreplay::detail::segment_mode_problem(static_cast<uint32_t>(*mode));
      if (problem.empty()) return std::string();
      return fmt::format("mode {} is not allowed: a segment's mode may have only read and write bits (expected a "
                         "subset of {:04o}, e.g. 0600 or 0660), and {}",
                         text, shmreplay::detail::kSegmentModeBits, problem);
    },
    "", "octal mode");

// A finite number (CLI11 would take "inf" and "nan", which no rate-limit setting means).
const CLI::Validator kFiniteNumber(
    [](std::string& text) {
      double v = 0.0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      return ec == std::errc() && ptr == text.data() + text.size() && std::isfinite(v)
                 ? std::string()
                 : fmt::format("'{}' is not a finite number", text);
    },
    "", "finite number");

std::optional<WindowArg> parse_window(const std::string& text) {
  if (text == "off") return WindowArg{};
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || text.empty() || v == std::numeric_limits<uint64_t>::max()) {
    return std::nullopt;
  }
  return WindowArg{v};
}

const CLI::Validator kWindow(
    [](std::string& text) {
      return parse_window(text) ? std::string()
                                : fmt::format("'{}' is not a staleness window: a number of versions (0 to {}) or off",
                                              text, std::numeric_limits<uint64_t>::max() - 1);
    },
    "", "window");

}  // namespace shmreplay::cli
