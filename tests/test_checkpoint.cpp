// Checkpoints: save a live buffer to a file and load it back; consistent reads from outside the learner
// (Inspector::read_steps); a truncated or corrupt file is refused before anything is written.
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
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "detail/os/crc32.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"

using namespace shmreplay;
using test::file_mode;
using test::UmaskGuard;
using test::kPayloadSchema;
using test::check_env_payloads;
using test::payload_bytes;
using test::SegmentGuard;
using test::stored_step;
using test::unique_name;

namespace {

/// Removes a file when it goes out of scope.
class FileGuard {
 public:
  explicit FileGuard(std::string path) : path_(std::move(path)) {}
  FileGuard(const FileGuard&) = delete;
  FileGuard& operator=(const FileGuard&) = delete;
  ~FileGuard() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string temp_path(const std::string& tag) { return fmt::format("/tmp/{}.ckpt", unique_name(tag)); }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes a new file (removing the old one first: truncating a file on ext4 flushes its pending writes, slowly).
void spit(const std::string& path, std::string_view bytes) {
  std::remove(path.c_str());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Pushes `steps` payload steps into each env of `envs`, one batched push per step.
void push_steps(Writer& w, const std::vector<int32_t>& envs, uint64_t steps) {
  test::PayloadPusher pusher;
  for (uint64_t i = 0; i < steps; ++i) pusher.push(w, envs);
}


struct EnvCounters {
  uint64_t head, claimed, online_start;
  friend bool operator==(const EnvCounters&, const EnvCounters&) = default;
};

EnvCounters counters(const Buffer& b, uint64_t env) {
  const layout::EnvControl& c = b.segment().env_control(env);
  return {c.head.load(), c.claimed.load(), c.online_start.load()};
}

// A source segment with four kinds of env: empty, partly filled, wrapped, and wrapped with an abandoned
// reservation (claimed = head + 1); the online queue was reset midway.
void fill_mixed(Buffer& b) {
  Writer w(b, {0, 1, 2, 3});
  push_steps(w, {1, 2, 3}, 5);
  {
    Sampler learner(b);
    learner.reset_online_queue();
  }
  push_steps(w, {2, 3}, 30);
  StepSlot slot = w.reserve(3);
  test::fill_slot(slot, 1);  // abandoned half-filled: never published
}

const Schema kOtherSchema = Schema::parse("hdr:u64[4] body:f32[13] tail:u8[30]");

}  // namespace

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
  CHECK(sizeof(CheckpointHeader) == 160);
  CHECK(offsetof(CheckpointHeader, file_bytes) == 24);
  CHECK(offsetof(CheckpointHeader, total_steps) == 64);
  CHECK(offsetof(CheckpointHeader, schema_bytes) == 88);
  CHECK(offsetof(CheckpointHeader, episode_done) == 120);
  CHECK(offsetof(CheckpointHeader, episode_queue_capacity) == 136);
  CHECK(offsetof(CheckpointHeader, meta_crc) == 144);
  CHECK(offsetof(CheckpointHeader, header_crc) == 148);
  CHECK(sizeof(EnvSection) == 80);
  CHECK(offsetof(EnvSection, claimed) == 40);
  CHECK(offsetof(EnvSection, data_crc) == 64);
  CHECK(sizeof(CheckpointTrailer) == 32);
  CHECK(kFormatMajor == 1);
}

TEST_CASE("read_steps copies the stored steps of a range, clamped to the replay view") {
  SegmentGuard guard(unique_name("ckpt-read"));
  Buffer b = Buffer::create(guard.name(), 2, 8, kPayloadSchema);
  {
    Writer w(b, {0, 1});
    push_steps(w, {0}, 20);
    push_steps(w, {1}, 3);
  }
  const Inspector insp(guard.name());
  const StepRecords all = insp.read_steps(0, 0, 1000);
  CHECK(all.env == 0);
  CHECK(all.first_step == 12);
  CHECK(all.count == 8);
  CHECK(all.record_bytes == kPayloadSchema.step_bytes());
  REQUIRE(all.bytes.size() == 8 * all.record_bytes);
  for (uint64_t i = 0; i < all.count; ++i) {
    CHECK(std::string(reinterpret_cast<const char*>(all.bytes.data() + i * all.record_bytes), all.record_bytes) ==
          payload_bytes(0, 12 + i));
  }
  uint64_t step_field = 0;
  std::memcpy(&step_field, all.field(3, 0).data() + 8, 8);  // hdr[1] of record 3
  CHECK(step_field == 15);
  CHECK(all.field(3, 2).size() == test::kTail);

  const StepRecords middle = insp.read_steps(0, 14, 3);
  CHECK(middle.first_step == 14);
  CHECK(middle.count == 3);
  const StepRecords beyond = insp.read_steps(1, 10, 5);
  CHECK(beyond.count == 0);
  const StepRecords gone = insp.read_steps(0, 0, 5);  // overwritten long ago
  CHECK(gone.count == 0);
  CHECK(test::error_of([&] { (void)insp.read_steps(2, 0, 1); }) == static_cast<int>(Errc::env_out_of_range));
}

TEST_CASE("read_steps while writers push returns only whole, consecutive steps of the env") {
  SegmentGuard guard(unique_name("ckpt-read-live"));
  Buffer b = Buffer::create(guard.name(), 2, 16, kPayloadSchema);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    Writer w(b, {0, 1});
    test::PayloadPusher pusher;
    while (!stop.load(std::memory_order_relaxed)) pusher.push(w, {0, 1});
  });
  while (b.segment().env_control(1).head.load() < 16) std::this_thread::yield();
  const Inspector insp(guard.name());
  uint64_t steps_seen = 0;
  std::string violation;
  for (int i = 0; i < 2000 && violation.empty(); ++i) {
    const uint64_t env = static_cast<uint64_t>(i % 2);
    const StepRecords r = insp.read_steps(env, 0, UINT64_MAX);
    for (uint64_t k = 0; k < r.count; ++k) {
      const std::string got(reinterpret_cast<const char*>(r.bytes.data() + k * r.record_bytes), r.record_bytes);
      if (got != payload_bytes(env, r.first_step + k)) {
        violation = fmt::format("env {} step {}", env, r.first_step + k);
        break;
      }
    }
    steps_seen += r.count;
  }
  stop = true;
  writer.join();
  CHECK(violation == "");
  CHECK(steps_seen > 0);
}

