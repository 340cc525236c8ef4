// tests/checkpoint/compressed.cpp: checkpoints of compressed fields (format 2.3; docs/design/checkpoints.md,
// "Compressed fields"): the records saved as they are, smaller than the decoded steps, loaded back byte-exact for a
// stack on either axis and an unstacked field; chains of such links; a record that fails its CRC-32C refused by
// verify and load (never loaded) and by a save of a corrupt segment; a load into a smaller budget coding the frames
// again; a format 2.2 file (decoded records) still loaded. Part of test_checkpoint.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "checkpoint/chain_helpers.hpp"
#include "checkpoint/checkpoint_helpers.hpp"
#include "detail/os/crc32.hpp"
#include "shmreplay/internal/checkpoint_format.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;
namespace fmtck = shmreplay::checkpoint_format;

namespace {

constexpr uint64_t kPixels = 12 * 12;  // one frame

// Frame `id` of env `env`: a flat shade with a bar that moves with the id (compressible, and unlike its neighbour).
std::vector<uint8_t> frame_of(uint64_t env, uint64_t id) {
  std::vector<uint8_t> f(kPixels, static_cast<uint8_t>(17 * env + 3));
  if (id == 0) return std::vector<uint8_t>(kPixels, 0);
  for (uint64_t r = 0; r < 12; ++r) f[r * 12 + id % 12] = static_cast<uint8_t>(id * 7);
  f[id % kPixels] = static_cast<uint8_t>(id);
  return f;
}

// Pushes `steps` steps into every env of `b` (field 0 compressed, depth frames per step on axis 0 or the last axis,
// or one frame; field 1 the step number), episodes of 7 to 22 steps starting from zero frames. `next` keeps each
// env's stack between calls.
struct Pusher {
  uint64_t depth;
  bool last_axis;
  std::vector<std::vector<uint64_t>> stacks;  // per env: frame ids, oldest first
  std::vector<uint64_t> next_id, left;
  std::mt19937_64 g{5};

  Pusher(uint64_t envs, uint64_t depth_, bool last)
      : depth(depth_), last_axis(last), stacks(envs, std::vector<uint64_t>(depth_, 0)), next_id(envs, 1), left(envs, 0) {}

  std::vector<uint8_t> field(uint64_t env) const {
    std::vector<uint8_t> out(depth * kPixels);
    for (uint64_t k = 0; k < depth; ++k) {
      const std::vector<uint8_t> f = frame_of(env, stacks[env][k]);
      for (uint64_t p = 0; p < kPixels; ++p) (last_axis ? out[p * depth + k] : out[k * kPixels + p]) = f[p];
    }
    return out;
  }

  // Env e's next step's field.
  std::vector<uint8_t> next(uint64_t e) {
    if (left[e] == 0) {  // a new episode: zero frames
      left[e] = 7 + g() % 16;
      std::fill(stacks[e].begin(), stacks[e].end(), 0);
    }
    --left[e];
    stacks[e].erase(stacks[e].begin());
    stacks[e].push_back(next_id[e]++);
    return field(e);
  }

  void push(Writer& w, Buffer& b, uint64_t steps) {
    for (uint64_t s = 0; s < steps; ++s) {
      for (uint64_t e = 0; e < b.num_envs(); ++e) {
        const std::vector<uint8_t> obs = next(e);
        const auto n = static_cast<uint32_t>(w.head(e));
        w.push_one(e, {{obs.data(), obs.size()}, {&n, sizeof n}});
      }
    }
  }
};

// Every env's view of `a` equals `b`'s, byte for byte (the same window unless `b` may hold fewer steps).
void check_same_steps(const Buffer& a, const Buffer& b, bool fewer_ok = false) {
  for (uint64_t e = 0; e < a.num_envs(); ++e) {
    const StepRecords ra = read_steps(a, e, 0, UINT64_MAX);
    const StepRecords rb = read_steps(b, e, 0, UINT64_MAX);
    CAPTURE(e);
    REQUIRE(ra.first_step + ra.count == rb.first_step + rb.count);
    if (fewer_ok) {
      REQUIRE(rb.first_step >= ra.first_step);
    } else {
      REQUIRE(rb.first_step == ra.first_step);
    }
    REQUIRE(rb.count > 0);
    for (uint64_t i = 0; i < rb.count; ++i) {
      const uint64_t k = i + (rb.first_step - ra.first_step);
      for (std::size_t f = 0; f < a.schema().size(); ++f) {
        CAPTURE(rb.first_step + i);
        REQUIRE(std::memcmp(ra.field(k, f).data(), rb.field(i, f).data(), rb.field(i, f).size()) == 0);
      }
    }
  }
}

// Rewrites env 0's section header in `bytes` with `edit`, then its header CRC.
template <class Edit>
void edit_env0(std::string& bytes, const CheckpointInfo& info, Edit edit) {
  fmtck::EnvSection s{};
  std::memcpy(&s, bytes.data() + info.envs[0].offset, sizeof s);
  edit(s);
  s.header_crc = 0;
  s.header_crc = detail::crc32(0, &s, sizeof s);
  std::memcpy(bytes.data() + info.envs[0].offset, &s, sizeof s);
}

}  // namespace

