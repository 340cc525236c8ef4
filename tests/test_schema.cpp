// Schema: the text form, validation and comparison.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "detail/elements.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/schema.hpp"
#include "support.hpp"

using namespace shmreplay;
using shmreplay::test::error_of;

namespace {
// The message of the invalid_schema error that parsing `spec` throws; fails the test if it throws none.
std::string parse_error(const std::string& spec) {
  std::string message;
  const int code = error_of([&] { (void)Schema::parse(spec); }, &message);
  CHECK_MESSAGE(code == static_cast<int>(Errc::invalid_schema), "spec: ", spec, " gave: ", message);
  return message;
}
}  // namespace

TEST_CASE("the README's spec parses into ordered fields with dtypes and shapes") {
  const Schema s = Schema::parse("obs:u8[84,84,4] action:i32 reward:f32 done:bool");
  REQUIRE(s.size() == 4);
  CHECK(s[0].name == "obs");
  CHECK(s[0].dtype == DType::u8);
  CHECK(s[0].shape == std::vector<uint64_t>{84, 84, 4});
  CHECK(s[0].bytes() == 84 * 84 * 4);
  CHECK(s[1].name == "action");
  CHECK(s[1].dtype == DType::i32);
  CHECK(s[1].shape.empty());
  CHECK(s[2].dtype == DType::f32);
  CHECK(s[3].dtype == DType::boolean);
  CHECK(s.step_bytes() == 84 * 84 * 4 + 4 + 4 + 1);
  CHECK(s.find("reward") == 2u);
  CHECK_FALSE(s.find("missing").has_value());
}

TEST_CASE("every dtype parses and has its element size") {
  const struct {
    const char* name;
    DType dtype;
    std::size_t bytes;
  } cases[] = {{"u8", DType::u8, 1},     {"i8", DType::i8, 1},   {"u16", DType::u16, 2},   {"i16", DType::i16, 2},
               {"u32", DType::u32, 4},   {"i32", DType::i32, 4}, {"u64", DType::u64, 8},   {"i64", DType::i64, 8},
               {"f16", DType::f16, 2},   {"bf16", DType::bf16, 2}, {"f32", DType::f32, 4}, {"f64", DType::f64, 8},
               {"bool", DType::boolean, 1}};
  for (const auto& c : cases) {
    CAPTURE(c.name);
    CHECK(parse_dtype(c.name) == c.dtype);
    CHECK(dtype_bytes(c.dtype) == c.bytes);
    CHECK(dtype_name(c.dtype) == c.name);
    const Schema s = Schema::parse(std::string("x:") + c.name + "[3]");
    CHECK(s.step_bytes() == 3 * c.bytes);
  }
  CHECK_FALSE(parse_dtype("float").has_value());
  CHECK_FALSE(is_dtype(0));
  CHECK_FALSE(is_dtype(14));
}

// True when every byte >= 0x80 of s belongs to a well-formed UTF-8 sequence (no character cut in half).
bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    }
    i += n;
  }
  return true;
}

TEST_CASE("an error about a non-ASCII character names its byte and stays valid UTF-8") {
  for (const std::string spec : {"\xc3\xa9:f32", "a:f32 b:f32[\xc3\xa9]"}) {
    CAPTURE(spec);
    const std::string m = parse_error(spec);
    CHECK(valid_utf8(m));
    CHECK(m.find("byte 0xc3 (not ASCII)") != std::string::npos);
  }
  CHECK(valid_utf8(parse_error("a:f\xc3\xa9")));  // a token quoted whole keeps its characters whole
  CHECK(valid_utf8(parse_error("a:f32 \x01:u8")));
  CHECK(parse_error("a:f32 \x01:u8").find("byte 0x01 (a control character)") != std::string::npos);
}

TEST_CASE("to_string gives a spec that parses back to the same schema") {
  const std::string spec = "obs:f32[17] action:f32[6] logprob:f32 reward:f32 value:f32 done:bool img:u8[2,3,4,5]";
  const Schema s = Schema::parse(spec);
  CHECK(s.to_string() == spec);
  CHECK(Schema::parse(s.to_string()) == s);
}

TEST_CASE("newlines, semicolons, blanks inside shapes and comments are accepted") {
  const Schema s = Schema::parse("# a schema file\nobs:u8[84, 84 ,4]\n\taction:i32 ; reward:f32 # trailing\r\n\n");
  CHECK(s.to_string() == "obs:u8[84,84,4] action:i32 reward:f32");
}

