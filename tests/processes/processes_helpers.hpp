// tests/processes/processes_helpers.hpp: what the parts of test_processes share (tests/CMakeLists.txt builds them
// into one executable): the writer process's body (self-checking payload steps at uneven rates), the ring's and the
// sampled rows' checks, and child-process helpers.
// test_processes: the contract under fire, with real processes: writer processes push self-checking steps at
// uneven rates while the learner (this process) samples and checks every row; writers are SIGKILLed at random
// moments (inside a push, inside a reserved-but-uncommitted step) and replaced, and at chosen instructions (inside
// a half-filled reservation, inside the copy of a batched push); a learner is killed mid-sample and replaced; the
// segment outlives everyone. Also the shared futex and blocking waits across processes, and a matrix of bad actors.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shmreplay/internal/segment.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "detail/os/futex.hpp"
#include "payload.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

using Clock = std::chrono::steady_clock;

// The body of a writer process: lease `envs` (taking over dead leases), then push forever in every way a
// writer can (batched subsets in random order, single pushes, reserve/commit, half-filled reservations that are
// committed late or abandoned), at uneven per-env rates. Never returns; the parent kills it.
[[noreturn]] void writer_main(const std::string& name, std::vector<uint64_t> envs, uint64_t seed, bool slow) {
  try {
    Buffer buf = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Writer writer(buf, envs);
    Rng rng(seed);
    PayloadPusher pusher;
    std::vector<int32_t> ids;
    for (;;) {
      const uint64_t mode = rng() % 8;
      if (mode < 5) {
        ids.clear();
        for (const uint64_t e : envs) {
          if (rng() % (e % 4 + 1) == 0) ids.push_back(static_cast<int32_t>(e));
        }
        for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng() % i]);
        if (!ids.empty()) pusher.push(writer, ids);
      } else if (mode == 5) {
        const uint64_t e = envs[rng() % envs.size()];
        pusher.push(writer, {static_cast<int32_t>(e)});
      } else {
        // Zero-copy; sometimes half-filled and held for a moment, so that kills land inside a reservation.
        StepSlot slot = writer.reserve(envs[rng() % envs.size()]);
        if (mode == 7) {
          fill_slot(slot, 1);
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        }
        fill_slot(slot);
        if (rng() % 8 != 0) slot.commit();
      }
      if (slow) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "writer %d: %s\n", static_cast<int>(::getpid()), e.what());
  }
  ::_exit(3);  // only reached when the writer failed: the parent reports an exit instead of a kill
}


// Reads every stored step of every env straight from the ring (no writer may be running) and checks that each
// holds its own env, its own step index and an intact checksum. Returns the number of bad steps.
inline uint64_t verify_ring(const Buffer& buf, std::string* first_bad) {
  uint64_t bad = 0;
  const uint64_t cap = buf.capacity();
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    const layout::EnvControl& c = segment_of(buf).env_control(e);
    const uint64_t head = c.head.load();
    const uint64_t claimed = c.claimed.load() & layout::kClaimMask;
    for (uint64_t s = claimed > cap ? claimed - cap : 0; s < head; ++s) {
      const uint64_t slot = e * cap + s % cap;
      uint64_t hdr[4];
      float body[kBody];
      uint8_t tail[kTail];
      std::memcpy(hdr, segment_of(buf).field_data(0) + slot * sizeof hdr, sizeof hdr);
      std::memcpy(body, segment_of(buf).field_data(1) + slot * sizeof body, sizeof body);
      std::memcpy(tail, segment_of(buf).field_data(2) + slot * sizeof tail, sizeof tail);
      if (hdr[0] != e || hdr[1] != s || hdr[3] != checksum(hdr, body, tail)) {
        if (bad++ == 0 && first_bad) *first_bad = fmt::format("env {} step {}: header {} {}", e, s, hdr[0], hdr[1]);
      }
    }
  }
  return bad;
}

inline uint64_t total_heads(const Buffer& buf) {
  uint64_t n = 0;
  for (uint64_t e = 0; e < buf.num_envs(); ++e) n += segment_of(buf).env_control(e).head.load();
  return n;
}

