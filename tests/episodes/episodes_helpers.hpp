// tests/episodes/episodes_helpers.hpp: what the parts of test_episodes share (tests/CMakeLists.txt builds them
// into one executable): the test schema and its steps, the reference model of every env's stored steps and
// episodes, the rig of a buffer with a writer and a sampler, the row checks, the chi-square statistic, and the
// SIGKILL tests' schema.
// test_episodes (layout 1.2): episode fields at creation, boundaries recorded by every push path, sampling with
// episodes = cross | stop | within, period and min_steps (every row checked against a reference model; chi-square
// of the start distributions; the strictly-increasing property), n-step returns, completed-episode records, crash
// consistency with writers SIGKILLed and replaced, and a work counter showing that sampling work does not grow
// with the number of stored steps.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "detail/protocol/episodes.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"
#include "views_model.hpp"

using namespace shmreplay;
using test::error_of;
using test::kill_and_reap;
using test::mask_prefix;
using test::spawn;
using test::SegmentGuard;
using test::unique_name;

namespace {

using test::code;
using test::contains;

// Every flag field a test may name, so that one schema serves both flavours of episode fields.
const Schema kSchema = Schema::parse("id:u64[2] x:f32 done:u8 term:bool trunc:i32 reward:f32");
constexpr std::size_t kId = 0, kX = 1, kDone = 2, kTerm = 3, kTrunc = 4, kReward = 5;

enum class Flavor { done, term_trunc };

inline CreateOptions options_for(Flavor flavor, uint64_t queue_capacity = 0) {
  CreateOptions o;
  if (flavor == Flavor::done) {
    o.episodes = {.done = "done", .reward = "reward"};
  } else {
    o.episodes = {.terminated = "term", .truncated = "trunc", .reward = "reward"};
  }
  o.episode_queue_capacity = queue_capacity;
  return o;
}

struct Step {
  uint64_t id[2];
  float x;
  uint8_t done;
  uint8_t term;
  int32_t trunc;
  float reward;
};

// Integer-valued rewards (some negative), so that every sum is exact in double.
inline float reward_of(uint64_t env, uint64_t step) { return static_cast<float>((env * 7 + step) % 13) - 3.0f; }

inline Step make_step(uint64_t env, uint64_t step, bool done, bool term, bool trunc) {
  Step s{};
  s.id[0] = env;
  s.id[1] = step;
  s.x = static_cast<float>(env * 1000 + step) + 0.5f;
  s.done = done ? 1 : 0;
  s.term = term ? 1 : 0;
  s.trunc = trunc ? 7 : 0;  // any nonzero value is set
  s.reward = reward_of(env, step);
  return s;
}

inline bool ends(const Step& s, Flavor flavor) {
  return flavor == Flavor::done ? s.done != 0 : (s.term != 0 || s.trunc != 0);
}

inline EpisodeEnd end_of(const Step& s, Flavor flavor) {
  if (flavor == Flavor::done) return s.done != 0 ? EpisodeEnd::done : EpisodeEnd::none;
  if (s.term != 0) return EpisodeEnd::terminated;
  return s.trunc != 0 ? EpisodeEnd::truncated : EpisodeEnd::none;
}

inline std::array<FieldBytes, 6> fields_of(const Step& s) {
  return {FieldBytes{s.id, sizeof s.id}, value_bytes(s.x),     value_bytes(s.done),
          value_bytes(s.term),           value_bytes(s.trunc), value_bytes(s.reward)};
}

using test::Window;

// The reference model: per env every pushed step with its flags; the views; the episode structure computed by
// scanning flags (what the library must never do).
struct Model : test::ViewsModel<Step> {
  Flavor flavor;

