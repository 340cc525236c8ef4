#include "detail/os/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace shmreplay::detail {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78u;  // 0x1edc6f41 reflected

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[b] = c;
  }
  return t;
}

constexpr auto kTable = make_table();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const unsigned char* p, std::size_t bytes) {
  uint64_t c = ~crc;
  while (bytes >= 8) {
    uint64_t word = 0;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    bytes -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (bytes-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool has_sse42() noexcept {
  static const bool has = [] {
    __builtin_cpu_init();  // (a static initializer may run before the library's own CPU probe)
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return has;
}
#endif

}  // namespace

uint32_t crc32c_portable(uint32_t crc, const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (bytes-- > 0) c = (c >> 8) ^ kTable[(c ^ *p++) & 0xffu];
  return ~c;
}

uint32_t crc32c(uint32_t crc, const void* data, std::size_t bytes) noexcept {
#if defined(__x86_64__)
  if (has_sse42()) return crc32c_sse42(crc, static_cast<const unsigned char*>(data), bytes);
#endif
  return crc32c_portable(crc, data, bytes);
}

}  // namespace shmreplay::detail
