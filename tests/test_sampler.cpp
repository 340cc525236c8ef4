// Sampler: every row checked against a reference model of the views, determinism, the start-position
// distribution (chi-square), argument errors, output reuse and try_update. Single process, single thread.
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

constexpr int code(Errc e) { return static_cast<int>(e); }
bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

struct Step {
  uint64_t id[2];
  float x[3];
  uint8_t flag;
};

Step make_step(uint64_t env, uint64_t step) {
  Step s{};
  s.id[0] = env;
  s.id[1] = step;
  for (std::size_t k = 0; k < 3; ++k) {
    s.x[k] = static_cast<float>(env * 1000 + step) + 0.25f * static_cast<float>(k + 1);
  }
  s.flag = static_cast<uint8_t>(1 + (env * 31 + step * 7) % 255);
  return s;
}

std::array<FieldBytes, 3> fields_of(const Step& s) {
  return {FieldBytes{s.id, sizeof s.id}, FieldBytes{s.x, sizeof s.x}, value_bytes(s.flag)};
}

struct Window {
  uint64_t lo;
  uint64_t hi;
};

// The reference model: per env every pushed step, and the head at the last reset_online_queue().
struct Model {
  uint64_t capacity;
  std::vector<std::vector<Step>> steps;
  std::vector<uint64_t> online_start;

  Model(uint64_t num_envs, uint64_t cap) : capacity(cap), steps(num_envs), online_start(num_envs, 0) {}
  uint64_t num_envs() const { return steps.size(); }
  uint64_t head(uint64_t e) const { return steps[e].size(); }
  Window window(View view, uint64_t e) const {
    const uint64_t h = head(e);
    uint64_t lo = h > capacity ? h - capacity : 0;
    if (view == View::online) lo = std::max(lo, online_start[e]);
    return {std::min(lo, h), h};
  }
  uint64_t size(View view) const {
    uint64_t total = 0;
    for (uint64_t e = 0; e < num_envs(); ++e) total += window(view, e).hi - window(view, e).lo;
    return total;
  }
  void reset_online() {
    for (uint64_t e = 0; e < num_envs(); ++e) online_start[e] = head(e);
  }
};

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
void push_envs(Writer& w, Model& m, const std::vector<uint64_t>& envs, int mode) {
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

void push_env(Writer& w, Model& m, uint64_t env, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) push_envs(w, m, {env}, 2);
}

bool step_equals(const SampleBatch& b, std::size_t row, std::size_t t, const Step& s) {
  return std::memcmp(b.step(0, row, t), s.id, sizeof s.id) == 0 &&
         std::memcmp(b.step(1, row, t), s.x, sizeof s.x) == 0 &&
         std::to_integer<uint8_t>(*b.step(2, row, t)) == s.flag;
}

bool step_is_zero(const SampleBatch& b, std::size_t row, std::size_t t) {
  const std::array<std::size_t, 3> bytes = {16, 12, 1};
  for (std::size_t f = 0; f < 3; ++f) {
    const std::byte* p = b.step(f, row, t);
    if (std::any_of(p, p + bytes[f], [](std::byte c) { return c != std::byte{0}; })) return false;
  }
  return true;
}

