// tests/stacks/lost_steps.cpp: the steps whose frames were overwritten are left out of the views exactly: the views'
// lower bound (Sampler::sizes, Inspector's lengths) equals a reference model of the frame rings (frames per step 1 or
// K, a ring of F frames, a step sampleable iff its slot is stored and its oldest frame is among the newest F written)
// for every pattern of restarts; with only continuing stacks nothing is lost; restarts within the reserve cost
// nothing and each one past it K - 1 steps; and the planners draw from exactly those steps (chi-square of many draws
// against the model's distribution, uniform, min(remaining, L)^power and prioritized, and a model that ignores the
// lost steps rejected by the same bound). Every sampled row is checked byte for byte too.
// Part of test_stacks (tests/CMakeLists.txt); its helpers are in stacks_helpers.hpp.
#include "stacks_helpers.hpp"

TEST_CASE("the views' lower bound equals the reference model's for any pattern of restarts, K, capacity and reserve") {
  struct Config {
    std::vector<std::string> stacked;
    uint64_t cap, restarts, one_in;
  };
  const std::vector<Config> configs = {
      {{"obs:u8[4,3,3]:stack=0"}, 16, 1, 3},
      {{"obs:u8[4,3,3]:stack=0"}, 16, 2, 2},
      {{"obs:u8[2,3,3]:stack=0"}, 8, 1, 2},
      {{"obs:u8[3,4]:stack=-1"}, 33, 3, 4},
      {{"obs:u8[4,3,3]:stack=0", "aux:u8[2,2,5]:stack=1"}, 16, 1, 3},  // lost when either field's frames are gone
      {{"obs:u8[4,3,3]:stack=0"}, 16, 1, 1000000},                       // only continuing stacks
  };
  for (const Config& c : configs) {
    for (const bool flagless : {false, true}) {
      CAPTURE(c.stacked[0]);
      CAPTURE(c.cap);
      CAPTURE(c.restarts);
      CAPTURE(c.one_in);
      CAPTURE(flagless);
      StackRig rig("stk-lo", c.stacked, 3, c.cap, {.stack_restarts = c.restarts});
      std::mt19937_64 gen(c.cap * 31 + c.restarts + (flagless ? 7 : 0));
      uint64_t max_lost = 0, ever_lost = 0;
      for (int round = 0; round < 400; ++round) {
        // Uneven rates: env e pushes in about (e + 1) rounds of 3.
        std::vector<uint64_t> envs;
        for (const uint64_t e : rig.all) {
          if (gen() % 3 <= e) envs.push_back(e);
        }
        if (envs.empty()) continue;
        rig.push(envs, kPaths[gen() % kPaths.size()], gen, c.one_in, flagless);
        REQUIRE_MESSAGE(check_sizes(rig.s, rig.m) == "", check_sizes(rig.s, rig.m));
        uint64_t total = 0;
        for (const uint64_t e : rig.all) {
          max_lost = std::max(max_lost, rig.m.lost(e));
          ever_lost += rig.m.lost(e) > 0;
          total += rig.m.head(e) - rig.m.lo(e);
          // The env control word itself: the oldest step whose frames are intact (a lower bound the writer raises
          // past every lost step, never past a stored intact one).
          const uint64_t intact = segment_of(rig.buf).env_control(e).stacks_intact_from.load();
          REQUIRE(intact <= rig.m.lo(e));
          if (rig.m.lost(e) > 0) REQUIRE(intact == rig.m.lo(e));
        }
        REQUIRE(rig.s.size(View::replay) == total);
        if (round % 50 == 0) {
          const SegmentInfo info = Inspector(rig.guard.name()).snapshot();
          for (const uint64_t e : rig.all) REQUIRE(info.envs[e].length == rig.m.head(e) - rig.m.lo(e));
          REQUIRE(info.replay_steps == total);
        }
      }
      CAPTURE(max_lost);
      if (c.one_in > 1000) {
        CHECK(ever_lost == 0);  // nothing is lost when every stack continues its predecessor's
      } else {
        CHECK(ever_lost > 0);
      }
      // The reserve bounds the loss: at most (K - 1) per restart among the stored steps past the reserve, so less
      // than the capacity.
      CHECK(max_lost < c.cap);
    }
  }
}

