// detail/os/crc32.hpp: CRC-32 (IEEE 802.3, the polynomial of zlib, gzip and PNG; reflected, initial value and
// final xor 0xffffffff), for the checksums of checkpoint files. Slicing-by-8: about 1-2 GB/s, so a checksum costs
// less than the read. Who calls it: checkpoint save, verify and load. A pure function: safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shmreplay::detail {

/// Continues a CRC-32 over `bytes` bytes at `data`; start with crc = 0. crc32(crc32(0, a), b) == crc32(0, a + b).
/// crc32(0, "123456789", 9) == 0xcbf43926 (the standard check value).
uint32_t crc32(uint32_t crc, const void* data, std::size_t bytes) noexcept;

}  // namespace shmreplay::detail
