// Shared by the sample-cap tests (tests/caps/): a buffer whose steps say which env and step they are, created with
// a sample cap, and a pusher of such steps.
#pragma once

#include <cstdint>
#include <string>

#include "shmreplay/shmreplay.hpp"
#include "support.hpp"

namespace shmreplay::test {

// "env" and "step" say where a sampled row's first step came from.
inline const Schema kCapsSchema = Schema::parse("env:u64 step:u64");

struct CapsRig {
  SegmentGuard guard;
  Buffer buf;
  CapsRig(const std::string& tag, uint64_t envs, uint64_t capacity, uint64_t cap, uint64_t max_learners = 1)
      : guard(unique_name(tag)),
        buf(Buffer::create(guard.name(), envs, capacity, kCapsSchema,
                           {.max_learners = max_learners, .max_times_sampled = cap})) {}
};

// Pushes the next step of `env`; its payload is (env, head).
inline void push_tagged(Writer& w, uint64_t env) {
  const uint64_t step = w.head(env);
  w.push_one(env, {FieldBytes{&env, sizeof env}, FieldBytes{&step, sizeof step}});
}

}  // namespace shmreplay::test
