// tests/sampler/sampler_helpers.hpp: what the parts of test_sampler share (tests/CMakeLists.txt builds them into one
// executable): the test schema and its steps, the reference model of every env's stored steps, the rig of a buffer
// with a writer and a sampler, and the row, peek and size checks.
// test_sampler: Sampler: every row checked against a reference model of the views, determinism, the start-position
// distribution (chi-square), argument errors, output reuse and try_update. Single process, single thread.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"
#include "views_model.hpp"

using namespace shmreplay;
using test::chi_square;
using test::chi_square_bound;
using test::error_of;
using test::SegmentGuard;
using test::unique_name;

namespace {

// A self-describing step: id = {env, step}; x and flag are derived from (env, step); flag is never 0.
const Schema kSchema = Schema::parse("id:u64[2] x:f32[3] flag:u8");
constexpr std::array<double, 4> kPowers = {0.0, 0.5, 1.0, 2.0};

using test::code;
using test::contains;

struct Step {
  uint64_t id[2];
  float x[3];
  uint8_t flag;
};

inline Step make_step(uint64_t env, uint64_t step) {
  Step s{};
  s.id[0] = env;
  s.id[1] = step;
  for (std::size_t k = 0; k < 3; ++k) {
    s.x[k] = static_cast<float>(env * 1000 + step) + 0.25f * static_cast<float>(k + 1);
  }
  s.flag = static_cast<uint8_t>(1 + (env * 31 + step * 7) % 255);
  return s;
}

inline std::array<FieldBytes, 3> fields_of(const Step& s) {
  return {FieldBytes{s.id, sizeof s.id}, FieldBytes{s.x, sizeof s.x}, value_bytes(s.flag)};
}

// Pushes make_step(env, step) to env `env` alone (for tests that keep no reference model).
inline void push_step(Writer& w, uint64_t env, uint64_t step) {
  const Step st = make_step(env, step);
  const std::array<FieldBytes, 3> fields = fields_of(st);
  w.push(std::span<const uint64_t>(&env, 1), fields);
}

// The reference model: per env every pushed step, and the head at the last reset_online_queue().
using Model = test::ViewsModel<Step>;
using test::Window;

// A buffer with every env leased by one Writer, the learner, and the reference model that mirrors them.
struct Rig {
  Rig(const std::string& tag, uint64_t num_envs, uint64_t cap)
      : guard(unique_name(tag)),
        buf(Buffer::create(guard.name(), num_envs, cap, kSchema)),
        w(Writer::range(buf, 0, num_envs)),
        s(buf),
        m(num_envs, cap) {}
  SegmentGuard guard;
  Buffer buf;
  Writer w;
  Sampler s;
  Model m;
};

// Pushes the next step of each env in `envs` (in that order) to the buffer and the model. mode 0: a batched
// push with int32 ids, 1: with uint64 ids, 2: push_one per env.
inline void push_envs(Writer& w, Model& m, const std::vector<uint64_t>& envs, int mode) {
  const std::size_t n = envs.size();
  std::vector<uint64_t> ids(2 * n);
  std::vector<float> xs(3 * n);
  std::vector<uint8_t> flags(n);
  std::vector<Step> steps;
  for (std::size_t i = 0; i < n; ++i) {
    steps.push_back(make_step(envs[i], m.head(envs[i])));
    std::memcpy(&ids[2 * i], steps[i].id, sizeof steps[i].id);
    std::memcpy(&xs[3 * i], steps[i].x, sizeof steps[i].x);
    flags[i] = steps[i].flag;
  }
  const std::array<FieldBytes, 3> batch = {field_bytes(ids), field_bytes(xs), field_bytes(flags)};
  if (mode == 0) {
    std::vector<int32_t> ids32;
    for (const uint64_t e : envs) ids32.push_back(static_cast<int32_t>(e));
    w.push(std::span<const int32_t>(ids32), batch);
  } else if (mode == 1) {
    w.push(std::span<const uint64_t>(envs), batch);
  } else {
    for (std::size_t i = 0; i < n; ++i) w.push_one(envs[i], fields_of(steps[i]));
  }
  for (std::size_t i = 0; i < n; ++i) m.steps[envs[i]].push_back(steps[i]);
}

inline void push_env(Writer& w, Model& m, uint64_t env, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) push_envs(w, m, {env}, 2);
}

inline bool step_equals(const SampleBatch& b, std::size_t row, std::size_t t, const Step& s) {
  return std::memcmp(b.step(0, row, t), s.id, sizeof s.id) == 0 &&
         std::memcmp(b.step(1, row, t), s.x, sizeof s.x) == 0 &&
         std::to_integer<uint8_t>(*b.step(2, row, t)) == s.flag;
}

