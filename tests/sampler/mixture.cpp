// tests/sampler/mixture.cpp: a batch of a mixture of selectors (SampleOptions::mixture): the rows per selector
// (largest remainder), the blocks and what the batch says of them, the draws of the whole batch against the exact
// mixture (chi-square, a wrong mixture rejected), the prioritized block's importance weights, the whole mixture's
// (mixture_importance), determinism, the refusals, and the selector every plain call reports. Part of test_sampler (tests/CMakeLists.txt).
#include "sampler_helpers.hpp"

namespace {

constexpr uint64_t kMixEnvs = 3;
constexpr uint64_t kMixCap = 16;
constexpr uint64_t kMixLength = 3;
constexpr double kMixPower = 1.0;
constexpr double kMixHalfLife = 4.0;
// Per env: steps pushed before the online reset, and after it (the online view).
constexpr uint64_t kBefore[kMixEnvs] = {7, 20, 12};
constexpr uint64_t kAfter[kMixEnvs] = {3, 0, 3};

uint64_t mix_head(uint64_t e) { return kBefore[e] + kAfter[e]; }
uint64_t mix_lo(uint64_t e) { return mix_head(e) > kMixCap ? mix_head(e) - kMixCap : 0; }
float mix_priority(uint64_t step) { return static_cast<float>(1 + step % 5); }

// A buffer with priorities (alpha 1) in the state above, every stored step at priority mix_priority(step).
struct MixRig {
  SegmentGuard guard{unique_name("mixture")};
  Buffer buf = Buffer::create(guard.name(), kMixEnvs, kMixCap, kSchema, {.priority_exponent = 1.0});
  Sampler s{buf};

  MixRig() {
    Writer w(buf, {0, 1, 2});
    for (uint64_t e = 0; e < kMixEnvs; ++e) {
      for (uint64_t step = 0; step < kBefore[e]; ++step) push_step(w, e, step);
    }
    s.reset_online_queue();
    for (uint64_t e = 0; e < kMixEnvs; ++e) {
      for (uint64_t step = kBefore[e]; step < mix_head(e); ++step) push_step(w, e, step);
    }
    std::vector<uint64_t> envs, steps;
    std::vector<float> priorities;
    for (uint64_t e = 0; e < kMixEnvs; ++e) {
      for (uint64_t p = mix_lo(e); p < mix_head(e); ++p) {
        envs.push_back(e);
        steps.push_back(p);
        priorities.push_back(mix_priority(p));
      }
    }
    REQUIRE(s.update_priorities(envs, steps, priorities).applied == envs.size());
  }
};

// Cell of (env, start): every stored step, env by env.
std::size_t mix_cell(uint64_t env, uint64_t start) {
  std::size_t at = 0;
  for (uint64_t e = 0; e < env; ++e) at += mix_head(e) - mix_lo(e);
  return at + (start - mix_lo(env));
}
std::size_t mix_cells() { return mix_cell(kMixEnvs - 1, mix_head(kMixEnvs - 1) - 1) + 1; }

// Selector s's probability of each cell.
std::vector<double> selector_probabilities(Selector s) {
  std::vector<double> p(mix_cells(), 0.0);
  double total = 0.0;
  for (uint64_t e = 0; e < kMixEnvs; ++e) {
    const uint64_t hi = mix_head(e);
    const uint64_t lo = s == Selector::online ? std::max(mix_lo(e), kBefore[e]) : mix_lo(e);
    for (uint64_t start = lo; start < hi; ++start) {
      const double left = std::pow(static_cast<double>(std::min(hi - start, kMixLength)), kMixPower);
      const double age = static_cast<double>(hi - 1 - start);
      const double w = s == Selector::prioritized ? mix_priority(start)
                       : s == Selector::recency   ? left * std::exp2(-age / kMixHalfLife)
                                                  : left;
      total += p[mix_cell(e, start)] = w;
    }
  }
  for (double& x : p) x /= total;
  return p;
}

// The whole batch's probability of each cell: sum over selectors of (their rows / B) * their probability.
std::vector<double> mixture_probabilities(const std::array<std::size_t, kSelectors>& rows) {
  std::size_t batch = 0;
  for (const std::size_t r : rows) batch += r;
  std::vector<double> p(mix_cells(), 0.0);
  for (std::size_t i = 0; i < kSelectors; ++i) {
    if (rows[i] == 0) continue;
    const std::vector<double> one = selector_probabilities(static_cast<Selector>(i));
    for (std::size_t c = 0; c < p.size(); ++c) p[c] += static_cast<double>(rows[i]) / static_cast<double>(batch) * one[c];
  }
  return p;
}

SampleOptions mixture_options(Mixture m) {
  SampleOptions o;
  o.recency_half_life = kMixHalfLife;
  o.importance_exponent = 1.0;
  o.mixture = m;
  return o;
}

}  // namespace

