// Policy versions, the writers' side: a push whose version the window has left behind is held back (not written,
// counted as starvation) until a wider window admits it or its timeout; versions never go down within an env; a
// learner publishing with pacing waits for a live slow writer, not for a dead one (docs/design/policy.md).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "policy/policy_helpers.hpp"

using namespace shmreplay;
using namespace shmreplay::test;
using namespace std::chrono_literals;

namespace {

uint64_t env_counter(const SegmentInfo& info, uint64_t env, const char* name) {
  return info.envs[env].counters[*counter_index(CounterScope::env, name)];
}

}  // namespace

TEST_CASE("a push whose version the window left behind throws rate_limited at its timeout, writes nothing, and is "
          "counted against its env") {
  PolicyRig rig("policy-held", 2, 8);
  Writer w(rig.buf, {0, 1}, {.policy_timeout_ms = 0});
  Sampler s(rig.buf);
  s.publish_policy(10, 2);  // versions >= 8
  push_versioned(w, 0, 8);
  std::string msg;
  CHECK(error_of([&] { push_versioned(w, 1, 7); }, &msg) == code(Errc::rate_limited));
  CHECK(contains(msg, "cannot push to env 1 of '" + rig.guard.name() + "': its step has policy version 7, outside the "
                      "window the learners published (version 10, max_staleness 2: versions >= 8)"));
  CHECK(w.head(1) == 0);
  const SegmentInfo info = Inspector(rig.guard.name()).snapshot();
  CHECK(env_counter(info, 1, "policy_held_pushes") == 1);
  CHECK(env_counter(info, 1, "policy_timeouts") == 1);
  CHECK(env_counter(info, 0, "policy_held_pushes") == 0);
  CHECK(env_counter(info, 0, "policy_version") == 8);
  CHECK(info.policy.field == "version");
  CHECK(info.policy.version == 10);
  CHECK(info.policy.max_staleness == 2);
  CHECK(info.policy.writers_held == 1);
  CHECK(info.policy.writer_timeouts == 1);
}

TEST_CASE("a held push waits and goes through when the learner widens the window, and counts the time it waited") {
  PolicyRig rig("policy-wait", 1, 8);
  Sampler s(rig.buf);
  s.publish_policy(10, 1);
  Writer w(rig.buf, {0}, {.policy_timeout_ms = 20'000});
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    s.publish_policy(10, 5);  // versions >= 5 now
  });
  const auto t0 = std::chrono::steady_clock::now();
  push_versioned(w, 0, 6);
  const auto waited = std::chrono::steady_clock::now() - t0;
  later.join();
  CHECK(w.head(0) == 1);
  CHECK(waited >= 50ms);
  CHECK(waited < 10s);
  const SegmentInfo info = Inspector(rig.guard.name()).snapshot();
  CHECK(env_counter(info, 0, "policy_held_pushes") == 1);
  CHECK(env_counter(info, 0, "policy_held_ns") >= 50'000'000);
  CHECK(env_counter(info, 0, "policy_held_since_ns") == 0);
  CHECK(env_counter(info, 0, "policy_timeouts") == 0);
}

