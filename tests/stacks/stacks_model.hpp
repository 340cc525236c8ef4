// tests/stacks/stacks_model.hpp: stamped frames and the stamped-frame env model of test_stacks (what each env
// pushes and what the buffer must keep of it). Included by stacks_helpers.hpp, which the parts of test_stacks
// include.
//
// A frame is stamped: its first 8 bytes are a stamp (field, env, serial; 0 only for the all-zero padding frame),
// and every later byte is a hash of the stamp and the byte's position in the frame. So a frame of another env,
// another step, another field, a frame shifted by any number of bytes, or one torn between two writes differs from
// the expected one in some byte, and the message names the frame that is there instead.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"


using namespace shmreplay;
using test::chi_square;
using test::chi_square_bound;
using test::error_of;
using test::SegmentGuard;
using test::unique_name;

namespace {

using test::code;
using test::contains;

// ---------------------------------------------------------------------------------------------------------------
// Stamped frames

/// The stamp of frame `serial` (>= 1, < 2^40) of stacked field `field` (its index among the stacked fields) of env
/// `env`: never 0, which is the all-zero padding frame's.
inline uint64_t frame_stamp(uint64_t field, uint64_t env, uint64_t serial) {
  return ((field + 1) << 56) | ((env + 1) << 40) | serial;
}

/// Byte `i` of the frame stamped `stamp`.
inline std::byte frame_byte(uint64_t stamp, uint64_t i) {
  if (stamp == 0) return std::byte{0};
  if (i < 8) return static_cast<std::byte>(stamp >> (8 * i));
  // Runs of 16 equal bytes: distinct frames still differ everywhere, and a codec shrinks them (compressed stacks).
  return static_cast<std::byte>(test::mix(stamp * 0x9e3779b97f4a7c15ull + (i / 16) * 0xc2b2ae3d27d4eb4full) >> 11);
}

inline std::string describe_stamp(uint64_t stamp) {
  if (stamp == 0) return "the zero frame";
  return fmt::format("frame {} of env {} (stacked field {})", stamp & ((uint64_t{1} << 40) - 1),
                     static_cast<int64_t>((stamp >> 40) & 0xffff) - 1, static_cast<int64_t>(stamp >> 56) - 1);
}

/// How a stacked field's stack lies in a step's bytes: [outer][depth][inner_bytes], a frame being the `outer` runs
/// of `inner_bytes` of one k. Computed here from the field, apart from the library's StackGeometry.
struct StackShape {
  std::size_t field = 0;  ///< schema index
  uint64_t depth = 0;     ///< K
  uint64_t outer = 1;
  uint64_t inner_bytes = 0;
  uint64_t frames = 0;    ///< frames per env ring, as create places them (frames_per_env)
  uint64_t key_every = 1; ///< a compressed field's key-frame period (kPackedKeyEvery): a step needs its frames back to
                          ///< the multiple of it at or below its oldest; 1 for the frame ring