TEST_CASE("save then load into a new segment restores every env's steps, head, claim and online start") {
  SegmentGuard source(unique_name("ckpt-src"));
  SegmentGuard loaded(unique_name("ckpt-dst"));
  FileGuard file(temp_path("ckpt"));
  {
    Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
    fill_mixed(b);
  }
  const Buffer src = Buffer::open(source.name(), {.read_only = true});
  const std::string before = slurp(source.path());
  std::vector<CheckpointProgress> reports;
  const CheckpointInfo saved =
      save_checkpoint(src, file.path(), {.progress = [&](const CheckpointProgress& p) { reports.push_back(p); }});
  CHECK(slurp(source.path()) == before);  // saving never writes the segment
  REQUIRE_FALSE(reports.empty());
  CHECK(reports.back().phase == "saving");
  CHECK(reports.back().done_bytes == reports.back().total_bytes);

  CHECK(saved.num_envs == 4);
  CHECK(saved.capacity == 16);
  CHECK(saved.schema == kPayloadSchema);
  CHECK(saved.source_name == source.name());
  REQUIRE(saved.envs.size() == 4);
  CHECK(saved.envs[0].steps == 0);
  CHECK(saved.envs[1].head == 5);
  CHECK(saved.envs[1].steps == 5);
  CHECK(saved.envs[2].head == 35);
  CHECK(saved.envs[2].first_step == 19);
  CHECK(saved.envs[2].steps == 16);
  CHECK(saved.envs[3].claimed == 36);  // the abandoned reservation: claimed = head + 1
  CHECK(saved.envs[3].first_step == 20);
  CHECK(saved.envs[3].steps == 15);
  CHECK(saved.envs[2].online_start == 5);
  CHECK(saved.total_steps == 0 + 5 + 16 + 15);

  const CheckpointInfo verified = verify_checkpoint(file.path());
  CHECK(verified.total_steps == saved.total_steps);
  CHECK(verified.file_bytes == slurp(file.path()).size());
  CHECK(verified.source_name == source.name());
  CHECK(verified.envs[3].claimed == 36);

  const LoadResult r = load_checkpoint(file.path(), loaded.name());
  CHECK(r.created);
  CHECK(r.name == loaded.name());
  const Buffer dst = Buffer::open(loaded.name());
  CHECK(dst.schema() == kPayloadSchema);
  CHECK(dst.num_envs() == 4);
  CHECK(dst.capacity() == 16);
  for (uint64_t e = 0; e < 4; ++e) {
    CAPTURE(e);
    CHECK(counters(dst, e) == counters(src, e));
    CHECK(check_env_payloads(dst, e) == "");
  }
  // The online view is where it was.
  CHECK(Inspector(Buffer::open(loaded.name(), {.read_only = true})).snapshot().online_steps ==
        Inspector(source.name()).snapshot().online_steps);
}

