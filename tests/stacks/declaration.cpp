// tests/stacks/declaration.cpp: declaring a stacked field: the text form ":stack=AXIS" (parse, negative axes, the
// round trip, every refusal with its message), Schema::differences, create's geometry (frames per env ring, the
// default reserve, the field table's words) and open's acceptance of a stacked field table (corruptions refused with
// Errc::corrupt, never a crash).
// Part of test_stacks (tests/CMakeLists.txt); its helpers are in stacks_helpers.hpp.
#include <cstddef>
#include <fstream>
#include <iterator>

#include "shmreplay/internal/segment.hpp"
#include "shmreplay/internal/layout.hpp"
#include "stacks_helpers.hpp"

namespace {

// The message of the invalid_schema error that parsing `spec` throws; fails the test if it throws none.
std::string stack_parse_error(const std::string& spec) {
  std::string message;
  const int c = error_of([&] { (void)Schema::parse(spec); }, &message);
  CHECK_MESSAGE(c == code(Errc::invalid_schema), "spec: ", spec, " gave: ", message);
  return message;
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The field table of a mapped segment (the header starts the mapping).
const layout::FieldDesc* field_table(const Buffer& b) {
  const auto* base = reinterpret_cast<const std::byte*>(&segment_of(b).header());
  const uint64_t table = segment_of(b).header().sections[layout::kSectionFields].offset;
  return reinterpret_cast<const layout::FieldDesc*>(base + table);
}

}  // namespace

TEST_CASE("':stack=AXIS' declares a stacked field: the axis, K, the frame bytes, negative axes counted from the end") {
  const Schema s = Schema::parse("obs:u8[4,84,84]:stack=0 action:i32 mid:f32[3,2,5]:stack=1 last:u16[7,3]:stack=-1");
  REQUIRE(s.size() == 4);
  CHECK(s[0].stacked());
  CHECK(s[0].stack_axis == 0u);
  CHECK(s[0].stack_depth() == 4);
  CHECK(s[0].frame_bytes() == 84 * 84);
  CHECK(s[0].bytes() == 4 * 84 * 84);
  CHECK_FALSE(s[1].stacked());
  CHECK(s[1].stack_depth() == 1);  // a field stored as pushed is one frame
  CHECK(s[1].frame_bytes() == 4);
  CHECK(s[2].stack_axis == 1u);
  CHECK(s[2].stack_depth() == 2);
  CHECK(s[2].frame_bytes() == 3 * 5 * 4);
  CHECK(s[3].stack_axis == 1u);  // -1: the last axis, stored normalised
  CHECK(s[3].stack_depth() == 3);
  CHECK(s[3].frame_bytes() == 7 * 2);
  CHECK(Schema::parse("o:u8[3,4,5]:stack=-2")[0].stack_axis == 1u);
  CHECK(Schema::parse("o:u8[3,4,5]:stack=-3")[0].stack_axis == 0u);
  // The step bytes are the whole stack's: users push and sample stacks.
  CHECK(s.step_bytes() == 4 * 84 * 84 + 4 + 3 * 2 * 5 * 4 + 7 * 3 * 2);
}

TEST_CASE("the text form of a stacked field round-trips, with the axis normalised, and stacking is part of equality") {
  const Schema s = Schema::parse("obs:u8[84,84,4]:stack=-1 act:i32 f:f32[2,3]:stack=0");
  CHECK(s.to_string() == "obs:u8[84,84,4]:stack=2 act:i32 f:f32[2,3]:stack=0");
  CHECK(s[0].to_string() == "obs:u8[84,84,4]:stack=2");
  CHECK(Schema::parse(s.to_string()) == s);
  CHECK_FALSE(Schema::parse("obs:u8[84,84,4] act:i32 f:f32[2,3]:stack=0") == s);
  CHECK_FALSE(Schema::parse("obs:u8[84,84,4]:stack=1 act:i32 f:f32[2,3]:stack=0") == s);
  // The constructor takes the same field.
  const Field f{"obs", DType::u8, {84, 84, 4}, 2};
  CHECK(Schema({f, Field{"act", DType::i32, {}, std::nullopt}, Field{"f", DType::f32, {2, 3}, 0}}) == s);
}

TEST_CASE("a stacked declaration that cannot be is refused with the field, the column and what was expected") {
  {
    const std::string m = stack_parse_error("obs:u8[4]:stack=1");
    CHECK(contains(m, "field 1 'obs' at column 17"));
    CHECK(contains(m, "stack axis 1 is not an axis of shape [4]"));
  }
  CHECK(contains(stack_parse_error("a:f32 obs:u8[4,5]:stack=-3"), "field 2 'obs'"));
  CHECK(contains(stack_parse_error("a:f32 obs:u8[4,5]:stack=-3"), "stack axis -3 is not an axis of shape [4,5]"));
  CHECK(contains(stack_parse_error("obs:u8[4]:stack=-0"), "stack axis -0 is not an axis"));
  CHECK(contains(stack_parse_error("obs:u8[4]:stack=4294967296"), "stack axis 4294967296 is not an axis"));
  // A stacked dimension of 1 is one frame: nothing to stack.
  CHECK(contains(stack_parse_error("obs:u8[1,5]:stack=0"),
                 "axis 0 of shape [1,5] stacks 1 frame; a stacked axis needs at least 2 (drop ':stack='"));
  // A scalar has no axis.
  CHECK(contains(stack_parse_error("obs:u8:stack=0"), "stack axis 0 is not an axis of shape scalar"));
  // Garbage after ':'.
  CHECK(contains(stack_parse_error("obs:u8[4]:stak=0"),
                 "expected an option after ':' (stack=AXIS, lz4, zstd=LEVEL or derived; as in obs:u8[4]:stack=0:lz4)"));
  CHECK(contains(stack_parse_error("obs:u8[4]:"), "expected an option after ':'"));
  CHECK(contains(stack_parse_error("obs:u8[4]:axis=0"), "found 'axis='"));
  CHECK(contains(stack_parse_error("obs:u8[4]:stack=x"), "expected the stacked axis (an integer, -1 for the last)"));
  CHECK(contains(stack_parse_error("obs:u8[4]:stack="), "found the end of the spec"));
  CHECK(contains(stack_parse_error("obs:u8[4]:stack=0x"), "unexpected 'x' after the field"));
  CHECK(contains(stack_parse_error("obs:u8[4]:stack=99999999999999999999999"), "expected the stacked axis"));
  // The constructor validates a Field the same way.
  std::string m;
  CHECK(error_of([] { (void)Schema({Field{"o", DType::u8, {4, 5}, 2}}); }, &m) == code(Errc::invalid_schema));
  CHECK(contains(m, "stack axis 2 is not an axis of shape [4,5], which has 2 dimensions"));
  CHECK(error_of([] { (void)Schema({Field{"o", DType::u8, {4, 1}, 1}}); }, &m) == code(Errc::invalid_schema));
  CHECK(contains(m, "axis 1 of shape [4,1] stacks 1 frame"));
  CHECK(error_of([] { (void)Schema({Field{"o", DType::u8, {}, 0}}); }, &m) == code(Errc::invalid_schema));
  CHECK(contains(m, "not an axis of shape scalar"));
}

TEST_CASE("differences names a field whose stacking differs, and open with an expected schema refuses it") {
  const auto d = Schema::differences(Schema::parse("o:u8[4,5]:stack=0 p:u8[2] q:u8[2,3]:stack=0"),
                                     Schema::parse("o:u8[4,5] p:u8[2]:stack=0 q:u8[2,3]:stack=1"));
  REQUIRE(d.size() == 3);
  CHECK(d[0] == "field 'o': expected stacked on axis 0, actual not stacked");
  CHECK(d[1] == "field 'p': expected not stacked, actual stacked on axis 0");
  CHECK(d[2] == "field 'q': expected stacked on axis 0, actual stacked on axis 1");

  SegmentGuard guard(unique_name("stk-diff"));
  (void)Buffer::create(guard.name(), 1, 4, Schema::parse("o:u8[4,5]:stack=0"));
  std::string m;
  CHECK(error_of([&] { (void)Buffer::open(guard.name(), {.expected_schema = Schema::parse("o:u8[4,5]")}); }, &m) ==
        code(Errc::schema_mismatch));
  CHECK(contains(m, "field 'o': expected not stacked, actual stacked on axis 0"));
  (void)Buffer::open(guard.name(), {.expected_schema = Schema::parse("o:u8[4,5]:stack=0")});
}

TEST_CASE("create places one frame ring per env of capacity + (K-1)(1 + restarts) frames, restarts 1 + capacity/128 "
          "by default, and open reads the same geometry") {
  struct Case {
    uint64_t cap, restarts, expected_restarts;
  };
  for (const Case c : {Case{16, 0, 1}, Case{127, 0, 1}, Case{128, 0, 2}, Case{1000, 0, 8}, Case{16, 1, 1},
                       Case{16, 5, 5}, Case{1000, 3, 3}}) {
    CAPTURE(c.cap);
    CAPTURE(c.restarts);
    SegmentGuard guard(unique_name("stk-geom"));
    const Schema schema = Schema::parse("id:u64 obs:u8[4,6,5]:stack=0 r:f32 mid:u16[3,2,5]:stack=1 "
                                        "last:f32[3,4,4]:stack=-1");
    const uint64_t envs = 3;
    const Buffer buf = Buffer::create(guard.name(), envs, c.cap, schema, {.stack_restarts = c.restarts});
    for (const bool reopen : {false, true}) {
      CAPTURE(reopen);
      const Buffer b = reopen ? Buffer::open(guard.name(), {.read_only = true}) : Buffer::open(guard.name());
      CHECK(b.schema() == schema);
      const auto& stacks = segment_of(b).stacks();
      REQUIRE(stacks.size() == 3);
      const std::size_t fields[3] = {1, 3, 4};
      const uint64_t depth[3] = {4, 2, 4}, outer[3] = {1, 3, 12}, inner[3] = {30, 10, 4};
      for (std::size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        const StackGeometry& st = stacks[i];
        CHECK(st.field == fields[i]);
        CHECK(st.depth == depth[i]);
        CHECK(st.outer == outer[i]);
        CHECK(st.inner_bytes == inner[i]);
        CHECK(st.frame_bytes == outer[i] * inner[i]);
        CHECK(st.frames == c.cap + (depth[i] - 1) * (1 + c.expected_restarts));
        CHECK(st.frames == frames_per_env(c.cap, depth[i], c.restarts));
        // The field table's words (layout 1.6).
        const layout::FieldDesc& d = field_table(b)[fields[i]];
        CHECK(d.stack == *schema[fields[i]].stack_axis + 1);
        CHECK(d.stack_frames == st.frames);
        CHECK(d.data_bytes == envs * st.frames * st.frame_bytes);
        CHECK(d.data_offset == st.frames_offset);
        CHECK(d.stack_index_offset == st.index_offset);
        CHECK(d.data_offset % 64 == 0);
        CHECK(d.stack_index_offset % 64 == 0);
        // Rings, then the index words, [num_envs][capacity] u64, inside the data section.
        CHECK(d.stack_index_offset >= d.data_offset + d.data_bytes);
        const layout::SectionDesc data = segment_of(b).header().sections[layout::kSectionData];
        CHECK(d.stack_index_offset + envs * c.cap * 8 <= data.offset + data.bytes);
      }
      // The plain fields have no stack words.
      const layout::FieldDesc* table = field_table(b);
      for (const std::size_t f : {std::size_t{0}, std::size_t{2}}) {
        CHECK(table[f].stack == 0);
        CHECK(table[f].stack_frames == 0);
        CHECK(table[f].stack_index_offset == 0);
        CHECK(table[f].data_bytes == envs * c.cap * schema[f].bytes());
      }
    }
  }
}

TEST_CASE("a stacked buffer of Atari-like steps takes about a quarter of the bytes the same steps take as pushed") {
  SegmentGuard stacked(unique_name("stk-size"));
  SegmentGuard plain(unique_name("stk-size"));
  const uint64_t cap = 512;
  const Buffer a = Buffer::create(stacked.name(), 2, cap, Schema::parse("obs:u8[4,84,84]:stack=0 a:i32 r:f32"));
  const Buffer b = Buffer::create(plain.name(), 2, cap, Schema::parse("obs:u8[4,84,84] a:i32 r:f32"));
  const double ratio = static_cast<double>(a.total_bytes()) / static_cast<double>(b.total_bytes());
  CAPTURE(ratio);
  CHECK(ratio > 0.25);
  CHECK(ratio < 0.27);  // cap + 3 x (1 + 5) frames of 7056 bytes, and 8 bytes of index per step
}

TEST_CASE("create refuses stack_restarts without a stacked field, and a reserve that overflows") {
  SegmentGuard guard(unique_name("stk-refuse"));
  std::string m;
  CHECK(error_of([&] { (void)Buffer::create(guard.name(), 1, 8, Schema::parse("o:u8[4,5]"), {.stack_restarts = 3}); },
                 &m) == code(Errc::invalid_argument));
  CHECK(contains(m, "stack_restarts is 3, but the schema has no stacked field"));
  CHECK(contains(m, "NAME:DTYPE[SHAPE]:stack=AXIS"));
  CHECK_FALSE(Buffer::exists(guard.name()));
  CHECK(error_of([&] {
          (void)Buffer::create(guard.name(), 1, 8, Schema::parse("o:u8[4,5]:stack=0"), {.stack_restarts = UINT64_MAX});
        }, &m) == code(Errc::invalid_argument));
  CHECK(contains(m, "overflows"));
  CHECK(error_of([&] {
          (void)Buffer::create(guard.name(), 1, 8, Schema::parse("o:u8[4,5]:stack=0"),
                               {.stack_restarts = uint64_t{1} << 62});
        }, &m) == code(Errc::invalid_argument));
  CHECK_FALSE(Buffer::exists(guard.name()));
}

namespace {

// A segment file of stacked fields (id, obs stacked on axis 0, r, mid stacked on axis 1), its header and its
// stacked fields' descriptors, and how a damaged copy of it opens.
struct StackedFile {
  static constexpr uint64_t kEnvs = 2, kCap = 16;
  SegmentGuard src{unique_name("stk-src")};
  std::vector<char> good;
  layout::SegmentHeader h{};
  std::size_t table = 0;
  layout::FieldDesc obs{}, mid{};

