// The walk's per-env counters balance (docs/design/reanalyse.md, "Progress"): walk_handed counts hand-outs, so a
// chunk given back and handed again counts twice, and every hand-out ends as exactly one of completed, stale,
// given back, rehanded, or is still held.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <optional>

#include "reanalyse/reanalyse_helpers.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

struct Counts {
  uint64_t handed, completed, stale, given_back, rehanded;
};

Counts counts(const Buffer& b, uint64_t env) {
  const layout::WalkEnv& e = segment_of(b).walk_env(env);
  return {e.handed.load(), e.completed.load(), e.stale.load(), e.given_back.load(), e.rehanded.load()};
}

// Chunk slots of `env` some worker holds now.
uint64_t held(const Buffer& b, uint64_t env) {
  const Segment& seg = segment_of(b);
  uint64_t n = 0;
  for (uint64_t i = 0; i < seg.walk_slots(); ++i) {
    if (layout::walk_claim_holder(seg.walk_chunks(env)[i].claim.load()) != 0) ++n;
  }
  return n;
}

void check_balance(const Buffer& b, uint64_t env) {
  const Counts c = counts(b, env);
  CHECK(c.handed == c.completed + c.stale + c.given_back + c.rehanded + held(b, env));
}

}  // namespace

TEST_CASE("walk_handed counts hand-outs: a chunk given back and handed again counts twice, and handed balances "
          "completed + stale + given back + rehanded + held") {
  WalkRig rig("walk_counts", 1, 16, 4);
  Writer w(rig.buf, {0});
  push_steps(w, 0, 8);  // chunks 0 and 1
  Reanalyser r(rig.buf);
  std::optional<ReanalyseChunk> c = r.try_next(ReanalyseOrder::sweep);
  REQUIRE(c);
  REQUIRE(r.give_back(*c));
  c = r.try_next(ReanalyseOrder::sweep);  // chunk 0 again
  REQUIRE(c);
  CHECK(c->chunk == 0);
  CHECK(counts(rig.buf, 0).handed == 2);
  CHECK(counts(rig.buf, 0).given_back == 1);
  check_balance(rig.buf, 0);
  REQUIRE(r.complete(*c, 1));
  check_balance(rig.buf, 0);
  c = r.try_next(ReanalyseOrder::sweep);  // chunk 1, then overwritten before its completion: stale
  REQUIRE(c);
  push_steps(w, 0, 16);  // stored 8..23
  CHECK_FALSE(r.complete(*c, 1));
  CHECK(counts(rig.buf, 0).stale == 1);
  check_balance(rig.buf, 0);
  {
    Reanalyser closing(rig.buf);  // closed holding a chunk: given back
    REQUIRE(closing.try_next(ReanalyseOrder::sweep));
    check_balance(rig.buf, 0);
  }
  CHECK(counts(rig.buf, 0).given_back == 2);
  check_balance(rig.buf, 0);
  const int code = run_in_child([&] {  // a worker that dies holding a chunk: rehanded when met
    Buffer b = Buffer::open(rig.guard.name());
    auto* dying = new Reanalyser(b);  // never destroyed
    if (!dying->try_next(ReanalyseOrder::sweep)) return false;
    ::_exit(0);
  });
  REQUIRE(code == 0);
  check_balance(rig.buf, 0);  // still held by the dead worker
  (void)take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 2; });  // meets the dead claim
  const Counts end = counts(rig.buf, 0);
  CHECK(end.rehanded == 1);
  CHECK(held(rig.buf, 0) == 0);
  CHECK(end.handed == end.completed + end.stale + end.given_back + end.rehanded);
}
