// Episodes (layout 1.2): episode fields at creation, boundaries recorded by every push path, sampling with
// episodes = cross | stop | within, period and min_steps (every row checked against a reference model; chi-square
// of the start distributions; the strictly-increasing property), n-step returns, completed-episode records, crash
// consistency with writers SIGKILLed and replaced, and a work counter showing that sampling work does not grow
// with the number of stored steps.
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

using namespace shmreplay;
using test::error_of;
using test::kill_and_reap;
using test::mask_prefix;
using test::spawn;
using test::SegmentGuard;
using test::unique_name;

namespace {

constexpr int code(Errc e) { return static_cast<int>(e); }
bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Every flag field a test may name, so that one schema serves both flavours of episode fields.
const Schema kSchema = Schema::parse("id:u64[2] x:f32 done:u8 term:bool trunc:i32 reward:f32");
constexpr std::size_t kId = 0, kX = 1, kDone = 2, kTerm = 3, kTrunc = 4, kReward = 5;

enum class Flavor { done, term_trunc };

CreateOptions options_for(Flavor flavor, uint64_t queue_capacity = 0) {
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
float reward_of(uint64_t env, uint64_t step) { return static_cast<float>((env * 7 + step) % 13) - 3.0f; }

Step make_step(uint64_t env, uint64_t step, bool done, bool term, bool trunc) {
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

bool ends(const Step& s, Flavor flavor) {
  return flavor == Flavor::done ? s.done != 0 : (s.term != 0 || s.trunc != 0);
}

EpisodeEnd end_of(const Step& s, Flavor flavor) {
  if (flavor == Flavor::done) return s.done != 0 ? EpisodeEnd::done : EpisodeEnd::none;
  if (s.term != 0) return EpisodeEnd::terminated;
  return s.trunc != 0 ? EpisodeEnd::truncated : EpisodeEnd::none;
}

std::array<FieldBytes, 6> fields_of(const Step& s) {
  return {FieldBytes{s.id, sizeof s.id}, value_bytes(s.x),     value_bytes(s.done),
          value_bytes(s.term),           value_bytes(s.trunc), value_bytes(s.reward)};
}

struct Window {
  uint64_t lo;
  uint64_t hi;
};

// The reference model: per env every pushed step with its flags; the views; the episode structure computed by
// scanning flags (what the library must never do).
struct Model {
  Flavor flavor;
  uint64_t capacity;
  std::vector<std::vector<Step>> steps;
  std::vector<uint64_t> online_start;

  Model(Flavor f, uint64_t num_envs, uint64_t cap) : flavor(f), capacity(cap), steps(num_envs), online_start(num_envs) {}
  uint64_t num_envs() const { return steps.size(); }
  uint64_t head(uint64_t e) const { return steps[e].size(); }
  Window window(View view, uint64_t e) const {
    const uint64_t h = head(e);
    uint64_t lo = h > capacity ? h - capacity : 0;
    if (view == View::online) lo = std::max(lo, online_start[e]);
    return {std::min(lo, h), h};
  }
  uint64_t size(View view) const {
    uint64_t n = 0;
    for (uint64_t e = 0; e < num_envs(); ++e) n += window(view, e).hi - window(view, e).lo;
    return n;
  }
  void reset_online() {
    for (uint64_t e = 0; e < num_envs(); ++e) online_start[e] = head(e);
  }
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
void push_steps(Writer& w, Model& m, const std::vector<uint64_t>& envs, const std::vector<std::array<bool, 3>>& flags,
                int mode) {
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

void push_one_step(Writer& w, Model& m, uint64_t env, bool done, bool term = false, bool trunc = false, int mode = 1) {
  push_steps(w, m, {env}, {{done, term, trunc}}, mode);
}

std::array<bool, 3> random_flags(std::mt19937_64& gen, Flavor flavor, uint64_t one_in) {
  if (flavor == Flavor::done) return {gen() % one_in == 0, false, false};
  return {false, gen() % (2 * one_in) == 0, gen() % (2 * one_in) == 0};
}

bool step_equals(const SampleBatch& b, std::size_t row, std::size_t t, const Step& s) {
  const auto f = fields_of(s);
  for (std::size_t k = 0; k < f.size(); ++k) {
    if (std::memcmp(b.step(k, row, t), f[k].data, f[k].bytes) != 0) return false;
  }
  return true;
}

bool step_is_zero(const SampleBatch& b, std::size_t row, std::size_t t) {
  const std::array<std::size_t, 6> bytes = {16, 4, 1, 1, 4, 4};
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    const std::byte* p = b.step(k, row, t);
    if (std::any_of(p, p + bytes[k], [](std::byte c) { return c != std::byte{0}; })) return false;
  }
  return true;
}

// Checks rows [first, first + count) of `b` against the model; returns the first problem, or "".
std::string check_rows(const SampleBatch& b, const Model& m, View view, std::size_t first, std::size_t count,
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

double chi_square(const std::vector<uint64_t>& counts, const std::vector<double>& prob, double n) {
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

Cells cells_of(const Model& m, View view, std::size_t L, double power, const SampleOptions& o) {
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

std::vector<uint64_t> count_starts(Sampler& s, const Model& m, View view, std::size_t L, double power,
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

}  // namespace

// ---------------------------------------------------------------------------------------------------------------

TEST_CASE("episode fields are validated at creation with what, where and expected versus actual") {
  const std::string name = unique_name("ep-create");
  SegmentGuard guard(name);
  std::string msg;
  auto create = [&](EpisodeFields f, uint64_t queue = 0) {
    return error_of([&] { Buffer::create(name, 2, 8, kSchema, {.episodes = f, .episode_queue_capacity = queue}); },
                    &msg);
  };
  CHECK(create({.done = "finished"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'finished'") && contains(msg, "names no field") && contains(msg, "id, x, done")));
  CHECK(create({.done = "x"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'x'") && contains(msg, "scalar bool or integer") && contains(msg, "f32")));
  CHECK(create({.terminated = "id"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'id'") && contains(msg, "[2]")));
  CHECK(create({.done = "done", .terminated = "term"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "done") && contains(msg, "terminated") && contains(msg, "either")));
  CHECK(create({.done = "done", .truncated = "trunc"}) == code(Errc::invalid_argument));
  CHECK(create({.terminated = "term", .truncated = "term"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'term'") && contains(msg, "its own field")));
  CHECK(create({.done = "done", .reward = "done"}) == code(Errc::invalid_argument));
  CHECK(create({.reward = "reward"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "reward") && contains(msg, "without an episode-end field")));
  CHECK(create({.done = "done", .reward = "term"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'term'") && contains(msg, "scalar numeric")));
  CHECK(create({}, 16) == code(Errc::invalid_argument));
  CHECK(contains(msg, "no episode fields"));
  CHECK(create({.done = "done"}, (1ull << 24) + 1) == code(Errc::invalid_argument));
  CHECK(contains(msg, "episode_queue_capacity"));
  CHECK_FALSE(Buffer::exists(name));

  // Valid: done alone; terminated alone; truncated with an integer flag; any numeric reward.
  for (const EpisodeFields& f : {EpisodeFields{.done = "done"}, EpisodeFields{.terminated = "term"},
                                 EpisodeFields{.truncated = "trunc", .reward = "x"},
                                 EpisodeFields{.terminated = "term", .truncated = "trunc", .reward = "reward"}}) {
    CHECK(create(f) == 0);
    Buffer::remove(name);
  }
  const Buffer b = Buffer::create(name, 2, 8, kSchema, options_for(Flavor::term_trunc, 5));
  CHECK(b.has_episodes());
  CHECK(b.episode_queue_capacity() == 5);
  // Another process sees the same roles: they are identity data in the field table.
  const Buffer again = Buffer::open(name);
  CHECK(again.episode_fields() == b.episode_fields());
  CHECK(again.episode_fields().terminated == std::optional<std::size_t>(kTerm));
  CHECK(again.episode_fields().truncated == std::optional<std::size_t>(kTrunc));
  CHECK(again.episode_fields().reward == std::optional<std::size_t>(kReward));
  CHECK_FALSE(again.episode_fields().done);
  CHECK(again.episode_queue_capacity() == 5);
}

TEST_CASE("open refuses a field table whose episode roles are corrupt") {
  const std::string name = unique_name("ep-corrupt");
  SegmentGuard guard(name);
  auto table_of = [](Buffer& b) {
    auto& h = const_cast<layout::SegmentHeader&>(b.segment().header());
    return reinterpret_cast<layout::FieldDesc*>(reinterpret_cast<std::byte*>(&h) +
                                                h.sections[layout::kSectionFields].offset);
  };
  std::string msg;
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema, options_for(Flavor::done));
    table_of(b)[kX].role = 9;
  }
  CHECK(error_of([&] { Buffer::open(name); }, &msg) == code(Errc::corrupt));
  CHECK((contains(msg, "'x'") && contains(msg, "role code 9")));
  Buffer::remove(name);
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema, options_for(Flavor::done));
    table_of(b)[kTerm].role = layout::kRoleDone;  // two done fields
  }
  CHECK(error_of([&] { Buffer::open(name); }, &msg) == code(Errc::corrupt));
  Buffer::remove(name);
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema, options_for(Flavor::done));
    table_of(b)[kTerm].role = layout::kRoleTerminated;  // done together with terminated
  }
  CHECK(error_of([&] { Buffer::open(name); }, &msg) == code(Errc::corrupt));
  CHECK(contains(msg, "either"));
  Buffer::remove(name);
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema);
    table_of(b)[kDone].role = layout::kRoleDone;  // a flag, but no episode sections
  }
  CHECK(error_of([&] { Buffer::open(name); }, &msg) == code(Errc::corrupt));
  CHECK(contains(msg, "episode"));
}

TEST_CASE("every sampled row is one the reference model allows, for every episode option, across wrap-around and "
          "auto-reset steps") {
  std::mt19937_64 gen(20250101);
  Rng rng(17);
  SampleBatch out;
  const std::array<Episodes, 3> modes = {Episodes::cross, Episodes::stop, Episodes::within};
  for (const Flavor flavor : {Flavor::done, Flavor::term_trunc}) {
    for (const uint64_t num_envs : {1u, 3u}) {
      for (const uint64_t cap : {1u, 3u, 5u, 8u}) {
        CAPTURE(static_cast<int>(flavor));
        CAPTURE(num_envs);
        CAPTURE(cap);
        Rig rig("ep-model", flavor, num_envs, cap);
        std::vector<uint64_t> all(num_envs);
        for (uint64_t e = 0; e < num_envs; ++e) all[e] = e;
        const uint64_t one_in = 1 + gen() % 4;  // how often an episode ends
        for (int op = 0; op < 320; ++op) {
          CAPTURE(op);
          const uint64_t kind = gen() % 10;
          if (kind < 4) {
            std::shuffle(all.begin(), all.end(), gen);
            const std::vector<uint64_t> envs(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(1 + gen() % num_envs));
            std::vector<std::array<bool, 3>> flags;
            for (std::size_t i = 0; i < envs.size(); ++i) flags.push_back(random_flags(gen, flavor, one_in));
            push_steps(rig.w, rig.m, envs, flags, static_cast<int>(gen() % 3));
            continue;
          }
          if (kind == 4) {
            rig.s.reset_online_queue();
            rig.m.reset_online();
            continue;
          }
          const SampleOptions o{.episodes = modes[gen() % 3], .period = 1 + gen() % 4, .min_steps = 0};
          const std::size_t L = 1 + gen() % cap;
          const double power = static_cast<double>(gen() % 3);
          const View view = kind < 8 ? View::replay : View::online;
          const std::size_t rows = 1 + gen() % 12;
          CAPTURE(to_string(o.episodes));
          CAPTURE(o.period);
          CAPTURE(L);
          CAPTURE(power);
          CAPTURE(to_string(view));
          std::string msg;
          const int rc = error_of([&] { rig.s.sample(view, rows, L, power, rng, out, o); }, &msg);
          if (rig.m.total_weight(view, L, power, o) == 0.0) {
            CHECK_MESSAGE(rc == code(Errc::empty_view), msg);
            continue;
          }
          REQUIRE_MESSAGE(rc == 0, msg);
          const std::string problem = check_rows(out, rig.m, view, 0, rows, L, power, o);
          REQUIRE_MESSAGE(problem.empty(), problem);
          if (kind == 9 && rig.m.total_weight(View::replay, L, power, o) > 0.0) {  // mixed, both views
            const std::size_t rb = 1 + gen() % 4;
            REQUIRE(error_of([&] { rig.s.sample_mixed(rb, rows, L, power, rng, out, o); }) == 0);
            const std::string mixed = check_rows(out, rig.m, View::replay, 0, rb, L, power, o) +
                                      check_rows(out, rig.m, View::online, rb, rows, L, power, o);
            REQUIRE_MESSAGE(mixed.empty(), mixed);
          }
        }
        CHECK(rig.s.retries() == 0);
      }
    }
  }
}

TEST_CASE("the options' defaults sample exactly what the calls without options sample, on any buffer") {
  for (const bool episodes : {false, true}) {
    const std::string name = unique_name("ep-default");
    SegmentGuard guard(name);
    Buffer buf = episodes ? Buffer::create(name, 3, 16, kSchema, options_for(Flavor::done))
                          : Buffer::create(name, 3, 16, kSchema);
    Writer w = Writer::range(buf, 0, 3);
    Sampler s(buf);
    Model m(Flavor::done, 3, 16);
    std::mt19937_64 gen(3);
    for (int i = 0; i < 60; ++i) push_one_step(w, m, gen() % 3, gen() % 5 == 0);
    SampleBatch a, b;
    for (const std::size_t L : {1u, 4u, 16u}) {
      Rng r1(L), r2(L);
      s.sample(View::replay, 40, L, 1.0, r1, a);
      s.sample(View::replay, 40, L, 1.0, r2, b, SampleOptions{});
      CHECK(std::ranges::equal(a.start_steps(), b.start_steps()));
      CHECK(std::ranges::equal(a.env_ids(), b.env_ids()));
      CHECK(std::ranges::equal(a.mask(), b.mask()));
      s.sample_mixed(20, 5, L, 2.0, r1, a);
      s.sample_mixed(20, 5, L, 2.0, r2, b, SampleOptions{});
      CHECK(std::ranges::equal(a.start_steps(), b.start_steps()));
      s.sample_transitions(View::replay, 30, r1, a);
      s.sample_transitions(View::replay, 30, r2, b, SampleOptions{.min_steps = 10});
      CHECK(std::ranges::equal(a.start_steps(), b.start_steps()));
    }
  }
}

TEST_CASE("stop and within start positions follow their weights (chi-square, powers 0, 1, 2, periods 1 and 3)") {
  // Fixed episodes with wrap-around: env 0 never wraps, env 1 wraps twice, env 2 ends every step for a while.
  Rig rig("ep-chi", Flavor::term_trunc, 3, 24);
  Model& m = rig.m;
  const std::vector<int> lengths0 = {3, 9, 1, 6};           // 19 steps
  const std::vector<int> lengths1 = {5, 12, 7, 2, 11, 4, 15, 8, 2};  // 66 steps, wrapped
  auto push_episodes = [&](uint64_t env, const std::vector<int>& lengths, bool open_last) {
    for (std::size_t k = 0; k < lengths.size(); ++k) {
      for (int i = 0; i < lengths[k]; ++i) {
        const bool last = i + 1 == lengths[k] && !(open_last && k + 1 == lengths.size());
        push_one_step(rig.w, m, env, false, last && k % 2 == 0, last && k % 2 == 1, static_cast<int>(k % 3));
      }
    }
  };
  push_episodes(0, lengths0, true);
  push_episodes(1, lengths1, false);
  push_episodes(2, {4, 1, 1, 1, 2, 1, 10, 1, 1, 3}, true);
  rig.s.reset_online_queue();
  m.reset_online();
  push_episodes(1, {3, 6}, true);
  push_episodes(2, {2, 5}, true);

  constexpr std::size_t kL = 6;
  Rng rng(99);
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    for (const uint64_t period : {1u, 3u}) {
      for (const View view : {View::replay, View::online}) {
        CAPTURE(to_string(mode));
        CAPTURE(period);
        CAPTURE(to_string(view));
        const SampleOptions o{.episodes = mode, .period = period};
        std::vector<std::vector<uint64_t>> counts;
        std::vector<Cells> cells;
        for (const double power : {0.0, 1.0, 2.0}) {
          cells.push_back(cells_of(m, view, kL, power, o));
          counts.push_back(count_starts(rig.s, m, view, kL, power, o, cells.back(), rng, 25, 1000));
        }
        const double n = 25.0 * 1000.0;
        const double df = static_cast<double>(cells[0].nonzero - 1);
        const double bound = df + 6.0 * std::sqrt(2.0 * df);
        CAPTURE(df);
        for (std::size_t i = 0; i < 3; ++i) {
          CAPTURE(i);
          CHECK(chi_square(counts[i], cells[i].prob, n) <= bound);  // df 0 (one cell): the statistic is 0
        }
        if (mode == Episodes::stop) {  // the same bound rejects counts drawn with another power
          CHECK(chi_square(counts[0], cells[1].prob, n) > bound);
          CHECK(chi_square(counts[2], cells[1].prob, n) > bound);
        }
      }
    }
  }
  CHECK(rig.s.retries() == 0);
}

TEST_CASE("total_weight is the sum of the weights sample draws by, for every episode option, period, power and "
          "view") {
  // Episodes of several lengths with wrap-around, and an online view; the model's weights are the ones the
  // chi-square test above holds sample to, so a total that matches them is the normaliser of sample's draws.
  Rig rig("ep-total", Flavor::term_trunc, 3, 24);
  Model& m = rig.m;
  auto push_episodes = [&](uint64_t env, const std::vector<int>& lengths) {
    for (std::size_t k = 0; k < lengths.size(); ++k) {
      for (int i = 0; i < lengths[k]; ++i) {
        const bool last = i + 1 == lengths[k] && k + 1 < lengths.size();
        push_one_step(rig.w, m, env, false, last && k % 2 == 0, last && k % 2 == 1, 0);
      }
    }
  };
  SampleOptions none;
  CHECK(rig.s.total_weight(View::replay, 4, 1.0, none) == 0.0);  // an empty view
  push_episodes(0, {3, 9, 1, 6});
  push_episodes(1, {5, 12, 7, 2, 11, 4, 15, 8, 2});
  push_episodes(2, {4, 1, 1, 1, 2, 1, 10, 1, 1, 3});
  rig.s.reset_online_queue();
  m.reset_online();
  CHECK(rig.s.total_weight(View::online, 4, 1.0, none) == 0.0);
  push_episodes(1, {3, 6});
  push_episodes(2, {2, 5});
  for (const Episodes mode : {Episodes::cross, Episodes::stop, Episodes::within}) {
    for (const uint64_t period : {1u, 3u}) {
      for (const View view : {View::replay, View::online}) {
        for (const std::size_t L : {1u, 6u, 24u}) {
          for (const double power : {0.0, 0.5, 1.0, 2.0}) {
            CAPTURE(to_string(mode));
            CAPTURE(period);
            CAPTURE(to_string(view));
            CAPTURE(L);
            CAPTURE(power);
            const SampleOptions o{.episodes = mode, .period = period};
            const double expected = m.total_weight(view, L, power, o);
            CHECK(rig.s.total_weight(view, L, power, o) == doctest::Approx(expected).epsilon(1e-12));
          }
        }
      }
    }
  }
  // min_steps: a view below it weighs 0 (sample would refuse it), at it the usual total.
  const uint64_t stored = rig.s.size(View::replay);
  CHECK(rig.s.total_weight(View::replay, 6, 1.0, {.min_steps = stored + 1}) == 0.0);
  CHECK(rig.s.total_weight(View::replay, 6, 1.0, {.min_steps = stored}) ==
        doctest::Approx(m.total_weight(View::replay, 6, 1.0, none)).epsilon(1e-12));
  // Invalid arguments are refused as sample refuses them.
  CHECK(error_of([&] { rig.s.total_weight(View::replay, 0, 1.0); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { rig.s.total_weight(View::replay, 6, -1.0); }) == code(Errc::invalid_argument));
}

TEST_CASE("the exact fallback (short episodes, a long sequence, a high power) draws from the same distribution") {
  // Episodes of 1-3 steps and L = 32 with power 2: a proposal is accepted with probability about (2/32)^2, so
  // rows exhaust their proposals and the call switches to enumerating episodes; the distribution must not change.
  Rig rig("ep-exact", Flavor::done, 2, 64);
  std::mt19937_64 gen(8);
  for (int i = 0; i < 150; ++i) push_one_step(rig.w, rig.m, gen() % 2, gen() % 2 == 0);
  // One episode of 33 steps in env 1, so within has two valid starts among 66 proposals.
  push_one_step(rig.w, rig.m, 1, true);
  for (int i = 0; i < 33; ++i) push_one_step(rig.w, rig.m, 1, false);
  Rng rng(5);
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    CAPTURE(to_string(mode));
    const SampleOptions o{.episodes = mode, .period = 1};
    const uint64_t before = rig.s.stats().exact_fallbacks;
    const double power = mode == Episodes::stop ? 2.0 : 0.0;
    const Cells cells = cells_of(rig.m, View::replay, 32, power, o);
    const auto counts = count_starts(rig.s, rig.m, View::replay, 32, power, o, cells, rng, 40, 1000);
    CHECK(rig.s.stats().exact_fallbacks > before);
    const double df = static_cast<double>(cells.nonzero - 1);
    CHECK(chi_square(counts, cells.prob, 40000.0) <= df + 6.0 * std::sqrt(2.0 * df));
    SampleBatch out;
    rig.s.sample(View::replay, 200, 32, power, rng, out, o);
    const std::string problem = check_rows(out, rig.m, View::replay, 0, 200, 32, power, o);
    CHECK_MESSAGE(problem.empty(), problem);
  }
}

TEST_CASE("every sampled sequence is strictly increasing in step index, on the period grid, and within or stop "
          "never crosses an episode end, over a sweep of lengths, periods and capacities") {
  std::mt19937_64 gen(77);
  Rng rng(78);
  SampleBatch out;
  uint64_t rows_checked = 0;
  for (const uint64_t cap : {1u, 2u, 3u, 5u, 8u, 13u, 32u}) {
    Rig rig("ep-incr", Flavor::term_trunc, 2, cap);
    for (int i = 0; i < static_cast<int>(3 * cap + 7); ++i) {
      push_one_step(rig.w, rig.m, gen() % 2, false, gen() % 7 == 0, gen() % 9 == 0, static_cast<int>(gen() % 3));
    }
    for (const uint64_t L : {1u, 2u, 3u, 5u, 8u, 13u, 32u}) {
      if (L > cap) continue;
      for (const uint64_t period : {1u, 2u, 3u, 7u, 40u}) {
        for (const Episodes mode : {Episodes::cross, Episodes::stop, Episodes::within}) {
          CAPTURE(cap);
          CAPTURE(L);
          CAPTURE(period);
          CAPTURE(to_string(mode));
          const SampleOptions o{.episodes = mode, .period = period};
          if (error_of([&] { rig.s.sample(View::replay, 64, L, 1.0, rng, out, o); }) != 0) {
            CHECK(rig.m.total_weight(View::replay, L, 1.0, o) == 0.0);
            continue;
          }
          for (std::size_t row = 0; row < out.rows(); ++row) {
            const uint64_t e = out.env_ids()[row];
            const uint64_t start = out.start_steps()[row];
            const EnvSizes z = rig.s.sizes(e);
            const uint64_t lo = z.head - z.replay;
            REQUIRE((start - lo) % period == 0);
            std::size_t valid = 0;
            while (valid < L && out.valid(row, valid)) ++valid;
            REQUIRE(valid >= 1);
            if (mode == Episodes::within) REQUIRE(valid == L);
            for (std::size_t t = 0; t < L; ++t) {
              REQUIRE(out.valid(row, t) == (t < valid));
              if (t >= valid) continue;
              uint64_t id[2];
              std::memcpy(id, out.step(kId, row, t), sizeof id);
              REQUIRE(id[0] == e);
              REQUIRE(id[1] == start + t);  // consecutive: strictly increasing by one
              REQUIRE(id[1] < z.head);
              if (mode != Episodes::cross && t + 1 < valid) {
                const Step& s = rig.m.steps[e][id[1]];
                REQUIRE_FALSE(ends(s, Flavor::term_trunc));  // no episode ends before the row's last step
              }
            }
            ++rows_checked;
          }
        }
      }
    }
  }
  MESSAGE(fmt::format("{} rows checked", rows_checked));
  CHECK(rows_checked > 10000);
}

TEST_CASE("sampling options refuse what they cannot do, with the numbers") {
  Rig rig("ep-errors", Flavor::done, 2, 8);
  Rng rng(1);
  SampleBatch out;
  std::string msg;
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 2, 1.0, rng, out, {.period = 0}); }, &msg) ==
        code(Errc::invalid_argument));
  CHECK(contains(msg, "period is 0"));
  push_one_step(rig.w, rig.m, 0, false);
  push_one_step(rig.w, rig.m, 0, true);
  push_one_step(rig.w, rig.m, 1, false);
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 2, 1.0, rng, out, {.min_steps = 4}); }, &msg) ==
        code(Errc::empty_view));
  CHECK((contains(msg, "holds 3 steps") && contains(msg, "min_steps = 4")));
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 2, 1.0, rng, out, {.min_steps = 3}); }) == 0);
  rig.s.reset_online_queue();
  CHECK(error_of([&] { rig.s.sample_mixed(2, 2, 2, 1.0, rng, out, {.min_steps = 3}); }, &msg) ==
        code(Errc::empty_view));
  CHECK((contains(msg, "online") && contains(msg, "holds 0 steps")));
  CHECK(error_of([&] { rig.s.sample_mixed(2, 0, 2, 1.0, rng, out, {.min_steps = 3}); }) == 0);
  // Within: no two consecutive steps of one episode yet (env 0: [0, 1] ends at 1 -> fits; make L = 3).
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 3, 1.0, rng, out, {.episodes = Episodes::within}); }, &msg) ==
        code(Errc::empty_view));
  CHECK((contains(msg, "within") && contains(msg, "3 steps of one episode")));
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 2, 1.0, rng, out, {.episodes = Episodes::within}); }) == 0);
  CHECK(check_rows(out, rig.m, View::replay, 0, 4, 2, 1.0, {.episodes = Episodes::within}) == "");
  // A buffer without episode fields: cross only.
  const std::string plain = unique_name("ep-plain");
  SegmentGuard guard(plain);
  Buffer pb = Buffer::create(plain, 1, 4, kSchema);
  Sampler ps(pb);
  Writer pw(pb, {0});
  Model pm(Flavor::done, 1, 4);
  push_one_step(pw, pm, 0, true);
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    CHECK(error_of([&] { ps.sample(View::replay, 2, 1, 1.0, rng, out, {.episodes = mode}); }, &msg) ==
          code(Errc::invalid_argument));
    CHECK((contains(msg, to_string(mode).data()) && contains(msg, "no episode fields")));
  }
  CHECK(error_of([&] { ps.sample(View::replay, 2, 1, 1.0, rng, out, {.period = 2}); }) == 0);
  EpisodeRecord none[4];
  CHECK(ps.pop_episodes(none) == 0);
  // The learner may not move boundaries: flag fields cannot be updated; the reward can.
  const uint8_t one = 1;
  const float r = 2.5f;
  CHECK(error_of([&] { (void)rig.s.try_update(1, 0, {{}, {}, value_bytes(one), {}, {}, {}}); }, &msg) ==
        code(Errc::invalid_argument));
  CHECK((contains(msg, "'done'") && contains(msg, "episode flag")));
  CHECK(rig.s.try_update(1, 0, {{}, {}, {}, {}, {}, value_bytes(r)}));
}