TEST_CASE("a checkpoint of compressed fields saves their records as they are, far smaller than the decoded steps, "
          "and loads back byte-exact") {
  struct Case {
    const char* spec;
    uint64_t depth;
    bool last_axis;
  };
  for (const Case c : {Case{"obs:u8[4,12,12]:stack=0:lz4", 4, false}, Case{"obs:u8[12,12,4]:stack=-1:zstd=3", 4, true},
                       Case{"obs:u8[12,12]:zstd=1", 1, false}}) {
    CAPTURE(c.spec);
    SegmentGuard src(unique_name("ckpt-packed"));
    SegmentGuard as_is(unique_name("ckpt-packed-load")), decoded(unique_name("ckpt-packed-dec"));
    FileGuard packed_file(temp_path("ckpt-packed")), decoded_file(temp_path("ckpt-packed-dec"));
    Buffer b = Buffer::create(src.name(), 2, 64, Schema::parse(fmt::format("{} n:u32", c.spec)));
    Pusher pusher(2, c.depth, c.last_axis);
    Writer w(b, {0, 1});
    pusher.push(w, b, 150);  // wrapped twice
    const CheckpointInfo packed = save_checkpoint(b, packed_file.path());
    CHECK(packed.format_minor == checkpoint_format::kFormatMinor);
    CHECK(packed.record_bytes == 8 + 4);
    CHECK(packed.envs[0].frame_bytes > 0);
    const CheckpointInfo whole = save_checkpoint(b, decoded_file.path(), {.decode_compressed = true});
    CHECK(whole.record_bytes == b.schema().step_bytes());
    CHECK(whole.envs[0].frame_bytes == 0);
    // A stack shares three of its four frames with the step before; a lone 144-byte frame compresses less.
    CHECK(packed.file_bytes * (c.depth == 1 ? 1 : 5) < whole.file_bytes);
    uint64_t stored = 0;
    for (uint64_t e = 0; e < 2; ++e) stored += read_steps(b, e, 0, UINT64_MAX).count;
    CHECK(verify_checkpoint(packed_file.path()).total_steps == stored);
    (void)load_checkpoint(packed_file.path(), as_is.name());
    (void)load_checkpoint(decoded_file.path(), decoded.name());
    check_same_steps(b, Buffer::open(as_is.name()));
    check_same_steps(b, Buffer::open(decoded.name()));
  }
}

TEST_CASE("a chain of links of a compressed buffer restores its newest link byte-exact, each link holding only "
          "its new steps' records") {
  SegmentGuard src(unique_name("ckpt-packed-chain")), dst(unique_name("ckpt-packed-chain-load"));
  DirGuard dir(temp_dir("ckpt-packed-chain"));
  Buffer b = Buffer::create(src.name(), 2, 96, Schema::parse("obs:u8[4,12,12]:stack=0:lz4 n:u32"));
  Pusher pusher(2, 4, false);
  Writer w(b, {0, 1});
  pusher.push(w, b, 80);
  const LinkResult first = save_link(b, dir.path());
  pusher.push(w, b, 10);
  const LinkResult second = save_link(b, dir.path());
  CHECK(second.info.chain_id == first.info.chain_id);
  CHECK(second.info.total_steps == 20);
  CHECK(second.info.envs[0].data_from == 80);
  pusher.push(w, b, 30);  // wrapped: the first link's oldest steps are gone from the buffer
  (void)save_link(b, dir.path());
  (void)load_chain(dir.path(), dst.name());
  check_same_steps(b, Buffer::open(dst.name()));
}

