// The reanalyse walk across processes: a writer process wraps three envs' 64-step rings about 60 times while three
// worker processes walk them (two orders) and victim workers are SIGKILLed holding a chunk, during the writes and
// after. No chunk is completed twice in one pass; once the writer has stopped, every stored chunk is completed
// exactly once in each whole pass, the victims' chunks included (handed again, and counted).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "caps/caps_helpers.hpp"
#include "reanalyse/reanalyse_helpers.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

constexpr uint64_t kEnvs = 3;
constexpr uint64_t kCapacity = 64;
constexpr uint64_t kChunk = 4;
constexpr uint64_t kSteps = 4000;  // per env: about 60 laps of the ring
constexpr uint64_t kWorkers = 3;
constexpr uint64_t kMaxRecords = uint64_t{1} << 18;

struct Record {
  uint64_t env, chunk, pass;
};

struct Tally {
  std::atomic<uint64_t> records;
  Record record[kMaxRecords];      // each successful completion, written by its worker
  std::atomic<int64_t> holding;    // the pid of a victim that holds a chunk
  std::atomic<uint64_t> stop;      // the workers return when set
  std::atomic<uint64_t> failures;
};

// Walks in `order` until told to stop, recording each completion.
void worker_loop(const std::string& name, ReanalyseOrder order, Tally* t) {
  Buffer b = Buffer::open(name);
  Reanalyser r(b);
  uint64_t version = 0;
  while (t->stop.load() == 0) {
    const std::optional<ReanalyseChunk> c = r.next(order, 10);
    if (!c) continue;
    std::this_thread::sleep_for(std::chrono::microseconds(20));  // the reanalysis
    if (!r.complete(*c, ++version)) continue;  // overwritten meanwhile
    const uint64_t i = t->records.fetch_add(1);
    if (i < kMaxRecords) t->record[i] = {c->env, c->chunk, c->pass};
  }
}

// Takes a chunk, says so, and waits to be killed holding it.
void victim(const std::string& name, Tally* t) {
  Buffer b = Buffer::open(name);
  auto* r = new Reanalyser(b);  // never destroyed: killed holding its chunk
  if (!r->next(ReanalyseOrder::sweep, 5000)) throw std::runtime_error("the victim got no chunk in 5 s");
  t->holding.store(::getpid());
  for (;;) ::pause();
}

// Spawns a victim, waits until it holds a chunk, kills and reaps it.
void kill_a_victim(const std::string& name, Tally* t) {
  const pid_t pid = spawn([&] { run_child(t, "victim", [&] { victim(name, t); }); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (t->holding.load() != pid && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(t->holding.load() == pid);
  CHECK(kill_and_reap(pid));
  t->holding.store(0);
}

uint64_t sum_env(const Buffer& b, std::atomic<uint64_t> layout::WalkEnv::*word) {
  uint64_t v = 0;
  for (uint64_t e = 0; e < kEnvs; ++e) v += (segment_of(b).walk_env(e).*word).load();
  return v;
}

}  // namespace

TEST_CASE("three walking processes and SIGKILLed victims while a writer wraps the rings: each chunk once per pass, "
          "the victims' chunks handed again") {
  WalkRig rig("walk_processes", kEnvs, kCapacity, kChunk);
  const std::string name = rig.guard.name();
  Tally* t = map_shared_tally<Tally>();
  const pid_t writer = spawn([&] {
    run_child(t, "writer", [&] {
      Buffer b = Buffer::open(name);
      Writer w(b, {0, 1, 2});
      for (uint64_t n = 0; n < kSteps; ++n) {
        for (uint64_t e = 0; e < kEnvs; ++e) push_steps(w, e, 1);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      ::_exit(0);
    });
  });
  std::vector<pid_t> workers;
  for (uint64_t i = 0; i < kWorkers; ++i) {
    const ReanalyseOrder order = i % 2 == 0 ? ReanalyseOrder::oldest_version : ReanalyseOrder::sweep;
    workers.push_back(spawn([&, order] { run_child(t, "worker", [&] { worker_loop(name, order, t); }); }));
  }
  for (int v = 0; v < 4; ++v) {  // during the writes
    kill_a_victim(name, t);
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  int status = 0;
  REQUIRE(::waitpid(writer, &status, 0) == writer);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  const uint64_t rehanded_before = sum_env(rig.buf, &layout::WalkEnv::rehanded);
  layout::WalkControl& control = segment_of(rig.buf).walk_control();
  const uint64_t first_whole = control.pass.load() + 1;  // the first pass that begins after the last write
  for (int v = 0; v < 2; ++v) kill_a_victim(name, t);  // after the writes: their chunks stay stored
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (control.pass.load() < first_whole + 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(control.pass.load() >= first_whole + 3);
  t->stop.store(1);
  for (const pid_t p : workers) {
    REQUIRE(::waitpid(p, &status, 0) == p);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 3));  // run_child's exit after a return
  }
  CHECK(t->failures.load() == 0);
  const uint64_t n = t->records.load();
  REQUIRE(n < kMaxRecords);
  CHECK(n == sum_env(rig.buf, &layout::WalkEnv::completed));
  std::map<std::tuple<uint64_t, uint64_t, uint64_t>, int> seen;
  uint64_t twice = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const Record& r = t->record[i];
    if (++seen[std::make_tuple(r.env, r.chunk, r.pass)] > 1) ++twice;
  }
  CHECK(twice == 0);
  for (uint64_t pass = first_whole; pass < first_whole + 2; ++pass) {
    for (uint64_t env = 0; env < kEnvs; ++env) {
      for (uint64_t k = (kSteps - kCapacity) / kChunk; k < kSteps / kChunk; ++k) {
        const int times = seen[std::make_tuple(env, k, pass)];
        CHECK_MESSAGE(times == 1, "env ", env, " chunk ", k, " pass ", pass);
      }
    }
  }
  const uint64_t rehanded = sum_env(rig.buf, &layout::WalkEnv::rehanded);
  CHECK(rehanded >= rehanded_before + 2);  // the two victims after the writes held stored chunks
  CHECK(rehanded <= 6);
}
