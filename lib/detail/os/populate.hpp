// detail/os/populate.hpp: faulting a fresh shared mapping's pages in before anyone writes it, and how much memory
// the machine has available. Who calls it: Buffer::create (CreateOptions::populate). Safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace shmreplay::detail {

/// MemAvailable of /proc/meminfo in bytes; nullopt when it cannot be read.
std::optional<uint64_t> mem_available_bytes() noexcept;

/// Faults in the pages of [base, base + bytes) of a writable shared mapping, in chunks of kPopulateChunkBytes:
/// madvise(MADV_POPULATE_WRITE), or, where the kernel lacks it (EINVAL, before Linux 5.14), a write of zero to one
/// byte of each page, so the range must hold only zeros. Calls `progress` (when set) after each chunk with the
/// bytes done and `bytes`; an exception from it propagates. Returns 0, or the errno of a failed madvise (the pages
/// done so far stay populated; the mapping is usable either way).
int populate_writable(std::byte* base, uint64_t bytes, const std::function<void(uint64_t, uint64_t)>& progress);

inline constexpr uint64_t kPopulateChunkBytes = uint64_t{64} << 20;

}  // namespace shmreplay::detail
