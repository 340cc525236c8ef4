// tests/priorities/initial.cpp: CreateOptions::initial_priority: the running maximum (the default), a fixed value,
// and +infinity, never-sampled steps drawn first: uniformly among them (chi-square, with a draw by priority
// rejected), each returned as fresh by exactly one of several learner ranks while a writer pushes, and the draws by
// priority once none is left.
// Part of test_priorities (tests/CMakeLists.txt); its helpers are in priorities_helpers.hpp.
#include "priorities_helpers.hpp"

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("a step pushed without a priority enters at the buffer's initial priority: the running maximum by "
          "default, else the fixed value given at creation") {
  SegmentGuard guard(unique_name("prioinit"));
  Buffer buf = Buffer::create(guard.name(), 1, 8, kSchema, {.priority_exponent = 1.0, .initial_priority = 0.25});
  CHECK(buf.initial_priority() == 0.25);
  CHECK(Buffer::open(guard.name()).initial_priority() == 0.25);
  const detail::PriorityTree tree = detail::priority_tree_of(segment_of(buf), 0);
  Writer w(buf, std::vector<uint64_t>{0});
  push_unprioritized(w, 0);
  push(w, buf, 0, 9.0f);  // raises the running maximum, which new steps do not take here
  push_unprioritized(w, 0);
  CHECK(detail::slot_weight(tree, 0) == 0.25);
  CHECK(detail::slot_weight(tree, 1) == 9.0);
  CHECK(detail::slot_weight(tree, 2) == 0.25);
  SegmentGuard zero_guard(unique_name("prioinit0"));
  Buffer zero = Buffer::create(zero_guard.name(), 1, 8, kSchema, {.priority_exponent = 0.5, .initial_priority = 0.0});
  CHECK(zero.initial_priority() == 0.0);
  Writer wz(zero, std::vector<uint64_t>{0});
  push_unprioritized(wz, 0);
  CHECK(detail::slot_weight(detail::priority_tree_of(segment_of(zero), 0), 0) == 0.0);
  SegmentGuard max_guard(unique_name("prioinitmax"));
  CHECK(!Buffer::create(max_guard.name(), 1, 8, kSchema, {.priority_exponent = 1.0}).initial_priority());
  // Refusals, each saying what was given and what is expected.
  SegmentGuard bad(unique_name("prioinitbad"));
  std::string message;
  CHECK(error_of([&] { Buffer::create(bad.name(), 1, 8, kSchema, {.initial_priority = 1.0}); }, &message) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(message.find("no priorities") != std::string::npos);
  for (const double p : {-1.0, std::nan(""), 1e39, -kInf}) {
    CAPTURE(p);
    CHECK(error_of([&] { Buffer::create(bad.name(), 1, 8, kSchema, {.priority_exponent = 1.0, .initial_priority = p}); },
                   &message) == static_cast<int>(Errc::invalid_argument));
    CHECK(message.find("initial_priority") != std::string::npos);
  }
}

TEST_CASE("with initial priority infinity, never-sampled steps are drawn first, uniformly among them (chi-square; "
          "a draw by priority rejected), then by priority") {
  SegmentGuard guard(unique_name("priofirst"));
  constexpr uint64_t kFresh = 8;
  constexpr int kTrials = 3000;
  Buffer buf = Buffer::create(guard.name(), 1, 1 << 15, kSchema, {.priority_exponent = 1.0, .initial_priority = kInf});
  CHECK(buf.initial_priority() == kInf);
  Writer w(buf, std::vector<uint64_t>{0});
  Sampler learner(buf);
  Rng rng(21);
  SampleBatch batch;
  std::vector<uint64_t> first(kFresh, 0);
  std::vector<double> uniform(kFresh, 1.0 / kFresh), by_priority(kFresh);
  for (uint64_t i = 0; i < kFresh; ++i) by_priority[i] = static_cast<double>(i + 1) / (kFresh * (kFresh + 1) / 2);
  for (int t = 0; t < kTrials; ++t) {
    const uint64_t base = static_cast<uint64_t>(t) * kFresh;
    for (uint64_t i = 0; i < kFresh; ++i) push(w, buf, 0, static_cast<float>(i + 1));  // steps of older trials weigh
    // The batch is the 8 new steps, each once: fresh steps are taken as they are returned.
    learner.sample(View::replay, kFresh, 1, 0.0, rng, batch, {.prioritized = true});
    std::set<uint64_t> steps(batch.start_steps().begin(), batch.start_steps().end());
    REQUIRE(steps.size() == kFresh);
    REQUIRE(*steps.begin() == base);
    ++first[batch.start_steps()[0] - base];
    // N * P of a fresh draw: N stored steps over the fresh ones.
    if (t == 0) CHECK(batch.weights()[0] == 1.0f);
  }
  const double bound = chi_square_bound(static_cast<double>(kFresh - 1));
  CHECK(chi_square(first, uniform, kTrials) < bound);
  CHECK(chi_square(first, by_priority, kTrials) > bound);  // the test can tell
  // No fresh step left: a draw by priority (the steps' priorities 1..8, many times over).
  learner.sample(View::replay, 4000, 1, 0.0, rng, batch, {.prioritized = true});
  std::vector<uint64_t> by_offset(kFresh, 0);
  for (std::size_t r = 0; r < 4000; ++r) ++by_offset[batch.start_steps()[r] % kFresh];
  CHECK(chi_square(by_offset, by_priority, 4000) < bound);
  // A step pushed without a priority enters the priority tree at the running maximum (8).
  push_unprioritized(w, 0);
  CHECK(detail::slot_weight(detail::priority_tree_of(segment_of(buf), 0), kFresh * kTrials) == 8.0);
}

TEST_CASE("with initial priority infinity, learner ranks drawing by priority while a writer pushes return each "
          "fresh step exactly once") {
  SegmentGuard guard(unique_name("priofirstranks"));
  constexpr uint64_t kEnvs = 4;
  constexpr uint64_t kSteps = 2000;  // per env, within the capacity
  Buffer buf = Buffer::create(guard.name(), kEnvs, 4096, kSchema,
                              {.priority_exponent = 1.0, .initial_priority = kInf, .max_learners = 3});
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    Writer w(buf, std::vector<uint64_t>{0, 1, 2, 3});
    for (uint64_t s = 0; s < kSteps; ++s) {
      for (uint64_t e = 0; e < kEnvs; ++e) push(w, buf, e, 0.0f);  // priority 0: only a fresh draw can return it
    }
    writing = false;
  });
  const auto times = drain_ranks(buf, writing, 8, {.prioritized = true});
  writer.join();
  CHECK(returned_twice(times) == 0);
  uint64_t fresh_left = 0;
  for (uint64_t e = 0; e < kEnvs; ++e) {
    const detail::PriorityTreeView fresh = detail::fresh_tree_of(std::as_const(segment_of(buf)), e);
    for (uint64_t s = 0; s < kSteps; ++s) fresh_left += detail::slot_weight(fresh, s) > 0 ? 1u : 0u;
    CHECK(check_sums(detail::fresh_tree_of(segment_of(buf), e)).empty());
  }
  CHECK(times.size() + fresh_left == kEnvs * kSteps);  // a call short of its 8 rows gave its takes back
  CHECK(fresh_left < 3 * 8);
}
