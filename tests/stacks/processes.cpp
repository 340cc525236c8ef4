// tests/stacks/processes.cpp: stacked fields under fire and through checkpoints. Writer processes push stamped
// stacked steps (episode resets with every padding, stacks that do not continue) by every push path, and are
// SIGKILLed at random moments and replaced (the replacement takes the leases over and goes on; its first step may or
// may not continue the dead writer's stack), while this process samples every way and checks every byte of every
// sampled stack; after the run, every stored step is exact and the views' bound is the frame-ring model's. Then the
// buffer, with steps lost to overwritten frames, is saved and loaded into a new segment and into an existing one:
// every loaded step exact, the lost ones absent. CI runs the torture for about two seconds; SHMREPLAY_SOAK_SECONDS=N
// runs it for N seconds.
// Part of test_stacks (tests/CMakeLists.txt); its helpers are in stacks_helpers.hpp.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "shmreplay/checkpoint.hpp"
#include "stacks_helpers.hpp"

namespace {

using TortureClock = std::chrono::steady_clock;

const std::vector<std::string> kTortureStacks = {"obs:u8[4,6,5]:stack=0", "mid:u16[3,2,5]:stack=1"};
// The same kinds of stacks compressed (layout 1.10, docs/design/compression.md), with frames large enough for the
// codecs to shrink (frame_byte's runs), in a byte budget that holds every frame the descriptors do: the views are
// the frame-ring model's, and every torn record a reader meets is refused and read again.
const std::vector<std::string> kCompressedStacks = {"obs:u8[4,24,24]:stack=0:lz4", "mid:u16[3,2,64]:stack=1:zstd=1"};
constexpr uint64_t kCompressedBudget = 16 << 20;

// What env e does at step s, a pure function of (e, s), so that a writer process needs no state to go on where a
// killed one stopped and the checker needs no record of what was pushed: about one step in four does not continue
// its predecessor's stack (an episode reset with one of the three paddings, whose previous step is flagged done, or
// a jump with no flag).
Move torture_move(uint64_t e, uint64_t s) {
  if (s == 0) return Move::reset_zeros;
  const uint64_t h = test::mix(e * 0x100000001b3ull + s * 0x9e3779b97f4a7c15ull + 12345);
  switch (h % 16) {
    case 0: return Move::reset_zeros;
    case 1: return Move::reset_repeat;
    case 2: return Move::reset_random;
    case 3: return Move::jump;
    default: return Move::cont;
  }
}

// Step s of env e: its frames (frame k of a K-stack is the newest frame of step s - (K - 1 - k), or, before the
// latest restart t <= s, t's padding frame at that position) and its done flag (the next step resets).
ModelStep torture_step(const StackSchema& sch, uint64_t e, uint64_t s) {
  ModelStep st;
  st.done = is_reset(torture_move(e, s + 1));
  for (std::size_t i = 0; i < sch.stacks.size(); ++i) {
    const uint64_t K = sch.stacks[i].depth;
    uint64_t t = s;  // the latest restart in (s - K + 1, s], if any
    bool restart = false;
    for (uint64_t back = 0; back < K && back <= s; ++back) {
      if (torture_move(e, s - back) != Move::cont) {
        t = s - back;
        restart = true;
        break;
      }
    }
    for (uint64_t k = 0; k < K; ++k) {
      const uint64_t behind = K - 1 - k;  // frame k shows step s - behind
      if (!restart || s - t >= behind) {
        st.stamps.push_back(frame_stamp(i, e, s - behind + 1));
        continue;
      }
      const uint64_t kt = k + (s - t);  // the position of this frame in t's stack
      switch (torture_move(e, t)) {
        case Move::reset_zeros: st.stamps.push_back(0); break;
        case Move::reset_repeat: st.stamps.push_back(frame_stamp(i, e, t + 1)); break;
        default: st.stamps.push_back(frame_stamp(i, e, (uint64_t{1} << 39) + t * 8 + kt)); break;
      }
    }
  }
  return st;
}

// The fields of step s of env e, each as one array.
std::vector<std::vector<std::byte>> torture_values(const StackSchema& sch, uint64_t e, uint64_t s) {
  const ModelStep st = torture_step(sch, e, s);
  std::vector<std::vector<std::byte>> out(sch.schema.size());
  for (std::size_t f = 0; f < out.size(); ++f) {
    out[f].resize(sch.schema[f].bytes());
    step_value(sch, e, s, st, f, out[f].data());
  }
  return out;
}

// The body of a writer process: lease `envs` (taking dead leases over), then push the envs' steps forever by every
// path (batched subsets in random order, push_one, reservations filled in place, some half-filled and held for a
// moment so that kills land inside, some abandoned). Never returns; the parent kills it.
[[noreturn]] void stack_writer_main(const std::string& name, const std::vector<std::string>& stacks,
                                   std::vector<uint64_t> envs, uint64_t seed) {
  try {
    const StackSchema sch = stack_schema(stacks);
    Buffer buf = Buffer::open(name, {.expected_schema = sch.schema});
    Writer writer(buf, envs);
    Rng rng(seed);
    for (;;) {
      const uint64_t mode = rng() % 8;
      if (mode < 4) {
        std::vector<uint64_t> ids;
        for (const uint64_t e : envs) {
          if (rng() % 2) ids.push_back(e);
        }
        std::shuffle(ids.begin(), ids.end(), rng);
        if (ids.empty()) continue;
        std::vector<std::vector<std::byte>> arrays(sch.schema.size());
        for (const uint64_t e : ids) {
          const auto v = torture_values(sch, e, writer.head(e));
          for (std::size_t f = 0; f < v.size(); ++f) arrays[f].insert(arrays[f].end(), v[f].begin(), v[f].end());
        }
        std::vector<FieldBytes> fields;
        for (const auto& a : arrays) fields.push_back({a.data(), a.size()});
        writer.push(std::span<const uint64_t>(ids), fields);
      } else if (mode < 6) {
        const uint64_t e = envs[rng() % envs.size()];
        const auto v = torture_values(sch, e, writer.head(e));
        std::vector<FieldBytes> fields;
        for (const auto& a : v) fields.push_back({a.data(), a.size()});
        writer.push_one(e, fields);
      } else {
        const uint64_t e = envs[rng() % envs.size()];
        StepSlot slot = writer.reserve(e);
        const auto v = torture_values(sch, e, slot.step());
        for (std::size_t f = 0; f < v.size(); ++f) {
          std::memcpy(slot.field(f).data(), v[f].data(), v[f].size());
          if (mode == 7 && f == 2) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        }
        if (rng() % 8 != 0) slot.commit();
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stack writer %d: %s\n", static_cast<int>(::getpid()), e.what());
  }
  ::_exit(3);  // only reached when the writer failed: the parent reports an exit instead of a kill
}

// Checks row `row` of `b` while writers run: a mask that is a prefix, no valid step at or past `head_after` (the
// env's head read after the call), every valid step exact (ids, rewards, flags, every frame of every stack), every
// masked step zero; with `stop`, no valid step after a done one. "" when sound.
std::string check_torture_row(const StackSchema& sch, const SampleBatch& b, std::size_t row, uint64_t head_after,
                              bool stop) {
  const uint64_t e = b.env_ids()[row];
  const uint64_t p = b.start_steps()[row];
  const std::optional<std::size_t> valid = test::mask_prefix(b, row);
  if (!valid) return fmt::format("env {} row from {}: mask has a hole", e, p);
  if (*valid == 0) return fmt::format("env {} row from {}: no valid step", e, p);
  if (p + *valid > head_after) return fmt::format("env {} row from {}: reaches past the head {}", e, p, head_after);
  for (std::size_t t = 0; t < b.sequence_length(); ++t) {
    if (t < *valid) {
      const ModelStep st = torture_step(sch, e, p + t);
      const std::string v = check_step_value(sch, e, p + t, st, [&](std::size_t f) { return b.step(f, row, t); });
      if (!v.empty()) return fmt::format("row {} position {}: {}", row, t, v);
      if (stop && st.done && t + 1 < *valid) return fmt::format("env {} row from {}: runs past a done step", e, p);
      continue;
    }
    for (std::size_t f = 0; f < sch.schema.size(); ++f) {
      const std::byte* q = b.step(f, row, t);
      if (std::any_of(q, q + sch.schema[f].bytes(), [](std::byte c) { return c != std::byte{0}; })) {
        return fmt::format("env {} row from {}: masked position {} not zero", e, p, t);
      }
    }
  }
  return "";
}

// The model of the torture's envs (of `stacks`) as the buffer holds them now (steps 0 .. head - 1 of each env, as
// pushed).
Model torture_model(const Buffer& buf, const std::vector<std::string>& stacks, uint64_t restarts) {
  Model m(stack_schema(stacks), buf.num_envs(), buf.capacity(), restarts);
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    const uint64_t head = segment_of(buf).env_control(e).head.load();
    for (uint64_t s = 0; s < head; ++s) m.record(e, torture_step(m.sch, e, s));
  }
  return m;
}

// Env e's stored steps (read_steps) are exact, up to its head, and start no earlier than the model's bound. "" when
// they are.
std::string check_stored_from(const Buffer& buf, const StackSchema& sch, const Model& m, uint64_t e) {
  const StepRecords r = read_steps(buf, e, 0, m.head(e));
  if (r.first_step + r.count != m.head(e) || r.first_step < m.lo(e)) {
    return fmt::format("env {}: read_steps gave steps [{}, {}), the model has [{}, {})", e, r.first_step,
                       r.first_step + r.count, m.lo(e), m.head(e));
  }
  for (uint64_t i = 0; i < r.count; ++i) {
    const uint64_t s = r.first_step + i;
    const std::string v = check_step_value(sch, e, s, torture_step(sch, e, s),
                                           [&](std::size_t f) { return r.field(i, f).data(); });
    if (!v.empty()) return v;
  }
  return "";
}

}  // namespace

namespace {

// Pushes step s of env e of the torture's stream with push_one.
void push_torture_step(Writer& w, const StackSchema& sch, uint64_t e, uint64_t s, uint64_t as_env) {
  const auto v = torture_values(sch, as_env, s);
  std::vector<FieldBytes> fields;
  for (const auto& a : v) fields.push_back({a.data(), a.size()});
  w.push_one(e, fields);
}

// What the stacked-field torture counts; the first violation's text.
struct StackTortureTotals {
  uint64_t rows = 0, calls = 0, violations = 0, kills = 0, lost = 0, save_dropped = 0;
  double save_s = 0;
  std::string first;
  void violation(const std::string& v, const char* where = "") {
    if (!v.empty() && violations++ == 0) first = where + v;
  }
};

// Right after a writer's kill nothing moves on its envs `envs`: what read_steps copies of them is exact, up to the
// head.
void check_killed_writers_envs(const Buffer& buf, const StackSchema& sch, const std::vector<uint64_t>& envs,
                               StackTortureTotals& t) {
  for (const uint64_t e : envs) {
    const uint64_t head = segment_of(buf).env_control(e).head.load();
    const StepRecords r = read_steps(buf, e, 0, head);
    CHECK(r.first_step + r.count == head);
    for (uint64_t i = 0; i < r.count; ++i) {
      const uint64_t s = r.first_step + i;
      t.violation(check_step_value(sch, e, s, torture_step(sch, e, s),
                                   [&](std::size_t f) { return r.field(i, f).data(); }),
                  "after a kill: ");
    }
  }
}

// A save while the writers push: each env's section is a state the env was in, every step of it exact.
void check_save_while_pushing(const Buffer& buf, const StackSchema& sch, uint64_t restarts, StackTortureTotals& t) {
  const std::string path = fmt::format("{}/stk-torture-{}.ckpt", std::filesystem::temp_directory_path().string(),
                                       ::getpid());
  SegmentGuard loaded(unique_name("stk-torture-load"));
  const auto t0 = TortureClock::now();
  const CheckpointInfo info = save_checkpoint(buf, path);
  t.save_s = std::chrono::duration<double>(TortureClock::now() - t0).count();
  (void)load_checkpoint(path, loaded.name());
  std::remove(path.c_str());
  // The load rebuilds the frames from the first saved step and leaves out the steps they do not fit: a full
  // window copied while its oldest steps' frames were intact may hold steps whose frames were overwritten by the
  // instant the window describes; the load leaves them out again (with the same reserve: as the source did then).
  const Buffer b = Buffer::open(loaded.name());
  Model l(sch, buf.num_envs(), buf.capacity(), restarts);
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    l.start_at(e, info.envs[e].first_step);
    for (uint64_t s = info.envs[e].first_step; s < info.envs[e].head; ++s) l.record(e, torture_step(sch, e, s));
    CAPTURE(e);
    CAPTURE(info.envs[e].first_step);
    CAPTURE(info.envs[e].head);
    CHECK(info.envs[e].steps > 0);
    t.violation(check_read_steps(b, l, e), "a save while writers push: ");
    t.save_dropped += l.lo(e) - info.envs[e].first_step;
  }
}

// The torture's writer processes on `buf`, killed at random and replaced, while `learner` samples every way and
// checks each row, for run_seconds(2.0) from `start` and at least 3 kills; then a save while they push.
void run_stack_torture(Buffer& buf, Sampler& learner, const std::vector<std::string>& stacks, uint64_t restarts,
                       TortureClock::time_point start, StackTortureTotals& t) {
  const StackSchema sch = stack_schema(stacks);
  const uint64_t num_envs = buf.num_envs();
  const std::size_t num_writers = 3;
  std::vector<std::vector<uint64_t>> slices(num_writers);
  for (uint64_t e = 0; e < num_envs; ++e) slices[e % num_writers].push_back(e);
  std::vector<pid_t> writers(num_writers);
  uint64_t seed = 1;
  for (std::size_t w = 0; w < num_writers; ++w) {
    writers[w] = test::spawn([&, w, s = seed++] { stack_writer_main(buf.name(), stacks, slices[w], s); });
  }
  REQUIRE(learner.wait(View::replay, num_envs, 10'000));
  Rng rng(7);
  SampleBatch batch;
  const auto deadline = start + std::chrono::duration_cast<TortureClock::duration>(
                                    std::chrono::duration<double>(test::run_seconds(2.0)));
  auto next_kill = TortureClock::now() + std::chrono::milliseconds(50);
  while (TortureClock::now() < deadline || t.kills < 3) {
    const std::size_t L = 1 + rng() % buf.capacity();
    const int kind = static_cast<int>(t.calls++ % 7);
    if (!torture_sample(learner, rng, batch, kind, L, num_envs)) continue;
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      ++t.rows;
      if (kind == 6 && !batch.valid(row, 0)) continue;  // peek of an env with no step yet
      t.violation(check_torture_row(sch, batch, row, learner.sizes(batch.env_ids()[row]).head, kind == 4 || kind == 5));
    }
    if (t.calls % 11 == 0) learner.reset_online_queue();
    if (TortureClock::now() >= next_kill) {
      const std::size_t w = rng() % num_writers;
      CHECK_MESSAGE(test::kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
      ++t.kills;
      check_killed_writers_envs(buf, sch, slices[w], t);
      writers[w] = test::spawn([&, w, s = seed++] { stack_writer_main(buf.name(), stacks, slices[w], s); });
      next_kill = TortureClock::now() + std::chrono::milliseconds(20 + rng() % 120);
    }
  }
  check_save_while_pushing(buf, sch, restarts, t);
  for (const pid_t pid : writers) CHECK(test::kill_and_reap(pid));
}

}  // namespace

namespace {

// The torture on one set of stacked fields (`stacks`: kTortureStacks, or kCompressedStacks in a byte budget that
// holds every frame the descriptors do).
void stack_torture(const std::vector<std::string>& stacks) {
  const bool compressed = &stacks == &kCompressedStacks;
  const auto start = TortureClock::now();
  const uint64_t num_envs = 6, capacity = 16, restarts = 1;
  const StackSchema sch = stack_schema(stacks);
  SegmentGuard guard(unique_name("stk-torture"));
  StackTortureTotals t;
  {
    Buffer buf = Buffer::create(guard.name(), num_envs, capacity, sch.schema,
                                {.episodes = {.done = "done", .reward = "reward"}, .stack_restarts = restarts,
                                 .compressed_bytes = compressed ? kCompressedBudget : 0});
    Sampler learner(buf);
    run_stack_torture(buf, learner, stacks, restarts, start, t);
    // A last writer takes every lease over and pushes one step per env, so that no env is left claimed mid-write:
    // then the views are exactly the model's (a killed write of step h raised the bound exactly as the replacement's
    // write of the same step does, the stacks being a function of the step).
    {
      Writer last = Writer::range(buf, 0, num_envs);
      for (uint64_t e = 0; e < num_envs; ++e) push_torture_step(last, sch, e, last.head(e), e);
    }
    Model m = torture_model(buf, stacks, restarts);
    for (uint64_t e = 0; e < num_envs; ++e) m.envs[e].online_start = segment_of(buf).env_control(e).online_start.load();
    if (!compressed) CHECK(check_sizes(learner, m) == "");
    uint64_t pushes = 0;
    for (uint64_t e = 0; e < num_envs; ++e) {
      CHECK((compressed ? check_stored_from(buf, sch, m, e) : check_read_steps(buf, m, e)) == "");
      t.lost += m.lost(e);
      pushes += m.head(e);
    }
    MESSAGE(fmt::format("3 writer processes, {} kills: {} pushes, {} sample calls, {} rows checked, {} retries, {} "
                        "steps lost to overwritten frames at the end, {} violations; {:.3f} s; a save while they "
                        "pushed took {:.3f} s, its load left out {} steps",
                        t.kills, pushes, t.calls, t.rows, learner.retries(), t.lost, t.violations,
                        std::chrono::duration<double>(TortureClock::now() - start).count(), t.save_s,
                        t.save_dropped));
  }
  CHECK_MESSAGE(t.violations == 0, t.first);
  CHECK(t.kills >= 3);
  CHECK(t.rows > 1000);
}

}  // namespace

TEST_CASE("writer processes pushing stacked steps, compressed or not, SIGKILLed at random moments and replaced: every "
          "sampled stack is exact, and afterwards every stored step and the views' bound are the frame-ring model's") {
  for (const std::vector<std::string>* stacks : {&kTortureStacks, &kCompressedStacks}) {
    CAPTURE(stacks->front());
    stack_torture(*stacks);
  }
}

namespace {

// The model of a load of a save of the buffer `m` models: each env's steps from its first saved step, frames
// starting over there, with `restarts`.
Model loaded_model(const Model& m, uint64_t restarts) {
  Model l(m.sch, m.envs.size(), m.capacity, restarts);
  for (uint64_t e = 0; e < m.envs.size(); ++e) {
    l.start_at(e, m.lo(e));
    for (uint64_t s = m.lo(e); s < m.head(e); ++s) l.record(e, torture_step(m.sch, e, s));
  }
  return l;
}

// `b`, loaded from a save of the buffer `m` models: its stored steps, sizes and sampled rows are `l`'s.
void check_loaded(Buffer& b, const Model& m, const Model& l) {
  for (uint64_t e = 0; e < m.envs.size(); ++e) {
    CHECK(segment_of(b).env_control(e).stacks_intact_from.load() == m.lo(e));
    CAPTURE(e);
    CHECK(segment_of(b).env_control(e).head.load() == m.head(e));
    CHECK(l.lo(e) == m.lo(e));  // the same reserve holds every saved step
    CHECK(check_read_steps(b, l, e) == "");
  }
  Sampler s(b);
  CHECK(check_sizes(s, l) == "");
  Rng rng(4);
  SampleBatch batch;
  for (int c = 0; c < 50; ++c) {
    s.sample(View::replay, 64, 1 + static_cast<std::size_t>(c) % b.capacity(), 1.0, rng, batch);
    const std::string v = check_rows(batch, l, View::replay, 0, batch.rows());
    REQUIRE_MESSAGE(v == "", v);
  }
}

}  // namespace

namespace {

// The checkpoint case on one set of stacked fields.
void stack_checkpoint(const std::vector<std::string>& stacks) {
  const uint64_t num_envs = 4, capacity = 16, restarts = 1;
  const StackSchema sch = stack_schema(stacks);
  SegmentGuard source(unique_name("stk-ckpt"));
  const std::string path = fmt::format("{}/stk-ckpt-{}.ckpt", std::filesystem::temp_directory_path().string(),
                                       ::getpid());
  struct FileGuard {
    std::string path;
    ~FileGuard() { std::remove(path.c_str()); }
  } file{path};
  Buffer buf = Buffer::create(source.name(), num_envs, capacity, sch.schema,
                              {.episodes = {.done = "done", .reward = "reward"}, .stack_restarts = restarts});
  {  // uneven heads: env e has 5 + 13 e steps (env 0 never wrapped)
    Writer w = Writer::range(buf, 0, num_envs);
    for (uint64_t e = 0; e < num_envs; ++e) {
      for (uint64_t s = 0; s < 5 + 13 * e; ++s) push_torture_step(w, sch, e, s, e);
    }
  }
  const Model m = torture_model(buf, stacks, restarts);
  uint64_t lost = 0;
  for (uint64_t e = 0; e < num_envs; ++e) lost += m.lost(e);
  REQUIRE(lost > 0);
  const CheckpointInfo saved = save_checkpoint(buf, path);
  CHECK(contains(saved.schema.to_string(), stacks.front()));  // a compressed field's codec with it
  CHECK(saved.schema == sch.schema);
  for (uint64_t e = 0; e < num_envs; ++e) {
    CAPTURE(e);
    CHECK(saved.envs[e].first_step == m.lo(e));  // the lost steps are not in the file
    CHECK(saved.envs[e].steps == m.head(e) - m.lo(e));
    CHECK(saved.envs[e].head == m.head(e));
  }
  {  // into a new name: created with the file's schema and geometry
    SegmentGuard fresh(unique_name("stk-load"));
    const LoadResult r = load_checkpoint(path, fresh.name());
    CHECK(r.created);
    Buffer b = Buffer::open(fresh.name());
    CHECK(b.schema() == sch.schema);
    Model l = loaded_model(m, 0);
    check_loaded(b, m, l);
    // Writers go on from the loaded frames: a step that continues the last loaded one stores one frame.
    Writer w = Writer::range(b, 0, num_envs);
    for (uint64_t i = 0; i < 3 * capacity; ++i) {
      const uint64_t e = i % num_envs;
      const uint64_t s = w.head(e);
      push_torture_step(w, sch, e, s, e);
      l.record(e, torture_step(sch, e, s));
    }
    for (uint64_t e = 0; e < num_envs; ++e) CHECK(check_read_steps(b, l, e) == "");
  }
  {  // into an existing buffer that holds other steps, with a larger reserve
    SegmentGuard existing(unique_name("stk-load"));
    Buffer b = Buffer::create(existing.name(), num_envs, capacity, sch.schema,
                              {.episodes = {.done = "done", .reward = "reward"}, .stack_restarts = 3});
    {
      Writer w = Writer::range(b, 0, num_envs);
      for (uint64_t e = 0; e < num_envs; ++e) {
        for (uint64_t s = 0; s < 40; ++s) {  // other envs' steps (env e + 1's), at other steps
          push_torture_step(w, sch, e, s + 3, (e + 1) % num_envs);
        }
      }
    }
    const CheckpointInfo info = load_checkpoint_into(b, path);
    CHECK(info.total_steps == saved.total_steps);
    check_loaded(b, m, loaded_model(m, 3));
    // And saved again from there: the same steps, compared decoded (a load numbers a compressed field's frames
    // anew, so their records' frame numbers differ).
    const std::string again = path + ".again";
    FileGuard file2{again}, file3{again + ".source"};
    const CheckpointInfo resaved = save_checkpoint(b, again, {.decode_compressed = true});
    const CheckpointInfo decoded = save_checkpoint(buf, again + ".source", {.decode_compressed = true});
    for (uint64_t e = 0; e < num_envs; ++e) {
      CHECK(resaved.envs[e].first_step == saved.envs[e].first_step);
      CHECK(resaved.envs[e].steps == saved.envs[e].steps);
      CHECK(resaved.envs[e].data_crc == decoded.envs[e].data_crc);
    }
  }
}

}  // namespace

TEST_CASE("a checkpoint of a stacked buffer with lost steps, compressed or not, loads into a new segment and into an "
          "existing one with every loaded stack exact and the lost steps absent") {
  for (const std::vector<std::string>* stacks : {&kTortureStacks, &kCompressedStacks}) {
    CAPTURE(stacks->front());
    stack_checkpoint(*stacks);
  }
}
