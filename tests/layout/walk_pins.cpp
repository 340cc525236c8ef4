// Pins the reanalyse-walk section (layout 1.11; internal/walk_layout.hpp) to the layout version: its blocks, the
// claim and done words' bits, and its size for a shape. Part of test_layout (pins.cpp pins the rest).
#include <doctest/doctest.h>

#include <cstddef>

#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/internal/walk_layout.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::layout;

#pragma GCC diagnostic ignored "-Winvalid-offsetof"

TEST_CASE("layout 1.11: the reanalyse-walk section's blocks and its claim and done words' bits are pinned") {
  CHECK(sizeof(WalkControl) == 64);
  CHECK(offsetof(WalkControl, pass) == 0);
  CHECK(offsetof(WalkControl, newest_version) == 8);
  CHECK(offsetof(WalkControl, repairs) == 16);
  CHECK(offsetof(WalkControl, wake_seq) == 24);
  CHECK(offsetof(WalkControl, waiters) == 32);
  CHECK(sizeof(WalkWorker) == 64);
  CHECK(offsetof(WalkWorker, lease) == 0);
  CHECK(offsetof(WalkWorker, start_ticks) == 8);
  CHECK(offsetof(WalkWorker, since_ns) == 16);
  CHECK(offsetof(WalkWorker, takeovers) == 24);
  CHECK(offsetof(WalkWorker, handed) == 32);
  CHECK(offsetof(WalkWorker, completed) == 40);
  CHECK(offsetof(WalkWorker, waiters) == 48);
  CHECK(sizeof(WalkEnv) == 64);
  CHECK(offsetof(WalkEnv, handed) == 0);
  CHECK(offsetof(WalkEnv, completed) == 8);
  CHECK(offsetof(WalkEnv, rehanded) == 16);
  CHECK(offsetof(WalkEnv, stale) == 24);
  CHECK(offsetof(WalkEnv, given_back) == 32);
  CHECK(sizeof(WalkChunk) == 32);
  CHECK(offsetof(WalkChunk, claim) == 0);
  CHECK(offsetof(WalkChunk, done) == 8);
  CHECK(offsetof(WalkChunk, version) == 16);
  CHECK(kMaxWalkers == 64);
  CHECK(walk_claim(9, 5) == 0x905);
  CHECK(walk_done(3, 7) == 0x300000007);
  CHECK(walk_slots_per_env(10, 4) == 4);
  CHECK(walk_slots_per_env(16, 4) == 5);
  CHECK(walk_chunks_at(2) == 64 + 64 * 64 + 2 * 64);
}

TEST_CASE("the reanalyse-walk section is there with reanalyse_chunk, and absent without") {
  const std::string name = test::unique_name("walk-pins");
  test::SegmentGuard guard(name);
  {
    const Buffer b = Buffer::create(name, 3, 10, Schema::parse("x:u8"), {.reanalyse_chunk = 4});
    const SegmentHeader& h = segment_of(b).header();
    CHECK(h.reanalyse_chunk == 4);
    CHECK(h.sections[kSectionWalk].bytes == 64 + 64 * 64 + 3 * 64 + 3 * 4 * 32);
    CHECK(h.sections[kSectionWalk].offset % 64 == 0);
    CHECK(segment_of(b).walk_control().pass.load() == 1);
  }
  const Buffer b = Buffer::create(name, 3, 10, Schema::parse("x:u8"), {.replace = true});
  CHECK(segment_of(b).header().reanalyse_chunk == 0);
  CHECK(segment_of(b).header().sections[kSectionWalk].bytes == 0);
}
