// The layout version's refusals: a segment of an older minor version is refused naming what it lacks, and a field
// table whose storage kind codes are unknown or inconsistent is refused as corrupt. Part of test_layout (pins.cpp
// pins the bytes).
#include <doctest/doctest.h>

#include <bit>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "shmreplay/internal/segment.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/layout.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::layout;

#pragma GCC diagnostic ignored "-Winvalid-offsetof"

namespace {

// Rewrites the segment `name` (file `path`, `bytes`) as layout 1.`minor` and opens it: the open must be refused with
// version_mismatch; returns its message.
std::string open_as_minor(const std::string& name, const std::string& path, std::string bytes, uint32_t minor) {
  std::memcpy(bytes.data() + offsetof(SegmentHeader, layout_minor), &minor, sizeof minor);
  test::write_file(path, bytes);
  std::string m;
  CHECK(test::error_of([&] { (void)Buffer::open(name); }, &m) == static_cast<int>(Errc::version_mismatch));
  return m;
}

}  // namespace

TEST_CASE("layout 1.11: a 1.10 segment is refused, naming the policy section") {
  const std::string name = test::unique_name("layout-1-10");
  test::SegmentGuard guard(name);
  (void)Buffer::create(name, 2, 8, Schema::parse("x:f32[2]"));
  const std::string bytes = test::read_file(guard.path());
  const std::string m = open_as_minor(name, guard.path(), bytes, 10);
  CHECK(test::contains(m, "segment layout 1.10, library 1.11"));
  CHECK(test::contains(m, "the policy section"));
}

TEST_CASE("layout 1.10: a 1.9 segment is refused, naming the storage kinds") {
  const std::string name = test::unique_name("layout-1-9");
  test::SegmentGuard guard(name);
  (void)Buffer::create(name, 2, 8, Schema::parse("x:f32[2]"));
  const std::string bytes = test::read_file(guard.path());
  const std::string m = open_as_minor(name, guard.path(), bytes, 9);
  CHECK(test::contains(m, "segment layout 1.9, library 1.11"));
  CHECK(test::contains(m, "the fields' storage kinds"));
}

TEST_CASE("layout 1.10: a field whose storage kind code is unknown, or not its kind, is refused as corrupt") {
  const std::string name = test::unique_name("layout-kind");
  test::SegmentGuard guard(name);
  (void)Buffer::create(name, 2, 8, Schema::parse("x:f32[2] obs:u8[4,3]:stack=0"));
  const std::string bytes = test::read_file(guard.path());
  SegmentHeader h{};
  std::memcpy(static_cast<void*>(&h), bytes.data(), sizeof h);
  const uint64_t table = h.sections[kSectionFields].offset;
  const auto kind_at = [&](uint64_t field) { return table + field * sizeof(FieldDesc) + offsetof(FieldDesc, storage_kind); };
  uint32_t kind = 0;
  std::memcpy(&kind, bytes.data() + kind_at(1), sizeof kind);
  CHECK(kind == kStorageFrameRing);
  const auto refused = [&](uint64_t field, uint32_t code) {
    std::string poked = bytes;
    std::memcpy(poked.data() + kind_at(field), &code, sizeof code);
    test::write_file(guard.path(), poked);
    std::string m;
    CHECK(test::error_of([&] { (void)Buffer::open(name); }, &m) == static_cast<int>(Errc::corrupt));
    return m;
  };
  CHECK(test::contains(refused(0, 0x1234), "field 1 'x' has storage kind code 0x1234, which this library does not know"));
  CHECK(test::contains(refused(0, kStorageFrameRing), "field 1 'x' (x:f32[2]) is stored as kind frame_ring, expected "
                                                      "plain_ring"));
  CHECK(test::contains(refused(1, kStoragePlainRing), "field 2 'obs' (obs:u8[4,3]:stack=0) is stored as kind plain_ring, "
                                                      "expected frame_ring"));
}

TEST_CASE("layout 1.9: a 1.8 segment is refused, naming the step a learner rewrites") {
  const std::string name = test::unique_name("layout-1-8");
  test::SegmentGuard guard(name);
  (void)Buffer::create(name, 2, 8, Schema::parse("x:f32[2]"));
  const std::string bytes = test::read_file(guard.path());
  const std::string m = open_as_minor(name, guard.path(), bytes, 8);
  CHECK(test::contains(m, "segment layout 1.8, library 1.11"));
  CHECK(test::contains(m, "the step a learner rewrites"));
}

TEST_CASE("layout 1.8: a 1.7 segment is refused naming what it lacks, and a 1.8 segment has ten sections, past what a "
          "1.7 library accepts") {
  const std::string name = test::unique_name("layout-1-7");
  test::SegmentGuard guard(name);
  (void)Buffer::create(name, 2, 8, Schema::parse("x:f32[2]"));
  const std::string bytes = test::read_file(guard.path());
  SegmentHeader h{};
  REQUIRE(bytes.size() >= sizeof h);
  std::memcpy(static_cast<void*>(&h), bytes.data(), sizeof h);
  CHECK(h.num_sections == 16);  // a 1.7 library accepts 9 at most ("num_sections is 16, expected 9 to 9")
  const std::string m = open_as_minor(name, guard.path(), bytes, 7);
  CHECK(test::contains(m, "segment layout 1.7, library 1.11"));
  CHECK(test::contains(m, "(sample ages and the learners' limiter timeouts); recreate the segment"));
}