TEST_CASE("n-step returns stop after episode ends and at the mask, with the bootstrap index and discount") {
  Rig rig("ep-nstep", Flavor::term_trunc, 1, 8);
  // Steps 0..7 of env 0: rewards reward_of(0, s) = s - 3 (-3 .. 4); step 2 terminates, step 5 is truncated.
  for (uint64_t s = 0; s < 8; ++s) push_one_step(rig.w, rig.m, 0, false, s == 2, s == 5);
  Rng rng(1);
  SampleBatch b;
  rig.s.sample(View::replay, 1, 8, 0.0, rng, b, {.period = 8});  // the only start is step 0
  REQUIRE(b.start_steps()[0] == 0);
  const double g = 0.5;
  auto rew = [](uint64_t s) { return static_cast<double>(s) - 3.0; };

  NStep x = nstep(b, 0, 0, 3, g);  // 0, 1, 2 and step 2 terminates
  CHECK(x.steps == 3);
  CHECK(x.reward_sum == rew(0) + g * rew(1) + g * g * rew(2));
  CHECK(x.terminated);
  CHECK_FALSE(x.truncated);
  CHECK_FALSE(x.bootstrap);
  CHECK(x.bootstrap_discount == 0.0);

  x = nstep(b, 0, 1, 5, g);  // stops after the termination at 2
  CHECK(x.steps == 2);
  CHECK(x.reward_sum == rew(1) + g * rew(2));
  CHECK(x.terminated);

  x = nstep(b, 0, 3, 2, g);  // 3, 4: bootstrap from 5
  CHECK(x.steps == 2);
  CHECK(x.reward_sum == rew(3) + g * rew(4));
  CHECK(x.bootstrap == std::optional<std::size_t>(5));
  CHECK(x.bootstrap_discount == g * g);
  CHECK_FALSE(x.terminated);

  x = nstep(b, 0, 4, 4, g);  // 4, 5 and 5 is truncated: no stored bootstrap state
  CHECK(x.steps == 2);
  CHECK(x.reward_sum == rew(4) + g * rew(5));
  CHECK(x.truncated);
  CHECK_FALSE(x.terminated);
  CHECK_FALSE(x.bootstrap);
  CHECK(x.bootstrap_discount == g * g);

  x = nstep(b, 0, 6, 5, g);  // 6, 7 and the row ends: nothing to bootstrap from in the row
  CHECK(x.steps == 2);
  CHECK(x.reward_sum == rew(6) + g * rew(7));
  CHECK_FALSE(x.bootstrap);
  CHECK(x.bootstrap_discount == g * g);

  x = nstep(b, 0, 6, 1, g, kX);  // another reward field
  CHECK(x.reward_sum == static_cast<double>(6.5f));
  CHECK(x.bootstrap == std::optional<std::size_t>(7));

  // In a stop row the mask ends at the episode's end.
  rig.s.sample(View::replay, 1, 6, 0.0, rng, b, {.episodes = Episodes::stop, .period = 8});
  REQUIRE((b.valid(0, 2) && !b.valid(0, 3)));
  x = nstep(b, 0, 1, 4, 1.0);
  CHECK((x.steps == 2 && x.terminated && x.reward_sum == rew(1) + rew(2)));

  std::string msg;
  CHECK(error_of([&] { (void)nstep(b, 1, 0, 1, g); }, &msg) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)nstep(b, 0, 6, 1, g); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)nstep(b, 0, 0, 0, g); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)nstep(b, 0, 0, 1, g, kId); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "scalar"));
  x = nstep(b, 0, 4, 1, g);  // masked out: nothing
  CHECK(x.steps == 0);
}

