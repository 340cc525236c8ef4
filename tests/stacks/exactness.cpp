// tests/stacks/exactness.cpp: every stack a reader returns is the stack pushed for that step, byte for byte, whatever
// the env does: across episode boundaries with resets padded by zeros, by copies of the first frame or by frames
// never seen again; stacks that do not continue their predecessor's with no episode flag at all; ring wrap-around
// over many laps; the stacked axis first, in the middle and last; K = 2, 3 and 4; several stacked fields in one
// schema; every push path; every sampling mode (sequences with masks, transitions, mixed, prioritized, episodes
// within / stop / cross, n-step returns, peek); in-place updates of the other fields; Inspector::read_steps.
// Part of test_stacks (tests/CMakeLists.txt); its helpers are in stacks_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/nstep.hpp"
#include "stacks_helpers.hpp"

namespace {

// The schemas the exactness cases run over: the stacked axis first, in the middle (frames interleaved in runs of
// 10 bytes), last (runs of one element: 4 bytes, and 1 byte), K = 2, 3 and 4, and three stacked fields at once.
const std::vector<std::vector<std::string>> kStackVariants = {
    {"obs:u8[4,6,5]:stack=0"},
    {"obs:u16[3,2,5]:stack=1"},
    {"obs:f32[3,4,4]:stack=-1"},
    {"obs:u8[2,5,4]:stack=2", "aux:u8[2,7]:stack=0", "mid:i16[2,3,3]:stack=1"},
};

std::string variant_name(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

// A random non-empty subset of `all`, in random order.
std::vector<uint64_t> random_envs(std::mt19937_64& gen, const std::vector<uint64_t>& all) {
  std::vector<uint64_t> out;
  for (const uint64_t e : all) {
    if (gen() % 2) out.push_back(e);
  }
  if (out.empty()) out.push_back(all[gen() % all.size()]);
  std::shuffle(out.begin(), out.end(), gen);
  return out;
}

}  // namespace

TEST_CASE("every sampled stack is the one pushed for its step, byte for byte: episode resets with every padding and "
          "stacks that do not continue with no flag, over many laps, for every axis, K and push path") {
  for (const auto& variant : kStackVariants) {
    for (const bool flagless : {false, true}) {
      for (const uint64_t restarts : {uint64_t{1}, uint64_t{12}}) {
        CAPTURE(variant_name(variant));
        CAPTURE(flagless);
        CAPTURE(restarts);
        const uint64_t cap = 8;
        StackRig rig("stk-exact", variant, 3, cap, {.stack_restarts = restarts}, /*episodes=*/!flagless);
        std::mt19937_64 gen(17 + restarts + (flagless ? 100 : 0));
        Rng rng(3);
        SampleBatch batch;
        uint64_t rows = 0, lost = 0;
        for (int round = 0; round < 160; ++round) {
          const PushPath path = kPaths[static_cast<std::size_t>(round) % kPaths.size()];
          rig.push(random_envs(gen, rig.all), path, gen, 3, flagless);
          REQUIRE_MESSAGE(check_sizes(rig.s, rig.m) == "", check_sizes(rig.s, rig.m), " after ", path_name(path));
          const std::size_t L = 1 + gen() % cap;
          rig.s.sample(View::replay, 32, L, static_cast<double>(gen() % 2), rng, batch);
          rows += batch.rows();
          REQUIRE_MESSAGE(check_rows(batch, rig.m, View::replay, 0, batch.rows()) == "",
                          check_rows(batch, rig.m, View::replay, 0, batch.rows()), " after ", path_name(path));
          if (round % 16 == 15) {
            for (uint64_t e = 0; e < 3; ++e) REQUIRE(check_read_steps(rig.buf, rig.m, e) == "");
          }
        }
        for (uint64_t e = 0; e < 3; ++e) {
          CHECK(rig.m.head(e) > 5 * cap);  // many laps of the ring
          lost += rig.m.lost(e);
        }
        // A reserve of 12 restarts holds every reset of 8 stored steps: nothing is lost; with 1, some steps are.
        CAPTURE(lost);
        if (restarts == 12) CHECK(lost == 0);
        if (restarts == 1) CHECK(lost > 0);
        CHECK(rows > 0);
      }
    }
  }
}

TEST_CASE("an env that only continues its stack loses no step, and stores one frame per step") {
  for (const auto& variant : kStackVariants) {
    CAPTURE(variant_name(variant));
    const uint64_t cap = 16;
    StackRig rig("stk-cont", variant, 2, cap, {.stack_restarts = 1}, /*episodes=*/false);
    Rng rng(5);
    SampleBatch batch;
    for (int round = 0; round < 100; ++round) {
      std::vector<ModelStep> steps;
      for (const uint64_t e : rig.all) steps.push_back(rig.m.next(e, Move::cont, false));
      push_steps(rig.w, rig.m, rig.all, std::move(steps), kPaths[static_cast<std::size_t>(round) % kPaths.size()]);
      for (uint64_t e = 0; e < 2; ++e) {
        CHECK(rig.s.sizes(e).replay == std::min<uint64_t>(rig.m.head(e), cap));
        for (std::size_t i = 0; i < rig.m.sch.stacks.size(); ++i) {
          // The first step's K frames, then one per step.
          CHECK(rig.m.envs[e].written[i] == rig.m.head(e) + rig.m.sch.stacks[i].depth - 1);
        }
      }
      rig.s.sample(View::replay, 16, 1 + static_cast<std::size_t>(round) % cap, 1.0, rng, batch);
      REQUIRE(check_rows(batch, rig.m, View::replay, 0, batch.rows()) == "");
    }
    // The newest frame index of every stored step, as the library keeps it, is the model's.
    for (uint64_t e = 0; e < 2; ++e) {
      for (std::size_t i = 0; i < rig.m.sch.stacks.size(); ++i) {
        for (uint64_t s = rig.m.head(e) - cap; s < rig.m.head(e); ++s) {
          CHECK(segment_of(rig.buf).frame_index(i, e)[s % cap].load() == rig.m.envs[e].index[i][s]);
        }
      }
    }
  }
}

TEST_CASE("each padding convention of a reset, back to back and in episodes of one step, is kept exactly") {
  // K = 4 and K = 2: episodes of length 1, 2, 3, 5 with each padding; zero-padded resets that follow zero-padded
  // ones share frames with them byte for byte (the zero frames), which the continuity check must not confuse with
  // a continuing stack.
  for (const auto& variant : {std::vector<std::string>{"obs:u8[4,3,3]:stack=0"},
                              std::vector<std::string>{"obs:u8[3,2,6]:stack=1"}}) {
    CAPTURE(variant_name(variant));
    StackRig rig("stk-pad", variant, 1, 32, {.stack_restarts = 64});
    Rng rng(9);
    SampleBatch batch;
    std::size_t round = 0;
    for (const Move pad : {Move::reset_zeros, Move::reset_repeat, Move::reset_random}) {
      for (const uint64_t length : {1u, 1u, 2u, 3u, 5u, 1u}) {
        for (uint64_t t = 0; t < length; ++t) {
          std::vector<ModelStep> steps = {rig.m.next(0, t == 0 ? pad : Move::cont, t + 1 == length)};
          push_steps(rig.w, rig.m, {0}, std::move(steps), kPaths[round++ % kPaths.size()]);
        }
      }
    }
    REQUIRE(check_sizes(rig.s, rig.m) == "");
    CHECK(rig.m.lost(0) == 0);
    REQUIRE(check_read_steps(rig.buf, rig.m, 0) == "");
    for (const std::size_t L : {std::size_t{1}, std::size_t{4}, std::size_t{32}}) {
      for (const Episodes ep : {Episodes::cross, Episodes::stop}) {
        rig.s.sample(View::replay, 64, L, 0.0, rng, batch, {.episodes = ep});
        CHECK(check_rows(batch, rig.m, View::replay, 0, batch.rows(), ep) == "");
      }
    }
  }
}

TEST_CASE("the stacked fields of an abandoned reservation leave no trace, and reservations stage each env apart") {
  StackRig rig("stk-abandon", {"obs:u8[4,6,5]:stack=0", "mid:u16[3,2,5]:stack=1"}, 2, 8);
  std::mt19937_64 gen(4);
  for (int i = 0; i < 5; ++i) rig.push(rig.all, PushPath::batch64, gen, 4, false);
  const Schema& schema = rig.m.sch.schema;
  for (int round = 0; round < 12; ++round) {
    {  // garbage in every field of a reservation of env 0, then abandoned
      StepSlot slot = rig.w.reserve(0);
      for (std::size_t f = 0; f < schema.size(); ++f) {
        REQUIRE(slot.field(f).size() == schema[f].bytes());
        std::memset(slot.field(f).data(), 0xa5 + round, slot.field(f).size());
      }
    }
    // Two reservations at once, filled crosswise: each env's staging area is its own.
    std::vector<ModelStep> steps = {rig.m.next(0, Move::cont, false), rig.m.next(1, Move::cont, round % 3 == 0)};
    rig.m.record(0, steps[0]);
    rig.m.record(1, steps[1]);
    StepSlot a = rig.w.reserve(0);
    StepSlot b = rig.w.reserve(1);
    for (std::size_t f = 0; f < schema.size(); ++f) {
      const auto vb = rig.m.field_value(1, rig.m.head(1) - 1, f);
      std::memcpy(b.field(f).data(), vb.data(), vb.size());
      const auto va = rig.m.field_value(0, rig.m.head(0) - 1, f);
      std::memcpy(a.field(f).data(), va.data(), va.size());
    }
    b.commit();
    a.commit();
    REQUIRE(check_sizes(rig.s, rig.m) == "");
  }
  for (uint64_t e = 0; e < 2; ++e) CHECK(check_read_steps(rig.buf, rig.m, e) == "");
}

namespace {

// The n-step returns (n = 3, gamma 0.5) of rows sampled with sequence length L: the model's rewards, stopping after a
// done step and at the mask.
void check_nstep_rows(StackRig& rig, Rng& rng, SampleBatch& batch, std::size_t L) {
  rig.s.sample(View::replay, 8, L, 0.0, rng, batch, {.episodes = Episodes::cross});
  for (std::size_t row = 0; row < batch.rows(); ++row) {
    const uint64_t e = batch.env_ids()[row];
    const uint64_t p = batch.start_steps()[row];
    const NStep g = nstep(batch, row, 0, 3, 0.5);
    double sum = 0;
    std::size_t steps = 0;
    bool terminated = false;
    while (steps < 3 && steps < L && batch.valid(row, steps)) {
      sum += std::pow(0.5, static_cast<double>(steps)) * reward_of(e, p + steps);
      terminated = rig.m.envs[e].steps[p + steps].done;
      ++steps;
      if (terminated) break;
    }
    CHECK(g.reward_sum == sum);
    CHECK(g.steps == steps);
    CHECK(g.terminated == terminated);
    const bool boot = !terminated && steps < L && batch.valid(row, steps);
    CHECK(g.bootstrap.has_value() == boot);
    if (boot) CHECK(*g.bootstrap == steps);
  }
}

// The learner reprioritizes rows it sampled by priority; the model follows.
void reprioritize_sampled(StackRig& rig, std::mt19937_64& gen, Rng& rng, SampleBatch& batch) {
  rig.s.sample(View::replay, 8, 1, 0.0, rng, batch, {.prioritized = true});
  std::vector<uint64_t> envs(batch.env_ids().begin(), batch.env_ids().end());
  std::vector<uint64_t> starts(batch.start_steps().begin(), batch.start_steps().end());
  std::vector<float> prios;
  for (std::size_t i = 0; i < envs.size(); ++i) prios.push_back(static_cast<float>(gen() % 5) + 0.5f);
  const PriorityUpdateResult r = rig.s.update_priorities(envs, starts, prios);
  CHECK(r.applied == envs.size());
  for (std::size_t i = 0; i < envs.size(); ++i) rig.m.envs[envs[i]].steps[starts[i]].priority = prios[i];
}

}  // namespace

TEST_CASE("every sampling mode returns exact stacks: sequences with masks, transitions, mixed, prioritized, episodes "
          "within / stop / cross with a period, n-step returns and peek") {
  const double alpha = 0.6;
  const uint64_t cap = 16;
  StackRig rig("stk-modes", {"obs:u8[4,6,5]:stack=0", "mid:u16[3,2,5]:stack=1", "last:f32[2,2,3]:stack=-1"}, 4, cap,
               {.priority_exponent = alpha, .stack_restarts = 2});
  std::mt19937_64 gen(21);
  Rng rng(8);
  SampleBatch batch;
  const PushPath prio_paths[3] = {PushPath::batch32, PushPath::batch64, PushPath::reserve};
  uint64_t checked = 0;
  for (int round = 0; round < 120; ++round) {
    rig.push(random_envs(gen, rig.all), prio_paths[round % 3], gen, 4, false, /*priorities=*/true);
    if (round == 60) {
      rig.s.reset_online_queue();
      rig.m.reset_online();
    }
    if (round < 10) continue;
    REQUIRE(check_sizes(rig.s, rig.m) == "");
    const std::size_t L = 1 + gen() % cap;
    const auto sample = [&](const char* what, View view, std::size_t L_, double power, const SampleOptions& o) {
      CAPTURE(what);
      try {
        rig.s.sample(view, 24, L_, power, rng, batch, o);
      } catch (const Error& e) {
        REQUIRE_MESSAGE(e.errc() == Errc::empty_view, e.what());  // within: no whole sequence in one episode
        return;
      }
      checked += batch.rows();
      const std::string v = check_rows(batch, rig.m, view, 0, batch.rows(), o.episodes);
      REQUIRE_MESSAGE(v == "", v);
      for (std::size_t row = 0; row < batch.rows(); ++row) {  // the period grid, from the view's oldest step
        const uint64_t e = batch.env_ids()[row];
        REQUIRE((batch.start_steps()[row] - rig.m.lo(e, view)) % o.period == 0);
      }
    };
    sample("sequences", View::replay, L, 1.0, {});
    sample("online sequences", View::online, L, 0.0, {});
    sample("power 2", View::replay, L, 2.0, {});
    sample("stop", View::replay, L, 1.0, {.episodes = Episodes::stop});
    sample("within", View::replay, 1 + L % 4, 0.0, {.episodes = Episodes::within});
    sample("cross with a period", View::replay, L, 1.0, {.period = 3});
    sample("stop with a period", View::replay, L, 0.0, {.episodes = Episodes::stop, .period = 2});
    sample("prioritized", View::replay, L, 0.0, {.prioritized = true});
    sample("prioritized stop", View::replay, L, 0.0, {.episodes = Episodes::stop, .prioritized = true});
    {
      rig.s.sample_transitions(View::replay, 32, rng, batch);
      REQUIRE(batch.sequence_length() == 1);
      REQUIRE(check_rows(batch, rig.m, View::replay, 0, batch.rows()) == "");
    }
    try {
      rig.s.sample_mixed(12, 6, L, 1.0, rng, batch);
      REQUIRE(check_rows(batch, rig.m, View::replay, 0, 12) == "");
      REQUIRE(check_rows(batch, rig.m, View::online, 12, 6) == "");
    } catch (const Error& e) {
      REQUIRE(e.errc() == Errc::empty_view);  // the online view right after its reset
    }
    {  // peek: each env's newest step, whole
      rig.s.peek(rig.all, batch);
      for (std::size_t row = 0; row < 4; ++row) {
        REQUIRE(batch.start_steps()[row] == rig.m.head(row) - 1);
        REQUIRE(check_rows(batch, rig.m, View::replay, row, 1) == "");
      }
    }
    check_nstep_rows(rig, rng, batch, L);  // n-step returns over sampled rows
    if (round % 5 == 0) reprioritize_sampled(rig, gen, rng, batch);  // the model follows
  }
  CHECK(checked > 10000);
  uint64_t lost = 0;
  for (uint64_t e = 0; e < 4; ++e) lost += rig.m.lost(e);
  CHECK(lost > 0);  // the modes were exercised with steps left out of the views
}

TEST_CASE("try_update rewrites the other fields and leaves every stack intact; data for a stacked field is refused, "
          "naming it") {
  StackRig rig("stk-update", {"obs:u8[4,6,5]:stack=0", "mid:u16[3,2,5]:stack=1"}, 2, 8);
  std::mt19937_64 gen(12);
  for (int i = 0; i < 30; ++i) rig.push(rig.all, kPaths[static_cast<std::size_t>(i) % 4], gen, 3, false);
  const Schema& schema = rig.m.sch.schema;
  const std::size_t obs = rig.m.sch.stacks[0].field;
  const uint64_t e = 1;
  const uint64_t step = rig.m.head(e) - 3;
  // Data for a stacked field: refused before anything is written, even alongside data for other fields.
  const float new_reward = 1234.5f;
  const std::vector<std::byte> stack = rig.m.field_value(e, step - 1, obs);
  std::vector<FieldBytes> fields(schema.size());
  fields[rig.m.sch.reward] = value_bytes(new_reward);
  fields[obs] = {stack.data(), stack.size()};
  std::string m;
  CHECK(error_of([&] { (void)rig.s.try_update(e, step, fields); }, &m) == code(Errc::invalid_argument));
  CHECK(contains(m, fmt::format("cannot update step {} of env 1", step)));
  CHECK(contains(m, "field 'obs' (obs:u8[4,6,5]:stack=0) is stacked"));
  CHECK(contains(m, "pass no data for it"));
  CHECK(check_read_steps(rig.buf, rig.m, e) == "");  // nothing changed
  // The reward alone: written, the stacks of this step and its neighbours untouched.
  fields[obs] = {};
  CHECK(rig.s.try_update(e, step, fields));
  const StepRecords r = read_steps(rig.buf, e, step - 1, 3);
  REQUIRE(r.count == 3);
  float got = 0;
  std::memcpy(&got, r.field(1, rig.m.sch.reward).data(), sizeof got);
  CHECK(got == new_reward);
  for (uint64_t i = 0; i < 3; ++i) {
    for (std::size_t k = 0; k < rig.m.sch.stacks.size(); ++k) {
      const StackShape& st = rig.m.sch.stacks[k];
      CHECK(check_stack(st, rig.m.envs[e].steps[step - 1 + i].stamps.data() + rig.m.stamp_offset(k),
                        r.field(i, st.field).data()) == "");
    }
  }
  // Sampled rows see the new reward with the stacks exact.
  Rng rng(1);
  SampleBatch batch;
  bool seen = false;
  for (int c = 0; c < 50 && !seen; ++c) {
    rig.s.sample_transitions(View::replay, 64, rng, batch);
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      const uint64_t re = batch.env_ids()[row], p = batch.start_steps()[row];
      for (std::size_t k = 0; k < rig.m.sch.stacks.size(); ++k) {
        const StackShape& st = rig.m.sch.stacks[k];
        REQUIRE(check_stack(st, rig.m.envs[re].steps[p].stamps.data() + rig.m.stamp_offset(k),
                            batch.step(st.field, row, 0)) == "");
      }
      if (re == e && p == step) {
        float rr = 0;
        std::memcpy(&rr, batch.step(rig.m.sch.reward, row, 0), sizeof rr);
        CHECK(rr == new_reward);
        seen = true;
      }
    }
  }
  CHECK(seen);
}