// Samples every way the learner can and checks every row; returns violations, adds rows checked to `rows`.
inline uint64_t sample_and_check(Sampler& learner, Rng& rng, SampleBatch& batch, uint64_t call, uint64_t* rows,
                                 std::string* first) {
  const Buffer& buf = learner.buffer();
  const std::size_t L = 1 + static_cast<std::size_t>(rng() % buf.capacity());
  const double power = static_cast<double>(rng() % 3);
  const int kind = static_cast<int>(call % 5);
  // Heads before the call: every row was cut at a head at least this high (check_row's lower bound).
  std::vector<uint64_t> heads_before(buf.num_envs());
  for (uint64_t e = 0; e < heads_before.size(); ++e) heads_before[e] = learner.sizes(e).head;
  try {
    if (kind == 0) learner.sample(View::replay, 64, L, power, rng, batch);
    if (kind == 1) learner.sample_mixed(48, 16, L, power, rng, batch);
    if (kind == 2) learner.sample(View::online, 32, L, power, rng, batch);
    if (kind == 3) learner.sample_transitions(View::replay, 128, rng, batch);
    if (kind == 4) {
      std::vector<uint64_t> all(buf.num_envs());
      for (uint64_t e = 0; e < all.size(); ++e) all[e] = e;
      learner.peek(all, batch);
    }
  } catch (const Error& e) {
    if (e.errc() == Errc::empty_view) return 0;
    throw;
  }
  uint64_t violations = 0;
  for (std::size_t row = 0; row < batch.rows(); ++row) {
    ++*rows;
    if (kind == 4 && !batch.valid(row, 0)) continue;
    const uint64_t env = batch.env_ids()[row];
    const std::string v = check_row(batch, row, learner.sizes(env).head, heads_before[env]);
    if (!v.empty() && violations++ == 0 && first->empty()) *first = v;
  }
  if (call % 7 == 0) learner.reset_online_queue();
  return violations;
}

// Milliseconds since `t0`.
inline int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// Waits for a child that is expected to exit by itself; returns its exit code (128 + signal if killed).
inline int reap(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

// Samples `calls` batches every way the learner can while no writer runs, and checks every row against the exact
// heads (so the mask must be exactly min(L, head - start)). Adds every (env, step) a valid position held to
// `seen`. Returns the first violation, or "".
inline std::string sample_quietly(Sampler& learner, Rng& rng, int calls,
                                  std::set<std::pair<uint64_t, uint64_t>>* seen) {
  const Buffer& buf = learner.buffer();
  SampleBatch batch;
  std::vector<uint64_t> heads(buf.num_envs());
  std::vector<uint64_t> all(buf.num_envs());
  for (uint64_t e = 0; e < all.size(); ++e) all[e] = e;
  for (int call = 0; call < calls; ++call) {
    for (uint64_t e = 0; e < heads.size(); ++e) heads[e] = learner.sizes(e).head;
    const std::size_t L = 1 + static_cast<std::size_t>(rng() % buf.capacity());
    const double power = static_cast<double>(rng() % 3);
    const int kind = call % 5;
    try {
      if (kind == 0) learner.sample(View::replay, 64, L, power, rng, batch);
      if (kind == 1) learner.sample_mixed(48, 16, L, power, rng, batch);
      if (kind == 2) learner.sample(View::online, 32, L, power, rng, batch);
      if (kind == 3) learner.sample_transitions(View::replay, 128, rng, batch);
      if (kind == 4) learner.peek(all, batch);
    } catch (const Error& e) {
      if (e.errc() == Errc::empty_view) continue;
      throw;
    }
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      const uint64_t env = batch.env_ids()[row];
      if (kind == 4 && !batch.valid(row, 0)) continue;
      const std::string v = check_row(batch, row, heads[env], heads[env]);
      if (!v.empty()) return fmt::format("env {} row starting at {}: {}", env, batch.start_steps()[row], v);
      for (std::size_t t = 0; t < batch.sequence_length() && batch.valid(row, t); ++t) {
        seen->emplace(env, batch.start_steps()[row] + t);
      }
    }
  }
  return "";
}

// The (env, step) pairs of every env's replay view, as the learner sizes it.
inline std::set<std::pair<uint64_t, uint64_t>> replay_view(const Sampler& learner) {
  std::set<std::pair<uint64_t, uint64_t>> out;
  for (uint64_t e = 0; e < learner.buffer().num_envs(); ++e) {
    const EnvSizes sz = learner.sizes(e);
    for (uint64_t s = sz.head - sz.replay; s < sz.head; ++s) out.emplace(e, s);
  }
  return out;
}

// Runs the body of a spawned child: an exception ends the child with exit code 9 (it must never unwind into the
// parent's copy of the test runner).
inline void child_body(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
    ::_exit(9);
  }
}

}  // namespace
