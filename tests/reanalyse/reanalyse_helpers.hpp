// Shared by the reanalyse-walk tests (tests/reanalyse/): a buffer with a walk whose steps carry a reward, a pusher,
// and a drain that takes every due chunk of one pass.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shmreplay/shmreplay.hpp"
#include "support.hpp"

namespace shmreplay::test {

// "step" says which step a row is; "reward" is what largest_return sums; "done" makes the reward an episode field.
inline const Schema kWalkSchema = Schema::parse("step:u64 reward:f32 done:bool");

struct WalkRig {
  SegmentGuard guard;
  Buffer buf;
  WalkRig(const std::string& tag, uint64_t envs, uint64_t capacity, uint64_t chunk)
      : guard(unique_name(tag)),
        buf(Buffer::create(guard.name(), envs, capacity, kWalkSchema,
                           {.episodes = {.done = "done", .reward = "reward"}, .reanalyse_chunk = chunk})) {}
};

// Pushes `steps` steps to `env`, each with reward reward_of(step).
template <class RewardOf>
void push_steps(Writer& w, uint64_t env, uint64_t steps, RewardOf reward_of) {
  for (uint64_t n = 0; n < steps; ++n) {
    const uint64_t step = w.head(env);
    const float reward = static_cast<float>(reward_of(env, step));
    const bool done = false;
    w.push_one(env, {FieldBytes{&step, sizeof step}, FieldBytes{&reward, sizeof reward}, FieldBytes{&done, 1}});
  }
}
inline void push_steps(Writer& w, uint64_t env, uint64_t steps) {
  push_steps(w, env, steps, [](uint64_t, uint64_t) { return 0.0; });
}

// (env, chunk) of each chunk a worker takes until none is due in the pass of the first (a chunk of the next pass
// is given back), completing each with `version_of(chunk)`.
struct Taken {
  uint64_t env, chunk;
  friend bool operator==(const Taken&, const Taken&) = default;
};
template <class VersionOf>
std::vector<Taken> take_all(Reanalyser& r, ReanalyseOrder order, VersionOf version_of) {
  std::vector<Taken> out;
  std::optional<uint64_t> pass;
  while (std::optional<ReanalyseChunk> c = r.try_next(order)) {
    if (pass && c->pass != *pass) {
      REQUIRE(r.give_back(*c));
      break;
    }
    pass = c->pass;
    out.push_back({c->env, c->chunk});
    REQUIRE(r.complete(*c, static_cast<uint64_t>(version_of(*c))));
  }
  return out;
}

}  // namespace shmreplay::test
