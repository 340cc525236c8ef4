// Checkpoint files: the format's CRC-32 and its pinned structs, and verification: a truncated or corrupt file, or
// one that is no checkpoint, or one whose state holds values no segment could (a NaN weight, a running maximum below
// 1, a limiter offset that is not finite) with its checksums right, is refused with a message that says what and
// where, before anything is written.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shmreplay/internal/checkpoint_format.hpp"
#include "detail/os/crc32.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"
#include "checkpoint/checkpoint_helpers.hpp"

TEST_CASE("crc32 gives the standard check value and continues across pieces") {
  const char* text = "123456789";
  CHECK(detail::crc32(0, text, 9) == 0xcbf43926u);
  CHECK(detail::crc32(detail::crc32(0, text, 4), text + 4, 5) == 0xcbf43926u);
  CHECK(detail::crc32(0, text, 0) == 0);
  std::string long_text(1000, 'x');
  for (std::size_t i = 0; i < long_text.size(); ++i) long_text[i] = static_cast<char>(i * 7);
  uint32_t pieces = 0;
  for (std::size_t at = 0; at < long_text.size(); at += 13) {
    pieces = detail::crc32(pieces, long_text.data() + at, std::min<std::size_t>(13, long_text.size() - at));
  }
  CHECK(pieces == detail::crc32(0, long_text.data(), long_text.size()));
}

TEST_CASE("the checkpoint format's structs keep their sizes and field offsets") {
  using namespace checkpoint_format;
  CHECK(sizeof(CheckpointHeader) == 512);
  CHECK(offsetof(CheckpointHeader, file_bytes) == 24);
  CHECK(offsetof(CheckpointHeader, total_records) == 64);
  CHECK(offsetof(CheckpointHeader, schema_bytes) == 88);
  CHECK(offsetof(CheckpointHeader, episode_done) == 120);
  CHECK(offsetof(CheckpointHeader, episode_queue_capacity) == 136);
  CHECK(offsetof(CheckpointHeader, section_bytes) == 144);
  CHECK(offsetof(CheckpointHeader, priority_exponent_bits) == 192);
  CHECK(offsetof(CheckpointHeader, limiter_enabled) == 208);
  CHECK(offsetof(CheckpointHeader, rows_sampled) == 304);
  CHECK(offsetof(CheckpointHeader, extra_bytes) == 360);
  CHECK(offsetof(CheckpointHeader, max_learners) == 368);  // 2.1: were reserved
  CHECK(offsetof(CheckpointHeader, learner_bytes) == 376);
  CHECK(offsetof(CheckpointHeader, learner_crc) == 384);
  CHECK(offsetof(CheckpointHeader, expected_compression_bits) == 392);
  CHECK(offsetof(CheckpointHeader, policy_field) == 400);  // 2.2: were reserved
  CHECK(offsetof(CheckpointHeader, policy_version) == 408);
  CHECK(offsetof(CheckpointHeader, policy_window) == 416);
  CHECK(offsetof(CheckpointHeader, max_times_sampled) == 424);
  CHECK(offsetof(CheckpointHeader, record_bytes) == 432);  // 2.3: was reserved
  CHECK(offsetof(CheckpointHeader, sequence_priority_length) == 464);
  CHECK(offsetof(CheckpointHeader, reanalyse_chunk) == 472);  // 2.4: were reserved
  CHECK(offsetof(CheckpointHeader, write_backs_applied) == 480);
  CHECK(offsetof(CheckpointHeader, write_backs_refused) == 488);
  CHECK(offsetof(CheckpointHeader, reserved) == 496);
  CHECK(sizeof(LearnerSlotBytes) == 64);
  CHECK(offsetof(LearnerSlotBytes, write_backs_applied) == 40);  // 2.4: were reserved
  CHECK(offsetof(LearnerSlotBytes, write_backs_refused) == 48);
  CHECK(learner_block_bytes(1, 8) == 0);
  CHECK(learner_block_bytes(3, 8) == 2 * (64 + 8 * 8));
  CHECK(offsetof(CheckpointHeader, meta_crc) == 504);
  CHECK(offsetof(CheckpointHeader, header_crc) == 508);
  CHECK(sizeof(EnvSection) == 192);
  CHECK(offsetof(EnvSection, data_from) == 24);
  CHECK(offsetof(EnvSection, claimed) == 48);
  CHECK(offsetof(EnvSection, weights) == 80);
  CHECK(offsetof(EnvSection, queued) == 112);
  CHECK(offsetof(EnvSection, cap_counts) == 120);  // 2.3: were reserved
  CHECK(offsetof(EnvSection, frame_bytes) == 128);
  CHECK(offsetof(EnvSection, frame_crc) == 136);
  CHECK(offsetof(EnvSection, walk_versions) == 160);  // 2.4: was reserved
  CHECK(offsetof(EnvSection, reserved) == 168);
  CHECK(sizeof(PackedBlockHeader) == 32);
  CHECK(sizeof(PackedFrameBytes) == 16);
  CHECK(offsetof(EnvSection, data_crc) == 176);
  CHECK(offsetof(EnvSection, header_crc) == 184);
  CHECK(sizeof(EpisodeRecordBytes) == 32);
  CHECK(sizeof(CheckpointTrailer) == 32);
  CHECK(kFormatMajor == 2);
  CHECK(kFormatMinor == 4);  // 2.4: the reanalyse walk's chunk, the write-back counters
  // Format 1.0, still read.
  CHECK(sizeof(v1::CheckpointHeader) == 160);
  CHECK(offsetof(v1::CheckpointHeader, total_steps) == 64);
  CHECK(offsetof(v1::CheckpointHeader, meta_crc) == 144);
  CHECK(offsetof(v1::CheckpointHeader, header_crc) == 148);
  CHECK(sizeof(v1::EnvSection) == 80);
  CHECK(offsetof(v1::EnvSection, claimed) == 40);
  CHECK(offsetof(v1::EnvSection, data_crc) == 64);
}

