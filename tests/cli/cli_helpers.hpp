// tests/cli/cli_helpers.hpp: what the parts of test_cli share (tests/CMakeLists.txt builds them into one
// executable): running the `shmreplay` CLI as a child process (run_cli, and RunningCli to signal it at a chosen
// moment), writer processes that keep pushing self-checking payload steps, and small text, JSON and file helpers.
// test_cli runs the CLI as a child process: output, --json forms, exit codes and error lines; watch, dump, save and
// load against buffers filled by writer processes that keep pushing.
#pragma once

#include <doctest/doctest.h>

#include <chrono>

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shmreplay/buffer.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/version.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"

using namespace shmreplay;
using test::file_mode;
using test::UmaskGuard;
using nlohmann::json;
using test::check_env_payloads;
using test::payload_bytes;
using test::SegmentGuard;
using test::stored_step;
using test::unique_name;

namespace {

const std::string kSpec = "obs:f32[4] action:i32 reward:f32 done:bool";  // 25 bytes per step

struct CliResult {
  int exit_code = -1;  ///< the exit status, or 128 + signal
  std::string out;
  std::string err;
};

// The CLI's path and `args` as execv's argv (made before fork: the child only execs).
struct CliArgv {
  explicit CliArgv(const std::vector<std::string>& args) : storage{SHMREPLAY_CLI_PATH} {
    storage.insert(storage.end(), args.begin(), args.end());
    for (std::string& s : storage) argv.push_back(s.data());
    argv.push_back(nullptr);
  }
  std::vector<std::string> storage;
  std::vector<char*> argv;
};

// Runs the CLI with `args` (no shell), collecting stdout and stderr through pipes until both close.
inline CliResult run_cli(const std::vector<std::string>& args) {
  int out_pipe[2];
  int err_pipe[2];
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
  CliArgv cli(args);

  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::execv(cli.argv[0], cli.argv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  CliResult r;
  std::array<pollfd, 2> fds{{{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}}};
  std::array<std::string*, 2> sinks{&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char chunk[4096];
      const ssize_t got = ::read(fds[k].fd, chunk, sizeof chunk);
      if (got > 0) {
        sinks[k]->append(chunk, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  return r;
}

using test::contains;

// The user name of `uid` from the password database, or "" when it has none.
inline std::string user_name(uid_t uid) {
  const passwd* pw = ::getpwuid(uid);
  return pw != nullptr ? std::string(pw->pw_name) : std::string();
}

// Whether `err` is exactly one line that starts with the CLI's error prefix.
inline bool one_error_line(const std::string& err) {
  return err.starts_with("shmreplay: error: ") && err.ends_with('\n') &&
         std::count(err.begin(), err.end(), '\n') == 1;
}

// The line of `text` that starts with `prefix` (empty when there is none).
inline std::string line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(prefix)) return line;
  }
  return {};
}

// The whitespace-separated words of `line`.
inline std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  return {std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()};
}

inline CliResult create(const std::string& name, uint64_t envs = 3, uint64_t capacity = 100) {
  return run_cli({"create", name, "--envs", std::to_string(envs), "--capacity", std::to_string(capacity),
                  "--schema", kSpec});
}

inline json parse_json(const std::string& text) {
  json j;
  REQUIRE_NOTHROW(j = json::parse(text));
  return j;
}

inline const json* find_named(const json& array, const std::string& name) {
  for (const json& item : array) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

using test::write_file;

inline std::string read_file(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(max_bytes, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(max_bytes));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  return bytes;
}

// 4 KiB of random bytes: not shmreplay's magic (with overwhelming probability).
inline std::string random_bytes() {
  std::mt19937_64 rng(std::random_device{}());
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  return bytes;
}

// Field `n` (3 or later, as proc(5) numbers them) of /proc/PID/stat (PID "self" for this process), counted after the
// parenthesised command name, which may hold spaces.
inline std::string stat_field(const std::string& pid, std::size_t n) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t close_paren = stat.rfind(')');
  REQUIRE(close_paren != std::string::npos);
  const std::vector<std::string> fields = words(stat.substr(close_paren + 1));  // fields 3, 4, ...
  REQUIRE(fields.size() > n - 3);
  return fields[n - 3];
}

// This process's start time in clock ticks after boot: field 22 of /proc/self/stat.
inline uint64_t own_start_ticks() { return std::stoull(stat_field("self", 22)); }

const std::string kPayloadSpec = test::kPayloadSchema.to_string();  // hdr:u64[4] body:f32[13] tail:u8[29]

/// A writer process: leases `envs` of `name` and pushes self-checking payload steps (test::make_payload) until
/// stop() or kill(): flat out, or pausing 100 us after every 16 pushes (so that it leaves the other core to the
/// CLI processes under test).
class WriterProcess {
 public:
  WriterProcess(const std::string& name, std::vector<int32_t> envs, bool flat_out = false) {
    int stop_pipe[2];
    REQUIRE(::pipe2(stop_pipe, O_CLOEXEC) == 0);
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(stop_pipe[1]);
      int code = 0;
      try {
        Buffer b = Buffer::open(name);
        const std::vector<uint64_t> ids(envs.begin(), envs.end());
        Writer w(b, ids);
        test::PayloadPusher pusher;
        pollfd stop{stop_pipe[0], POLLIN, 0};
        for (uint64_t n = 1;; ++n) {
          pusher.push(w, envs);
          if (n % 64 == 0 && ::poll(&stop, 1, 0) != 0) break;  // the parent closed its end
          if (!flat_out && n % 16 == 0) ::usleep(100);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer process: %s\n", e.what());
        code = 2;
      }
      ::_exit(code);
    }
    ::close(stop_pipe[0]);
    stop_fd_ = stop_pipe[1];
  }
  WriterProcess(const WriterProcess&) = delete;
  WriterProcess& operator=(const WriterProcess&) = delete;
  ~WriterProcess() {
    if (pid_ > 0) kill();
    if (stop_fd_ >= 0) ::close(stop_fd_);
  }

