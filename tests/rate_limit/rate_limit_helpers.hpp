// tests/rate_limit/rate_limit_helpers.hpp: what the parts of test_rate_limit share (tests/CMakeLists.txt builds
// them into one executable): the test schema, pushes, sample options that do not wait, the published error read
// whole, and durations from the environment.
// test_rate_limit: the rate limiter (shmreplay/rate_limit.hpp, detail/protocol/rate_limit): its settings and
// verdicts (Reverb's conditions), the learner's and waiting writers' waits in one process, a randomized model of
// the counting and wake-up protocol that checks every interleaving it draws, and real processes: three writers and
// a learner at different speeds with the ratio checked at many points, a learner SIGKILLed while writers wait,
// writers SIGKILLed while the learner waits, and a dead writer's admission given back when its envs are taken over.
#pragma once

#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "detail/protocol/rate_limit.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

const Schema kSchema = Schema::parse("x:u64");

// Pushes one step to each of `envs` (a u64 per step).
inline void push_steps(Writer& w, const std::vector<uint64_t>& envs) {
  std::vector<uint64_t> xs(envs.size(), 7);
  w.push(std::span<const uint64_t>(envs), {field_bytes(xs)});
}

inline SampleOptions no_wait() {
  SampleOptions o;
  o.rate_limit_timeout_ms = 0;
  return o;
}

// A sound reading of the error: samples read before and after the heads, retried until they agree (only the learner
// changes samples, and inserts only grow, so with samples fixed the sum of heads lies between its values at the
// two reads).
struct ErrorReading {
  uint64_t inserts;
  uint64_t samples;
};
inline ErrorReading read_error(const Buffer& b) {
  const layout::GlobalControl& g = segment_of(b).global_control();
  for (;;) {
    const uint64_t s0 = g.samples.load(std::memory_order_seq_cst);
    const uint64_t inserts = detail::count_inserts(segment_of(b)).inserts;
    if (g.samples.load(std::memory_order_seq_cst) == s0) return {inserts, s0};
  }
}

// Integer seconds from an environment variable, for the longer runs.
inline double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atof(v) : fallback;
}

}  // namespace