  StackedFile() {
    const Schema schema = Schema::parse("id:u64[2] obs:u8[4,6,5]:stack=0 r:f32 mid:u16[3,2,5]:stack=1");
    (void)Buffer::create(src.name(), kEnvs, kCap, schema, {.stack_restarts = 2});
    good = file_bytes(src.path());
    std::memcpy(static_cast<void*>(&h), good.data(), sizeof h);
    table = h.sections[layout::kSectionFields].offset;
    std::memcpy(static_cast<void*>(&obs), good.data() + at(1, 0), sizeof obs);
    std::memcpy(static_cast<void*>(&mid), good.data() + at(3, 0), sizeof mid);
  }
  // Where byte `member` of field `field`'s descriptor is in the file.
  std::size_t at(std::size_t field, std::size_t member) const {
    return table + field * sizeof(layout::FieldDesc) + member;
  }
  // The Errc of opening a segment of `bytes` (0 when it opens), its message into *m.
  static int opens(const std::vector<char>& bytes, std::string* m) {
    SegmentGuard g(unique_name("stk-bad"));
    test::write_file(g.path(), std::string_view(bytes.data(), bytes.size()));
    return error_of([&] { (void)Buffer::open(g.name()); }, m);
  }
  // A copy damaged by `mutate` is refused with Errc::corrupt and a message that contains `needle`.
  template <class Mutate>
  void corrupt(Mutate mutate, const std::string& needle) const {
    std::vector<char> bytes = good;
    mutate(bytes);
    CAPTURE(needle);
    std::string m;
    CHECK(opens(bytes, &m) == code(Errc::corrupt));
    CAPTURE(m);
    CHECK(contains(m, needle));
  }
};

void poke64(std::vector<char>& b, std::size_t off, uint64_t v) { std::memcpy(b.data() + off, &v, 8); }
void poke32(std::vector<char>& b, std::size_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); }

// Random damage to the storage and stack words of f's table, 300 times: each an error or a valid open, never a
// crash. How many opened.
int open_random_damage(const StackedFile& f) {
  std::mt19937_64 gen(32);
  int opened = 0;
  std::string m;
  for (int round = 0; round < 300; ++round) {
    std::vector<char> bytes = f.good;
    const std::size_t field = gen() % 4;
    // a 4-byte word from data_offset on: the storage's and the stack's words
    const std::size_t from = offsetof(layout::FieldDesc, data_offset);
    const std::size_t member = from + (gen() % (sizeof(layout::FieldDesc) - from)) / 4 * 4;
    const uint64_t values[] = {0, 1, 2, 3, UINT64_MAX, f.obs.stack_frames, f.obs.stack_index_offset,
                               f.obs.data_offset, uint64_t{1} << 40, gen()};
    poke32(bytes, f.at(field, member), static_cast<uint32_t>(values[gen() % std::size(values)]));
    const int c = StackedFile::opens(bytes, &m);
    CHECK_MESSAGE((c == 0 || c == code(Errc::corrupt)), m);
    opened += c == 0;
  }
  return opened;
}

}  // namespace