TEST_CASE("a compressed record that fails its CRC-32C in a checkpoint is refused by verify and load, never loaded") {
  SegmentGuard src(unique_name("ckpt-packed-bad")), dst(unique_name("ckpt-packed-bad-load"));
  FileGuard file(temp_path("ckpt-packed-bad"));
  Buffer b = Buffer::create(src.name(), 1, 32, Schema::parse("obs:u8[4,12,12]:stack=0:zstd=3 n:u32"));
  Pusher pusher(1, 4, false);
  Writer w(b, {0});
  pusher.push(w, b, 20);
  const CheckpointInfo info = save_checkpoint(b, file.path());
  std::string bytes = slurp(file.path());
  const CheckpointEnv& e = info.envs[0];
  const uint64_t block = e.records_offset + e.steps * info.record_bytes;
  // A byte of the first frame's record (after the field's header and the record's).
  const uint64_t at = block + sizeof(fmtck::PackedBlockHeader) + sizeof(fmtck::PackedFrameBytes);
  bytes[at] = static_cast<char>(bytes[at] ^ 0x21);
  spit(file.path(), bytes);
  std::string m;
  CHECK(error_of([&] { (void)verify_checkpoint(file.path()); }, &m) == static_cast<int>(Errc::corrupt));
  CHECK(contains(m, "compressed frames"));
  CHECK(contains(m, "fail their checksum"));
  // The same flip in a file whose block checksum was written after it: the record's own CRC-32C refuses it.
  edit_env0(bytes, info, [&](fmtck::EnvSection& s) {
    s.frame_crc = detail::crc32(0, bytes.data() + block, e.frame_bytes);
  });
  spit(file.path(), bytes);
  CHECK(error_of([&] { (void)verify_checkpoint(file.path()); }, &m) == static_cast<int>(Errc::corrupt));
  CHECK(contains(m, "fails its CRC-32C"));
  CHECK(contains(m, "field 'obs'"));
  CHECK(error_of([&] { (void)load_checkpoint(file.path(), dst.name()); }, &m) == static_cast<int>(Errc::corrupt));
  CHECK_FALSE(Buffer::exists(dst.name()));
}

TEST_CASE("a save of a segment whose compressed record is corrupt is refused naming the field, and writes no file") {
  SegmentGuard src(unique_name("ckpt-packed-seg"));
  FileGuard file(temp_path("ckpt-packed-seg"));
  Buffer b = Buffer::create(src.name(), 1, 32, Schema::parse("obs:u8[4,12,12]:stack=0:lz4 n:u32"));
  Pusher pusher(1, 4, false);
  Writer w(b, {0});
  pusher.push(w, b, 20);
  Segment& seg = segment_of(b);
  const layout::PackedFrameDesc& d = seg.packed_descs(0, 0)[9 % seg.packed()[0].stack.frames];
  REQUIRE(d.frame.load() == 9);
  std::byte* byte = seg.packed_ring(0, 0) + d.pos.load() % seg.packed()[0].ring_bytes;
  *byte = static_cast<std::byte>(static_cast<uint8_t>(*byte) ^ 0x5a);
  std::string m;
  CHECK(error_of([&] { (void)save_checkpoint(b, file.path()); }, &m) == static_cast<int>(Errc::corrupt));
  CHECK(contains(m, "field 'obs' of env 0"));
  CHECK(contains(m, "frame 9"));
  CHECK(::access(file.path().c_str(), F_OK) != 0);
}

TEST_CASE("a load into a buffer with a smaller byte budget codes the frames again: the newest steps that fit are "
          "exact, the older ones leave the view counted as lost to the budget") {
  SegmentGuard src(unique_name("ckpt-packed-budget")), dst(unique_name("ckpt-packed-budget-load"));
  FileGuard file(temp_path("ckpt-packed-budget"));
  const Schema schema = Schema::parse("obs:u8[4,12,12]:stack=0:lz4 n:u32");
  Buffer b = Buffer::create(src.name(), 1, 64, schema);
  Pusher pusher(1, 4, false);
  Writer w(b, {0});
  pusher.push(w, b, 100);
  (void)save_checkpoint(b, file.path());
  // The least ring a compressed field may have: two steps' frames as pushed.
  Buffer small = Buffer::create(dst.name(), 1, 64, schema, {.compressed_bytes = 8 * kPixels * 4});
  (void)load_checkpoint_into(small, file.path());
  check_same_steps(b, small, /*fewer_ok=*/true);
  const StepRecords kept = read_steps(small, 0, 0, UINT64_MAX);
  CHECK(kept.first_step > 100 - 64);
}

TEST_CASE("a format 2.2 checkpoint of a compressed buffer (decoded records) still loads byte-exact") {
  SegmentGuard src(unique_name("ckpt-packed-22")), dst(unique_name("ckpt-packed-22-load"));
  FileGuard file(temp_path("ckpt-packed-22"));
  Buffer b = Buffer::create(src.name(), 2, 32, Schema::parse("obs:u8[4,12,12]:stack=0:lz4 n:u32"));
  Pusher pusher(2, 4, false);
  Writer w(b, {0, 1});
  pusher.push(w, b, 50);
  (void)save_checkpoint(b, file.path(), {.decode_compressed = true});
  // Without a cap and with decoded records, 2.3 differs from 2.2 only in its version: write 2.2's.
  std::string bytes = slurp(file.path());
  fmtck::CheckpointHeader h{};
  std::memcpy(&h, bytes.data(), sizeof h);
  REQUIRE(h.record_bytes == 0);
  h.format_minor = 2;
  h.header_crc = 0;
  h.header_crc = detail::crc32(0, &h, sizeof h);
  std::memcpy(bytes.data(), &h, sizeof h);
  spit(file.path(), bytes);
  const LoadResult r = load_checkpoint(file.path(), dst.name());
  CHECK(r.info.format_minor == 2);
  check_same_steps(b, Buffer::open(dst.name()));
}

