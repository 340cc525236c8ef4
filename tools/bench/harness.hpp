// tools/bench/harness.hpp: the benchmark's process harness.
//
// A Team forks one worker process per body. Each worker sets itself up (opens its segment by name, leases its
// envs, warms its output arrays), says it is ready, then runs one operation (a push, a sample call, a copy) in a
// loop until it is told to stop, counting the units it did (steps or rows). The parent never interrupts the
// loop: it marks trial boundaries by bumping a shared epoch counter, and each worker records (units done, time)
// at the first operation that ends after it sees the new epoch. So every worker runs without a pause for the
// whole measurement (the load that other workers put on the machine is constant), a trial is an exact count of
// whole operations over an exact time, and a trial always holds at least one operation.
//
// A worker can be starved: a lock-based writer whose sampler holds the lock for whole calls may not finish one
// operation in a trial. The parent waits for a worker's mark only for a bounded "patience", then goes on; a
// worker that was late is reported over the whole run (from the end of the warm-up to its last mark) instead of
// per trial, and flagged.
//
// Exit paths: workers set PR_SET_PDEATHSIG (SIGKILL), so no worker outlives the parent however it ends; the
// parent kills and reaps its workers when a Team is destroyed (also during an exception), and on SIGINT, SIGTERM,
// SIGHUP and SIGQUIT a handler kills the workers and unlinks every registered segment file before the signal
// takes its default action.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "bench_support.hpp"  // clobber, for the workloads

namespace shmreplay::bench {

/// Workers of one Team: shmreplay_bench_scaling runs up to 64 writer processes beside up to 4 learners.
inline constexpr std::size_t kMaxWorkers = 72;
inline constexpr uint32_t kMaxTrials = 64;
/// Epochs: 0 before the run, 1 starts the warm-up, 2 ends it and starts trial 1, ..., trials + 2 ends the last.
/// A worker that sees several epochs at once (it was starved) records the same mark for each of them; on stop
/// it fills every epoch it has not marked.
inline constexpr std::size_t kMaxMarks = kMaxTrials + 3;
inline constexpr uint32_t kStopEpoch = 0xffffffffu;

/// One worker's record, written by the worker, read by the parent after the worker's release store of `marked`.
struct alignas(64) WorkerSlot {
  std::atomic<uint32_t> ready;   ///< 1 once set up (release; the parent acquires)
  std::atomic<uint32_t> marked;  ///< the last epoch recorded in units/ns (release; the parent acquires)
  uint64_t units[kMaxMarks];     ///< units done when epoch e was seen
  uint64_t ns[kMaxMarks];        ///< CLOCK_MONOTONIC then
  uint64_t cpu_ns[kMaxMarks];    ///< the worker's CPU time (CLOCK_THREAD_CPUTIME_ID) then
  uint64_t total_units;          ///< over the whole run, warm-up included; written before the worker exits
  uint64_t retries;              ///< a sampler's redrawn rows over the whole run
  char error[512];               ///< what() of the exception that ended the worker, if any
};

/// The block shared by the parent and its workers (an anonymous shared mapping inherited across fork).
struct Control {
  alignas(64) std::atomic<uint32_t> epoch;  ///< written by the parent only
  WorkerSlot workers[kMaxWorkers];
};

/// The worker side: the loop's bookkeeping.
class Worker {
 public:
  Worker(Control& control, std::size_t index) noexcept : control_(control), slot_(control.workers[index]) {}

  /// Announces that set-up is done and waits for the run to start. Returns false when told to stop first.
  bool start() noexcept;

  /// Counts the `units` done by the operation that just ended and records epoch boundaries. Returns false once
  /// the parent stops the run. Costs one relaxed load of a line the parent rarely writes.
  bool done(uint64_t units) noexcept {
    units_ += units;
    const uint32_t e = control_.epoch.load(std::memory_order_relaxed);
    if (e == epoch_) [[likely]] return true;
    return mark(e);
  }

  /// Records a sampler's retry count (call after the loop).
  void set_retries(uint64_t retries) noexcept { slot_.retries = retries; }

  /// The last epoch this worker marked: 1 during the warm-up, 2 + t during trial t. The units of an operation
  /// belong to the trial of the epoch read before its done() (done() marks after counting them).
  uint32_t epoch() const noexcept { return epoch_; }

 private:
  friend class Team;
  bool mark(uint32_t epoch) noexcept;

