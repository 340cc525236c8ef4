// Pins the journal section (layout 1.11; internal/journal_layout.hpp) to the layout version: its control block and
// its size for a shape. Part of test_layout (pins.cpp pins the rest).
#include <doctest/doctest.h>

#include <cstddef>

#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/journal_layout.hpp"
#include "shmreplay/internal/segment.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::layout;

#pragma GCC diagnostic ignored "-Winvalid-offsetof"

TEST_CASE("layout 1.11: the journal section's control block is pinned") {
  CHECK(sizeof(JournalControl) == 128);
  CHECK(offsetof(JournalControl, lease) == 0);
  CHECK(offsetof(JournalControl, start_ticks) == 8);
  CHECK(offsetof(JournalControl, since_ns) == 16);
  CHECK(offsetof(JournalControl, takeovers) == 24);
  CHECK(offsetof(JournalControl, bound_ns) == 32);
  CHECK(offsetof(JournalControl, links) == 40);
  CHECK(offsetof(JournalControl, failures) == 48);
  CHECK(offsetof(JournalControl, bound_misses) == 56);
  CHECK(offsetof(JournalControl, link_seq) == 64);
  CHECK(offsetof(JournalControl, durable_ns) == 72);
  CHECK(offsetof(JournalControl, done_ns) == 80);
  CHECK(offsetof(JournalControl, link_ns) == 88);
  CHECK(offsetof(JournalControl, max_lag_ns) == 96);
  CHECK(journal_heads_at() == 128);
}

TEST_CASE("every buffer has the journal section: its control block and a durable head per env, zero when created") {
  const std::string name = test::unique_name("journal-pins");
  test::SegmentGuard guard(name);
  const Buffer b = Buffer::create(name, 3, 10, Schema::parse("x:u8"));
  const SegmentHeader& h = segment_of(b).header();
  CHECK(h.sections[kSectionJournal].bytes == 128 + 3 * 8);
  CHECK(h.sections[kSectionJournal].offset % 64 == 0);
  CHECK(h.sections[kSectionCold].bytes == 0);  // no cold tier: the journal section is there all the same
  CHECK(segment_of(b).journal_control().link_seq.load() == 0);
  CHECK(segment_of(b).journal_control().lease.load() == 0);
  for (uint64_t e = 0; e < 3; ++e) CHECK(segment_of(b).journal_head(e).load() == 0);
}
