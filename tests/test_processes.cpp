// The contract under fire, with real processes: writer processes push self-checking steps at uneven rates while
// the learner (this process) samples and checks every row; writers are SIGKILLed at random moments (inside a
// push, inside a reserved-but-uncommitted step) and replaced, and at chosen instructions (inside a half-filled
// reservation, inside the copy of a batched push); a learner is killed mid-sample and replaced; the segment
// outlives everyone. Also the shared futex and blocking waits across processes, and a matrix of bad actors.
//
// CI runs the torture case for two seconds; SHMREPLAY_SOAK_SECONDS=N runs it for N seconds (checked by a test that
// runs it in a child with N = 0.5).
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
uint64_t verify_ring(const Buffer& buf, std::string* first_bad) {
  uint64_t bad = 0;
  const uint64_t cap = buf.capacity();
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    const layout::EnvControl& c = buf.segment().env_control(e);
    const uint64_t head = c.head.load();
    const uint64_t claimed = c.claimed.load() & ~layout::kUpdateLockBit;
    for (uint64_t s = claimed > cap ? claimed - cap : 0; s < head; ++s) {
      const uint64_t slot = e * cap + s % cap;
      uint64_t hdr[4];
      float body[kBody];
      uint8_t tail[kTail];
      std::memcpy(hdr, buf.segment().field_data(0) + slot * sizeof hdr, sizeof hdr);
      std::memcpy(body, buf.segment().field_data(1) + slot * sizeof body, sizeof body);
      std::memcpy(tail, buf.segment().field_data(2) + slot * sizeof tail, sizeof tail);
      if (hdr[0] != e || hdr[1] != s || hdr[3] != checksum(hdr, body, tail)) {
        if (bad++ == 0 && first_bad) *first_bad = fmt::format("env {} step {}: header {} {}", e, s, hdr[0], hdr[1]);
      }
    }
  }
  return bad;
}

uint64_t total_heads(const Buffer& buf) {
  uint64_t n = 0;
  for (uint64_t e = 0; e < buf.num_envs(); ++e) n += buf.segment().env_control(e).head.load();
  return n;
}

