// The contract under fire, with real processes: writer processes push self-checking steps at uneven rates while
// the learner (this process) samples and checks every row; writers are SIGKILLed at random moments (inside a
// push, inside a reserved-but-uncommitted step) and replaced; a learner is killed mid-sample and replaced; the
// segment outlives everyone. Also blocking waits across processes and a matrix of bad actors.
//
// CI runs the torture case for about two seconds; SHMREPLAY_SOAK_SECONDS=N runs it for N seconds.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
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
    const layout::EnvControl& c = buf.env_control(e);
    const uint64_t head = c.head.load();
    const uint64_t claimed = c.claimed.load() & ~layout::kUpdateLockBit;
    for (uint64_t s = claimed > cap ? claimed - cap : 0; s < head; ++s) {
      const uint64_t slot = e * cap + s % cap;
      uint64_t hdr[4];
      float body[kBody];
      uint8_t tail[kTail];
      std::memcpy(hdr, buf.field_data(0) + slot * sizeof hdr, sizeof hdr);
      std::memcpy(body, buf.field_data(1) + slot * sizeof body, sizeof body);
      std::memcpy(tail, buf.field_data(2) + slot * sizeof tail, sizeof tail);
      if (hdr[0] != e || hdr[1] != s || hdr[3] != checksum(hdr, body, tail)) {
        if (bad++ == 0 && first_bad) *first_bad = fmt::format("env {} step {}: header {} {}", e, s, hdr[0], hdr[1]);
      }
    }
  }
  return bad;
}

uint64_t total_heads(const Buffer& buf) {
  uint64_t n = 0;
  for (uint64_t e = 0; e < buf.num_envs(); ++e) n += buf.env_control(e).head.load();
  return n;
}

// Samples every way the learner can and checks every row; returns violations, adds rows checked to `rows`.
uint64_t sample_and_check(Sampler& learner, Rng& rng, SampleBatch& batch, uint64_t call, uint64_t* rows,
                          std::string* first) {
  const Buffer& buf = learner.buffer();
  const std::size_t L = 1 + static_cast<std::size_t>(rng() % buf.capacity());
  const double power = static_cast<double>(rng() % 3);
  const int kind = static_cast<int>(call % 5);
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
    const std::string v = check_row(batch, row, learner.sizes(batch.env_ids()[row]).head);
    if (!v.empty() && violations++ == 0 && first->empty()) *first = v;
  }
  if (call % 7 == 0) learner.reset_online_queue();
  return violations;
}

}  // namespace

TEST_CASE("writer processes killed at random moments lose nothing published and never expose a torn step") {
  const uint64_t num_envs = 12;
  const uint64_t capacity = 64;
  const std::size_t num_writers = 3;
  SegmentGuard guard(unique_name("torture"));
  std::vector<std::vector<uint64_t>> slices(num_writers);
  for (uint64_t e = 0; e < num_envs; ++e) slices[e % num_writers].push_back(e);

  uint64_t rows = 0, calls = 0, violations = 0, kills = 0, retries = 0, pushes = 0;
  std::string first;
  {
    Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kPayloadSchema);
    std::vector<pid_t> writers(num_writers);
    uint64_t seed = 1;
    for (std::size_t w = 0; w < num_writers; ++w) {
      writers[w] = spawn([&, w, s = seed++] { writer_main(guard.name(), slices[w], s, false); });
    }
    Sampler learner(buf);
    REQUIRE(learner.wait(View::replay, num_envs, 10'000));
    Rng rng(7);
    SampleBatch batch;
    std::vector<uint64_t> floor(num_envs, 0);  // heads seen after each kill: published steps never go away
    const auto deadline = Clock::now() + std::chrono::duration<double>(std::max(2.0, 3 * run_seconds()));
    auto next_kill = Clock::now() + std::chrono::milliseconds(50);
    while (Clock::now() < deadline) {
      violations += sample_and_check(learner, rng, batch, calls++, &rows, &first);
      for (uint64_t e = 0; e < num_envs; ++e) {
        if (buf.env_control(e).head.load() < floor[e]) {
          if (violations++ == 0 && first.empty()) first = fmt::format("env {}'s head went backwards", e);
        }
      }
      if (Clock::now() >= next_kill) {
        const std::size_t w = rng() % num_writers;
        CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
        ++kills;
        for (const uint64_t e : slices[w]) floor[e] = buf.env_control(e).head.load();
        // The dead writer's envs show as dead in the inspector until the replacement takes them over.
        const SegmentInfo info = Inspector(guard.name()).snapshot();
        for (const uint64_t e : slices[w]) {
          CHECK(info.envs[e].owner == OwnerState::dead);
          CHECK(info.envs[e].owner_pid == static_cast<uint64_t>(writers[w]));
        }
        writers[w] = spawn([&, w, s = seed++] { writer_main(guard.name(), slices[w], s, false); });
        next_kill = Clock::now() + std::chrono::milliseconds(20 + rng() % 120);
      }
    }
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
    for (uint64_t e = 0; e < num_envs; ++e) CHECK(buf.env_control(e).head.load() >= floor[e]);
    std::string bad;
    CHECK_MESSAGE(verify_ring(buf, &bad) == 0, bad);
    CHECK(buf.global_control().learner_takeovers.load() == 0);
  }
  MESSAGE(fmt::format("{} writer processes, {} kills: {} pushes, {} sample calls, {} rows checked, {} retries, {} "
                      "violations",
                      num_writers, kills, pushes, calls, rows, retries, violations));
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
  while (Clock::now() < until && buf.global_control().sample_calls.load() < 50) std::this_thread::yield();
  CHECK(buf.global_control().sample_calls.load() > 0);
  CHECK(kill_and_reap(doomed));
  // The writer keeps pushing.
  const uint64_t before = total_heads(buf);
  const auto limit = Clock::now() + std::chrono::seconds(10);
  while (total_heads(buf) < before + 1000 && Clock::now() < limit) std::this_thread::yield();
  CHECK(total_heads(buf) >= before + 1000);
  // A new learner takes the dead one's lease and samples sound rows.
  Sampler learner(buf);
  CHECK(buf.global_control().learner_takeovers.load() == 1);
  CHECK(layout::owner_pid(buf.global_control().learner_lease.load()) == static_cast<uint64_t>(::getpid()));
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

  const uint64_t wakes_before = buf.global_control().wake_seq.load();
  // The writer starts after the learner is asleep, and pushes slowly.
  const pid_t writer = spawn([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    writer_main(guard.name(), {0, 1}, 21, true);
  });
  CHECK(learner.wait(View::online, 20, 30'000));
  CHECK(learner.size(View::online) >= 20);
  CHECK(buf.global_control().wake_seq.load() > wakes_before);  // woken through the futex, not by polling
  CHECK(buf.global_control().waiters.load() == 0);
  CHECK(kill_and_reap(writer));
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
  CHECK(buf.global_control().waiters.load() == 0);
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
                   b.env_control(2).lease.load() == 0;
          }) == 0);
  }
  SUBCASE("a process pushing to an env it does not own is refused and writes nothing") {
    CHECK(run_in_child([&] {
            Buffer b = Buffer::open(name);
            Writer w(b, {3});
            PayloadPusher p;
            const uint64_t head0 = b.env_control(0).head.load();
            const int code = error_of([&] { p.push(w, {3, 0}); });
            return code == static_cast<int>(Errc::not_leased) && b.env_control(3).head.load() == 0 &&
                   b.env_control(0).head.load() >= head0;
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
