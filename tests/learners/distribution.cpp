// The draws of several learners together follow one learner's distribution, and ranks draw independently
// (layout 1.7; docs/design/learners.md, "Random streams").
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "learners/learners_helpers.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

constexpr uint64_t kDistEnvs = 3;
constexpr uint64_t kDistCapacity = 16;
constexpr uint64_t kDistHeads[kDistEnvs] = {7, 20, 12};  // env 1 wrapped: its replay view is [4, 20)

// A buffer with priorities and three learner slots, each env holding kDistHeads[e] payload steps, every stored
// step given priority 1 + step % 5 (by a learner that then leaves its slot).
struct DistRig {
  SegmentGuard guard{unique_name("learners-dist")};
  Buffer buf = Buffer::create(guard.name(), kDistEnvs, kDistCapacity, kPayloadSchema,
                              {.priority_exponent = 1.0, .max_learners = 3});

  DistRig() {
    Writer w(buf, {0, 1, 2});
    PayloadPusher pusher;
    for (uint64_t e = 0; e < kDistEnvs; ++e) {
      for (uint64_t s = 0; s < kDistHeads[e]; ++s) pusher.push(w, {static_cast<int32_t>(e)});
    }
    Sampler s(buf);
    std::vector<uint64_t> envs, steps;
    std::vector<float> priorities;
    for (uint64_t e = 0; e < kDistEnvs; ++e) {
      for (uint64_t p = lo(e); p < kDistHeads[e]; ++p) {
        envs.push_back(e);
        steps.push_back(p);
        priorities.push_back(static_cast<float>(1 + p % 5));
      }
    }
    REQUIRE(s.update_priorities(envs, steps, priorities).applied == envs.size());
  }
  static uint64_t lo(uint64_t e) { return kDistHeads[e] > kDistCapacity ? kDistHeads[e] - kDistCapacity : 0; }
  // The cell of a drawn start: the stored steps of every env, env by env.
  static std::size_t cell(uint64_t env, uint64_t start) {
    std::size_t at = 0;
    for (uint64_t e = 0; e < env; ++e) at += kDistHeads[e] - lo(e);
    return at + (start - lo(env));
  }
  static std::size_t cells() { return cell(kDistEnvs - 1, kDistHeads[kDistEnvs - 1] - 1) + 1; }
  // A single learner's probability of each start: min(remaining, L)^power, or (prioritized) the priority.
  static std::vector<double> probabilities(std::size_t length, double power, bool prioritized) {
    std::vector<double> p(cells(), 0.0);
    double total = 0.0;
    for (uint64_t e = 0; e < kDistEnvs; ++e) {
      for (uint64_t s = lo(e); s < kDistHeads[e]; ++s) {
        const double w = prioritized ? static_cast<double>(1 + s % 5)
                                     : std::pow(static_cast<double>(std::min<uint64_t>(kDistHeads[e] - s, length)),
                                                power);
        p[cell(e, s)] = w;
        total += w;
      }
    }
    for (double& q : p) q /= total;
    return p;
  }
};

}  // namespace

