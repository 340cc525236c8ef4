// tests/sampler/gather.cpp: the batched gather: every row through it with few control-word loads, counters corrupted
// to a view longer than the ring, and fields of every size copied byte for byte.
// Part of test_sampler (tests/CMakeLists.txt); its helpers are in sampler_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "sampler_helpers.hpp"

TEST_CASE("every sampled and peeked row goes through the batched gather, validated with at most 3 control-word "
          "loads per env and chunk") {
  // The fast path of issue 18: the rows of a call are drawn first, copied together and validated with one read of
  // each env's control words before and one after (Sampler::gather). A change that copies row by row again, or
  // validates each row with its own loads, fails here.
  const uint64_t num_envs = 4;
  const uint64_t cap = 64;
  SegmentGuard guard(unique_name("gather"));
  Buffer buf = Buffer::create(guard.name(), num_envs, cap, kSchema, {.priority_exponent = 0.6});
  Writer w = Writer::range(buf, 0, num_envs);
  Sampler s(buf);
  Model m(num_envs, cap);
  for (uint64_t k = 0; k < cap + 37; ++k) push_envs(w, m, {0, 1, 2, 3}, 0);  // every ring wrapped
  Rng rng(7);
  SampleBatch out;
  struct Case {
    std::size_t rows;
    std::size_t length;
    bool prioritized;
  };
  for (const Case c : {Case{256, 1, false}, Case{100, 1, false}, Case{256, 8, false}, Case{64, 64, false},
                       Case{256, 1, true}, Case{40, 5, true}}) {
    CAPTURE(c.rows);
    CAPTURE(c.length);
    CAPTURE(c.prioritized);
    const SamplerStats before = s.stats();
    s.sample(View::replay, c.rows, c.length, c.prioritized ? 0.0 : 1.0, rng, out, {.prioritized = c.prioritized});
    const SamplerStats& after = s.stats();
    const std::string problem = check_rows(out, m, View::replay, 0, c.rows, c.length);
    REQUIRE_MESSAGE(problem.empty(), problem);
    CHECK(after.rows_gathered - before.rows_gathered == c.rows);
    const uint64_t chunks = after.gather_chunks - before.gather_chunks;
    CHECK(chunks >= 1);
    CHECK(chunks <= (c.rows * c.length * kSchema.step_bytes()) / (64 << 10) + c.rows / 256 + 1);
    CHECK(after.control_loads - before.control_loads <= 3 * num_envs * chunks);
    if (c.length == 1 && c.rows <= 256) CHECK(chunks == 1);  // a batch of transitions is one chunk
  }
  const std::vector<uint64_t> envs = {3, 0, 0, 2, 1, 3};
  const SamplerStats before = s.stats();
  s.peek(envs, out);
  const std::string problem = check_peek(out, m, envs);
  REQUIRE_MESSAGE(problem.empty(), problem);
  CHECK(s.stats().rows_gathered - before.rows_gathered == envs.size());
  CHECK(s.stats().gather_chunks - before.gather_chunks == 1);
  CHECK(s.stats().control_loads - before.control_loads <= 3 * num_envs);
  CHECK(s.retries() == 0);
}

TEST_CASE("counters corrupted to a view longer than the ring are sampled inside the ring, never outside it") {
  // A consistent segment has claimed >= head, so [claimed - cap, head) never holds more than cap steps, and a
  // start's slot is found without a division. A damaged (or fuzzed) segment can have claimed far below head: the
  // sampler's snapshot still bounds its view to the ring, so its rows are read from inside the env's ring (ASan,
  // and a fault without it, would catch a read outside). The fuzzer found this case.
  const uint64_t cap = 8;
  Rig r("corrupt-view", 2, cap);
  for (uint64_t k = 0; k < 3 * cap; ++k) push_envs(r.w, r.m, {0, 1}, 0);
  layout::EnvControl& c = segment_of(r.buf).env_control(0);
  c.head.store(1000);
  c.claimed.store(20);  // claimed - cap = 12: without the bound, the view would be [12, 1000) in a ring of 8
  Rng rng(3);
  SampleBatch out;
  for (const std::size_t length : {std::size_t{1}, std::size_t{3}, cap}) {
    for (int call = 0; call < 20; ++call) r.s.sample(View::replay, 64, length, 1.0, rng, out);
    CHECK(out.rows() == 64);
  }
}