TEST_CASE("saves of a compressed buffer taken while its writer pushes past a tight byte budget load back with every "
          "step exact") {
  SegmentGuard src(unique_name("ckpt-packed-live"));
  FileGuard file(temp_path("ckpt-packed-live"));
  const Schema schema = Schema::parse("obs:u8[4,12,12]:stack=0:lz4 n:u32");
  // A ring of about 20 steps' frames for 64 slots: the oldest steps keep leaving the view while the saves copy.
  Buffer b = Buffer::create(src.name(), 1, 64, schema, {.compressed_bytes = 20 * kPixels});
  Pusher pusher(1, 4, false);
  constexpr uint64_t kSteps = 4000;
  std::vector<std::vector<uint8_t>> pushed;
  for (uint64_t s = 0; s < kSteps; ++s) pushed.push_back(pusher.next(0));
  std::atomic<bool> done{false}, stop{false};
  std::atomic<uint64_t> saves_done{0};
  std::thread writer([&] {
    Writer w(b, {0});
    for (uint64_t s = 0; s < kSteps && !stop; ++s) {
      const auto n = static_cast<uint32_t>(s);
      w.push_one(0, {{pushed[s].data(), pushed[s].size()}, {&n, sizeof n}});
      if (s % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));  // saves overlap the pushes
      while (s % 400 == 399 && saves_done.load() < s / 400 + 1 && !stop) std::this_thread::yield();  // >= 10 saves
    }
    done = true;
  });
  struct Join {  // a failed check below throws: the writer stops and is joined first
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      t.join();
    }
  } join{stop, writer};
  uint64_t saves = 0, checked = 0;
  std::string failure;  // the first step a load did not give back as pushed
  while (segment_of(b).env_control(0).head.load() == 0) std::this_thread::yield();
  while (!done && failure.empty()) {
    const CheckpointInfo info = save_checkpoint(b, file.path(), {.decode_compressed = saves % 2 == 1});
    SegmentGuard dst(unique_name("ckpt-packed-live-load"));
    (void)load_checkpoint(file.path(), dst.name());
    const Buffer loaded = Buffer::open(dst.name());
    const StepRecords r = read_steps(loaded, 0, 0, UINT64_MAX);
    for (uint64_t i = 0; i < r.count && failure.empty(); ++i) {
      const uint64_t step = r.first_step + i;
      uint32_t n = 0;
      std::memcpy(&n, r.field(i, 1).data(), sizeof n);
      if (n != step || std::memcmp(r.field(i, 0).data(), pushed[step].data(), pushed[step].size()) != 0) {
        failure = fmt::format("save {} ({}): step {} of window {} .. {} reads as step {}{}", saves,
                              saves % 2 == 1 ? "decoded" : "as they are", step, info.envs[0].first_step,
                              info.envs[0].head - 1, n, n == step ? " with other obs bytes" : "");
      }
    }
    checked += r.count;
    saves_done = ++saves;
  }
  CHECK(failure == "");
  MESSAGE(saves, " saves while the writer pushed, ", checked, " loaded steps checked");
  CHECK(saves >= 10);
  CHECK(checked > 0);
}

TEST_CASE("a load into a buffer whose field has another codec is refused naming both declarations") {
  SegmentGuard src(unique_name("ckpt-packed-codec")), dst(unique_name("ckpt-packed-codec-load"));
  FileGuard file(temp_path("ckpt-packed-codec"));
  Buffer b = Buffer::create(src.name(), 1, 16, Schema::parse("obs:u8[4,12,12]:stack=0:lz4 n:u32"));
  Pusher pusher(1, 4, false);
  Writer w(b, {0});
  pusher.push(w, b, 10);
  (void)save_checkpoint(b, file.path());
  Buffer other = Buffer::create(dst.name(), 1, 16, Schema::parse("obs:u8[4,12,12]:stack=0:zstd=3 n:u32"));
  std::string m;
  CHECK(error_of([&] { (void)load_checkpoint_into(other, file.path()); }, &m) ==
        static_cast<int>(Errc::schema_mismatch));
  CHECK(contains(m, ":lz4"));
  CHECK(contains(m, ":zstd=3"));
  CHECK(read_steps(other, 0, 0, UINT64_MAX).count == 0);
}
