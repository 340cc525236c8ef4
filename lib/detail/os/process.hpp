// detail/os/process.hpp: process identity and liveness, judged by pid plus start time (pids are reused; start
// times are not), clocks, and the fork generation. Who calls it: leases, Buffer, Writer, Sampler, the Inspector and
// the CLI. Every function reads /proc or a clock and is safe from any thread.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace shmreplay::detail {

/// The start time of `pid` in clock ticks after boot (/proc/<pid>/stat field 22); 0 when there is no such
/// process (or it is a zombie or /proc cannot be read).
uint64_t process_start_ticks(pid_t pid) noexcept;

/// This process's start time (read from /proc each call: a cold path, and always right after fork).
uint64_t self_start_ticks() noexcept;

/// Whether the process `pid` that started at `start_ticks` is still running. Compares all bits of the start
/// time, or only the low 32 when `low32_only` (for a packed lease word).
bool process_alive(uint64_t pid, uint64_t start_ticks, bool low32_only = false) noexcept;

/// CLOCK_REALTIME in nanoseconds.
uint64_t realtime_ns() noexcept;

/// CLOCK_REALTIME_COARSE in nanoseconds (a few ns to read, a few ms resolution): for per-push timestamps. Inline,
/// so that a push calls the vDSO directly (the out-of-line wrapper was a tenth of push_one's own instructions).
inline uint64_t coarse_realtime_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the machine (steady_clock's, on Linux).
uint64_t monotonic_ns() noexcept;

/// CLOCK_MONOTONIC_COARSE in nanoseconds: cheap, and behind monotonic_ns() by at most a few ms.
uint64_t coarse_monotonic_ns() noexcept;

/// How many fork()s lie between the first call in this process's ancestry and now: it grows by one in every
/// child (a pthread_atfork handler, registered by the first call). A Writer or Sampler remembers it, so that a
/// copy inherited by a forked child, whose leases belong to the parent, refuses to act or to release them.
uint64_t fork_generation() noexcept;

/// The count fork_generation() returns, without registering its handler: one relaxed load, for a hot path whose
/// object called fork_generation() when it was made (so the handler is registered in this process's ancestry).
extern std::atomic<uint64_t> g_fork_generation;
inline uint64_t fork_generation_registered() noexcept {
  return g_fork_generation.load(std::memory_order_relaxed);  // written by this process's own fork() only
}

/// The not_leased error for such a copy: what it is, the operation refused, the buffer, and the owner's pid.
[[noreturn]] void throw_forked(const char* what, const char* op, const std::string& buffer, uint64_t owner_pid);

}  // namespace shmreplay::detail