TEST_CASE("writers continue at the restored head after a load") {
  SegmentGuard source(unique_name("ckpt-src"));
  SegmentGuard loaded(unique_name("ckpt-dst"));
  FileGuard file(temp_path("ckpt"));
  {
    Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
    fill_mixed(b);
    save_checkpoint(b, file.path());
  }
  load_checkpoint(file.path(), loaded.name());
  Buffer dst = Buffer::open(loaded.name());
  {
    Writer w(dst, {0, 1, 2, 3});
    push_steps(w, {0, 1, 2, 3}, 3);
  }
  CHECK(counters(dst, 0).head == 3);
  CHECK(counters(dst, 2).head == 38);
  CHECK(counters(dst, 3).head == 38);  // the abandoned slot is reused by the next push
  for (uint64_t e = 0; e < 4; ++e) CHECK(check_env_payloads(dst, e) == "");
  Sampler learner(dst);
  Rng rng(1);
  SampleBatch batch;
  learner.sample(View::replay, 64, 4, 1.0, rng, batch);
  for (std::size_t row = 0; row < batch.rows(); ++row) CHECK(test::check_row(batch, row, 38) == "");
}

TEST_CASE("load into an existing segment with the same schema replaces its envs and keeps its learner counters") {
  SegmentGuard source(unique_name("ckpt-src"));
  SegmentGuard target(unique_name("ckpt-dst"));
  FileGuard file(temp_path("ckpt"));
  {
    Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
    fill_mixed(b);
    save_checkpoint(b, file.path());
  }
  Buffer dst = Buffer::create(target.name(), 4, 16, kPayloadSchema);
  {
    Writer w(dst, {0, 1, 2, 3});
    push_steps(w, {0, 1, 2, 3}, 50);
    Sampler learner(dst);
    Rng rng(2);
    SampleBatch batch;
    learner.sample(View::replay, 8, 2, 0.0, rng, batch);
  }
  const LoadResult r = load_checkpoint(file.path(), target.name());
  CHECK_FALSE(r.created);
  const Buffer src = Buffer::open(source.name(), {.read_only = true});
  for (uint64_t e = 0; e < 4; ++e) {
    CAPTURE(e);
    CHECK(counters(dst, e) == counters(src, e));
    CHECK(check_env_payloads(dst, e) == "");
  }
  CHECK(dst.segment().global_control().rows_sampled.load() == 8);
  CHECK(dst.segment().env_control(0).lease.load() == 0);  // the leases taken for the load are released
  CHECK(dst.segment().global_control().learner_lease.load() == 0);

  // load_checkpoint_into does the same on an open Buffer.
  const CheckpointInfo info = load_checkpoint_into(dst, file.path());
  CHECK(info.total_steps == 36);
  CHECK(check_env_payloads(dst, 2) == "");
}

