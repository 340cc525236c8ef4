// tests/priorities/zero_on_sample.cpp: zero-on-sample (SampleOptions::zero_on_sample): a taken step is not drawn
// again until its priority is raised, a batch is a draw without replacement (chi-square over ordered pairs against
// successive sampling, a draw with replacement rejected), a call that throws gives its weights back, and learner
// ranks taking steps at once while a writer pushes deliver every step exactly once.
// Part of test_priorities (tests/CMakeLists.txt); its helpers are in priorities_helpers.hpp.
#include "priorities_helpers.hpp"

namespace {

double weight_of(Buffer& buf, uint64_t e, uint64_t step) {
  return detail::slot_weight(detail::priority_tree_of(segment_of(buf), e), step);
}

}  // namespace

TEST_CASE("zero-on-sample never returns a taken step again until its priority is raised, and a call that throws "
          "gives back the weights it took") {
  SegmentGuard guard(unique_name("zos"));
  Buffer buf = Buffer::create(guard.name(), 2, 16, kSchema, {.priority_exponent = 1.0});
  Writer w(buf, std::vector<uint64_t>{0, 1});
  for (int i = 0; i < 5; ++i) {
    push(w, buf, 0, 1.0f + static_cast<float>(i));
    push(w, buf, 1, 2.0f);
  }
  Sampler learner(buf);
  Rng rng(3);
  SampleBatch batch;
  const SampleOptions zero{.prioritized = true, .zero_on_sample = true};
  // 12 rows from 10 positive steps: the call takes 10, then finds none left (empty_view) and gives them back.
  std::string message;
  CHECK(error_of([&] { learner.sample(View::replay, 12, 1, 0.0, rng, batch, zero); }, &message) ==
        static_cast<int>(Errc::empty_view));
  CHECK(message.find("priority 0") != std::string::npos);
  for (uint64_t s = 0; s < 5; ++s) {
    CHECK(weight_of(buf, 0, s) == 1.0 + static_cast<double>(s));
    CHECK(weight_of(buf, 1, s) == 2.0);
  }
  // 10 rows: every stored step once, each left at 0.
  learner.sample(View::replay, 10, 2, 0.0, rng, batch, zero);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (std::size_t r = 0; r < 10; ++r) seen.emplace(batch.env_ids()[r], batch.start_steps()[r]);
  CHECK(seen.size() == 10);
  for (uint64_t s = 0; s < 5; ++s) CHECK(weight_of(buf, 0, s) + weight_of(buf, 1, s) == 0.0);
  CHECK(error_of([&] { learner.sample(View::replay, 1, 1, 0.0, rng, batch, zero); }) ==
        static_cast<int>(Errc::empty_view));
  // A raised priority brings a step back, and only that step; a new step enters at the running maximum.
  const std::vector<uint64_t> envs = {1};
  const std::vector<uint64_t> steps = {3};
  const std::vector<float> prios = {0.5f};
  learner.update_priorities(envs, steps, prios);
  learner.sample(View::replay, 1, 1, 0.0, rng, batch, zero);
  CHECK(batch.env_ids()[0] == 1);
  CHECK(batch.start_steps()[0] == 3);
  StepSlot slot = w.reserve(0);  // no priority given: the running maximum, 5
  slot.commit();
  learner.sample(View::replay, 1, 1, 0.0, rng, batch, zero);
  CHECK(batch.start_steps()[0] == 5);
  CHECK(weight_of(buf, 0, 5) == 0.0);
  // A plain prioritized call leaves priorities alone; zero_on_sample needs a prioritized draw.
  learner.update_priorities(envs, steps, prios);
  learner.sample(View::replay, 4, 1, 0.0, rng, batch, {.prioritized = true});
  CHECK(weight_of(buf, 1, 3) == 0.5);
  CHECK(error_of([&] { learner.sample(View::replay, 1, 1, 0.0, rng, batch, {.zero_on_sample = true}); },
                 &message) == static_cast<int>(Errc::invalid_argument));
  CHECK(message.find("zero_on_sample") != std::string::npos);
  CHECK(error_of([&] {
          learner.sample(View::replay, 2, 1, 0.0, rng, batch, {.zero_on_sample = true, .mixture = {.uniform = 1.0}});
        }) == static_cast<int>(Errc::invalid_argument));
  // In a mixture, only the prioritized block takes its steps.
  learner.update_priorities(std::vector<uint64_t>{0, 0}, std::vector<uint64_t>{0, 1}, std::vector<float>{1.0f, 1.0f});
  learner.sample(View::replay, 2, 1, 0.0, rng, batch,
                 {.zero_on_sample = true, .mixture = {.uniform = 0.5, .prioritized = 0.5}});
  CHECK(batch.rows_of(Selector::prioritized).count == 1);
  const std::size_t taken_row = batch.rows_of(Selector::prioritized).first;
  CHECK(weight_of(buf, batch.env_ids()[taken_row], batch.start_steps()[taken_row]) == 0.0);
}