TEST_CASE("a mixture's rows per selector: floor of each quota, the rest to the largest remainders, earlier first") {
  using Rows = std::array<std::size_t, kSelectors>;
  CHECK(Mixture{.uniform = 0.5, .prioritized = 0.25, .recency = 0.25}.rows(8) == Rows{4, 2, 2, 0});
  CHECK(Mixture{.uniform = 0.5, .prioritized = 0.25, .recency = 0.25}.rows(7) == Rows{3, 2, 2, 0});
  CHECK(Mixture{.uniform = 1, .prioritized = 1, .recency = 1}.rows(10) == Rows{4, 3, 3, 0});  // normalized by the sum
  CHECK(Mixture{.online = 3}.rows(5) == Rows{0, 0, 0, 5});
  CHECK(Mixture{.uniform = 0.9, .online = 0.1}.rows(3) == Rows{3, 0, 0, 0});  // a small share may get no row
  std::mt19937_64 gen(47);
  for (int i = 0; i < 20000; ++i) {
    Mixture m{};
    double f[kSelectors];
    for (double& x : f) x = gen() % 3 == 0 ? 0.0 : static_cast<double>(gen() % 1000) / 7.0;
    if (f[0] + f[1] + f[2] + f[3] + f[4] == 0.0) f[gen() % kSelectors] = 1.0;
    m = {f[0], f[1], f[2], f[3], f[4]};
    const std::size_t batch = 1 + gen() % 3000;
    const Rows rows = m.rows(batch);
    std::size_t sum = 0;
    for (std::size_t s = 0; s < kSelectors; ++s) {
      sum += rows[s];
      const double quota = f[s] / (f[0] + f[1] + f[2] + f[3] + f[4]) * static_cast<double>(batch);
      REQUIRE(std::abs(static_cast<double>(rows[s]) - quota) < 1.0);  // within one row of its quota
      if (f[s] == 0.0) REQUIRE(rows[s] == 0);
    }
    REQUIRE(sum == batch);
  }
}

TEST_CASE("a mixture batch follows the exact mixture of its selectors (chi-square), and a wrong mixture is rejected") {
  MixRig rig;
  const SampleOptions o = mixture_options({.uniform = 0.5, .prioritized = 0.25, .recency = 0.125, .online = 0.125});
  const std::array<std::size_t, kSelectors> rows = o.mixture.rows(64);
  REQUIRE(rows == std::array<std::size_t, kSelectors>{32, 16, 8, 8});
  Rng rng(2047);
  SampleBatch b;
  std::vector<uint64_t> counts(mix_cells(), 0);
  std::vector<uint64_t> online_outside(1, 0);
  uint64_t draws = 0;
  for (int call = 0; call < 1500; ++call) {
    rig.s.sample(View::replay, 64, kMixLength, kMixPower, rng, b, o);
    REQUIRE(b.selector_rows() == rows);
    const SampleBatch::RowBlock online = b.rows_of(Selector::online);
    REQUIRE((online.first == 56 && online.count == 8));
    for (std::size_t r = 0; r < b.rows(); ++r) {
      const uint64_t e = b.env_ids()[r];
      const uint64_t start = b.start_steps()[r];
      REQUIRE(start >= mix_lo(e));
      REQUIRE(start < mix_head(e));
      if (r >= online.first && start < kBefore[e]) ++online_outside[0];  // online rows from the online view only
      ++counts[mix_cell(e, start)];
      ++draws;
    }
  }
  CHECK(online_outside[0] == 0);
  const std::vector<double> model = mixture_probabilities(rows);
  std::size_t support = 0;
  for (const double p : model) support += p > 0.0;
  const double bound = chi_square_bound(static_cast<double>(support - 1));
  CHECK(chi_square(counts, model, static_cast<double>(draws)) < bound);
  // The same selectors in other proportions: uniform and prioritized swapped.
  CHECK(chi_square(counts, mixture_probabilities({16, 32, 8, 8}), static_cast<double>(draws)) > bound);
}

