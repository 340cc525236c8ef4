// tests/storage/compressed.cpp: compressed fields (":lz4", ":zstd=LEVEL"; layout 1.10, the compressed storage kind,
// detail/protocol/packed_frames.hpp): stacks byte-exact over episode resets, restarts and the rings' wrap, for a
// stack on the first axis, one on the last axis and an unstacked field, through read_steps and sample; a byte budget
// that the frames overflow makes the oldest steps leave the view, exactly and counted; a flipped byte in a record
// is refused as corrupt, never returned. Part of test_storage.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "detail/os/crc32c.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"

using namespace shmreplay;

namespace {

constexpr uint64_t kSide = 16;                 // frames of kSide x kSide bytes
constexpr uint64_t kFrame = kSide * kSide;
constexpr uint64_t kDepth = 4;

// Frame `id` of env `env`: a mostly flat picture with a block whose place and shade follow the id (compressible, as
// an Atari frame is); `noisy` 1: every byte from a hash (incompressible); 2: every third frame so (a frame the codec
// cannot shrink between frames coded against their predecessor). Id 0 is the zero padding frame.
void make_frame(uint64_t env, uint64_t id, int noisy, uint8_t* out) {
  if (id == 0) {
    std::memset(out, 0, kFrame);
    return;
  }
  if (noisy == 1 || (noisy == 2 && id % 3 == 0)) {
    std::mt19937_64 g(env * 1000003 + id);
    for (uint64_t i = 0; i < kFrame; i += 8) {
      const uint64_t v = g();
      std::memcpy(out + i, &v, 8);
    }
    return;
  }
  std::memset(out, static_cast<int>(40 + env), kFrame);
  const uint64_t x = id % (kSide - 4), y = (id / 3) % (kSide - 4);
  for (uint64_t r = 0; r < 4; ++r) std::memset(out + (y + r) * kSide + x, static_cast<int>(id & 0xff), 4);
}

// One env's pushed steps: each step's four frame ids (oldest first, 0 for padding), episodes of 5 to 40 steps that
// start with three padding frames, as envpool's stacks do.
std::vector<std::array<uint64_t, kDepth>> make_episodes(uint64_t env, uint64_t steps) {
  std::mt19937_64 g(env + 17);
  std::vector<std::array<uint64_t, kDepth>> out;
  uint64_t next_id = 1;
  while (out.size() < steps) {
    const uint64_t len = 5 + g() % 36;
    std::array<uint64_t, kDepth> stack{};
    for (uint64_t t = 0; t < len && out.size() < steps; ++t) {
      for (uint64_t k = 0; k + 1 < kDepth; ++k) stack[k] = stack[k + 1];
      stack[kDepth - 1] = next_id++;
      out.push_back(stack);
    }
  }
  return out;
}

// The field's bytes of a step: [4][16][16] (axis 0), [16][16][4] (axis 2), or one frame [16][16].
enum class Shape { first_axis, last_axis, single };
std::vector<uint8_t> step_bytes(uint64_t env, const std::array<uint64_t, kDepth>& ids, Shape shape, int noisy) {
  std::vector<uint8_t> frames(kDepth * kFrame);
  for (uint64_t k = 0; k < kDepth; ++k) make_frame(env, ids[k], noisy, frames.data() + k * kFrame);
  if (shape == Shape::first_axis) return frames;
  if (shape == Shape::single) return {frames.end() - kFrame, frames.end()};
  std::vector<uint8_t> hwc(kDepth * kFrame);
  for (uint64_t p = 0; p < kFrame; ++p) {
    for (uint64_t k = 0; k < kDepth; ++k) hwc[p * kDepth + k] = frames[k * kFrame + p];
  }
  return hwc;
}

struct Case {
  const char* spec;
  Shape shape;
};

// Pushes `steps` steps into each of `envs` envs of a fresh buffer of capacity `cap` whose field `obs` is `c`, then
// checks read_steps and sample against the pushed bytes; returns the buffer's views' lower bounds per env.
std::vector<uint64_t> push_and_check(const Case& c, uint64_t envs, uint64_t cap, uint64_t steps, int noisy,
                                     const CreateOptions& options = {}) {
  const std::string name = test::unique_name("compressed");
  test::SegmentGuard guard(name);
  Buffer b = Buffer::create(name, envs, cap, Schema::parse(fmt::format("{} n:u32", c.spec)), options);
  REQUIRE(segment_of(b).field_kind(0) == layout::kStorageCompressed);
  std::vector<std::vector<std::array<uint64_t, kDepth>>> eps;
  for (uint64_t e = 0; e < envs; ++e) eps.push_back(make_episodes(e, steps));
  {
    std::vector<uint64_t> ids(envs);
    for (uint64_t e = 0; e < envs; ++e) ids[e] = e;
    Writer w(b, ids);
    for (uint64_t s = 0; s < steps; ++s) {
      for (uint64_t e = 0; e < envs; ++e) {
        const std::vector<uint8_t> obs = step_bytes(e, eps[e][s], c.shape, noisy);
        const auto n = static_cast<uint32_t>(s);
        w.push_one(e, {{obs.data(), obs.size()}, {&n, 4}});
      }
    }
  }
  std::vector<uint64_t> lows;
  for (uint64_t e = 0; e < envs; ++e) {
    const StepRecords r = read_steps(b, e, 0, steps);
    CHECK(r.first_step + r.count == steps);
    CHECK(r.first_step >= steps - cap);
    lows.push_back(r.first_step);
    for (uint64_t i = 0; i < r.count; ++i) {
      const uint64_t s = r.first_step + i;
      const std::vector<uint8_t> want = step_bytes(e, eps[e][s], c.shape, noisy);
      CAPTURE(e);
      CAPTURE(s);
      REQUIRE(std::memcmp(r.field(i, 0).data(), want.data(), want.size()) == 0);
    }
  }
  Sampler sampler(b);
  Rng rng(7);
  SampleBatch batch;
  const std::size_t length = 6;
  for (int call = 0; call < 20; ++call) {
    sampler.sample(View::replay, 16, length, 1.0, rng, batch);
    const auto obs = batch.field(0);
    const uint64_t bytes = obs.size() / (16 * length);
    for (std::size_t row = 0; row < 16; ++row) {
      const uint64_t e = batch.env_ids()[row];
      for (std::size_t t = 0; t < length; ++t) {
        const uint64_t s = batch.start_steps()[row] + t;
        if (batch.mask()[row * length + t] == 0) continue;
        REQUIRE(s >= lows[e]);
        const std::vector<uint8_t> want = step_bytes(e, eps[e][s], c.shape, noisy);
        REQUIRE(std::memcmp(obs.data() + (row * length + t) * bytes, want.data(), bytes) == 0);
      }
    }
  }
  return lows;
}

}  // namespace

