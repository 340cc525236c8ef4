// detail/os/futex.hpp: a futex on a 32-bit word in shared memory. Process-shared: no FUTEX_PRIVATE_FLAG, so a
// writer in one process wakes a learner sleeping in another (std::atomic::wait in libstdc++ uses private futexes
// and would not). Who calls it: detail/protocol/wake.hpp, which holds the handshake's ordering; these are only the
// system calls, safe from any thread and process.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <climits>
#include <cstdint>
#include <ctime>

namespace shmreplay::detail {

static_assert(std::endian::native == std::endian::little,
              "the futex word is the low half of a 64-bit atomic, which is its first 4 bytes on little-endian only");

/// The futex word inside a 64-bit segment counter: its low 32 bits.
inline uint32_t* futex_word(std::atomic<uint64_t>& counter) noexcept {
  return reinterpret_cast<uint32_t*>(&counter);
}

/// The longest sleep futex_wait asks the kernel for: INT64_MAX ns (292 years), the kernel's own limit (KTIME_MAX).
inline constexpr uint64_t kMaxFutexTimeoutNs = static_cast<uint64_t>(INT64_MAX);

/// Sleeps while the word equals `expected`, for at most `timeout_ns` (any value: above kMaxFutexTimeoutNs it is
/// kMaxFutexTimeoutNs, a relative timeout the kernel accepts). Returns on a wake, a timeout, a signal or when the
/// word already differs; callers re-check their condition in a loop.
inline void futex_wait(std::atomic<uint64_t>& counter, uint32_t expected, uint64_t timeout_ns) noexcept {
  const uint64_t ns = timeout_ns < kMaxFutexTimeoutNs ? timeout_ns : kMaxFutexTimeoutNs;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000ull);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000ull);
  ::syscall(SYS_futex, futex_word(counter), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

/// Wakes every process sleeping on the word.
inline void futex_wake_all(std::atomic<uint64_t>& counter) noexcept {
  ::syscall(SYS_futex, futex_word(counter), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace shmreplay::detail