TEST_CASE("Inspector::read_steps (dump) returns whole stacks, from a read-only mapping too, and only the steps whose "
          "frames are intact") {
  StackRig rig("stk-dump", {"obs:u8[2,5,4]:stack=2", "aux:u8[2,7]:stack=0"}, 2, 8, {.stack_restarts = 1});
  std::mt19937_64 gen(30);
  for (int i = 0; i < 40; ++i) rig.push(rig.all, kPaths[static_cast<std::size_t>(i) % 4], gen, 2, i % 2 == 0);
  const Inspector inspector(rig.guard.name());
  CHECK(inspector.buffer().read_only());
  for (uint64_t e = 0; e < 2; ++e) {
    CAPTURE(e);
    CHECK(check_read_steps(inspector.buffer(), rig.m, e) == "");
    // A range that starts below the intact steps is cut to them.
    const StepRecords r = inspector.read_steps(e, 0, rig.m.head(e));
    CHECK(r.first_step == rig.m.lo(e));
    CHECK(r.count == rig.m.head(e) - rig.m.lo(e));
    const SegmentInfo info = inspector.snapshot();
    CHECK(info.envs[e].length == rig.m.head(e) - rig.m.lo(e));
  }
  CHECK(contains(inspector.snapshot().schema.to_string(), "obs:u8[2,5,4]:stack=2"));
}