// Samples every way the learner can and checks every row; returns violations, adds rows checked to `rows`.
uint64_t sample_and_check(Sampler& learner, Rng& rng, SampleBatch& batch, uint64_t call, uint64_t* rows,
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
int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// Waits for a child that is expected to exit by itself; returns its exit code (128 + signal if killed).
int reap(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

// Samples `calls` batches every way the learner can while no writer runs, and checks every row against the exact
// heads (so the mask must be exactly min(L, head - start)). Adds every (env, step) a valid position held to
// `seen`. Returns the first violation, or "".
std::string sample_quietly(Sampler& learner, Rng& rng, int calls, std::set<std::pair<uint64_t, uint64_t>>* seen) {
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
std::set<std::pair<uint64_t, uint64_t>> replay_view(const Sampler& learner) {
  std::set<std::pair<uint64_t, uint64_t>> out;
  for (uint64_t e = 0; e < learner.buffer().num_envs(); ++e) {
    const EnvSizes sz = learner.sizes(e);
    for (uint64_t s = sz.head - sz.replay; s < sz.head; ++s) out.emplace(e, s);
  }
  return out;
}

// Runs the body of a spawned child: an exception ends the child with exit code 9 (it must never unwind into the
// parent's copy of the test runner).
void child_body(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
    ::_exit(9);
  }
}

// Where a child stopped inside a push reports to the parent (see the batched-push kill test).
int g_stopped_fd = -1;

// SIGSEGV handler of that child: tell the parent where we are, then wait to be killed, inside the faulting copy.
void stop_inside_copy(int) {
  const char c = 's';
  [[maybe_unused]] const ssize_t n = ::write(g_stopped_fd, &c, 1);
  for (;;) ::pause();
}

}  // namespace

constexpr const char* kTortureName =
    "writer processes killed at random moments lose nothing published and never expose a torn step";

TEST_CASE(kTortureName) {
  const auto start = Clock::now();  // the torture runs run_seconds(2.0) from here, setup included
  const uint64_t num_envs = 12;
  const uint64_t capacity = 64;
  const std::size_t num_writers = 3;
  SegmentGuard guard(unique_name("torture"));
  std::vector<std::vector<uint64_t>> slices(num_writers);
  for (uint64_t e = 0; e < num_envs; ++e) slices[e % num_writers].push_back(e);

  uint64_t rows = 0, calls = 0, violations = 0, kills = 0, retries = 0, pushes = 0;
  uint64_t claimed_kills = 0, claimed_envs = 0;  // kills that left an env between its claim and its head store
  std::string first;
  double torture_s = 0;
  {
    Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kPayloadSchema);
    std::vector<pid_t> writers(num_writers);
    uint64_t seed = 1;
    for (std::size_t w = 0; w < num_writers; ++w) {
      writers[w] = spawn([&, w, s = seed++] { writer_main(guard.name(), slices[w], s, false); });
    }
    Sampler learner(buf);
    REQUIRE(learner.wait(View::replay, num_envs, 10'000));
    // Per writer slot, the process that holds its envs' leases: a writer killed while it was starting, before it
    // took the leases over, leaves them with its dead predecessor.
    std::vector<pid_t> holders = writers;
    Rng rng(7);
    SampleBatch batch;
    SampleBatch newest;  // peeks right after a kill
    std::vector<uint64_t> floor(num_envs, 0);  // heads seen after each kill: published steps never go away
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_seconds(2.0)));
    auto next_kill = Clock::now() + std::chrono::milliseconds(50);
    // A long soak reports its running totals every minute on stderr, so that a soak cut short still has figures.
    const bool soak = run_seconds(2.0) >= 60;
    auto next_report = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline || kills == 0) {  // at least one kill, however short the soak
      violations += sample_and_check(learner, rng, batch, calls++, &rows, &first);
      if (soak && Clock::now() >= next_report) {
        next_report += std::chrono::seconds(60);
        std::fprintf(stderr, "soak %.0f s: %llu kills, %llu sample calls, %llu rows checked, %llu retries, %llu "
                     "violations\n", std::chrono::duration<double>(Clock::now() - start).count(),
                     static_cast<unsigned long long>(kills), static_cast<unsigned long long>(calls),
                     static_cast<unsigned long long>(rows), static_cast<unsigned long long>(learner.retries()),
                     static_cast<unsigned long long>(violations));
      }
      for (uint64_t e = 0; e < num_envs; ++e) {
        if (buf.segment().env_control(e).head.load() < floor[e]) {
          if (violations++ == 0 && first.empty()) first = fmt::format("env {}'s head went backwards", e);
        }
      }
      if (Clock::now() >= next_kill) {
        const std::size_t w = rng() % num_writers;
        CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
        ++kills;
        // Before the replacement starts nothing moves on the dead writer's envs: every step it committed is still
        // stored intact (up to capacity), the views hold exactly those steps, and the newest one can be peeked.
        bool left_claimed = false;
        for (const uint64_t e : slices[w]) {
          const layout::EnvControl& c = buf.segment().env_control(e);
          const uint64_t head = c.head.load();
          const uint64_t claimed = c.claimed.load() & ~layout::kUpdateLockBit;
          floor[e] = head;
          CHECK_MESSAGE((claimed == head || claimed == head + 1), fmt::format("env {}: head {}, claimed {}", e,
                                                                              head, claimed));
          // claimed = head + 1: killed between the claim and the head store (inside a push, or inside or after an
          // abandoned reservation); the slot being reclaimed holds step head - capacity, which leaves the view.
          if (claimed == head + 1) {
            left_claimed = true;
            ++claimed_envs;
          }
          CHECK(check_env_payloads(buf, e) == "");
          const EnvSizes sz = learner.sizes(e);
          CHECK(sz.head == head);
          CHECK_MESSAGE(sz.replay == std::min(head, claimed == head ? capacity : capacity - 1),
                        fmt::format("env {}: head {}, claimed {}, replay {}", e, head, claimed, sz.replay));
          if (head > 0) {
            const uint64_t one[1] = {e};
            learner.peek(one, newest);
            CHECK(newest.valid(0, 0));
            CHECK(newest.start_steps()[0] == head - 1);
            CHECK(check_row(newest, 0, head, head) == "");
          }
        }
        if (left_claimed) ++claimed_kills;
        // The dead writer's envs show as dead in the inspector until the replacement takes them over.
        const SegmentInfo info = Inspector(guard.name()).snapshot();
        const uint64_t holder = info.envs[slices[w][0]].owner_pid;
        CHECK((holder == static_cast<uint64_t>(writers[w]) || holder == static_cast<uint64_t>(holders[w])));
        holders[w] = static_cast<pid_t>(holder);
        for (const uint64_t e : slices[w]) {
          CHECK(info.envs[e].owner == OwnerState::dead);
          CHECK(info.envs[e].owner_pid == holder);
        }
        writers[w] = spawn([&, w, s = seed++] { writer_main(guard.name(), slices[w], s, false); });
        next_kill = Clock::now() + std::chrono::milliseconds(20 + rng() % 120);
      }
    }
    torture_s = std::chrono::duration<double>(Clock::now() - start).count();
    // The last replacement may not have taken its leases over yet: give it time (never a timed assertion).
    const auto all_alive = [](const SegmentInfo& info) {
      return std::all_of(info.envs.begin(), info.envs.end(),
                         [](const EnvInfo& env) { return env.owner == OwnerState::alive; });
    };
    SegmentInfo live = Inspector(guard.name()).snapshot();
    for (const auto give_up = Clock::now() + std::chrono::seconds(20);
         !(all_alive(live) && live.live_writers == num_writers) && Clock::now() < give_up;
         live = Inspector(guard.name()).snapshot()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (const EnvInfo& env : live.envs) {
      CHECK(env.owner == OwnerState::alive);
      CHECK(env.last_push_ns > 0);
    }
    CHECK(live.live_writers == num_writers);
    for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
    retries = learner.retries();
    pushes = total_heads(buf);
    for (uint64_t e = 0; e < num_envs; ++e) CHECK(buf.segment().env_control(e).head.load() >= floor[e]);
    std::string bad;
    CHECK_MESSAGE(verify_ring(buf, &bad) == 0, bad);
    CHECK(buf.segment().global_control().learner_takeovers.load() == 0);
  }
  MESSAGE(fmt::format("{} writer processes, {} kills: {} pushes, {} sample calls, {} rows checked, {} retries, {} "
                      "violations; the torture ran for {:.3f} s",
                      num_writers, kills, pushes, calls, rows, retries, violations, torture_s));
  MESSAGE(fmt::format("{} of {} kills left {} env(s) claimed but not published (killed inside a push or a "
                      "reservation, or after abandoning one)",
                      claimed_kills, kills, claimed_envs));
  CHECK_MESSAGE(violations == 0, first);
  CHECK(kills > 0);

  // Every process that used the segment is gone; it is still there, with its data.
  Buffer again = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
  CHECK(total_heads(again) == pushes);
  std::string bad;
  CHECK_MESSAGE(verify_ring(again, &bad) == 0, bad);
  Sampler learner(again);  // the old learner released its lease
  // Full rings; an env whose writer died mid-write (or abandoned a reservation) has its oldest slot reclaimed.
  CHECK(learner.size(View::replay) <= num_envs * capacity);
  CHECK(learner.size(View::replay) >= num_envs * (capacity - 1));
}