  uint64_t frame_bytes() const { return outer * inner_bytes; }
  uint64_t bytes() const { return depth * frame_bytes(); }
};

inline StackShape shape_of(const Field& f, std::size_t index) {
  StackShape s;
  s.field = index;
  const uint32_t axis = *f.stack_axis;
  s.depth = f.shape[axis];
  for (uint32_t d = 0; d < axis; ++d) s.outer *= f.shape[d];
  s.inner_bytes = dtype_bytes(f.dtype);
  for (std::size_t d = axis + 1; d < f.shape.size(); ++d) s.inner_bytes *= f.shape[d];
  if (f.compressed()) s.key_every = 4;  // docs/design/compression.md
  return s;
}

/// What create makes of a stacked field: frames per env = capacity + (K - 1) x (1 + restarts), the default restarts
/// 1 + capacity / 128, and one frame more where that is exactly K x capacity (so that a 1.5 library refuses it).
inline uint64_t frames_per_env(uint64_t capacity, uint64_t depth, uint64_t restarts) {
  if (restarts == 0) restarts = 1 + capacity / 128;
  const uint64_t frames = capacity + (depth - 1) * (1 + restarts);
  return frames == depth * capacity ? frames + 1 : frames;
}

/// Writes the stack of frames `stamps` (K of them, oldest first) into `out` as the field lays it out.
inline void write_stack(const StackShape& s, const uint64_t* stamps, std::byte* out) {
  for (uint64_t o = 0; o < s.outer; ++o) {
    for (uint64_t k = 0; k < s.depth; ++k) {
      std::byte* dst = out + (o * s.depth + k) * s.inner_bytes;
      for (uint64_t i = 0; i < s.inner_bytes; ++i) dst[i] = frame_byte(stamps[k], o * s.inner_bytes + i);
    }
  }
}

/// Checks the stack in `got` against the frames `stamps`; "" when every byte is right, else which frame is wrong and
/// what is there instead.
inline std::string check_stack(const StackShape& s, const uint64_t* stamps, const std::byte* got) {
  for (uint64_t k = 0; k < s.depth; ++k) {
    bool right = true;
    for (uint64_t o = 0; o < s.outer && right; ++o) {
      const std::byte* p = got + (o * s.depth + k) * s.inner_bytes;
      for (uint64_t i = 0; i < s.inner_bytes && right; ++i) {
        right = p[i] == frame_byte(stamps[k], o * s.inner_bytes + i);
      }
    }
    if (right) continue;
    // The frame that is there instead: its first 8 bytes (which may lie in several runs), and whether the rest
    // matches that stamp (a whole frame of another step) or not (torn, shifted).
    std::vector<std::byte> frame(s.frame_bytes());
    for (uint64_t o = 0; o < s.outer; ++o) {
      std::memcpy(frame.data() + o * s.inner_bytes, got + (o * s.depth + k) * s.inner_bytes, s.inner_bytes);
    }
    uint64_t found = 0;
    std::memcpy(&found, frame.data(), std::min<uint64_t>(8, frame.size()));
    bool whole = true;
    for (uint64_t i = 0; i < frame.size(); ++i) whole = whole && frame[i] == frame_byte(found, i);
    return fmt::format("frame {} of {}: expected {}, found {}{}", k, s.depth, describe_stamp(stamps[k]),
                       whole ? "" : "bytes that are not one whole frame, starting like ", describe_stamp(found));
  }
  return "";
}

// ---------------------------------------------------------------------------------------------------------------
// The env model

/// How an env's next stack relates to its previous one.
enum class Move : uint8_t {
  cont,          ///< the env steps on: the previous stack's newest K - 1 frames and a new one
  reset_zeros,   ///< an episode's first step, padded with zero frames
  reset_repeat,  ///< ... padded with copies of its first frame
  reset_random,  ///< ... padded with frames never seen before or after
  jump,          ///< K new frames, with no episode flag (the env's stack does not continue)
  partial,       ///< as cont, but one of the older frames replaced by a new one (no flag): it does not continue
};
constexpr std::array<Move, 6> kMoves = {Move::cont, Move::reset_zeros, Move::reset_repeat, Move::reset_random,
                                        Move::jump, Move::partial};
inline bool is_reset(Move m) { return m == Move::reset_zeros || m == Move::reset_repeat || m == Move::reset_random; }

/// A schema for the model: id:u64[2] (env, step), the stacked fields, reward:f32 and done:u8 spread among them
/// (plain fields before, between and after stacked ones).
struct StackSchema {
  Schema schema;
  std::vector<StackShape> stacks;  // in schema order
  std::size_t id = 0, reward = 0, done = 0;
};

/// `stacked`: the text form of each stacked field ("obs:u8[4,6,5]:stack=0").
inline StackSchema stack_schema(const std::vector<std::string>& stacked) {
  std::string text = "id:u64[2] " + stacked[0] + " reward:f32";
  for (std::size_t i = 1; i < stacked.size(); ++i) text += " " + stacked[i];
  text += " done:u8";
  StackSchema s{Schema::parse(text), {}, 0, 0, 0};
  s.id = *s.schema.find("id");
  s.reward = *s.schema.find("reward");
  s.done = *s.schema.find("done");
  for (std::size_t f = 0; f < s.schema.size(); ++f) {
    if (s.schema[f].stacked()) s.stacks.push_back(shape_of(s.schema[f], f));
  }
  return s;
}

/// Integer-valued rewards (exact sums in double).
inline float reward_of(uint64_t env, uint64_t step) { return static_cast<float>((env * 7 + step * 3) % 11) - 4.0f; }

/// One pushed step of one env.
struct ModelStep {
  std::vector<uint64_t> stamps;  ///< per stacked field, K stamps, oldest first (back to back)
  bool done = false;
  float priority = 1.0f;
};

/// The bytes of field `f` of step `s` of env `e` whose frames are `st`: id = {env, step}, reward_of, done, stacks.
inline void step_value(const StackSchema& sch, uint64_t e, uint64_t s, const ModelStep& st, std::size_t f,
                       std::byte* out) {
  if (f == sch.id) {
    const uint64_t id[2] = {e, s};
    std::memcpy(out, id, sizeof id);
  } else if (f == sch.reward) {
    const float r = reward_of(e, s);
    std::memcpy(out, &r, sizeof r);
  } else if (f == sch.done) {
    out[0] = std::byte{st.done ? uint8_t{1} : uint8_t{0}};
  } else {
    std::size_t off = 0;
    for (const StackShape& shape : sch.stacks) {
      if (shape.field == f) write_stack(shape, st.stamps.data() + off, out);
      off += shape.depth;
    }
  }
}

/// Checks the fields of step `s` of env `e`, whose frames are `st`, as a reader copied them (`got(f)`: field f's
/// bytes); "" when every byte is right.
template <class Got>
std::string check_step_value(const StackSchema& sch, uint64_t e, uint64_t s, const ModelStep& st, const Got& got) {
  for (std::size_t f = 0; f < sch.schema.size(); ++f) {
    const std::byte* p = got(f);
    if (sch.schema[f].stacked()) {
      std::size_t off = 0;
      for (const StackShape& shape : sch.stacks) {
        if (shape.field == f) {
          const std::string v = check_stack(shape, st.stamps.data() + off, p);
          if (!v.empty()) return fmt::format("env {} step {} field '{}': {}", e, s, sch.schema[f].name, v);
        }
        off += shape.depth;
      }
      continue;
    }
    std::byte want[16];
    step_value(sch, e, s, st, f, want);
    if (std::memcmp(p, want, sch.schema[f].bytes()) != 0) {
      return fmt::format("env {} step {} field '{}' differs", e, s, sch.schema[f].name);
    }
  }
  return "";
}

/// Every env's pushed steps and the frame rings the buffer keeps of them: in each stacked field, a step takes 1 new
/// frame when its stack continues the previous step's (its frames 0..K-2 are the previous stack's 1..K-1), else K;
/// a ring of F frames holds the newest F frames written; a step can be sampled when its slot is stored (the newest
/// `capacity` steps) and, in every stacked field, its oldest frame is still in the ring. A step whose stack cannot
/// be rebuilt makes every older step's unsampleable too (the library's bound is one step per env).
struct Model {
  StackSchema sch;
  uint64_t capacity;
  struct Env {
    std::vector<ModelStep> steps;
    std::vector<std::vector<uint64_t>> window;  ///< per stacked field: the stack the env shows now
    uint64_t serial = 0;                        ///< frames made so far (each field numbers its own the same way)
    std::vector<uint64_t> written;              ///< per stacked field: frames written to its ring
    std::vector<std::vector<uint64_t>> index;   ///< per stacked field, per step: its newest frame
    uint64_t online_start = 0;
    uint64_t first_loaded = 0;                  ///< a checkpoint load's first step: frames start over there
  };
  std::vector<Env> envs;