TEST_CASE("load into an existing segment refuses another schema or geometry and leaves it untouched") {
  SegmentGuard source(unique_name("ckpt-src"));
  FileGuard file(temp_path("ckpt"));
  {
    Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
    fill_mixed(b);
    save_checkpoint(b, file.path());
  }
  SUBCASE("another schema") {
    SegmentGuard target(unique_name("ckpt-other"));
    Buffer::create(target.name(), 4, 16, kOtherSchema);
    const std::string before = slurp(target.path());
    std::string message;
    CHECK(test::error_of([&] { load_checkpoint(file.path(), target.name()); }, &message) ==
          static_cast<int>(Errc::schema_mismatch));
    CHECK(message.find("field 'tail'") != std::string::npos);
    CHECK(slurp(target.path()) == before);
  }
  SUBCASE("another capacity") {
    SegmentGuard target(unique_name("ckpt-other"));
    Buffer::create(target.name(), 4, 17, kPayloadSchema);
    const std::string before = slurp(target.path());
    std::string message;
    CHECK(test::error_of([&] { load_checkpoint(file.path(), target.name()); }, &message) ==
          static_cast<int>(Errc::invalid_argument));
    CHECK(message.find("4 envs x 16 steps") != std::string::npos);
    CHECK(slurp(target.path()) == before);
  }
}

TEST_CASE("load refuses a segment whose writer or learner is alive in another process") {
  SegmentGuard source(unique_name("ckpt-src"));
  FileGuard file(temp_path("ckpt"));
  Buffer b = Buffer::create(source.name(), 4, 16, kPayloadSchema);
  fill_mixed(b);
  save_checkpoint(b, file.path());

  for (const bool learner : {false, true}) {
    CAPTURE(learner);
    int ready[2];
    int release[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(release) == 0);
    std::fflush(nullptr);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(ready[0]);
      ::close(release[1]);
      Buffer mine = Buffer::open(source.name());
      char byte = 1;
      if (learner) {
        Sampler s(mine);
        (void)!::write(ready[1], &byte, 1);
        (void)!::read(release[0], &byte, 1);
      } else {
        Writer w(mine, {2});
        (void)!::write(ready[1], &byte, 1);
        (void)!::read(release[0], &byte, 1);
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    ::close(release[0]);
    char byte = 0;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    std::string message;
    CHECK(test::error_of([&] { load_checkpoint(file.path(), source.name()); }, &message) ==
          static_cast<int>(Errc::lease_held));
    CHECK(message.find(fmt::format("pid {}", child)) != std::string::npos);
    CHECK(b.segment().env_control(0).lease.load() == 0);  // nothing half-taken is left behind
    CHECK((b.segment().global_control().learner_lease.load() == 0) == !learner);
    ::close(release[1]);
    ::close(ready[0]);
    ::waitpid(child, nullptr, 0);
  }
  CHECK_NOTHROW(load_checkpoint(file.path(), source.name()));
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
  h.format_major = 2;
  h.header_crc = 0;
  h.header_crc = detail::crc32(0, &h, sizeof h);
  std::string newer = whole;
  std::memcpy(newer.data(), &h, sizeof h);
  spit(bad.path(), newer);
  CHECK(test::error_of([&] { verify_checkpoint(bad.path()); }, &message) == static_cast<int>(Errc::version_mismatch));
  CHECK(message.find("format 2.0") != std::string::npos);

  const CheckpointInfo info = verify_checkpoint(file.path());
  const uint64_t record = info.envs[1].offset + sizeof(checkpoint_format::EnvSection) + 2;
  whole[record] = static_cast<char>(whole[record] ^ 1);
  spit(bad.path(), whole);
  CHECK(test::error_of([&] { verify_checkpoint(bad.path()); }, &message) == static_cast<int>(Errc::corrupt));
  CHECK(message.find("env 1's records") != std::string::npos);
  CHECK(message.find("checksum") != std::string::npos);
}

TEST_CASE("saves taken while writer threads push hold, per env, a full window of whole published steps") {
  SegmentGuard source(unique_name("ckpt-live"));
  Buffer b = Buffer::create(source.name(), 4, 64, kPayloadSchema);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (uint64_t w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      Writer writer(b, {2 * w, 2 * w + 1});
      test::PayloadPusher pusher;
      const std::vector<int32_t> both{static_cast<int32_t>(2 * w), static_cast<int32_t>(2 * w + 1)};
      const std::vector<int32_t> one{static_cast<int32_t>(2 * w)};
      for (uint64_t n = 0; !stop.load(std::memory_order_relaxed); ++n) {
        pusher.push(writer, n % 3 == 0 ? one : both);
      }
    });
  }
  const auto lapped = [&] {
    for (uint64_t e = 0; e < 4; ++e) {
      if (b.segment().env_control(e).head.load() < 200) return false;
    }
    return true;
  };
  while (!lapped()) std::this_thread::yield();
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    FileGuard file(temp_path("ckpt-live"));
    SegmentGuard copy(unique_name("ckpt-copy"));
    const CheckpointInfo saved = save_checkpoint(reader, file.path());
    for (const CheckpointEnv& e : saved.envs) {
      CHECK(e.steps == (e.claimed == e.head ? 64u : 63u));  // every env is past its first lap
      CHECK(e.head <= b.segment().env_control(e.env).head.load());
    }
    load_checkpoint(file.path(), copy.name());
    const Buffer loaded = Buffer::open(copy.name(), {.read_only = true});
    for (uint64_t e = 0; e < 4; ++e) {
      CHECK(check_env_payloads(loaded, e) == "");
      CHECK(loaded.segment().env_control(e).head.load() == saved.envs[e].head);
    }
  }
  stop = true;
  for (std::thread& t : writers) t.join();
}

