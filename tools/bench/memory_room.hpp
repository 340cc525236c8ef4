// tools/bench/memory_room.hpp: whether a buffer of a given size fits this machine now (shmreplay_bench_scaling
// checks before creating each size): the free bytes of the segment directory's file system (tmpfs /dev/shm) and
// the kernel's MemAvailable, each with a spare left over, and a budget the user set.
#pragma once

#include <sys/statvfs.h>

#include <cstdint>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "shmreplay/buffer.hpp"

namespace shmreplay::bench {

struct MemoryRoom {
  uint64_t shm_free_bytes = 0;
  uint64_t available_bytes = 0;  ///< MemAvailable (/proc/meminfo)
};

inline MemoryRoom memory_room() {
  MemoryRoom m;
  struct statvfs vfs {};
  if (::statvfs(shm_directory().c_str(), &vfs) == 0) m.shm_free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") m.available_bytes = kb * 1024;
  }
  return m;
}

/// Empty when `bytes` more fit: within `budget_bytes`, and leaving `spare_bytes` of both /dev/shm and MemAvailable;
/// else why not, with the figures.
inline std::string why_not_room(uint64_t bytes, uint64_t budget_bytes, uint64_t spare_bytes) {
  const MemoryRoom m = memory_room();
  const auto gb = [](uint64_t b) { return static_cast<double>(b) * 1e-9; };
  if (bytes > budget_bytes) {
    return fmt::format("needs {:.2f} GB, over the budget of {:.2f} GB (--max-memory-gb)", gb(bytes), gb(budget_bytes));
  }
  if (bytes + spare_bytes > m.shm_free_bytes) {
    return fmt::format("needs {:.2f} GB and {:.1f} GB spare; {} has {:.2f} GB free", gb(bytes), gb(spare_bytes),
                       shm_directory(), gb(m.shm_free_bytes));
  }
  if (bytes + spare_bytes > m.available_bytes) {
    return fmt::format("needs {:.2f} GB and {:.1f} GB spare; MemAvailable is {:.2f} GB", gb(bytes), gb(spare_bytes),
                       gb(m.available_bytes));
  }
  return {};
}

}  // namespace shmreplay::bench