TEST_CASE("a spec that does not parse is rejected with the field, its position and what was expected") {
  CHECK(parse_error("").find("no fields") != std::string::npos);
  CHECK(parse_error("   # only a comment\n").find("no fields") != std::string::npos);
  {
    const std::string m = parse_error("obs:u8[4] action:u9");
    CHECK(m.find("field 2 'action'") != std::string::npos);
    CHECK(m.find("unknown dtype 'u9'") != std::string::npos);
    CHECK(m.find("u8 i8 u16") != std::string::npos);  // lists the expected dtypes
  }
  CHECK(parse_error("obs").find("expected ':'") != std::string::npos);
  CHECK(parse_error("obs : u8").find("field 1 'obs'") != std::string::npos);
  CHECK(parse_error(":u8").find("expected a field name") != std::string::npos);
  CHECK(parse_error("obs:u8[]").find("the shape is empty") != std::string::npos);
  CHECK(parse_error("obs:u8[4,]").find("expected a dimension") != std::string::npos);
  CHECK(parse_error("obs:u8[4").find("expected ',' or ']' in the shape, found the end of the spec") !=
        std::string::npos);
  CHECK(parse_error("obs:u8[").find("expected a dimension (a positive integer), found the end of the spec") !=
        std::string::npos);
  CHECK(parse_error("obs:u8[4,").find("found the end of the spec") != std::string::npos);
  CHECK(parse_error("obs:u8[4]x").find("unexpected 'x'") != std::string::npos);
  CHECK(parse_error("obs:u8[99999999999999999999999]").find("does not fit in 64 bits") != std::string::npos);
  {
    const std::string m = parse_error("a:f32\nb:f33");
    CHECK(m.find("line 2") != std::string::npos);
  }
}

TEST_CASE("zero-sized shapes are rejected with the offending field named") {
  const std::string m = parse_error("ok:f32 obs:u8[84,0,4]");
  CHECK(m.find("field 2 'obs'") != std::string::npos);
  CHECK(m.find("dimension 2") != std::string::npos);
  CHECK(m.find("[84,0,4]") != std::string::npos);
}

TEST_CASE("shapes whose size overflows are rejected with the offending field named") {
  const std::string m = parse_error("ok:f32 huge:f64[4294967296,4294967296]");
  CHECK(m.find("field 2 'huge'") != std::string::npos);
  CHECK(m.find("too large") != std::string::npos);
  // Fits in 64 bits but exceeds the per-step limit.
  CHECK(parse_error("big:u8[65536,65536,2]").find("too large") != std::string::npos);
  // Fields that are each fine but together exceed the step limit: the field that tips it over is named.
  const std::string sum = parse_error("a:u8[4294967296] b:u8[1]");
  CHECK(sum.find("field 2 'b'") != std::string::npos);
  // Too many dimensions.
  CHECK(parse_error("x:u8[1,1,1,1,1,1,1,1,1]").find("9 dimensions") != std::string::npos);
}

TEST_CASE("names must be non-empty, unique, short and made of sane characters") {
  CHECK(parse_error("obs:f32 obs:i32").find("field 2 'obs'") != std::string::npos);
  CHECK(parse_error("obs:f32 obs:i32").find("unique") != std::string::npos);
  CHECK(parse_error("9lives:f32").find("not allowed") != std::string::npos);
  CHECK(parse_error(std::string(64, 'a') + ":f32").find("64 bytes long") != std::string::npos);
  CHECK_NOTHROW(Schema::parse(std::string(63, 'a') + ":f32"));
  CHECK_NOTHROW(Schema::parse("obs.pixels:u8 next-obs:u8 _x:u8"));
  // Constructed (not parsed) schemas are validated the same way.
  std::string m;
  CHECK(error_of([] { Schema({Field{"", DType::f32, {}}}); }, &m) == static_cast<int>(Errc::invalid_schema));
  CHECK(m.find("name is empty") != std::string::npos);
  CHECK(error_of([] { Schema({Field{"a b", DType::f32, {}}}); }, &m) == static_cast<int>(Errc::invalid_schema));
  CHECK(m.find("'a b'") != std::string::npos);
  CHECK(error_of([] { Schema({Field{"x", static_cast<DType>(99), {}}}); }, &m) ==
        static_cast<int>(Errc::invalid_schema));
  CHECK(m.find("dtype 99") != std::string::npos);
  CHECK(error_of([] { Schema(std::vector<Field>{}); }) == static_cast<int>(Errc::invalid_schema));
  std::vector<Field> many;
  for (int i = 0; i < 257; ++i) many.push_back({fmt::format("f{}", i), DType::u8, {}});
  CHECK(error_of([&] { Schema{many}; }, &m) == static_cast<int>(Errc::invalid_schema));
  CHECK(m.find("257 fields") != std::string::npos);
}

