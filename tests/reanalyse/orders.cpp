// The reanalyse walk in one process: each order's sequence of chunks, passes, the clip to what is stored, stale
// completions, give_back, a forked worker that dies holding a chunk, and the refusals.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "detail/protocol/walk.hpp"
#include "reanalyse/reanalyse_helpers.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

uint64_t env_counter(const Buffer& b, uint64_t env, std::atomic<uint64_t> layout::WalkEnv::*word) {
  return (segment_of(b).walk_env(env).*word).load();
}

}  // namespace

TEST_CASE("a sweep hands the oldest stored full chunk first, each once per pass, and opens the next pass when all "
          "are done") {
  WalkRig rig("walk_sweep", 2, 16, 4);
  Writer w(rig.buf, {0, 1});
  push_steps(w, 0, 10);  // chunks 0, 1 full; 2 still filling
  push_steps(w, 1, 13);  // chunks 0, 1, 2 full
  Reanalyser r(rig.buf);
  CHECK(r.pass() == 1);
  std::vector<Taken> held;
  std::vector<ReanalyseChunk> chunks;
  while (std::optional<ReanalyseChunk> c = r.try_next(ReanalyseOrder::sweep)) {
    held.push_back({c->env, c->chunk});
    chunks.push_back(*c);
  }
  CHECK(held == std::vector<Taken>{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {1, 2}});
  CHECK(chunks[4].first_step == 8);
  CHECK(chunks[4].end_step == 12);
  CHECK(r.pass() == 1);  // held chunks keep the pass open
  for (const ReanalyseChunk& c : chunks) CHECK(r.complete(c, 1));
  CHECK(take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 2; }) ==
        std::vector<Taken>{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {1, 2}});
  CHECK(r.pass() == 3);  // the last try_next found pass 2 done and opened pass 3 (its chunk was given back)
}

TEST_CASE("oldest_version hands never-reanalysed chunks first, then the lowest recorded target version") {
  WalkRig rig("walk_oldest", 2, 32, 4);
  Writer w(rig.buf, {0, 1});
  push_steps(w, 0, 8);
  push_steps(w, 1, 12);
  Reanalyser r(rig.buf);
  // Pass 1: all never reanalysed, so chunk order; versions 5, 3, 7, 3, 1 in that order.
  const std::vector<uint64_t> versions = {5, 3, 7, 3, 1};
  std::size_t n = 0;
  CHECK(take_all(r, ReanalyseOrder::oldest_version, [&](const ReanalyseChunk&) { return versions[n++]; }) ==
        std::vector<Taken>{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {1, 2}});
  push_steps(w, 0, 4);  // env 0's chunk 2: never reanalysed
  CHECK(take_all(r, ReanalyseOrder::oldest_version, [](const ReanalyseChunk&) { return 9; }) ==
        std::vector<Taken>{{0, 2}, {1, 2}, {1, 0}, {1, 1}, {0, 0}, {0, 1}});
  CHECK(r.newest_version() == std::optional<uint64_t>{9});
}

TEST_CASE("largest_return hands the chunk with the largest reward sum first") {
  WalkRig rig("walk_return", 1, 16, 4);
  Writer w(rig.buf, {0});
  const std::vector<float> per_chunk = {1.0f, 4.0f, -2.0f, 3.0f};  // each step's reward, by chunk
  push_steps(w, 0, 16, [&](uint64_t, uint64_t step) { return per_chunk[step / 4]; });
  Reanalyser r(rig.buf);
  CHECK(take_all(r, ReanalyseOrder::largest_return, [](const ReanalyseChunk&) { return 1; }) ==
        std::vector<Taken>{{0, 1}, {0, 3}, {0, 0}, {0, 2}});
}