TEST_CASE("completed-episode records arrive per env in order with their returns; a full queue drops and counts") {
  Rig rig("ep-records", Flavor::term_trunc, 3, 16, /*queue_capacity=*/4);
  std::mt19937_64 gen(4);
  // Env 0: 7 episodes, none popped: 4 kept, 3 dropped. Envs 1, 2: episodes through every push path.
  for (int k = 0; k < 7; ++k) {
    for (int i = 0; i <= k % 3; ++i) push_one_step(rig.w, rig.m, 0, false, i == k % 3, false, k % 3);
  }
  const SegmentInfo full = Inspector(rig.guard.name()).snapshot();
  CHECK(full.episode_queue_capacity == 4);
  CHECK(full.episode_fields.terminated == std::optional<std::size_t>(kTerm));
  CHECK(full.envs[0].episodes_completed == 7);
  CHECK(full.envs[0].episode_records_dropped == 3);
  CHECK(full.envs[0].episode_queue_depth == 4);
  const auto model0 = rig.m.records(0);
  CHECK(full.envs[0].last_episode_length == model0.back().length);
  CHECK(full.envs[0].last_episode_return == model0.back().episode_return);
  CHECK(full.envs[0].last_episode_end == EpisodeEnd::terminated);
  CHECK(full.envs[0].episode_start == rig.m.head(0));
  CHECK(full.episodes_completed == 7);
  std::vector<EpisodeRecord> got(16);
  REQUIRE(rig.s.pop_episodes(got) == 4);
  for (std::size_t k = 0; k < 4; ++k) CHECK(got[k] == model0[k]);  // the first four; the later ones were dropped

  // Envs 1 and 2, every push path, popped in small batches along the way: per env exactly the model's records,
  // in order, nothing dropped.
  std::map<uint64_t, std::vector<EpisodeRecord>> per_env;
  auto pop_some = [&](std::size_t most) {
    std::vector<EpisodeRecord> small(most);
    const std::size_t n = rig.s.pop_episodes(small);
    for (std::size_t k = 0; k < n; ++k) per_env[small[k].env].push_back(small[k]);
    return n;
  };
  for (int i = 0; i < 120; ++i) {
    const uint64_t env = 1 + gen() % 2;
    push_steps(rig.w, rig.m, {env}, {random_flags(gen, Flavor::term_trunc, 3)}, static_cast<int>(gen() % 3));
    if (gen() % 5 == 0) push_steps(rig.w, rig.m, {2, 1}, {{false, true, false}, {false, false, true}}, 0);
    if (i % 3 == 2) {  // often enough that the 4-record queues never fill
      while (pop_some(1 + gen() % 3) > 0) {
      }
    }
  }
  while (pop_some(3) > 0) {
  }
  const SegmentInfo after = Inspector(rig.guard.name()).snapshot();
  for (const uint64_t env : {1u, 2u}) {
    CAPTURE(env);
    CHECK(after.envs[env].episode_records_dropped == 0);
    CHECK(after.envs[env].episode_queue_depth == 0);
    CHECK(after.envs[env].episodes_completed == rig.m.records(env).size());
    CHECK(per_env[env] == rig.m.records(env));
    CHECK(per_env[env].size() > 10);
  }
  // Env 0's queue has room again: new records follow.
  push_one_step(rig.w, rig.m, 0, false, false, true);
  REQUIRE(rig.s.pop_episodes(got) == 1);
  CHECK(got[0] == rig.m.records(0).back());
  CHECK(got[0].end == EpisodeEnd::truncated);
}