constexpr const char* kLearnerTortureName =
    "learner processes killed at random moments, beside writers killed at random moments: every row any learner "
    "checked was sound, and each new learner takes the dead one's lease over";

// What the learner processes of the learner torture report to the parent, in a shared anonymous mapping (a
// SIGKILLed child cannot report at exit): totals over the calls they completed, and the first violation's text.
struct LearnerTally {
  std::atomic<uint64_t> rows{0}, calls{0}, violations{0}, in_sample{0};
  std::atomic<uint64_t> first_taken{0};  // 0 until a child claims `first` (exchange) to write its violation
  char first[256] = {};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// The body of a learner process: take the learner lease (over a dead learner's), then sample every way and check
// every row until killed, adding each completed call's figures to `tally`.
[[noreturn]] void learner_main(const std::string& name, uint64_t seed, LearnerTally* tally) {
  try {
    Buffer buf = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Sampler learner(buf);
    Rng rng(seed);
    SampleBatch batch;
    for (uint64_t call = 0;; ++call) {
      uint64_t rows = 0;
      std::string first;
      tally->in_sample.store(1, std::memory_order_relaxed);  // whether a kill lands inside a call (a figure only)
      const uint64_t violations = sample_and_check(learner, rng, batch, call, &rows, &first);
      tally->in_sample.store(0, std::memory_order_relaxed);
      tally->rows.fetch_add(rows, std::memory_order_relaxed);
      tally->calls.fetch_add(1, std::memory_order_relaxed);
      if (violations > 0) {
        tally->violations.fetch_add(violations, std::memory_order_relaxed);
        // exchange pairs with the parent's read of `first` after every child is reaped (waitpid orders it too)
        if (tally->first_taken.exchange(1, std::memory_order_acq_rel) == 0) {
          std::snprintf(tally->first, sizeof tally->first, "%s", first.c_str());
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "learner %d: %s\n", static_cast<int>(::getpid()), e.what());
  }
  ::_exit(3);  // only reached when the learner failed: the parent reports an exit instead of a kill
}

TEST_CASE(kLearnerTortureName) {
  const auto start = Clock::now();
  const uint64_t num_envs = 12;
  const uint64_t capacity = 64;
  const std::size_t num_writers = 3;
  SegmentGuard guard(unique_name("ltorture"));
  std::vector<std::vector<uint64_t>> slices(num_writers);
  for (uint64_t e = 0; e < num_envs; ++e) slices[e % num_writers].push_back(e);
  void* mem = ::mmap(nullptr, sizeof(LearnerTally), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  auto* tally = new (mem) LearnerTally;
  const std::unique_ptr<void, std::function<void(void*)>> unmap(mem, [](void* m) { ::munmap(m, sizeof(LearnerTally)); });

  uint64_t writer_kills = 0, learner_kills = 0, kills_in_sample = 0, takeovers = 0, retries = 0;
  uint64_t holder_kills = 0;  // learner kills of a process that held the lease (one killed while it attached did not)
  double ran_s = 0;
  {
    Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kPayloadSchema);
    std::vector<pid_t> writers(num_writers);
    uint64_t seed = 1;
    for (std::size_t w = 0; w < num_writers; ++w) {
      writers[w] = spawn([&, w, s = seed++] { writer_main(guard.name(), slices[w], s, false); });
    }
    pid_t learner = spawn([&, s = seed++] { learner_main(guard.name(), s, tally); });
    Rng rng(11);
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_seconds(2.0)));
    const bool soak = run_seconds(2.0) >= 60;
    auto next_report = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline || learner_kills == 0 || writer_kills == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 120));
      if (rng() % 2 == 0) {
        kills_in_sample += tally->in_sample.load(std::memory_order_relaxed);
        CHECK_MESSAGE(kill_and_reap(learner), "a learner process exited on its own (see its stderr)");
        ++learner_kills;
        holder_kills += layout::owner_pid(buf.segment().global_control().learner_lease.load()) == static_cast<uint64_t>(learner);
        learner = spawn([&, s = seed++] { learner_main(guard.name(), s, tally); });
      } else {
        const std::size_t w = rng() % num_writers;
        CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
        ++writer_kills;
        writers[w] = spawn([&, w, s = seed++] { writer_main(guard.name(), slices[w], s, false); });
      }
      if (soak && Clock::now() >= next_report) {
        next_report += std::chrono::seconds(60);
        std::fprintf(stderr, "learner soak %.0f s: %llu learner kills, %llu writer kills, %llu rows checked, %llu "
                     "violations\n", std::chrono::duration<double>(Clock::now() - start).count(),
                     static_cast<unsigned long long>(learner_kills), static_cast<unsigned long long>(writer_kills),
                     static_cast<unsigned long long>(tally->rows.load()),
                     static_cast<unsigned long long>(tally->violations.load()));
      }
    }
    ran_s = std::chrono::duration<double>(Clock::now() - start).count();
    CHECK(kill_and_reap(learner));
    ++learner_kills;
    holder_kills += layout::owner_pid(buf.segment().global_control().learner_lease.load()) == static_cast<uint64_t>(learner);
    for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
    std::string bad;
    CHECK_MESSAGE(verify_ring(buf, &bad) == 0, bad);
    // A last learner here: it takes the last child's lease over and samples sound rows from what is left.
    Sampler last(buf);
    takeovers = buf.segment().global_control().learner_takeovers.load();
    retries = buf.segment().global_control().retries.load();
    Rng mine(99);
    SampleBatch batch;
    uint64_t rows = 0, violations = 0;
    std::string first;
    for (uint64_t call = 0; call < 50; ++call) violations += sample_and_check(last, mine, batch, call, &rows, &first);
    CHECK_MESSAGE(violations == 0, first);
  }
  MESSAGE(fmt::format("{} learner kills ({} inside a sample call, {} of a lease holder), {} writer kills: {} sample "
                      "calls completed, {} rows checked, {} retries, {} violations, {} learner takeovers; the learner "
                      "torture ran for {:.3f} s",
                      learner_kills, kills_in_sample, holder_kills, writer_kills, tally->calls.load(),
                      tally->rows.load(), retries, tally->violations.load(), takeovers, ran_s));
  CHECK_MESSAGE(tally->violations.load() == 0, std::string(tally->first));
  CHECK(tally->rows.load() > 0);
  // Every dead lease holder was taken over exactly once, by the next learner to attach (or by `last`). A learner
  // killed while it attached, before its compare-and-swap took the lease, held nothing to take over.
  CHECK(takeovers == holder_kills);
}

