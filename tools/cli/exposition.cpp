#include "exposition.hpp"

#include <cassert>
#include <cmath>

#include <fmt/format.h>

namespace shmreplay::cli {
namespace {

[[maybe_unused]] bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// HELP text escapes backslash and newline only (a double quote stays as it is there).
std::string escape_help(std::string_view help) {
  std::string out;
  for (const char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void Exposition::family(std::string_view name, Type type, std::string_view help) {
  assert(valid_name(name) && "a metric name matches [a-zA-Z_:][a-zA-Z0-9_:]*");
  assert((type != Type::counter || name.ends_with("_total")) && "a counter's name ends in _total");
  assert((type != Type::histogram || !(name.ends_with("_total") || name.ends_with("_bucket") ||
                                       name.ends_with("_sum") || name.ends_with("_count"))) &&
         "a histogram's name is its series' stem");
  name_ = name;
  text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(help), name,
                       type == Type::counter ? "counter" : type == Type::gauge ? "gauge" : "histogram");
}

void Exposition::sample_prefix(const std::vector<Label>& labels, std::string_view suffix) {
  text_ += name_;
  text_ += suffix;
  if (labels.empty()) return;
  text_ += '{';
  for (std::size_t i = 0; i < labels.size(); ++i) {
    assert(valid_name(labels[i].first) && labels[i].first.find(':') == std::string_view::npos);
    text_ += fmt::format("{}{}=\"{}\"", i == 0 ? "" : ",", labels[i].first, escape_label_value(labels[i].second));
  }
  text_ += '}';
}

void Exposition::histogram(const std::vector<Label>& labels, std::span<const double> bounds,
                           std::span<const uint64_t> buckets, uint64_t sum, uint64_t count) {
  assert(bounds.size() == buckets.size());
  std::vector<Label> with_le = labels;
  with_le.emplace_back("le", "");
  uint64_t cumulative = 0;
  for (std::size_t k = 0; k < bounds.size(); ++k) {
    assert((k == 0 || bounds[k - 1] < bounds[k]) && "bounds ascend");
    cumulative += buckets[k];
    with_le.back().second = fmt::format("{}", bounds[k]);
    sample_prefix(with_le, "_bucket");
    text_ += fmt::format(" {}\n", cumulative);
  }
  assert(cumulative <= count && "the count holds every bucket");
  with_le.back().second = "+Inf";
  sample_prefix(with_le, "_bucket");
  text_ += fmt::format(" {}\n", count);
  sample_prefix(labels, "_sum");
  text_ += fmt::format(" {}\n", sum);
  sample_prefix(labels, "_count");
  text_ += fmt::format(" {}\n", count);
}

void Exposition::sample(const std::vector<Label>& labels, uint64_t value) {
  sample_prefix(labels);
  text_ += fmt::format(" {}\n", value);
}

void Exposition::sample(const std::vector<Label>& labels, double value) {
  sample_prefix(labels);
  if (std::isnan(value)) text_ += " NaN\n";
  else if (std::isinf(value)) text_ += value > 0 ? " +Inf\n" : " -Inf\n";
  else text_ += fmt::format(" {}\n", value);
}

}  // namespace shmreplay::cli
