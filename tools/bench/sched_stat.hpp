// tools/bench/sched_stat.hpp: what the scheduler says of the calling thread (/proc/thread-self/schedstat): its time
// on a CPU and its time runnable but waiting for one. shmreplay_bench_scaling reports a learner's waiting share
// beside its latency: a tail made of waits for a CPU is the machine's cores, not the sample call.
#pragma once

#include <cstdint>
#include <fstream>

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

}  // namespace shmreplay::bench
