#include "shmreplay/schema.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
#include <set>

#include "detail/os/char_text.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t bytes;
};

constexpr std::array<DTypeInfo, 13> kDTypes{{
    {DType::u8, "u8", 1},    {DType::i8, "i8", 1},     {DType::u16, "u16", 2}, {DType::i16, "i16", 2},
    {DType::u32, "u32", 4},  {DType::i32, "i32", 4},   {DType::u64, "u64", 8}, {DType::i64, "i64", 8},
    {DType::f16, "f16", 2},  {DType::bf16, "bf16", 2}, {DType::f32, "f32", 4}, {DType::f64, "f64", 8},
    {DType::boolean, "bool", 1},
}};

const DTypeInfo* info(DType dtype) noexcept {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return &d;
  }
  return nullptr;
}

std::string all_dtype_names() {
  std::string out;
  for (const auto& d : kDTypes) {
    if (!out.empty()) out += ' ';
    out += d.name;
  }
  return out;
}

bool name_char(char c, bool first) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (first) return alpha;
  return alpha || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

[[noreturn]] void fail(const std::string& message) { throw Error(Errc::invalid_schema, message); }

// Validates one field; `where` names it ("field 2 'obs'") in messages. Returns its bytes per step.
uint64_t validate_field(const Field& f, const std::string& where) {
  if (f.name.empty()) fail(fmt::format("schema {}: the name is empty", where));
  if (f.name.size() > kMaxNameBytes) {
    fail(fmt::format("schema {}: the name is {} bytes long, at most {} are allowed", where, f.name.size(),
                     kMaxNameBytes));
  }
  for (std::size_t i = 0; i < f.name.size(); ++i) {
    if (!name_char(f.name[i], i == 0)) {
      fail(fmt::format("schema {}: character {} of the name ({}) is not allowed; names match "
                       "[A-Za-z_][A-Za-z0-9_.-]*",
                       where, i + 1, detail::char_text(f.name[i])));
    }
  }
  if (!is_dtype(static_cast<uint32_t>(f.dtype))) {
    fail(fmt::format("schema {}: dtype {} is not one of {}", where, static_cast<uint32_t>(f.dtype),
                     all_dtype_names()));
  }
  if (f.shape.size() > kMaxDims) {
    fail(fmt::format("schema {}: the shape has {} dimensions, at most {} are allowed", where, f.shape.size(),
                     kMaxDims));
  }
  uint64_t bytes = dtype_bytes(f.dtype);
  for (std::size_t d = 0; d < f.shape.size(); ++d) {
    if (f.shape[d] == 0) {
      fail(fmt::format("schema {}: dimension {} of shape {} is 0; every dimension must be at least 1", where,
                       d + 1, f.shape_string()));
    }
    if (__builtin_mul_overflow(bytes, f.shape[d], &bytes) || bytes > kMaxStepBytes) {
      fail(fmt::format("schema {}: shape {} of {} is too large: a step of this field would exceed {} bytes",
                       where, f.shape_string(), dtype_name(f.dtype), kMaxStepBytes));
    }
  }
  if (f.stack_axis) {
    const uint32_t axis = *f.stack_axis;
    if (axis >= f.shape.size()) {
      fail(fmt::format("schema {}: stack axis {} is not an axis of shape {}, which has {} dimension{}", where, axis,
                       f.shape_string(), f.shape.size(), f.shape.size() == 1 ? "" : "s"));
    }
    if (f.shape[axis] < 2) {
      fail(fmt::format("schema {}: axis {} of shape {} stacks {} frame; a stacked axis needs at least 2 (drop "
                       "':stack=' for a field of one frame)",
                       where, axis, f.shape_string(), f.shape[axis]));
    }
  }
  const auto codec = static_cast<uint32_t>(f.codec);
  if (codec > static_cast<uint32_t>(Codec::zstd)) {
    fail(fmt::format("schema {}: codec {} is not one of 0 (none), 1 (lz4), 2 (zstd)", where, codec));
  }
  if (f.codec == Codec::zstd ? f.codec_level == 0 || f.codec_level < kMinZstdLevel || f.codec_level > kMaxZstdLevel
                             : f.codec_level != 0) {
    fail(fmt::format("schema {}: codec level {} {}", where, f.codec_level,
                     f.codec == Codec::zstd ? fmt::format("is not a zstd level this library writes ({} to {}, not 0)",
                                                          kMinZstdLevel, kMaxZstdLevel)
                                            : std::string("is given for a codec without levels; expected 0")));
  }
  if (f.derived && (f.stack_axis || f.compressed())) {
    fail(fmt::format("schema {}: a derived field is rewritten in place by write_back, so it is stored as pushed; "
                     "drop ':{}' or ':derived'",
                     where, f.stack_axis ? "stack=" : f.codec == Codec::lz4 ? "lz4" : "zstd"));
  }
  return bytes;
}