  Model(StackSchema s, uint64_t num_envs, uint64_t cap, uint64_t restarts)
      : sch(std::move(s)), capacity(cap), envs(num_envs) {
    for (StackShape& st : sch.stacks) {
      // A compressed field has key_every - 1 descriptors more: the frames its oldest step's are coded against.
      st.frames = frames_per_env(cap, st.depth, restarts) + st.key_every - 1;
    }
    for (Env& e : envs) {
      e.window.resize(sch.stacks.size());
      e.written.assign(sch.stacks.size(), 0);
      e.index.resize(sch.stacks.size());
    }
  }
  uint64_t num_envs() const { return envs.size(); }
  uint64_t head(uint64_t e) const { return envs[e].steps.size(); }
  std::size_t stamp_offset(std::size_t i) const {
    std::size_t off = 0;
    for (std::size_t j = 0; j < i; ++j) off += sch.stacks[j].depth;
    return off;
  }

  /// The env's next step after `move` (not yet recorded as pushed); `done`: it ends its episode.
  ModelStep next(uint64_t e, Move move, bool done, std::mt19937_64* gen = nullptr) {
    Env& env = envs[e];
    if (env.steps.empty() && (move == Move::cont || move == Move::partial)) move = Move::reset_zeros;
    ModelStep s;
    s.done = done;
    ++env.serial;
    for (std::size_t i = 0; i < sch.stacks.size(); ++i) {
      const uint64_t K = sch.stacks[i].depth;
      const uint64_t newest = frame_stamp(i, e, env.serial);
      std::vector<uint64_t>& w = env.window[i];
      // Frames never seen elsewhere: serials from 2^39 up, apart from the steps' own.
      const auto unseen = [&](uint64_t k) { return frame_stamp(i, e, (uint64_t{1} << 39) + env.serial * 8 + k); };
      std::vector<uint64_t> next(K);
      for (uint64_t k = 0; k + 1 < K; ++k) {
        switch (move) {
          case Move::cont: next[k] = w[k + 1]; break;
          case Move::partial: next[k] = w[k + 1]; break;
          case Move::reset_zeros: next[k] = 0; break;
          case Move::reset_repeat: next[k] = newest; break;
          case Move::reset_random: next[k] = unseen(k); break;
          case Move::jump: next[k] = unseen(k); break;
        }
      }
      if (move == Move::partial) next[gen ? (*gen)() % (K - 1) : K - 2] = unseen(7);
      next[K - 1] = newest;
      w = next;
      s.stamps.insert(s.stamps.end(), next.begin(), next.end());
    }
    return s;
  }