TEST_CASE("restarts within the reserve cost no step; each restart past it costs K - 1 steps") {
  for (const uint64_t K : {2u, 4u}) {
    for (const uint64_t reserve : {1u, 3u}) {
      CAPTURE(K);
      CAPTURE(reserve);
      const uint64_t cap = 16;
      StackRig rig("stk-cost", {fmt::format("obs:u8[{},3,3]:stack=0", K)}, 1, cap, {.stack_restarts = reserve},
                   /*episodes=*/false);
      const auto push = [&](Move move) {
        push_steps(rig.w, rig.m, {0}, {rig.m.next(0, move, false)}, PushPath::one);
      };
      for (int i = 0; i < 40; ++i) push(Move::cont);  // a long run of continuing stacks: nothing lost
      CHECK(rig.s.sizes(0).replay == cap);
      for (uint64_t n = 1; n <= reserve + 3; ++n) {
        CAPTURE(n);
        push(n % 2 ? Move::reset_zeros : Move::jump);  // n restarts in a row among the stored steps
        const uint64_t lost = n > reserve ? (n - reserve) * (K - 1) : 0;
        CHECK(rig.s.sizes(0).replay == cap - lost);
        CHECK(rig.m.lost(0) == lost);
      }
      // Continuing steps again: once the restarts leave the stored steps, nothing is lost.
      for (uint64_t i = 0; i < cap; ++i) push(Move::cont);
      CHECK(rig.s.sizes(0).replay == cap);
      CHECK(check_read_steps(rig.buf, rig.m, 0) == "");
    }
  }
}

namespace {

// The cells of the replay view as a model that ignores lost frames sees it (env-major), and each cell's probability
// under the true model (0 for a lost step) and under the wrong one.
struct LostCells {
  std::vector<uint64_t> offset;  // per env, its first cell
  std::vector<double> right, wrong;
  std::size_t lost = 0;
};

template <class Weight>
LostCells lost_cells(const Model& m, const Weight& weight) {
  LostCells c;
  double right_total = 0, wrong_total = 0;
  for (uint64_t e = 0; e < m.num_envs(); ++e) {
    c.offset.push_back(c.right.size());
    for (uint64_t p = m.lo_ignoring_frames(e); p < m.head(e); ++p) {
      const double w = weight(e, p);
      c.wrong.push_back(w);
      c.right.push_back(p >= m.lo(e) ? w : 0.0);
      c.lost += p < m.lo(e);
      right_total += c.right.back();
      wrong_total += w;
    }
  }
  for (double& x : c.right) x /= right_total;
  for (double& x : c.wrong) x /= wrong_total;
  return c;
}

std::size_t nonzero(const std::vector<double>& p) {
  return static_cast<std::size_t>(std::count_if(p.begin(), p.end(), [](double x) { return x > 0; }));
}

// A sampling mode of the chi-square test.
struct ChiMode {
  const char* name;
  std::size_t L;
  double power;
  bool prioritized;
};

// Gives every lost step whose slot is still stored priority 50 (in the buffer and the model).
void raise_lost_priorities(StackRig& rig) {
  std::vector<uint64_t> es, ss;
  std::vector<float> ps;
  for (const uint64_t e : rig.all) {
    for (uint64_t p = rig.m.lo_ignoring_frames(e); p < rig.m.lo(e); ++p) {
      es.push_back(e);
      ss.push_back(p);
      ps.push_back(50.0f);
    }
  }
  const PriorityUpdateResult r = rig.s.update_priorities(es, ss, ps);
  CHECK(r.applied + r.dropped == es.size());
  for (std::size_t i = 0; i < es.size(); ++i) rig.m.envs[es[i]].steps[ss[i]].priority = ps[i];
}

// Counts each row's start of `batch` in its cell of `counts`; the rows that start outside the model's sampleable
// steps (a lost step, or past the head), which it returns.
uint64_t count_starts(const SampleBatch& batch, const Model& m, const LostCells& cells,
                      std::vector<uint64_t>& counts) {
  uint64_t outside = 0;
  for (std::size_t row = 0; row < batch.rows(); ++row) {
    const uint64_t e = batch.env_ids()[row];
    const uint64_t p = batch.start_steps()[row];
    if (p < m.lo(e) || p >= m.head(e)) {
      ++outside;
      continue;
    }
    ++counts[cells.offset[e] + (p - m.lo_ignoring_frames(e))];
  }
  return outside;
}

}  // namespace