TEST_CASE("a writer killed inside a half-filled reservation: its step is never sampled, and a replacement takes the "
          "lease over and continues the stream at the old head") {
  const uint64_t capacity = 16;
  const uint64_t env = 1;
  const uint64_t pushed = capacity + 5;  // wrapped: the reserved slot still holds step pushed - capacity
  SegmentGuard guard(unique_name("killreserve"));
  Buffer buf = Buffer::create(guard.name(), 2, capacity, kPayloadSchema);
  {
    Writer other(buf, {0});  // env 0 has a few steps of its own, untouched by the kill
    PayloadPusher pusher;
    for (int i = 0; i < 3; ++i) pusher.push(other, {0});
  }
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = spawn([&] {
    child_body([&] {
      ::close(ready[0]);
      Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
      Writer w(b, {env});
      PayloadPusher pusher;
      for (uint64_t i = 0; i < pushed; ++i) pusher.push(w, {static_cast<int32_t>(env)});
      StepSlot slot = w.reserve(env);
      fill_slot(slot, 1);  // the header of step `pushed`; its body and tail are still step pushed - capacity's
      const char c = 'r';
      if (::write(ready[1], &c, 1) != 1) ::_exit(5);
      for (;;) ::pause();
    });
  });
  ::close(ready[1]);
  char c = 0;
  const ssize_t got = ::read(ready[0], &c, 1);
  ::close(ready[0]);
  if (got != 1) {
    FAIL("the writer process failed before its reservation (see its stderr); exit " << reap(child));
  }
  REQUIRE(kill_and_reap(child));

  // Killed between the claim and the head store: the slot is half-written and out of every view.
  const layout::EnvControl& ctl = buf.segment().env_control(env);
  CHECK(ctl.head.load() == pushed);
  CHECK((ctl.claimed.load() & ~layout::kUpdateLockBit) == pushed + 1);
  const std::string slot_bytes = stored_step(buf, env, pushed);
  CHECK(slot_bytes.substr(0, 32) == payload_bytes(env, pushed).substr(0, 32));
  CHECK(slot_bytes.substr(32) == payload_bytes(env, pushed - capacity).substr(32));
  CHECK(check_env_payloads(buf, env) == "");
  CHECK(check_env_payloads(buf, 0) == "");

  Sampler learner(buf);
  CHECK(learner.sizes(env).head == pushed);
  CHECK(learner.sizes(env).replay == capacity - 1);  // step pushed - capacity's slot is being reclaimed
  CHECK(learner.sizes(0).replay == 3);
  SampleBatch newest;
  const uint64_t ids[1] = {env};
  learner.peek(ids, newest);
  CHECK(newest.start_steps()[0] == pushed - 1);
  CHECK(check_row(newest, 0, pushed, pushed) == "");
  // Every committed step in the view is sampled, intact, and nothing else ever is (the half-written step included).
  Rng rng(17);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  CHECK(sample_quietly(learner, rng, 200, &seen) == "");
  CHECK(seen == replay_view(learner));
  CHECK(seen.count({env, pushed}) == 0);

  // A replacement takes the dead writer's lease over and rewrites step `pushed` in full.
  Writer replacement(buf, {env});
  CHECK(replacement.takeovers() == 1);
  CHECK(layout::owner_pid(ctl.lease.load()) == static_cast<uint64_t>(::getpid()));
  CHECK(replacement.head(env) == pushed);
  PayloadPusher pusher;
  pusher.push(replacement, {static_cast<int32_t>(env)});
  CHECK(ctl.head.load() == pushed + 1);
  CHECK((ctl.claimed.load() & ~layout::kUpdateLockBit) == pushed + 1);
  CHECK(stored_step(buf, env, pushed) == payload_bytes(env, pushed));
  CHECK(learner.sizes(env).replay == capacity);
  for (uint64_t i = 0; i < capacity / 2; ++i) pusher.push(replacement, {static_cast<int32_t>(env)});
  CHECK(ctl.head.load() == pushed + 1 + capacity / 2);
  CHECK(check_env_payloads(buf, env) == "");
  seen.clear();
  CHECK(sample_quietly(learner, rng, 200, &seen) == "");
  CHECK(seen == replay_view(learner));
  CHECK(seen.count({env, pushed}) == 1);
}