TEST_CASE("the draws of three learners at once follow one learner's distribution (chi-square), and the test has "
          "power") {
  DistRig rig;
  constexpr std::size_t kRows = 500;
  constexpr std::size_t kCalls = 60;  // per learner: 3 x 60 x 500 = 90,000 rows per distribution
  constexpr std::size_t kLength = 4;
  struct Case {
    double power;
    bool prioritized;
    std::size_t length;
  };
  const Case cases[] = {{0.0, false, kLength}, {2.0, false, kLength}, {0.0, true, 1}};
  std::vector<std::vector<uint64_t>> counts;
  for (const Case& c : cases) {
    std::vector<std::vector<uint64_t>> per(3, std::vector<uint64_t>(DistRig::cells(), 0));
    std::vector<uint64_t> outside(3, 0);
    std::vector<std::thread> learners;
    for (uint64_t r = 0; r < 3; ++r) {
      learners.emplace_back([&, r] {
        Sampler s(rig.buf, {.rank = r});
        Rng rng = rank_rng(2026, r);
        SampleBatch out;
        for (std::size_t call = 0; call < kCalls; ++call) {
          s.sample(View::replay, kRows, c.length, c.power, rng, out, {.prioritized = c.prioritized});
          for (std::size_t row = 0; row < kRows; ++row) {
            const uint64_t e = out.env_ids()[row];
            const uint64_t p = out.start_steps()[row];
            if (e >= kDistEnvs || p < DistRig::lo(e) || p >= kDistHeads[e]) {
              ++outside[r];
            } else {
              ++per[r][DistRig::cell(e, p)];
            }
          }
        }
      });
    }
    for (std::thread& t : learners) t.join();
    std::vector<uint64_t> all(DistRig::cells(), 0);
    for (uint64_t r = 0; r < 3; ++r) {
      CHECK(outside[r] == 0);
      for (std::size_t i = 0; i < all.size(); ++i) all[i] += per[r][i];
    }
    counts.push_back(all);
  }
  const double n = 3.0 * kRows * kCalls;
  const double bound = chi_square_bound(static_cast<double>(DistRig::cells() - 1));
  CAPTURE(bound);
  const std::vector<double> uniform = DistRig::probabilities(kLength, 0.0, false);
  const std::vector<double> squared = DistRig::probabilities(kLength, 2.0, false);
  const std::vector<double> prioritized = DistRig::probabilities(1, 0.0, true);
  CHECK(chi_square(counts[0], uniform, n) < bound);
  CHECK(chi_square(counts[1], squared, n) < bound);
  CHECK(chi_square(counts[2], prioritized, n) < bound);
  // The same bound rejects each against another one's distribution.
  CHECK(chi_square(counts[0], squared, n) > bound);
  CHECK(chi_square(counts[1], uniform, n) > bound);
  CHECK(chi_square(counts[2], uniform, n) > bound);
}

TEST_CASE("ranks seeded alike draw independent streams: their rows coincide at the rate chance gives") {
  DistRig rig;
  // Uniform single steps over the 35 stored steps: two independent rows coincide with probability sum p^2 = 1/35.
  constexpr std::size_t kRows = 1000;
  constexpr std::size_t kCalls = 100;
  Sampler a(rig.buf, {.rank = 0});
  Sampler b(rig.buf, {.rank = 1});
  const auto coincidences = [&](Rng ra, Rng rb) {
    SampleBatch x, y;
    uint64_t same = 0;
    for (std::size_t call = 0; call < kCalls; ++call) {
      a.sample(View::replay, kRows, 1, 0.0, ra, x);
      b.sample(View::replay, kRows, 1, 0.0, rb, y);
      for (std::size_t row = 0; row < kRows; ++row) {
        same += x.env_ids()[row] == y.env_ids()[row] && x.start_steps()[row] == y.start_steps()[row];
      }
    }
    return same;
  };
  const double n = static_cast<double>(kRows * kCalls);
  const double p = 1.0 / static_cast<double>(DistRig::cells());
  const double expected = n * p;
  const double sd = std::sqrt(n * p * (1 - p));
  CAPTURE(expected);
  CAPTURE(sd);
  for (const uint64_t seed : {uint64_t{0}, uint64_t{5}, uint64_t{1} << 40}) {
    CAPTURE(seed);
    CHECK(std::abs(static_cast<double>(coincidences(rank_rng(seed, 0), rank_rng(seed, 1))) - expected) < 6 * sd);
    CHECK(std::abs(static_cast<double>(coincidences(rank_rng(seed, 1), rank_rng(seed, 2))) - expected) < 6 * sd);
  }
  // The test has power: one stream given to both coincides on every row.
  CHECK(coincidences(rank_rng(5, 1), rank_rng(5, 1)) == kRows * kCalls);
  // Rank 0's stream is a single learner's: Rng(seed).
  Rng single(5);
  Rng rank0 = rank_rng(5, 0);
  for (int i = 0; i < 100; ++i) CHECK(single() == rank0());
}
