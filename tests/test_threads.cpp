// Writer threads and a learner thread in one process, at full speed on a small ring: every sampled step's
// self-checking payload must be intact, every row must hold consecutive steps of its env, and the mask must
// match what was published. The learner also rewrites stored steps with try_update(), which must never tear.
//
// CI runs it for about a second per case; SHMREPLAY_SOAK_SECONDS=N runs each case for N seconds.
#include <doctest/doctest.h>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"

using namespace shmreplay;

namespace {

using namespace shmreplay::test;

struct Counts {
  uint64_t rows = 0;
  uint64_t calls = 0;
  uint64_t updates = 0;
  uint64_t violations = 0;
  std::string first_violation;
};

// A writer thread's loop: pushes to envs w, w + num_writers, ... of `buf` (a random subset at a time, in random order,
// each at its own uneven rate; with zero_copy, half the batches as reservations, some abandoned) until `stop`.
// Returns the steps pushed.
uint64_t write_until(Buffer& buf, std::size_t num_writers, std::size_t w, bool zero_copy,
                     const std::atomic<bool>& stop) {
  std::vector<uint64_t> mine;
  for (uint64_t e = w; e < buf.num_envs(); e += num_writers) mine.push_back(e);
  Writer writer(buf, mine);
  Rng rng(w + 1);
  std::vector<int32_t> ids;
  PayloadPusher pusher;
  uint64_t n = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    // A random subset of this writer's envs, in random order, each at its own uneven rate.
    ids.clear();
    for (const uint64_t e : mine) {
      if (rng() % (e % 3 + 1) == 0) ids.push_back(static_cast<int32_t>(e));
    }
    for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng() % i]);
    if (ids.empty()) continue;
    if (zero_copy && ids.size() % 2 == 0) {
      for (const int32_t e : ids) {
        StepSlot slot = writer.reserve(static_cast<uint64_t>(e));
        fill_slot(slot);
        if (rng() % 16 != 0) slot.commit();  // sometimes abandoned: never visible
      }
    } else {
      pusher.push(writer, ids);
    }
    n += ids.size();
  }
  return n;
}

// Rewrites a stored step of a random env with a new, self-consistent version; whether it did.
bool rewrite_a_step(Sampler& learner, Rng& rng, uint64_t version) {
  const uint64_t e = rng() % learner.buffer().num_envs();
  const EnvSizes sz = learner.sizes(e);
  if (sz.replay == 0) return false;
  const uint64_t step = sz.head - 1 - rng() % sz.replay;
  const Payload p = make_payload(e, step, version);
  return learner.try_update(e, step, {{p.hdr, sizeof p.hdr}, {p.body, sizeof p.body}, {p.tail, sizeof p.tail}});
}

// Runs one case; returns the learner's retries (rows redrawn because a writer lapped them during the copy).
uint64_t run_case(uint64_t num_envs, uint64_t capacity, std::size_t num_writers, bool zero_copy) {
  test::SegmentGuard guard(test::unique_name("threads"));
  Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kPayloadSchema);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> pushes{0};

  std::vector<std::thread> writers;
  for (std::size_t w = 0; w < num_writers; ++w) {
    writers.emplace_back([&, w] { pushes.fetch_add(write_until(buf, num_writers, w, zero_copy, stop)); });
  }

  Counts counts;
  uint64_t retries = 0;
  {
    Sampler learner(buf);
    Rng rng(99);
    SampleBatch batch;
    std::vector<uint64_t> all(num_envs);
    for (uint64_t e = 0; e < num_envs; ++e) all[e] = e;
    std::vector<uint64_t> heads_before(num_envs);
    while (learner.size(View::replay) == 0) std::this_thread::yield();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(run_seconds());
    uint64_t version = 1;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::size_t L = 1 + static_cast<std::size_t>(rng() % capacity);
      const double power = static_cast<double>(rng() % 3);
      const int kind = static_cast<int>(counts.calls % 4);
      // Heads before the call: every row was cut at a head at least this high (check_row's lower bound).
      for (uint64_t e = 0; e < num_envs; ++e) heads_before[e] = learner.sizes(e).head;
      try {
        if (kind == 0) learner.sample(View::replay, 32, L, power, rng, batch);
        if (kind == 1) learner.sample_mixed(24, 8, L, power, rng, batch);
        if (kind == 2) learner.sample(View::online, 16, L, power, rng, batch);
        if (kind == 3) learner.peek(all, batch);
      } catch (const Error& e) {
        if (e.errc() != Errc::empty_view) throw;  // the online view can be empty right after a reset
        continue;
      }
      ++counts.calls;
      for (std::size_t row = 0; row < batch.rows(); ++row) {
        ++counts.rows;
        if (kind == 3 && !batch.valid(row, 0)) continue;
        const uint64_t head_after = learner.sizes(batch.env_ids()[row]).head;
        const std::string v = check_row(batch, row, head_after, heads_before[batch.env_ids()[row]]);
        if (!v.empty()) {
          if (counts.violations++ == 0) counts.first_violation = v;
        }
      }
      if (counts.calls % 8 == 0) learner.reset_online_queue();
      if (counts.calls % 3 == 0 && rewrite_a_step(learner, rng, version++)) ++counts.updates;
    }
    retries = learner.retries();
    stop = true;
  }
  for (auto& t : writers) t.join();
  MESSAGE(fmt::format("{} envs x {} steps, {} writer thread(s){}: {} pushes, {} sample calls, {} rows checked, {} "
                      "updates, {} retries, {} violations",
                      num_envs, capacity, num_writers, zero_copy ? " (with reserve/commit)" : "", pushes.load(),
                      counts.calls, counts.rows, counts.updates, retries, counts.violations));
  CHECK_MESSAGE(counts.violations == 0, counts.first_violation);
  CHECK(pushes.load() > 0);
  CHECK(counts.rows > 0);
  return retries;
}

// CPUs this process may run on (its affinity mask, which containers and taskset narrow).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

}  // namespace

TEST_CASE("writer threads and a learner thread: every sampled step is whole and every row is consecutive") {
  run_case(/*num_envs=*/8, /*capacity=*/16, /*num_writers=*/2, /*zero_copy=*/false);
}

TEST_CASE("a tiny ring lapped continuously still yields only whole steps") {
  const uint64_t retries = run_case(/*num_envs=*/2, /*capacity=*/4, /*num_writers=*/2, /*zero_copy=*/false);
  // The point of this case is that the seqlock rejects lapped copies, so it must see some. With two or more CPUs
  // the writers lap the 4-step ring during the learner's copies thousands of times a second; on one CPU a copy
  // is lapped only when the learner is preempted inside it, which may not happen in a short run.
  if (usable_cpus() >= 2) {
    CHECK_MESSAGE(retries > 0, "the writers never lapped a copy: the validation path was not exercised");
  } else if (retries == 0) {
    MESSAGE("one usable CPU: no copy was lapped in this run, so the validation path was not exercised");
  }
}

TEST_CASE("zero-copy writers, including abandoned reservations, never expose a half-written step") {
  run_case(/*num_envs=*/6, /*capacity=*/8, /*num_writers=*/2, /*zero_copy=*/true);
}