TEST_CASE("the planners draw exactly from the steps whose stacks can be rebuilt (chi-square against the frame-ring "
          "model: uniform, min(remaining, L)^power, prioritized; a model ignoring the lost steps is rejected)") {
  const double alpha = 0.7;
  const uint64_t cap = 24;
  StackRig rig("stk-chi", {"obs:u8[4,3,3]:stack=0", "mid:u8[2,2,3]:stack=1"}, 3, cap,
               {.priority_exponent = alpha, .stack_restarts = 1});
  std::mt19937_64 gen(77);
  for (int round = 0; round < 90; ++round) {
    std::vector<uint64_t> envs;
    for (const uint64_t e : rig.all) {
      if (gen() % 3 <= e) envs.push_back(e);
    }
    if (!envs.empty()) rig.push(envs, round % 2 ? PushPath::batch64 : PushPath::reserve, gen, 3, false, true);
  }
  REQUIRE(check_sizes(rig.s, rig.m) == "");
  std::size_t lost = 0;
  for (const uint64_t e : rig.all) lost += rig.m.lost(e);
  CAPTURE(lost);
  REQUIRE(lost >= 6);  // enough steps left out for the wrong model to be told apart
  // Lost steps whose slots are still stored get the largest priorities: a planner that drew from them would draw
  // them most.
  raise_lost_priorities(rig);
  const ChiMode modes[] = {{"uniform, L 1", 1, 0.0, false},   {"uniform, L 6", 6, 0.0, false},
                        {"power 1, L 6", 6, 1.0, false},   {"power 2, L 9", 9, 2.0, false},
                        {"prioritized, L 3", 3, 0.0, true}};
  Rng rng(123);
  SampleBatch batch;
  for (const ChiMode& mode : modes) {
    CAPTURE(mode.name);
    const auto weight = [&](uint64_t e, uint64_t p) {
      if (mode.prioritized) return std::pow(static_cast<double>(rig.m.envs[e].steps[p].priority), alpha);
      return std::pow(static_cast<double>(std::min<uint64_t>(rig.m.head(e) - p, mode.L)), mode.power);
    };
    const LostCells cells = lost_cells(rig.m, weight);
    // total_weight is the model's sum over the sampleable steps.
    double total = 0;
    for (const uint64_t e : rig.all) {
      for (uint64_t p = rig.m.lo(e); p < rig.m.head(e); ++p) total += weight(e, p);
    }
    const SampleOptions opts{.prioritized = mode.prioritized};
    CHECK(rig.s.total_weight(View::replay, mode.L, mode.power, opts) == doctest::Approx(total).epsilon(1e-6));
    std::vector<uint64_t> counts(cells.right.size(), 0);
    uint64_t outside = 0;
    const std::size_t rows = 500, calls = 120;
    for (std::size_t call = 0; call < calls; ++call) {
      rig.s.sample(View::replay, rows, mode.L, mode.power, rng, batch, opts);
      REQUIRE(check_rows(batch, rig.m, View::replay, 0, rows) == "");
      outside += count_starts(batch, rig.m, cells, counts);
    }
    CHECK(outside == 0);  // never a lost step
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (cells.right[i] == 0) CHECK(counts[i] == 0);  // nor a step of priority 0
    }
    const double n = static_cast<double>(rows * calls);
    const double right_bound = chi_square_bound(static_cast<double>(nonzero(cells.right) - 1));
    const double wrong_bound = chi_square_bound(static_cast<double>(nonzero(cells.wrong) - 1));
    const double right = chi_square(counts, cells.right, n);
    const double wrong = chi_square(counts, cells.wrong, n);
    CAPTURE(right);
    CAPTURE(right_bound);
    CAPTURE(wrong);
    CAPTURE(wrong_bound);
    CHECK(right < right_bound);
    CHECK(wrong > wrong_bound);
  }
}

TEST_CASE("a step whose frames are lost counts as not stored: try_update returns false, priority_weights gives -1 "
          "and update_priorities drops it, as for an overwritten step") {
  CreateOptions o;
  o.stack_restarts = 1;
  o.priority_exponent = 1.0;
  const uint64_t cap = 8;
  StackRig rig("stk-lost-upd", {"obs:u8[4,3,5]:stack=0"}, 1, cap, o, /*episodes=*/false);
  std::mt19937_64 gen(23);
  // Every stack a jump (K new frames): the ring of 8 + 3 x 2 frames holds the stacks of 3 steps.
  for (int i = 0; i < 12; ++i) push_steps(rig.w, rig.m, {0}, {rig.m.next(0, Move::jump, false)}, PushPath::one);
  const uint64_t head = rig.m.head(0);
  const uint64_t lo = rig.m.lo(0);
  REQUIRE(lo > head - cap);  // steps [head - cap, lo) are stored slots whose frames are gone
  const uint64_t lost = lo - 1;
  const uint64_t kept = lo;
  // The plain fields may be given; the stacked one is not.
  const Schema& schema = rig.buf.schema();
  std::vector<std::vector<std::byte>> values(schema.size());
  std::vector<FieldBytes> fields(schema.size());
  for (std::size_t f = 0; f < schema.size(); ++f) {
    if (schema[f].stacked()) continue;
    values[f] = rig.m.field_value(0, kept, f);
    fields[f] = {values[f].data(), values[f].size()};
  }
  CHECK_FALSE(rig.s.try_update(0, lost, fields));
  CHECK(rig.s.try_update(0, kept, fields));
  std::vector<uint64_t> envs = {0, 0};
  std::vector<uint64_t> steps = {lost, kept};
  std::vector<double> weights(2);
  rig.s.priority_weights(envs, steps, weights);
  CHECK(weights[0] == -1.0);
  CHECK(weights[1] > 0.0);
  const std::vector<float> priorities = {2.0f, 3.0f};
  const PriorityUpdateResult r = rig.s.update_priorities(envs, steps, priorities);
  CHECK(r.applied == 1);
  CHECK(r.dropped == 1);
  rig.s.priority_weights(envs, steps, weights);
  CHECK(weights[0] == -1.0);
  CHECK(weights[1] == doctest::Approx(3.0));
}
