// detail/os/crc32c.hpp: CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and SSE 4.2's crc32 instruction;
// reflected, initial value and final xor 0xffffffff), for the checks of compressed fields' records (layout 1.11;
// detail/protocol/packed_frames.hpp). With SSE 4.2 (checked once at run time) the instruction takes 8 bytes a step,
// about 5x the table-driven CRC-32 of checkpoints (crc32.hpp), whose polynomial the instruction does not compute;
// without it, a table. Who calls it: the writers of compressed fields and every reader of their records. A pure
// function: safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shmreplay::detail {

/// Continues a CRC-32C over `bytes` bytes at `data`; start with crc = 0. crc32c(crc32c(0, a), b) == crc32c(0, a + b).
/// crc32c(0, "123456789", 9) == 0xe3069283 (the standard check value).
uint32_t crc32c(uint32_t crc, const void* data, std::size_t bytes) noexcept;

/// The table-driven path alone (what a machine without SSE 4.2 runs), for the test that holds both to one answer.
uint32_t crc32c_portable(uint32_t crc, const void* data, std::size_t bytes) noexcept;

}  // namespace shmreplay::detail
