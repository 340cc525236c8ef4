// tests/stacks/stacks_helpers.hpp: what the parts of test_stacks share (tests/CMakeLists.txt builds them into one
// executable): the pushes by every path, the checks of sampled rows and stacks against the model, byte for byte,
// and a rig of buffer, writer and sampler; the stamped frames and the env model are in stacks_model.hpp.
// test_stacks (layout 1.6, stacked fields; docs/design/stacks.md): the declaration (text form, geometry, open's
// acceptance of a stacked field table), every sampled stack exact whatever the env does (episode boundaries, any
// reset padding, stacks that do not continue without any flag, wrap-around, every axis, several stacked fields,
// every sampling mode), the steps whose frames are overwritten left out exactly (a reference model of the frame
// rings, chi-square of the planners against it), and SIGKILLed writer processes and checkpoint round trips.
#pragma once

#include "stacks/stacks_model.hpp"

namespace {

using test::code;
using test::contains;

// ---------------------------------------------------------------------------------------------------------------
// Pushes

/// How steps are pushed: a batched push with int32 or uint64 ids, push_one, reserve + commit (fields filled in
/// place, the stacked ones in the Writer's staging area).
enum class PushPath : uint8_t { batch32, batch64, one, reserve };
constexpr std::array<PushPath, 4> kPaths = {PushPath::batch32, PushPath::batch64, PushPath::one, PushPath::reserve};
inline const char* path_name(PushPath p) {
  switch (p) {
    case PushPath::batch32: return "push (int32 ids)";
    case PushPath::batch64: return "push (uint64 ids)";
    case PushPath::one: return "push_one";
    case PushPath::reserve: return "reserve + commit";
  }
  return "?";
}

/// Pushes `steps[i]` to env `envs[i]` by `path` (with their priorities when `priorities`) and records them in the
/// model.
inline void push_steps(Writer& w, Model& m, const std::vector<uint64_t>& envs, std::vector<ModelStep> steps,
                       PushPath path, bool priorities = false) {
  const Schema& schema = m.sch.schema;
  std::vector<std::vector<std::byte>> values(envs.size() * schema.size());
  for (std::size_t r = 0; r < envs.size(); ++r) {
    // The model's step is recorded first to know its step index; field_value reads it back.
    m.record(envs[r], steps[r]);
    const uint64_t s = m.head(envs[r]) - 1;
    for (std::size_t f = 0; f < schema.size(); ++f) values[r * schema.size() + f] = m.field_value(envs[r], s, f);
  }
  if (path == PushPath::batch32 || path == PushPath::batch64) {
    std::vector<std::vector<std::byte>> arrays(schema.size());
    std::vector<FieldBytes> fields(schema.size());
    for (std::size_t f = 0; f < schema.size(); ++f) {
      for (std::size_t r = 0; r < envs.size(); ++r) {
        const auto& v = values[r * schema.size() + f];
        arrays[f].insert(arrays[f].end(), v.begin(), v.end());
      }
      fields[f] = {arrays[f].data(), arrays[f].size()};
    }
    std::vector<float> prios;
    for (const ModelStep& st : steps) prios.push_back(st.priority);
    if (path == PushPath::batch32) {
      std::vector<int32_t> ids(envs.begin(), envs.end());
      if (priorities) {
        w.push(std::span<const int32_t>(ids), fields, prios);
      } else {
        w.push(std::span<const int32_t>(ids), fields);
      }
    } else {
      if (priorities) {
        w.push(std::span<const uint64_t>(envs), fields, prios);
      } else {
        w.push(std::span<const uint64_t>(envs), fields);
      }
    }
    return;
  }
  for (std::size_t r = 0; r < envs.size(); ++r) {
    if (path == PushPath::one) {
      REQUIRE(!priorities);  // push_one takes none: the step would enter at the running maximum
      std::vector<FieldBytes> fields(schema.size());
      for (std::size_t f = 0; f < schema.size(); ++f) {
        const auto& v = values[r * schema.size() + f];
        fields[f] = {v.data(), v.size()};
      }
      w.push_one(envs[r], fields);
    } else {
      StepSlot slot = w.reserve(envs[r]);
      for (std::size_t f = 0; f < schema.size(); ++f) {
        const auto& v = values[r * schema.size() + f];
        REQUIRE(slot.field(f).size() == v.size());
        std::memcpy(slot.field(f).data(), v.data(), v.size());
      }
      if (priorities) slot.set_priority(steps[r].priority);
      slot.commit();
    }
  }
}

/// Pushes one step to each env of `envs`, each drawn by draw_move, by `path`.
inline void push_random(Writer& w, Model& m, std::mt19937_64& gen, std::vector<bool>& pending,
                        const std::vector<uint64_t>& envs, PushPath path, uint64_t one_in, bool flagless,
                        bool priorities = false) {
  std::vector<ModelStep> steps;
  for (const uint64_t e : envs) {
    bool p = pending[e];
    const MoveDraw d = draw_move(gen, p, one_in, flagless);
    pending[e] = p;
    steps.push_back(m.next(e, d.move, d.done, &gen));
    if (priorities) steps.back().priority = static_cast<float>(gen() % 8) * 0.5f;
  }
  push_steps(w, m, envs, std::move(steps), path, priorities);
}

// ---------------------------------------------------------------------------------------------------------------
// Checks of sampled rows

/// How many steps row (e, p) holds: cross: up to the view's head; stop: up to its episode's end too; within: L.
inline uint64_t row_steps(const Model& m, uint64_t e, uint64_t p, uint64_t hi, std::size_t L, Episodes episodes) {
  if (episodes == Episodes::cross) return std::min<uint64_t>(hi - p, L);
  return std::min<uint64_t>(m.rem_in_episode(e, p, hi), L);
}

/// Checks rows [first, first + count) of `b`, drawn from `view` with sequence length L: each starts in the view
/// (within: its whole sequence in one episode), its mask holds exactly the steps the model gives it, each of them
/// exact (every stacked frame byte for byte), and every masked-out position is zero in every field. "" when sound.
inline std::string check_rows(const SampleBatch& b, const Model& m, View view, std::size_t first, std::size_t count,
                              Episodes episodes = Episodes::cross) {
  const std::size_t L = b.sequence_length();
  const Schema& schema = m.sch.schema;
  for (std::size_t row = first; row < first + count; ++row) {
    const uint64_t e = b.env_ids()[row];
    const uint64_t p = b.start_steps()[row];
    if (e >= m.num_envs()) return fmt::format("row {}: env {} out of range", row, e);
    const uint64_t lo = m.lo(e, view);
    const uint64_t hi = m.head(e);
    if (p < lo || p >= hi) {
      return fmt::format("row {}: start {} of env {} outside the {} view [{}, {}) (the view ignoring lost frames "
                         "starts at {})",
                         row, p, e, to_string(view), lo, hi, m.lo_ignoring_frames(e));
    }
    const uint64_t r = row_steps(m, e, p, hi, L, episodes);
    if (episodes == Episodes::within && r < L) return fmt::format("row {}: within, but only {} steps", row, r);
    for (std::size_t t = 0; t < L; ++t) {
      const bool in = t < r;
      if (b.valid(row, t) != in) {
        return fmt::format("row {} (env {}, start {}): mask[{}] is {}, the model has {} steps", row, e, p, t,
                           b.valid(row, t), r);
      }
      if (in) {
        const std::string v = m.check_step(e, p + t, [&](std::size_t f) { return b.step(f, row, t); });
        if (!v.empty()) return fmt::format("row {} position {}: {}", row, t, v);
        continue;
      }
      for (std::size_t f = 0; f < schema.size(); ++f) {
        const std::byte* q = b.step(f, row, t);
        if (std::any_of(q, q + schema[f].bytes(), [](std::byte c) { return c != std::byte{0}; })) {
          return fmt::format("row {}: masked position {} of field '{}' not zero", row, t, schema[f].name);
        }
      }
    }
  }
  return "";
}

/// Checks every step of env `e` in [lo, head) as Inspector::read_steps copies it (all of them: nothing is pushed
/// meanwhile); "" when each is exact and the copy starts at the model's lo.
inline std::string check_read_steps(const Buffer& buf, const Model& m, uint64_t e) {
  const uint64_t lo = m.lo(e);
  const uint64_t head = m.head(e);
  const StepRecords r = read_steps(buf, e, 0, head);
  if (r.first_step != lo || r.count != head - lo) {
    return fmt::format("env {}: read_steps gave steps [{}, {}), the model has [{}, {})", e, r.first_step,
                       r.first_step + r.count, lo, head);
  }
  for (uint64_t i = 0; i < r.count; ++i) {
    const std::string v = m.check_step(e, lo + i, [&](std::size_t f) { return r.field(i, f).data(); });
    if (!v.empty()) return "read_steps: " + v;
  }
  return "";
}

/// Checks the Sampler's sizes against the model for every env: head, replay (from lo) and online.
inline std::string check_sizes(const Sampler& s, const Model& m) {
  for (uint64_t e = 0; e < m.num_envs(); ++e) {
    const EnvSizes z = s.sizes(e);
    const uint64_t h = m.head(e);
    if (z.head != h || z.replay != h - m.lo(e) || z.online != h - m.lo(e, View::online)) {
      return fmt::format("env {}: sizes head {} replay {} online {}, the model has head {} replay {} online {} "
                         "({} steps lost to overwritten frames)",
                         e, z.head, z.replay, z.online, h, h - m.lo(e), h - m.lo(e, View::online), m.lost(e));
    }
  }
  return "";
}

/// A buffer with stacked fields, every env leased by one Writer, the learner, and the model.
struct StackRig {
  StackRig(const std::string& tag, const std::vector<std::string>& stacked, uint64_t num_envs, uint64_t cap,
           CreateOptions options = {}, bool episodes = true)
      : guard(unique_name(tag)),
        buf(Buffer::create(guard.name(), num_envs, cap, stack_schema(stacked).schema,
                           episodes ? with_episodes(options) : options)),
        w(Writer::range(buf, 0, num_envs)),
        s(buf),
        m(stack_schema(stacked), num_envs, cap, options.stack_restarts),
        pending(num_envs, false),
        all(num_envs) {
    for (uint64_t e = 0; e < num_envs; ++e) all[e] = e;
  }
  // Episode fields by default (done and reward), unless the caller named others.
  static CreateOptions with_episodes(CreateOptions o) {
    if (o.episodes.empty()) o.episodes = {.done = "done", .reward = "reward"};
    return o;
  }
  void push(const std::vector<uint64_t>& envs, PushPath path, std::mt19937_64& gen, uint64_t one_in, bool flagless,
            bool priorities = false) {
    push_random(w, m, gen, pending, envs, path, one_in, flagless, priorities);
  }
  SegmentGuard guard;
  Buffer buf;
  Writer w;
  Sampler s;
  Model m;
  std::vector<bool> pending;
  std::vector<uint64_t> all;
};

// One sample call of the torture's kind `kind` (0-6: every sampling mode, then a peek of every env) into `batch`;
// false when the view was empty.
inline bool torture_sample(Sampler& learner, Rng& rng, SampleBatch& batch, int kind, std::size_t L, uint64_t num_envs) {
  try {
    if (kind == 0) learner.sample(View::replay, 64, L, static_cast<double>(rng() % 3), rng, batch);
    if (kind == 1) learner.sample_mixed(48, 16, L, 1.0, rng, batch);
    if (kind == 2) learner.sample(View::online, 32, L, 0.0, rng, batch);
    if (kind == 3) learner.sample_transitions(View::replay, 128, rng, batch);
    if (kind == 4) learner.sample(View::replay, 64, L, 1.0, rng, batch, {.episodes = Episodes::stop});
    if (kind == 5) learner.sample(View::replay, 32, 1 + L % 3, 0.0, rng, batch, {.episodes = Episodes::within});
    if (kind == 6) {
      std::vector<uint64_t> all(num_envs);
      for (uint64_t e = 0; e < num_envs; ++e) all[e] = e;
      learner.peek(all, batch);
    }
  } catch (const Error& e) {
    if (e.errc() != Errc::empty_view) throw;
    return false;
  }
  return true;
}

}  // namespace