TEST_CASE("a buffer's set_policy_window keeps the published version, releases a held push at once, and refuses what "
          "a learner's publish refuses") {
  PolicyRig rig("policy-setwin", 1, 8);
  Sampler s(rig.buf);
  s.publish_policy(10, 1);  // versions >= 9
  Writer w(rig.buf, {0}, {.policy_timeout_ms = 20'000});
  Buffer other = Buffer::open(rig.guard.name());  // another handle, as `shmreplay limit` opens one: no learner slot
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    const PolicyState st = other.set_policy_window(5);  // versions >= 5 now
    CHECK(st.version == 10);
    CHECK(st.max_staleness == 5);
  });
  const auto t0 = std::chrono::steady_clock::now();
  push_versioned(w, 0, 6);
  const auto waited = std::chrono::steady_clock::now() - t0;
  later.join();
  CHECK(w.head(0) == 1);
  CHECK(waited < 10s);
  CHECK(rig.buf.policy().version == 10);
  CHECK(rig.buf.policy().max_staleness == 5);
  CHECK(s.policy().publishes == 2);
  const PolicyState off = other.set_policy_window(std::nullopt);
  CHECK(off.version == 10);
  CHECK_FALSE(off.max_staleness.has_value());
  std::string msg;
  CHECK(error_of([&] { other.set_policy_window(UINT64_MAX); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "cannot set the policy window of '" + rig.guard.name() + "': max_staleness " +
                          std::to_string(UINT64_MAX) + " is reserved for \"no window\""));
  Buffer seen = Buffer::open(rig.guard.name(), {.read_only = true});
  CHECK(error_of([&] { seen.set_policy_window(3); }) == code(Errc::read_only));
  SegmentGuard g(unique_name("policy-setwin-none"));
  Buffer plain = Buffer::create(g.name(), 1, 8, Schema::parse("x:f32"));
  CHECK(error_of([&] { plain.set_policy_window(3); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "cannot set the policy window of '" + g.name() + "': it has no policy-version field"));
  CHECK_FALSE(plain.set_policy_window(std::nullopt).max_staleness.has_value());  // none to remove: nothing to refuse
}

TEST_CASE("an env's versions never go down, a negative version is refused, and a reserved step is checked at commit") {
  SegmentGuard g(unique_name("policy-order"));
  Buffer buf = Buffer::create(g.name(), 2, 8, Schema::parse("v:i64 x:f32"), {.policy_version = "v"});
  Writer w(buf, {0, 1});
  auto push = [&](uint64_t env, int64_t v) {
    const float x = 0;
    w.push_one(env, {FieldBytes{&v, sizeof v}, FieldBytes{&x, sizeof x}});
  };
  push(0, 5);
  push(0, 5);
  push(1, 2);  // another env has its own order
  std::string msg;
  CHECK(error_of([&] { push(0, 4); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "its step has policy version 4 (field 'v'), below the env's newest version 5"));
  CHECK(error_of([&] { push(1, -1); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "its step's policy version (field 'v') is negative"));
  StepSlot slot = w.reserve(0);
  slot.as<int64_t>(0)[0] = 3;
  CHECK(error_of([&] { slot.commit(); }, &msg) == code(Errc::invalid_argument));
  CHECK_FALSE(slot.committed());  // still reserved: fix the field and commit again
  slot.as<int64_t>(0)[0] = 6;
  slot.commit();
  CHECK(w.head(0) == 3);
}

TEST_CASE("create refuses a policy-version field that is not a scalar integer or names no field") {
  SegmentGuard g(unique_name("policy-refuse"));
  std::string msg;
  CHECK(error_of([&] { Buffer::create(g.name(), 1, 8, Schema::parse("v:f32"), {.policy_version = "v"}); }, &msg) ==
        code(Errc::invalid_argument));
  CHECK(contains(msg, "policy_version = 'v' (v:f32) is not a version: expected a scalar integer field"));
  CHECK(error_of([&] { Buffer::create(g.name(), 1, 8, Schema::parse("v:u32[2]"), {.policy_version = "v"}); }) ==
        code(Errc::invalid_argument));
  CHECK(error_of([&] { Buffer::create(g.name(), 1, 8, Schema::parse("v:u32"), {.policy_version = "w"}); }, &msg) ==
        code(Errc::invalid_argument));
  CHECK(contains(msg, "field policy_version = 'w' names no field of the schema (its fields: v)"));
  Buffer ok = Buffer::create(g.name(), 1, 8, Schema::parse("v:u32"), {.policy_version = "v"});
  Buffer reopened = Buffer::open(g.name());
  CHECK(reopened.episode_fields().policy_version == 0u);
}

TEST_CASE("a learner publishing with pacing waits for a live writer whose version the window would leave behind, "
          "and gives up at its timeout naming it") {
  PolicyRig rig("policy-pace", 2, 8);
  Sampler s(rig.buf);
  s.publish_policy(3, 2);
  Writer w(rig.buf, {0, 1});
  push_versioned(w, 0, 3);
  push_versioned(w, 1, 1);  // env 1 is slow: version 1
  std::string msg;
  CHECK(error_of([&] { s.publish_policy(4, 2, {.pace = true, .pace_timeout_ms = 0}); }, &msg) ==
        code(Errc::rate_limited));
  CHECK(contains(msg, "env 1 (writer pid " + std::to_string(::getpid()) + ") still produces with version 1, below 2"));
  CHECK(s.policy().version == 3);  // nothing published
  std::thread producer([&] {
    std::this_thread::sleep_for(100ms);
    push_versioned(w, 1, 2);  // the slow env loads a newer policy
  });
  const PolicyState st = s.publish_policy(4, 2, {.pace = true, .pace_timeout_ms = 20'000});
  producer.join();
  CHECK(st.version == 4);
  const SegmentInfo info = Inspector(rig.guard.name()).snapshot();
  CHECK(info.policy.learner_paced == 2);
  CHECK(info.policy.learner_pace_timeouts == 1);
}

TEST_CASE("pacing does not wait for a writer that was SIGKILLed, and its successor goes on from its newest version") {
  PolicyRig rig("policy-dead", 2, 8);
  {
    Sampler s(rig.buf);
    s.publish_policy(1, 1);
  }
  const pid_t child = spawn([&] {
    Buffer b = Buffer::open(rig.guard.name());
    Writer w(b, {1});
    push_versioned(w, 1, 1);
    for (;;) ::pause();
  });
  for (int i = 0; i < 2000 && Inspector(rig.guard.name()).snapshot().envs[1].head == 0; ++i) std::this_thread::sleep_for(1ms);
  REQUIRE(kill_and_reap(child));
  Sampler s(rig.buf);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(s.publish_policy(9, 1, {.pace = true, .pace_timeout_ms = 20'000}).version == 9);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  Writer w(rig.buf, {1}, {.policy_timeout_ms = 0});  // takes the dead writer's lease over
  std::string msg;
  CHECK(error_of([&] { push_versioned(w, 1, 0); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "below the env's newest version 1"));
  push_versioned(w, 1, 8);
  CHECK(w.head(1) == 2);
}
