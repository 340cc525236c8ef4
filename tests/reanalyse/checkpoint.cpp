// The reanalyse walk over a checkpoint load: a load into a buffer with a walk resets it (docs/design/reanalyse.md,
// "Checkpoints"), so chunks are never skipped as overwritten when the load moves the heads back; a checkpoint keeps
// the walk's chunk (format 2.4): a load into a new name recreates the walk, into another chunk is refused.
#include <doctest/doctest.h>

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_helpers.hpp"
#include "detail/os/crc32.hpp"
#include "detail/protocol/walk.hpp"
#include "shmreplay/internal/checkpoint_format.hpp"
#include "reanalyse/reanalyse_helpers.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

TEST_CASE("a checkpoint load resets the walk: every loaded chunk is never reanalysed, even with the heads moved "
          "back") {
  WalkRig rig("walk_ckpt", 1, 16, 4);
  FileGuard file(temp_path("walk_ckpt"));
  {
    Writer w(rig.buf, {0});
    push_steps(w, 0, 8);
  }
  (void)save_checkpoint(rig.buf, file.path());
  {
    Writer w(rig.buf, {0});
    push_steps(w, 0, 24);  // steps 16..31 stored; chunks 4..7
  }
  {
    Reanalyser r(rig.buf);
    CHECK(take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 3; }) ==
          std::vector<Taken>{{0, 4}, {0, 5}, {0, 6}, {0, 7}});
  }
  (void)load_checkpoint_into(rig.buf, file.path());  // head back to 8: chunks 0 and 1
  Reanalyser r(rig.buf);
  CHECK_FALSE(r.newest_version());
  CHECK(segment_of(rig.buf).walk_control().newest_version.load() == 0);
  CHECK(take_all(r, ReanalyseOrder::oldest_version, [](const ReanalyseChunk&) { return 4; }) ==
        std::vector<Taken>{{0, 0}, {0, 1}});
}

namespace {

// Rewrites `path` as its format 2.3 form: the version, and the 2.4 words zeroed (what a 2.3 writer left there).
void as_format_2_3(const std::string& path) {
  namespace fmtck = checkpoint_format;
  std::string bytes = slurp(path);
  fmtck::CheckpointHeader h{};
  std::memcpy(&h, bytes.data(), sizeof h);
  REQUIRE(h.format_minor == 4);
  h.format_minor = 3;
  h.reanalyse_chunk = h.write_backs_applied = h.write_backs_refused = 0;
  h.header_crc = 0;
  h.header_crc = detail::crc32(0, &h, sizeof h);
  std::memcpy(bytes.data(), &h, sizeof h);
  spit(path, bytes);
}

}  // namespace

TEST_CASE("a checkpoint keeps the walk's chunk: a load into a new name recreates the walk") {
  WalkRig rig("walk_ckpt_new", 2, 16, 4);
  SegmentGuard loaded(unique_name("walk_ckpt_new_load"));
  FileGuard file(temp_path("walk_ckpt_new"));
  {
    Writer w(rig.buf, {0, 1});
    push_steps(w, 0, 8);
    push_steps(w, 1, 4);
  }
  {
    Reanalyser r(rig.buf);
    (void)take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 7; });
  }
  (void)save_checkpoint(rig.buf, file.path());
  CHECK(verify_checkpoint(file.path()).reanalyse_chunk == 4);
  const LoadResult res = load_checkpoint(file.path(), loaded.name());
  CHECK(res.info.reanalyse_chunk == 4);
  Buffer b = Buffer::open(loaded.name());
  CHECK(b.reanalyse_chunk() == 4);
  CHECK(segment_of(b).walk_env(0).completed.load() == 0);
  Reanalyser r(b);
  CHECK(r.newest_version() == 7);  // the chunks' versions travel too (below)
  CHECK(take_all(r, ReanalyseOrder::oldest_version, [](const ReanalyseChunk&) { return 8; }) ==
        std::vector<Taken>{{0, 0}, {1, 0}, {0, 1}});
}