TEST_CASE("records of every push path equal the model's exactly, round-robin across envs") {
  Rig rig("ep-records2", Flavor::done, 4, 8, 1024);
  std::mt19937_64 gen(12);
  for (int i = 0; i < 400; ++i) {
    std::vector<uint64_t> envs = {0, 1, 2, 3};
    std::shuffle(envs.begin(), envs.end(), gen);
    envs.resize(1 + gen() % 4);
    std::vector<std::array<bool, 3>> flags;
    for (std::size_t k = 0; k < envs.size(); ++k) flags.push_back(random_flags(gen, Flavor::done, 5));
    push_steps(rig.w, rig.m, envs, flags, static_cast<int>(gen() % 3));
  }
  std::map<uint64_t, std::vector<EpisodeRecord>> per_env;
  std::vector<EpisodeRecord> got(7);
  std::set<uint64_t> first_envs;
  for (std::size_t n; (n = rig.s.pop_episodes(got)) > 0;) {
    first_envs.insert(got[0].env);
    for (std::size_t k = 0; k < n; ++k) per_env[got[k].env].push_back(got[k]);
  }
  for (uint64_t e = 0; e < 4; ++e) CHECK(per_env[e] == rig.m.records(e));
  CHECK(first_envs.size() > 1);  // the starting env rotates
}