TEST_CASE("a writer killed in the middle of a batched push: earlier envs of the batch are published, the env being "
          "copied is never sampled half-written, and a replacement continues every stream") {
  const uint64_t capacity = 8;
  const uint64_t num_envs = 3;
  SegmentGuard guard(unique_name("killpush"));
  Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kPayloadSchema);
  // Pre-kill heads: env 0 has wrapped, env 1 has not, env 2 has exactly filled its ring.
  const uint64_t before[num_envs] = {capacity + 3, 5, capacity};
  int stopped[2];
  REQUIRE(::pipe(stopped) == 0);
  const pid_t child = spawn([&] {
    child_body([&] {
      ::close(stopped[0]);
      Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
      Writer w(b, {0, 1, 2});
      PayloadPusher pusher;
      for (uint64_t e = 0; e < num_envs; ++e) {
        for (uint64_t i = 0; i < before[e]; ++i) pusher.push(w, {static_cast<int32_t>(e)});
      }
      // The batch [2, 0]. The tail array ends 8 bytes into env 0's row, in front of a page with no access: the
      // push publishes env 2, claims env 0, copies its hdr and body, and faults inside the copy of its tail. The
      // SIGSEGV handler tells the parent, which kills this process right there.
      const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
      auto* pages = static_cast<uint8_t*>(::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (pages == MAP_FAILED || ::mprotect(pages + page, page, PROT_NONE) != 0) ::_exit(6);
      uint8_t* tail = pages + page - kTail - 8;
      const Payload p2 = make_payload(2, before[2], 0);
      const Payload p0 = make_payload(0, before[0], 0);
      std::vector<uint64_t> hdr(p2.hdr, p2.hdr + 4);
      hdr.insert(hdr.end(), p0.hdr, p0.hdr + 4);
      std::vector<float> body(p2.body, p2.body + kBody);
      body.insert(body.end(), p0.body, p0.body + kBody);
      std::memcpy(tail, p2.tail, kTail);
      std::memcpy(tail + kTail, p0.tail, 8);
      g_stopped_fd = stopped[1];
      struct sigaction sa {};
      sa.sa_handler = stop_inside_copy;
      ::sigemptyset(&sa.sa_mask);
      if (::sigaction(SIGSEGV, &sa, nullptr) != 0 || ::sigaction(SIGBUS, &sa, nullptr) != 0) ::_exit(7);
      const std::vector<int32_t> ids = {2, 0};
      w.push(ids, {field_bytes(hdr), field_bytes(body), FieldBytes{tail, 2 * kTail}});
      ::_exit(8);  // the copy did not fault: the parent reports it
    });
  });
  ::close(stopped[1]);
  char c = 0;
  const ssize_t got = ::read(stopped[0], &c, 1);
  ::close(stopped[0]);
  if (got != 1) {
    FAIL("the writer process never stopped inside the push; exit " << reap(child));
  }
  REQUIRE(kill_and_reap(child));

  const auto head_of = [&](uint64_t e) { return buf.segment().env_control(e).head.load(); };
  const auto claimed_of = [&](uint64_t e) { return buf.segment().env_control(e).claimed.load() & ~layout::kUpdateLockBit; };
  // Env 2 (first in the batch) was published whole; env 0 was claimed and half-copied; env 1 was not in it.
  CHECK(head_of(2) == before[2] + 1);
  CHECK(claimed_of(2) == before[2] + 1);
  CHECK(stored_step(buf, 2, before[2]) == payload_bytes(2, before[2]));
  CHECK(head_of(0) == before[0]);
  CHECK(claimed_of(0) == before[0] + 1);
  const std::string half = stored_step(buf, 0, before[0]);
  const std::string whole = payload_bytes(0, before[0]);
  CHECK(half.substr(0, 32 + 4 * kBody) == whole.substr(0, 32 + 4 * kBody));  // hdr and body: the new step
  CHECK(half != whole);                                                       // tail: not (all) copied
  CHECK(head_of(1) == before[1]);
  CHECK(claimed_of(1) == before[1]);
  for (uint64_t e = 0; e < num_envs; ++e) CHECK(check_env_payloads(buf, e) == "");

  Sampler learner(buf);
  CHECK(learner.sizes(0).replay == capacity - 1);  // env 0's slot being reclaimed held step before[0] - capacity
  CHECK(learner.sizes(1).replay == before[1]);
  CHECK(learner.sizes(2).replay == capacity);
  Rng rng(23);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  CHECK(sample_quietly(learner, rng, 200, &seen) == "");
  CHECK(seen == replay_view(learner));
  CHECK(seen.count({0, before[0]}) == 0);

  // The replacement takes all three leases over and continues each env at its head.
  Writer replacement(buf, {0, 1, 2});
  CHECK(replacement.takeovers() == 3);
  for (uint64_t e = 0; e < num_envs; ++e) CHECK(replacement.head(e) == head_of(e));
  PayloadPusher pusher;
  pusher.push(replacement, {0, 1, 2});
  CHECK(head_of(0) == before[0] + 1);
  CHECK(stored_step(buf, 0, before[0]) == whole);
  CHECK(head_of(1) == before[1] + 1);
  CHECK(head_of(2) == before[2] + 2);
  for (uint64_t e = 0; e < num_envs; ++e) {
    CHECK(claimed_of(e) == head_of(e));
    CHECK(check_env_payloads(buf, e) == "");
  }
  seen.clear();
  CHECK(sample_quietly(learner, rng, 200, &seen) == "");
  CHECK(seen == replay_view(learner));
  CHECK(seen.count({0, before[0]}) == 1);
}