TEST_CASE("a truncated checkpoint is refused at every length and changes no segment") {
  SegmentGuard source(unique_name("ckpt-src"));
  SegmentGuard fresh(unique_name("ckpt-new"));
  FileGuard file(temp_path("ckpt"));
  FileGuard cut(temp_path("ckpt-cut"));
  {
    Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
    fill_mixed(b);
    save_checkpoint(b, file.path());
  }
  const std::string whole = slurp(file.path());
  const std::string before = slurp(source.path());
  const CheckpointInfo info = verify_checkpoint(file.path());
  const uint64_t env2_data = info.envs[2].offset + sizeof(checkpoint_format::EnvSection);
  for (const uint64_t length : std::vector<uint64_t>{0, 5, 8, 100, 159, 160, 161, info.envs[0].offset,
                                                     info.envs[1].offset + 40, env2_data + 7, whole.size() - 32,
                                                     whole.size() - 1}) {
    CAPTURE(length);
    spit(cut.path(), std::string_view(whole).substr(0, length));
    std::string message;
    CHECK(test::error_of([&] { load_checkpoint(cut.path(), fresh.name()); }, &message) ==
          static_cast<int>(Errc::truncated));
    CHECK(message.find(cut.path()) != std::string::npos);
    CHECK_FALSE(Buffer::exists(fresh.name()));
    CHECK(test::error_of([&] { load_checkpoint(cut.path(), source.name()); }) == static_cast<int>(Errc::truncated));
    CHECK(slurp(source.path()) == before);
  }
}

