// tools/bench/recorded_feed.hpp: real Atari frames (tools/frames/record_atari.py's files, frames_file.hpp) replayed
// as the steps of many envs, for the compressed storage benchmark (compressed.cpp, compressed_million.cpp,
// compressed_seed.cpp): each step's obs is its stack rebuilt exactly from the file, pushed through a Writer as
// envpool hands it over.
//
// A frames file holds few steps per env (1024 by default), so an env replays one recorded env cyclically: env e takes
// source e % sources (a source is one env of one file), starting at step (e / sources) * stride of it so that envs
// of the same source are apart; after the file's last step it goes on at its step 0, which begins an episode (the
// recorder's first step is a reset), so a cycle is whole episodes and its stacks restart there as a reset's do. A
// cyclic replay compresses as the recording did: the codec's chain restarts at each key frame anyway.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "frames_file.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay::bench {

/// The schema of the replayed steps, with `obs_options` after obs's stack option (":lz4", ":zstd=3", or "" for the
/// stacked-only field): obs as envpool's Atari gives it, and the step's action, reward and done; with `seed_fields`
/// the seed's items (shared/seeds/muesli_uniform_buffer_jax.txt: obs, action, logprob, reward, value, done).
inline std::string recorded_schema(const Recording& rec, const std::string& obs_options, bool seed_fields = false) {
  return fmt::format("obs:u8[{},{},{}]:stack=0{} action:i32 {}reward:f32 {}done:bool", rec.depth, rec.height,
                     rec.width, obs_options, seed_fields ? "logprob:f32 " : "", seed_fields ? "value:f32 " : "");
}

/// Steps of envs [first_env, first_env + envs) of `total_envs` (0: `envs`) replayed from `recordings` (all of one
/// frame shape and depth, gray), as a batched push takes them: next() makes every env's next step, batch() is it.
/// The action is the step's place in its file modulo 18 and the reward 0 (the recorder keeps neither); done is the
/// file's DONE flag; with `seed_fields` (recorded_schema's) the logprob is the uniform policy's, log(1/18), and the
/// value a ramp over the episode's steps (the recorder keeps no agent). Not thread-safe; one per Writer.
class RecordedFeed {
 public:
  RecordedFeed(const std::vector<const Recording*>& recordings, uint64_t envs, uint64_t first_env = 0,
               uint64_t total_envs = 0, bool seed_fields = false)
      : envs_(envs), seed_fields_(seed_fields) {
    if (recordings.empty()) throw std::invalid_argument("RecordedFeed: no recordings");
    const Recording& a = *recordings.front();
    for (const Recording* r : recordings) {
      if (r->frame_bytes() != a.frame_bytes() || r->depth != a.depth || r->channels != 1) {
        throw std::invalid_argument(fmt::format("RecordedFeed: {} has {}x{}x{} frames in stacks of {}, expected "
                                                "{}x{}x1 in stacks of {}",
                                                r->name, r->height, r->width, r->channels, r->depth, a.height,
                                                a.width, a.depth));
      }
      for (uint32_t e = 0; e < r->envs; ++e) sources_.push_back({r, e});
    }
    frame_bytes_ = a.frame_bytes();
    depth_ = a.depth;
    const uint64_t total = total_envs == 0 ? envs : total_envs;
    const uint64_t per_source = (total + sources_.size() - 1) / sources_.size();
    for (uint64_t e = first_env; e < first_env + envs; ++e) {
      at_.push_back(sources_[e % sources_.size()]);
      starts_.push_back((e / sources_.size()) * at_.back().rec->steps / per_source);
    }
    obs_.resize(envs * step_obs_bytes());
    action_.resize(envs);
    reward_.assign(envs, 0.0f);
    logprob_.assign(envs, -2.8903718f);  // log(1/18)
    value_.resize(envs);
    done_.resize(envs);
  }

  uint64_t envs() const noexcept { return envs_; }
  std::size_t step_obs_bytes() const noexcept { return depth_ * frame_bytes_; }
  /// Steps made per env so far (next() calls).
  uint64_t made() const noexcept { return t_; }

