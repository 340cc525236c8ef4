// What the journal tests share: tagged steps whose every byte but the push time follows from (env, step), a writer
// process that pushes them, a journal process, and the check that an env of a restored buffer holds a prefix of
// what was pushed.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "shmreplay/buffer.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/journal.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"

namespace shmreplay::test {

// tag = env << 40 | step; t_ns the push's CLOCK_REALTIME; body[i] follows from (env, step, i).
inline const Schema kTaggedSchema = Schema::parse("tag:u64 t_ns:u64 body:u8[48]");
constexpr std::size_t kTaggedBody = 48;
constexpr std::size_t kTaggedBytes = 64;

inline uint64_t realtime_now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint8_t body_byte(uint64_t env, uint64_t step, std::size_t i) {
  uint64_t x = (env * 0x9e3779b97f4a7c15ull) ^ (step * 0xbf58476d1ce4e5b9ull) ^ (i * 0x94d049bb133111ebull);
  x ^= x >> 31;
  return static_cast<uint8_t>(x * 0xff51afd7ed558ccdull >> 56);
}

inline void push_tagged(Writer& w, uint64_t env, uint64_t step) {
  const uint64_t tag = env << 40 | step;
  const uint64_t t = realtime_now_ns();
  std::array<uint8_t, kTaggedBody> body{};
  for (std::size_t i = 0; i < kTaggedBody; ++i) body[i] = body_byte(env, step, i);
  w.push_one(env, {FieldBytes{&tag, 8}, FieldBytes{&t, 8}, FieldBytes{body.data(), body.size()}});
}

/// A process that pushes tagged steps into `envs` of `name`, one every `pause_us` per env, until killed. It runs at
/// nice 5: the load it makes must not starve the journal the test measures (a test's writers are its load, not
/// what it checks).
inline pid_t spawn_tagged_writer(const std::string& name, std::vector<uint64_t> envs, int pause_us) {
  return spawn([name, envs, pause_us] {
    (void)::nice(5);
    Buffer b = Buffer::open(name);
    Writer w(b, envs);
    for (uint64_t step = 0;; ++step) {
      for (const uint64_t e : envs) push_tagged(w, e, step);
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    }
  });
}

/// A process that journals `name` into `dir` with `bound_s` until killed (or SIGTERM: a last link, then exit 0).
inline pid_t spawn_journal(const std::string& name, const std::string& dir, double bound_s) {
  return spawn([name, dir, bound_s] {
    static std::atomic<bool> stop{false};
    ::signal(SIGTERM, [](int) { stop.store(true); });
    Journal j(name, dir, {.bound_s = bound_s});
    j.run(stop);
  });
}

/// What env `env` of `b` holds, checked against what was pushed: steps [first, head) each with its tag and body,
/// push times rising and none after `latest_ns`. Returns the push time of each step (oldest first); a failed check
/// is a doctest failure naming the step.
inline std::vector<uint64_t> check_tagged_prefix(const Buffer& b, uint64_t env, uint64_t latest_ns) {
  const StepRecords r = read_steps(b, env, 0, b.capacity());
  const SegmentInfo info = Inspector(Buffer::open(b.name(), {.read_only = true})).snapshot();
  CHECK(r.first_step + r.count == info.envs[env].head);  // the env's newest stored steps, none missing at the end
  std::vector<uint64_t> times;
  uint64_t previous = 0;
  for (uint64_t k = 0; k < r.count; ++k) {
    const uint64_t step = r.first_step + k;
    uint64_t tag = 0, t = 0;
    std::memcpy(&tag, r.field(k, 0).data(), 8);
    std::memcpy(&t, r.field(k, 1).data(), 8);
    INFO("env ", env, " step ", step);
    REQUIRE(tag == (env << 40 | step));
    REQUIRE(t >= previous);
    REQUIRE(t <= latest_ns);
    const auto body = r.field(k, 2);
    for (std::size_t i = 0; i < kTaggedBody; ++i) REQUIRE(static_cast<uint8_t>(body[i]) == body_byte(env, step, i));
    previous = t;
    times.push_back(t);
  }
  return times;
}

}  // namespace shmreplay::test
