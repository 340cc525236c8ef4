#include "text.hpp"

#include <algorithm>
#include <cassert>
#include <ctime>
#include <iterator>
#include <utility>

#include <fmt/format.h>

namespace shmreplay::cli {

std::string human_age(uint64_t age_ns) {
  const uint64_t s = age_ns / 1'000'000'000u;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 60 * 60) return fmt::format("{}m", s / 60);
  if (s < 24 * 60 * 60) return fmt::format("{}h", s / (60 * 60));
  return fmt::format("{}d", s / (24 * 60 * 60));
}

uint64_t age_ns(uint64_t since_ns) {
  const uint64_t now = detail::realtime_ns();
  return now > since_ns ? now - since_ns : 0;
}

std::string iso_utc(uint64_t time_ns) {
  const auto seconds = static_cast<std::time_t>(time_ns / 1'000'000'000u);
  std::tm tm{};
  if (::gmtime_r(&seconds, &tm) == nullptr) return "?";
  char text[32];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return n == 0 ? std::string("?") : std::string(text, n);
}

std::string percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "0.0%";
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string fill_bar(double fraction, std::size_t width) {
  const double f = std::clamp(fraction, 0.0, 1.0);
  auto filled = static_cast<std::size_t>(f * static_cast<double>(width) + 0.5);
  if (filled == 0 && f > 0.0) filled = 1;  // anything stored shows
  filled = std::min(filled, width);
  return "[" + std::string(filled, '#') + std::string(width - filled, '-') + "]";
}

std::string rate_text(double per_second) {
  return per_second < 0.0 ? std::string("-") : fmt::format("{:.1f}", per_second);
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  assert(cells.size() == columns_.size());
  rows_.push_back({std::move(cells), false});
}

void Table::add_spanning_row(std::string first, std::string text) {
  rows_.push_back({{std::move(first), std::move(text)}, true});
}

std::string Table::render(std::string_view indent) const {
  std::vector<std::size_t> widths;
  for (const Column& c : columns_) widths.push_back(c.title.size());
  for (const Row& r : rows_) {
    const std::size_t counted = r.spanning ? 1 : r.cells.size();
    for (std::size_t i = 0; i < counted; ++i) widths[i] = std::max(widths[i], r.cells[i].size());
  }

  std::string out;
  const auto emit = [&](const std::vector<std::string>& cells, bool spanning) {
    std::string line(indent);
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (i > 0) line += "  ";
      const bool last = i + 1 == cells.size();
      const std::size_t pad = spanning && i > 0 ? 0 : widths[i] - std::min(widths[i], cells[i].size());
      if (columns_[i].align == Align::right && !(spanning && i > 0)) line.append(pad, ' ');
      line += cells[i];
      if (columns_[i].align == Align::left && !last) line.append(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };

  std::vector<std::string> titles;
  for (const Column& c : columns_) titles.push_back(c.title);
  emit(titles, false);
  for (const Row& r : rows_) emit(r.cells, r.spanning);
  return out;
}

}  // namespace shmreplay::cli
