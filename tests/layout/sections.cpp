// The section table (lib/detail/segment/section_table.cpp) as both rules read it: create places every section where
// its row says (size for the counts, alignment, no overlap), and open refuses each section whose size, alignment or
// range is wrong, naming the section as its row does. Part of test_layout.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "detail/segment/section_table.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::layout;
using detail::SectionCounts;
using detail::SectionRow;
using detail::SectionSize;

#pragma GCC diagnostic ignored "-Winvalid-offsetof"

namespace {

// A buffer with every section present: episode fields, priorities, four learner slots, a sample cap (of 1: a
// consuming queue's).
Buffer create_full(const std::string& name) {
  CreateOptions options;
  options.episodes = {.done = "done", .reward = "reward"};
  options.priority_exponent = 0.6;
  options.max_learners = 4;
  options.consuming_queue = true;
  options.reanalyse_chunk = 5;
  return Buffer::create(name, 3, 16, Schema::parse("obs:f32[3] reward:f32 done:bool"), options);
}

SectionCounts counts_of(const SegmentHeader& h) {
  return {h.num_envs, h.capacity, h.num_fields, h.episode_queue_capacity, h.max_learners,
          h.priority_exponent_bits != 0, h.max_times_sampled, h.consuming_queue != 0, h.initial_priority_bits,
          h.sequence_priority_length, h.reanalyse_chunk, h.sections[kSectionCold].bytes != 0};
}

// The cold section cannot go with the others (a cold tier refuses episodes, priorities, a queue, a walk): a buffer
// with it alone, in a directory of its own (removed with the segment by the caller's Buffer::remove).
Buffer create_tiered(const std::string& name) {
  static const test::DirGuard dir("/tmp/" + test::unique_name("sections-cold"));  // removed at exit
  std::filesystem::create_directories(dir.path());
  return Buffer::create(name, 3, 16, Schema::parse("obs:f32[3]"),
                        {.replace = true, .cold_capacity = 8, .cold_dir = dir.path()});
}

// Opens segment `name` rewritten as `bytes`: must be refused as corrupt; returns the message.
std::string refused(const std::string& name, const std::string& path, const std::string& bytes) {
  test::write_file(path, bytes);
  std::string m;
  CHECK(test::error_of([&] { (void)Buffer::open(name); }, &m) == static_cast<int>(Errc::corrupt));
  return m;
}

}  // namespace

TEST_CASE("create places every section of the table at its row's size and alignment, none overlapping") {
  const std::string name = test::unique_name("sections-placed");
  test::SegmentGuard guard(name);
  const Buffer b = create_full(name);
  const SegmentHeader& h = segment_of(b).header();
  const SectionCounts c = counts_of(h);
  CHECK(h.num_sections == kSectionsUsed);
  CHECK(detail::section_rows().size() == kSectionsUsed);
  uint64_t end = sizeof(SegmentHeader);
  for (const SectionRow& row : detail::section_rows()) {  // placement order
    CAPTURE(row.name);
    if (row.id == kSectionCold) continue;  // the tiered buffer's test below
    const SectionDesc sec = h.sections[row.id];
    CHECK(sec.bytes > 0);  // this buffer has every section
    if (row.size == SectionSize::exact) CHECK(sec.bytes == *row.bytes(c));
    if (row.size == SectionSize::at_least) CHECK(sec.bytes >= *row.bytes(c));
    CHECK(sec.offset % row.place_align == 0);
    CHECK(sec.offset % row.align == 0);
    CHECK(sec.offset >= end);
    end = sec.offset + sec.bytes;
  }
  CHECK(end <= h.total_bytes);
  for (std::size_t i = kSectionsUsed; i < kMaxSections; ++i) CHECK(h.sections[i].bytes == 0);
}

TEST_CASE("open refuses each section whose size, alignment or range is wrong, naming the section") {
  const std::string name = test::unique_name("sections-refused");
  test::SegmentGuard guard(name);
  { const Buffer b = create_full(name); }
  const std::string good = test::read_file(guard.path());
  SegmentHeader h{};
  std::memcpy(static_cast<void*>(&h), good.data(), sizeof h);
  for (const SectionRow& row : detail::section_rows()) {
    CAPTURE(row.name);
    if (row.id == kSectionCold) continue;  // the tiered buffer's test below
    const std::size_t at = offsetof(SegmentHeader, sections) + row.id * sizeof(SectionDesc);
    const auto poke = [&](std::size_t offset, uint64_t value) {
      std::string bytes = good;
      std::memcpy(bytes.data() + offset, &value, sizeof value);
      return refused(name, guard.path(), bytes);
    };
    std::string m = poke(at, h.sections[row.id].offset + 1);
    CHECK(test::contains(m, row.name));
    CHECK(test::contains(m, "not aligned"));
    m = poke(at, h.total_bytes - 64);
    CHECK(test::contains(m, row.name));
    if (row.size == SectionSize::placed_by_kinds) continue;
    m = poke(at + sizeof(uint64_t), row.size == SectionSize::at_least ? 64 : h.sections[row.id].bytes + 64);
    CHECK(test::contains(m, std::string(row.name) + " is "));
    CHECK(test::contains(m, "bytes, expected"));
  }
}

TEST_CASE("a tiered buffer's cold section is placed at its row's size, and open refuses it misplaced or resized") {
  const std::string name = test::unique_name("sections-cold");
  test::SegmentGuard guard(name);
  { const Buffer b = create_tiered(name); }
  const std::string good = test::read_file(guard.path());
  SegmentHeader h{};
  std::memcpy(static_cast<void*>(&h), good.data(), sizeof h);
  const SectionRow* row = nullptr;
  for (const SectionRow& r : detail::section_rows()) row = r.id == kSectionCold ? &r : row;
  REQUIRE(row != nullptr);
  const SectionDesc sec = h.sections[kSectionCold];
  CHECK(sec.bytes == *row->bytes(counts_of(h)));
  CHECK(sec.offset % row->align == 0);
  const std::size_t at = offsetof(SegmentHeader, sections) + kSectionCold * sizeof(SectionDesc);
  const auto poke = [&](std::size_t offset, uint64_t value) {
    std::string bytes = good;
    std::memcpy(bytes.data() + offset, &value, sizeof value);
    return refused(name, guard.path(), bytes);
  };
  CHECK(test::contains(poke(at, sec.offset + 1), "not aligned"));
  CHECK(test::contains(poke(at + sizeof(uint64_t), sec.bytes + 64), std::string(row->name) + " is "));
  test::write_file(guard.path(), good);
  Buffer::remove(name);
}
