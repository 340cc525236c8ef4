// `shmreplay dump`: stored steps as a table or as JSON lines, read consistently while writers push
// (Inspector::read_steps: the seqlock validation of a sample, on a read-only mapping). Arrays with more than
// kInlineElements elements are summarised (shape, min, max, mean, first values) unless --full.
//
// Memory is bounded whatever the selection: steps are read kChunkBytes at a time (one step at a time when a step
// is larger), printed, and dropped; a table is printed in blocks of kTableRows rows or kTableBytes of their text,
// whichever comes first (--full rows of large arrays are hundreds of KB each), one line at a time, its column
// widths those of the rows printed so far (so a very long dump may widen a column part way through). An env whose
// counters claim a view longer than its capacity is refused with an error naming them, instead of trusted.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "detail/elements.hpp"
#include "detail/protocol/env_ids.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/schema.hpp"
#include "text.hpp"

namespace shmreplay::cli {
namespace {

using Json = nlohmann::ordered_json;
using Align = Table::Align;

constexpr uint64_t kInlineElements = 8;  // arrays up to this many elements are printed whole
constexpr uint64_t kFirstValues = 4;     // values a summary shows

// A float as the double with the float's shortest decimal form (0.77f is 0.77, not 0.7699999809265137), as
// numpy prints float32.
double short_double(float v) {
  if (!std::isfinite(v)) return static_cast<double>(v);
  return std::strtod(fmt::format("{}", v).c_str(), nullptr);
}

// One element of `dtype` at `p`, as a JSON value (integers stay exact) and as text (detail/elements.hpp reads
// it; detail::element_as_double gives it as a double, for statistics).
Json element_json(DType dtype, const std::byte* p) {
  return detail::with_dtype(dtype, [p](auto tag) -> Json {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_void_v<T>) {
      return nullptr;
    } else if constexpr (std::is_integral_v<T> || std::is_same_v<T, double>) {  // bool included
      return detail::load_element<T>(p);
    } else if constexpr (std::is_same_v<T, float>) {
      return short_double(detail::load_element<float>(p));
    } else {  // f16, bf16
      return short_double(detail::to_float(detail::load_element<T>(p)));
    }
  });
}

std::string element_text(DType dtype, const std::byte* p) {
  return detail::with_dtype(dtype, [&](auto tag) -> std::string {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      return detail::load_element<bool>(p) ? "true" : "false";
    } else if constexpr (std::is_floating_point_v<T>) {
      return fmt::format("{}", detail::load_element<T>(p));
    } else if constexpr (std::is_same_v<T, detail::Float16> || std::is_same_v<T, detail::BFloat16>) {
      return fmt::format("{}", detail::to_float(detail::load_element<T>(p)));
    } else {
      return element_json(dtype, p).dump();
    }
  });
}

// The elements of dimension `dim` onwards, starting at element `first`, nested by the shape.
std::string nested_text(const Field& f, const std::byte* data, std::size_t dim, uint64_t first) {
  const std::size_t eb = dtype_bytes(f.dtype);
  uint64_t stride = 1;
  for (std::size_t d = dim + 1; d < f.shape.size(); ++d) stride *= f.shape[d];
  std::string out = "[";
  for (uint64_t i = 0; i < f.shape[dim]; ++i) {
    if (i > 0) out += ", ";
    out += dim + 1 == f.shape.size() ? element_text(f.dtype, data + (first + i) * eb)
                                     : nested_text(f, data, dim + 1, first + i * stride);
  }
  return out + "]";
}

Json nested_json(const Field& f, const std::byte* data, std::size_t dim, uint64_t first) {
  const std::size_t eb = dtype_bytes(f.dtype);
  uint64_t stride = 1;
  for (std::size_t d = dim + 1; d < f.shape.size(); ++d) stride *= f.shape[d];
  Json out = Json::array();
  for (uint64_t i = 0; i < f.shape[dim]; ++i) {
    out.push_back(dim + 1 == f.shape.size() ? element_json(f.dtype, data + (first + i) * eb)
                                            : nested_json(f, data, dim + 1, first + i * stride));
  }
  return out;
}

struct Summary {
  double min = 0.0;
  double max = 0.0;
  double mean = 0.0;
  uint64_t nan = 0;  // elements that are NaN (left out of min, max and mean)
};

Summary summarise(const Field& f, const std::byte* data) {
  const std::size_t eb = dtype_bytes(f.dtype);
  Summary s;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -std::numeric_limits<double>::infinity();
  double sum = 0.0;
  uint64_t counted = 0;
  for (uint64_t i = 0; i < f.elements(); ++i) {
    const double v = detail::element_as_double(f.dtype, data + i * eb);
    if (std::isnan(v)) {
      ++s.nan;
      continue;
    }
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    sum += v;
    ++counted;
  }
  s.mean = counted == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(counted);
  return s;
}

bool summarised(const Field& f, bool full) { return !full && f.elements() > kInlineElements; }