  /// Env `env`'s (0 is first_env) obs at its step `t` (its stack, oldest frame first) into `out` (step_obs_bytes()).
  void stack(uint64_t env, uint64_t t, std::byte* out) const noexcept {
    const Source& s = at_[env];
    const std::size_t i = std::size_t{s.env} * s.rec->steps + (starts_[env] + t) % s.rec->steps;
    for (std::size_t k = 0; k < depth_; ++k) {
      std::memcpy(out + k * frame_bytes_, s.rec->stack_frame(i, k), frame_bytes_);
    }
  }
  /// Env `env`'s flags at its step `t` (Recording::kFirst, kDone).
  uint8_t flags(uint64_t env, uint64_t t) const noexcept {
    const Source& s = at_[env];
    return s.rec->flags[std::size_t{s.env} * s.rec->steps + (starts_[env] + t) % s.rec->steps];
  }

  /// Makes every env's next step (copies its stack: step_obs_bytes() per env).
  void next() noexcept {
    for (uint64_t e = 0; e < envs_; ++e) {
      stack(e, t_, obs_.data() + e * step_obs_bytes());
      const Source& s = at_[e];
      action_[e] = static_cast<int32_t>((starts_[e] + t_) % s.rec->steps % 18);
      done_[e] = (flags(e, t_) & Recording::kDone) != 0 ? 1 : 0;
      value_[e] = (flags(e, t_) & Recording::kFirst) != 0 ? 0.0f : value_[e] + 0.01f;
    }
    ++t_;
    const FieldBytes obs{obs_.data(), obs_.size()}, action{action_.data(), envs_ * 4},
        reward{reward_.data(), envs_ * 4}, done{done_.data(), envs_};
    if (seed_fields_) {
      batch_ = {obs, action, FieldBytes{logprob_.data(), envs_ * 4}, reward, FieldBytes{value_.data(), envs_ * 4},
                done};
    } else {
      batch_ = {obs, action, reward, done};
    }
  }
  /// The step next() made, per field [envs][field bytes], in recorded_schema's order.
  std::span<const FieldBytes> batch() const noexcept {
    return std::span<const FieldBytes>(batch_).first(seed_fields_ ? 6 : 4);
  }
  /// Bytes of one env's step as pushed (all fields).
  std::size_t step_bytes() const noexcept { return step_obs_bytes() + (seed_fields_ ? 17 : 9); }

 private:
  struct Source {
    const Recording* rec;
    uint32_t env;
  };
  uint64_t envs_;
  bool seed_fields_ = false;
  std::size_t frame_bytes_ = 0, depth_ = 0;
  uint64_t t_ = 0;
  std::vector<Source> sources_;  // every env of every recording
  std::vector<Source> at_;       // per env of this feed (0 is first_env): its source
  std::vector<uint64_t> starts_;  // per env of this feed
  std::vector<std::byte> obs_;
  std::vector<int32_t> action_;
  std::vector<float> reward_;
  std::vector<float> logprob_;
  std::vector<float> value_;
  std::vector<uint8_t> done_;
  std::array<FieldBytes, 6> batch_{};
};

/// The Atari frames files of `dir` (stacked gray frames; DMC's RGB files are left out) whose game (the name before
/// "-v5") is in `games` (comma-separated; empty: every one). Throws std::runtime_error when none is.
inline std::vector<Recording> atari_recordings(const std::string& dir, const std::string& games) {
  std::vector<Recording> out;
  for (Recording& rec : load_recordings(dir, 0)) {
    const std::string game = rec.name.substr(0, rec.name.find('-'));
    if (rec.channels != 1 || rec.depth < 2) continue;
    if (!games.empty() && ("," + games + ",").find("," + game + ",") == std::string::npos) continue;
    out.push_back(std::move(rec));
  }
  if (out.empty()) {
    throw std::runtime_error(fmt::format("no Atari frames file in {} {}", dir,
                                         games.empty() ? "" : fmt::format("of the games {}", games)));
  }
  return out;
}

}  // namespace shmreplay::bench