  Control& control_;
  WorkerSlot& slot_;
  uint32_t epoch_ = 0;
  uint64_t units_ = 0;
};

/// What one worker did in each trial.
struct WorkerTrials {
  std::vector<uint64_t> units;   ///< per trial
  std::vector<double> seconds;   ///< per trial
  std::vector<double> cpu_seconds;  ///< per trial: time this worker was on a CPU
  bool late = false;             ///< missed a trial boundary by more than the patience (starved)
  uint64_t run_units = 0;        ///< from the end of the warm-up to the worker's last mark
  double run_seconds = 0;
  double run_cpu_seconds = 0;
  uint64_t total_units = 0;      ///< warm-up included
  uint64_t retries = 0;
};

using Body = std::function<void(Worker&)>;

/// The parent side: forks the workers at construction; run() measures; the destructor stops, kills what is left
/// and reaps. One Team at a time (the signal handler knows the current Team's pids).
class Team {
 public:
  /// `names` label the workers in error messages ("writer 0", "sampler").
  Team(std::vector<Body> bodies, std::vector<std::string> names);
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;
  ~Team();

  /// Waits for every worker to be ready, runs a warm-up of `warmup_s` seconds and `trials` trials of at least
  /// `trial_s` seconds each, stops the workers and reaps them. A worker that has not marked a boundary within
  /// `patience_s` is marked late and not waited for. Throws std::runtime_error when a worker fails (with its
  /// message) or does not answer within 120 s.
  std::vector<WorkerTrials> run(double warmup_s, double trial_s, uint32_t trials, double patience_s);

 private:
  /// Waits until done_by(i) for every worker; false when `limit_s` passed first (throws after 120 s when
  /// limit_s is 0).
  bool wait_for(const char* what, const std::function<bool(std::size_t)>& done_by, double limit_s = 0);
  void check_children(const char* what);
  void stop_and_reap() noexcept;

  Control* control_ = nullptr;
  std::vector<pid_t> pids_;
  std::vector<bool> reaped_;
  std::vector<std::string> names_;
};

/// Segment files to unlink if the process is killed by a signal, or any exit path skips their RAII owner.
/// Async-signal-safe on the signal side; at most 16 at a time.
void register_segment_file(const std::string& path);
void unregister_segment_file(const std::string& path) noexcept;

/// Installs the SIGINT/SIGTERM/SIGHUP/SIGQUIT handler described at the top of this file.
void install_signal_handlers();

/// A forked helper that unlinks `paths` when this process ends however it ends, SIGKILL included (which no
/// handler sees): it blocks reading a pipe whose only write end this process holds, and EOF means we are gone.
/// The destructor (normal exit, exceptions) closes the pipe and reaps the janitor.
class Janitor {
 public:
  explicit Janitor(std::vector<std::string> paths);
  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;
  ~Janitor();

 private:
  pid_t pid_ = -1;
  int write_fd_ = -1;
};

/// A benchmark's scratch directory (a checkpoint chain, a journal's links): created, and removed with everything in
/// it when the scope ends (errors ignored: a benchmark's cleanup must not hide its result).
class ScratchDir {
 public:
  explicit ScratchDir(std::string path) : path_(std::move(path)) { std::filesystem::create_directories(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

/// Maps every page of [base, base + bytes) into this process's page tables for writing (MADV_POPULATE_WRITE, or
/// a read of each page where the kernel lacks it), without changing any byte: a freshly mapped segment is then
/// measured in its steady state, not its first-touch page faults.
void populate(const void* base, std::size_t bytes) noexcept;

/// CLOCK_MONOTONIC in nanoseconds.
uint64_t monotonic_ns() noexcept;
/// This thread's CPU time in nanoseconds (a system call: only at trial marks).
uint64_t thread_cpu_ns() noexcept;

/// What the machine is, for the report.
struct MachineInfo {
  std::string cpu;         ///< model name from /proc/cpuinfo
  unsigned cores_online = 0;
  unsigned cores_configured = 0;
  std::string caches;      ///< "L2 2 MiB per core, L3 33 MiB" from sysfs; empty when unknown
  double memory_gib = 0;
  double shm_free_gib = 0;
  std::string kernel;      ///< uname: sysname release machine
  std::string compiler;
  std::string build_type;
  std::string sanitizers;  ///< "none", "address", ...
  std::string load_average;
  std::string virtualization;  ///< "KVM" etc. from lscpu-equivalent /proc/cpuinfo flag, or "none detected"
};
MachineInfo describe_machine();
/// The load average and, where the kernel has PSI, the share of the last 10 s in which some runnable task waited
/// for a CPU (/proc/pressure/cpu, "some avg10"): how much else wanted the cores.
std::string load_now();

}  // namespace shmreplay::bench
