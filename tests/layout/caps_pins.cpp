// Pins the sample-caps section (layout 1.11; internal/caps_layout.hpp) to the layout version: its learner block, the
// count words' packing, and its size for a shape. Part of test_layout (pins.cpp pins the rest).
#include <doctest/doctest.h>

#include <cstddef>

#include "detail/segment/section_table.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/segment.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::layout;

#pragma GCC diagnostic ignored "-Winvalid-offsetof"

TEST_CASE("layout 1.11: the sample-caps section's learner block and count words are pinned") {
  CHECK(sizeof(CapLearner) == 64);
  CHECK(offsetof(CapLearner, rejected) == 0);
  CHECK(offsetof(CapLearner, retired) == 8);
  CHECK(offsetof(CapLearner, claimed) == 16);
  CHECK(kMaxTimesSampled == 255);
  CHECK(kCapCountBits == 8);
  CHECK(cap_word(0x123, 7) == 0x12307);
  CHECK(cap_word_tag(0x12307) == 0x123);
  CHECK(cap_word_count(0x12307) == 7);
  CHECK(cap_word_for(cap_word(uint64_t{1} << 57 | 5, 0), 5));  // a tag keeps the step's low 56 bits
  CHECK_FALSE(cap_word_for(cap_word(5, 0), 5 + 64));
  CHECK(cap_words_at(3) == 3 * 64);
}

TEST_CASE("the sample-caps section is 64 bytes per learner slot and 8 per ring slot with a cap, and absent without") {
  const std::string name = test::unique_name("caps-pins");
  test::SegmentGuard guard(name);
  {
    const Buffer b = Buffer::create(name, 3, 10, Schema::parse("x:u8"), {.max_learners = 2, .max_times_sampled = 4});
    const SegmentHeader& h = segment_of(b).header();
    CHECK(h.max_times_sampled == 4);
    CHECK(h.sections[kSectionSampleCaps].bytes == 2 * 64 + 3 * 10 * 8);
    CHECK(h.sections[kSectionSampleCaps].offset % 64 == 0);
  }
  const Buffer b = Buffer::create(name, 3, 10, Schema::parse("x:u8"), {.replace = true});
  CHECK(segment_of(b).header().max_times_sampled == 0);
  CHECK(segment_of(b).header().sections[kSectionSampleCaps].bytes == 0);
  CHECK(segment_of(b).header().sections[kSectionSampleCaps].offset == 0);
}