TEST_CASE("a mixture's prioritized block holds its importance weights, the other blocks 1; a seed repeats a batch") {
  MixRig rig;
  const SampleOptions o = mixture_options({.uniform = 1, .prioritized = 2, .recency = 1});
  Rng a(5);
  Rng c(5);
  SampleBatch b;
  SampleBatch again;
  rig.s.sample(View::replay, 40, kMixLength, kMixPower, a, b, o);
  rig.s.sample(View::replay, 40, kMixLength, kMixPower, c, again, o);
  CHECK(std::vector<uint64_t>(b.start_steps().begin(), b.start_steps().end()) ==
        std::vector<uint64_t>(again.start_steps().begin(), again.start_steps().end()));
  const SampleBatch::RowBlock prio = b.rows_of(Selector::prioritized);
  REQUIRE((prio.first == 10 && prio.count == 20));
  float largest = 0.0f;
  for (std::size_t r = 0; r < b.rows(); ++r) {
    const float w = b.weights()[r];
    if (r < prio.first || r >= prio.first + prio.count) {
      CHECK(w == 1.0f);
      continue;
    }
    largest = std::max(largest, w);
    // beta 1: (N P)^-1 over the block's largest; P = priority / total, so w is proportional to 1 / priority.
    CHECK(w > 0.0f);
    CHECK(w <= 1.0f);
  }
  CHECK(largest == 1.0f);
  // Two rows of the block: weights in the inverse ratio of their priorities.
  const uint64_t r0 = prio.first;
  for (std::size_t r = prio.first + 1; r < prio.first + prio.count; ++r) {
    const double want = static_cast<double>(mix_priority(b.start_steps()[r0])) / mix_priority(b.start_steps()[r]);
    CHECK(b.weights()[r] / b.weights()[r0] == doctest::Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("with mixture_importance every row's weight is (N P)^-beta over the batch's largest, P the whole "
          "mixture's probability of the row; without a mixture, or with a period, it is refused") {
  MixRig rig;
  SampleOptions o = mixture_options({.uniform = 1, .prioritized = 2, .recency = 1, .online = 1});
  o.mixture_importance = true;
  o.importance_exponent = 0.7;
  Rng rng(9);
  SampleBatch b;
  rig.s.sample(View::replay, 50, kMixLength, kMixPower, rng, b, o);
  const std::vector<double> p = mixture_probabilities(o.mixture.rows(50));
  double smallest = 1.0;
  for (std::size_t r = 0; r < b.rows(); ++r) smallest = std::min(smallest, p[mix_cell(b.env_ids()[r], b.start_steps()[r])]);
  for (std::size_t r = 0; r < b.rows(); ++r) {
    CAPTURE(r);
    const double want = std::pow(smallest / p[mix_cell(b.env_ids()[r], b.start_steps()[r])], 0.7);
    CHECK(b.weights()[r] == doctest::Approx(want).epsilon(1e-5));
  }
  std::string message;
  SampleOptions alone;
  alone.mixture_importance = true;
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, kMixLength, kMixPower, rng, b, alone); }, &message) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(message.find("mixture_importance") != std::string::npos);
  o.period = 2;
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, kMixLength, kMixPower, rng, b, o); }, &message) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(message.find("period = 2") != std::string::npos);
}

