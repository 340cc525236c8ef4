// tests/priorities/refusals.cpp: what prioritized calls refuse, and how they say so: bad arguments, weights past the
// largest f32, views of zero priority, sums that lose their weights, and trees holding non-finite weights.
// Part of test_priorities (tests/CMakeLists.txt); its helpers are in priorities_helpers.hpp.
#include "priorities_helpers.hpp"

TEST_CASE("priorities refuse what they cannot do, with clear errors") {
  SegmentGuard plain_guard(unique_name("noprio"));
  Buffer plain = Buffer::create(plain_guard.name(), 1, 4, kSchema);
  CHECK_FALSE(plain.has_priorities());
  {
    Writer w(plain, std::vector<uint64_t>{0});
    std::string m;
    CHECK(error_of([&] { push(w, plain, 0, 1.0f); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("created without priorities") != std::string::npos);
    Sampler s(plain);
    Rng rng(1);
    SampleBatch b;
    CHECK(error_of([&] { s.sample(View::replay, 1, 1, 0, rng, b, {.prioritized = true}); }, &m) ==
          static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("without priorities") != std::string::npos);
    const uint64_t zero[1] = {0};
    double out[1];
    CHECK(error_of([&] { s.priority_weights(zero, zero, out); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("without priorities") != std::string::npos);
  }
  std::string m;
  CHECK(error_of([&] { Buffer::create(unique_name("badalpha"), 1, 4, kSchema, {.priority_exponent = -1.0}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("priority_exponent is -1") != std::string::npos);

  SegmentGuard guard(unique_name("prioerr"));
  Buffer buf = Buffer::create(guard.name(), 2, 4, kSchema, {.priority_exponent = 0.0});
  CHECK(buf.priority_exponent() == 0.0);
  Writer w(buf, std::vector<uint64_t>{0, 1});
  CHECK(error_of([&] { push(w, buf, 0, -1.0f); }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("priority -1 (position 0) is not a finite number >= 0") != std::string::npos);
  CHECK(segment_of(buf).env_control(0).head.load() == 0);  // nothing was pushed
  push(w, buf, 0, 1.0f);
  Sampler s(buf);
  Rng rng(1);
  SampleBatch b;
  CHECK(error_of([&] { s.sample(View::replay, 1, 1, 0, rng, b, {.period = 2, .prioritized = true}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("period = 2") != std::string::npos);
  CHECK(error_of([&] {
          s.sample(View::replay, 1, 1, 0, rng, b, {.prioritized = true, .importance_exponent = -0.5});
        }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("importance_exponent (beta) is -0.5") != std::string::npos);
  // distribution_power weighs a start by its remaining length, which a prioritized draw does not: refused, not
  // silently ignored.
  CHECK(error_of([&] { s.sample(View::replay, 1, 2, 1.0, rng, b, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("distribution_power = 1") != std::string::npos);
  CHECK(error_of([&] { (void)s.total_weight(View::replay, 2, 2.0, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("distribution_power = 2") != std::string::npos);
  CHECK(error_of([&] { s.sample_mixed(1, 0, 2, 0.5, rng, b, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  const std::vector<uint64_t> envs = {0, 1};
  const std::vector<uint64_t> steps = {0, 0};
  const std::vector<float> prios = {1.0f, 1.0f};
  CHECK(error_of([&] { s.update_priorities(envs, steps, prios); }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("step 0 of env 1") != std::string::npos);
  CHECK(m.find("never published") != std::string::npos);
  CHECK(error_of([&] { s.update_priorities(envs, steps, std::span<const float>(prios.data(), 1)); }, &m) ==
        static_cast<int>(Errc::size_mismatch));
  CHECK(segment_of(buf).global_control().priority_updates.load() == 0);  // nothing was set
}

TEST_CASE("a priority whose weight priority^alpha is past the largest f32 is refused, as given, at push, "
          "set_priority and update; nothing infinite enters a tree or the running maximum") {
  // alpha 1.5: 1e27^1.5 = 3.2e40, past the f32 leaf's 3.4e38. Accepted, it made the leaf and the total infinite,
  // and every prioritized sample after it failed with a false "ring too small for the write rate".
  SegmentGuard guard(unique_name("priooverflow"));
  Buffer buf = Buffer::create(guard.name(), 1, 8, kSchema, {.priority_exponent = 1.5});
  Writer w(buf, std::vector<uint64_t>{0});
  push(w, buf, 0, 2.0f);
  std::string m;
  CHECK(error_of([&] { push(w, buf, 0, 1e27f); }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("priority 1e+27 (position 0)") != std::string::npos);
  CHECK(m.find("priority^alpha") != std::string::npos);
  CHECK(segment_of(buf).env_control(0).head.load() == 1);  // nothing was pushed
  push(w, buf, 0, 4e25f);                      // 4e25^1.5 = 2.5e38: fits
  {
    StepSlot slot = w.reserve(0);
    CHECK(error_of([&] { slot.set_priority(1e39); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("priority 1e+39") != std::string::npos);  // the double as given, not its f32 "inf"
    CHECK(error_of([&] { slot.set_priority(1e27); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("priority 1e+27") != std::string::npos);
    CHECK(error_of([&] { slot.set_priority(-1.0); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("not a finite number >= 0") != std::string::npos);
    slot.set_priority(4.0);
    slot.commit();
  }
  Sampler s(buf, {.max_retry_rounds = 100});
  const std::vector<uint64_t> envs = {0, 0};
  const std::vector<uint64_t> steps = {0, 2};
  const std::vector<float> prios = {1.0f, 1e27f};
  CHECK(error_of([&] { s.update_priorities(envs, steps, prios); }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("priority 1e+27 (position 1, env 0 step 2)") != std::string::npos);
  CHECK(segment_of(buf).global_control().priority_updates.load() == 0);  // nothing was set
  CHECK(detail::max_priority(segment_of(buf).global_control().max_priority) == doctest::Approx(4e25));
  Rng rng(1);
  SampleBatch b;
  s.sample(View::replay, 64, 1, 0.0, rng, b, {.prioritized = true});
  for (std::size_t row = 0; row < b.rows(); ++row) CHECK(std::isfinite(b.weights()[row]));
  CHECK(std::isfinite(s.total_weight(View::replay, 1, 0.0, {.prioritized = true})));
}

TEST_CASE("prioritized sampling of a view whose every step has priority 0 says so (empty_view), not contention; a "
          "positive priority whose weight underflows f32 is still drawn") {
  SegmentGuard guard(unique_name("priozero"));
  Buffer buf = Buffer::create(guard.name(), 2, 8, kSchema, {.priority_exponent = 1.5});
  Writer w(buf, std::vector<uint64_t>{0, 1});
  for (int i = 0; i < 3; ++i) push(w, buf, 0, 0.0f);
  for (int i = 0; i < 2; ++i) push(w, buf, 1, 0.0f);
  Sampler s(buf, {.max_retry_rounds = 100});
  Rng rng(1);
  SampleBatch b;
  std::string m;
  CHECK(error_of([&] { s.sample(View::replay, 4, 1, 0.0, rng, b, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::empty_view));
  CHECK(m.find("every stored step") != std::string::npos);
  CHECK(m.find("priority 0") != std::string::npos);
  CHECK(s.total_weight(View::replay, 1, 0.0, {.prioritized = true}) == 0.0);
  s.sample(View::replay, 4, 1, 0.0, rng, b);  // unprioritized: any stored step
  // 1e-35^1.5 = 3e-53, below the smallest positive f32: the weight is that (denorm_min), not 0.
  push(w, buf, 1, 1e-35f);
  s.sample(View::replay, 64, 1, 0.0, rng, b, {.prioritized = true, .importance_exponent = 1.0});
  for (std::size_t row = 0; row < b.rows(); ++row) {
    CHECK(b.env_ids()[row] == 1);
    CHECK(b.start_steps()[row] == 2);
    CHECK(b.weights()[row] == 1.0f);
  }
  const uint64_t e[1] = {1}, st[1] = {2};
  double weight[1];
  s.priority_weights(e, st, weight);
  CHECK(weight[0] == static_cast<double>(std::numeric_limits<float>::denorm_min()));
}

TEST_CASE("a prioritized view whose sums lose its weights beside far larger ones gives up saying so, not with "
          "\"ring too small for the write rate\"") {
  // A known limit: a view's total is a difference of two prefix sums (f64), so a view of small weights after a
  // weight over 2^53 times larger reads 0. No row is overwritten (no writer runs); the message must not say so.
  SegmentGuard guard(unique_name("prioprecision"));
  Buffer buf = Buffer::create(guard.name(), 1, 4, kSchema, {.priority_exponent = 1.0});
  Writer w(buf, std::vector<uint64_t>{0});
  push(w, buf, 0, 1e20f);
  Sampler s(buf, {.max_retry_rounds = 20});
  s.reset_online_queue();
  push(w, buf, 0, 1e-3f);
  Rng rng(1);
  SampleBatch b;
  std::string m;
  CHECK(error_of([&] { s.sample(View::online, 1, 1, 0.0, rng, b, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::contended));
  CHECK(m.find("no start to draw from") != std::string::npos);
  CHECK(m.find("too small for the write rate") == std::string::npos);
}

TEST_CASE("a sum tree holding a weight that is not finite is reported as corruption, not contention") {
  // Every priority that enters is checked, so only a damaged segment has one: sampling says so, as does
  // total_weight (which would otherwise hand a learner of several buffers an infinite share).
  for (const double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(bad);
    SegmentGuard guard(unique_name("priocorrupt"));
    Buffer buf = Buffer::create(guard.name(), 2, 8, kSchema, {.priority_exponent = 1.0});
    Writer w(buf, std::vector<uint64_t>{0, 1});
    for (int i = 0; i < 3; ++i) push(w, buf, 0, 1.0f);
    push(w, buf, 1, 1.0f);
    const detail::PriorityTree tree{segment_of(buf).priority_tree(0), buf.priority_leaves(), buf.capacity()};
    tree.words[tree.leaves + 1].store(detail::make_leaf(1, bad));
    detail::rebuild(tree);
    Sampler s(buf, {.max_retry_rounds = 100});
    Rng rng(1);
    SampleBatch b;
    std::string m;
    CHECK(error_of([&] { s.sample(View::replay, 4, 1, 0.0, rng, b, {.prioritized = true}); }, &m) ==
          static_cast<int>(Errc::corrupt));
    CHECK(m.find("not a finite number") != std::string::npos);
    CHECK(error_of([&] { (void)s.total_weight(View::replay, 1, 0.0, {.prioritized = true}); }, &m) ==
          static_cast<int>(Errc::corrupt));
    s.sample(View::replay, 4, 1, 0.0, rng, b);  // unprioritized sampling does not read the trees
  }
}