TEST_CASE("a flipped byte anywhere in the headers or the records is refused and changes no segment") {
  SegmentGuard source(unique_name("ckpt-src"));
  SegmentGuard fresh(unique_name("ckpt-new"));
  FileGuard file(temp_path("ckpt"));
  FileGuard bad(temp_path("ckpt-bad"));
  {
    Buffer b = Buffer::create(source.name(), 3, 8, kPayloadSchema);
    Writer w(b, {0, 1, 2});
    push_steps(w, {0, 2}, 11);
    save_checkpoint(b, file.path());
  }
  const std::string whole = slurp(file.path());
  const std::string before = slurp(source.path());
  const CheckpointInfo info = verify_checkpoint(file.path());
  // Every byte of the header, the meta block, each env section header and the trailer; every 7th record byte.
  std::vector<uint64_t> positions;
  for (uint64_t i = 0; i < info.envs[0].offset; ++i) positions.push_back(i);
  for (const CheckpointEnv& e : info.envs) {
    const uint64_t data = e.offset + sizeof(checkpoint_format::EnvSection);
    for (uint64_t i = e.offset; i < data; ++i) positions.push_back(i);
    for (uint64_t i = data; i < data + e.steps * kPayloadSchema.step_bytes(); i += 7) positions.push_back(i);
  }
  for (uint64_t i = whole.size() - 32; i < whole.size(); ++i) positions.push_back(i);
  int refused = 0;
  for (const uint64_t at : positions) {
    std::string flipped = whole;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    spit(bad.path(), flipped);
    std::string message;
    const int code = test::error_of([&] { verify_checkpoint(bad.path()); }, &message);
    if (code == 0) {
      FAIL_CHECK("a flipped byte at offset ", at, " was not detected");
      continue;
    }
    ++refused;
    // Loading refuses it before touching a segment, new or existing (checked on a sample: it costs a segment).
    if (at % 5 == 0) {
      CHECK(test::error_of([&] { load_checkpoint(bad.path(), fresh.name()); }) == code);
      CHECK_FALSE(Buffer::exists(fresh.name()));
      CHECK(test::error_of([&] { load_checkpoint(bad.path(), source.name()); }) == code);
      CHECK(slurp(source.path()) == before);
    }
  }
  CHECK(refused == static_cast<int>(positions.size()));
}

TEST_CASE("verify names what is wrong: not a checkpoint, a segment file, another major version, a bad record") {
  SegmentGuard source(unique_name("ckpt-src"));
  FileGuard file(temp_path("ckpt"));
  FileGuard bad(temp_path("ckpt-bad"));
  {
    Buffer b = Buffer::create(source.name(), 2, 8, kPayloadSchema);
    Writer w(b, {0, 1});
    push_steps(w, {1}, 3);
    save_checkpoint(b, file.path());
  }
  std::string message;
  spit(bad.path(), std::string(300, 'x'));
  CHECK(test::error_of([&] { verify_checkpoint(bad.path()); }, &message) == static_cast<int>(Errc::not_a_segment));
  CHECK(message.find("not a shmreplay checkpoint") != std::string::npos);
  CHECK(message.find("xxxxxxxx") != std::string::npos);

  CHECK(test::error_of([&] { verify_checkpoint(source.path()); }, &message) == static_cast<int>(Errc::not_a_segment));
  CHECK(message.find("segment file") != std::string::npos);

  CHECK(test::error_of([&] { verify_checkpoint("/nonexistent/x.ckpt"); }) == static_cast<int>(Errc::not_found));

  std::string whole = slurp(file.path());
  checkpoint_format::CheckpointHeader h{};
  std::memcpy(&h, whole.data(), sizeof h);
  h.format_major = 3;  // minor 4, as this library writes
  h.header_crc = 0;
  h.header_crc = detail::crc32(0, &h, sizeof h);
  std::string newer = whole;
  std::memcpy(newer.data(), &h, sizeof h);
  spit(bad.path(), newer);
  CHECK(test::error_of([&] { verify_checkpoint(bad.path()); }, &message) == static_cast<int>(Errc::version_mismatch));
  CHECK(message.find("format 3.4") != std::string::npos);

  const CheckpointInfo info = verify_checkpoint(file.path());
  const uint64_t record = info.envs[1].offset + sizeof(checkpoint_format::EnvSection) + 2;
  whole[record] = static_cast<char>(whole[record] ^ 1);
  spit(bad.path(), whole);
  CHECK(test::error_of([&] { verify_checkpoint(bad.path()); }, &message) == static_cast<int>(Errc::corrupt));
  CHECK(message.find("env 1's records") != std::string::npos);
  CHECK(message.find("checksum") != std::string::npos);
}

