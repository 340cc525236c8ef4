// The cold tier's files and options (layout 1.11): what create makes, what open checks, what remove removes, and
// the options the first slice refuses. Part of test_cold.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "cold/cold_helpers.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/cold_layout.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/sampler.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

TEST_CASE("create makes one cold file per env with the segment's mode, and remove takes them with the segment") {
  const ColdDir dir("files");
  const std::string name = unique_name("cold-files");
  SegmentGuard guard(name);
  {
    const Buffer b = Buffer::create(name, 3, 8, kPayloadSchema,
                                    {.mode = 0640, .cold_capacity = 20, .cold_dir = dir.path()});
    CHECK(b.cold_capacity() == 20);
    const Segment& seg = segment_of(b);
    CHECK(seg.header().sections[layout::kSectionCold].bytes == 512 + 3 * 64);
    CHECK(seg.cold_control().cold_capacity == 20);
    CHECK(seg.cold_control().record_bytes == kPayloadSchema.step_bytes());
    for (int e = 0; e < 3; ++e) {
      const std::string file = dir.of(name) + "/env-" + std::to_string(e);
      REQUIRE(std::filesystem::exists(file));
      CHECK(file_mode(file) == 0640);
      CHECK(std::filesystem::file_size(file) == layout::kColdRecordsOffset + 20 * kPayloadSchema.step_bytes());
    }
    const Buffer again = Buffer::open(name);  // open accepts and maps them
    CHECK(again.cold_capacity() == 20);
  }
  Buffer::remove(name);
  CHECK(!std::filesystem::exists(dir.of(name)));
  CHECK(!Buffer::exists(name));
}

TEST_CASE("a buffer without a cold tier has no cold section") {
  const std::string name = unique_name("cold-none");
  SegmentGuard guard(name);
  const Buffer b = Buffer::create(name, 2, 8, kPayloadSchema);
  CHECK(b.cold_capacity() == 0);
  CHECK(segment_of(b).header().sections[layout::kSectionCold].bytes == 0);
}

TEST_CASE("open refuses a cold file that belongs to another segment of the same name") {
  const ColdDir dir("foreign");
  const std::string name = unique_name("cold-foreign");
  SegmentGuard guard(name);
  { (void)make_tiered(name, dir, 1, 8, 16); }
  const std::string file = dir.of(name) + "/env-0";
  const std::string saved = read_file(file);
  { (void)make_tiered(name, dir, 1, 8, 16, /*replace=*/true); }  // a new segment, new files
  write_file(file, saved);                                        // the old segment's file put back
  std::string message;
  CHECK(error_of([&] { (void)Buffer::open(name); }, &message) == code(Errc::corrupt));
  CHECK(contains(message, "is not env 0's of this segment"));
  Buffer::remove(name);
}

TEST_CASE("create refuses cold options that cannot work, naming the option and why") {
  const ColdDir dir("refusals");
  const std::string name = unique_name("cold-bad");
  SegmentGuard guard(name);
  const auto refused = [&](const Schema& schema, CreateOptions o, const std::string& why) {
    std::string message;
    CHECK(error_of([&] { (void)Buffer::create(name, 2, 8, schema, o); }, &message) == code(Errc::invalid_argument));
    CHECK_MESSAGE(contains(message, why), message);
    CHECK(!Buffer::exists(name));
  };
  const Schema plain = Schema::parse("obs:f32[4] done:bool reward:f32 version:i64");
  const std::string d = dir.path();
  refused(plain, {.cold_dir = d}, "cold_dir is given without cold_capacity");
  refused(plain, {.cold_capacity = 8}, "cold_dir is '', expected the absolute path");
  refused(plain, {.cold_capacity = 8, .cold_dir = "relative/dir"}, "expected the absolute path");
  refused(plain, {.cold_capacity = 8, .cold_dir = d + "/missing"}, "is not an existing directory");
  refused(plain, {.cold_capacity = layout::kMaxColdCapacity + 1, .cold_dir = d}, "cold_capacity is");
  refused(Schema::parse("obs:u8[4,8,8]:stack=0"), {.cold_capacity = 8, .cold_dir = d}, "field 'obs' is stacked");
  refused(Schema::parse("obs:u8[64]:lz4"), {.cold_capacity = 8, .cold_dir = d}, "field 'obs' is compressed");
  refused(plain, {.priority_exponent = 0.6, .cold_capacity = 8, .cold_dir = d}, "priority_exponent is given");
  refused(plain, {.episodes = {.done = "done"}, .cold_capacity = 8, .cold_dir = d}, "episode fields are given");
  refused(plain, {.policy_version = "version", .cold_capacity = 8, .cold_dir = d}, "policy_version is given");
  refused(plain, {.max_times_sampled = 2, .cold_capacity = 8, .cold_dir = d}, "max_times_sampled is given");
  refused(plain, {.consuming_queue = true, .cold_capacity = 8, .cold_dir = d}, "consuming_queue is set");
  refused(plain, {.reanalyse_chunk = 4, .cold_capacity = 8, .cold_dir = d}, "reanalyse_chunk is given");
  CHECK(std::filesystem::is_empty(d));  // nothing left behind
}

TEST_CASE("a tiered buffer refuses checkpoints, updates and write-backs with a clear error") {
  const ColdDir dir("later");
  const std::string name = unique_name("cold-later");
  SegmentGuard guard(name);
  Buffer b = make_tiered(name, dir, 1, 8, 16);
  push_payloads(b, 4);
  std::string message;
  CHECK(error_of([&] { (void)save_checkpoint(b, dir.path() + "/x.shmrckpt"); }, &message) ==
        code(Errc::invalid_argument));
  CHECK(contains(message, "it has a cold tier"));
  Sampler s(b);
  const Payload p = make_payload(0, 1, 1);
  const std::vector<FieldBytes> fields = {field_bytes(std::span<const uint64_t>(p.hdr)),
                                          field_bytes(std::span<const float>(p.body)),
                                          field_bytes(std::span<const uint8_t>(p.tail))};
  CHECK(error_of([&] { (void)s.try_update(0, 1, fields); }, &message) == code(Errc::invalid_argument));
  CHECK(contains(message, "it has a cold tier"));
  Buffer::remove(name);
}