inline bool step_is_zero(const SampleBatch& b, std::size_t row, std::size_t t) {
  const std::array<std::size_t, 3> bytes = {16, 12, 1};
  for (std::size_t f = 0; f < 3; ++f) {
    const std::byte* p = b.step(f, row, t);
    if (std::any_of(p, p + bytes[f], [](std::byte c) { return c != std::byte{0}; })) return false;
  }
  return true;
}

// Checks rows [first, first + count) of `b` against `view` of the model; returns the first problem, or "".
inline std::string check_rows(const SampleBatch& b, const Model& m, View view, std::size_t first, std::size_t count,
                              std::size_t length) {
  if (b.sequence_length() != length) return fmt::format("sequence_length {} != {}", b.sequence_length(), length);
  for (std::size_t row = first; row < first + count; ++row) {
    const uint64_t e = b.env_ids()[row];
    const uint64_t p = b.start_steps()[row];
    if (e >= m.num_envs()) return fmt::format("row {}: env {} out of range", row, e);
    const Window w = m.window(view, e);
    if (p < w.lo || p >= w.hi) {
      return fmt::format("row {}: start {} of env {} outside the {} window [{}, {})", row, p, e, to_string(view),
                         w.lo, w.hi);
    }
    const uint64_t r = std::min<uint64_t>(length, w.hi - p);
    for (std::size_t t = 0; t < length; ++t) {
      const bool in = t < r;
      if (b.valid(row, t) != in) return fmt::format("row {} (env {}, start {}): mask[{}] wrong", row, e, p, t);
      if (in && !step_equals(b, row, t, m.steps[e][p + t])) {
        return fmt::format("row {}: env {} step {} has the wrong bytes", row, e, p + t);
      }
      if (!in && !step_is_zero(b, row, t)) return fmt::format("row {}: masked-out position {} not zero", row, t);
    }
  }
  return {};
}

inline std::string check_peek(const SampleBatch& b, const Model& m, const std::vector<uint64_t>& envs) {
  if (b.rows() != envs.size() || b.sequence_length() != 1) return "peek batch has the wrong shape";
  for (std::size_t row = 0; row < envs.size(); ++row) {
    const uint64_t e = envs[row];
    const uint64_t h = m.head(e);
    if (b.env_ids()[row] != e) return fmt::format("peek row {}: env {} != {}", row, b.env_ids()[row], e);
    if (b.start_steps()[row] != (h == 0 ? 0 : h - 1)) return fmt::format("peek row {}: wrong start", row);
    if (b.valid(row, 0) != (h > 0)) return fmt::format("peek row {}: wrong mask", row);
    if (h > 0 ? !step_equals(b, row, 0, m.steps[e][h - 1]) : !step_is_zero(b, row, 0)) {
      return fmt::format("peek row {} (env {}): wrong bytes", row, e);
    }
  }
  return {};
}

inline bool same_batch(const SampleBatch& a, const SampleBatch& b) {
  if (a.rows() != b.rows() || a.sequence_length() != b.sequence_length() || a.num_fields() != b.num_fields()) {
    return false;
  }
  for (std::size_t f = 0; f < a.num_fields(); ++f) {
    if (!std::ranges::equal(a.field(f), b.field(f))) return false;
  }
  return std::ranges::equal(a.mask(), b.mask()) && std::ranges::equal(a.env_ids(), b.env_ids()) &&
         std::ranges::equal(a.start_steps(), b.start_steps());
}

inline void check_sizes(const Sampler& s, const Model& m) {
  for (uint64_t e = 0; e < m.num_envs(); ++e) {
    const EnvSizes z = s.sizes(e);
    CHECK(z.head == m.head(e));
    CHECK(z.replay == m.window(View::replay, e).hi - m.window(View::replay, e).lo);
    CHECK(z.online == m.window(View::online, e).hi - m.window(View::online, e).lo);
  }
  CHECK(s.size(View::replay) == m.size(View::replay));
  CHECK(s.size(View::online) == m.size(View::online));
}

// Start positions of `view` in a fixed order (env, then step), each with weight min(hi - p, L)^power.
struct Cells {
  std::vector<uint64_t> offset;  // per env: index of its first cell
  std::vector<double> prob;
};

inline Cells cells_of(const Model& m, View view, std::size_t length, double power) {
  Cells c;
  double total = 0.0;
  for (uint64_t e = 0; e < m.num_envs(); ++e) {
    c.offset.push_back(c.prob.size());
    const Window w = m.window(view, e);
    for (uint64_t p = w.lo; p < w.hi; ++p) {
      c.prob.push_back(std::pow(static_cast<double>(std::min<uint64_t>(w.hi - p, length)), power));
      total += c.prob.back();
    }
  }
  for (double& q : c.prob) q /= total;
  return c;
}

}  // namespace
