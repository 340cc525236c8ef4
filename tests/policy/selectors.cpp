// Policy windows with the selectors of issue 47 (docs/design/sampling.md, "Recency", "Mixtures of selectors"): a
// recency sample draws by its decay from exactly the steps inside the window (chi-square, a model that ignores the
// window rejected), and every block of a mixture stays inside it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "policy/policy_helpers.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

using namespace staggered;  // the buffer window.cpp samples too (policy_helpers.hpp)

constexpr double kSelHalfLife = 6.0;

// Recency's probability of each stored step (cell env * kCap + step - lo), over the steps of versions >= floor.
std::vector<double> recency_model(uint32_t floor) {
  std::vector<double> p(kEnvs * kCap, 0.0);
  double total = 0.0;
  for (uint64_t e = 0; e < kEnvs; ++e) {
    const uint64_t lo = kSteps[e] - kCap;
    for (uint64_t s = lo; s < kSteps[e]; ++s) {
      if (version_of(e, s) < floor) continue;
      total += p[cell(e, s)] = std::exp2(-static_cast<double>(kSteps[e] - 1 - s) / kSelHalfLife);
    }
  }
  for (double& x : p) x /= total;
  return p;
}

}  // namespace

TEST_CASE("recency under a policy window draws by its decay from exactly the steps inside it, and every block of a "
          "mixture stays inside it") {
  PolicyRig rig("policy-selectors", kEnvs, kCap);
  fill(rig.buf);
  Sampler s(rig.buf);
  constexpr uint32_t kFloor = 10;
  (void)s.publish_policy(14, 4);  // versions >= 10: env 0 steps 20..49, env 1 30..39, env 2 none
  Rng rng(11);
  SampleBatch batch;
  std::vector<uint64_t> counts(kEnvs * kCap, 0);
  uint64_t outside = 0;
  double n = 0;
  for (int c = 0; c < 150; ++c) {
    s.sample_transitions(View::replay, 400, rng, batch, {.recency_half_life = kSelHalfLife});
    REQUIRE(batch.policy_floor() == kFloor);
    const auto versions = batch.field_as<uint32_t>(0);
    for (std::size_t r = 0; r < batch.rows(); ++r) {
      const uint64_t e = batch.env_ids()[r];
      outside += versions[r] < kFloor;
      ++counts[cell(e, batch.start_steps()[r])];
      ++n;
    }
  }
  CHECK(outside == 0);
  CHECK(chi_square(counts, recency_model(kFloor), n) < chi_square_bound(30 + 10 - 1));
  CHECK(chi_square(counts, recency_model(0), n) > chi_square_bound(30 + 10 - 1));  // the window ignored

  SampleOptions mix{.recency_half_life = kSelHalfLife};
  mix.mixture = {.uniform = 1, .recency = 1, .online = 1};
  for (int c = 0; c < 50; ++c) {
    s.sample(View::replay, 30, 2, 1.0, rng, batch, mix);
    CHECK(batch.selector_rows() == std::array<std::size_t, kSelectors>{10, 0, 10, 10});
    REQUIRE(batch.policy_floor() == kFloor);
    const auto versions = batch.field_as<uint32_t>(0);
    for (std::size_t r = 0; r < batch.rows(); ++r) outside += versions[r * 2] < kFloor;  // each row's first step
  }
  CHECK(outside == 0);
}
