// Draws over both tiers of a tiered buffer (layout 1.11) follow the exact weights: uniform starts and
// length^power, by chi-square over every stored start of every env. Part of test_cold.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cold/cold_helpers.hpp"
#include "shmreplay/sampler.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

TEST_CASE("uniform and length^power draws over both tiers follow the exact weights (chi-square)") {
  const ColdDir dir("draws");
  const std::string name = unique_name("cold-draws");
  SegmentGuard guard(name);
  constexpr uint64_t kEnvs = 2, kCap = 8, kCold = 24, kPushed = 40;  // per env: [8, 40), 24 starts in the cold tier
  Buffer b = make_tiered(name, dir, kEnvs, kCap, kCold);
  push_payloads(b, kPushed);
  const uint64_t lo = tiered_lo(kPushed, kCap, kCold);
  REQUIRE(lo == 8);
  Sampler s(b);
  Rng rng(2026);
  SampleBatch batch;
  struct Mode {
    std::size_t L;
    double power;
  };
  for (const Mode mode : {Mode{1, 0.0}, Mode{6, 0.0}, Mode{6, 1.0}, Mode{8, 2.0}}) {
    CAPTURE(mode.L);
    CAPTURE(mode.power);
    // The planners' weight of start p: the steps of its row, min(head - p, L), to the power.
    std::vector<double> prob;
    double total = 0;
    for (uint64_t e = 0; e < kEnvs; ++e) {
      for (uint64_t p = lo; p < kPushed; ++p) {
        prob.push_back(std::pow(static_cast<double>(std::min<uint64_t>(kPushed - p, mode.L)), mode.power));
        total += prob.back();
      }
    }
    for (double& x : prob) x /= total;
    CHECK(s.total_weight(View::replay, mode.L, mode.power) == doctest::Approx(total).epsilon(1e-9));
    std::vector<uint64_t> counts(prob.size(), 0);
    const std::size_t rows = 400, calls = 60;
    uint64_t outside = 0;
    for (std::size_t call = 0; call < calls; ++call) {
      s.sample(View::replay, rows, mode.L, mode.power, rng, batch);
      for (std::size_t r = 0; r < rows; ++r) {
        const uint64_t start = batch.start_steps()[r];
        if (start < lo || start >= kPushed) {
          ++outside;
          continue;
        }
        ++counts[batch.env_ids()[r] * (kPushed - lo) + (start - lo)];
      }
    }
    CHECK(outside == 0);
    const double n = static_cast<double>(rows * calls);
    CHECK(chi_square(counts, prob, n) < chi_square_bound(static_cast<double>(prob.size() - 1)));
  }
  Buffer::remove(name);
}
