// tools/bench/atari_steps.hpp: the Atari-like workload of shmreplay_bench's pixels section (pixels.cpp) and of its
// --atari-1e6 mode (atari_million.cpp): the schemas (obs stacked, as pushed, and one frame), the cycle of steps
// pushed over and over (AtariSteps), and the per-trial ratios both report.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "bench_support.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay::bench {


inline constexpr std::size_t kDepth = 4;
inline constexpr std::size_t kFrameBytes = 84 * 84;
inline constexpr std::size_t kFields = 4;  // obs, action, reward, done
inline constexpr const char* kStacked = "obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool";
inline constexpr const char* kUnstacked = "obs:u8[4,84,84] action:i32 reward:f32 done:bool";
inline constexpr const char* kFrame = "obs:u8[1,84,84] action:i32 reward:f32 done:bool";
inline constexpr std::size_t kTransitions = 256;                // rows per flat sample call
inline constexpr std::size_t kSequences = 32, kSequenceLength = 8;  // rows and steps per sequence sample call

// Atari-like steps, made once for a cycle of `steps` steps of `envs` envs and pushed over and over. Per env,
// episodes of episode_min..episode_max steps (uniform; the first starts with the cycle and the last is cut by its
// end, so that the cycle repeats as whole episodes); each step's obs is the stack of its episode's last 4 frames,
// newest last, padded at an episode's start with zero frames (even envs: envpool's convention) or with copies of
// the episode's first frame (odd envs: gymnasium's FrameStack); frames of random bytes; an action of 18, a reward
// of -1, 0 or 1, done on an episode's last step.
class AtariSteps {
 public:
  AtariSteps(std::size_t envs, std::size_t steps, uint64_t episode_min, uint64_t episode_max, uint64_t seed)
      : envs_(envs), steps_(steps) {
    obs_.resize(steps * envs * kDepth * kFrameBytes);
    newest_.resize(steps * envs * kFrameBytes);
    action_.resize(steps * envs);
    reward_.resize(steps * envs);
    done_.resize(steps * envs);
    SplitMix mix{seed};
    Rng bytes(seed);
    std::vector<std::byte> recent(kDepth * kFrameBytes);  // the episode's frames j % 4
    std::vector<std::byte> first(kFrameBytes);            // the episode's frame 0
    for (std::size_t e = 0; e < envs; ++e) {
      uint64_t left = 0;  // steps left in the episode
      uint64_t j = 0;     // the step's place in its episode
      for (std::size_t t = 0; t < steps; ++t) {
        if (left == 0) {
          left = episode_min + mix.below(episode_max - episode_min + 1);
          j = 0;
          ++restarts_;
        }
        std::byte* frame = recent.data() + (j % kDepth) * kFrameBytes;
        for (std::size_t i = 0; i < kFrameBytes; i += 8) {
          const uint64_t word = bytes();
          std::memcpy(frame + i, &word, std::min<std::size_t>(8, kFrameBytes - i));
        }
        if (j == 0) std::memcpy(first.data(), frame, kFrameBytes);
        const std::size_t at = t * envs + e;
        std::byte* stack = obs_.data() + at * kDepth * kFrameBytes;
        for (std::size_t k = 0; k < kDepth; ++k) {  // frame j - 3 + k of the episode, or padding before its start
          std::byte* dst = stack + k * kFrameBytes;
          if (j + k + 1 >= kDepth) {
            std::memcpy(dst, recent.data() + ((j + k + 1 - kDepth) % kDepth) * kFrameBytes, kFrameBytes);
          } else if (e % 2 == 0) {
            std::memset(dst, 0, kFrameBytes);
          } else {
            std::memcpy(dst, first.data(), kFrameBytes);
          }
        }
        std::memcpy(newest_.data() + at * kFrameBytes, frame, kFrameBytes);
        action_[at] = static_cast<int32_t>(mix.below(18));
        reward_[at] = static_cast<float>(mix.below(3)) - 1.0f;
        --left;
        done_[at] = left == 0 || t + 1 == steps ? 1 : 0;
        if (t + 1 == steps) left = 0;
        ++j;
      }
    }
    for (std::size_t t = 0; t < steps; ++t) {
      const std::size_t at = t * envs;
      const FieldBytes rest[3] = {{action_.data() + at, envs * 4}, {reward_.data() + at, envs * 4},
                                  {done_.data() + at, envs}};
      batches_.push_back({obs_.data() + at * kDepth * kFrameBytes, envs * kDepth * kFrameBytes});
      batches_.insert(batches_.end(), rest, rest + 3);
      newest_batches_.push_back({newest_.data() + at * kFrameBytes, envs * kFrameBytes});
      newest_batches_.insert(newest_batches_.end(), rest, rest + 3);
    }
  }

  std::size_t envs() const noexcept { return envs_; }
  std::size_t steps() const noexcept { return steps_; }
  /// The steps of a cycle (all envs) that begin an episode: their stacks do not continue their predecessors'.
  uint64_t restarts() const noexcept { return restarts_; }
  /// Step t of every env, per field [envs][field bytes], as a batched push takes it; `newest`: obs holds the
  /// newest frame only ([envs][1][84][84]).
  std::span<const FieldBytes> batch(std::size_t t, bool newest = false) const noexcept {
    return {(newest ? newest_batches_ : batches_).data() + t * kFields, kFields};
  }

 private:
  std::size_t envs_, steps_;
  uint64_t restarts_ = 0;
  std::vector<std::byte> obs_, newest_;
  std::vector<int32_t> action_;
  std::vector<float> reward_;
  std::vector<uint8_t> done_;
  std::vector<FieldBytes> batches_, newest_batches_;  // [steps][kFields]
};

/// a[i] / b[i] for each trial both have.
inline std::vector<double> ratios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return r;
}

}  // namespace shmreplay::bench