  pid_t pid() const { return pid_; }

  /// Asks the writer to stop and returns its exit code (0: it pushed without error until asked).
  int stop() {
    ::close(stop_fd_);
    stop_fd_ = -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  /// SIGKILL: the writer dies holding its leases.
  void kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  /// Waits until every env of `b` has published at least `steps` steps (the writer runs flat out; a writer that
  /// died fails the test instead of hanging it).
  void wait_for_heads(const Buffer& b, uint64_t steps) const {
    for (uint64_t e = 0; e < b.num_envs(); ++e) wait_for_env(b, e, steps);
  }
  /// Waits until env `env` of `b` has published at least `steps` steps.
  void wait_for_env(const Buffer& b, uint64_t env, uint64_t steps) const {
    while (segment_of(b).env_control(env).head.load() < steps) {
      REQUIRE(::waitpid(pid_, nullptr, WNOHANG) == 0);
      ::usleep(1000);
    }
  }

 private:
  pid_t pid_ = -1;
  int stop_fd_ = -1;
};

inline std::vector<int32_t> all_envs(uint64_t n) {
  std::vector<int32_t> ids;
  for (uint64_t e = 0; e < n; ++e) ids.push_back(static_cast<int32_t>(e));
  return ids;
}

// Creates a segment with the payload schema (in this process: the CLI's create has its own tests, and every CLI
// run costs a process start, which sanitizer builds make slow).
inline CliResult create_payload(const std::string& name, uint64_t envs, uint64_t capacity) {
  Buffer::create(name, envs, capacity, test::kPayloadSchema);
  return {0, "", ""};
}


inline std::vector<json> json_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    json j;
    REQUIRE_NOTHROW(j = json::parse(line));
    out.push_back(std::move(j));
  }
  return out;
}

inline std::string temp_file(const std::string& tag) { return fmt::format("/tmp/{}.ckpt", unique_name(tag)); }

// Removes a file when it goes out of scope.
struct FileGuard {
  std::string path;
  ~FileGuard() { std::remove(path.c_str()); }
};