TEST_CASE("a load into a buffer whose walk's chunk differs, or that has no walk, is refused naming both chunks; "
          "allow_mismatch loads it and keeps the target's walk") {
  WalkRig rig("walk_ckpt_diff", 1, 16, 4);
  FileGuard file(temp_path("walk_ckpt_diff"));
  {
    Writer w(rig.buf, {0});
    push_steps(w, 0, 8);
  }
  (void)save_checkpoint(rig.buf, file.path());
  WalkRig other("walk_ckpt_diff_8", 1, 16, 8);
  std::string message;
  CHECK(error_of([&] { (void)load_checkpoint_into(other.buf, file.path()); }, &message) ==
        static_cast<int>(Errc::schema_mismatch));
  CHECK(contains(message, "reanalyse walk: the segment's chunk is 8 steps, the checkpoint's 4"));
  SegmentGuard plain_name(unique_name("walk_ckpt_plain"));
  Buffer plain =
      Buffer::create(plain_name.name(), 1, 16, kWalkSchema, {.episodes = {.done = "done", .reward = "reward"}});
  CHECK(error_of([&] { (void)load_checkpoint_into(plain, file.path()); }, &message) ==
        static_cast<int>(Errc::schema_mismatch));
  CHECK(contains(message, "reanalyse walk: the segment's chunk is 0 steps, the checkpoint's 4"));
  (void)load_checkpoint_into(other.buf, file.path(), {.allow_mismatch = true});
  Reanalyser r(other.buf);
  CHECK(take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 1; }) == std::vector<Taken>{{0, 0}});
}

TEST_CASE("a format 2.3 checkpoint, which does not record the walk, loads into a buffer with a walk as before and "
          "into a new name without one") {
  WalkRig rig("walk_ckpt_23", 1, 16, 4);
  SegmentGuard loaded(unique_name("walk_ckpt_23_load"));
  SegmentGuard plain_name(unique_name("walk_ckpt_23_plain"));
  FileGuard file(temp_path("walk_ckpt_23"));
  Buffer plain =
      Buffer::create(plain_name.name(), 1, 16, kWalkSchema, {.episodes = {.done = "done", .reward = "reward"}});
  {
    Writer w(plain, {0});  // a buffer without a walk: its 2.4 file is a 2.3 file but for the version
    push_steps(w, 0, 8);
  }
  (void)save_checkpoint(plain, file.path());
  as_format_2_3(file.path());
  CHECK_FALSE(verify_checkpoint(file.path()).reanalyse_chunk);
  (void)load_checkpoint_into(rig.buf, file.path());
  Reanalyser r(rig.buf);
  CHECK(take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 1; }) ==
        std::vector<Taken>{{0, 0}, {0, 1}});
  (void)load_checkpoint(file.path(), loaded.name());
  CHECK(Buffer::open(loaded.name()).reanalyse_chunk() == 0);
}

TEST_CASE("a checkpoint keeps each stored chunk's last target version: a load, into a new name or the same buffer, "
          "restores the steps per target-version age and oldest_version's order") {
  WalkRig rig("walk_ckpt_ages", 1, 16, 4);
  SegmentGuard loaded(unique_name("walk_ckpt_ages_load"));
  FileGuard file(temp_path("walk_ckpt_ages"));
  {
    Writer w(rig.buf, {0});
    push_steps(w, 0, 16);  // chunks 0..3
  }
  {
    Reanalyser r(rig.buf);
    for (const uint64_t version : {uint64_t{5}, uint64_t{2}, uint64_t{9}}) {  // chunks 0, 1, 2; chunk 3 never reanalysed
      const std::optional<ReanalyseChunk> c = r.try_next(ReanalyseOrder::sweep);
      REQUIRE(c);
      REQUIRE(r.complete(*c, version));
    }
  }
  const auto ages = detail::walk_age_steps(segment_of(rig.buf), 0);
  // Ages behind version 9: chunk 3 never, chunk 2 0, chunks 0 and 1 4 and 7 (buckets never, 0, 1, 2-3, 4-7, 8+).
  CHECK(ages == std::array<uint64_t, detail::kWalkAgeBuckets>{4, 4, 0, 0, 8, 0});
  (void)save_checkpoint(rig.buf, file.path());
  CHECK(verify_checkpoint(file.path()).envs[0].walk_versions == 4);
  const auto check_restored = [&](Buffer& b) {
    CHECK(detail::walk_age_steps(segment_of(b), 0) == ages);
    Reanalyser r(b);
    CHECK(r.newest_version() == 9);
    CHECK(take_all(r, ReanalyseOrder::oldest_version, [](const ReanalyseChunk&) { return 10; }) ==
          std::vector<Taken>{{0, 3}, {0, 1}, {0, 0}, {0, 2}});
  };
  (void)load_checkpoint(file.path(), loaded.name());
  Buffer b = Buffer::open(loaded.name());
  check_restored(b);
  {
    Reanalyser r(rig.buf);  // the source moves on: every chunk completed with version 20
    (void)take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 20; });
  }
  (void)load_checkpoint_into(rig.buf, file.path());
  check_restored(rig.buf);
}
