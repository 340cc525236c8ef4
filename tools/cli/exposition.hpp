// tools/cli/exposition.hpp: Prometheus's text exposition format (version 0.0.4), written for `shmreplay metrics`.
//
// Why our own: Debian 12 packages no C++ client library for it (prometheus-cpp is not in bookworm), and the format
// is small: `# HELP` and `# TYPE` lines, then one `name{label="value",...} number` line per sample, with label
// values and help text escaped. What this writes is checked by Prometheus's own parser twice in the tests: by
// `promtool check metrics` (the format and the naming conventions) and by a real Prometheus server scraping it
// (tests/cli/metrics.cpp). One Exposition is used by one thread; it allocates (a cold path: one scrape).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shmreplay::cli {

/// One label of a sample: its name (a Prometheus label name) and its value (any text; escaped on output).
using Label = std::pair<std::string_view, std::string>;

/// The text of one scrape, family by family.
class Exposition {
 public:
  enum class Type { counter, gauge };

  /// Starts a metric family: `name` (Prometheus's name rules; a counter's ends in `_total`), its type and help text.
  /// Families must be distinct within one Exposition (Prometheus refuses a scrape that repeats one).
  void family(std::string_view name, Type type, std::string_view help);
  /// A sample of the family started last: its labels and value. An integer counter is printed exactly.
  void sample(const std::vector<Label>& labels, uint64_t value);
  /// ... a floating-point value: shortest round-trip form, "+Inf", "-Inf" or "NaN".
  void sample(const std::vector<Label>& labels, double value);

  /// The text so far (UTF-8, lines ending in '\n').
  const std::string& text() const noexcept { return text_; }

  /// The Content-Type this format is served with.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  void sample_prefix(const std::vector<Label>& labels);

  std::string text_;
  std::string name_;  // of the family started last
};

/// A label value escaped as the format wants it inside double quotes: backslash, double quote and newline.
std::string escape_label_value(std::string_view value);

}  // namespace shmreplay::cli