TEST_CASE("a buffer with episode fields keeps them through save and load, and its episode bookkeeping is rebuilt") {
  SegmentGuard source(unique_name("ckpt-ep"));
  SegmentGuard loaded(unique_name("ckpt-ep-copy"));
  SegmentGuard plain(unique_name("ckpt-ep-plain"));
  FileGuard file(temp_path("ckpt-ep"));
  const Schema schema = Schema::parse("obs:f32[2] reward:f32 done:bool");
  CreateOptions options;
  options.episodes.done = "done";
  options.episodes.reward = "reward";
  options.episode_queue_capacity = 16;
  {
    Buffer b = Buffer::create(source.name(), 2, 8, schema, options);
    Writer w(b, {0, 1});
    // env 0: episodes of 3 steps, 20 steps in all (wrapped); env 1: one episode in progress, 5 steps.
    for (uint64_t step = 0; step < 20; ++step) {
      const float obs[2] = {static_cast<float>(step), 0.5f};
      const float reward = 1.0f;
      const uint8_t done = step % 3 == 2 ? 1 : 0;
      w.push_one(0, {value_bytes(obs), value_bytes(reward), value_bytes(done)});
      if (step < 5) {
        const uint8_t never = 0;
        w.push_one(1, {value_bytes(obs), value_bytes(reward), value_bytes(never)});
      }
    }
  }
  const Buffer src = Buffer::open(source.name(), {.read_only = true});
  REQUIRE(src.has_episodes());
  const CheckpointInfo saved = save_checkpoint(src, file.path());
  CHECK(saved.episode_fields == src.episode_fields());
  CHECK(saved.episode_queue_capacity == 16);
  const CheckpointInfo verified = verify_checkpoint(file.path());
  CHECK(verified.episode_fields.done == std::optional<std::size_t>(2));
  CHECK(verified.episode_fields.reward == std::optional<std::size_t>(1));
  CHECK_FALSE(verified.episode_fields.terminated);

  const LoadResult r = load_checkpoint(file.path(), loaded.name());
  CHECK(r.created);
  const Buffer dst = Buffer::open(loaded.name(), {.read_only = true});
  CHECK(dst.episode_fields() == src.episode_fields());
  CHECK(dst.episode_queue_capacity() == 16);
  for (uint64_t e = 0; e < 2; ++e) {
    CAPTURE(e);
    CHECK(counters(dst, e) == counters(src, e));
    // Every stored step's meta word (its episode's first step, whether it ends one) is the source's: env 0's
    // window [12, 20) starts an episode and env 1's holds all of its one, so nothing starts before a window.
    const uint64_t head = dst.segment().env_control(e).head.load();
    for (uint64_t step = head > 8 ? head - 8 : 0; step < head; ++step) {
      CAPTURE(step);
      CHECK(dst.segment().step_meta(e)[step % 8].load() == src.segment().step_meta(e)[step % 8].load());
    }
  }
  const SegmentInfo a = Inspector(Buffer::open(source.name(), {.read_only = true})).snapshot();
  const SegmentInfo b = Inspector(Buffer::open(loaded.name(), {.read_only = true})).snapshot();
  CHECK(b.envs[0].episode_start == a.envs[0].episode_start);  // 18: the episode in progress
  CHECK(b.envs[1].episode_start == 0);

  // A segment without the episode fields is not the same buffer: refused, untouched.
  Buffer::create(plain.name(), 2, 8, schema);
  const std::string before = slurp(plain.path());
  std::string message;
  CHECK(test::error_of([&] { load_checkpoint(file.path(), plain.name()); }, &message) ==
        static_cast<int>(Errc::schema_mismatch));
  CHECK(message.find("episode fields") != std::string::npos);
  CHECK(slurp(plain.path()) == before);
}

