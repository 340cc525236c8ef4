// detail/os/membarrier.cpp: membarrier(2) through syscall(2) (glibc has no wrapper), and this process's
// registration, remembered per fork generation.
#include "detail/os/membarrier.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "detail/os/process.hpp"

namespace shmreplay::detail {

namespace {

int membarrier(int cmd) noexcept { return static_cast<int>(::syscall(__NR_membarrier, cmd, 0u, 0)); }

// ((fork generation + 1) << 1) | whether the registration succeeded; 0 before the first registration. Relaxed: a
// cache of the answer, which a thread that reads a stale value only recomputes.
std::atomic<uint64_t> g_registration{0};

}  // namespace

bool register_light_fence() noexcept {
#if defined(__SANITIZE_THREAD__)
  return false;
#else
  const uint64_t generation = fork_generation();
  const uint64_t known = g_registration.load(std::memory_order_relaxed);
  if ((known >> 1) == generation + 1) return (known & 1) != 0;
  const int commands = membarrier(MEMBARRIER_CMD_QUERY);
  constexpr int kNeeded = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
  const bool ok = commands >= 0 && (commands & kNeeded) == kNeeded &&
                  membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
  // seq_cst fence: a sleeper's heavy_fence that scanned the CPUs before this process counted as registered sent it
  // no barrier; that sleeper had raised its count before, so every load after this fence sees the count.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  g_registration.store(((generation + 1) << 1) | (ok ? 1 : 0), std::memory_order_relaxed);
  return ok;
#endif
}

bool heavy_fence() noexcept { return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0; }

}  // namespace shmreplay::detail