TEST_CASE("the walk follows the ring: overwritten chunks are not handed, the oldest is clipped, a completion of a "
          "chunk overwritten meanwhile is refused and counted stale") {
  WalkRig rig("walk_wrap", 1, 16, 4);
  Writer w(rig.buf, {0});
  push_steps(w, 0, 30);  // stored: 14..29; full chunks 3 (clipped to 14), 4, 5, 6; chunk 7 is filling
  Reanalyser r(rig.buf);
  std::optional<ReanalyseChunk> c = r.try_next(ReanalyseOrder::sweep);
  REQUIRE(c);
  CHECK(c->chunk == 3);
  CHECK(c->first_step == 14);
  CHECK(c->end_step == 16);
  push_steps(w, 0, 10);  // stored: 24..39: chunk 3 is gone
  CHECK_FALSE(r.complete(*c, 1));
  CHECK(env_counter(rig.buf, 0, &layout::WalkEnv::stale) == 1);
  CHECK(take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 1; }) ==
        std::vector<Taken>{{0, 6}, {0, 7}, {0, 8}, {0, 9}});
  CHECK(env_counter(rig.buf, 0, &layout::WalkEnv::completed) == 4);
}

TEST_CASE("a chunk given back is due again in the same pass; a second worker is handed another chunk") {
  WalkRig rig("walk_give_back", 1, 16, 4);
  Writer w(rig.buf, {0});
  push_steps(w, 0, 8);
  Reanalyser a(rig.buf);
  Reanalyser b(rig.buf);
  CHECK(a.slot() != b.slot());
  std::optional<ReanalyseChunk> ca = a.try_next(ReanalyseOrder::sweep);
  std::optional<ReanalyseChunk> cb = b.try_next(ReanalyseOrder::sweep);
  REQUIRE(ca);
  REQUIRE(cb);
  CHECK(ca->chunk == 0);
  CHECK(cb->chunk == 1);
  CHECK_FALSE(a.try_next(ReanalyseOrder::sweep));  // both held: nothing due, the pass stays open
  CHECK(a.give_back(*ca));
  CHECK_FALSE(a.give_back(*ca));
  std::optional<ReanalyseChunk> again = b.try_next(ReanalyseOrder::sweep);
  REQUIRE(again);
  CHECK(again->chunk == 0);
  CHECK(again->pass == 1);
}

TEST_CASE("a chunk held by a worker process that died is handed again in the same pass, and counted") {
  WalkRig rig("walk_dead", 1, 16, 4);
  Writer w(rig.buf, {0});
  push_steps(w, 0, 8);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    Buffer b = Buffer::open(rig.guard.name());
    auto* r = new Reanalyser(b);  // never destroyed: the process dies holding its chunk
    ::_exit(r->try_next(ReanalyseOrder::sweep) ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  Reanalyser r(rig.buf);
  CHECK(take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 1; }) ==
        std::vector<Taken>{{0, 0}, {0, 1}});
  CHECK(env_counter(rig.buf, 0, &layout::WalkEnv::rehanded) == 1);
  CHECK(segment_of(rig.buf).walk_control().pass.load() == 1 + 1);
}

TEST_CASE("the walk's refusals: no walk, a chunk longer than the ring, largest_return without a reward field") {
  SegmentGuard g(unique_name("walk_refuse"));
  Buffer plain = Buffer::create(g.name(), 1, 16, Schema::parse("x:f32"));
  CHECK_THROWS_WITH_AS(Reanalyser{plain}, doctest::Contains("it has no walk"), Error);
  SegmentGuard g2(unique_name("walk_refuse2"));
  CHECK_THROWS_WITH_AS(Buffer::create(g2.name(), 1, 16, Schema::parse("x:f32"), {.reanalyse_chunk = 17}),
                       doctest::Contains("reanalyse_chunk is 17, expected 0 (no walk) or 1 to the capacity, 16"),
                       Error);
  Buffer walk = Buffer::create(g2.name(), 1, 16, Schema::parse("x:f32"), {.reanalyse_chunk = 4});
  CHECK(walk.reanalyse_chunk() == 4);
  Reanalyser r(walk);
  CHECK_THROWS_WITH_AS(r.try_next(ReanalyseOrder::largest_return), doctest::Contains("it has no reward field"),
                       Error);
}