TEST_CASE("a writer that dies between the steps of a publish leaves boundaries and records consistent") {
  // Simulated crash points, with the library's own steps (the real-process version follows).
  Rig rig("ep-crashsim", Flavor::done, 1, 4, 16);
  Model& m = rig.m;
  for (int i = 0; i < 3; ++i) push_one_step(rig.w, m, 0, false);  // an episode in progress: steps 0-2
  const std::string name = rig.guard.name();
  Buffer& buf = rig.buf;
  auto stage_without_head = [&](bool done) {
    // Claim step head, write its bytes with `done`, stage its meta and journal, and "die" before the head store.
    layout::EnvControl& c = buf.segment().env_control(0);
    const uint64_t step = c.head.load();
    c.claimed.store(step + 1);
    const Step s = make_step(0, step, done, false, false);
    const auto f = fields_of(s);
    for (std::size_t k = 0; k < f.size(); ++k) {
      std::memcpy(buf.segment().field_data(k) + (step % 4) * kSchema[k].bytes(), f[k].data, f[k].bytes);
    }
    detail::EpisodeRoles roles(buf.segment());
    return detail::stage_step(buf.segment(), 0, step, detail::read_step_flags(roles, [&](std::size_t k) {
      return static_cast<const std::byte*>(f[k].data);
    }));
  };
  {
    // 1. Died after staging an episode end for step 3, before publishing it; the replacement republishes step 3
    //    without the flag. Nothing may show the phantom end.
    Writer gone = std::move(rig.w);
  }
  CHECK(stage_without_head(true));
  Writer w2(buf, {0});
  push_one_step(w2, m, 0, false);  // step 3, no end
  push_one_step(w2, m, 0, true);   // step 4 ends the episode 0-4
  EpisodeRecord rec[4];
  REQUIRE(rig.s.pop_episodes(rec) == 1);
  CHECK(rec[0] == m.records(0)[0]);
  CHECK(rec[0].length == 5);
  Rng rng(2);
  SampleBatch out;
  rig.s.sample(View::replay, 50, 4, 1.0, rng, out, {.episodes = Episodes::stop});
  CHECK(check_rows(out, m, View::replay, 0, 50, 4, 1.0, {.episodes = Episodes::stop}) == "");

  // 2. Died after publishing an episode's last step (step 6), before queueing its record: the next writer to
  //    lease the env queues it, exactly once.
  push_one_step(w2, m, 0, false);
  {
    Writer gone = std::move(w2);
  }
  CHECK(stage_without_head(true));
  buf.segment().env_control(0).head.store(buf.segment().env_control(0).head.load() + 1);  // published; the record push never ran
  m.steps[0].push_back(make_step(0, 6, true, false, false));
  CHECK(rig.s.pop_episodes(rec) == 0);
  {
    Writer w3(buf, {0});
    REQUIRE(rig.s.pop_episodes(rec) == 1);
    CHECK(rec[0] == m.records(0)[1]);
    CHECK(rec[0].first_step == 5);
    CHECK(rec[0].length == 2);
  }
  Writer w4(buf, {0});  // a clean hand-over owes nothing
  CHECK(rig.s.pop_episodes(rec) == 0);
  push_one_step(w4, m, 0, true);
  REQUIRE(rig.s.pop_episodes(rec) == 1);
  CHECK(rec[0] == m.records(0)[2]);
  const SegmentInfo info = Inspector(name).snapshot();
  CHECK(info.envs[0].episodes_completed == 3);
  CHECK(info.envs[0].episode_records_dropped == 0);
}

