// The learner's mix (issue 48 part 3; docs/design/reanalyse.md, "The learner's mix"): SampleOptions::reanalysed and
// a Mixture's reanalysed rows draw uniformly from the steps of the chunks completed with the newest target version:
// the draws against that exact model (chi-square), a wrong model (the uniform selector's min(r, L)^power weights)
// rejected, the blocks, and the refusals.
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "reanalyse/reanalyse_helpers.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

constexpr uint64_t kLength = 4;
// Env 0 holds 16 steps (chunks 0-3), env 1 14 (chunks 0-2 full, chunk 3 filling). Versions: env 0's chunks 2, 1, 2,
// 2; env 1's 1, 2, 1. Fresh (version 2, the newest): env 0 steps 0-3 and 8-15, env 1 steps 4-7.
constexpr uint64_t kHead[2] = {16, 14};
constexpr uint64_t kVersions[2][4] = {{2, 1, 2, 2}, {1, 2, 1, 0}};

bool fresh(uint64_t env, uint64_t start) { return start < 4 * (kHead[env] / 4) && kVersions[env][start / 4] == 2; }

struct MixRig {
  WalkRig rig{"walk_mix", 2, 16, 4};
  MixRig() {
    Writer w(rig.buf, {0, 1});
    for (uint64_t e = 0; e < 2; ++e) push_steps(w, e, kHead[e]);
    Reanalyser r(rig.buf);
    while (std::optional<ReanalyseChunk> c = r.try_next(ReanalyseOrder::sweep)) {
      if (c->pass != 1) break;
      REQUIRE(r.complete(*c, kVersions[c->env][c->chunk]));
    }
  }
};

// Cell of a fresh (env, start), in env and step order; the model's probability of each: `power` 0 is the walk's
// uniform, power 1 the uniform selector's min(r, L) weights (the wrong model).
std::vector<double> model(double power, std::vector<std::array<uint64_t, 2>>& cells) {
  std::vector<double> p;
  double total = 0.0;
  for (uint64_t e = 0; e < 2; ++e) {
    for (uint64_t s = 0; s < kHead[e]; ++s) {
      if (!fresh(e, s)) continue;
      cells.push_back({e, s});
      p.push_back(std::pow(static_cast<double>(std::min(kHead[e] - s, kLength)), power));
      total += p.back();
    }
  }
  for (double& x : p) x /= total;
  return p;
}

}  // namespace

TEST_CASE("a mixture's reanalysed rows are uniform over the steps of the chunks completed with the newest target "
          "version, beside the uniform rows; a model with the uniform selector's weights is rejected") {
  MixRig mix;
  Sampler s(mix.rig.buf);
  Rng rng(48);
  SampleBatch batch;
  SampleOptions o;
  o.mixture = {.uniform = 3, .reanalysed = 1};
  std::vector<std::array<uint64_t, 2>> cells;
  const std::vector<double> uniform = model(0.0, cells);
  const std::vector<double> wrong = model(1.0, cells);
  std::vector<uint64_t> counts(uniform.size(), 0);
  uint64_t outside = 0;
  uint64_t n = 0;
  for (int call = 0; call < 1500; ++call) {
    s.sample(View::replay, 32, kLength, 1.0, rng, batch, o);
    REQUIRE(batch.selector_rows() == std::array<std::size_t, kSelectors>{24, 0, 0, 0, 8});
    for (std::size_t row = 24; row < 32; ++row) {
      const uint64_t e = batch.env_ids()[row], start = batch.start_steps()[row];
      if (!fresh(e, start)) {
        ++outside;
        continue;
      }
      std::size_t c = 0;
      while (cells[c] != std::array<uint64_t, 2>{e, start}) ++c;
      ++counts[c];
      ++n;
    }
  }
  CHECK(outside == 0);
  const double df = static_cast<double>(uniform.size() - 1);
  CHECK(chi_square(counts, uniform, static_cast<double>(n)) < chi_square_bound(df));
  CHECK(chi_square(counts, wrong, static_cast<double>(n)) > chi_square_bound(df));
}

TEST_CASE("a reanalysed sample draws only fresh starts and reports one reanalysed block; none fresh is an empty "
          "view; the refusals") {
  MixRig mix;
  Sampler s(mix.rig.buf);
  Rng rng(7);
  SampleBatch batch;
  s.sample(View::replay, 64, 1, 0.0, rng, batch, {.reanalysed = true});
  CHECK(batch.selector_rows() == std::array<std::size_t, kSelectors>{0, 0, 0, 0, 64});
  for (std::size_t row = 0; row < 64; ++row) CHECK(fresh(batch.env_ids()[row], batch.start_steps()[row]));

  WalkRig bare("walk_mix_bare", 1, 16, 4);
  {
    Writer w(bare.buf, {0});
    push_steps(w, 0, 8);
  }
  Sampler none(bare.buf);
  CHECK_THROWS_AS(none.sample(View::replay, 1, 1, 0.0, rng, batch, {.reanalysed = true}), Error);

  SegmentGuard g(unique_name("walk_mix_plain"));
  Buffer plain = Buffer::create(g.name(), 1, 8, kWalkSchema);
  Sampler p(plain);
  CHECK_THROWS_WITH_AS(p.sample(View::replay, 1, 1, 0.0, rng, batch, {.reanalysed = true}),
                       doctest::Contains("the buffer has no reanalyse walk"), Error);
  SampleOptions both;
  both.reanalysed = true;
  both.recency_half_life = 4;
  CHECK_THROWS_WITH_AS(s.sample(View::replay, 1, 1, 0.0, rng, batch, both),
                       doctest::Contains("recency_half_life weighs starts otherwise"), Error);
}