// Writes `bytes` into a new file at `path` (the old one removed first: truncating in place is slow on ext4).
inline void replace_file(const std::string& path, std::string_view bytes) {
  std::remove(path.c_str());
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Fills envs of a quiet segment with payload steps from this process: env e gets steps[e] steps.
inline void push_payloads(const std::string& name, const std::vector<uint64_t>& steps) {
  Buffer b = Buffer::open(name);
  Writer w = Writer::range(b, 0, b.num_envs());
  test::PayloadPusher pusher;
  for (std::size_t e = 0; e < steps.size(); ++e) {
    for (uint64_t i = 0; i < steps[e]; ++i) pusher.push(w, {static_cast<int32_t>(e)});
  }
}

// -- A stacked field (layout 1.6) --
// obs is a stack of K = 3 frames of 16 bytes along axis 0; t is the step. 52 bytes per step as pushed.
const std::string kStackedSpec = "obs:u8[3,4,4]:stack=0 t:u32";
constexpr uint64_t kStackDepth = 3;
constexpr uint64_t kFrameBytes = 16;
constexpr uint64_t kEpisodeSteps = 5;  // an episode of every env starts at every 5th step

// Byte j of frame g of env e (frame g: the frame the env showed at its step g). Distinct for every g below 251.
inline uint8_t frame_byte(uint64_t env, uint64_t g, uint64_t j) {
  return static_cast<uint8_t>((env * 97 + g * 7 + j) % 251);
}

// The stack env `env` pushes at step `step`: frames max(episode start, step - K + 1 + k), k = 0..K-1, newest last.
// An episode's first step repeats its first frame K times (the reset padding of envpool's Atari and Gymnasium's
// FrameStackObservation), so its stack does not continue the previous step's and the writer stores all K frames.
inline std::vector<uint8_t> expected_stack(uint64_t env, uint64_t step) {
  const uint64_t start = step - step % kEpisodeSteps;
  std::vector<uint8_t> stack(kStackDepth * kFrameBytes);
  for (uint64_t k = 0; k < kStackDepth; ++k) {
    const uint64_t g = std::max(start, step + k + 1 >= kStackDepth ? step + k + 1 - kStackDepth : 0);
    for (uint64_t j = 0; j < kFrameBytes; ++j) stack[k * kFrameBytes + j] = frame_byte(env, g, j);
  }
  return stack;
}

// Pushes steps[e] steps of expected_stack into env e of the quiet segment `name` (kStackedSpec), from this process.
inline void push_stacks(const std::string& name, const std::vector<uint64_t>& steps) {
  Buffer b = Buffer::open(name);
  Writer w = Writer::range(b, 0, b.num_envs());
  for (std::size_t e = 0; e < steps.size(); ++e) {
    for (uint64_t s = 0; s < steps[e]; ++s) {
      const std::vector<uint8_t> stack = expected_stack(e, s);
      const std::vector<uint32_t> t{static_cast<uint32_t>(s)};
      w.push_one(e, {field_bytes(stack), field_bytes(t)});
    }
  }
}

// The elements of a JSON value nested by a field's shape (dump --full --json), flattened in row-major order.
inline std::vector<uint64_t> flat_elements(const json& value) {
  if (!value.is_array()) return {value.get<uint64_t>()};
  std::vector<uint64_t> out;
  for (const json& item : value) {
    const std::vector<uint64_t> part = flat_elements(item);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

/// The CLI running as a child process, its stderr read line by line (stdout goes to /dev/null), so that a test
/// can signal it at a chosen moment: after a given progress line.
class RunningCli {
 public:
  /// `env`: "NAME=value" entries added to the CLI's environment.
  explicit RunningCli(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    int err_pipe[2];
    REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
    CliArgv cli(args);
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      for (const std::string& entry : env) ::putenv(const_cast<char*>(entry.c_str()));  // lives until exec
      ::execv(cli.argv[0], cli.argv.data());
      ::_exit(127);
    }
    ::close(err_pipe[1]);
    err_fd_ = err_pipe[0];
  }
  RunningCli(const RunningCli&) = delete;
  RunningCli& operator=(const RunningCli&) = delete;
  ~RunningCli() {
    if (pid_ > 0) finish(SIGKILL);
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  /// The CLI's process id (-1 once reaped).
  pid_t pid() const noexcept { return pid_; }

  /// The next line the CLI writes to stderr (without its newline); nullopt once it closed stderr (it exited).
  std::optional<std::string> next_line() {
    for (;;) {
      const std::size_t nl = pending_.find('\n');
      if (nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return line;
      }
      char chunk[4096];
      const ssize_t got = ::read(err_fd_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return std::nullopt;
      pending_.append(chunk, static_cast<std::size_t>(got));
    }
  }

  /// Reads the CLI's stderr to its end (returned) while sampling its peak resident set every 2 ms: VmHWM of
  /// /proc/PID/status once the child has exec'd the CLI, which belongs to the CLI's own memory (wait4's ru_maxrss
  /// does not: Linux keeps the largest resident set the process ever had, and before its exec the child was a copy
  /// of this test process, whose size depends on the tests before). `peak_bytes` gets the largest value read (monotonic, so the last one
  /// read before the CLI exited); a peak in the CLI's last 2 ms may be missed.
  std::string drain_stderr(uint64_t& peak_bytes) {
    std::string err;
    peak_bytes = 0;
    for (;;) {
      peak_bytes = std::max(peak_bytes, vm_hwm_bytes());
      pollfd p{err_fd_, POLLIN, 0};
      if (::poll(&p, 1, 2) <= 0) continue;
      char chunk[4096];
      const ssize_t got = ::read(err_fd_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return pending_ + err;
      err.append(chunk, static_cast<std::size_t>(got));
    }
  }

  /// Sends `sig` (0: none) and reaps the CLI; its exit code, or 128 + the signal that ended it. `usage`, when
  /// given, receives the CLI's resource usage (ru_maxrss: the largest resident set the process ever had, the
  /// fork's copy of this test process included: for the CLI's own peak, drain_stderr).
  int finish(int sig, rusage* usage = nullptr) {
    if (sig != 0) ::kill(pid_, sig);
    int status = 0;
    rusage ignored{};
    while (::wait4(pid_, &status, 0, usage != nullptr ? usage : &ignored) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  // The CLI's VmHWM in bytes; 0 before its exec (the child is still a copy of this process, named as it is), once
  // it has exited (its memory is gone), or when unreadable. The name is read first: a status read after it is from
  // after the exec.
  uint64_t vm_hwm_bytes() const {
    std::ifstream comm(fmt::format("/proc/{}/comm", pid_));
    std::string name;
    if (!std::getline(comm, name) || name != "shmreplay") return 0;
    std::ifstream f(fmt::format("/proc/{}/status", pid_));
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    }
    return 0;
  }

  pid_t pid_ = -1;
  int err_fd_ = -1;
  std::string pending_;
};

}  // namespace
