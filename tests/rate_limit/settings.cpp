// tests/rate_limit/settings.cpp: the settings and the verdicts: Reverb's bounds, refused settings, the settings in
// the segment, and a rewriter of the settings killed halfway.
// Part of test_rate_limit (tests/CMakeLists.txt); its helpers are in rate_limit_helpers.hpp.
#include "rate_limit_helpers.hpp"

TEST_CASE("RateLimit::ratio and min_size give Reverb's SampleToInsertRatio and MinSize bounds") {
  const RateLimit r = RateLimit::ratio(4.0, 1000, 256.0);
  CHECK(r.min_size_to_sample == 1000);
  CHECK(r.samples_per_insert == 4.0);
  CHECK(r.min_diff == 4000.0 - 256.0);
  CHECK(r.max_diff == 4000.0 + 256.0);
  CHECK(r.has_ratio());
  CHECK(r.error_buffer() == 256.0);
  const RateLimit m = RateLimit::min_size(50);
  CHECK(m.min_size_to_sample == 50);
  CHECK_FALSE(m.has_ratio());
  CHECK(m.to_string() == "min size 50");
  CHECK(r.to_string().find("error buffer 256") != std::string::npos);
}

TEST_CASE("the verdicts hold samples back below min size and below min_diff, and waiting inserts above max_diff") {
  const detail::LimiterSettings s{RateLimit::ratio(2.0, 10, 8.0), 0};  // bounds 12 .. 28
  // Fewer than 10 stored: no sample, whatever the error.
  CHECK(detail::sample_verdict(s, 9, 9, 0, 1).reason == RateLimitReason::min_size);
  // 10 inserts, 0 samples: error 20; a batch of 8 leaves 12 >= 12, a batch of 9 would leave 11.
  CHECK(detail::sample_verdict(s, 10, 10, 0, 8).allowed());
  CHECK(detail::sample_verdict(s, 10, 10, 0, 9).reason == RateLimitReason::learner_ahead);
  CHECK(detail::sample_verdict(s, 10, 10, 0, 9).bound == 12.0);
  // Inserts are free up to min size; then (admitted + k) * 2 - samples <= 28.
  CHECK(detail::insert_verdict(s, 0, 0, 10).allowed());
  CHECK(detail::insert_verdict(s, 13, 0, 1).allowed());   // 14 * 2 = 28
  CHECK(detail::insert_verdict(s, 14, 0, 1).reason == RateLimitReason::writers_ahead);  // 30 > 28
  CHECK(detail::insert_verdict(s, 14, 2, 1).allowed());   // 30 - 2 = 28
  // An offset (after a change of the settings) shifts the error.
  const detail::LimiterSettings shifted{RateLimit::ratio(2.0, 10, 8.0), -10.0};
  CHECK(detail::insert_verdict(shifted, 18, 0, 1).allowed());  // 38 - 10 = 28
  // MinSize: only the size counts.
  const detail::LimiterSettings m{RateLimit::min_size(5), 0};
  CHECK(detail::sample_verdict(m, 5, 5, 1'000'000, 256).allowed());
  CHECK(detail::insert_verdict(m, 1'000'000, 0, 16).allowed());
}

TEST_CASE("create refuses rate limits that cannot work, naming the setting and the expected value") {
  const std::string name = unique_name("rl-bad");
  SegmentGuard guard(name);
  std::string m;
  CHECK(error_of([&] { Buffer::create(name, 2, 8, kSchema, {.rate_limit = RateLimit::ratio(0.0, 1, 4.0)}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("samples_per_insert is 0") != std::string::npos);
  CHECK(error_of([&] { Buffer::create(name, 2, 8, kSchema, {.rate_limit = RateLimit::ratio(4.0, 1, 3.0)}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("expected at least 4") != std::string::npos);
  CHECK(error_of([&] { Buffer::create(name, 2, 8, kSchema, {.rate_limit = RateLimit::min_size(17)}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("at most 16 steps") != std::string::npos);
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("the settings live in the segment: another mapping reads them, set_rate_limit changes and removes them") {
  const std::string name = unique_name("rl-settings");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 64, kSchema, {.rate_limit = RateLimit::ratio(2.0, 4, 8.0)});
  Buffer other = Buffer::open(name);
  REQUIRE(other.rate_limit().has_value());
  CHECK(*other.rate_limit() == RateLimit::ratio(2.0, 4, 8.0));
  CHECK(other.rate_limit_state().error == 0.0);

  Writer w(b, {0, 1});
  for (int i = 0; i < 10; ++i) push_steps(w, {0, 1});  // 20 inserts: error 40
  CHECK(other.rate_limit_state().error == 40.0);
  // A change restarts the error at the middle of the new bounds, so history does not hold either side back.
  other.set_rate_limit(RateLimit::ratio(1.0, 4, 6.0));
  const RateLimitState s = b.rate_limit_state();
  CHECK(s.limit == RateLimit::ratio(1.0, 4, 6.0));
  CHECK(s.error == 4.0);  // (4 - 6 + 4 + 6) / 2
  CHECK(s.changes == 1);
  CHECK(s.inserts == 20);
  other.set_rate_limit(std::nullopt);
  CHECK_FALSE(b.rate_limit().has_value());
  CHECK(Buffer::open(name, {.read_only = true}).rate_limit_state().limit == std::nullopt);
  std::string m;
  CHECK(error_of([&] { Buffer::open(name, {.read_only = true}).set_rate_limit(RateLimit::min_size(1)); }, &m) ==
        static_cast<int>(Errc::read_only));
}

TEST_CASE("a rewriter of the settings killed halfway leaves the settings in force whole, and its lease is taken "
          "over") {
  const std::string name = unique_name("rl-rewriter");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 64, kSchema, {.rate_limit = RateLimit::ratio(2.0, 4, 8.0)});
  layout::GlobalControl& g = segment_of(b).global_control();
  // What a `shmreplay limit` killed while filling the spare slot leaves: its lease, and a half-written slot.
  const pid_t dead = spawn([] {});
  int status = 0;
  ::waitpid(dead, &status, 0);
  g.limiter_writer.store(layout::pack_owner(static_cast<uint64_t>(dead), 12345));
  layout::LimiterSlot& spare = g.limiter_slots[(g.limiter_index.load() & 1) ^ 1];
  spare.enabled.store(1);
  spare.samples_per_insert.store(std::bit_cast<uint64_t>(std::numeric_limits<double>::quiet_NaN()));
  CHECK(*b.rate_limit() == RateLimit::ratio(2.0, 4, 8.0));  // readers never see the half-written slot
  b.set_rate_limit(RateLimit::min_size(3));                 // the dead rewriter's lease is taken over
  CHECK(*Buffer::open(name).rate_limit() == RateLimit::min_size(3));
  CHECK(g.limiter_writer.load() == 0);
  CHECK(b.rate_limit_state().changes == 1);
}
