// detail/copy_bytes.hpp: memcpy of a small run-time size, inline.
//
// The writer copies each field of a step (lib/writer_push.cpp, write_step) and the sampler's gather each field of a
// row (detail/storage/gather.hpp) with sizes known only at run time; glibc's memcpy through the PLT costs a call
// and a size dispatch per field, which dominates for fields of a few bytes (a reward, a done flag). copy_bytes
// does n <= 128 with two possibly overlapping loads and stores of a power-of-two width: a few predictable
// branches on n (the same n comes back for the same field) and no call.
#pragma once

#include <cstddef>
#include <cstring>

#include "detail/always_inline.hpp"

namespace shmreplay::detail {

/// memcpy(d, s, n) for k <= n <= 2k: the first and the last k bytes, two loads and two stores of a fixed width
/// (they overlap when n < 2k). The building block of copy_bytes, and of the sampler's gather, which picks k once
/// per field (detail/storage/gather.hpp).
template <std::size_t k>
SHMREPLAY_ALWAYS_INLINE void copy_ends(std::byte* d, const std::byte* s, std::size_t n) noexcept {
  static_assert(k > 0);
  unsigned char a[k];
  unsigned char b[k];
  __builtin_memcpy(a, s, k);
  __builtin_memcpy(b, s + n - k, k);
  __builtin_memcpy(d, a, k);
  __builtin_memcpy(d + n - k, b, k);
}

/// memcpy(d, s, n) for non-overlapping d and s: inline for n <= 128.
SHMREPLAY_ALWAYS_INLINE void copy_bytes(std::byte* d, const std::byte* s, std::size_t n) noexcept {
  const auto two = [&]<std::size_t k>() { copy_ends<k>(d, s, n); };
  if (n <= 16) {
    if (n >= 8) {
      two.template operator()<8>();
    } else if (n >= 4) {
      two.template operator()<4>();
    } else if (n >= 2) {
      two.template operator()<2>();
    } else if (n == 1) {
      *d = *s;
    }
  } else if (n <= 32) {
    two.template operator()<16>();
  } else if (n <= 64) {
    two.template operator()<32>();
  } else if (n <= 128) {
    two.template operator()<64>();
  } else {
    std::memcpy(d, s, n);
  }
}

}  // namespace shmreplay::detail