TEST_CASE("a zero-on-sample batch is a draw without replacement: ordered pairs follow successive sampling "
          "(chi-square), and a draw with replacement is rejected") {
  SegmentGuard guard(unique_name("zospair"));
  Buffer buf = Buffer::create(guard.name(), 2, 8, kSchema, {.priority_exponent = 1.0});
  Writer w(buf, std::vector<uint64_t>{0, 1});
  const std::vector<float> prio = {1.0f, 2.0f, 3.0f, 4.0f, 6.0f, 8.0f};  // env 0: steps 0-2, env 1: steps 0-2
  for (int i = 0; i < 3; ++i) {
    push(w, buf, 0, prio[static_cast<std::size_t>(i)]);
    push(w, buf, 1, prio[static_cast<std::size_t>(3 + i)]);
  }
  double total = 0;
  for (const float p : prio) total += p;
  const std::size_t n = prio.size();
  std::vector<double> successive(n * n, 0.0), with_replacement(n * n, 0.0);
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = 0; b < n; ++b) {
      with_replacement[a * n + b] = prio[a] * prio[b] / (total * total);
      if (a != b) successive[a * n + b] = prio[a] * prio[b] / (total * (total - prio[a]));
    }
  }
  Sampler learner(buf);
  Rng rng(17);
  SampleBatch batch;
  std::vector<uint64_t> counts(n * n, 0);
  const int calls = 30000;
  for (int c = 0; c < calls; ++c) {
    learner.sample(View::replay, 2, 1, 0.0, rng, batch, {.prioritized = true, .zero_on_sample = true});
    std::size_t cell[2];
    for (std::size_t r = 0; r < 2; ++r) cell[r] = batch.env_ids()[r] * 3 + batch.start_steps()[r];
    ++counts[cell[0] * n + cell[1]];
    // Both weights back for the next call (a learner's update of the rows it sampled).
    learner.update_priorities(std::vector<uint64_t>{batch.env_ids()[0], batch.env_ids()[1]},
                              std::vector<uint64_t>{batch.start_steps()[0], batch.start_steps()[1]},
                              std::vector<float>{prio[cell[0]], prio[cell[1]]});
  }
  for (std::size_t a = 0; a < n; ++a) CHECK(counts[a * n + a] == 0);  // never one step twice
  const double bound = chi_square_bound(static_cast<double>(n * (n - 1) - 1));
  CHECK(chi_square(counts, successive, calls) < bound);
  CHECK(chi_square(counts, with_replacement, calls) > bound);  // the test can tell
}

TEST_CASE("learner ranks taking steps at once while a writer pushes deliver every step exactly once") {
  SegmentGuard guard(unique_name("zosranks"));
  constexpr uint64_t kEnvs = 4;
  constexpr uint64_t kSteps = 3000;  // per env, within the capacity: no step is overwritten
  Buffer buf = Buffer::create(guard.name(), kEnvs, 4096, kSchema, {.priority_exponent = 1.0, .max_learners = 3});
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    Writer w(buf, std::vector<uint64_t>{0, 1, 2, 3});
    std::mt19937_64 gen(1);
    for (uint64_t s = 0; s < kSteps; ++s) {
      for (uint64_t e = 0; e < kEnvs; ++e) push(w, buf, e, 0.5f + static_cast<float>(gen() % 8));
    }
    writing = false;
  });
  const auto times = drain_ranks(buf, writing, 16, {.prioritized = true, .zero_on_sample = true});
  writer.join();
  CHECK(returned_twice(times) == 0);
  // Every step delivered or still positive: a call that found fewer than its 16 rows left gave its takes back.
  uint64_t positive = 0;
  for (uint64_t e = 0; e < kEnvs; ++e) {
    for (uint64_t s = 0; s < kSteps; ++s) positive += weight_of(buf, e, s) > 0 ? 1u : 0u;
  }
  CHECK(times.size() + positive == kEnvs * kSteps);
  CHECK(positive < 3 * 16);
}