// A cursor over the spec text that knows its line and column for error messages.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : text_(text) {}

  bool done() const { return pos_ >= text_.size(); }
  char peek() const { return done() ? '\0' : text_[pos_]; }
  void advance() {
    if (text_[pos_] == '\n') {
      ++line_;
      line_start_ = pos_ + 1;
    }
    ++pos_;
  }
  std::size_t pos() const { return pos_; }
  // The next character for an error message, or "the end of the spec".
  std::string found() const { return done() ? std::string("the end of the spec") : detail::char_text(peek()); }
  std::string where() const {
    return line_ > 1 ? fmt::format("line {}, column {}", line_, pos_ - line_start_ + 1)
                     : fmt::format("column {}", pos_ + 1);
  }
  // Skips white space, ';' separators and '#' comments; stops at the next token.
  void skip_separators() {
    while (!done()) {
      const char c = peek();
      if (c == '#') {
        while (!done() && peek() != '\n') advance();
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ';') {
        advance();
      } else {
        return;
      }
    }
  }
  void skip_blanks() {
    while (!done() && (peek() == ' ' || peek() == '\t')) advance();
  }
  std::string_view take_while(bool (*pred)(char)) {
    const std::size_t start = pos_;
    while (!done() && pred(peek())) advance();
    return text_.substr(start, pos_ - start);
  }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  std::size_t line_start_ = 0;
};

bool is_token_char(char c) { return name_char(c, false); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// ":stack=AXIS" after a field's shape, past its "stack" (the cursor is at the '='); AXIS may be negative, counted
// from the end.
template <class Where>
void parse_stack_axis(Cursor& cur, Field& field, const Where& where) {
  if (cur.peek() != '=') {
    fail(fmt::format("{}: expected 'stack=AXIS' (as in {}:stack=0), found 'stack{}'", where(), field.name,
                     cur.done() ? std::string() : std::string(1, cur.peek())));
  }
  cur.advance();
  const std::string axis_at = where();
  const bool negative = cur.peek() == '-';
  if (negative) cur.advance();
  const std::string_view digits = cur.take_while(is_digit);
  uint64_t axis = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), axis);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size()) {
    fail(fmt::format("{}: expected the stacked axis (an integer, -1 for the last), found {}", axis_at,
                     digits.empty() ? cur.found() : std::string(digits)));
  }
  const uint64_t ndim = field.shape.size();
  if (field.shape.empty() || axis > ndim - (negative ? 0 : 1) || (negative && axis == 0)) {
    fail(fmt::format("{}: stack axis {}{} is not an axis of shape {}", axis_at, negative ? "-" : "", axis,
                     field.shape_string()));
  }
  field.stack_axis = static_cast<uint32_t>(negative ? ndim - axis : axis);
}

// ":zstd" or ":zstd=LEVEL" past its "zstd" (the cursor is after the word); LEVEL may be negative.
template <class Where>
void parse_zstd_level(Cursor& cur, Field& field, const Where& where) {
  field.codec = Codec::zstd;
  field.codec_level = kDefaultZstdLevel;
  if (cur.peek() != '=') return;
  cur.advance();
  const std::string level_at = where();
  const bool negative = cur.peek() == '-';
  if (negative) cur.advance();
  const std::string_view digits = cur.take_while(is_digit);
  int32_t level = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), level);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || level == 0 ||
      (negative ? -level < kMinZstdLevel : level > kMaxZstdLevel)) {
    fail(fmt::format("{}: expected a zstd level, {} to {} but not 0, found {}{}", level_at, kMinZstdLevel,
                     kMaxZstdLevel, negative ? "-" : "", digits.empty() ? cur.found() : std::string(digits)));
  }
  field.codec_level = negative ? -level : level;
}

// The options after a field's shape, each ":WORD" or ":WORD=VALUE", each at most once (the cursor is at the first
// ':'): one row per word; a row's parse reads what follows the word. Rows of one group (the codecs) exclude each
// other.
struct FieldOption {
  std::string_view word;
  std::string_view form;   ///< how it is written, for messages ("stack=AXIS")
  std::string_view group;  ///< options of one group exclude each other ("codec"); "" for an option of its own
  void (*parse)(Cursor& cur, Field& field, const std::function<std::string()>& where);
};

constexpr FieldOption kFieldOptions[] = {
    {"stack", "stack=AXIS", "", [](Cursor& cur, Field& field, const std::function<std::string()>& where) {
       parse_stack_axis(cur, field, where);
     }},
    {"lz4", "lz4", "codec",
     [](Cursor&, Field& field, const std::function<std::string()>&) { field.codec = Codec::lz4; }},
    {"zstd", "zstd=LEVEL", "codec", [](Cursor& cur, Field& field, const std::function<std::string()>& where) {
       parse_zstd_level(cur, field, where);
     }},
    {"derived", "derived", "",
     [](Cursor&, Field& field, const std::function<std::string()>&) { field.derived = true; }},
};