TEST_CASE("differences lists each mismatch field by field") {
  const Schema expected = Schema::parse("obs:f32[4] action:i32 reward:f32 done:bool");
  CHECK(Schema::differences(expected, expected).empty());
  const Schema actual = Schema::parse("obs:f32[5] action:i64 done:bool extra:u8");
  const auto d = Schema::differences(expected, actual);
  REQUIRE(d.size() == 5);
  CHECK(d[0] == "field 'obs': expected shape [4], actual [5]");
  CHECK(d[1] == "field 'action': expected dtype i32, actual i64");
  CHECK(d[2].find("field 'reward': expected reward:f32 at position 3, but the segment has no such field") == 0);
  CHECK(d[3] == "field 'done': expected at position 4, actual position 3");
  CHECK(d[4].find("field 'extra': not expected") == 0);
  // Scalars versus arrays.
  const auto s = Schema::differences(Schema::parse("x:f32"), Schema::parse("x:f32[1]"));
  REQUIRE(s.size() == 1);
  CHECK(s[0] == "field 'x': expected shape scalar, actual [1]");
}

// detail/elements.hpp: the element types of the dtypes and the f16/bf16 decoders that episodes, dump and the
// Python module share.

TEST_CASE("every f16 bit pattern widens to its sign, exponent and mantissa's value, subnormals, inf and NaN too") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const int exponent = static_cast<int>(bits >> 10) & 0x1f;
    const double mantissa = static_cast<double>(bits & 0x3ff);
    const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
    const float got = detail::to_float(detail::Float16{static_cast<uint16_t>(bits)});
    if (exponent == 31 && mantissa != 0) {
      CHECK_MESSAGE(std::isnan(got), "bits ", bits);
      continue;
    }
    const double expected = exponent == 31  ? sign * HUGE_VAL
                            : exponent == 0 ? sign * std::ldexp(mantissa, -24)
                                            : sign * std::ldexp(1024.0 + mantissa, exponent - 25);
    CHECK_MESSAGE(static_cast<double>(got) == expected, "bits ", bits);
    CHECK(std::signbit(got) == (sign < 0));
  }
}

TEST_CASE("every bf16 bit pattern widens to the float whose upper half it is") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint32_t wide = bits << 16;
    float expected = 0;
    std::memcpy(&expected, &wide, sizeof expected);
    const float got = detail::to_float(detail::BFloat16{static_cast<uint16_t>(bits)});
    CHECK_MESSAGE(std::memcmp(&got, &expected, sizeof got) == 0, "bits ", bits);
  }
}

TEST_CASE("with_dtype gives each dtype an element type of its size, and element_as_double reads its bytes") {
  for (uint32_t raw = 1; is_dtype(raw); ++raw) {
    const auto dtype = static_cast<DType>(raw);
    const std::size_t size = detail::with_dtype(dtype, [](auto tag) -> std::size_t {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_void_v<T>) {
        return 0;
      } else {
        return sizeof(T);
      }
    });
    CHECK_MESSAGE(size == dtype_bytes(dtype), dtype_name(dtype));
  }
  const auto read = [](DType dtype, auto value) {
    std::byte bytes[16] = {};
    std::memcpy(bytes + 1, &value, sizeof value);  // unaligned on purpose
    return detail::element_as_double(dtype, bytes + 1);
  };
  CHECK(read(DType::i8, int8_t{-3}) == -3.0);
  CHECK(read(DType::u64, uint64_t{1} << 40) == std::ldexp(1.0, 40));
  CHECK(read(DType::f16, uint16_t{0xbc00}) == -1.0);
  CHECK(read(DType::bf16, uint16_t{0x4049}) == 3.140625);
  CHECK(read(DType::f64, 0.1) == 0.1);
  CHECK(read(DType::boolean, uint8_t{2}) == 1.0);
  CHECK(read(static_cast<DType>(0), uint8_t{7}) == 0.0);  // not a dtype
  CHECK(detail::with_dtype(static_cast<DType>(99), [](auto tag) {
    return std::is_void_v<typename decltype(tag)::type>;
  }));
}
