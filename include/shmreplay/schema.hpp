// shmreplay/schema.hpp: the fields of one step, their dtypes and shapes; parse, validate, compare.
//
// A Schema is an ordered list of named fields. Each field has a dtype and a shape (empty for a scalar); one
// step of the buffer holds one value of every field. The text form, used by the CLI and by configs, lists the
// fields separated by white space (or ';'), each as NAME:DTYPE or NAME:DTYPE[D0,D1,...]; '#' starts a comment
// that runs to the end of the line:
//
//     obs:u8[84,84,4] action:i32 reward:f32 done:bool
//
// A field whose value is a stack of the last K frames (an Atari observation, u8[4,84,84]) can be declared stacked
// along the axis that holds the frames, newest last, by appending ":stack=AXIS" (AXIS counts from 0; -1 is the
// last axis, and is stored as the axis it names):
//
//     obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool
//
// The user pushes and samples the whole stack, as the env gives it; the buffer keeps one frame per step (K for a
// step whose stack does not continue its predecessor's) and rebuilds every stack when it is read
// (docs/design/stacks.md).
//
// A pixel field, stacked or not, can be kept compressed by appending ":lz4" or ":zstd=LEVEL" (":zstd" alone for
// kDefaultZstdLevel); a stacked field compresses each frame on its own:
//
//     obs:u8[4,84,84]:stack=0:lz4 action:i32 reward:f32 done:bool
//     pixels:u8[64,64,3]:zstd=1
//
// The buffer stores each frame as a compressed record and decompresses it when it is read, byte-exact
// (docs/design/compression.md).
//
// A field that reanalyse recomputes (a value target, a root value, the version of the network that computed them)
// is declared derived by appending ":derived". Writers push it as an initial value like any field; afterwards
// Sampler::write_back rewrites it (and only derived fields) through the handles a sample returned
// (docs/design/write_back.md). A derived field is stored as pushed: neither stacked nor compressed.
//
//     obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool value_target:f32:derived target_version:i64:derived
//
// Schema objects are plain values: immutable after construction, safe to share between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shmreplay {

/// Element types. The numeric values are stored in the segment's field table: never renumber them.
enum class DType : uint32_t {
  u8 = 1, i8 = 2, u16 = 3, i16 = 4, u32 = 5, i32 = 6, u64 = 7, i64 = 8,
  f16 = 9,      ///< IEEE 754 half precision
  bf16 = 10,    ///< bfloat16
  f32 = 11, f64 = 12,
  boolean = 13, ///< one byte, 0 or 1; spelled "bool" in the text form
};

inline constexpr std::size_t kMaxDims = 8;           ///< dimensions of a field's shape, at most
inline constexpr std::size_t kMaxNameBytes = 63;      ///< bytes of a field's name, at most
inline constexpr std::size_t kMaxFields = 256;        ///< fields of a schema, at most
inline constexpr uint64_t kMaxStepBytes = 1ull << 32; ///< bytes of one step (all fields together), at most

/// How a field's frames are kept in the segment. The numeric values are stored in the segment's field table: never
/// renumber them.
enum class Codec : uint32_t {
  none = 0,  ///< as pushed (the default)
  lz4 = 1,   ///< LZ4 (":lz4"), its default acceleration: the fastest to write and read
  zstd = 2,  ///< Zstandard at Field::codec_level (":zstd=LEVEL"): smaller, slower to write
};
inline constexpr int32_t kDefaultZstdLevel = 3;  ///< ":zstd" without a level
inline constexpr int32_t kMinZstdLevel = -7;     ///< zstd's fast levels, -7 to -1, trade ratio for speed
inline constexpr int32_t kMaxZstdLevel = 19;     ///< levels above 19 need far more memory to write
/// The ratio a compressed field's byte budget assumes by default (CreateOptions::expected_compression).
inline constexpr double kDefaultExpectedCompression = 4.0;

/// Bytes of one element of `dtype`; 0 for a value that is not a DType.
std::size_t dtype_bytes(DType dtype) noexcept;
/// The text form's spelling ("u8", "bool", ...); "?" for a value that is not a DType.
std::string_view dtype_name(DType dtype) noexcept;
/// Parses a dtype's spelling; nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view text) noexcept;
/// Whether `raw` (as stored in a segment) is one of the DType values.
bool is_dtype(uint32_t raw) noexcept;

/// One named field of a step: a dtype and a shape (empty for a scalar). A plain value; Schema validates it.
struct Field {
  std::string name;             ///< the field's name: [A-Za-z_][A-Za-z0-9_.-]*, at most kMaxNameBytes bytes
  DType dtype = DType::u8;      ///< the element type
  std::vector<uint64_t> shape;  ///< empty for a scalar
  /// The axis of `shape` that stacks the last K = shape[axis] frames, newest last (":stack=AXIS" in the text
  /// form); nullopt for a field stored as pushed. A stacked axis has at least 2 frames.
  std::optional<uint32_t> stack_axis;
  /// How the field's frames are kept (":lz4", ":zstd=LEVEL"); Codec::none for a field stored as pushed.
  Codec codec = Codec::none;
  /// zstd's level, kMinZstdLevel to kMaxZstdLevel but not 0, for Codec::zstd; 0 otherwise.
  int32_t codec_level = 0;
  /// Whether the field is derived (":derived"): the only kind Sampler::write_back rewrites. Never stacked or
  /// compressed.
  bool derived = false;

