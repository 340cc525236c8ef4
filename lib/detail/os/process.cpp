#include "detail/os/process.hpp"

#include <fmt/format.h>

#include "shmreplay/error.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace shmreplay::detail {
namespace {

// Reads a small /proc file into `buf` without allocating; returns the bytes read (0 on failure).
std::size_t read_small_file(const char* path, char* buf, std::size_t size) noexcept {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::size_t got = 0;
  while (got + 1 < size) {
    const ssize_t n = ::read(fd, buf + got, size - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  buf[got] = '\0';
  return got;
}

}  // namespace

uint64_t process_start_ticks(pid_t pid) noexcept {
  if (pid <= 0) return 0;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  char buf[1024];
  const std::size_t n = read_small_file(path, buf, sizeof buf);
  if (n == 0) return 0;
  // The command name (field 2) is in parentheses and may contain spaces and ')', so count from the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  ++p;
  // After ')' come field 3 (state) ... field 22 (starttime): skip 19 fields.
  int field = 2;
  const char* end = buf + n;
  char state = '?';
  while (p < end && field < 22) {
    while (p < end && *p == ' ') ++p;
    ++field;
    if (field == 3) state = *p;
    if (field == 22) break;
    while (p < end && *p != ' ') ++p;
  }
  if (field != 22 || state == 'Z' || state == 'X') return 0;  // a zombie has exited: it is dead for us
  uint64_t ticks = 0;
  const auto [ptr, ec] = std::from_chars(p, end, ticks);
  if (ec != std::errc{}) return 0;
  return ticks;
}

uint64_t self_start_ticks() noexcept { return process_start_ticks(::getpid()); }

bool process_alive(uint64_t pid, uint64_t start_ticks, bool low32_only) noexcept {
  if (pid == 0 || pid > 0x7fffffffull) return false;
  const uint64_t now = process_start_ticks(static_cast<pid_t>(pid));
  if (now == 0) return false;
  return low32_only ? (now & 0xffffffffull) == (start_ticks & 0xffffffffull) : now == start_ticks;
}

namespace {
uint64_t clock_ns(clockid_t clock) noexcept {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

uint64_t realtime_ns() noexcept { return clock_ns(CLOCK_REALTIME); }

uint64_t monotonic_ns() noexcept { return clock_ns(CLOCK_MONOTONIC); }

uint64_t coarse_monotonic_ns() noexcept { return clock_ns(CLOCK_MONOTONIC_COARSE); }

std::atomic<uint64_t> g_fork_generation{0};

namespace {
void on_fork_child() noexcept { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

uint64_t fork_generation() noexcept {
  static const bool registered = [] { return ::pthread_atfork(nullptr, nullptr, &on_fork_child) == 0; }();
  (void)registered;
  return g_fork_generation.load(std::memory_order_relaxed);  // written by this process's own fork() only
}

void throw_forked(const char* what, const char* op, const std::string& buffer, uint64_t owner_pid) {
  throw Error(Errc::not_leased,
              fmt::format("cannot {} '{}': this {} belongs to process {} and reached process {} through fork(); "
                          "leases belong to processes, so make a new {} in this process",
                          op, buffer, what, owner_pid, ::getpid(), what));
}

}  // namespace shmreplay::detail
