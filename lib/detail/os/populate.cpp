#include "detail/os/populate.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older libc headers lack it
#endif

namespace shmreplay::detail {

std::optional<uint64_t> mem_available_bytes() noexcept {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return std::nullopt;
  std::optional<uint64_t> kib;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long v = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  if (!kib) return std::nullopt;
  return *kib * 1024;
}

int populate_writable(std::byte* base, uint64_t bytes, const std::function<void(uint64_t, uint64_t)>& progress) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  bool have_madvise = true;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kPopulateChunkBytes, bytes - done);
    if (have_madvise && ::madvise(base + done, n, MADV_POPULATE_WRITE) != 0) {
      if (errno != EINVAL) return errno;
      have_madvise = false;  // an older kernel: touch instead
    }
    if (!have_madvise) {
      // The bytes are zero (a fresh file), so writing zero changes nothing but faults the page in for writing.
      for (uint64_t off = 0; off < n; off += page) static_cast<volatile std::byte*>(base + done)[off] = std::byte{0};
    }
    done += n;
    if (progress) progress(done, bytes);
  }
  return 0;
}

}  // namespace shmreplay::detail