TEST_CASE("after a tool rewrites an env wholesale, rebuild_env restores boundaries and the episode in progress") {
  // What a checkpoint load does to an env (new steps and counters, stale episode bookkeeping), then the repair.
  Rig rig("ep-rebuild", Flavor::term_trunc, 1, 8, 16);
  std::mt19937_64 gen(6);
  for (int i = 0; i < 21; ++i) push_one_step(rig.w, rig.m, 0, false, gen() % 4 == 0, gen() % 5 == 0);
  push_one_step(rig.w, rig.m, 0, false, true, false);
  push_one_step(rig.w, rig.m, 0, false);
  push_one_step(rig.w, rig.m, 0, false);  // an episode of 2 steps in progress: steps 22, 23
  EpisodeRecord rec[32];
  const std::size_t before = rig.s.pop_episodes(rec);
  CHECK(before == rig.m.records(0).size());
  layout::EpisodeControl& c = rig.buf.segment().episode_control(0);
  for (auto& j : c.journal) j.for_head.store(12345);  // stale: no slot is for the head
  for (uint64_t s = 0; s < 8; ++s) rig.buf.segment().step_meta(0)[s].store(0);
  detail::rebuild_env(rig.buf.segment(), 0);
  Rng rng(3);
  SampleBatch out;
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    const SampleOptions o{.episodes = mode};
    rig.s.sample(View::replay, 100, 2, 1.0, rng, out, o);
    CHECK(check_rows(out, rig.m, View::replay, 0, 100, 2, 1.0, o) == "");
  }
  // The episode in progress continues: its record counts all of its steps (they are all stored here).
  push_one_step(rig.w, rig.m, 0, false, false, true);
  REQUIRE(rig.s.pop_episodes(rec) == 1);
  CHECK(rec[0] == rig.m.records(0).back());
  CHECK(rec[0].first_step == 22);
  CHECK(rec[0].length == 3);
}