TEST_CASE("a mixture refuses bad fractions, prioritized beside it, a selector its buffer cannot serve, and other calls") {
  MixRig rig;
  Rng rng(1);
  SampleBatch b;
  std::string msg;
  const auto refused = [&](const SampleOptions& o) {
    return error_of([&] { rig.s.sample(View::replay, 8, 2, 1.0, rng, b, o); }, &msg) == code(Errc::invalid_argument);
  };
  CHECK(refused(mixture_options({.uniform = -0.5, .recency = 1})));
  CHECK((contains(msg, "uniform fraction is -0.5") && contains(msg, ">= 0")));
  CHECK(refused(mixture_options({.uniform = std::nan(""), .recency = 1})));
  CHECK(refused(mixture_options({.uniform = 1e308, .recency = 1e308})));
  CHECK(contains(msg, "sum to inf"));
  SampleOptions both = mixture_options({.uniform = 1, .prioritized = 1});
  both.prioritized = true;
  CHECK(refused(both));
  CHECK(contains(msg, "prioritized = true"));
  SampleOptions no_half_life = mixture_options({.recency = 1});
  no_half_life.recency_half_life = 0.0;
  CHECK(refused(no_half_life));
  CHECK(contains(msg, "recency_half_life is 0"));
  CHECK(error_of([&] { rig.s.sample_mixed(4, 4, 2, 1.0, rng, b, mixture_options({.uniform = 1})); }, &msg) ==
        code(Errc::invalid_argument));
  CHECK(contains(msg, "only sample and sample_transitions"));
  CHECK(error_of([&] { (void)rig.s.total_weight(View::replay, 2, 1.0, mixture_options({.uniform = 1})); }) ==
        code(Errc::invalid_argument));
  // Prioritized rows in a buffer without priorities.
  Rig plain("mixture-plain", 2, 8);
  push_env(plain.w, plain.m, 0, 4);
  CHECK(error_of([&] { plain.s.sample(View::replay, 8, 2, 1.0, rng, b, {.mixture = {.uniform = 1, .prioritized = 1}}); },
                 &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "without priorities"));
  // A share too small for a row asks nothing of its selector: no priorities needed for 0 prioritized rows.
  CHECK(error_of([&] { plain.s.sample(View::replay, 2, 2, 1.0, rng, b, {.mixture = {.uniform = 9, .prioritized = 1}}); }) ==
        0);
}

TEST_CASE("every call without a mixture tells its selector: one block, and sample_mixed's replay and online blocks") {
  MixRig rig;
  Rng rng(9);
  SampleBatch b;
  using Rows = std::array<std::size_t, kSelectors>;
  rig.s.sample(View::replay, 6, 2, 1.0, rng, b);
  CHECK(b.selector_rows() == Rows{6, 0, 0, 0});
  rig.s.sample(View::replay, 6, 2, 0.0, rng, b, {.prioritized = true});
  CHECK(b.selector_rows() == Rows{0, 6, 0, 0});
  rig.s.sample_transitions(View::replay, 5, rng, b, {.recency_half_life = 3.0});
  CHECK(b.selector_rows() == Rows{0, 0, 5, 0});
  rig.s.sample(View::online, 4, 2, 1.0, rng, b);
  CHECK(b.selector_rows() == Rows{0, 0, 0, 4});
  rig.s.sample_mixed(3, 2, 2, 1.0, rng, b);
  CHECK(b.selector_rows() == Rows{3, 0, 0, 2});
  CHECK((b.rows_of(Selector::online).first == 3 && b.rows_of(Selector::online).count == 2));
  const std::vector<uint64_t> envs = {0, 2};
  rig.s.peek(envs, b);  // newest steps: no selector drew them
  CHECK(b.selector_rows() == Rows{0, 0, 0, 0});
}