TEST_CASE("a learner killed mid-sample leaves the writers untouched, and a new learner takes over") {
  SegmentGuard guard(unique_name("learnerkill"));
  Buffer buf = Buffer::create(guard.name(), 4, 32, kPayloadSchema);
  const pid_t writer = spawn([&] { writer_main(guard.name(), {0, 1, 2, 3}, 11, false); });
  const pid_t doomed = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Sampler s(b);
    Rng rng(3);
    SampleBatch batch;
    s.wait(View::replay, 4, 10'000);
    for (;;) s.sample(View::replay, 256, 16, 1.0, rng, batch);
  });
  // Let it sample for a while, then kill it wherever it is.
  const auto until = Clock::now() + std::chrono::milliseconds(300);
  while (Clock::now() < until && buf.segment().global_control().sample_calls.load() < 50) std::this_thread::yield();
  CHECK(buf.segment().global_control().sample_calls.load() > 0);
  CHECK(kill_and_reap(doomed));
  // The writer keeps pushing.
  const uint64_t before = total_heads(buf);
  const auto limit = Clock::now() + std::chrono::seconds(10);
  while (total_heads(buf) < before + 1000 && Clock::now() < limit) std::this_thread::yield();
  CHECK(total_heads(buf) >= before + 1000);
  // A new learner takes the dead one's lease and samples sound rows.
  Sampler learner(buf);
  CHECK(buf.segment().global_control().learner_takeovers.load() == 1);
  CHECK(layout::owner_pid(buf.segment().global_control().learner_lease.load()) == static_cast<uint64_t>(::getpid()));
  Rng rng(5);
  SampleBatch batch;
  uint64_t rows = 0;
  std::string first;
  uint64_t violations = 0;
  for (uint64_t call = 0; call < 200; ++call) violations += sample_and_check(learner, rng, batch, call, &rows, &first);
  CHECK_MESSAGE(violations == 0, first);
  CHECK(kill_and_reap(writer));
}

