// tools/cli/exposition.hpp: Prometheus's text exposition format (version 0.0.4), written for `shmreplay metrics`.
//
// Why our own: Debian 12 packages no C++ client library for it (prometheus-cpp is not in bookworm), and the format
// is small: `# HELP` and `# TYPE` lines, then one `name{label="value",...} number` line per sample, with label
// values and help text escaped. What this writes is checked by Prometheus's own parser twice in the tests: by
// `promtool check metrics` (the format and the naming conventions) and by a real Prometheus server scraping it
// (tests/cli/metrics.cpp). One Exposition is used by one thread; it allocates (a cold path: one scrape).
#pragma once

#include <cstdint>
#include <span>
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
  enum class Type { counter, gauge, histogram };

  /// Starts a metric family: `name` (Prometheus's name rules; a counter's ends in `_total`; a histogram's ends in
  /// none of `_total`, `_bucket`, `_sum`, `_count`), its type and help text. Families must be distinct within one
  /// Exposition (Prometheus refuses a scrape that repeats one).
  void family(std::string_view name, Type type, std::string_view help);
  /// A sample of the family started last: its labels and value. An integer counter is printed exactly.
  void sample(const std::vector<Label>& labels, uint64_t value);
  /// ... a floating-point value: shortest round-trip form, "+Inf", "-Inf" or "NaN".
  void sample(const std::vector<Label>& labels, double value);
  /// One histogram of the family started last (Type::histogram) with its labels: a `_bucket` line per bound in
  /// `bounds` (ascending upper bounds, the `le` label) with the cumulative count of `buckets` (rows per bucket, not
  /// cumulative, one per bound), a `le="+Inf"` line and `_count` with `count` (every observation, those above the
  /// last bound too; at least the buckets' sum), and `_sum` with `sum`. Integers are printed exactly.
  void histogram(const std::vector<Label>& labels, std::span<const double> bounds, std::span<const uint64_t> buckets,
                 uint64_t sum, uint64_t count);

  /// The text so far (UTF-8, lines ending in '\n').
  const std::string& text() const noexcept { return text_; }

  /// The Content-Type this format is served with.
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  void sample_prefix(const std::vector<Label>& labels, std::string_view suffix = {});

  std::string text_;
  std::string name_;  // of the family started last
};

/// A label value escaped as the format wants it inside double quotes: backslash, double quote and newline.
std::string escape_label_value(std::string_view value);

}  // namespace shmreplay::cli