TEST_CASE("open refuses a corrupted stacked field table with Errc::corrupt, saying what is wrong") {
  const StackedFile f;
  REQUIRE(f.obs.stack == 1);
  REQUIRE(f.obs.stack_frames == StackedFile::kCap + 3 * 3);
  REQUIRE(f.mid.stack == 2);
  std::string m;
  REQUIRE(StackedFile::opens(f.good, &m) == 0);
  const std::size_t frames_at = offsetof(layout::FieldDesc, stack_frames);
  const std::size_t bytes_at = offsetof(layout::FieldDesc, data_bytes);
  const std::size_t index_at = offsetof(layout::FieldDesc, stack_index_offset);
  const std::size_t stack_at = offsetof(layout::FieldDesc, stack);
  // Fewer frames than the smallest reserve (capacity + 2 (K - 1)), with data_bytes to match: refused on the frames.
  f.corrupt([&](auto& b) {
    poke64(b, f.at(1, frames_at), StackedFile::kCap + 5);
    poke64(b, f.at(1, bytes_at), StackedFile::kEnvs * (StackedFile::kCap + 5) * 30);
  }, fmt::format("has {} frames per env, expected at least {}", StackedFile::kCap + 5, StackedFile::kCap + 6));
  f.corrupt([&](auto& b) { poke64(b, f.at(1, frames_at), 0); }, "has 0 frames per env");
  // data_bytes that is not envs x frames x frame bytes, either way.
  f.corrupt([&](auto& b) { poke64(b, f.at(1, bytes_at), f.obs.data_bytes + 64); },
          fmt::format("has {} bytes of frames, expected 2 envs x {} frames x 30 bytes", f.obs.data_bytes + 64,
                      f.obs.stack_frames));
  f.corrupt([&](auto& b) { poke64(b, f.at(1, frames_at), f.obs.stack_frames + 1); }, "bytes of frames, expected");
  // More frames, with data_bytes to match: the rings run into the index words.
  f.corrupt([&](auto& b) {
    poke64(b, f.at(1, frames_at), f.obs.stack_frames + 2);
    poke64(b, f.at(1, bytes_at), StackedFile::kEnvs * (f.obs.stack_frames + 2) * 30);
  }, "overlaps");
  // Index words outside the data section, unaligned, over another field's storage, beyond the file.
  f.corrupt([&](auto& b) { poke64(b, f.at(1, index_at), f.h.sections[layout::kSectionData].offset +
                                                        f.h.sections[layout::kSectionData].bytes); },
          "lies outside the data section");
  f.corrupt([&](auto& b) { poke64(b, f.at(1, index_at), 64); }, "frame-index words of field 2 'obs'");
  f.corrupt([&](auto& b) { poke64(b, f.at(1, index_at), f.obs.stack_index_offset + 8); }, "not aligned");
  f.corrupt([&](auto& b) { poke64(b, f.at(3, index_at), f.obs.stack_index_offset); }, "overlaps");
  f.corrupt([&](auto& b) { poke64(b, f.at(1, index_at), uint64_t{1} << 62); }, "ends beyond the file");
  f.corrupt([&](auto& b) { poke64(b, f.at(1, index_at), UINT64_MAX - 63); }, "frame-index words");
  // Stack words on a field that is not stacked.
  f.corrupt([&](auto& b) { poke64(b, f.at(2, frames_at), 20); }, "field 3 'r' is not stacked but has stack_frames 20");
  f.corrupt([&](auto& b) { poke64(b, f.at(0, index_at), f.obs.stack_index_offset); },
          fmt::format("is not stacked but has stack_frames 0 and stack_index_offset {}", f.obs.stack_index_offset));
  f.corrupt([&](auto& b) { poke32(b, f.at(1, stack_at), 0); }, "field 2 'obs' (obs:u8[4,6,5]) is stored as kind frame_ring, expected plain_ring");
  // A stack axis that is no axis, or another one than the storage was made for.
  f.corrupt([&](auto& b) { poke32(b, f.at(1, stack_at), 4); }, "stack axis 3 is not an axis");
  f.corrupt([&](auto& b) { poke32(b, f.at(1, stack_at), 0xffffffffu); }, "is not an axis");
  f.corrupt([&](auto& b) { poke32(b, f.at(1, stack_at), 2); }, "field 2 'obs'");   // K = 6, frames of 20 bytes
  f.corrupt([&](auto& b) { poke32(b, f.at(3, stack_at), 1); }, "field 4 'mid'");   // K = 3, frames of 20 bytes
  f.corrupt([&](auto& b) { poke32(b, f.at(0, stack_at), 1); }, "field 1 'id'");    // a plain field made stacked
  // The untouched copy still opens; and random damage to the table is an error or a valid open, never a crash.
  CHECK(StackedFile::opens(f.good, &m) == 0);
  CHECK(open_random_damage(f) < 300);
}