namespace ckpt_verify_state {

using namespace shmreplay::test::state;

// A checkpoint's bytes with env 0's first weight replaced (its section's extra_crc and header_crc recomputed), or
// with its header's words changed (its header_crc recomputed): files whose checksums hold.
std::string with_weight(const std::string& bytes, const CheckpointInfo& info, float weight) {
  using checkpoint_format::EnvSection;
  std::string out = bytes;
  const CheckpointEnv& e = info.envs[0];
  const uint64_t at = e.records_offset + e.steps * info.schema.step_bytes();
  std::memcpy(out.data() + at, &weight, sizeof weight);
  EnvSection section;
  std::memcpy(&section, out.data() + e.offset, sizeof section);
  const uint64_t extra =
      section.weights * sizeof(float) + section.queued * sizeof(checkpoint_format::EpisodeRecordBytes);
  section.extra_crc = detail::crc32(0, out.data() + at, extra);
  section.header_crc = 0;
  section.header_crc = detail::crc32(0, &section, sizeof section);
  std::memcpy(out.data() + e.offset, &section, sizeof section);
  return out;
}

std::string with_header(const std::string& bytes, uint64_t checkpoint_format::CheckpointHeader::*word, double value) {
  checkpoint_format::CheckpointHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  h.*word = std::bit_cast<uint64_t>(value);
  h.header_crc = 0;
  h.header_crc = detail::crc32(0, &h, sizeof h);
  std::string out = bytes;
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

TEST_CASE("verify refuses a checkpoint whose weights, running maximum or limiter offset no segment could hold, even "
          "with its checksums right, and a load of it changes nothing") {
  SegmentGuard source(unique_name("ckst-src"));
  SegmentGuard target(unique_name("ckst-dst"));
  FileGuard file(temp_path("ckst"));
  FileGuard bad(temp_path("ckst-bad"));
  Buffer src = Buffer::create(source.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
  fill_state(src, 0, 40.0f);
  const CheckpointInfo info = save_checkpoint(src, file.path());
  const std::string good = slurp(file.path());
  REQUIRE(info.envs[0].weights > 0);
  {  // the helpers' files are right but for the value: the same value verifies
    spit(bad.path(), with_weight(good, info, 2.5f));
    CHECK_NOTHROW(verify_checkpoint(bad.path()));
    spit(bad.path(), with_header(good, &checkpoint_format::CheckpointHeader::max_priority_bits, 7.0));
    CHECK(verify_checkpoint(bad.path()).max_priority == 7.0);
  }
  Buffer dst = Buffer::create(target.name(), kStateEnvs, kStateCapacity, kStateSchema, state_options());
  const std::string untouched = slurp(target.path());
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  constexpr auto kMax = &checkpoint_format::CheckpointHeader::max_priority_bits;
  constexpr auto kOffset = &checkpoint_format::CheckpointHeader::limiter_offset_bits;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a NaN weight", with_weight(good, info, static_cast<float>(nan))},
      {"an infinite weight", with_weight(good, info, static_cast<float>(inf))},
      {"a negative weight", with_weight(good, info, -1.0f)},
      {"a NaN running maximum", with_header(good, kMax, nan)},
      {"a negative running maximum", with_header(good, kMax, -2.0)},
      {"a running maximum below 1, where every segment's starts", with_header(good, kMax, 0.5)},
      {"an infinite running maximum", with_header(good, kMax, inf)},
      {"an infinite limiter offset", with_header(good, kOffset, inf)},
      {"a NaN limiter offset", with_header(good, kOffset, nan)},
  };
  for (const auto& [what, bytes] : cases) {
    CAPTURE(what);
    spit(bad.path(), bytes);
    std::string message;
    CHECK(test::error_of([&] { verify_checkpoint(bad.path()); }, &message) == static_cast<int>(Errc::corrupt));
    CHECK_MESSAGE(test::contains(message, bad.path()), message);
    CHECK(test::error_of([&] { load_checkpoint(bad.path(), target.name()); }) == static_cast<int>(Errc::corrupt));
    CHECK(slurp(target.path()) == untouched);
  }
}

}  // namespace ckpt_verify_state
