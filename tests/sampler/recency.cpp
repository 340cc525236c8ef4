// tests/sampler/recency.cpp: recency sampling through a Sampler (SampleOptions::recency_half_life): what it refuses,
// and its draws while writer threads push (chi-square over the calls no push overlapped, every row's payload
// intact). The planner alone is tested in tests/planner/recency.cpp. Part of test_sampler (tests/CMakeLists.txt).
#include <atomic>
#include <chrono>
#include <thread>

#include "payload.hpp"
#include "sampler_helpers.hpp"

namespace {

constexpr uint64_t kRecencyEnvs = 4;
constexpr uint64_t kRecencyCap = 64;
constexpr uint64_t kRecencyLength = 4;

// The probability of (env, age) for full rings of kRecencyCap steps: every env alike, age a weighing
// min(a + 1, L)^power 2^(-a / half_life). Cell env * kRecencyCap + age.
std::vector<double> full_ring_probabilities(double power, double half_life) {
  std::vector<double> p(kRecencyEnvs * kRecencyCap);
  double total = 0.0;
  for (uint64_t e = 0; e < kRecencyEnvs; ++e) {
    for (uint64_t a = 0; a < kRecencyCap; ++a) {
      const double left = static_cast<double>(std::min(a + 1, kRecencyLength));
      total += p[e * kRecencyCap + a] = std::pow(left, power) * std::exp2(-static_cast<double>(a) / half_life);
    }
  }
  for (double& x : p) x /= total;
  return p;
}

std::vector<uint64_t> heads_of(const Sampler& s) {
  std::vector<uint64_t> heads(kRecencyEnvs);
  for (uint64_t e = 0; e < kRecencyEnvs; ++e) heads[e] = s.sizes(e).head;
  return heads;
}

}  // namespace

TEST_CASE("recency sampling refuses what its closed form cannot weigh, naming the option and why") {
  SegmentGuard guard(unique_name("recency-args"));
  Buffer buf = Buffer::create(guard.name(), 2, 16, kSchema, {.episodes = {.done = "flag"}, .priority_exponent = 1.0});
  {
    Writer w(buf, {0, 1});
    for (uint64_t s = 0; s < 10; ++s) {
      for (uint64_t e = 0; e < 2; ++e) push_step(w, e, s);
    }
  }
  Sampler s(buf);
  Rng rng(1);
  SampleBatch out;
  std::string msg;
  const auto refused = [&](const SampleOptions& o, std::size_t length, double power = 1.0) {
    return error_of([&] { s.sample(View::replay, 8, length, power, rng, out, o); }, &msg) ==
           code(Errc::invalid_argument);
  };
  CHECK(refused({.recency_half_life = -1.0}, 2));
  CHECK((contains(msg, "recency_half_life is -1") && contains(msg, ">= 0")));
  CHECK(refused({.recency_half_life = std::numeric_limits<double>::infinity()}, 2));
  CHECK(refused({.recency_half_life = std::nan("")}, 2));
  CHECK(refused({.period = 2, .recency_half_life = 8.0}, 2));
  CHECK((contains(msg, "period = 2") && contains(msg, "closed form")));
  CHECK(refused({.episodes = Episodes::stop, .recency_half_life = 8.0}, 2));
  CHECK((contains(msg, "episodes = stop and sequence_length 2") && contains(msg, "recency")));
  CHECK(refused({.prioritized = true, .recency_half_life = 8.0}, 2, 0.0));
  CHECK(contains(msg, "prioritized = true"));
  CHECK(error_of([&] { (void)s.total_weight(View::replay, 2, 1.0, {.period = 3, .recency_half_life = 8.0}); }) ==
        code(Errc::invalid_argument));
  // Stop and within with single steps are cross: allowed. A half-life of 0 is no recency.
  CHECK(error_of([&] { s.sample(View::replay, 8, 1, 0.0, rng, out, {.episodes = Episodes::within,
                                                                    .recency_half_life = 8.0}); }) == 0);
  CHECK(error_of([&] { s.sample(View::replay, 8, 2, 1.0, rng, out, {.period = 2, .recency_half_life = 0.0}); }) ==
        0);
}

