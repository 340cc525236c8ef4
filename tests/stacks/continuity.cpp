// tests/stacks/continuity.cpp: StackContinuity::episodes, the rule that trusts the episode flags instead of comparing
// each pushed stack with the previous step's: with an env that flags every restart, every stack is exact as under
// the compare rule; the first step each Writer pushes to an env is compared all the same (a new process may reset its
// envs without a flag); both sides of a flagged boundary are compared, so an env that returns the reset observation
// on the ending step itself (SB3) stores exact stacks too; a flagless restart in the middle of a Writer's pushes is
// stored as a continuation, as documented, unless it falls on a spot-checked step, which stores it exactly and
// counts it; create and open refuse the rule without episode fields or a stacked field.
// Part of test_stacks (tests/CMakeLists.txt); its helpers are in stacks_helpers.hpp.
#include "detail/protocol/stacks.hpp"
#include "stacks_helpers.hpp"

namespace {

CreateOptions trusting(uint64_t restarts = 0) {
  CreateOptions o;
  o.stack_restarts = restarts;
  o.stack_continuity = StackContinuity::episodes;
  return o;
}

// The newest stack step `s` of env `e` holds in the buffer: read back with Inspector::read_steps.
std::vector<std::byte> stored_obs(const Buffer& buf, uint64_t e, uint64_t s) {
  const StepRecords r = read_steps(buf, e, s, 1);
  REQUIRE(r.count == 1);
  const auto field = r.field(0, *buf.schema().find("obs"));
  return {field.begin(), field.end()};
}

}  // namespace

TEST_CASE("with stack_continuity = episodes every sampled stack is exact when the env flags every restart, for every "
          "padding, axis and push path") {
  for (const std::vector<std::string>& variant :
       {std::vector<std::string>{"obs:u8[4,6,5]:stack=0"}, std::vector<std::string>{"obs:f32[3,4,4]:stack=-1"},
        std::vector<std::string>{"obs:u8[2,5,4]:stack=2", "aux:u8[3,7]:stack=0"}}) {
    CAPTURE(variant.front());
    const uint64_t cap = 8;
    StackRig rig("stk-trust", variant, 3, cap, trusting(2));
    REQUIRE(rig.buf.stack_continuity() == StackContinuity::episodes);
    std::mt19937_64 gen(5);
    Rng rng(9);
    SampleBatch batch;
    for (int round = 0; round < 160; ++round) {
      const PushPath path = kPaths[static_cast<std::size_t>(round) % kPaths.size()];
      rig.push({0, 1, 2}, path, gen, 4, /*flagless=*/false);
      REQUIRE_MESSAGE(check_sizes(rig.s, rig.m) == "", check_sizes(rig.s, rig.m));
      rig.s.sample(View::replay, 24, 1 + gen() % cap, 0.0, rng, batch);
      REQUIRE_MESSAGE(check_rows(batch, rig.m, View::replay, 0, batch.rows()) == "",
                      check_rows(batch, rig.m, View::replay, 0, batch.rows()));
    }
    for (uint64_t e = 0; e < 3; ++e) REQUIRE(check_read_steps(rig.buf, rig.m, e) == "");
  }
}

TEST_CASE("with stack_continuity = episodes the first step a new Writer pushes to an env is compared, so a process "
          "that resets its envs without a flag still stores exact stacks") {
  const uint64_t cap = 16;
  StackRig rig("stk-trust-new", {"obs:u8[4,3,5]:stack=0"}, 2, cap, trusting());
  std::mt19937_64 gen(3);
  for (int i = 0; i < 5; ++i) rig.push({0, 1}, PushPath::batch64, gen, 1000, false);
  // The writer process is replaced; the new one's envs start over without a done flag on the last step.
  { const Writer gone(std::move(rig.w)); }
  Writer w(rig.buf, std::vector<uint64_t>{0, 1});
  std::vector<ModelStep> steps = {rig.m.next(0, Move::jump, false), rig.m.next(1, Move::reset_random, false)};
  push_steps(w, rig.m, {0, 1}, std::move(steps), PushPath::one);
  for (int i = 0; i < 5; ++i) push_random(w, rig.m, gen, rig.pending, {0, 1}, PushPath::batch32, 1000, false);
  for (uint64_t e = 0; e < 2; ++e) CHECK(check_read_steps(rig.buf, rig.m, e) == "");
}

TEST_CASE("with stack_continuity = episodes a flagless restart in the middle of a Writer's pushes is stored as a "
          "continuation: the previous step's newest frames and the pushed newest one") {
  StackRig rig("stk-trust-lie", {"obs:u8[4,3,5]:stack=0"}, 1, 16, trusting());
  std::mt19937_64 gen(11);
  for (int i = 0; i < 3; ++i) rig.push({0}, PushPath::batch64, gen, 1000, false);
  const std::vector<uint64_t> before = rig.m.envs[0].steps.back().stamps;
  // A stack that does not continue, and no done flag on the step before it.
  const ModelStep jump = rig.m.next(0, Move::jump, false);
  const std::vector<uint64_t> pushed = jump.stamps;
  // Push it through the Writer directly (the model would expect the compare rule's exact stack).
  const Schema& schema = rig.buf.schema();
  std::vector<std::vector<std::byte>> bytes(schema.size());
  rig.m.record(0, jump);
  for (std::size_t f = 0; f < schema.size(); ++f) bytes[f] = rig.m.field_value(0, 3, f);
  std::vector<FieldBytes> fields;
  for (const auto& b : bytes) fields.push_back({b.data(), b.size()});
  rig.w.push_one(0, fields);
  const StackShape shape = rig.m.sch.stacks[0];
  // Stored: frames 1..3 of the previous stack, then the pushed newest frame.
  const std::vector<uint64_t> trusted = {before[1], before[2], before[3], pushed[3]};
  CHECK(check_stack(shape, trusted.data(), stored_obs(rig.buf, 0, 3).data()) == "");
  CHECK(check_stack(shape, pushed.data(), stored_obs(rig.buf, 0, 3).data()) != "");
}

