// tests/sampler/calls.cpp: the calls around the draw: argument errors with their numbers, an owned batch's storage,
// try_update, and a moved Sampler's learner lease.
// Part of test_sampler (tests/CMakeLists.txt); its helpers are in sampler_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "sampler_helpers.hpp"

namespace {

// The sample calls' argument checks, on a sampler of capacity 8 with steps in its replay view.
void check_argument_errors(Sampler& s, Rng& rng, SampleBatch& out) {
  std::string msg;
  // Argument checks.
  CHECK(error_of([&] { s.sample(View::replay, 0, 2, 1.0, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "batch size is 0"));
  CHECK(error_of([&] { s.sample_mixed(0, 0, 2, 1.0, rng, out); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { s.sample(View::replay, 4, 0, 1.0, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK((contains(msg, "sequence_length is 0") && contains(msg, "8")));
  CHECK(error_of([&] { s.sample(View::replay, 4, 9, 1.0, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK((contains(msg, "9") && contains(msg, "capacity, 8")));
  CHECK(error_of([&] { s.sample(View::replay, 4, 8, 1.0, rng, out); }) == 0);
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, -0.5, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "-0.5"));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, nan, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "nan"));
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(error_of([&] { s.sample_mixed(2, 0, 2, inf, rng, out); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { s.sample_transitions(View::replay, 0, rng, out); }) == code(Errc::invalid_argument));
  // Sizes past the address space are refused before anything is allocated, and two halves of a mixed batch that
  // wrap around when added are refused, not sampled as the small sum.
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  CHECK(error_of([&] { s.sample(View::replay, huge / 4, 4, 1.0, rng, out); }, &msg) ==
        code(Errc::invalid_argument));
  CHECK((contains(msg, "address space") && contains(msg, fmt::format("{}", huge / 4))));
  CHECK(error_of([&] { s.sample_mixed(huge, 2, 1, 1.0, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK((contains(msg, "replay_batch") && contains(msg, "online_batch 2")));
  CHECK(error_of([&] { s.sample_mixed(huge / 2 + 1, huge / 2 + 1, 1, 1.0, rng, out); }) ==
        code(Errc::invalid_argument));
  CHECK(error_of([&] { Sampler::check_batch_shape(s.buffer(), "sample", 4, 8); }) == 0);
  CHECK(error_of([&] { Sampler::check_batch_shape(s.buffer(), "sample", 4, 9); }) == code(Errc::invalid_argument));
}

// Borrowed arrays too small for a batch are refused, naming the array and both sizes; a borrowed batch filled
// correctly holds what an owned batch holds for the same seed, in the caller's arrays.
void check_borrowed_arrays(Sampler& s, const Model& m, Rng& rng, SampleBatch& out) {
  std::string msg;
  // Borrowed arrays: 4 rows x 3 steps need id 192 bytes, x 144, flag 12, mask 12, ids and starts 4 each.
  std::vector<uint64_t> ids(24);
  std::vector<float> xs(36);
  std::vector<uint8_t> flags(12);
  std::vector<uint8_t> mask(12);
  std::vector<uint64_t> envs(4);
  std::vector<uint64_t> starts(4);
  auto borrowed = [&](std::size_t x_bytes, std::size_t mask_len, std::size_t env_len) {
    return SampleBatch::borrow({{ids.data(), ids.size() * 8}, {xs.data(), x_bytes}, {flags.data(), flags.size()}},
                               std::span<uint8_t>(mask).first(mask_len), std::span<uint64_t>(envs).first(env_len),
                               std::span<uint64_t>(starts));
  };
  SampleBatch small_x = borrowed(143, 12, 4);
  CHECK(error_of([&] { s.sample(View::replay, 4, 3, 1.0, rng, small_x); }, &msg) == code(Errc::size_mismatch));
  CHECK((contains(msg, "'x'") && contains(msg, "143") && contains(msg, "144")));
  SampleBatch small_mask = borrowed(144, 11, 4);
  CHECK(error_of([&] { s.sample(View::replay, 4, 3, 1.0, rng, small_mask); }, &msg) == code(Errc::size_mismatch));
  CHECK((contains(msg, "mask") && contains(msg, "11") && contains(msg, "12")));
  SampleBatch small_ids = borrowed(144, 12, 3);
  CHECK(error_of([&] { s.sample_mixed(2, 0, 3, 1.0, rng, small_ids); }) == 0);  // 2 rows fit
  CHECK(error_of([&] { s.sample_mixed(4, 0, 3, 1.0, rng, small_ids); }, &msg) == code(Errc::size_mismatch));
  CHECK(contains(msg, "env ids"));
  SampleBatch two_fields = SampleBatch::borrow({{ids.data(), 192}, {xs.data(), 144}}, mask, envs, starts);
  CHECK(error_of([&] { s.sample(View::replay, 4, 3, 1.0, rng, two_fields); }, &msg) == code(Errc::size_mismatch));
  CHECK((contains(msg, "2 field arrays") && contains(msg, "3")));

  // A borrowed batch filled correctly holds what an owned batch holds for the same seed, in the caller's arrays.
  SampleBatch good = borrowed(144, 12, 4);
  for (const uint64_t seed : {5u, 6u}) {
    Rng r1(seed);
    Rng r2(seed);
    s.sample(View::replay, 4, 3, 1.0, r1, out);
    s.sample(View::replay, 4, 3, 1.0, r2, good);
    CHECK(same_batch(out, good));
    CHECK(check_rows(good, m, View::replay, 0, 4, 3) == "");
    CHECK(good.field(0).data() == reinterpret_cast<const std::byte*>(ids.data()));
    CHECK(std::memcmp(out.field(1).data(), xs.data(), 144) == 0);
    CHECK(std::ranges::equal(out.mask(), mask));
    CHECK(std::ranges::equal(out.env_ids(), envs));
    CHECK(std::ranges::equal(out.start_steps(), starts));
  }
}

}  // namespace

TEST_CASE("bad arguments, empty views and too-small borrowed arrays throw errors that give the numbers") {
  Rig rig("err", 3, 8);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  Rng rng(3);
  SampleBatch out;
  std::string msg;

  // Empty views: nothing pushed yet, then nothing since the last reset.
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, 1.0, rng, out); }, &msg) == code(Errc::empty_view));
  CHECK(contains(msg, "replay"));
  push_envs(w, m, {1, 0}, 1);
  push_env(w, m, 2, 10);
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, 1.0, rng, out); }) == 0);
  s.reset_online_queue();
  m.reset_online();
  CHECK(error_of([&] { s.sample(View::online, 4, 2, 1.0, rng, out); }, &msg) == code(Errc::empty_view));
  CHECK(contains(msg, "online"));
  CHECK(error_of([&] { s.sample_mixed(4, 1, 2, 1.0, rng, out); }) == code(Errc::empty_view));
  CHECK(error_of([&] { s.sample_mixed(4, 0, 2, 1.0, rng, out); }) == 0);

  check_argument_errors(s, rng, out);

  // Peek and sizes.
  const std::vector<uint64_t> bad = {0, 7};
  CHECK(error_of([&] { s.peek(bad, out); }, &msg) == code(Errc::env_out_of_range));
  CHECK((contains(msg, "env 7") && contains(msg, "0 to 2")));
  CHECK(error_of([&] { s.peek({}, out); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)s.sizes(3); }, &msg) == code(Errc::env_out_of_range));
  CHECK(contains(msg, "env 3"));

  check_borrowed_arrays(s, m, rng, out);
}

TEST_CASE("an owned batch keeps its storage across calls of the same or a smaller shape") {
  Rig rig("reuse", 2, 8);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  push_env(w, m, 0, 11);
  push_env(w, m, 1, 3);
  Rng rng(8);
  SampleBatch out;
  s.sample(View::replay, 16, 6, 1.0, rng, out);
  const std::array<const std::byte*, 3> fields = {out.field(0).data(), out.field(1).data(), out.field(2).data()};
  const uint8_t* mask = out.mask().data();
  const uint64_t* envs = out.env_ids().data();
  const uint64_t* starts = out.start_steps().data();
  auto unchanged = [&] {
    return out.field(0).data() == fields[0] && out.field(1).data() == fields[1] && out.field(2).data() == fields[2] &&
           out.mask().data() == mask && out.env_ids().data() == envs && out.start_steps().data() == starts;
  };
  for (int i = 0; i < 3; ++i) {
    s.sample(View::replay, 16, 6, 1.0, rng, out);
    CHECK(unchanged());
    s.sample(View::online, 7, 2, 0.0, rng, out);
    CHECK(unchanged());
    CHECK(check_rows(out, m, View::online, 0, 7, 2) == "");
    s.sample_mixed(10, 6, 6, 2.0, rng, out);
    CHECK(unchanged());
    s.sample_transitions(View::replay, 16, rng, out);
    CHECK(unchanged());
    const std::vector<uint64_t> peek_envs = {1, 0, 1};
    s.peek(peek_envs, out);
    CHECK(unchanged());
    CHECK(check_peek(out, m, peek_envs) == "");
  }
}

TEST_CASE("try_update rewrites a stored step, refuses an overwritten one and rejects an unpublished one") {
  Rig rig("update", 2, 4);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  push_env(w, m, 0, 6);  // env 0 stores steps 2..5
  push_env(w, m, 1, 1);
  SampleBatch out;
  Rng rng(6);
  const std::vector<uint64_t> env0 = {0};

  // Rewrite x of the newest step only; id and flag stay.
  const float new_x[3] = {-1.0f, -2.0f, -3.0f};
  std::array<FieldBytes, 3> only_x = {FieldBytes{}, FieldBytes{new_x, sizeof new_x}, FieldBytes{}};
  CHECK(s.try_update(0, 5, only_x));
  std::memcpy(m.steps[0][5].x, new_x, sizeof new_x);
  s.peek(env0, out);
  CHECK(check_peek(out, m, env0) == "");
  CHECK(std::memcmp(out.step(1, 0, 0), new_x, sizeof new_x) == 0);
  CHECK(std::memcmp(out.step(0, 0, 0), make_step(0, 5).id, 16) == 0);

  // Rewrite flag of an older stored step; samples covering it see the new byte, every other byte as pushed.
  const uint8_t new_flag = 0;
  std::array<FieldBytes, 3> only_flag = {FieldBytes{}, FieldBytes{}, value_bytes(new_flag)};
  CHECK(s.try_update(0, 3, only_flag));
  m.steps[0][3].flag = new_flag;
  s.sample(View::replay, 200, 4, 0.0, rng, out);
  CHECK(check_rows(out, m, View::replay, 0, 200, 4) == "");
  bool covered = false;
  for (std::size_t row = 0; row < 200; ++row) {
    const uint64_t p = out.start_steps()[row];
    covered = covered || (out.env_ids()[row] == 0 && p <= 3 && 3 < p + 4);
  }
  CHECK(covered);

  // A full rewrite of env 1's only step.
  const Step other = make_step(9, 99);
  CHECK(s.try_update(1, 0, fields_of(other)));
  m.steps[1][0] = other;
  const std::vector<uint64_t> env1 = {1};
  s.peek(env1, out);
  CHECK(check_peek(out, m, env1) == "");

  // Overwritten steps: false, and nothing changes (step 1 shares its slot with step 5, step 0 with step 4).
  const Step junk = make_step(7, 7);
  CHECK_FALSE(s.try_update(0, 1, fields_of(junk)));
  CHECK_FALSE(s.try_update(0, 0, fields_of(junk)));
  s.sample(View::replay, 100, 4, 1.0, rng, out);
  CHECK(check_rows(out, m, View::replay, 0, 100, 4) == "");
  s.peek(env0, out);
  CHECK(check_peek(out, m, env0) == "");
  // After another push step 2 is overwritten too.
  push_env(w, m, 0, 1);
  CHECK_FALSE(s.try_update(0, 2, fields_of(junk)));
  CHECK(s.try_update(0, 3, only_x));
  std::memcpy(m.steps[0][3].x, new_x, sizeof new_x);
  s.sample(View::replay, 100, 4, 1.0, rng, out);
  CHECK(check_rows(out, m, View::replay, 0, 100, 4) == "");

  // Never published, out of range, wrong sizes.
  std::string msg;
  CHECK(error_of([&] { (void)s.try_update(0, 7, fields_of(junk)); }, &msg) == code(Errc::invalid_argument));
  CHECK((contains(msg, "step 7") && contains(msg, "7 steps")));
  CHECK(error_of([&] { (void)s.try_update(1, 1, fields_of(junk)); }, &msg) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)s.try_update(2, 0, fields_of(junk)); }) == code(Errc::env_out_of_range));
  const std::array<FieldBytes, 3> short_x = {FieldBytes{}, FieldBytes{new_x, 8}, FieldBytes{}};
  CHECK(error_of([&] { (void)s.try_update(0, 5, short_x); }, &msg) == code(Errc::size_mismatch));
  CHECK((contains(msg, "'x'") && contains(msg, "8") && contains(msg, "12")));
  CHECK(error_of([&] { (void)s.try_update(0, 5, std::span<const FieldBytes>(only_x).first(2)); }) ==
        code(Errc::size_mismatch));
  s.sample(View::replay, 100, 4, 1.0, rng, out);
  CHECK(check_rows(out, m, View::replay, 0, 100, 4) == "");
}