// Checks rows [first, first + count) of `b` against `view` of the model; returns the first problem, or "".
std::string check_rows(const SampleBatch& b, const Model& m, View view, std::size_t first, std::size_t count,
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

std::string check_peek(const SampleBatch& b, const Model& m, const std::vector<uint64_t>& envs) {
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

bool same_batch(const SampleBatch& a, const SampleBatch& b) {
  if (a.rows() != b.rows() || a.sequence_length() != b.sequence_length() || a.num_fields() != b.num_fields()) {
    return false;
  }
  for (std::size_t f = 0; f < a.num_fields(); ++f) {
    if (!std::ranges::equal(a.field(f), b.field(f))) return false;
  }
  return std::ranges::equal(a.mask(), b.mask()) && std::ranges::equal(a.env_ids(), b.env_ids()) &&
         std::ranges::equal(a.start_steps(), b.start_steps());
}

void check_sizes(const Sampler& s, const Model& m) {
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

Cells cells_of(const Model& m, View view, std::size_t length, double power) {
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

TEST_CASE("every sampled row is one the reference model allows, across wrap-around and online resets") {
  std::mt19937_64 gen(20240601);  // the test's own choices
  Rng rng(99);
  for (const uint64_t num_envs : {1u, 2u, 5u}) {
    for (const uint64_t cap : {1u, 3u, 5u, 8u}) {
      CAPTURE(num_envs);
      CAPTURE(cap);
      Rig rig("model", num_envs, cap);
      Writer& w = rig.w;
      Sampler& s = rig.s;
      Model& m = rig.m;
      SampleBatch out;
      std::vector<uint64_t> all(num_envs);
      for (uint64_t e = 0; e < num_envs; ++e) all[e] = e;

      for (int op = 0; op < 500; ++op) {
        CAPTURE(op);
        const uint64_t kind = gen() % 12;
        const std::size_t length = 1 + gen() % cap;
        const double power = kPowers[gen() % kPowers.size()];
        if (kind < 5) {  // push to a random subset, in random order
          std::shuffle(all.begin(), all.end(), gen);
          const auto count = static_cast<std::ptrdiff_t>(1 + gen() % num_envs);
          const std::vector<uint64_t> envs(all.begin(), all.begin() + count);
          push_envs(w, m, envs, static_cast<int>(gen() % 3));
        } else if (kind == 5) {
          s.reset_online_queue();
          m.reset_online();
        } else if (kind < 9) {  // one view
          const View view = gen() % 2 == 0 ? View::replay : View::online;
          const std::size_t rows = 1 + gen() % 16;
          if (m.size(view) == 0) {
            CHECK(error_of([&] { s.sample(view, rows, length, power, rng, out); }) == code(Errc::empty_view));
            CHECK(error_of([&] { s.sample_transitions(view, rows, rng, out); }) == code(Errc::empty_view));
          } else {
            REQUIRE(error_of([&] { s.sample(view, rows, length, power, rng, out); }) == 0);
            REQUIRE(out.rows() == rows);
            const std::string problem = check_rows(out, m, view, 0, rows, length);
            REQUIRE_MESSAGE(problem.empty(), problem);
            s.sample_transitions(view, rows, rng, out);
            const std::string problem1 = check_rows(out, m, view, 0, rows, 1);
            REQUIRE_MESSAGE(problem1.empty(), problem1);
          }
        } else if (kind < 11) {  // mixed
          const std::size_t rb = gen() % 5;
          const std::size_t oq = rb == 0 ? 1 + gen() % 4 : gen() % 5;
          const bool empty = (rb > 0 && m.size(View::replay) == 0) || (oq > 0 && m.size(View::online) == 0);
          if (empty) {
            CHECK(error_of([&] { s.sample_mixed(rb, oq, length, power, rng, out); }) == code(Errc::empty_view));
          } else {
            REQUIRE(error_of([&] { s.sample_mixed(rb, oq, length, power, rng, out); }) == 0);
            REQUIRE(out.rows() == rb + oq);
            const std::string problem = check_rows(out, m, View::replay, 0, rb, length) +
                                        check_rows(out, m, View::online, rb, oq, length);
            REQUIRE_MESSAGE(problem.empty(), problem);
          }
        } else {  // peek at a random list of envs (repeats allowed)
          std::vector<uint64_t> envs(1 + gen() % (2 * num_envs));
          for (uint64_t& e : envs) e = gen() % num_envs;
          s.peek(envs, out);
          const std::string problem = check_peek(out, m, envs);
          REQUIRE_MESSAGE(problem.empty(), problem);
        }
        check_sizes(s, m);
      }
      CHECK(s.retries() == 0);
    }
  }
}

TEST_CASE("the same buffer state and seed give identical batches; different seeds give different ones") {
  auto fill = [](Buffer& buf, Sampler& s, Model& m) {
    std::mt19937_64 gen(5);
    Writer w = Writer::range(buf, 0, buf.num_envs());
    for (int i = 0; i < 80; ++i) {
      std::vector<uint64_t> envs = {0, 1, 2, 3};
      std::shuffle(envs.begin(), envs.end(), gen);
      envs.resize(1 + gen() % 4);
      push_envs(w, m, envs, i % 3);
      if (i == 60) {
        s.reset_online_queue();
        m.reset_online();
      }
    }
  };
  const std::string name_a = unique_name("det-a");
  const std::string name_b = unique_name("det-b");
  SegmentGuard guard_a(name_a);
  SegmentGuard guard_b(name_b);
  Buffer a = Buffer::create(name_a, 4, 16, kSchema);
  Buffer b = Buffer::create(name_b, 4, 16, kSchema);
  Sampler sa(a);
  Sampler sb(b);
  Model ma(4, 16);
  Model mb(4, 16);
  fill(a, sa, ma);
  fill(b, sb, mb);
  REQUIRE(ma.size(View::online) > 0);

  SampleBatch x;
  SampleBatch y;
  for (const uint64_t seed : {1u, 2u, 12345u}) {
    for (const double power : kPowers) {
      for (const std::size_t length : {1u, 4u, 16u}) {
        CAPTURE(seed);
        CAPTURE(power);
        CAPTURE(length);
        Rng ra(seed);
        Rng rb(seed);
        sa.sample(View::replay, 32, length, power, ra, x);
        sb.sample(View::replay, 32, length, power, rb, y);
        CHECK(same_batch(x, y));
        sa.sample(View::online, 32, length, power, ra, x);
        sb.sample(View::online, 32, length, power, rb, y);
        CHECK(same_batch(x, y));
        sa.sample_mixed(24, 8, length, power, ra, x);
        sb.sample_mixed(24, 8, length, power, rb, y);
        CHECK(same_batch(x, y));
        CHECK(check_rows(x, ma, View::replay, 0, 24, length) + check_rows(x, ma, View::online, 24, 8, length) == "");
      }
    }
  }
  // sample_transitions is sample(view, n, 1, power 0).
  Rng ra(77);
  Rng rb(77);
  sa.sample_transitions(View::replay, 40, ra, x);
  sb.sample(View::replay, 40, 1, 0.0, rb, y);
  CHECK(same_batch(x, y));
  // Different seeds: different rows.
  Rng r1(1);
  Rng r2(2);
  sa.sample(View::replay, 64, 3, 1.0, r1, x);
  sb.sample(View::replay, 64, 3, 1.0, r2, y);
  CHECK_FALSE(same_batch(x, y));
  CHECK_FALSE(std::ranges::equal(x.start_steps(), y.start_steps()));
}

TEST_CASE("start positions follow the weights min(remaining, L)^power (chi-square), and the test has power") {
  Rig rig("chi", 3, 12);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  push_env(w, m, 0, 5);   // env 0: 7 steps, never wrapped
  push_env(w, m, 1, 25);  // env 1: 30 steps, wrapped twice
  push_env(w, m, 2, 14);  // env 2: 20 steps, wrapped
  s.reset_online_queue();
  m.reset_online();
  push_env(w, m, 0, 2);  // env 0 gets no online step: replay [0, 7), online [5, 7)
  push_env(w, m, 1, 5);  // replay [18, 30), online [25, 30)
  push_env(w, m, 2, 6);  // replay [8, 20), online [14, 20)
  check_sizes(s, m);

  constexpr std::size_t kLength = 5;
  constexpr std::size_t kRows = 1000;
  constexpr std::size_t kCalls = 200;
  const double n = static_cast<double>(kRows * kCalls);
  Rng rng(2024);
  SampleBatch out;
  for (const View view : {View::replay, View::online}) {
    CAPTURE(to_string(view));
    std::vector<std::vector<uint64_t>> counts;
    std::vector<std::vector<double>> probs;
    for (const double power : {0.0, 1.0, 2.0}) {
      const Cells cells = cells_of(m, view, kLength, power);
      std::vector<uint64_t> count(cells.prob.size(), 0);
      uint64_t outside = 0;
      for (std::size_t call = 0; call < kCalls; ++call) {
        s.sample(view, kRows, kLength, power, rng, out);
        for (std::size_t row = 0; row < kRows; ++row) {
          const uint64_t e = out.env_ids()[row];
          const uint64_t p = out.start_steps()[row];
          const Window win = m.window(view, e);
          if (p >= win.lo && p < win.hi) {
            ++count[cells.offset[e] + (p - win.lo)];
          } else {
            ++outside;
          }
        }
      }
      REQUIRE(outside == 0);
      counts.push_back(count);
      probs.push_back(cells.prob);
    }
    const double df = static_cast<double>(probs[0].size() - 1);
    const double bound = chi_square_bound(df);
    CAPTURE(df);
    CAPTURE(bound);
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(chi_square(counts[i], probs[i], n) < bound);
    }
    // The same bound rejects counts drawn with another power.
    CHECK(chi_square(counts[0], probs[1], n) > bound);
    CHECK(chi_square(counts[2], probs[1], n) > bound);
  }
}

TEST_CASE("a huge finite power favours the longest starts instead of collapsing to one row or failing") {
  // L^power overflows a double here (8^400 = 2^1200). The limit of the weights is "only starts with the longest
  // remaining length"; rejecting such a power with invalid_argument is acceptable too. Neither a single repeated
  // row nor Errc::contended (no writer runs) is.
  Rig rig("bigpow", 3, 12);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  Rng rng(4);
  SampleBatch out;
  auto check_power = [&](View view, std::size_t expected_envs) {
    std::string msg;
    const int rc = error_of([&] { s.sample(view, 300, 8, 400.0, rng, out); }, &msg);
    CAPTURE(msg);
    if (rc == code(Errc::invalid_argument)) {
      CHECK(contains(msg, "400"));
      return;
    }
    REQUIRE(rc == 0);
    CHECK(check_rows(out, m, view, 0, 300, 8) == "");
    std::vector<uint64_t> per_env(3, 0);
    uint64_t short_rows = 0;
    for (std::size_t row = 0; row < 300; ++row) {
      const uint64_t e = out.env_ids()[row];
      ++per_env[e];
      if (m.window(view, e).hi - out.start_steps()[row] < 8) ++short_rows;
    }
    CHECK(short_rows == 0);
    CHECK(static_cast<std::size_t>(std::ranges::count_if(per_env, [](uint64_t c) { return c > 0; })) ==
          expected_envs);
  };
  for (uint64_t e = 0; e < 3; ++e) push_env(w, m, e, 10);
  check_power(View::replay, 3);  // starts 0..2 of each env
  s.reset_online_queue();
  m.reset_online();
  push_env(w, m, 0, 9);
  push_env(w, m, 1, 9);
  check_power(View::online, 2);  // env 2's online view is empty (shorter than L)
  CHECK(s.retries() == 0);
}

TEST_CASE("bad arguments, empty views and too-small borrowed arrays throw errors that give the numbers") {
  Rig rig("err", 3, 8);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  Rng rng(3);
  SampleBatch out;
  std::string msg;

  // Empty views: nothing pushed yet, then nothing since the last reset.
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, 1.0, rng, out); }, &msg) == code(Errc::empty_view));
  CHECK(contains(msg, "replay"));
  push_envs(w, m, {1, 0}, 1);
  push_env(w, m, 2, 10);
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, 1.0, rng, out); }) == 0);
  s.reset_online_queue();
  m.reset_online();
  CHECK(error_of([&] { s.sample(View::online, 4, 2, 1.0, rng, out); }, &msg) == code(Errc::empty_view));
  CHECK(contains(msg, "online"));
  CHECK(error_of([&] { s.sample_mixed(4, 1, 2, 1.0, rng, out); }) == code(Errc::empty_view));
  CHECK(error_of([&] { s.sample_mixed(4, 0, 2, 1.0, rng, out); }) == 0);

  // Argument checks.
  CHECK(error_of([&] { s.sample(View::replay, 0, 2, 1.0, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "batch size is 0"));
  CHECK(error_of([&] { s.sample_mixed(0, 0, 2, 1.0, rng, out); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { s.sample(View::replay, 4, 0, 1.0, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK((contains(msg, "sequence_length is 0") && contains(msg, "8")));
  CHECK(error_of([&] { s.sample(View::replay, 4, 9, 1.0, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK((contains(msg, "9") && contains(msg, "capacity, 8")));
  CHECK(error_of([&] { s.sample(View::replay, 4, 8, 1.0, rng, out); }) == 0);
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, -0.5, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "-0.5"));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(error_of([&] { s.sample(View::replay, 4, 2, nan, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "nan"));
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(error_of([&] { s.sample_mixed(2, 0, 2, inf, rng, out); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { s.sample_transitions(View::replay, 0, rng, out); }) == code(Errc::invalid_argument));
  // Sizes past the address space are refused before anything is allocated, and two halves of a mixed batch that
  // wrap around when added are refused, not sampled as the small sum.
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  CHECK(error_of([&] { s.sample(View::replay, huge / 4, 4, 1.0, rng, out); }, &msg) ==
        code(Errc::invalid_argument));
  CHECK((contains(msg, "address space") && contains(msg, fmt::format("{}", huge / 4))));
  CHECK(error_of([&] { s.sample_mixed(huge, 2, 1, 1.0, rng, out); }, &msg) == code(Errc::invalid_argument));
  CHECK((contains(msg, "replay_batch") && contains(msg, "online_batch 2")));
  CHECK(error_of([&] { s.sample_mixed(huge / 2 + 1, huge / 2 + 1, 1, 1.0, rng, out); }) ==
        code(Errc::invalid_argument));
  CHECK(error_of([&] { Sampler::check_batch_shape(s.buffer(), "sample", 4, 8); }) == 0);
  CHECK(error_of([&] { Sampler::check_batch_shape(s.buffer(), "sample", 4, 9); }) == code(Errc::invalid_argument));

  // Peek and sizes.
  const std::vector<uint64_t> bad = {0, 7};
  CHECK(error_of([&] { s.peek(bad, out); }, &msg) == code(Errc::env_out_of_range));
  CHECK((contains(msg, "env 7") && contains(msg, "0 to 2")));
  CHECK(error_of([&] { s.peek({}, out); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)s.sizes(3); }, &msg) == code(Errc::env_out_of_range));
  CHECK(contains(msg, "env 3"));

  // Borrowed arrays: 4 rows x 3 steps need id 192 bytes, x 144, flag 12, mask 12, ids and starts 4 each.
  std::vector<uint64_t> ids(24);
  std::vector<float> xs(36);
  std::vector<uint8_t> flags(12);
  std::vector<uint8_t> mask(12);
  std::vector<uint64_t> envs(4);
  std::vector<uint64_t> starts(4);
  auto borrowed = [&](std::size_t x_bytes, std::size_t mask_len, std::size_t env_len) {
    return SampleBatch::borrow({{ids.data(), ids.size() * 8}, {xs.data(), x_bytes}, {flags.data(), flags.size()}},
                               std::span<uint8_t>(mask).first(mask_len), std::span<uint64_t>(envs).first(env_len),
                               std::span<uint64_t>(starts));
  };
  SampleBatch small_x = borrowed(143, 12, 4);
  CHECK(error_of([&] { s.sample(View::replay, 4, 3, 1.0, rng, small_x); }, &msg) == code(Errc::size_mismatch));
  CHECK((contains(msg, "'x'") && contains(msg, "143") && contains(msg, "144")));
  SampleBatch small_mask = borrowed(144, 11, 4);
  CHECK(error_of([&] { s.sample(View::replay, 4, 3, 1.0, rng, small_mask); }, &msg) == code(Errc::size_mismatch));
  CHECK((contains(msg, "mask") && contains(msg, "11") && contains(msg, "12")));
  SampleBatch small_ids = borrowed(144, 12, 3);
  CHECK(error_of([&] { s.sample_mixed(2, 0, 3, 1.0, rng, small_ids); }) == 0);  // 2 rows fit
  CHECK(error_of([&] { s.sample_mixed(4, 0, 3, 1.0, rng, small_ids); }, &msg) == code(Errc::size_mismatch));
  CHECK(contains(msg, "env ids"));
  SampleBatch two_fields = SampleBatch::borrow({{ids.data(), 192}, {xs.data(), 144}}, mask, envs, starts);
  CHECK(error_of([&] { s.sample(View::replay, 4, 3, 1.0, rng, two_fields); }, &msg) == code(Errc::size_mismatch));
  CHECK((contains(msg, "2 field arrays") && contains(msg, "3")));

  // A borrowed batch filled correctly holds what an owned batch holds for the same seed, in the caller's arrays.
  SampleBatch good = borrowed(144, 12, 4);
  for (const uint64_t seed : {5u, 6u}) {
    Rng r1(seed);
    Rng r2(seed);
    s.sample(View::replay, 4, 3, 1.0, r1, out);
    s.sample(View::replay, 4, 3, 1.0, r2, good);
    CHECK(same_batch(out, good));
    CHECK(check_rows(good, m, View::replay, 0, 4, 3) == "");
    CHECK(good.field(0).data() == reinterpret_cast<const std::byte*>(ids.data()));
    CHECK(std::memcmp(out.field(1).data(), xs.data(), 144) == 0);
    CHECK(std::ranges::equal(out.mask(), mask));
    CHECK(std::ranges::equal(out.env_ids(), envs));
    CHECK(std::ranges::equal(out.start_steps(), starts));
  }
}

TEST_CASE("an owned batch keeps its storage across calls of the same or a smaller shape") {
  Rig rig("reuse", 2, 8);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  push_env(w, m, 0, 11);
  push_env(w, m, 1, 3);
  Rng rng(8);
  SampleBatch out;
  s.sample(View::replay, 16, 6, 1.0, rng, out);
  const std::array<const std::byte*, 3> fields = {out.field(0).data(), out.field(1).data(), out.field(2).data()};
  const uint8_t* mask = out.mask().data();
  const uint64_t* envs = out.env_ids().data();
  const uint64_t* starts = out.start_steps().data();
  auto unchanged = [&] {
    return out.field(0).data() == fields[0] && out.field(1).data() == fields[1] && out.field(2).data() == fields[2] &&
           out.mask().data() == mask && out.env_ids().data() == envs && out.start_steps().data() == starts;
  };
  for (int i = 0; i < 3; ++i) {
    s.sample(View::replay, 16, 6, 1.0, rng, out);
    CHECK(unchanged());
    s.sample(View::online, 7, 2, 0.0, rng, out);
    CHECK(unchanged());
    CHECK(check_rows(out, m, View::online, 0, 7, 2) == "");
    s.sample_mixed(10, 6, 6, 2.0, rng, out);
    CHECK(unchanged());
    s.sample_transitions(View::replay, 16, rng, out);
    CHECK(unchanged());
    const std::vector<uint64_t> peek_envs = {1, 0, 1};
    s.peek(peek_envs, out);
    CHECK(unchanged());
    CHECK(check_peek(out, m, peek_envs) == "");
  }
}

TEST_CASE("try_update rewrites a stored step, refuses an overwritten one and rejects an unpublished one") {
  Rig rig("update", 2, 4);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  push_env(w, m, 0, 6);  // env 0 stores steps 2..5
  push_env(w, m, 1, 1);
  SampleBatch out;
  Rng rng(6);
  const std::vector<uint64_t> env0 = {0};

  // Rewrite x of the newest step only; id and flag stay.
  const float new_x[3] = {-1.0f, -2.0f, -3.0f};
  std::array<FieldBytes, 3> only_x = {FieldBytes{}, FieldBytes{new_x, sizeof new_x}, FieldBytes{}};
  CHECK(s.try_update(0, 5, only_x));
  std::memcpy(m.steps[0][5].x, new_x, sizeof new_x);
  s.peek(env0, out);
  CHECK(check_peek(out, m, env0) == "");
  CHECK(std::memcmp(out.step(1, 0, 0), new_x, sizeof new_x) == 0);
  CHECK(std::memcmp(out.step(0, 0, 0), make_step(0, 5).id, 16) == 0);

  // Rewrite flag of an older stored step; samples covering it see the new byte, every other byte as pushed.
  const uint8_t new_flag = 0;
  std::array<FieldBytes, 3> only_flag = {FieldBytes{}, FieldBytes{}, value_bytes(new_flag)};
  CHECK(s.try_update(0, 3, only_flag));
  m.steps[0][3].flag = new_flag;
  s.sample(View::replay, 200, 4, 0.0, rng, out);
  CHECK(check_rows(out, m, View::replay, 0, 200, 4) == "");
  bool covered = false;
  for (std::size_t row = 0; row < 200; ++row) {
    const uint64_t p = out.start_steps()[row];
    covered = covered || (out.env_ids()[row] == 0 && p <= 3 && 3 < p + 4);
  }
  CHECK(covered);

  // A full rewrite of env 1's only step.
  const Step other = make_step(9, 99);
  CHECK(s.try_update(1, 0, fields_of(other)));
  m.steps[1][0] = other;
  const std::vector<uint64_t> env1 = {1};
  s.peek(env1, out);
  CHECK(check_peek(out, m, env1) == "");

  // Overwritten steps: false, and nothing changes (step 1 shares its slot with step 5, step 0 with step 4).
  const Step junk = make_step(7, 7);
  CHECK_FALSE(s.try_update(0, 1, fields_of(junk)));
  CHECK_FALSE(s.try_update(0, 0, fields_of(junk)));
  s.sample(View::replay, 100, 4, 1.0, rng, out);
  CHECK(check_rows(out, m, View::replay, 0, 100, 4) == "");
  s.peek(env0, out);
  CHECK(check_peek(out, m, env0) == "");
  // After another push step 2 is overwritten too.
  push_env(w, m, 0, 1);
  CHECK_FALSE(s.try_update(0, 2, fields_of(junk)));
  CHECK(s.try_update(0, 3, only_x));
  std::memcpy(m.steps[0][3].x, new_x, sizeof new_x);
  s.sample(View::replay, 100, 4, 1.0, rng, out);
  CHECK(check_rows(out, m, View::replay, 0, 100, 4) == "");

  // Never published, out of range, wrong sizes.
  std::string msg;
  CHECK(error_of([&] { (void)s.try_update(0, 7, fields_of(junk)); }, &msg) == code(Errc::invalid_argument));
  CHECK((contains(msg, "step 7") && contains(msg, "7 steps")));
  CHECK(error_of([&] { (void)s.try_update(1, 1, fields_of(junk)); }, &msg) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)s.try_update(2, 0, fields_of(junk)); }) == code(Errc::env_out_of_range));
  const std::array<FieldBytes, 3> short_x = {FieldBytes{}, FieldBytes{new_x, 8}, FieldBytes{}};
  CHECK(error_of([&] { (void)s.try_update(0, 5, short_x); }, &msg) == code(Errc::size_mismatch));
  CHECK((contains(msg, "'x'") && contains(msg, "8") && contains(msg, "12")));
  CHECK(error_of([&] { (void)s.try_update(0, 5, std::span<const FieldBytes>(only_x).first(2)); }) ==
        code(Errc::size_mismatch));
  s.sample(View::replay, 100, 4, 1.0, rng, out);
  CHECK(check_rows(out, m, View::replay, 0, 100, 4) == "");
}

TEST_CASE("a moved Sampler keeps the learner lease, and a moved-from one releases nothing") {
  SegmentGuard guard(unique_name("sampler-move"));
  Buffer buf = Buffer::create(guard.name(), 2, 8, kSchema);
  const auto lease = [&] { return buf.segment().global_control().learner_lease.load(); };
  std::optional<Sampler> later;
  {
    Sampler first(buf);
    const uint64_t held = lease();
    REQUIRE(held != 0);
    std::optional<Sampler> second;
    second.emplace(std::move(first));
    CHECK(lease() == held);  // moving hands the lease over
    CHECK(error_of([&] { Sampler third(buf); }) == code(Errc::lease_held));
    second.reset();  // its owner goes: the lease is free
    CHECK(lease() == 0);
    later.emplace(buf);  // a new learner, while `first` (moved from) still lives
    REQUIRE(lease() != 0);
  }
  CHECK(lease() != 0);  // destroying the moved-from `first` did not release the new learner's lease
  later.reset();
  CHECK(lease() == 0);
}

TEST_CASE("every sampled and peeked row goes through the batched gather, validated with at most 3 control-word "
          "loads per env and chunk") {
  // The fast path of issue 18: the rows of a call are drawn first, copied together and validated with one read of
  // each env's control words before and one after (Sampler::gather). A change that copies row by row again, or
  // validates each row with its own loads, fails here.
  const uint64_t num_envs = 4;
  const uint64_t cap = 64;
  SegmentGuard guard(unique_name("gather"));
  Buffer buf = Buffer::create(guard.name(), num_envs, cap, kSchema, {.priority_exponent = 0.6});
  Writer w = Writer::range(buf, 0, num_envs);
  Sampler s(buf);
  Model m(num_envs, cap);
  for (uint64_t k = 0; k < cap + 37; ++k) push_envs(w, m, {0, 1, 2, 3}, 0);  // every ring wrapped
  Rng rng(7);
  SampleBatch out;
  struct Case {
    std::size_t rows;
    std::size_t length;
    bool prioritized;
  };
  for (const Case c : {Case{256, 1, false}, Case{100, 1, false}, Case{256, 8, false}, Case{64, 64, false},
                       Case{256, 1, true}, Case{40, 5, true}}) {
    CAPTURE(c.rows);
    CAPTURE(c.length);
    CAPTURE(c.prioritized);
    const SamplerStats before = s.stats();
    s.sample(View::replay, c.rows, c.length, c.prioritized ? 0.0 : 1.0, rng, out, {.prioritized = c.prioritized});
    const SamplerStats& after = s.stats();
    const std::string problem = check_rows(out, m, View::replay, 0, c.rows, c.length);
    REQUIRE_MESSAGE(problem.empty(), problem);
    CHECK(after.rows_gathered - before.rows_gathered == c.rows);
    const uint64_t chunks = after.gather_chunks - before.gather_chunks;
    CHECK(chunks >= 1);
    CHECK(chunks <= (c.rows * c.length * kSchema.step_bytes()) / (64 << 10) + c.rows / 256 + 1);
    CHECK(after.control_loads - before.control_loads <= 3 * num_envs * chunks);
    if (c.length == 1 && c.rows <= 256) CHECK(chunks == 1);  // a batch of transitions is one chunk
  }
  const std::vector<uint64_t> envs = {3, 0, 0, 2, 1, 3};
  const SamplerStats before = s.stats();
  s.peek(envs, out);
  const std::string problem = check_peek(out, m, envs);
  REQUIRE_MESSAGE(problem.empty(), problem);
  CHECK(s.stats().rows_gathered - before.rows_gathered == envs.size());
  CHECK(s.stats().gather_chunks - before.gather_chunks == 1);
  CHECK(s.stats().control_loads - before.control_loads <= 3 * num_envs);
  CHECK(s.retries() == 0);
}

TEST_CASE("counters corrupted to a view longer than the ring are sampled inside the ring, never outside it") {
  // A consistent segment has claimed >= head, so [claimed - cap, head) never holds more than cap steps, and a
  // start's slot is found without a division. A damaged (or fuzzed) segment can have claimed far below head: the
  // sampler's snapshot still bounds its view to the ring, so its rows are read from inside the env's ring (ASan,
  // and a fault without it, would catch a read outside). The fuzzer found this case.
  const uint64_t cap = 8;
  Rig r("corrupt-view", 2, cap);
  for (uint64_t k = 0; k < 3 * cap; ++k) push_envs(r.w, r.m, {0, 1}, 0);
  layout::EnvControl& c = r.buf.segment().env_control(0);
  c.head.store(1000);
  c.claimed.store(20);  // claimed - cap = 12: without the bound, the view would be [12, 1000) in a ring of 8
  Rng rng(3);
  SampleBatch out;
  for (const std::size_t length : {std::size_t{1}, std::size_t{3}, cap}) {
    for (int call = 0; call < 20; ++call) r.s.sample(View::replay, 64, length, 1.0, rng, out);
    CHECK(out.rows() == 64);
  }
}

TEST_CASE("total_weight of counters corrupted to a view longer than the ring weighs the view that sample draws from") {
  // sample bounds a view to the ring (the test above); total_weight must weigh that same view, or a learner of
  // several buffers (shmreplay.ray) gives a damaged one a share it then draws from a smaller view.
  const uint64_t cap = 8;
  Rig r("corrupt-total", 2, cap);
  for (uint64_t k = 0; k < 3 * cap; ++k) push_envs(r.w, r.m, {0, 1}, 0);
  const double healthy = r.s.total_weight(View::replay, 3, 1.0, {});
  CHECK(healthy == 2 * (6 * 3 + 2 + 1));  // per env: 6 starts with 3 steps left, then 2 and 1
  layout::EnvControl& c = r.buf.segment().env_control(0);
  c.head.store(1000);
  c.claimed.store(20);  // unbounded, env 0's view would be [12, 1000): 988 starts
  CHECK(r.s.total_weight(View::replay, 1, 0.0, {}) == 2 * cap);
  CHECK(r.s.total_weight(View::replay, 3, 1.0, {}) == healthy);
}

TEST_CASE("the gather copies fields of every size, whole, wrapped and short rows, byte for byte") {
  // Field sizes on both sides of each of the inline copy's cases (1, 2-3, 4-7, 8-16, 17-32, 33-64, 65-128, more).
  const Schema schema = Schema::parse("a:u8 b:u8[2] c:u8[3] d:u8[5] e:u8[8] f:u8[13] g:u8[17] h:u8[32] i:u8[33] "
                                      "j:u8[64] k:u8[65] l:u8[128] m:u8[129] n:u8[300]");
  const uint64_t num_envs = 3;
  const uint64_t cap = 16;
  SegmentGuard guard(unique_name("gather-sizes"));
  Buffer buf = Buffer::create(guard.name(), num_envs, cap, schema);
  Writer w = Writer::range(buf, 0, num_envs);
  Sampler s(buf);
  auto byte_of = [](uint64_t env, uint64_t step, std::size_t field, std::size_t i) {
    return static_cast<uint8_t>(1 + (env * 131 + step * 31 + field * 7 + i) % 251);
  };
  std::vector<uint64_t> heads = {cap + 5, 9, cap * 2};  // wrapped, partial, wrapped exactly twice
  for (uint64_t e = 0; e < num_envs; ++e) {
    for (uint64_t t = 0; t < heads[e]; ++t) {
      std::vector<std::vector<uint8_t>> data(schema.size());
      std::vector<FieldBytes> fields;
      for (std::size_t f = 0; f < schema.size(); ++f) {
        data[f].resize(schema[f].bytes());
        for (std::size_t i = 0; i < data[f].size(); ++i) data[f][i] = byte_of(e, t, f, i);
        fields.push_back({data[f].data(), data[f].size()});
      }
      w.push_one(e, fields);
    }
  }
  Rng rng(3);
  SampleBatch out;
  for (const std::size_t length : {std::size_t{1}, std::size_t{3}, std::size_t{cap}}) {
    CAPTURE(length);
    s.sample(View::replay, 200, length, 0.5, rng, out);
    for (std::size_t row = 0; row < out.rows(); ++row) {
      const uint64_t e = out.env_ids()[row];
      const uint64_t p = out.start_steps()[row];
      REQUIRE(p + cap >= heads[e]);
      REQUIRE(p < heads[e]);
      for (std::size_t t = 0; t < length; ++t) {
        const bool in = p + t < heads[e];
        REQUIRE(out.valid(row, t) == in);
        for (std::size_t f = 0; f < schema.size(); ++f) {
          const std::byte* got = out.step(f, row, t);
          for (std::size_t i = 0; i < schema[f].bytes(); ++i) {
            const uint8_t want = in ? byte_of(e, p + t, f, i) : 0;
            REQUIRE_MESSAGE(std::to_integer<uint8_t>(got[i]) == want,
                            fmt::format("row {} env {} start {} t {} field {} byte {}", row, e, p, t, f, i));
          }
        }
      }
    }
  }
}