TEST_CASE("with stack_continuity = episodes an env that returns the reset observation with done on the ending step "
          "(SB3's convention) stores every stack exactly, with no more frames than the compare rule") {
  StackRig rig("stk-trust-sb3", {"obs:u8[4,3,5]:stack=0", "aux:u8[3,7]:stack=0"}, 2, 16, trusting(4));
  for (int episode = 0; episode < 12; ++episode) {
    for (uint64_t e = 0; e < 2; ++e) {
      const Move reset = kMoves[1 + (static_cast<std::size_t>(episode) + e) % 3];  // every padding
      push_steps(rig.w, rig.m, {e}, {rig.m.next(e, reset, /*done=*/true)}, PushPath::one);
      for (uint64_t s = 0; s < 3 + (static_cast<uint64_t>(episode) + e) % 5; ++s) {
        push_steps(rig.w, rig.m, {e}, {rig.m.next(e, Move::cont, false)}, e == 0 ? PushPath::one : PushPath::reserve);
      }
    }
    // The model counts frames as the compare rule stores them: the same views mean the same frames.
    REQUIRE_MESSAGE(check_sizes(rig.s, rig.m) == "", check_sizes(rig.s, rig.m));
  }
  for (uint64_t e = 0; e < 2; ++e) CHECK(check_read_steps(rig.buf, rig.m, e) == "");
  CHECK(rig.w.stack_flagless_restarts() == 0);  // a convention the rule handles, not a flag that lies
}

TEST_CASE("with stack_continuity = episodes a flagless restart on a spot-checked step is stored exactly and counted "
          "by Writer::stack_flagless_restarts; one between the checks is stored as a continuation, uncounted") {
  // The steps the rule checks are a hash of the step number: about one in kStackAuditOneIn.
  uint64_t checked = 0;
  uint64_t unchecked = 0;
  for (uint64_t s = 1; s < 100000; ++s) (detail::stack_audit_due(s) ? checked : unchecked) += 1;
  CHECK(checked == doctest::Approx(100000.0 / detail::kStackAuditOneIn).epsilon(0.1));
  uint64_t due = 40;
  while (!detail::stack_audit_due(due)) ++due;
  uint64_t not_due = due + 1;
  while (detail::stack_audit_due(not_due)) ++not_due;
  const uint64_t cap = 4096;
  StackRig rig("stk-trust-spot", {"obs:u8[4,3,5]:stack=0"}, 1, cap, trusting());
  for (uint64_t s = 0; s < due; ++s) push_steps(rig.w, rig.m, {0}, {rig.m.next(0, Move::cont, false)}, PushPath::one);
  push_steps(rig.w, rig.m, {0}, {rig.m.next(0, Move::jump, false)}, PushPath::batch64);  // step `due`
  CHECK(check_read_steps(rig.buf, rig.m, 0) == "");
  CHECK(rig.w.stack_flagless_restarts() == 1);
  CHECK(segment_of(rig.buf).env_control(0).stack_flagless_restarts.load() == 1);  // the Inspector's, info's, metrics'
  for (uint64_t s = due + 1; s < not_due; ++s) {
    push_steps(rig.w, rig.m, {0}, {rig.m.next(0, Move::cont, false)}, PushPath::one);
  }
  const std::vector<uint64_t> before = rig.m.envs[0].steps.back().stamps;
  const ModelStep jump = rig.m.next(0, Move::jump, false);  // step `not_due`: trusted, stored as a continuation
  StepSlot slot = rig.w.reserve(0);
  REQUIRE(slot.step() == not_due);
  rig.m.record(0, jump);
  for (std::size_t f = 0; f < rig.buf.schema().size(); ++f) {
    const std::vector<std::byte> v = rig.m.field_value(0, not_due, f);
    std::memcpy(slot.field(f).data(), v.data(), v.size());
  }
  slot.commit();
  const std::vector<uint64_t> trusted = {before[1], before[2], before[3], jump.stamps[3]};
  CHECK(check_stack(rig.m.sch.stacks[0], trusted.data(), stored_obs(rig.buf, 0, not_due).data()) == "");
  CHECK(rig.w.stack_flagless_restarts() == 1);
}

TEST_CASE("stack_continuity = episodes is refused without episode fields or without a stacked field, and open "
          "refuses a header with an unknown continuity code") {
  SegmentGuard guard(unique_name("stk-trust-bad"));
  CreateOptions o = trusting();
  try {
    (void)Buffer::create(guard.name(), 1, 8, Schema::parse("obs:u8[4,3]:stack=0"), o);
    FAIL("created without episode fields");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(contains(e.what(), "no episode fields"));
  }
  o.episodes = {.done = "done"};
  try {
    (void)Buffer::create(guard.name(), 1, 8, Schema::parse("obs:u8[4,3] done:bool"), o);
    FAIL("created without a stacked field");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(contains(e.what(), "no stacked field"));
  }
  {
    Buffer b = Buffer::create(guard.name(), 1, 8, Schema::parse("obs:u8[4,3]:stack=0 done:bool"), o);
    CHECK(Buffer::open(guard.name()).stack_continuity() == StackContinuity::episodes);
    const_cast<layout::SegmentHeader&>(segment_of(b).header()).stack_continuity = 7;
  }
  try {
    (void)Buffer::open(guard.name());
    FAIL("opened a header with continuity code 7");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::corrupt);
    CHECK(contains(e.what(), "stack_continuity is 7"));
  }
}