TEST_CASE("a checkpoint gets its segment's read/write bits whatever the umask, before a byte is written to it") {
  const UmaskGuard open_umask(0);  // the umask that would make a file created 0666 world-readable
  for (const uint32_t segment_mode : {0600u, 0640u, 0660u, 0644u, 0400u}) {
    CAPTURE(fmt::format("{:04o}", segment_mode));
    SegmentGuard source(unique_name("ckpt-mode"));
    FileGuard file(temp_path("ckpt-mode"));
    {
      Buffer b = Buffer::create(source.name(), 2, 8, kPayloadSchema, {.mode = segment_mode});
      Writer w(b, {0, 1});
      push_steps(w, {0, 1}, 5);
    }
    const Buffer src = Buffer::open(source.name(), {.read_only = true});
    CHECK(src.mode() == segment_mode);
    const mode_t expected = (segment_mode & 0066) | 0600;  // the owner keeps read/write to load it back
    std::string temp;
    mode_t temp_mode = 0;
    off_t temp_size = -1;
    (void)save_checkpoint(src, file.path(), {.temp_file_created = [&](const std::string& path) {
                            struct stat st {};
                            REQUIRE(::stat(path.c_str(), &st) == 0);
                            temp = path;
                            temp_mode = st.st_mode & 07777;
                            temp_size = st.st_size;
                          }});
    CHECK(temp.starts_with(file.path() + ".tmp-"));
    CHECK(temp_mode == expected);
    CHECK(temp_size == 0);
    CHECK(file_mode(file.path()) == expected);
    CHECK_FALSE(std::ifstream(temp).good());  // renamed to the file
  }
}