  /// An env as a checkpoint load writes it: its steps start at `first` (none before is stored) and its frames start
  /// over there (the first loaded step takes K frames). Precondition: nothing recorded for `e` yet.
  void start_at(uint64_t e, uint64_t first) {
    Env& env = envs[e];
    env.steps.resize(first);
    for (auto& index : env.index) index.resize(first);
    env.first_loaded = first;
  }

  /// Records step `s` as pushed to env `e` (its head): the frames it takes in each ring.
  void record(uint64_t e, ModelStep s) {
    Env& env = envs[e];
    const uint64_t step = env.steps.size();
    // One decision per field: a field's stack may continue while another's does not.
    for (std::size_t i = 0; i < sch.stacks.size(); ++i) {
      const std::size_t off = stamp_offset(i);
      const uint64_t K = sch.stacks[i].depth;
      bool c = step > env.first_loaded;
      if (c) {
        const std::vector<uint64_t>& prev = env.steps.back().stamps;
        c = std::equal(s.stamps.data() + off, s.stamps.data() + off + K - 1, prev.data() + off + 1);
      }
      env.written[i] += c ? 1 : K;
      env.index[i].push_back(env.written[i] - 1);
    }
    env.steps.push_back(std::move(s));
  }

  /// Whether step `s` of env `e` still has its frames in every stacked field's ring.
  bool frames_intact(uint64_t e, uint64_t s) const {
    const Env& env = envs[e];
    for (std::size_t i = 0; i < sch.stacks.size(); ++i) {
      const StackShape& st = sch.stacks[i];
      const uint64_t oldest = (env.index[i][s] + 1 - st.depth) / st.key_every * st.key_every;
      if (env.written[i] > st.frames && oldest < env.written[i] - st.frames) return false;
    }
    return true;
  }
  /// The oldest sampleable step of env `e`'s replay view: the newest `capacity` steps, from the first step after the
  /// newest one whose frames are gone (the library keeps one bound per env, raised past any lost step).
  uint64_t lo(uint64_t e) const {
    const uint64_t h = head(e);
    const uint64_t slots = h > capacity ? h - capacity : 0;
    uint64_t lo = std::max(slots, envs[e].first_loaded);
    for (uint64_t s = h; s > lo; --s) {
      if (!frames_intact(e, s - 1)) return s;
    }
    return lo;
  }
  /// The same, ignoring lost frames (a wrong model, for the tests to reject).
  uint64_t lo_ignoring_frames(uint64_t e) const {
    const uint64_t h = head(e);
    return std::max(h > capacity ? h - capacity : 0, envs[e].first_loaded);
  }
  uint64_t lo(uint64_t e, View view) const {
    const uint64_t l = lo(e);
    return view == View::online ? std::min(std::max(l, envs[e].online_start), head(e)) : l;
  }
  void reset_online() {
    for (uint64_t e = 0; e < num_envs(); ++e) envs[e].online_start = head(e);
  }
  uint64_t lost(uint64_t e) const { return lo(e) - lo_ignoring_frames(e); }