std::string value_text(const Field& f, const std::byte* data, bool full) {
  if (f.shape.empty()) return element_text(f.dtype, data);
  if (!summarised(f, full)) return nested_text(f, data, 0, 0);
  const Summary s = summarise(f, data);
  std::string first;
  for (uint64_t i = 0; i < kFirstValues; ++i) first += element_text(f.dtype, data + i * dtype_bytes(f.dtype)) + " ";
  return fmt::format("{}{} min={:g} max={:g} mean={:.6g}{} first=[{}...]", dtype_name(f.dtype), f.shape_string(),
                     s.min, s.max, s.mean, s.nan != 0 ? fmt::format(" nan={}", s.nan) : std::string(), first);
}

Json value_json(const Field& f, const std::byte* data, bool full) {
  if (f.shape.empty()) return element_json(f.dtype, data);
  if (!summarised(f, full)) return nested_json(f, data, 0, 0);
  const Summary s = summarise(f, data);
  Json first = Json::array();
  for (uint64_t i = 0; i < kFirstValues; ++i) first.push_back(element_json(f.dtype, data + i * dtype_bytes(f.dtype)));
  Json out = {{"dtype", dtype_name(f.dtype)}, {"shape", f.shape}, {"min", s.min}, {"max", s.max}, {"mean", s.mean}};
  if (s.nan != 0) out["nan"] = s.nan;
  out["first"] = std::move(first);
  return out;
}

struct StepRange {
  uint64_t first = 0;
  uint64_t end = std::numeric_limits<uint64_t>::max();  // exclusive
};

constexpr uint64_t kChunkBytes = 4ull << 20;  // records read at once: about this many bytes
constexpr std::size_t kTableRows = 1024;      // table rows held before they are printed ...
constexpr std::size_t kTableBytes = 1 << 20;  // ... or bytes of their text, whichever comes first

// A Table printed in blocks of rows as they come (at most kTableRows rows or kTableBytes of cell text): the header
// and the first block with the widths of those rows (exactly Table::render's output when everything fits in one
// block), later blocks with the widths grown to fit them. Each line is printed as it is made, so what is held is
// the block's cells and one line. No trailing spaces.
class StreamedTable {
 public:
  explicit StreamedTable(std::vector<Table::Column> columns) : columns_(std::move(columns)) {
    for (const Table::Column& c : columns_) widths_.push_back(c.title.size());
  }
  void add_row(std::vector<std::string> cells) {
    for (const std::string& c : cells) held_bytes_ += c.size();
    rows_.push_back(std::move(cells));
    if (rows_.size() == kTableRows || held_bytes_ >= kTableBytes) flush();
  }
  void flush() {
    if (rows_.empty()) return;
    for (const auto& r : rows_) {
      for (std::size_t i = 0; i < r.size(); ++i) widths_[i] = std::max(widths_[i], r[i].size());
    }
    if (!header_printed_) {
      std::vector<std::string> titles;
      for (const Table::Column& c : columns_) titles.push_back(c.title);
      emit(titles);
      header_printed_ = true;
    }
    for (const auto& r : rows_) emit(r);
    rows_.clear();
    held_bytes_ = 0;
  }

 private:
  void emit(const std::vector<std::string>& cells) const {
    std::string line;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (i > 0) line += "  ";
      const std::size_t pad = widths_[i] - std::min(widths_[i], cells[i].size());
      if (columns_[i].align == Align::right) line.append(pad, ' ');
      line += cells[i];
      if (columns_[i].align == Align::left && i + 1 < cells.size()) line.append(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    line += '\n';
    fmt::print("{}", line);
  }
  std::vector<Table::Column> columns_;
  std::vector<std::size_t> widths_;
  std::vector<std::vector<std::string>> rows_;
  std::size_t held_bytes_ = 0;  // text of the cells in rows_
  bool header_printed_ = false;
};

// Env `env`'s counters, checked: a writer keeps head <= claimed <= head + 1, so a replay view longer than the
// capacity (claimed < head) means damaged counters, or a checkpoint load that rewrote the env between the loads
// of head and claimed; the latter is gone on a re-read, so the env is read again for a moment before the damage
// is reported (Errc::corrupt, naming the env and its counters).
EnvInfo checked_env(const Inspector& insp, const SegmentInfo& info, uint64_t env) {
  EnvInfo e = info.envs[static_cast<std::size_t>(env)];
  const uint64_t cap = insp.buffer().capacity();
  for (int attempt = 0; e.length > cap && attempt < 20; ++attempt) {
    ::usleep(5000);
    e = insp.snapshot().envs[static_cast<std::size_t>(env)];
  }
  if (e.length > cap) {
    throw Error(Errc::corrupt,
                fmt::format("cannot dump env {} of '{}': its counters are damaged: head {}, claimed {}, online_start "
                            "{}; its replay view would hold {} steps, more than its capacity of {} (a writer keeps "
                            "head <= claimed <= head + 1); see `shmreplay info {}`, then recreate or reload it",
                            env, insp.buffer().name(), e.head, e.claimed, e.online_start, e.length, cap,
                            insp.buffer().name()));
  }
  return e;
}

}  // namespace

