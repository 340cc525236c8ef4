// tools/bench/proc_memory.hpp: what the benchmarks read of a process's memory from /proc (shmreplay_bench
// --atari-1e6, shmreplay_bench_compressed): a "Key:   N kB" line of a /proc file, a process's resident set, and the
// resident bytes of one mapping.
#pragma once

#include <sys/types.h>

#include <cctype>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace shmreplay::bench {

/// The whole of a (small) text file; "" when it cannot be read.
inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// A "Key:   N kB" line of a /proc file's text, in bytes (0 when absent).
inline uint64_t proc_kb(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size())) * 1024;
  }
  return 0;
}

/// VmRSS of process `pid` (0: this one), in bytes; 0 when it is gone. It counts the shared segment's pages the
/// process touched too.
inline uint64_t process_rss(pid_t pid = 0) {
  return proc_kb(read_text(pid == 0 ? std::string("/proc/self/status") : fmt::format("/proc/{}/status", pid)),
                 "VmRSS:");
}

/// The Rss of this process's mapping that starts at `base`, from /proc/self/smaps (0 when none starts there).
inline uint64_t mapping_rss(const void* base) {
  std::ifstream f("/proc/self/smaps");
  const std::string start = fmt::format("{:x}-", reinterpret_cast<uintptr_t>(base));
  std::string line;
  bool in = false;
  while (std::getline(f, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') != std::string::npos &&
        line.find(' ') > line.find('-')) {
      in = line.rfind(start, 0) == 0;
      continue;
    }
    if (in && line.rfind("Rss:", 0) == 0) return std::stoull(line.substr(4)) * 1024;
  }
  return 0;
}

}  // namespace shmreplay::bench