  Model(Flavor f, uint64_t num_envs, uint64_t cap) : ViewsModel(num_envs, cap), flavor(f) {}
  // Steps from p to the end of p's episode or the head, whichever comes first.
  uint64_t rem_in_episode(uint64_t e, uint64_t p, uint64_t hi) const {
    for (uint64_t s = p; s < hi; ++s) {
      if (ends(steps[e][s], flavor)) return s - p + 1;
    }
    return hi - p;
  }
  // The unnormalised weight of start p of env e, 0 when p is not a start; and the row's steps.
  double weight(View view, uint64_t e, uint64_t p, uint64_t L, double power, const SampleOptions& o) const {
    const Window w = window(view, e);
    if (p < w.lo || p >= w.hi || (p - w.lo) % o.period != 0) return 0.0;
    if (o.episodes == Episodes::cross) return std::pow(static_cast<double>(std::min(w.hi - p, L)), power);
    const uint64_t r = rem_in_episode(e, p, w.hi);
    if (o.episodes == Episodes::within) return r >= L ? 1.0 : 0.0;
    return std::pow(static_cast<double>(std::min(r, L)), power);
  }
  uint64_t row_steps(View view, uint64_t e, uint64_t p, uint64_t L, const SampleOptions& o) const {
    const Window w = window(view, e);
    if (o.episodes == Episodes::cross) return std::min(w.hi - p, L);
    return std::min(rem_in_episode(e, p, w.hi), L);
  }
  double total_weight(View view, uint64_t L, double power, const SampleOptions& o) const {
    double total = 0.0;
    for (uint64_t e = 0; e < num_envs(); ++e) {
      const Window w = window(view, e);
      for (uint64_t p = w.lo; p < w.hi; ++p) total += weight(view, e, p, L, power, o);
    }
    return total;
  }
  // The records every completed episode produces, per env, in order.
  std::vector<EpisodeRecord> records(uint64_t e) const {
    std::vector<EpisodeRecord> out;
    uint64_t start = 0;
    double ret = 0.0;
    for (uint64_t s = 0; s < head(e); ++s) {
      ret += static_cast<double>(steps[e][s].reward);
      if (ends(steps[e][s], flavor)) {
        out.push_back({e, start, s + 1 - start, ret, end_of(steps[e][s], flavor)});
        start = s + 1;
        ret = 0.0;
      }
    }
    return out;
  }
};

// Pushes the next step of each env in `envs` with the given flags, by `mode`: 0 a batched push with int32 ids,
// 1 push_one per env, 2 reserve/commit per env (flags read from the filled slot).
inline void push_steps(Writer& w, Model& m, const std::vector<uint64_t>& envs,
                       const std::vector<std::array<bool, 3>>& flags, int mode) {
  std::vector<Step> steps;
  for (std::size_t i = 0; i < envs.size(); ++i) {
    steps.push_back(make_step(envs[i], m.head(envs[i]), flags[i][0], flags[i][1], flags[i][2]));
  }
  if (mode == 0) {
    std::vector<uint64_t> ids;
    std::vector<float> xs, rewards;
    std::vector<uint8_t> dones, terms;
    std::vector<int32_t> truncs, env32;
    for (const Step& s : steps) {
      ids.insert(ids.end(), s.id, s.id + 2);
      xs.push_back(s.x);
      dones.push_back(s.done);
      terms.push_back(s.term);
      truncs.push_back(s.trunc);
      rewards.push_back(s.reward);
      env32.push_back(static_cast<int32_t>(s.id[0]));
    }
    w.push(std::span<const int32_t>(env32), {field_bytes(ids), field_bytes(xs), field_bytes(dones), field_bytes(terms),
                                             field_bytes(truncs), field_bytes(rewards)});
  } else {
    for (const Step& s : steps) {
      if (mode == 1) {
        w.push_one(s.id[0], fields_of(s));
      } else {
        StepSlot slot = w.reserve(s.id[0]);
        const auto f = fields_of(s);
        for (std::size_t k = 0; k < f.size(); ++k) std::memcpy(slot.field(k).data(), f[k].data, f[k].bytes);
        slot.commit();
      }
    }
  }
  for (const Step& s : steps) m.steps[s.id[0]].push_back(s);
}

inline void push_one_step(Writer& w, Model& m, uint64_t env, bool done, bool term = false, bool trunc = false,
                          int mode = 1) {
  push_steps(w, m, {env}, {{done, term, trunc}}, mode);
}

inline std::array<bool, 3> random_flags(std::mt19937_64& gen, Flavor flavor, uint64_t one_in) {
  if (flavor == Flavor::done) return {gen() % one_in == 0, false, false};
  return {false, gen() % (2 * one_in) == 0, gen() % (2 * one_in) == 0};
}

inline bool step_equals(const SampleBatch& b, std::size_t row, std::size_t t, const Step& s) {
  const auto f = fields_of(s);
  for (std::size_t k = 0; k < f.size(); ++k) {
    if (std::memcmp(b.step(k, row, t), f[k].data, f[k].bytes) != 0) return false;
  }
  return true;
}

inline bool step_is_zero(const SampleBatch& b, std::size_t row, std::size_t t) {
  const std::array<std::size_t, 6> bytes = {16, 4, 1, 1, 4, 4};
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    const std::byte* p = b.step(k, row, t);
    if (std::any_of(p, p + bytes[k], [](std::byte c) { return c != std::byte{0}; })) return false;
  }
  return true;
}