TEST_CASE("a moved Sampler keeps the learner lease, and a moved-from one releases nothing") {
  SegmentGuard guard(unique_name("sampler-move"));
  Buffer buf = Buffer::create(guard.name(), 2, 8, kSchema);
  const auto lease = [&] { return segment_of(buf).global_control().learner_lease.load(); };
  std::optional<Sampler> later;
  {
    Sampler first(buf);
    const uint64_t held = lease();
    REQUIRE(held != 0);
    std::optional<Sampler> second;
    second.emplace(std::move(first));
    CHECK(lease() == held);  // moving hands the lease over
    CHECK(error_of([&] { Sampler third(buf); }) == code(Errc::lease_held));
    second.reset();  // its owner goes: the lease is free
    CHECK(lease() == 0);
    later.emplace(buf);  // a new learner, while `first` (moved from) still lives
    REQUIRE(lease() != 0);
  }
  CHECK(lease() != 0);  // destroying the moved-from `first` did not release the new learner's lease
  later.reset();
  CHECK(lease() == 0);
}

TEST_CASE("a call whose rows keep failing because a learner keeps rewriting their env says so, not that writers "
          "overwrote them") {
  // No writer runs: env 0's update sequence stays odd (a learner's update section, as update_priorities,
  // zero_on_sample and write_back open, that never ends while the call retries), so every row of env 0 fails
  // its validation; none was overwritten, and the ring is not too small for anything.
  SegmentGuard guard(unique_name("rewritten"));
  Buffer buf = Buffer::create(guard.name(), 1, 8, kSchema);
  Writer w(buf, std::vector<uint64_t>{0});
  Model m(1, 8);
  push_env(w, m, 0, 6);
  Sampler s(buf, {.max_retry_rounds = 8});
  layout::EnvControl& c = segment_of(buf).env_control(0);
  c.update_seq.store(c.update_seq.load() + 1);  // odd: a section in progress
  Rng rng(3);
  SampleBatch out;
  std::string msg;
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, 0.0, rng, out); }, &msg) == code(Errc::contended));
  CHECK(contains(msg, "rewrote"));
  CHECK_FALSE(contains(msg, "too small for the write rate"));
  c.update_seq.store(c.update_seq.load() + 1);  // the section ends: the same call succeeds
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, 0.0, rng, out); }) == 0);
}