TEST_CASE("total_weight of counters corrupted to a view longer than the ring weighs the view that sample draws from") {
  // sample bounds a view to the ring (the test above); total_weight must weigh that same view, or a learner of
  // several buffers (shmreplay.ray) gives a damaged one a share it then draws from a smaller view.
  const uint64_t cap = 8;
  Rig r("corrupt-total", 2, cap);
  for (uint64_t k = 0; k < 3 * cap; ++k) push_envs(r.w, r.m, {0, 1}, 0);
  const double healthy = r.s.total_weight(View::replay, 3, 1.0, {});
  CHECK(healthy == 2 * (6 * 3 + 2 + 1));  // per env: 6 starts with 3 steps left, then 2 and 1
  layout::EnvControl& c = segment_of(r.buf).env_control(0);
  c.head.store(1000);
  c.claimed.store(20);  // unbounded, env 0's view would be [12, 1000): 988 starts
  CHECK(r.s.total_weight(View::replay, 1, 0.0, {}) == 2 * cap);
  CHECK(r.s.total_weight(View::replay, 3, 1.0, {}) == healthy);
}

TEST_CASE("the gather copies fields of every size, whole, wrapped and short rows, byte for byte") {
  // Field sizes on both sides of each of the inline copy's cases (1, 2-3, 4-7, 8-16, 17-32, 33-64, 65-128, more).
  const Schema schema = Schema::parse("a:u8 b:u8[2] c:u8[3] d:u8[5] e:u8[8] f:u8[13] g:u8[17] h:u8[32] i:u8[33] "
                                      "j:u8[64] k:u8[65] l:u8[128] m:u8[129] n:u8[300]");
  const uint64_t num_envs = 3;
  const uint64_t cap = 16;
  SegmentGuard guard(unique_name("gather-sizes"));
  Buffer buf = Buffer::create(guard.name(), num_envs, cap, schema);
  Writer w = Writer::range(buf, 0, num_envs);
  Sampler s(buf);
  auto byte_of = [](uint64_t env, uint64_t step, std::size_t field, std::size_t i) {
    return static_cast<uint8_t>(1 + (env * 131 + step * 31 + field * 7 + i) % 251);
  };
  std::vector<uint64_t> heads = {cap + 5, 9, cap * 2};  // wrapped, partial, wrapped exactly twice
  for (uint64_t e = 0; e < num_envs; ++e) {
    for (uint64_t t = 0; t < heads[e]; ++t) {
      std::vector<std::vector<uint8_t>> data(schema.size());
      std::vector<FieldBytes> fields;
      for (std::size_t f = 0; f < schema.size(); ++f) {
        data[f].resize(schema[f].bytes());
        for (std::size_t i = 0; i < data[f].size(); ++i) data[f][i] = byte_of(e, t, f, i);
        fields.push_back({data[f].data(), data[f].size()});
      }
      w.push_one(e, fields);
    }
  }
  Rng rng(3);
  SampleBatch out;
  for (const std::size_t length : {std::size_t{1}, std::size_t{3}, std::size_t{cap}}) {
    CAPTURE(length);
    s.sample(View::replay, 200, length, 0.5, rng, out);
    for (std::size_t row = 0; row < out.rows(); ++row) {
      const uint64_t e = out.env_ids()[row];
      const uint64_t p = out.start_steps()[row];
      REQUIRE(p + cap >= heads[e]);
      REQUIRE(p < heads[e]);
      for (std::size_t t = 0; t < length; ++t) {
        const bool in = p + t < heads[e];
        REQUIRE(out.valid(row, t) == in);
        for (std::size_t f = 0; f < schema.size(); ++f) {
          const std::byte* got = out.step(f, row, t);
          for (std::size_t i = 0; i < schema[f].bytes(); ++i) {
            const uint8_t want = in ? byte_of(e, p + t, f, i) : 0;
            REQUIRE_MESSAGE(std::to_integer<uint8_t>(got[i]) == want,
                            fmt::format("row {} env {} start {} t {} field {} byte {}", row, e, p, t, f, i));
          }
        }
      }
    }
  }
}
