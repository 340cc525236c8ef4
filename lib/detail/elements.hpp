// detail/elements.hpp: one element of a field, read by its dtype: the one switch over DType that maps a dtype to
// the C++ type of its element (with_dtype), and the one decoder of f16 and bf16 bits. Used by the episode
// bookkeeping (a reward field's value: detail/protocol/episodes.cpp), `shmreplay dump` (tools/cli/dump.cpp) and
// the Python module (the NumPy dtype of each DType: lib/python/convert.hpp). Plain functions of bytes: safe
// anywhere, no state.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "shmreplay/schema.hpp"

namespace shmreplay::detail {

/// An f16 element's bits (IEEE 754 binary16), and a bf16 element's (bfloat16: a float32's upper half).
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

/// The type of one element, passed to with_dtype's function as a value: TypeTag<float>{}. bool is DType::boolean
/// (one byte, nonzero read as true); void stands for a value that is not a DType (a damaged field table).
template <class T>
struct TypeTag {
  using type = T;
};

/// f(TypeTag<T>{}) for the element type T of `dtype`: uint8_t ... int64_t, Float16, BFloat16, float, double, bool,
/// or void for a value that is not a DType. The one switch over DType's element types: a new dtype is a new case
/// here and a row of lib/schema.cpp's table.
template <class F>
decltype(auto) with_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::u8: return f(TypeTag<uint8_t>{});
    case DType::i8: return f(TypeTag<int8_t>{});
    case DType::u16: return f(TypeTag<uint16_t>{});
    case DType::i16: return f(TypeTag<int16_t>{});
    case DType::u32: return f(TypeTag<uint32_t>{});
    case DType::i32: return f(TypeTag<int32_t>{});
    case DType::u64: return f(TypeTag<uint64_t>{});
    case DType::i64: return f(TypeTag<int64_t>{});
    case DType::f16: return f(TypeTag<Float16>{});
    case DType::bf16: return f(TypeTag<BFloat16>{});
    case DType::f32: return f(TypeTag<float>{});
    case DType::f64: return f(TypeTag<double>{});
    case DType::boolean: return f(TypeTag<bool>{});
  }
  return f(TypeTag<void>{});
}

/// The element of type T at `p` (unaligned is fine); a bool is any nonzero byte.
template <class T>
T load_element(const std::byte* p) noexcept {
  if constexpr (std::is_same_v<T, bool>) {
    return *p != std::byte{0};
  } else {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
}

/// An f16 value, widened exactly (every binary16 value is a float: subnormals, infinities and NaN included).
inline float to_float(Float16 h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in a float
    const float v = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -v : v;
  }
  const uint32_t bits = exponent == 0x1f ? sign | 0x7f800000u | (mantissa << 13)  // inf, NaN
                                         : sign | ((exponent + 112) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

/// A bf16 value, widened exactly.
inline float to_float(BFloat16 b) noexcept { return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16); }

/// An element's value as a double: exact for every dtype but 64-bit integers beyond 2^53 (rounded); bool 0 or 1.
template <class T>
double element_value(T v) noexcept {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(to_float(v));
  } else {
    return static_cast<double>(v);
  }
}

/// The element of `dtype` at `p` (unaligned is fine) as a double (element_value); 0 for a value that is not a
/// DType.
inline double element_as_double(DType dtype, const std::byte* p) noexcept {
  return with_dtype(dtype, [p](auto tag) noexcept -> double {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_void_v<T>) {
      return 0.0;
    } else {
      return element_value(load_element<T>(p));
    }
  });
}

}  // namespace shmreplay::detail
