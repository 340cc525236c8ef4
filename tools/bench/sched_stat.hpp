// tools/bench/sched_stat.hpp: what the scheduler says of the calling thread (/proc/thread-self/schedstat): its time
// on a CPU and its time runnable but waiting for one; and of the whole machine (/proc/stat): its CPUs' busy and
// stolen time. shmreplay_bench_scaling reports a learner's waiting share beside its latency (a tail made of waits for
// a CPU is the machine's cores, not the sample call), and how busy the machine was over its run.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace shmreplay::bench {

struct SchedStat {
  uint64_t cpu_ns = 0;   ///< time on a CPU
  uint64_t wait_ns = 0;  ///< time runnable, waiting on a run queue
  bool known = false;    ///< false where the kernel has no schedstat (CONFIG_SCHED_INFO off)
};

inline SchedStat sched_stat() {
  SchedStat s;
  std::ifstream in("/proc/thread-self/schedstat");
  if (in >> s.cpu_ns >> s.wait_ns) s.known = true;
  return s;
}

/// The machine's CPU time so far, in clock ticks, summed over its CPUs (/proc/stat's first line).
struct MachineCpu {
  uint64_t busy = 0;   ///< user, nice, system, irq, softirq
  uint64_t steal = 0;  ///< taken by the hypervisor for other guests
  uint64_t total = 0;  ///< everything, idle and iowait included
};

inline MachineCpu machine_cpu() {
  MachineCpu m;
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) {
    m.busy = user + nice + system + irq + softirq;
    m.steal = steal;
    m.total = m.busy + idle + iowait + steal;
  }
  return m;
}

}  // namespace shmreplay::bench