  /// Steps from p to the end of p's episode (its done step) or `hi`, whichever comes first.
  uint64_t rem_in_episode(uint64_t e, uint64_t p, uint64_t hi) const {
    for (uint64_t s = p; s < hi; ++s) {
      if (envs[e].steps[s].done) return s - p + 1;
    }
    return hi - p;
  }

  /// The bytes of field `f` of step `s` of env `e`, as pushed.
  void field_value(uint64_t e, uint64_t s, std::size_t f, std::byte* out) const {
    step_value(sch, e, s, envs[e].steps[s], f, out);
  }
  std::vector<std::byte> field_value(uint64_t e, uint64_t s, std::size_t f) const {
    std::vector<std::byte> out(sch.schema[f].bytes());
    field_value(e, s, f, out.data());
    return out;
  }

  /// Checks the fields of step `s` of env `e` as a reader copied them (`got(f)`: field f's bytes); "" when exact.
  template <class Got>
  std::string check_step(uint64_t e, uint64_t s, const Got& got) const {
    return check_step_value(sch, e, s, envs[e].steps[s], got);
  }
};

/// Draws a move: mostly cont; about one step in `one_in` either ends its episode (the step after is a reset with
/// any of the three paddings) or, when `flagless`, does not continue its predecessor's stack (jump, partial) with no
/// episode flag at all.
struct MoveDraw {
  Move move;
  bool done;  ///< this step ends its episode
};
inline MoveDraw draw_move(std::mt19937_64& gen, bool& pending_reset, uint64_t one_in, bool flagless) {
  MoveDraw d{Move::cont, false};
  if (pending_reset) {
    d.move = kMoves[1 + gen() % 3];
    pending_reset = false;
  } else if (flagless && gen() % one_in == 0) {
    d.move = gen() % 2 ? Move::jump : Move::partial;
  }
  if (!flagless && gen() % one_in == 0) {
    d.done = true;
    pending_reset = true;
  }
  return d;
}

}  // namespace
