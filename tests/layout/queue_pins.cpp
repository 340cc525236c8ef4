// Pins the consuming-queue section (layout 1.11; internal/queue_layout.hpp) to the layout version: its blocks, the
// pending claim's bits, and its size for a shape. Part of test_layout (pins.cpp pins the rest).
#include <doctest/doctest.h>

#include <cstddef>

#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/queue_layout.hpp"
#include "shmreplay/internal/segment.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::layout;

#pragma GCC diagnostic ignored "-Winvalid-offsetof"

TEST_CASE("layout 1.11: the consuming-queue section's blocks and a pending claim's bits are pinned") {
  CHECK(sizeof(QueueControl) == 128);
  CHECK(offsetof(QueueControl, tickets) == 0);
  CHECK(offsetof(QueueControl, writer_wake) == 64);
  CHECK(offsetof(QueueControl, writer_recheck_by_ns) == 72);
  CHECK(offsetof(QueueControl, writers_blocked) == 80);
  CHECK(offsetof(QueueControl, writer_timeouts) == 88);
  CHECK(sizeof(QueueLearner) == 64);
  CHECK(offsetof(QueueLearner, call) == 0);
  CHECK(offsetof(QueueLearner, delivered) == 8);
  CHECK(offsetof(QueueLearner, refused) == 16);
  CHECK(offsetof(QueueLearner, waits) == 24);
  CHECK(offsetof(QueueLearner, returned) == 32);
  CHECK(sizeof(QueueEnv) == 64);
  CHECK(offsetof(QueueEnv, frontier) == 0);
  CHECK(offsetof(QueueEnv, blocked_pushes) == 8);
  CHECK(offsetof(QueueEnv, blocked_ns) == 16);
  CHECK(offsetof(QueueEnv, blocked_since_ns) == 24);
  CHECK(offsetof(QueueEnv, timeouts) == 32);
  CHECK(kQueuePending == 0x80);
  CHECK(kQueueClaiming == 1);
  CHECK(cap_word(9, queue_pending(5)) == 0x985);
  CHECK(queue_is_pending(0x985));
  CHECK(queue_pending_slot(0x985) == 5);
  CHECK_FALSE(queue_is_pending(cap_word(9, 1)));
  CHECK(queue_envs_at(3) == 128 + 3 * 64);
  CHECK(queue_tickets_at(3, 2) == 128 + 3 * 64 + 2 * 64);
}

TEST_CASE("the consuming-queue section is there with consuming_queue, with a cap of 1, and absent without") {
  const std::string name = test::unique_name("queue-pins");
  test::SegmentGuard guard(name);
  {
    const Buffer b = Buffer::create(name, 3, 10, Schema::parse("x:u8"), {.max_learners = 2, .consuming_queue = true});
    const SegmentHeader& h = segment_of(b).header();
    CHECK(h.consuming_queue == 1);
    CHECK(h.max_times_sampled == 1);
    CHECK(h.sections[kSectionQueue].bytes == 128 + 2 * 64 + 3 * 64 + 3 * 10 * 8);
    CHECK(h.sections[kSectionQueue].offset % 64 == 0);
  }
  const Buffer b = Buffer::create(name, 3, 10, Schema::parse("x:u8"), {.replace = true, .max_times_sampled = 1});
  CHECK(segment_of(b).header().consuming_queue == 0);
  CHECK(segment_of(b).header().sections[kSectionQueue].bytes == 0);
}
