// Reanalyser::next's blocking wait (docs/design/reanalyse.md, "Waiting for a chunk"): a worker process sleeps on
// the walk's futex word and is woken by a writer that fills a chunk, a completion, a give-back; a dead worker's
// claim is met by its re-scan; a worker killed while it sleeps has its sleeper count taken back. The sleepers run
// with a 30 s re-check period (SHMREPLAY_RECHECK_MS) where a wake-up is what is tested: a wake-up that does not
// come then shows as a timeout (20 s), not as a 50 ms delay.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include "reanalyse/reanalyse_helpers.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

constexpr int64_t kGenerousMs = 20'000;

// Forks a worker process that sleeps in next(sweep) (with a 30 s re-check period when `long_recheck`) and exits 0
// when it was handed chunk `want`, 1 when not (a timeout), 2 on an exception.
pid_t sleeping_worker(const std::string& name, uint64_t want, bool long_recheck, int64_t timeout_ms = kGenerousMs) {
  return spawn([=] {
    if (long_recheck) ::setenv("SHMREPLAY_RECHECK_MS", "30000", 1);
    int code = 2;
    try {
      Buffer b = Buffer::open(name);
      Reanalyser r(b);
      const std::optional<ReanalyseChunk> c = r.next(ReanalyseOrder::sweep, timeout_ms);
      code = c && c->chunk == want ? 0 : 1;
    } catch (...) {
    }
    ::_exit(code);
  });
}

int exit_code(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits (up to 20 s) until `n` workers sleep on the walk's word, then a little longer, so that the sleeper is in
// FUTEX_WAIT rather than between its count and its first scan (the test's point is the wake-up, not the scan).
void until_sleeping(const Buffer& b, uint64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (segment_of(b).walk_control().waiters.load() != n) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

uint64_t wake_seq(const Buffer& b) { return segment_of(b).walk_control().wake_seq.load(); }

}  // namespace

TEST_CASE("a worker process blocked in next is woken by the writer's push that fills a chunk, and by no other push") {
  WalkRig rig("walk_wait_fill", 1, 16, 4);
  Writer w(rig.buf, {0});
  push_steps(w, 0, 3);  // chunk 0 is filling: nothing is due
  const uint64_t before = wake_seq(rig.buf);
  const pid_t worker = sleeping_worker(rig.guard.name(), 0, true);
  until_sleeping(rig.buf, 1);
  CHECK(wake_seq(rig.buf) == before);
  push_steps(w, 0, 1);  // step 3: chunk 0 is full
  CHECK(exit_code(worker) == 0);
  CHECK(wake_seq(rig.buf) == before + 1);
  CHECK(segment_of(rig.buf).walk_control().waiters.load() == 0);
  push_steps(w, 0, 4);  // chunk 1 fills with nobody asleep: no wake-up
  CHECK(wake_seq(rig.buf) == before + 1);
}

TEST_CASE("a worker process blocked in next is woken by another worker's completion (the next pass opens) or "
          "give-back") {
  WalkRig rig("walk_wait_done", 1, 16, 4);
  Writer w(rig.buf, {0});
  push_steps(w, 0, 4);  // one full chunk
  Reanalyser holder(rig.buf);
  const std::optional<ReanalyseChunk> held = holder.try_next(ReanalyseOrder::sweep);
  REQUIRE(held);
  const pid_t worker = sleeping_worker(rig.guard.name(), 0, true);
  until_sleeping(rig.buf, 1);
  SUBCASE("complete") { CHECK(holder.complete(*held, 1)); }
  SUBCASE("give_back") { CHECK(holder.give_back(*held)); }
  CHECK(exit_code(worker) == 0);
}

TEST_CASE("a worker process blocked in next takes a chunk whose holder was SIGKILLed, before its timeout") {
  WalkRig rig("walk_wait_dead", 1, 16, 4);
  Writer w(rig.buf, {0});
  push_steps(w, 0, 4);
  const pid_t victim = spawn([name = rig.guard.name()] {
    Buffer b = Buffer::open(name);
    auto* r = new Reanalyser(b);  // never destroyed: the process is killed holding its chunk
    if (!r->try_next(ReanalyseOrder::sweep)) ::_exit(1);
    for (;;) ::pause();
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (segment_of(rig.buf).walk_env(0).handed.load() != 1) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const pid_t worker = sleeping_worker(rig.guard.name(), 0, false);  // re-scans every 50 ms: meets the dead claim
  until_sleeping(rig.buf, 1);
  CHECK(kill_and_reap(victim));
  CHECK(exit_code(worker) == 0);
  CHECK(segment_of(rig.buf).walk_env(0).rehanded.load() == 1);
}

TEST_CASE("next returns nothing at its timeout when no chunk is due, and leaves no sleeper counted") {
  WalkRig rig("walk_wait_timeout", 1, 16, 4);
  Writer w(rig.buf, {0});
  push_steps(w, 0, 3);
  Reanalyser r(rig.buf);
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(r.next(ReanalyseOrder::sweep, 300));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
  CHECK_FALSE(r.next(ReanalyseOrder::sweep, 0));
  CHECK(segment_of(rig.buf).walk_control().waiters.load() == 0);
  CHECK(segment_of(rig.buf).walk_worker(r.slot()).waiters.load() == 0);
}

TEST_CASE("a worker killed while it sleeps in next has its sleeper count taken back by the worker that takes its "
          "slot") {
  WalkRig rig("walk_wait_killed", 1, 16, 4);
  const pid_t sleeper = sleeping_worker(rig.guard.name(), 0, true, -1);
  until_sleeping(rig.buf, 1);
  CHECK(kill_and_reap(sleeper));
  CHECK(segment_of(rig.buf).walk_control().waiters.load() == 1);  // left raised: every push would wake nobody
  Reanalyser successor(rig.buf);
  CHECK(successor.slot() == 0);
  CHECK(segment_of(rig.buf).walk_control().waiters.load() == 0);
  CHECK(segment_of(rig.buf).walk_worker(0).waiters.load() == 0);
}
