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

}  // namespace shmreplay::test