// The options as written, "a, b, c or d" (messages).
std::string option_words() {
  std::string out;
  const std::size_t n = std::size(kFieldOptions);
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    out += kFieldOptions[i].form;
  }
  return out;
}

template <class Where>
void parse_field_options(Cursor& cur, Field& field, const Where& where) {
  std::vector<std::string_view> seen;  // the words and groups given so far
  const std::function<std::string()> where_fn = where;
  while (cur.peek() == ':') {
    cur.advance();
    const std::string at = where();
    const std::string_view word = cur.take_while([](char c) { return is_word_char(c) || is_digit(c); });
    const FieldOption* option = nullptr;
    for (const FieldOption& o : kFieldOptions) {
      if (o.word == word) option = &o;
    }
    if (option == nullptr) {
      fail(fmt::format("{}: expected an option after ':' ({}; as in {}:stack=0:lz4), found '{}'", at, option_words(),
                       field.to_string(), std::string(word) + (cur.done() ? std::string() : std::string(1, cur.peek()))));
    }
    const auto given = [&](std::string_view key) { return std::find(seen.begin(), seen.end(), key) != seen.end(); };
    if (given(option->word)) fail(fmt::format("{}: '{}' is given twice", at, word));
    if (!option->group.empty() && given(option->group)) {
      fail(fmt::format("{}: '{}' follows another codec; a field has at most one", at, word));
    }
    seen.push_back(option->word);
    if (!option->group.empty()) seen.push_back(option->group);
    option->parse(cur, field, where_fn);
  }
}

}  // namespace

std::size_t dtype_bytes(DType dtype) noexcept {
  const auto* d = info(dtype);
  return d ? d->bytes : 0;
}

std::string_view dtype_name(DType dtype) noexcept {
  const auto* d = info(dtype);
  return d ? d->name : std::string_view("?");
}

std::optional<DType> parse_dtype(std::string_view text) noexcept {
  for (const auto& d : kDTypes) {
    if (d.name == text) return d.dtype;
  }
  return std::nullopt;
}

bool is_dtype(uint32_t raw) noexcept { return info(static_cast<DType>(raw)) != nullptr; }

uint64_t Field::elements() const noexcept {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t Field::bytes() const noexcept { return elements() * dtype_bytes(dtype); }

std::string Field::shape_string() const {
  return shape.empty() ? std::string("scalar") : fmt::format("[{}]", fmt::join(shape, ","));
}

std::string Field::to_string() const {
  std::string s = shape.empty() ? fmt::format("{}:{}", name, dtype_name(dtype))
                                : fmt::format("{}:{}[{}]", name, dtype_name(dtype), fmt::join(shape, ","));
  if (stack_axis) s += fmt::format(":stack={}", *stack_axis);
  if (codec == Codec::lz4) s += ":lz4";
  if (codec == Codec::zstd) s += fmt::format(":zstd={}", codec_level);
  if (derived) s += ":derived";
  return s;
}

Schema::Schema(std::vector<Field> fields) : fields_(std::move(fields)) {
  if (fields_.empty()) fail("schema: it has no fields; at least one is needed");
  if (fields_.size() > kMaxFields) {
    fail(fmt::format("schema: it has {} fields, at most {} are allowed", fields_.size(), kMaxFields));
  }
  std::set<std::string_view> seen;
  uint64_t total = 0;
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    const Field& f = fields_[i];
    const std::string where = fmt::format("field {} '{}'", i + 1, f.name);
    const uint64_t bytes = validate_field(f, where);
    if (!seen.insert(f.name).second) {
      fail(fmt::format("schema {}: the name is used by an earlier field; names must be unique", where));
    }
    total += bytes;
    if (total > kMaxStepBytes) {
      fail(fmt::format("schema {}: the step would exceed {} bytes with this field", where, kMaxStepBytes));
    }
  }
  step_bytes_ = total;
}