std::optional<std::pair<uint64_t, uint64_t>> parse_step_range(const std::string& text) {
  const auto number = [](std::string_view t) -> std::optional<uint64_t> {
    if (t.empty() || t.size() > 20) return std::nullopt;
    uint64_t v = 0;
    for (const char c : t) {
      if (c < '0' || c > '9') return std::nullopt;
      const uint64_t digit = static_cast<uint64_t>(c - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
      v = v * 10 + digit;
    }
    return v;
  };
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos) {
    const auto a = number(text);
    if (!a || *a == std::numeric_limits<uint64_t>::max()) return std::nullopt;
    return std::pair{*a, *a + 1};
  }
  const std::string_view left = std::string_view(text).substr(0, colon);
  const std::string_view right = std::string_view(text).substr(colon + 1);
  const auto a = left.empty() ? std::optional<uint64_t>(0) : number(left);
  const auto b = right.empty() ? std::optional<uint64_t>(std::numeric_limits<uint64_t>::max()) : number(right);
  if (!a || !b || *a > *b) return std::nullopt;
  return std::pair{*a, *b};
}

int run_dump(const DumpArgs& args) {
  const Inspector insp(args.name, {.allow_other_owner = true});  // display only; info shows the owner
  const Buffer& b = insp.buffer();
  const Schema& schema = b.schema();

  std::vector<std::size_t> fields;
  if (args.fields.empty()) {
    for (std::size_t f = 0; f < schema.size(); ++f) fields.push_back(f);
  }
  for (const std::string& name : args.fields) {
    const auto f = schema.find(name);
    if (!f) {
      std::vector<std::string> names;
      for (const Field& field : schema.fields()) names.push_back(field.name);
      throw Error(Errc::invalid_argument, fmt::format("cannot dump field '{}' of '{}': it has no such field (its "
                                                      "fields: {})",
                                                      name, b.name(), fmt::join(names, ", ")));
    }
    fields.push_back(*f);
  }
  std::vector<uint64_t> envs = args.envs;
  if (envs.empty()) {
    for (uint64_t e = 0; e < b.num_envs(); ++e) envs.push_back(e);
  }
  for (const uint64_t e : envs) detail::check_env_id(segment_of(b), e, "dump");
  StepRange range;
  if (!args.steps.empty()) {
    const auto parsed = parse_step_range(args.steps);
    if (!parsed) {
      throw Error(Errc::invalid_argument, fmt::format("'{}' is not a step range (A:B, A:, :B or A)", args.steps));
    }
    range = {parsed->first, parsed->second};
  }

  const SegmentInfo info = insp.snapshot();
  std::vector<Table::Column> columns{{"ENV", Align::right}, {"STEP", Align::right}};
  for (const std::size_t f : fields) columns.push_back({schema[f].name});
  StreamedTable table(columns);
  const uint64_t chunk_steps = std::max<uint64_t>(1, kChunkBytes / std::max<uint64_t>(schema.step_bytes(), 1));
  uint64_t rows = 0;
  for (const uint64_t env : envs) {
    const EnvInfo e = checked_env(insp, info, env);
    const uint64_t hi = e.head;
    uint64_t lo = hi - (args.online ? e.online_length : e.length);  // at most the capacity below hi (checked)
    if (args.last) lo = std::max(lo, hi - std::min(*args.last, hi - lo));
    lo = std::max(lo, range.first);
    const uint64_t end = std::min(hi, range.end);
    // Chunk by chunk; steps a writer overwrote before their chunk was read are left out (read_steps keeps the
    // newer end of a chunk), so the steps printed are increasing, each exactly as its writer published it.
    for (uint64_t at = lo; at < end;) {
      const StepRecords records = insp.read_steps(env, at, std::min(chunk_steps, end - at));
      for (uint64_t i = 0; i < records.count; ++i) {
        const uint64_t step = records.first_step + i;
        if (args.json) {
          Json values = Json::object();
          for (const std::size_t f : fields) {
            values[schema[f].name] =
                value_json(schema[f], records.field(static_cast<std::size_t>(i), f).data(), args.full);
          }
          fmt::print("{}\n", Json{{"env", env}, {"step", step}, {"fields", std::move(values)}}.dump());
        } else {
          std::vector<std::string> cells{fmt::format("{}", env), fmt::format("{}", step)};
          for (const std::size_t f : fields) {
            cells.push_back(value_text(schema[f], records.field(static_cast<std::size_t>(i), f).data(), args.full));
          }
          table.add_row(std::move(cells));
        }
        ++rows;
      }
      at = std::max(at + std::min(chunk_steps, end - at), records.first_step + records.count);
    }
  }
  if (!args.json) {
    if (rows == 0) {
      fmt::print("no stored steps match (envs {}, {} view{}{})\n", fmt::join(envs, ","),
                 args.online ? "online" : "replay", args.last ? fmt::format(", last {}", *args.last) : "",
                 args.steps.empty() ? "" : fmt::format(", steps {}", args.steps));
    } else {
      table.flush();
    }
  }
  return kExitOk;
}

}  // namespace shmreplay::cli
