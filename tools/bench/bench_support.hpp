// tools/bench/bench_support.hpp: what the benchmarks' loops share besides timing (median_rate.hpp): a compiler
// barrier for the copy references, their uniform positions, and callgrind's instrumentation markers (no-ops
// where valgrind's header is not installed).
#pragma once

#include <cstdint>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#define CALLGRIND_DUMP_STATS_AT(label)
#endif

namespace shmreplay::bench {

/// Keeps the compiler from dropping stores to memory that is never read again (the copy references).
inline void clobber(const void* p) noexcept { asm volatile("" : : "g"(p) : "memory"); }

/// The references' random positions: splitmix64, a few ns per draw and no division.
struct SplitMix {
  uint64_t state;
  /// Uniform in [0, n).
  uint64_t below(uint64_t n) noexcept {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<uint64_t>(static_cast<double>(z >> 11) * 0x1.0p-53 * static_cast<double>(n));
  }
};

}  // namespace shmreplay::bench