TEST_CASE("compressed fields are read back byte-exact over episode resets, restarts and the rings' wrap") {
  const Case cases[] = {
      {"obs:u8[4,16,16]:stack=0:lz4", Shape::first_axis},
      {"obs:u8[4,16,16]:stack=0:zstd=3", Shape::first_axis},
      {"obs:u8[16,16,4]:stack=-1:zstd=1", Shape::last_axis},
      {"obs:u8[16,16]:lz4", Shape::single},
      {"obs:u8[16,16]:zstd", Shape::single},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec);
    // 3 envs x 64 slots, 400 steps each: every ring wraps several times; the default budget holds every step, and
    // a reserve of 16 restarts every stack's frames (episodes of 5 to 40 steps: about 3 in a window).
    CreateOptions options;
    if (c.shape != Shape::single) options.stack_restarts = 16;
    const std::vector<uint64_t> lows = push_and_check(c, 3, 64, 400, false, options);
    for (const uint64_t lo : lows) CHECK(lo == 400 - 64);
  }
}

TEST_CASE("frames the codec cannot shrink, among frames coded against their predecessor, are stored as pushed and read back exact") {
  // Every third frame is noise: the codec's output does not fit, the frame is stored raw, and the next frames are
  // coded against it (or alone, at a key frame) as if nothing happened; a failed zstd frame leaves no prefix behind.
  for (const char* spec : {"obs:u8[4,16,16]:stack=0:zstd=3", "obs:u8[4,16,16]:stack=0:lz4"}) {
    CAPTURE(spec);
    CreateOptions options;
    options.stack_restarts = 16;
    options.expected_compression = 1;
    const std::vector<uint64_t> lows = push_and_check({spec, Shape::first_axis}, 2, 64, 300, 2, options);
    for (const uint64_t lo : lows) CHECK(lo == 300 - 64);
  }
}

TEST_CASE("a byte budget the frames overflow makes the oldest steps leave the view, counted, the rest exact") {
  const std::string name = test::unique_name("compressed-budget");
  // Incompressible frames (stored as pushed) in rings of 16 steps' frames: far fewer than the 64 slots.
  CreateOptions options;
  options.compressed_bytes = 2 * 16 * kFrame * 2;  // two envs, about 16 frames each
  const std::vector<uint64_t> lows =
      push_and_check({"obs:u8[4,16,16]:stack=0:lz4", Shape::first_axis}, 2, 64, 300, true, options);
  for (const uint64_t lo : lows) {
    CHECK(lo > 300 - 64);  // fewer steps than the slots: the budget, not the capacity, bounds the view
    CHECK(lo < 300 - 4);
  }
}