// Checks rows [first, first + count) of `b` against the model; returns the first problem, or "".
inline std::string check_rows(const SampleBatch& b, const Model& m, View view, std::size_t first, std::size_t count,
                              std::size_t L, double power, const SampleOptions& o) {
  for (std::size_t row = first; row < first + count; ++row) {
    const uint64_t e = b.env_ids()[row];
    const uint64_t p = b.start_steps()[row];
    if (e >= m.num_envs()) return fmt::format("row {}: env {} out of range", row, e);
    const Window w = m.window(view, e);
    if (m.weight(view, e, p, L, power, o) == 0.0) {
      return fmt::format("row {}: start {} of env {} is not a start for {} / period {} / L {} (view [{}, {}))", row,
                         p, e, to_string(o.episodes), o.period, L, w.lo, w.hi);
    }
    const uint64_t r = m.row_steps(view, e, p, L, o);
    for (std::size_t t = 0; t < L; ++t) {
      const bool in = t < r;
      if (b.valid(row, t) != in) {
        return fmt::format("row {} (env {}, start {}, {}): mask[{}] is {}, the model has {} steps", row, e, p,
                           to_string(o.episodes), t, b.valid(row, t), r);
      }
      if (in && !step_equals(b, row, t, m.steps[e][p + t])) return fmt::format("row {}: wrong bytes at {}", row, t);
      if (!in && !step_is_zero(b, row, t)) return fmt::format("row {}: masked position {} not zero", row, t);
    }
  }
  return {};
}

// A buffer with every env leased by one Writer, the learner and the model.
struct Rig {
  Rig(const std::string& tag, Flavor flavor, uint64_t num_envs, uint64_t cap, uint64_t queue_capacity = 0)
      : guard(unique_name(tag)),
        buf(Buffer::create(guard.name(), num_envs, cap, kSchema, options_for(flavor, queue_capacity))),
        w(Writer::range(buf, 0, num_envs)),
        s(buf),
        m(flavor, num_envs, cap) {}
  SegmentGuard guard;
  Buffer buf;
  Writer w;
  Sampler s;
  Model m;
};

inline double chi_square(const std::vector<uint64_t>& counts, const std::vector<double>& prob, double n) {
  double stat = 0.0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (prob[i] == 0.0) {
      if (counts[i] != 0) return 1e300;
      continue;
    }
    const double diff = static_cast<double>(counts[i]) - n * prob[i];
    stat += diff * diff / (n * prob[i]);
  }
  return stat;
}

// Start cells of `view` (env-major), their probabilities under the model, and the chi-square bound for them.
struct Cells {
  std::vector<uint64_t> offset;
  std::vector<double> prob;
  std::size_t nonzero = 0;
};

inline Cells cells_of(const Model& m, View view, std::size_t L, double power, const SampleOptions& o) {
  Cells c;
  const double total = m.total_weight(view, L, power, o);
  for (uint64_t e = 0; e < m.num_envs(); ++e) {
    c.offset.push_back(c.prob.size());
    const Window w = m.window(view, e);
    for (uint64_t p = w.lo; p < w.hi; ++p) {
      c.prob.push_back(m.weight(view, e, p, L, power, o) / total);
      if (c.prob.back() > 0.0) ++c.nonzero;
    }
  }
  return c;
}

inline std::vector<uint64_t> count_starts(Sampler& s, const Model& m, View view, std::size_t L, double power,
                                          const SampleOptions& o, const Cells& cells, Rng& rng, std::size_t calls,
                                          std::size_t rows) {
  std::vector<uint64_t> count(cells.prob.size(), 0);
  std::vector<Window> windows;
  for (uint64_t e = 0; e < m.num_envs(); ++e) windows.push_back(m.window(view, e));
  uint64_t outside = 0;
  SampleBatch out;
  for (std::size_t call = 0; call < calls; ++call) {
    s.sample(view, rows, L, power, rng, out, o);
    for (std::size_t row = 0; row < rows; ++row) {
      const uint64_t e = out.env_ids()[row];
      const uint64_t p = out.start_steps()[row];
      if (p < windows[e].lo || p >= windows[e].hi) {
        ++outside;
      } else {
        ++count[cells.offset[e] + (p - windows[e].lo)];
      }
    }
  }
  CHECK(outside == 0);
  return count;
}

const Schema kKillSchema = Schema::parse("hdr:u64[2] term:u8 trunc:u8 reward:f32");

inline CreateOptions kill_options() {
  return {.episodes = {.terminated = "term", .truncated = "trunc", .reward = "reward"}, .episode_queue_capacity = 4096};
}

}  // namespace