TEST_CASE("a learner blocked in wait() is woken by a writer in another process") {
  SegmentGuard guard(unique_name("wait"));
  Buffer buf = Buffer::create(guard.name(), 2, 16, kPayloadSchema);
  Sampler learner(buf);
  CHECK(learner.wait(View::replay, 0, 0));  // already true
  std::string msg;
  CHECK(error_of([&] { (void)learner.wait(View::replay, 33, 10); }, &msg) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(msg.find("at most 32") != std::string::npos);

  const uint64_t wakes_before = buf.segment().global_control().wake_seq.load();
  // The writer starts after the learner is asleep, and pushes slowly.
  const pid_t writer = spawn([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    writer_main(guard.name(), {0, 1}, 21, true);
  });
  CHECK(learner.wait(View::online, 20, 30'000));
  CHECK(learner.size(View::online) >= 20);
  CHECK(buf.segment().global_control().wake_seq.load() > wakes_before);  // woken through the futex, not by polling
  CHECK(buf.segment().global_control().waiters.load() == 0);
  CHECK(kill_and_reap(writer));
}

TEST_CASE("the segment's futex word wakes a waiter in another process, and a wait that nobody wakes times out") {
  SegmentGuard guard(unique_name("futex"));
  Buffer buf = Buffer::create(guard.name(), 1, 4, kPayloadSchema);
  std::atomic<uint64_t>& word = buf.segment().global_control().wake_seq;
  const auto seq = static_cast<uint32_t>(word.load());

  // Nobody wakes it: it sleeps the whole timeout (the kernel never shortens one), and no longer than a few
  // seconds more on a busy machine.
  auto t0 = Clock::now();
  detail::futex_wait(word, seq, 200'000'000ull);
  int64_t waited = ms_since(t0);
  CHECK(waited >= 199);
  CHECK(waited < 5'000);
  // A word that already differs from the expected value returns at once.
  t0 = Clock::now();
  detail::futex_wait(word, seq + 1, 10'000'000'000ull);
  CHECK(ms_since(t0) < 2'000);

  // Another process, with its own mapping of the segment (another address), wakes it without changing the word,
  // so the wait can only end by that wake (or its 10 s timeout). The child sleeps 100 ms first, then keeps
  // waking every 20 ms until the parent reports back, in case the parent was not asleep yet.
  int done[2];
  REQUIRE(::pipe(done) == 0);
  t0 = Clock::now();  // before the child exists: its first wake is at least 100 ms later
  const pid_t child = spawn([&] {
    child_body([&] {
      ::close(done[1]);
      Buffer b = Buffer::open(guard.name());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (int i = 0; i < 500; ++i) {
        detail::futex_wake_all(b.segment().global_control().wake_seq);
        pollfd p{done[0], POLLIN, 0};
        if (::poll(&p, 1, 20) != 0) break;
      }
    });
  });
  ::close(done[0]);
  detail::futex_wait(word, seq, 10'000'000'000ull);
  waited = ms_since(t0);
  ::close(done[1]);  // the child's poll sees the hang-up and stops waking
  CHECK(reap(child) == 0);
  MESSAGE(fmt::format("woken by another process after {} ms (the child woke it from 100 ms on)", waited));
  CHECK(waited >= 100);    // it slept until the child's wake, not less
  CHECK(waited < 2'000);   // and was woken, far sooner than the 10 s timeout
  CHECK(static_cast<uint32_t>(word.load()) == seq);
}

TEST_CASE("a push in another process wakes a futex waiter on the wake word directly, without the 50 ms re-check") {
  SegmentGuard guard(unique_name("futexpush"));
  Buffer buf = Buffer::create(guard.name(), 1, 4, kPayloadSchema);
  layout::GlobalControl& g = buf.segment().global_control();
  // Stand in for a learner in wait(): announce a waiter, then sleep on the word for up to 10 s.
  g.waiters.fetch_add(1);
  const auto seq = static_cast<uint32_t>(g.wake_seq.load());
  const auto t0 = Clock::now();
  const pid_t child = spawn([&] {
    child_body([&] {
      Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
      Writer w(b, {0});
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      PayloadPusher pusher;
      pusher.push(w, {0});
    });
  });
  detail::futex_wait(g.wake_seq, seq, 10'000'000'000ull);
  const int64_t waited = ms_since(t0);
  g.waiters.fetch_sub(1);
  CHECK(reap(child) == 0);
  MESSAGE(fmt::format("woken by a push in another process after {} ms", waited));
  CHECK(waited >= 100);
  CHECK(waited < 2'000);
  CHECK(static_cast<uint32_t>(g.wake_seq.load()) != seq);  // the push bumped the word
  CHECK(buf.segment().env_control(0).head.load() == 1);
}

TEST_CASE("a writer that stops cannot hold the learner past its timeout") {
  SegmentGuard guard(unique_name("waitstop"));
  Buffer buf = Buffer::create(guard.name(), 2, 16, kPayloadSchema);
  const pid_t writer = spawn([&] { writer_main(guard.name(), {0, 1}, 31, true); });
  Sampler learner(buf);
  REQUIRE(learner.wait(View::replay, 4, 30'000));
  CHECK(kill_and_reap(writer));  // it stops for good
  learner.reset_online_queue();
  const auto t0 = Clock::now();
  CHECK_FALSE(learner.wait(View::online, 1, 200));
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  CHECK(waited >= 200);
  CHECK(buf.segment().global_control().waiters.load() == 0);
}

TEST_CASE("bad actors get clear errors and leave the buffer intact") {
  SegmentGuard guard(unique_name("badactors"));
  Buffer buf = Buffer::create(guard.name(), 4, 16, kPayloadSchema);
  const pid_t owner = spawn([&] { writer_main(guard.name(), {0, 1}, 41, true); });
  Sampler learner(buf);
  REQUIRE(learner.wait(View::replay, 2, 30'000));
  const std::string name = guard.name();

  SUBCASE("a second process leasing a leased env is refused, naming the owner") {
    CHECK(run_in_child([&] {
            Buffer b = Buffer::open(name);
            std::string msg;
            const int code = error_of([&] { Writer w(b, {2, 1}); }, &msg);
            return code == static_cast<int>(Errc::lease_held) &&
                   msg.find(fmt::format("pid {}", owner)) != std::string::npos &&
                   b.segment().env_control(2).lease.load() == 0;
          }) == 0);
  }
  SUBCASE("a process pushing to an env it does not own is refused and writes nothing") {
    CHECK(run_in_child([&] {
            Buffer b = Buffer::open(name);
            Writer w(b, {3});
            PayloadPusher p;
            const uint64_t head0 = b.segment().env_control(0).head.load();
            const int code = error_of([&] { p.push(w, {3, 0}); });
            return code == static_cast<int>(Errc::not_leased) && b.segment().env_control(3).head.load() == 0 &&
                   b.segment().env_control(0).head.load() >= head0;
          }) == 0);
  }
  SUBCASE("a process attaching with a different schema is refused with every difference") {
    CHECK(run_in_child([&] {
            std::string msg;
            const int code = error_of(
                [&] { Buffer::open(name, {.expected_schema = Schema::parse("hdr:u64[4] body:f32[12] tail:u8[29]")}); },
                &msg);
            return code == static_cast<int>(Errc::schema_mismatch) && msg.find("field 'body'") != std::string::npos;
          }) == 0);
  }
  SUBCASE("a segment removed while attached keeps working for its users; a new open fails clearly") {
    Buffer::remove(name);
    const uint64_t before = total_heads(buf);
    const auto limit = Clock::now() + std::chrono::seconds(10);
    while (total_heads(buf) < before + 10 && Clock::now() < limit) std::this_thread::yield();
    CHECK(total_heads(buf) >= before + 10);  // the writer keeps pushing into its mapping
    Rng rng(1);
    SampleBatch batch;
    uint64_t rows = 0;
    std::string first;
    CHECK(sample_and_check(learner, rng, batch, 0, &rows, &first) == 0);
    std::string msg;
    CHECK(error_of([&] { Buffer::open(name); }, &msg) == static_cast<int>(Errc::not_found));
    CHECK(msg.find(name) != std::string::npos);
  }
  CHECK(kill_and_reap(owner));
  std::string bad;
  CHECK_MESSAGE(verify_ring(buf, &bad) == 0, bad);
}

TEST_CASE("SHMREPLAY_SOAK_SECONDS=N runs the torture for N seconds in total, not a multiple of N") {
  // The torture case itself, in a child test runner with N = 1 (below its CI default of 2 s, and a third of what
  // the old rule, max(2, 3 N), made of it): it reports how long it ran, setup included, up to the end of its loop.
  int out_pipe[2];
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::setenv("SHMREPLAY_SOAK_SECONDS", "1", 1);
    const std::string filter = fmt::format("--test-case={}", kTortureName);
    ::execl("/proc/self/exe", "test_processes", filter.c_str(), "--no-version", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  std::string out;
  char chunk[4096];
  for (ssize_t got; (got = ::read(out_pipe[0], chunk, sizeof chunk)) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    out.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(out_pipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE_MESSAGE(WIFEXITED(status), out);
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, out);
  const std::string marker = "the torture ran for ";
  const std::size_t at = out.find(marker);
  REQUIRE_MESSAGE(at != std::string::npos, out);
  const double ran_s = std::stod(out.substr(at + marker.size()));
  MESSAGE(fmt::format("with SHMREPLAY_SOAK_SECONDS=1 the torture ran for {:.3f} s", ran_s));
  CHECK(ran_s >= 1.0);
  CHECK(ran_s < 1.5);
}