TEST_CASE("a save removes the temporary files that killed saves to the same file left, and nobody else's") {
  SegmentGuard source(unique_name("ckpt-stale"));
  FileGuard file(temp_path("ckpt-stale"));
  {
    Buffer b = Buffer::create(source.name(), 2, 8, kPayloadSchema);
    Writer w(b, {0, 1});
    push_steps(w, {0, 1}, 5);
  }
  // Two pids that no longer exist: children that exited and were reaped.
  const auto dead_pid = [] {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
    return pid;
  };
  const pid_t dead = dead_pid();
  const pid_t dead_but_locked = dead_pid();
  const std::string p = file.path();
  const std::vector<std::string> stale = {fmt::format("{}.tmp-{}-0", p, dead), fmt::format("{}.tmp-{}-17", p, dead)};
  const std::vector<std::string> kept = {
      fmt::format("{}.tmp-{}-3", p, ::getpid()),         // this process's own (another thread's save)
      fmt::format("{}.tmp-{}-0", p, ::getppid()),        // a live process's
      fmt::format("{}.tmp-{}-0", p, dead_but_locked),    // locked: a save in another pid namespace
      fmt::format("{}.tmp-x-0", p),                      // not <pid>-<n>
      fmt::format("{}.tmp-{}", p, dead),                 // not <pid>-<n>
      fmt::format("{}x.tmp-{}-0", p, dead),              // another file's
  };
  std::vector<std::unique_ptr<FileGuard>> guards;
  for (const std::string& f : stale) guards.push_back(std::make_unique<FileGuard>(f));
  for (const std::string& f : kept) guards.push_back(std::make_unique<FileGuard>(f));
  for (const std::string& f : stale) spit(f, "half a checkpoint");
  for (const std::string& f : kept) spit(f, "someone else's");
  const int locked = ::open(kept[2].c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(locked >= 0);
  REQUIRE(::flock(locked, LOCK_EX) == 0);

  const Buffer src = Buffer::open(source.name(), {.read_only = true});
  (void)save_checkpoint(src, p);
  ::close(locked);
  for (const std::string& f : stale) CHECK_MESSAGE(!std::ifstream(f).good(), f);
  for (const std::string& f : kept) CHECK_MESSAGE(slurp(f) == "someone else's", f);
  CHECK(verify_checkpoint(p).total_steps == 10);
}

namespace {

// A step of the in-place update test: every 64-bit word of it is (step << 32) | version, so a step that is part
// one version and part another (a copy that overlapped a rewrite) shows as words that differ.
const Schema kWordsSchema = Schema::parse("words:u64[8192]");  // 64 KiB steps: a rewrite takes a while
constexpr uint64_t kWords = 8192;

uint64_t version_word(uint64_t step, uint64_t version) { return step << 32 | version; }

// "" when `record` (kWords words) is one whole version of step `step`, else what is wrong with it.
std::string check_words(const std::byte* record, uint64_t step) {
  const auto word = [&](uint64_t i) {
    uint64_t w = 0;
    std::memcpy(&w, record + i * 8, 8);
    return w;
  };
  const uint64_t first = word(0);
  if (first >> 32 != step) return fmt::format("step {} holds a word of step {}", step, first >> 32);
  for (uint64_t i = 1; i < kWords; ++i) {
    if (word(i) != first) {
      return fmt::format("step {} is a mix: word 0 is of version {}, word {} of version {}", step, first & 0xffffffff,
                         i, word(i) & 0xffffffff);
    }
  }
  return "";
}

// Pins the calling thread to `cpu`; false when it cannot (no doctest assertion: it runs on the test's threads).
bool pin_to(std::size_t cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0;
}

std::size_t first_usable_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  for (std::size_t cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  FAIL("no usable CPU");
  return 0;
}

}  // namespace

TEST_CASE("read_steps and saves taken while the learner rewrites steps in place see each step old or new, never a mix") {
  // The learner's try_update rewrites a step inside an UpdateSection (update_seq odd); the readers outside the
  // learner (read_steps behind `shmreplay dump`, save_checkpoint) must reject a copy that overlapped it. Both
  // threads run on one CPU, so each is preempted wherever the scheduler's tick finds it: the updater inside its
  // copy of a step (the reader then copies a half-rewritten step, which it must see as odd), and the reader inside
  // its copy of the ring (the updater then rewrites steps under it, which it must see as a changed update_seq).
  // On several CPUs the two copies, both forward and at the same speed, would seldom interleave so that a torn
  // copy ends before the section does. Every update writes a new version, so any two parts of a torn copy differ.
  constexpr uint64_t kSteps = 4;
  SegmentGuard guard(unique_name("ckpt-update"));
  Buffer b = Buffer::create(guard.name(), 1, kSteps, kWordsSchema);
  {
    Writer w(b, {0});
    std::vector<uint64_t> words(kWords);
    for (uint64_t s = 0; s < kSteps; ++s) {
      std::fill(words.begin(), words.end(), version_word(s, 0));
      w.push(std::vector<int32_t>{0}, {field_bytes(words)});
    }
  }
  const std::size_t cpu = first_usable_cpu();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> updates{0};
  std::atomic<int> pinned{0};
  std::thread updater([&] {
    pinned += pin_to(cpu) ? 1 : 0;
    Sampler learner(b);
    std::vector<uint64_t> source(kWords);
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      // Filling the new version takes about as long as the copy inside the section: the updater is preempted
      // inside and outside sections alike.
      const uint64_t step = n % kSteps;
      std::fill(source.begin(), source.end(), version_word(step, n / kSteps + 1));
      if (learner.try_update(0, step, {field_bytes(source)})) ++n;
    }
    updates = n;
  });

  uint64_t reads = 0;
  uint64_t saves = 0;
  uint64_t contended = 0;
  std::string violation;
  std::thread reader([&] {
    pinned += pin_to(cpu) ? 1 : 0;
    // Dumps through a read-only mapping of their own (as `shmreplay dump` does), saves through the updater's
    // mapping (ThreadSanitizer pairs accesses by address, so it checks only the saves' side of the race).
    const Inspector insp(guard.name());
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    // At least run_seconds(), one read and one save; at most 60 s (a failure, below).
    for (uint64_t i = 0; violation.empty() && elapsed() < 60; ++i) {
      if (elapsed() >= test::run_seconds(0.5) && reads > 0 && saves > 0) break;
      try {
        if (i % 16 == 15 && saves < 8) {
          FileGuard file(temp_path("ckpt-update"));
          SegmentGuard copy(unique_name("ckpt-update-copy"));
          save_checkpoint(b, file.path());
          load_checkpoint(file.path(), copy.name());
          const Buffer loaded = Buffer::open(copy.name(), {.read_only = true});
          for (uint64_t s = 0; s < kSteps && violation.empty(); ++s) {
            const std::string got = stored_step(loaded, 0, s);
            violation = check_words(reinterpret_cast<const std::byte*>(got.data()), s);
            if (!violation.empty()) violation = "saved: " + violation;
          }
          ++saves;
        } else {
          const StepRecords r = insp.read_steps(0, 0, kSteps);
          for (uint64_t k = 0; k < r.count && violation.empty(); ++k) {
            violation = check_words(r.bytes.data() + k * r.record_bytes, r.first_step + k);
            if (!violation.empty()) violation = "dumped: " + violation;
          }
          ++reads;
        }
      } catch (const Error& e) {
        if (e.errc() != Errc::contended) throw;
        ++contended;  // the learner rewrote the env during every attempt: allowed, and checks nothing
      }
    }
    stop = true;
  });
  reader.join();
  stop = true;
  updater.join();
  MESSAGE(fmt::format("{} in-place updates; {} reads and {} saves checked, {} gave up (contended)", updates.load(),
                      reads, saves, contended));
  CHECK(pinned.load() == 2);
  CHECK(violation == "");
  CHECK(updates.load() > 0);
  CHECK(reads > 0);
  CHECK(saves > 0);
}