TEST_CASE("total_weight of a recency call is the sum of its starts' weights, and sample draws by them") {
  SegmentGuard guard(unique_name("recency-total"));
  Buffer buf = Buffer::create(guard.name(), 2, 32, kSchema);
  {
    Writer w(buf, {0, 1});
    for (uint64_t s = 0; s < 50; ++s) push_step(w, 0, s);  // wrapped: [18, 50)
    for (uint64_t s = 0; s < 9; ++s) push_step(w, 1, s);
  }
  Sampler s(buf);
  const SampleOptions o{.recency_half_life = 5.0};
  double expected = 0.0;
  for (const auto& [lo, hi] : {std::pair<uint64_t, uint64_t>{18, 50}, {0, 9}}) {
    for (uint64_t p = lo; p < hi; ++p) {
      expected += std::pow(static_cast<double>(std::min<uint64_t>(hi - p, 6)), 1.5) *
                  std::exp2(-static_cast<double>(hi - 1 - p) / 5.0);
    }
  }
  CHECK(s.total_weight(View::replay, 6, 1.5, o) == doctest::Approx(expected).epsilon(1e-12));
  CHECK(s.total_weight(View::replay, 6, 1.5, {}) > expected);  // without the decay, every start weighs more
}

TEST_CASE("recency draws follow their weights while writer threads push, and every row is intact") {
  using test::kPayloadSchema;
  SegmentGuard guard(unique_name("recency-writers"));
  Buffer buf = Buffer::create(guard.name(), kRecencyEnvs, kRecencyCap, kPayloadSchema);
  {  // every ring full, so that each snapshot's ages have the same distribution whatever its heads
    Writer w(buf, {0, 1, 2, 3});
    test::PayloadPusher pusher;
    for (uint64_t s = 0; s < kRecencyCap + 10; ++s) pusher.push(w, {0, 1, 2, 3});
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      Writer w(buf, {static_cast<uint64_t>(t), static_cast<uint64_t>(t + 2)});
      test::PayloadPusher pusher;
      while (!stop.load(std::memory_order_relaxed)) {
        pusher.push(w, {t, t + 2});
        std::this_thread::sleep_for(std::chrono::microseconds(20 + 30 * t));
      }
    });
  }
  const double power = 1.0;
  const double half_life = 20.0;
  Sampler s(buf);
  Rng rng(2026);
  SampleBatch b;
  std::vector<uint64_t> counts(kRecencyEnvs * kRecencyCap, 0);
  uint64_t clean_rows = 0;
  uint64_t overlapped_calls = 0;
  std::string violation;
  // Until enough rows of calls no push overlapped, and enough calls that one did (or a minute: the check fails).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((clean_rows < 100000 || overlapped_calls < 300) && violation.empty() &&
         std::chrono::steady_clock::now() < deadline) {
    const std::vector<uint64_t> before = heads_of(s);
    s.sample(View::replay, 64, kRecencyLength, power, rng, b, {.recency_half_life = half_life});
    const std::vector<uint64_t> after = heads_of(s);
    for (std::size_t r = 0; r < b.rows() && violation.empty(); ++r) {
      violation = test::check_row(b, r, after[b.env_ids()[r]], before[b.env_ids()[r]]);
    }
    if (before != after) {  // a push overlapped the call: its snapshot's heads are not known
      ++overlapped_calls;
      continue;
    }
    for (std::size_t r = 0; r < b.rows(); ++r) {
      const uint64_t e = b.env_ids()[r];
      ++counts[e * kRecencyCap + (after[e] - 1 - b.start_steps()[r])];
    }
    clean_rows += b.rows();
  }
  stop = true;
  for (std::thread& t : writers) t.join();
  CHECK(violation == "");
  CHECK(overlapped_calls >= 300);  // the writers did push during calls
  CHECK(clean_rows >= 100000);
  const double df = static_cast<double>(counts.size() - 1);
  CHECK(chi_square(counts, full_ring_probabilities(power, half_life), static_cast<double>(clean_rows)) <
        chi_square_bound(df));
  // A wrong model, a half-life 30% longer, is rejected by the same draws.
  CHECK(chi_square(counts, full_ring_probabilities(power, half_life * 1.3), static_cast<double>(clean_rows)) >
        chi_square_bound(df));
}