namespace {

// -- Real processes: writers SIGKILLed at random moments -------------------------------------------------------

const Schema kKillSchema = Schema::parse("hdr:u64[2] term:u8 trunc:u8 reward:f32");

CreateOptions kill_options() {
  return {.episodes = {.terminated = "term", .truncated = "trunc", .reward = "reward"}, .episode_queue_capacity = 4096};
}

// A writer process: pushes steps {env, step} with random flags (so that a step republished after a kill may get
// other flags than the dead writer staged) and reward reward_of(env, step), by every push path, until killed.
[[noreturn]] void episode_writer_main(const std::string& name, std::vector<uint64_t> envs, uint64_t seed) {
  try {
    Buffer buf = Buffer::open(name);
    Writer writer(buf, envs);
    Rng rng(seed);
    for (;;) {
      const uint64_t env = envs[rng() % envs.size()];
      const uint64_t step = buf.segment().env_control(env).head.load(std::memory_order_relaxed);
      const uint64_t hdr[2] = {env, step};
      const uint8_t term = rng() % 9 == 0 ? 1 : 0;
      const uint8_t trunc = rng() % 13 == 0 ? 1 : 0;
      const float reward = reward_of(env, step);
      const uint64_t mode = rng() % 4;
      if (mode < 2) {
        writer.push_one(env, {FieldBytes{hdr, sizeof hdr}, value_bytes(term), value_bytes(trunc), value_bytes(reward)});
      } else {
        StepSlot slot = writer.reserve(env);
        std::memcpy(slot.field(0).data(), hdr, sizeof hdr);
        std::memcpy(slot.field(1).data(), &term, 1);
        if (mode == 3) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100));
        std::memcpy(slot.field(2).data(), &trunc, 1);
        std::memcpy(slot.field(3).data(), &reward, 4);
        if (rng() % 10 != 0) slot.commit();  // sometimes abandoned
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "episode writer %d: %s\n", static_cast<int>(::getpid()), e.what());
  }
  ::_exit(3);
}


bool ends_at(const SampleBatch& b, std::size_t row, std::size_t t) {
  return std::to_integer<uint8_t>(*b.step(1, row, t)) != 0 || std::to_integer<uint8_t>(*b.step(2, row, t)) != 0;
}

// One row of a concurrent sample: consecutive steps of its env below the head; for stop and within no episode
// end before its last step; within full length. `strict` (no writer running): a stop row shorter than L ends at
// an episode end or at the head.
std::string check_episode_row(const SampleBatch& b, std::size_t row, Episodes mode, uint64_t head, bool strict) {
  const uint64_t env = b.env_ids()[row];
  const uint64_t start = b.start_steps()[row];
  const std::size_t L = b.sequence_length();
  const std::optional<std::size_t> prefix = mask_prefix(b, row);
  if (!prefix) return "mask has a hole";
  const std::size_t valid = *prefix;
  if (valid == 0) return "empty row";
  if (mode == Episodes::within && valid != L) return "within row shorter than L";
  for (std::size_t t = 0; t < valid; ++t) {
    uint64_t hdr[2];
    std::memcpy(hdr, b.step(0, row, t), sizeof hdr);
    if (hdr[0] != env || hdr[1] != start + t) {
      return fmt::format("env {} step {} at position {} of a row of env {} from {}", hdr[0], hdr[1], t, env, start);
    }
    if (start + t >= head) return "row reaches past the head";
    float reward = 0;
    std::memcpy(&reward, b.step(3, row, t), 4);
    if (reward != reward_of(env, start + t)) return "wrong reward";
    if (mode != Episodes::cross && t + 1 < valid && ends_at(b, row, t)) {
      return fmt::format("{} row of env {} from {} crosses the episode end at step {}", to_string(mode), env, start,
                         start + t);
    }
  }
  if (strict && mode == Episodes::stop && valid < L && !ends_at(b, row, valid - 1) && start + valid != head) {
    return fmt::format("stop row of env {} from {} stops after {} steps at step {}, which ends no episode", env,
                       start, valid, start + valid - 1);
  }
  return "";
}

// Every stored step's meta word must agree with the flags of the published steps (no writer may run).
std::string check_meta_against_data(const Buffer& buf) {
  const uint64_t cap = buf.capacity();
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    const uint64_t head = buf.segment().env_control(e).head.load();
    const uint64_t claimed = buf.segment().env_control(e).claimed.load() & ~layout::kUpdateLockBit;
    const uint64_t lo = std::min(claimed > cap ? claimed - cap : 0, head);
    std::optional<uint64_t> start;  // known once an end was seen in the window
    for (uint64_t s = lo; s < head; ++s) {
      const std::byte* rec_term = buf.segment().field_data(1) + (e * cap + s % cap);
      const std::byte* rec_trunc = buf.segment().field_data(2) + (e * cap + s % cap);
      const bool end = *rec_term != std::byte{0} || *rec_trunc != std::byte{0};
      const uint64_t meta = buf.segment().step_meta(e)[s % cap].load();
      const uint64_t meta_start = meta & layout::kMetaStartMask;
      if (((meta & layout::kMetaEndsEpisode) != 0) != end) return fmt::format("env {} step {}: end bit wrong", e, s);
      if (start ? meta_start != *start : meta_start > lo) {
        return fmt::format("env {} step {}: meta says the episode starts at {}, the flags say {}", e, s, meta_start,
                           start ? *start : lo);
      }
      if (end) start = s + 1;
    }
  }
  return "";
}

}  // namespace