TEST_CASE("a flipped byte in a compressed record is refused as corrupt by read_steps and sample, never returned") {
  const std::string name = test::unique_name("compressed-corrupt");
  test::SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 1, 32, Schema::parse("obs:u8[4,16,16]:stack=0:zstd=3"));
  std::vector<std::array<uint64_t, kDepth>> eps = make_episodes(0, 20);
  {
    Writer w(b, {0});
    for (const auto& ids : eps) {
      const std::vector<uint8_t> obs = step_bytes(0, ids, Shape::first_axis, false);
      w.push_one(0, {{obs.data(), obs.size()}});
    }
  }
  Segment& seg = segment_of(b);
  REQUIRE(seg.packed().size() == 1);
  // The record of frame 5: flip its first byte.
  const layout::PackedFrameDesc& d = seg.packed_descs(0, 0)[5 % seg.packed()[0].stack.frames];
  REQUIRE(d.frame.load() == 5);
  std::byte* at = seg.packed_ring(0, 0) + d.pos.load() % seg.packed()[0].ring_bytes;
  *at = static_cast<std::byte>(static_cast<uint8_t>(*at) ^ 0x5a);
  std::string m;
  CHECK(test::error_of([&] { (void)read_steps(b, 0, 0, 20); }, &m) == static_cast<int>(Errc::corrupt));
  CHECK(test::contains(m, "field 'obs' of env 0"));
  CHECK(test::contains(m, "CRC-32"));
  Sampler sampler(b);
  Rng rng(1);
  SampleBatch batch;
  // Sequences of 20 steps cover every step: each call meets the flipped frame.
  CHECK(test::error_of([&] { sampler.sample(View::replay, 4, 20, 1.0, rng, batch); }, &m) ==
        static_cast<int>(Errc::corrupt));
  CHECK(test::contains(m, "frame 5"));
  // Steps whose frames are all before it still read.
  const StepRecords early = read_steps(b, 0, 0, 2);
  CHECK(early.count == 2);
}

TEST_CASE("a compressed field's declaration round-trips and bad ones are refused naming the option") {
  CHECK(Schema::parse("obs:u8[4,84,84]:stack=0:lz4").to_string() == "obs:u8[4,84,84]:stack=0:lz4");
  CHECK(Schema::parse("obs:u8[64,64,3]:zstd=1")[0].codec_level == 1);
  CHECK(Schema::parse("obs:u8[64,64,3]:zstd")[0].codec_level == kDefaultZstdLevel);
  CHECK(Schema::parse("obs:u8[64,64,3]:zstd=-3").to_string() == "obs:u8[64,64,3]:zstd=-3");
  CHECK(Schema::parse("obs:u8[84,84,4]:lz4:stack=-1")[0].stack_axis == 2u);
  std::string m;
  CHECK(test::error_of([&] { (void)Schema::parse("obs:u8[4]:zstd=0"); }, &m) != 0);
  CHECK(test::contains(m, "zstd level"));
  CHECK(test::error_of([&] { (void)Schema::parse("obs:u8[4]:zstd=20"); }, &m) != 0);
  CHECK(test::error_of([&] { (void)Schema::parse("obs:u8[4]:lz4:zstd"); }, &m) != 0);
  CHECK(test::contains(m, "at most one"));
  CHECK(test::error_of([&] { (void)Schema::parse("obs:u8[4]:gzip"); }, &m) != 0);
  CHECK(test::contains(m, "found 'gzip'"));
  const auto diffs = Schema::differences(Schema::parse("obs:u8[4]:lz4"), Schema::parse("obs:u8[4]:zstd=3"));
  REQUIRE(diffs.size() == 1);
  CHECK(test::contains(diffs[0], "compressed with lz4"));
}

TEST_CASE("a compressed stack under the episodes continuity rule opens again and reads back exact") {
  const std::string name = test::unique_name("compressed-episodes");
  test::SegmentGuard guard(name);
  CreateOptions options;
  options.episodes = {.done = "done"};
  options.stack_continuity = StackContinuity::episodes;
  options.stack_restarts = 16;
  Buffer b = Buffer::create(name, 1, 64, Schema::parse("obs:u8[4,16,16]:stack=0:lz4 done:bool"), options);
  const std::vector<std::array<uint64_t, kDepth>> eps = make_episodes(0, 200);
  {
    Writer w(b, {0});
    for (std::size_t s = 0; s < eps.size(); ++s) {
      const std::vector<uint8_t> obs = step_bytes(0, eps[s], Shape::first_axis, false);
      // The step ends its episode when the next one starts with padding (make_episodes' resets).
      const bool done = s + 1 < eps.size() && eps[s + 1][0] == 0 && eps[s + 1][kDepth - 2] == 0;
      w.push_one(0, {{obs.data(), obs.size()}, {&done, 1}});
    }
  }
  const Buffer again = Buffer::open(name);  // open accepts a compressed stack as the rule's stacked field
  CHECK(again.stack_continuity() == StackContinuity::episodes);
  const StepRecords r = read_steps(again, 0, 0, 200);
  CHECK(r.first_step == 200 - 64);
  for (uint64_t i = 0; i < r.count; ++i) {
    const std::vector<uint8_t> want = step_bytes(0, eps[r.first_step + i], Shape::first_axis, false);
    REQUIRE(std::memcmp(r.field(i, 0).data(), want.data(), want.size()) == 0);
  }
}

