// Helpers shared by the tests: unique segment names, cleanup guards, running child processes.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay::test {

/// Sets the umask for a scope (children started meanwhile inherit it) and restores it after, a failed REQUIRE
/// included.
class UmaskGuard {
 public:
  explicit UmaskGuard(mode_t mask) : old_(::umask(mask)) {}
  UmaskGuard(const UmaskGuard&) = delete;
  UmaskGuard& operator=(const UmaskGuard&) = delete;
  ~UmaskGuard() { ::umask(old_); }

 private:
  mode_t old_;
};

/// The permission bits of the file at `path` (a REQUIRE that it exists).
inline mode_t file_mode(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

/// An error code as the int error_of returns.
constexpr int code(Errc e) { return static_cast<int>(e); }

/// Whether `haystack` holds `needle` (messages, command output).
inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// A segment name no other test (or concurrent ctest process) uses: "srt-<tag>-<pid>-<n>".
inline std::string unique_name(const std::string& tag) {
  static std::atomic<int> counter{0};
  return fmt::format("srt-{}-{}-{}", tag, ::getpid(), counter.fetch_add(1));
}

/// Removes the segment file `name` (whatever it holds) when it goes out of scope.
class SegmentGuard {
 public:
  explicit SegmentGuard(std::string name) : name_(std::move(name)) {}
  SegmentGuard(const SegmentGuard&) = delete;
  SegmentGuard& operator=(const SegmentGuard&) = delete;
  ~SegmentGuard() { std::remove((shm_directory() + "/" + name_).c_str()); }
  const std::string& name() const { return name_; }
  std::string path() const { return shm_directory() + "/" + name_; }

 private:
  std::string name_;
};

/// Removes the directory `path` and everything in it when it goes out of scope (a chain directory of a test).
class DirGuard {
 public:
  explicit DirGuard(std::string path) : path_(std::move(path)) {}
  DirGuard(const DirGuard&) = delete;
  DirGuard& operator=(const DirGuard&) = delete;
  ~DirGuard() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The bytes of the file at `path` (a segment file, for tests that corrupt and rewrite it).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// Writes `bytes` to `path` atomically: into a hidden temporary file that is then renamed over `path`. Tests
/// that run concurrently may be listing the shm directory and mapping what they find; rewriting a file in place
/// (truncate, then write) could pull pages from under such a mapping, which is SIGBUS for the lister.
inline void write_file(const std::string& path, std::string_view bytes) {
  static std::atomic<int> counter{0};
  const auto slash = path.rfind('/');
  const std::string tmp = fmt::format("{}/.tmp-{}-{}", path.substr(0, slash), ::getpid(), counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::rename(tmp.c_str(), path.c_str());
}

/// Runs `body` in a forked child and returns its exit status (the child's exit code, or 128 + signal).
/// The child exits with 0 when `body` returns true, 1 when it returns false, 2 when it throws.
inline int run_in_child(const std::function<bool()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 2;
    try {
      code = body() ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

/// Runs `fn` and returns the Errc of the shmreplay::Error it throws (or 0 if it does not throw), storing
/// the message in `message`.
template <class Fn>
int error_of(Fn&& fn, std::string* message = nullptr) {
  try {
    std::forward<Fn>(fn)();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return static_cast<int>(e.errc());
  }
  return 0;
}

// Forks a child that runs `body`; the child is killed with this process if this process dies first (a failed
// REQUIRE must not leave writer processes running).
inline pid_t spawn(const std::function<void()>& body) {
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(4);
    body();
    ::_exit(0);
  }
  REQUIRE(pid > 0);
  return pid;
}

/// The names of the entries of directory `dir` (hidden ones included) whose name contains `part`: what a test
/// looks for when nothing may be left behind (a segment, a hidden temporary name, a FILE.tmp-<pid>-<n>).
inline std::vector<std::string> entries_containing(const std::string& dir, std::string_view part) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find(part) != std::string::npos) out.push_back(name);
  }
  return out;
}

/// Pearson's chi-square of `counts` (from n draws) against the cells' probabilities `prob`. Cells of probability 0
/// are left out: a draw there is a violation that the caller checks on its own.
inline double chi_square(const std::vector<uint64_t>& counts, const std::vector<double>& prob, double n) {
  double stat = 0.0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (prob[i] <= 0) continue;
    const double expected = n * prob[i];
    const double diff = static_cast<double>(counts[i]) - expected;
    stat += diff * diff / expected;
  }
  return stat;
}

/// The bound the distribution tests hold a chi-square with `df` degrees of freedom to: df + 6 standard deviations.
inline double chi_square_bound(double df) { return df + 6.0 * std::sqrt(2.0 * df); }

/// SIGKILLs and reaps `pid`; false when the child had already exited on its own (a failure in the child).
inline bool kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

}  // namespace shmreplay::test
