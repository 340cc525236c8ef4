// tools/bench/perf_probe.hpp: whether this machine lets a process count hardware events (perf_event_open of the
// CPU cycles of itself, user space only): in a VM without a virtual PMU it does not, and shmreplay_bench_scaling
// says so in its header instead of counting TLB and cache misses; where it does, `perf stat -e
// dTLB-load-misses,LLC-load-misses` around a sweep counts them.
#pragma once

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace shmreplay::bench {

/// "available", or why not (the errno of perf_event_open and the paranoid level).
inline std::string hardware_counters() {
  perf_event_attr a{};
  a.type = PERF_TYPE_HARDWARE;
  a.size = sizeof(a);
  a.config = PERF_COUNT_HW_CPU_CYCLES;
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  const long fd = ::syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return "available";
  }
  const int err = errno;
  std::string why = std::string("unavailable (perf_event_open of the CPU cycles: ") + std::strerror(err);
  if (err == ENOENT || err == EOPNOTSUPP) why += ": no PMU is exposed to this machine";
  if (err == EACCES || err == EPERM) why += ": see /proc/sys/kernel/perf_event_paranoid";
  return why + ")";
}

}  // namespace shmreplay::bench
