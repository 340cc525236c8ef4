#include "harness.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "shmreplay/buffer.hpp"

namespace shmreplay::bench {
namespace {

// -- What the signal handler cleans up. Plain arrays of lock-free atomics: the handler only reads them. --
constexpr std::size_t kMaxFiles = 16;
constexpr std::size_t kPathBytes = 512;
std::array<std::array<char, kPathBytes>, kMaxFiles> g_files{};
std::array<std::atomic<bool>, kMaxFiles> g_file_used{};
std::array<std::atomic<pid_t>, kMaxWorkers> g_children{};
std::atomic<int> g_janitor_fd{-1};  // closed in workers, so that only the parent keeps the janitor's pipe open
constexpr std::array<int, 4> kCleanupSignals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

extern "C" void on_fatal_signal(int sig) {
  for (auto& child : g_children) {
    const pid_t pid = child.load();
    if (pid > 0) ::kill(pid, SIGKILL);
  }
  for (std::size_t i = 0; i < kMaxFiles; ++i) {
    if (g_file_used[i].load()) ::unlink(g_files[i].data());
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void sleep_seconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\n");
  const auto e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Worker

bool Worker::start() noexcept {
  slot_.ready.store(1, std::memory_order_release);  // pairs with the parent's acquire in wait_for
  for (;;) {
    const uint32_t e = control_.epoch.load(std::memory_order_acquire);
    if (e == kStopEpoch) return false;
    if (e != 0) return mark(e);
    ::usleep(100);
  }
}

bool Worker::mark(uint32_t epoch) noexcept {
  const bool stop = epoch == kStopEpoch;
  const uint32_t upto = stop ? static_cast<uint32_t>(kMaxMarks - 1) : std::min<uint32_t>(epoch, kMaxMarks - 1);
  const uint64_t now = monotonic_ns();
  const uint64_t cpu = thread_cpu_ns();
  for (uint32_t e = epoch_ + 1; e <= upto; ++e) {  // several at once when this worker was starved
    slot_.units[e] = units_;
    slot_.ns[e] = now;
    slot_.cpu_ns[e] = cpu;
  }
  epoch_ = upto;
  if (stop) slot_.total_units = units_;
  slot_.marked.store(stop ? kStopEpoch : epoch, std::memory_order_release);  // pairs with the parent's acquire
  return !stop;
}

// ---------------------------------------------------------------------------------------------------------------
// Team

Team::Team(std::vector<Body> bodies, std::vector<std::string> names) : names_(std::move(names)) {
  if (bodies.empty() || bodies.size() > kMaxWorkers || names_.size() != bodies.size()) {
    throw std::invalid_argument(fmt::format("a Team has 1 to {} workers, each with a name", kMaxWorkers));
  }
  void* mem = ::mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error(fmt::format("mmap of the control block: {}", std::strerror(errno)));
  control_ = new (mem) Control{};
  const pid_t parent = ::getpid();
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    std::fflush(nullptr);  // no buffered output duplicated into the child
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      stop_and_reap();
      ::munmap(control_, sizeof(Control));  // the destructor does not run for a constructor that throws
      control_ = nullptr;
      throw std::runtime_error(fmt::format("fork: {}", std::strerror(err)));
    }
    if (pid == 0) {
      // The child: die with the parent (also if it died between fork and prctl), default signal actions, never
      // unwind into the parent's stack (no destructor of the parent's objects may run here: _exit).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(3);
      for (const int sig : kCleanupSignals) ::signal(sig, SIG_DFL);
      if (const int fd = g_janitor_fd.load(); fd >= 0) ::close(fd);
      int code = 0;
      try {
        Worker worker(*control_, i);
        bodies[i](worker);
      } catch (const std::exception& e) {
        std::snprintf(control_->workers[i].error, sizeof(control_->workers[i].error), "%s", e.what());
        code = 1;
      } catch (...) {
        std::snprintf(control_->workers[i].error, sizeof(control_->workers[i].error), "unknown exception");
        code = 1;
      }
      ::_exit(code);
    }
    pids_.push_back(pid);
    reaped_.push_back(false);
    g_children[i].store(pid);
  }
}

Team::~Team() {
  stop_and_reap();
  if (control_ != nullptr) ::munmap(control_, sizeof(Control));
}

void Team::stop_and_reap() noexcept {
  if (control_ == nullptr) return;
  control_->epoch.store(kStopEpoch, std::memory_order_release);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (std::size_t i = 0; i < pids_.size(); ++i) {
    while (!reaped_[i]) {
      int status = 0;
      const pid_t r = ::waitpid(pids_[i], &status, WNOHANG);
      if (r == pids_[i] || (r < 0 && errno != EINTR)) {
        reaped_[i] = true;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pids_[i], SIGKILL);  // our own child, by pid
        ::waitpid(pids_[i], &status, 0);
        reaped_[i] = true;
        break;
      }
      ::usleep(1000);
    }
    g_children[i].store(0);
  }
}

void Team::check_children(const char* what) {
  const bool stopping = control_->epoch.load(std::memory_order_relaxed) == kStopEpoch;
  for (std::size_t i = 0; i < pids_.size(); ++i) {
    if (reaped_[i]) continue;
    int status = 0;
    const pid_t r = ::waitpid(pids_[i], &status, WNOHANG);
    if (r != pids_[i]) continue;
    reaped_[i] = true;
    g_children[i].store(0);
    if (stopping && WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;  // a clean exit, as asked
    const std::string how = WIFEXITED(status)   ? fmt::format("exited with status {}", WEXITSTATUS(status))
                            : WIFSIGNALED(status) ? fmt::format("was killed by signal {}", WTERMSIG(status))
                                                  : std::string("ended");
    const char* msg = control_->workers[i].error;
    throw std::runtime_error(fmt::format("benchmark worker '{}' (pid {}) {} while {}{}{}", names_[i], pids_[i], how,
                                         what, msg[0] != '\0' ? ": " : "", msg));
  }
}

bool Team::wait_for(const char* what, const std::function<bool(std::size_t)>& done_by, double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(limit_s > 0 ? limit_s : 120.0);
  for (;;) {
    bool all = true;
    for (std::size_t i = 0; i < pids_.size() && all; ++i) all = done_by(i);
    if (all) return true;
    check_children(what);
    if (std::chrono::steady_clock::now() - start > limit) {
      if (limit_s > 0) return false;
      throw std::runtime_error(fmt::format("benchmark workers did not answer within 120 s while {}", what));
    }
    ::usleep(200);
  }
}

std::vector<WorkerTrials> Team::run(double warmup_s, double trial_s, uint32_t trials, double patience_s) {
  if (trials == 0 || trials > kMaxTrials) throw std::invalid_argument("trials must be 1 to 64");
  Control& c = *control_;
  wait_for("setting up", [&](std::size_t i) { return c.workers[i].ready.load(std::memory_order_acquire) != 0; });
  const uint32_t last = trials + 2;
  std::vector<bool> late(pids_.size(), false);
  auto marked = [&](std::size_t i, uint32_t e) {
    const uint32_t m = c.workers[i].marked.load(std::memory_order_acquire);
    return m >= e && m != kStopEpoch;
  };
  for (uint32_t e = 1; e <= last; ++e) {
    c.epoch.store(e, std::memory_order_release);  // pairs with the workers' acquire in start() (epoch 1)
    // Epoch 1 is marked in start(), without an operation: always waited for.
    if (!wait_for("running", [&](std::size_t i) { return late[i] || marked(i, e); }, e == 1 ? 0 : patience_s)) {
      for (std::size_t i = 0; i < pids_.size(); ++i) late[i] = late[i] || !marked(i, e);
    }
    if (e < last) sleep_seconds(e == 1 ? warmup_s : trial_s);
  }
  c.epoch.store(kStopEpoch, std::memory_order_release);
  // Wait for every worker's exit: check_children throws on a failure (with the worker's message).
  wait_for("stopping", [&](std::size_t i) { return static_cast<bool>(reaped_[i]); });
  std::vector<WorkerTrials> out(pids_.size());
  for (std::size_t i = 0; i < pids_.size(); ++i) {
    const WorkerSlot& s = c.workers[i];
    for (uint32_t t = 0; t < trials; ++t) {
      const uint32_t a = t + 2;
      out[i].units.push_back(s.units[a + 1] - s.units[a]);
      out[i].seconds.push_back(static_cast<double>(s.ns[a + 1] - s.ns[a]) * 1e-9);
      out[i].cpu_seconds.push_back(static_cast<double>(s.cpu_ns[a + 1] - s.cpu_ns[a]) * 1e-9);
    }
    out[i].late = late[i];
    out[i].run_units = s.units[last] - s.units[2];
    out[i].run_seconds = static_cast<double>(s.ns[last] - s.ns[2]) * 1e-9;
    out[i].run_cpu_seconds = static_cast<double>(s.cpu_ns[last] - s.cpu_ns[2]) * 1e-9;
    out[i].total_units = s.total_units;
    out[i].retries = s.retries;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Cleanup and helpers

void register_segment_file(const std::string& path) {
  if (path.size() >= kPathBytes) throw std::invalid_argument("segment path too long for the cleanup registry");
  for (std::size_t i = 0; i < kMaxFiles; ++i) {
    if (g_file_used[i].load()) continue;
    std::memcpy(g_files[i].data(), path.c_str(), path.size() + 1);
    g_file_used[i].store(true);
    return;
  }
  throw std::runtime_error("too many segment files for the cleanup registry");
}

void unregister_segment_file(const std::string& path) noexcept {
  for (std::size_t i = 0; i < kMaxFiles; ++i) {
    if (g_file_used[i].load() && path == g_files[i].data()) g_file_used[i].store(false);
  }
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  for (const int sig : kCleanupSignals) ::sigaction(sig, &sa, nullptr);
}

Janitor::Janitor(std::vector<std::string> paths) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  std::fflush(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid_ == 0) {
    ::close(fds[1]);
    // Outlive a Ctrl-C of the process group until the parent is gone, then clean up after it.
    for (const int sig : kCleanupSignals) ::signal(sig, SIG_IGN);
    char c = 0;
    while (::read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    for (const std::string& path : paths) ::unlink(path.c_str());  // ENOENT when the parent removed them
    ::_exit(0);
  }
  ::close(fds[0]);
  write_fd_ = fds[1];
  g_janitor_fd.store(write_fd_);
}

Janitor::~Janitor() {
  if (pid_ <= 0) return;
  g_janitor_fd.store(-1);
  ::close(write_fd_);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void populate(const void* base, std::size_t bytes) noexcept {
#ifdef MADV_POPULATE_WRITE
  if (::madvise(const_cast<void*>(base), bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  const auto* p = static_cast<const volatile unsigned char*>(base);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t off = 0; off < bytes; off += page) static_cast<void>(p[off]);
}

uint64_t monotonic_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t thread_cpu_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

MachineInfo describe_machine() {
  MachineInfo m;
  {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("model name", 0) == 0 && m.cpu.empty()) m.cpu = trim(line.substr(line.find(':') + 1));
    }
  }
  if (m.cpu.empty()) m.cpu = "unknown";
  m.cores_online = static_cast<unsigned>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  m.cores_configured = static_cast<unsigned>(std::max(1L, ::sysconf(_SC_NPROCESSORS_CONF)));
  {
    std::vector<std::string> parts;
    for (int index = 0; index < 8; ++index) {
      const std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", index);
      const std::string level = read_first_line((dir + "level").c_str());
      const std::string type = read_first_line((dir + "type").c_str());
      const std::string size = read_first_line((dir + "size").c_str());
      if (level.empty()) break;
      if (type == "Instruction") continue;
      parts.push_back(fmt::format("L{} {}", level, size));
    }
    for (std::size_t i = 0; i < parts.size(); ++i) m.caches += (i ? ", " : "") + parts[i];
  }
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  m.memory_gib = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * page / (1024.0 * 1024.0 * 1024.0);
  struct statvfs vfs {};
  if (::statvfs(shm_directory().c_str(), &vfs) == 0) {
    m.shm_free_gib = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize) / (1024.0 * 1024.0 * 1024.0);
  }
  struct utsname u {};
  if (::uname(&u) == 0) m.kernel = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
#if defined(__clang__)
  m.compiler = fmt::format("Clang {}", __clang_version__);
#elif defined(__GNUC__)
  m.compiler = fmt::format("GCC {}", __VERSION__);
#else
  m.compiler = "unknown";
#endif
#ifdef SHMREPLAY_BENCH_BUILD_TYPE
  m.build_type = SHMREPLAY_BENCH_BUILD_TYPE;
#endif
  if (m.build_type.empty()) m.build_type = "unknown";
#ifdef NDEBUG
  m.build_type += " (NDEBUG)";
#else
  m.build_type += " (assertions on)";
#endif
  m.sanitizers = "none";
#if defined(__SANITIZE_ADDRESS__)
  m.sanitizers = "address";
#endif
  m.load_average = trim(read_first_line("/proc/loadavg"));
  if (const auto sp = m.load_average.find(' ', m.load_average.find(' ', m.load_average.find(' ') + 1) + 1);
      sp != std::string::npos) {
    m.load_average.resize(sp);  // the three averages only
  }
  m.virtualization = "none detected";
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid(1, a, b, c, d);
  if (c & (1u << 31)) {  // the hypervisor-present bit
    __cpuid(0x40000000, a, b, c, d);
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &c, 4);
    std::memcpy(vendor + 8, &d, 4);
    m.virtualization = fmt::format("hypervisor '{}'", trim(vendor));
  }
#endif
  return m;
}

std::string load_now() {
  std::string out = describe_machine().load_average;
  std::ifstream in("/proc/pressure/cpu");
  std::string word;
  while (in >> word) {
    if (word.rfind("avg10=", 0) == 0) return out + ", CPU pressure " + word.substr(6) + "%";
  }
  return out;
}

}  // namespace shmreplay::bench