Schema Schema::parse(std::string_view spec) {
  std::vector<Field> fields;
  Cursor cur(spec);
  for (cur.skip_separators(); !cur.done(); cur.skip_separators()) {
    const std::size_t index = fields.size() + 1;
    Field field;
    const std::string name_at = cur.where();
    field.name = std::string(cur.take_while(is_token_char));
    if (field.name.empty()) {
      fail(fmt::format("schema spec, field {} at {}: expected a field name, found {}", index, name_at,
                       cur.found()));
    }
    const auto where = [&] { return fmt::format("schema spec, field {} '{}' at {}", index, field.name, cur.where()); };
    if (cur.peek() != ':') {
      fail(fmt::format("{}: expected ':' and a dtype after the name (as in {}:f32)", where(), field.name));
    }
    cur.advance();
    const std::string dtype_at = where();
    const std::string_view dtype_text = cur.take_while(is_token_char);
    const auto dtype = parse_dtype(dtype_text);
    if (!dtype) {
      fail(fmt::format("{}: unknown dtype '{}', expected one of {}", dtype_at, dtype_text, all_dtype_names()));
    }
    field.dtype = *dtype;
    if (cur.peek() == '[') {
      cur.advance();
      cur.skip_blanks();
      if (cur.peek() == ']') fail(fmt::format("{}: the shape is empty; omit the brackets for a scalar", where()));
      while (true) {
        cur.skip_blanks();
        const std::string dim_at = where();
        const std::string_view digits = cur.take_while(is_digit);
        uint64_t dim = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), dim);
        if (digits.empty()) {
          fail(fmt::format("{}: expected a dimension (a positive integer), found {}", dim_at, cur.found()));
        }
        if (ec != std::errc{} || end != digits.data() + digits.size()) {
          fail(fmt::format("{}: dimension '{}' does not fit in 64 bits", dim_at, digits));
        }
        field.shape.push_back(dim);
        cur.skip_blanks();
        if (cur.peek() == ',') {
          cur.advance();
          continue;
        }
        if (cur.peek() == ']') {
          cur.advance();
          break;
        }
        fail(fmt::format("{}: expected ',' or ']' in the shape, found {}", where(), cur.found()));
      }
    }
    if (cur.peek() == ':') parse_field_options(cur, field, where);
    if (!cur.done()) {
      const char c = cur.peek();
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != ';' && c != '#') {
        fail(fmt::format("{}: unexpected '{}' after the field; separate fields with spaces", where(), c));
      }
    }
    validate_field(field, fmt::format("spec, field {} '{}'", index, field.name));
    fields.push_back(std::move(field));
  }
  if (fields.empty()) fail("schema spec: it has no fields; write them as NAME:DTYPE[SHAPE], e.g. 'obs:f32[4] done:bool'");
  return Schema(std::move(fields));
}

std::optional<std::size_t> Schema::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    if (fields_[i].name == name) return i;
  }
  return std::nullopt;
}

std::string Schema::to_string() const {
  std::string out;
  for (const auto& f : fields_) {
    if (!out.empty()) out += ' ';
    out += f.to_string();
  }
  return out;
}

std::vector<std::string> Schema::differences(const Schema& expected, const Schema& actual) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const Field& want = expected.fields_[i];
    const auto at = actual.find(want.name);
    if (!at) {
      out.push_back(fmt::format("field '{}': expected {} at position {}, but the segment has no such field",
                                want.name, want.to_string(), i + 1));
      continue;
    }
    const Field& have = actual.fields_[*at];
    if (want.dtype != have.dtype) {
      out.push_back(fmt::format("field '{}': expected dtype {}, actual {}", want.name, dtype_name(want.dtype),
                                dtype_name(have.dtype)));
    }
    if (want.shape != have.shape) {
      out.push_back(fmt::format("field '{}': expected shape {}, actual {}", want.name, want.shape_string(),
                                have.shape_string()));
    }
    if (want.stack_axis != have.stack_axis) {
      const auto stacking = [](const Field& f) {
        return f.stack_axis ? fmt::format("stacked on axis {}", *f.stack_axis) : std::string("not stacked");
      };
      out.push_back(fmt::format("field '{}': expected {}, actual {}", want.name, stacking(want), stacking(have)));
    }
    if (want.codec != have.codec || want.codec_level != have.codec_level) {
      const auto keeping = [](const Field& f) {
        return f.codec == Codec::none ? std::string("stored as pushed")
                                      : fmt::format("compressed with {}", f.to_string().substr(f.to_string().rfind(':') + 1));
      };
      out.push_back(fmt::format("field '{}': expected {}, actual {}", want.name, keeping(want), keeping(have)));
    }
    if (want.derived != have.derived) {
      const auto kind = [](const Field& f) { return f.derived ? "derived" : "not derived"; };
      out.push_back(fmt::format("field '{}': expected {}, actual {}", want.name, kind(want), kind(have)));
    }
    if (*at != i) {
      out.push_back(fmt::format("field '{}': expected at position {}, actual position {}", want.name, i + 1, *at + 1));
    }
  }
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!expected.find(actual.fields_[i].name)) {
      out.push_back(fmt::format("field '{}': not expected, but the segment has {} at position {}",
                                actual.fields_[i].name, actual.fields_[i].to_string(), i + 1));
    }
  }
  return out;
}

}  // namespace shmreplay