TEST_CASE("writers SIGKILLed at random moments and replaced: stop and within rows never cross a boundary, "
          "boundaries agree with the published steps, and every episode's record arrives exactly once") {
  const uint64_t num_envs = 6;
  const uint64_t capacity = 48;
  const std::size_t num_writers = 3;
  SegmentGuard guard(unique_name("ep-kill"));
  std::vector<std::vector<uint64_t>> slices(num_writers);
  for (uint64_t e = 0; e < num_envs; ++e) slices[e % num_writers].push_back(e);
  Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kKillSchema, kill_options());
  std::vector<pid_t> writers(num_writers);
  uint64_t seed = 100;
  for (std::size_t w = 0; w < num_writers; ++w) {
    writers[w] = spawn([&, w, s = seed++] { episode_writer_main(guard.name(), slices[w], s); });
  }
  Sampler learner(buf);
  REQUIRE(learner.wait(View::replay, num_envs * 8, 20'000));
  Rng rng(9);
  SampleBatch batch;
  std::map<uint64_t, std::vector<EpisodeRecord>> records;
  std::vector<EpisodeRecord> popped(256);
  auto pop_all = [&] {
    for (std::size_t n; (n = learner.pop_episodes(popped)) > 0;) {
      for (std::size_t k = 0; k < n; ++k) records[popped[k].env].push_back(popped[k]);
    }
  };
  uint64_t rows = 0, kills = 0, violations = 0, calls = 0;
  std::array<uint64_t, 3> mode_retries = {0, 0, 0};
  std::string first;
  const std::array<Episodes, 3> modes = {Episodes::cross, Episodes::stop, Episodes::within};
  auto sample_and_check = [&](bool strict) {
    const Episodes mode = modes[calls % 3];
    const std::size_t L = 1 + rng() % 12;
    const SampleOptions o{.episodes = mode, .period = 1 + rng() % 3};
    ++calls;
    const uint64_t retries_before = learner.retries();
    struct Count {
      uint64_t& retries;
      uint64_t before;
      Sampler& s;
      ~Count() { retries += s.retries() - before; }
    } count{mode_retries[static_cast<std::size_t>(mode)], retries_before, learner};
    try {
      if (calls % 4 == 0) {
        learner.sample_mixed(24, 8, L, static_cast<double>(rng() % 3), rng, batch, o);
      } else {
        learner.sample(View::replay, 32, L, static_cast<double>(rng() % 3), rng, batch, o);
      }
    } catch (const Error& e) {
      if (e.errc() == Errc::empty_view) return;
      throw;
    }
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      ++rows;
      const std::string v = check_episode_row(batch, row, mode, learner.sizes(batch.env_ids()[row]).head, strict);
      if (!v.empty() && violations++ == 0) first = v;
    }
    if (calls % 5 == 0) learner.reset_online_queue();
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(test::run_seconds(1.5));
  auto next_kill = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    sample_and_check(false);
    if (calls % 8 == 0) pop_all();
    if (std::chrono::steady_clock::now() >= next_kill) {
      const std::size_t w = rng() % num_writers;
      CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer exited on its own (see its stderr)");
      ++kills;
      writers[w] = spawn([&, w, s = seed++] { episode_writer_main(guard.name(), slices[w], s); });
      next_kill = std::chrono::steady_clock::now() + std::chrono::milliseconds(10 + rng() % 60);
    }
  }
  for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
  // Everyone is dead. The envs are taken over once more: a record a dead writer owed is queued now.
  {
    Writer last = Writer::range(buf, 0, num_envs);
    const std::string meta_problem = check_meta_against_data(buf);
    CHECK_MESSAGE(meta_problem.empty(), meta_problem);
    for (int i = 0; i < 300; ++i) sample_and_check(true);
  }
  pop_all();
  const SegmentInfo info = Inspector(guard.name()).snapshot();
  uint64_t total_records = 0;
  for (uint64_t e = 0; e < num_envs; ++e) {
    CAPTURE(e);
    const auto& rs = records[e];
    total_records += rs.size();
    CHECK(info.envs[e].episode_records_dropped == 0);
    CHECK(info.envs[e].episode_queue_depth == 0);
    CHECK(info.envs[e].episodes_completed == rs.size());
    // Exactly once, in order: the records tile the env's steps from 0 up to the episode in progress.
    uint64_t next = 0;
    for (const EpisodeRecord& r : rs) {
      REQUIRE(r.first_step == next);
      REQUIRE(r.length >= 1);
      double ret = 0.0;
      for (uint64_t s = r.first_step; s < r.first_step + r.length; ++s) ret += static_cast<double>(reward_of(e, s));
      REQUIRE(r.episode_return == ret);
      REQUIRE((r.end == EpisodeEnd::terminated || r.end == EpisodeEnd::truncated));
      next = r.first_step + r.length;
    }
    CHECK(info.envs[e].episode_start == next);
  }
  uint64_t pushes = 0;
  for (const EnvInfo& env : info.envs) pushes += env.head;
  MESSAGE(fmt::format("{} writer processes, {} kills: {} pushes, {} sample calls, {} rows checked, {} records, "
                      "retries {} (cross {}, stop {}, within {}), {} violations",
                      num_writers, kills, pushes, calls, rows, total_records, learner.retries(), mode_retries[0],
                      mode_retries[1], mode_retries[2], violations));
  CHECK_MESSAGE(violations == 0, first);
  CHECK(kills > 0);
  CHECK(total_records > 0);
}

TEST_CASE("a writer SIGKILLed mid-episode and replaced still gives the episode's correct record") {
  SegmentGuard guard(unique_name("ep-midkill"));
  Buffer buf = Buffer::create(guard.name(), 2, 16, kKillSchema, kill_options());
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  // The child pushes steps 0-9 of env 1 (no episode end), says so, and waits to be killed.
  const pid_t child = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Writer w(b, {1});
    for (uint64_t s = 0; s < 10; ++s) {
      const uint64_t hdr[2] = {1, s};
      const uint8_t zero = 0;
      const float reward = reward_of(1, s);
      w.push_one(1, {FieldBytes{hdr, sizeof hdr}, value_bytes(zero), value_bytes(zero), value_bytes(reward)});
    }
    const char c = 'k';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  });
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  REQUIRE(kill_and_reap(child));
  ::close(ready[0]);
  ::close(ready[1]);
  Writer w(buf, {1});
  CHECK(w.takeovers() == 1);
  for (uint64_t s = 10; s < 14; ++s) {
    const uint64_t hdr[2] = {1, s};
    const uint8_t zero = 0, one = 1;
    const float reward = reward_of(1, s);
    w.push_one(1, {FieldBytes{hdr, sizeof hdr}, value_bytes(zero), value_bytes(s == 13 ? one : zero),
                   value_bytes(reward)});
  }
  Sampler learner(buf);
  EpisodeRecord r[2];
  REQUIRE(learner.pop_episodes(r) == 1);
  double ret = 0.0;
  for (uint64_t s = 0; s < 14; ++s) ret += static_cast<double>(reward_of(1, s));
  CHECK(r[0] == EpisodeRecord{1, 0, 14, ret, EpisodeEnd::truncated});
}

TEST_CASE("stop and within sampling work per row does not grow with the number of stored steps") {
  // Episodes of 8 to 48 steps, L = 16, power 1: the same episode-length distribution in rings of 2^8 to 2^16
  // steps per env. Proposals and meta loads per row must stay flat (a scan of flags would grow 256-fold).
  std::vector<double> work_stop, work_within;
  for (const uint64_t cap : {1u << 8, 1u << 12, 1u << 16}) {
    const std::string name = unique_name("ep-work");
    SegmentGuard guard(name);
    Buffer buf = Buffer::create(name, 2, cap, kKillSchema, kill_options());
    {
      Writer w = Writer::range(buf, 0, 2);
      std::mt19937_64 gen(cap);
      std::vector<uint64_t> hdr(4);
      std::vector<uint8_t> term(2), trunc(2, 0);
      std::vector<float> reward(2, 1.0f);
      uint64_t left[2] = {0, 0};
      const std::vector<int32_t> both = {0, 1};
      for (uint64_t s = 0; s < cap; ++s) {
        for (int e = 0; e < 2; ++e) {
          if (left[e] == 0) left[e] = 8 + gen() % 41;
          term[static_cast<std::size_t>(e)] = --left[e] == 0 ? 1 : 0;
          hdr[static_cast<std::size_t>(2 * e)] = static_cast<uint64_t>(e);
          hdr[static_cast<std::size_t>(2 * e + 1)] = s;
        }
        w.push(std::span<const int32_t>(both), {field_bytes(hdr), field_bytes(term), field_bytes(trunc), field_bytes(reward)});
      }
    }
    Sampler s(buf);
    Rng rng(1);
    SampleBatch out;
    for (const Episodes mode : {Episodes::stop, Episodes::within}) {
      const SamplerStats before = s.stats();
      for (int call = 0; call < 50; ++call) s.sample(View::replay, 64, 16, 1.0, rng, out, {.episodes = mode});
      const SamplerStats& after = s.stats();
      const double rows = static_cast<double>(after.rows - before.rows);
      const double work = static_cast<double>((after.tries - before.tries) + (after.meta_loads - before.meta_loads) +
                                              (after.segments_enumerated - before.segments_enumerated));
      CHECK(after.exact_fallbacks == before.exact_fallbacks);
      (mode == Episodes::stop ? work_stop : work_within).push_back(work / rows);
      MESSAGE(fmt::format("capacity {:6}: {} work per row {:.2f}", cap, to_string(mode), work / rows));
    }
  }
  for (const auto* w : {&work_stop, &work_within}) {
    CHECK((*w)[0] < 16.0);
    CHECK((*w)[2] < 1.25 * (*w)[0] + 1.0);  // 256 times the steps, the same work
  }
}