  /// Elements per step: the product of the shape (1 for a scalar). Assumes a validated field.
  uint64_t elements() const noexcept;
  /// Bytes per step: elements() * dtype_bytes(dtype). Assumes a validated field.
  uint64_t bytes() const noexcept;
  /// Whether the field is stacked (stack_axis is set).
  bool stacked() const noexcept { return stack_axis.has_value(); }
  /// Frames of a stacked field's stack, K = shape[*stack_axis]; 1 for a field that is not stacked.
  uint64_t stack_depth() const noexcept { return stacked() ? shape[*stack_axis] : 1; }
  /// Bytes of one frame: bytes() / stack_depth() (bytes() for a field that is not stacked).
  uint64_t frame_bytes() const noexcept { return bytes() / stack_depth(); }
  /// Whether the field is compressed (codec is not Codec::none).
  bool compressed() const noexcept { return codec != Codec::none; }
  /// The text form, e.g. "obs:u8[84,84,4]", "obs:u8[4,84,84]:stack=0" for a stacked field, with ":lz4" or
  /// ":zstd=LEVEL" after it for a compressed one and ":derived" last for a derived one.
  std::string to_string() const;
  /// The shape alone: "[84,84,4]", or "scalar".
  std::string shape_string() const;

  /// Equal when name, dtype, shape, stack axis, codec (with its level) and derived are.
  friend bool operator==(const Field&, const Field&) = default;
};

/// The ordered, validated fields of every step of a buffer (see the top of this file for the text form). An
/// immutable value, safe to share between threads.
class Schema {
 public:
  /// An empty schema (no fields); a buffer needs at least one, so this is only a placeholder to assign to.
  Schema() = default;
  /// Validates `fields` and throws Error(Errc::invalid_schema) naming the offending field when: there are no
  /// fields or more than kMaxFields; a name is empty, longer than kMaxNameBytes, does not match
  /// [A-Za-z_][A-Za-z0-9_.-]*, or repeats; a dtype is not a DType; a shape has more than kMaxDims dimensions,
  /// a zero dimension, or a size that overflows; the whole step exceeds kMaxStepBytes.
  explicit Schema(std::vector<Field> fields);

  /// Parses the text form (see the top of this file) and validates it as the constructor does. Errors name the
  /// field, its position in the spec (1-based) and the column of the problem.
  static Schema parse(std::string_view spec);

  /// The fields, in order.
  const std::vector<Field>& fields() const noexcept { return fields_; }
  /// The number of fields.
  std::size_t size() const noexcept { return fields_.size(); }
  /// Whether there are no fields (only a default-constructed Schema).
  bool empty() const noexcept { return fields_.empty(); }
  /// The field at `index` (schema order); throws std::out_of_range past the end.
  const Field& operator[](std::size_t index) const { return fields_.at(index); }

  /// Index of the field called `name`; nullopt when there is none.
  std::optional<std::size_t> find(std::string_view name) const noexcept;
  /// Bytes of one step, all fields together.
  uint64_t step_bytes() const noexcept { return step_bytes_; }
  /// The text form, fields separated by single spaces; parse(to_string()) == *this.
  std::string to_string() const;

  /// One human-readable line per difference between `expected` and `actual` (a missing, extra or reordered
  /// field; a different dtype or shape), each naming the field; empty when they are equal.
  static std::vector<std::string> differences(const Schema& expected, const Schema& actual);

  /// Equal when the fields are, in the same order.
  friend bool operator==(const Schema& a, const Schema& b) { return a.fields_ == b.fields_; }

 private:
  std::vector<Field> fields_;
  uint64_t step_bytes_ = 0;
};

/// A read-only view of some field values passed to the library: `bytes` bytes at `data`, laid out C-contiguous.
/// For a batched push it holds [n][field shape]; for a single step, one value of the field. `data == nullptr`
/// means "no value" where an operation allows it (try_update leaves such a field unchanged).
struct FieldBytes {
  const void* data = nullptr;  ///< the first byte, or nullptr for "no value"
  std::size_t bytes = 0;       ///< the number of bytes at `data`
};

/// Views a contiguous array of any trivially copyable type as FieldBytes.
template <class T>
FieldBytes field_bytes(std::span<const T> values) noexcept {
  return {values.data(), values.size_bytes()};
}
/// Views a contiguous array of any trivially copyable type as FieldBytes (a span of non-const elements).
template <class T>
FieldBytes field_bytes(std::span<T> values) noexcept {
  return {values.data(), values.size_bytes()};
}
/// Views a vector's elements (any trivially copyable type) as FieldBytes.
template <class T, class Alloc>
FieldBytes field_bytes(const std::vector<T, Alloc>& values) noexcept {
  return {values.data(), values.size() * sizeof(T)};
}
/// Views one value (a scalar field, or a struct laid out like the field) as FieldBytes.
template <class T>
FieldBytes value_bytes(const T& value) noexcept {
  return {&value, sizeof(T)};
}

}  // namespace shmreplay
