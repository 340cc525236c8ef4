// Shared by the policy-version tests (tests/policy/): a buffer whose steps carry a u32 policy version and a payload
// that says which env and step they are, and a pusher of such steps.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shmreplay/shmreplay.hpp"
#include "support.hpp"

namespace shmreplay::test {

// "version" is the policy-version field; "env" and "step" say where a sampled step came from.
inline const Schema kPolicySchema = Schema::parse("version:u32 env:u64 step:u64");

struct PolicyRig {
  SegmentGuard guard;
  Buffer buf;
  PolicyRig(const std::string& tag, uint64_t envs, uint64_t capacity, uint64_t max_learners = 1)
      : guard(unique_name(tag)),
        buf(Buffer::create(guard.name(), envs, capacity, kPolicySchema,
                           {.policy_version = "version", .max_learners = max_learners})) {}
};

// Pushes one step of `env` with policy version `version`; its payload is (env, head).
inline void push_versioned(Writer& w, uint64_t env, uint32_t version) {
  const uint64_t step = w.head(env);
  w.push_one(env, {FieldBytes{&version, sizeof version}, FieldBytes{&env, sizeof env}, FieldBytes{&step, sizeof step}});
}

// The staggered buffer the window and selector tests share: env e's step s carries version s / kRate[e] (env 0
// moves to a new version every 2 steps, env 1 every 3, env 2 every 20: a slow producer), each with kSteps[e] steps
// pushed into a ring of kCap, so env e stores steps kSteps[e] - kCap .. kSteps[e] - 1.
namespace staggered {
inline constexpr uint64_t kEnvs = 3;
inline constexpr uint64_t kCap = 32;
inline constexpr uint64_t kRate[kEnvs] = {2, 3, 20};
inline constexpr uint64_t kSteps[kEnvs] = {50, 40, 45};

inline uint32_t version_of(uint64_t env, uint64_t step) { return static_cast<uint32_t>(step / kRate[env]); }

inline void fill(Buffer& buf) {
  Writer w(buf, {0, 1, 2});
  for (uint64_t e = 0; e < kEnvs; ++e) {
    for (uint64_t s = 0; s < kSteps[e]; ++s) push_versioned(w, e, version_of(e, s));
  }
}

// The cell of stored step (env, step) among every stored step, env by env.
inline std::size_t cell(uint64_t env, uint64_t step) {
  return static_cast<std::size_t>(env * kCap + (step - (kSteps[env] - kCap)));
}
}  // namespace staggered

}  // namespace shmreplay::test