TEST_CASE("the planners' draws over views that lost steps to the budget follow their weights (chi-square)") {
  // Two envs of incompressible frames in a budget far below the slots, one with twice the other's steps pushed: the
  // views start where the budget, not the capacity, puts them; starts of sequences of 4 at power 1 are drawn in
  // proportion to the steps left in the view, and transitions uniformly over the stored steps.
  const std::string name = test::unique_name("compressed-chi");
  test::SegmentGuard guard(name);
  CreateOptions options;
  options.compressed_bytes = 2 * 24 * kFrame * 2;
  Buffer b = Buffer::create(name, 2, 64, Schema::parse("obs:u8[4,16,16]:stack=0:lz4"), options);
  {
    Writer w(b, {0, 1});
    for (uint64_t e = 0; e < 2; ++e) {
      const auto eps = make_episodes(e, 150 * (e + 1));
      for (const auto& ids : eps) {
        const std::vector<uint8_t> obs = step_bytes(e, ids, Shape::first_axis, true);
        w.push_one(e, {{obs.data(), obs.size()}});
      }
    }
  }
  Sampler s(b);
  uint64_t lo[2], hi[2];
  for (uint64_t e = 0; e < 2; ++e) {
    hi[e] = s.sizes(e).head;
    lo[e] = hi[e] - s.sizes(e).replay;
    REQUIRE(hi[e] - lo[e] < 64);  // the budget bounds the view
    REQUIRE(hi[e] - lo[e] > 8);
  }
  const auto cell = [&](uint64_t e, uint64_t step) { return (e == 0 ? 0 : hi[0] - lo[0]) + step - lo[e]; };
  const std::size_t cells = (hi[0] - lo[0]) + (hi[1] - lo[1]);
  Rng rng(11);
  SampleBatch batch;
  for (const std::size_t length : {std::size_t{1}, std::size_t{4}}) {
    CAPTURE(length);
    std::vector<uint64_t> counts(cells, 0);
    std::vector<double> prob(cells, 0.0);
    double total = 0;
    for (uint64_t e = 0; e < 2; ++e) {
      for (uint64_t p = lo[e]; p < hi[e]; ++p) {
        prob[cell(e, p)] = static_cast<double>(std::min<uint64_t>(hi[e] - p, length));  // remaining length ^ 1
        total += prob[cell(e, p)];
      }
    }
    for (double& q : prob) q /= total;
    const int calls = 400;
    for (int c = 0; c < calls; ++c) {
      s.sample(View::replay, 64, length, 1.0, rng, batch);
      for (std::size_t row = 0; row < 64; ++row) {
        const uint64_t e = batch.env_ids()[row];
        REQUIRE(batch.start_steps()[row] >= lo[e]);  // never a step the budget lost
        ++counts[cell(e, batch.start_steps()[row])];
      }
    }
    const double chi = test::chi_square(counts, prob, 64.0 * calls);
    CHECK(chi < test::chi_square_bound(static_cast<double>(cells - 1)));
  }
}

TEST_CASE("the records' CRC-32C gives the standard check value, continues across pieces, and the instruction's path "
          "and the table's agree on every length and alignment") {
  const char text[] = "123456789";
  CHECK(detail::crc32c(0, text, 9) == 0xe3069283u);
  CHECK(detail::crc32c_portable(0, text, 9) == 0xe3069283u);
  CHECK(detail::crc32c(detail::crc32c(0, text, 4), text + 4, 5) == 0xe3069283u);
  std::vector<unsigned char> bytes(300);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  for (std::size_t start = 0; start < 9; ++start) {
    for (std::size_t len = 0; len + start <= bytes.size(); len += 37) {
      CAPTURE(start);
      CAPTURE(len);
      CHECK(detail::crc32c(0, bytes.data() + start, len) == detail::crc32c_portable(0, bytes.data() + start, len));
    }
  }
}
