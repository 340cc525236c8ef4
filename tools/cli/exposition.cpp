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
  name_ = name;
  text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(help), name,
                       type == Type::counter ? "counter" : "gauge");
}

void Exposition::sample_prefix(const std::vector<Label>& labels) {
  text_ += name_;
  if (labels.empty()) return;
  text_ += '{';
  for (std::size_t i = 0; i < labels.size(); ++i) {
    assert(valid_name(labels[i].first) && labels[i].first.find(':') == std::string_view::npos);
    text_ += fmt::format("{}{}=\"{}\"", i == 0 ? "" : ",", labels[i].first, escape_label_value(labels[i].second));
  }
  text_ += '}';
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
