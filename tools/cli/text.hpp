// Text formatting for the shmreplay CLI: sizes, ages, times and plain aligned tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "detail/os/file.hpp"     // human_bytes, shared with the library's messages
#include "detail/os/process.hpp"  // realtime_ns

namespace shmreplay::cli {

/// "512 bytes", "1.5 KiB", "64.0 MiB", ... (binary units, one decimal).
using shmreplay::detail::human_bytes;

/// A coarse age in the largest whole unit that fits: "5s", "3m", "2h", "4d".
std::string human_age(uint64_t age_ns);


/// Nanoseconds from `since_ns` (CLOCK_REALTIME) to now; 0 when `since_ns` lies in the future (clock steps).
uint64_t age_ns(uint64_t since_ns);

/// `time_ns` (CLOCK_REALTIME) as ISO 8601 in UTC, to the second: "2024-11-21T01:02:03Z".
std::string iso_utc(uint64_t time_ns);

/// `part / whole` as a percentage with one decimal, "12.5%"; "0.0%" when `whole` is 0.
std::string percent(uint64_t part, uint64_t whole);

/// A bar `width` characters wide between brackets, filled in proportion to `fraction` (clamped to [0, 1]):
/// "[#####-----]".
std::string fill_bar(double fraction, std::size_t width);

/// A rate per second with one decimal ("1234.5"), or "-" when it is not known yet (a negative value).
std::string rate_text(double per_second);

/// A table printed as left- or right-aligned columns separated by two spaces, with a header row.
class Table {
 public:
  enum class Align { left, right };
  struct Column {
    std::string title;
    Align align = Align::left;
  };

  explicit Table(std::vector<Column> columns);

  /// Adds a row; precondition: one cell per column.
  void add_row(std::vector<std::string> cells);
  /// Adds a row that has `first` in the first column and `text` running on from the second column, across the
  /// others (for a row that has no values, only an explanation). It does not widen the other columns.
  void add_spanning_row(std::string first, std::string text);

  /// The header and every row, each line ending in '\n' and starting with `indent`. No trailing spaces.
  std::string render(std::string_view indent = "") const;

 private:
  struct Row {
    std::vector<std::string> cells;
    bool spanning = false;
  };
  std::vector<Column> columns_;
  std::vector<Row> rows_;
};

}  // namespace shmreplay::cli
