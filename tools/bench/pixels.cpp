// tools/bench/pixels.cpp: shmreplay_bench's pixels section (pixels.hpp), over the workload of atari_steps.hpp.
// Called by main.cpp.
#include "pixels.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "atari_steps.hpp"
#include "bench_support.hpp"
#include "detail/storage/gather.hpp"
#include "detail/segment/rules.hpp"
#include "median_rate.hpp"
#include "plain_sample.hpp"  // PlainSample, the sampling references
#include "plain_store.hpp"
#include "report.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay::bench {
namespace {

// A buffer with its name removed at once (the mapping stays: nothing is left behind however the process ends), a
// Writer leasing all its envs, and its place in the cycle of steps.
struct OursStore {
  Buffer buffer;
  Writer writer;
  std::vector<uint64_t> ids;
  std::size_t t = 0;  // the cycle step pushed next (batched and single pushes share it: every env's steps follow on)

  OursStore(const std::string& name, const Schema& schema, uint64_t envs, uint64_t capacity, Populate populate,
            bool trust_episodes = false)
      : buffer(create(name, schema, envs, capacity, populate, trust_episodes)),
        writer(Writer::range(buffer, 0, envs)),
        ids(envs) {
    for (uint64_t e = 0; e < envs; ++e) ids[e] = e;
  }
  // trust_episodes: done is the episode field, and a stacked schema gets StackContinuity::episodes; else no
  // episode fields (and the default rule, compare).
  static Buffer create(const std::string& name, const Schema& schema, uint64_t envs, uint64_t capacity,
                       Populate populate, bool trust_episodes) {
    CreateOptions o{.replace = true, .populate = populate};
    if (trust_episodes) {
      o.episodes = {.done = "done"};
      if (schema.find("obs") && schema[*schema.find("obs")].stacked()) o.stack_continuity = StackContinuity::episodes;
    }
    Buffer b = Buffer::create(name, envs, capacity, schema, o);
    Buffer::remove(name);
    return b;
  }
  // One batched push of `batch` (every env's step: cycle step t), then the next t. Returns the steps pushed.
  uint64_t push(std::span<const FieldBytes> batch, std::size_t cycle) {
    writer.push(std::span<const uint64_t>(ids), batch);
    if (++t == cycle) t = 0;
    return ids.size();
  }
  // The same step, one push_one per env.
  uint64_t push_each(std::span<const FieldBytes> batch, std::size_t cycle) {
    FieldBytes row[kFields];
    for (std::size_t e = 0; e < ids.size(); ++e) {
      for (std::size_t f = 0; f < kFields; ++f) {
        const std::size_t bytes = batch[f].bytes / ids.size();
        row[f] = {static_cast<const std::byte*>(batch[f].data) + e * bytes, bytes};
      }
      writer.push_one(e, std::span<const FieldBytes>(row, kFields));
    }
    if (++t == cycle) t = 0;
    return ids.size();
  }
};

// The memcpy reference of a push: the same rows into a PlainStore, per row and field.
struct PlainPush {
  PlainStore store;
  std::size_t t = 0;
  PlainPush(const Schema& schema, uint64_t envs, uint64_t capacity) : store(schema, envs, capacity) {}
  uint64_t push(std::span<const FieldBytes> batch, std::size_t envs, std::size_t cycle) {
    for (std::size_t e = 0; e < envs; ++e) store.push_row(e, batch.data(), e);
    if (++t == cycle) t = 0;
    return envs;
  }
};

// A batch of steps as an env worker has it right before its push: written just now (envpool's recv output, each
// env's stack copied by its frame stacker), so in this core's cache. load() is the env's part, outside the clock.
class Staged {
 public:
  Staged(const AtariSteps& steps, bool newest) : newest_(newest) {
    const std::span<const FieldBytes> b = steps.batch(0, newest);
    for (std::size_t f = 0; f < kFields; ++f) {
      data_[f].resize(b[f].bytes);
      fields_[f] = {data_[f].data(), b[f].bytes};
    }
  }
  void load(const AtariSteps& steps, std::size_t t) noexcept {
    const std::span<const FieldBytes> b = steps.batch(t, newest_);
    for (std::size_t f = 0; f < kFields; ++f) std::memcpy(data_[f].data(), b[f].data, b[f].bytes);
    clobber(data_[0].data());
  }
  std::span<const FieldBytes> batch() const noexcept { return {fields_, kFields}; }

 private:
  bool newest_;
  std::vector<std::byte> data_[kFields];
  FieldBytes fields_[kFields];
};


std::chrono::milliseconds warm_ms(const PixelConfig& c) { return std::chrono::milliseconds(c.quick ? 1 : 50); }

}  // namespace

namespace {

// The stores the pixels section measures, every slot written once (the rings full, their frames wrapped), so that
// every store starts full and warm.
struct PixelStores {
  OursStore ours_stacked, ours_unstacked, ours_frame, ours_trusted, ours_unstacked_episodes;
  PlainPush plain, plain_frame;

  PixelStores(const std::string& prefix, const PixelReport& rep, const AtariSteps& steps)
      : ours_stacked(prefix + "-stacked", Schema::parse(kStacked), rep.envs, rep.capacity, Populate::always),
        ours_unstacked(prefix + "-unstacked", Schema::parse(kUnstacked), rep.envs, rep.capacity, Populate::always),
        ours_frame(prefix + "-frame", Schema::parse(kFrame), rep.envs, rep.capacity, Populate::always),
        ours_trusted(prefix + "-trusted", Schema::parse(kStacked), rep.envs, rep.capacity, Populate::always, true),
        ours_unstacked_episodes(prefix + "-unstacked-episodes", Schema::parse(kUnstacked), rep.envs, rep.capacity,
                                Populate::always, true),
        plain(Schema::parse(kUnstacked), rep.envs, rep.capacity),
        plain_frame(Schema::parse(kFrame), rep.envs, rep.capacity) {
    const std::size_t cycle = steps.steps();
    for (uint64_t s = 0; s < rep.capacity + rep.cycle_steps; ++s) {
      ours_stacked.push(steps.batch(ours_stacked.t), cycle);
      ours_unstacked.push(steps.batch(ours_unstacked.t), cycle);
      ours_frame.push(steps.batch(ours_frame.t, true), cycle);
      ours_trusted.push(steps.batch(ours_trusted.t), cycle);
      ours_unstacked_episodes.push(steps.batch(ours_unstacked_episodes.t), cycle);
      plain.push(steps.batch(plain.t), rep.envs, cycle);
      plain_frame.push(steps.batch(plain_frame.t, true), rep.envs, cycle);
    }
  }
};

// The push rows: every store's push, batched, single and batched from memory, interleaved.
void measure_pixel_pushes(const PixelConfig& c, PixelReport& rep, const AtariSteps& steps, PixelStores& st) {
  const std::size_t cycle = steps.steps();
  Staged stack_in(steps, false), frame_in(steps, true);
  const std::size_t envs = rep.envs;
  for (const char* mode : {"batched", "single", "batched, input from memory"}) {
    const bool single = std::string(mode) == "single";
    const bool cold = std::string(mode) != "batched" && !single;
    // Each case's input: its store's next cycle step, staged (in cache) or straight from the cycle (which is far
    // larger than the caches: every input byte comes from memory).
    auto in = [&](Staged& staged, std::size_t t, bool newest) {
      return cold ? steps.batch(t, newest) : staged.batch();
    };
    auto prep = [&](Staged& staged, const std::size_t& t) -> std::function<void()> {
      if (cold) return [] {};
      return [&staged, &t, &steps] { staged.load(steps, t); };
    };
    auto ours = [&](OursStore& store, Staged& staged, bool newest) -> std::function<uint64_t()> {
      return [&, newest] {
        const auto b = in(staged, store.t, newest);
        return single ? store.push_each(b, cycle) : store.push(b, cycle);
      };
    };
    const std::vector<PreparedOp> ops = {
        {prep(stack_in, st.ours_stacked.t), ours(st.ours_stacked, stack_in, false)},
        {prep(stack_in, st.ours_unstacked.t), ours(st.ours_unstacked, stack_in, false)},
        {prep(stack_in, st.plain.t), [&] { return st.plain.push(in(stack_in, st.plain.t, false), envs, cycle); }},
        {prep(frame_in, st.ours_frame.t), ours(st.ours_frame, frame_in, true)},
        {prep(frame_in, st.plain_frame.t),
         [&] { return st.plain_frame.push(in(frame_in, st.plain_frame.t, true), envs, cycle); }},
        {prep(stack_in, st.ours_trusted.t), ours(st.ours_trusted, stack_in, false)},
        {prep(stack_in, st.ours_unstacked_episodes.t), ours(st.ours_unstacked_episodes, stack_in, false)},
    };
    const auto r = interleaved_prepared_rates(c.seconds, c.trials, warm_ms(c), ops);  // steps/s
    PixelPush p;
    p.mode = mode;
    p.stacked_ns = 1e9 / median(r[0]);
    p.unstacked_ns = 1e9 / median(r[1]);
    p.memcpy_ns = 1e9 / median(r[2]);
    p.frame_ns = 1e9 / median(r[3]);
    p.memcpy_frame_ns = 1e9 / median(r[4]);
    p.trusted_ns = 1e9 / median(r[5]);
    p.trusted_over_unstacked = median(ratios(r[1], r[5]));
    p.unstacked_episodes_ns = 1e9 / median(r[6]);
    p.trusted_over_unstacked_episodes = median(ratios(r[6], r[5]));
    // Time over time = rate over rate, the other way round.
    p.stacked_over_unstacked = median(ratios(r[1], r[0]));
    p.stacked_over_memcpy = median(ratios(r[2], r[0]));
    p.stacked_over_frame = median(ratios(r[3], r[0]));
    p.stacked_over_memcpy_frame = median(ratios(r[4], r[0]));
    rep.push.push_back(p);
  }
}

// The sample rows: transitions and sequences from the stacked and unstacked stores, against memcpy and the gather.
void measure_pixel_samples(const PixelConfig& c, PixelReport& rep, PixelStores& st) {
  Sampler s_stacked(st.ours_stacked.buffer);
  Sampler s_unstacked(st.ours_unstacked.buffer);
  Rng rng_stacked(1), rng_unstacked(1);
  SampleBatch out_stacked, out_unstacked;
  for (const bool sequences : {false, true}) {
    const std::size_t rows = sequences ? kSequences : kTransitions;
    const std::size_t length = sequences ? kSequenceLength : 1;
    PlainSample ref(st.plain.store, rep.envs, rows, length, 3);
    auto ours = [&](Sampler& s, Rng& rng, SampleBatch& out) {
      s.sample(View::replay, rows, length, sequences ? 1.0 : 0.0, rng, out);
      return uint64_t{rows};
    };
    std::vector<std::function<uint64_t()>> ops = {
        [&] { return ours(s_stacked, rng_stacked, out_stacked); },
        [&] { return ours(s_unstacked, rng_unstacked, out_unstacked); },
        [&] { return ref.memcpy_rows(); },
        [&] { return ref.gather_rows(); },
    };
    const auto r = interleaved_rates(c.seconds, c.trials, warm_ms(c), ops);  // rows/s
    PixelSample p;
    p.kind = sequences ? "sequences" : "transitions";
    p.rows = rows;
    p.length = length;
    p.stacked = median(r[0]);
    p.unstacked = median(r[1]);
    p.memcpy = median(r[2]);
    p.gather = median(r[3]);
    p.stacked_over_memcpy = median(ratios(r[0], r[2]));
    p.stacked_over_unstacked = median(ratios(r[0], r[1]));
    p.stacked_over_gather = median(ratios(r[0], r[3]));
    p.unstacked_over_memcpy = median(ratios(r[1], r[2]));
    rep.sample.push_back(p);
  }
  for (uint64_t e = 0; e < rep.envs; ++e) {
    const EnvSizes z = s_stacked.sizes(e);
    rep.stacked_sampleable += z.replay;
    rep.stacked_stored += std::min(z.head, rep.capacity);
  }
}

}  // namespace

PixelReport measure_pixels(const PixelConfig& c) {
  PixelReport rep;
  rep.envs = c.quick ? 4 : 8;  // one writer's envs in shmreplay_bench; a batched push writes all of them
  rep.capacity = c.quick ? 128 : 2048;
  rep.cycle_steps = c.quick ? 64 : 512;
  rep.episode_min = c.quick ? 10 : 150;
  rep.episode_max = c.quick ? 40 : 450;
  const Schema stacked = Schema::parse(kStacked);
  const Schema unstacked = Schema::parse(kUnstacked);
  const Schema frame = Schema::parse(kFrame);
  rep.stacked_schema = stacked.to_string();
  rep.unstacked_schema = unstacked.to_string();
  rep.frame_schema = frame.to_string();
  rep.step_bytes = unstacked.step_bytes();

  const AtariSteps steps(rep.envs, rep.cycle_steps, rep.episode_min, rep.episode_max, 7);
  const double pushed = static_cast<double>(rep.envs * rep.cycle_steps);
  rep.restarts_per_step = static_cast<double>(steps.restarts()) / pushed;
  // Per step: its new frames (1, or 4 at a restart), its frame-index word and its other fields.
  rep.stored_bytes_per_step = (1 + (kDepth - 1) * rep.restarts_per_step) * kFrameBytes + 8 +
                              static_cast<double>(frame.step_bytes() - kFrameBytes);
  PixelStores st(fmt::format("shmreplay-bench-{}-pixels", ::getpid()), rep, steps);
  rep.stacked_segment_bytes = st.ours_stacked.buffer.total_bytes();
  rep.unstacked_segment_bytes = st.ours_unstacked.buffer.total_bytes();
  if (c.push) measure_pixel_pushes(c, rep, steps, st);
  if (c.sample) measure_pixel_samples(c, rep, st);
  return rep;
}

void print_pixels_markdown(const PixelReport& r, const PixelConfig& c) {
  auto ns = [](double x) { return fmt::format("{:.0f}", x); };
  auto times = [](double x) { return fmt::format("{:.2f}x", x); };
  fmt::print("### Pixels: stacked Atari-like steps (one process, interleaved trials)\n\n");
  fmt::print("- stacked: `{}`; today's layout: `{}` ({} B per step as pushed); one frame: `{}`\n", r.stacked_schema,
             r.unstacked_schema, r.step_bytes, r.frame_schema);
  fmt::print("- {} envs x {} steps per store (stacked segment {:.1f} MB, unstacked {:.1f} MB); steps: a cycle of {} "
             "steps per env pushed over and over, episodes of {} to {} steps (uniform), padding zeros (even envs) "
             "or the first frame (odd envs), frames of random bytes: {:.2f}% of the pushed steps begin an episode\n",
             r.envs, r.capacity, static_cast<double>(r.stacked_segment_bytes) * 1e-6,
             static_cast<double>(r.unstacked_segment_bytes) * 1e-6, r.cycle_steps, r.episode_min, r.episode_max,
             100 * r.restarts_per_step);
  fmt::print("- bytes stored per pushed step: stacked {:.0f} (frames, frame-index word, other fields), unstacked {} "
             "({:.2f}x)\n",
             r.stored_bytes_per_step, r.step_bytes, r.stored_bytes_per_step / static_cast<double>(r.step_bytes));
  fmt::print("- {} interleaved trials of >= {:.2f} s per case; ns/step and rows/s are medians, ratios the median of "
             "the per-trial ratios\n\n",
             c.trials, c.seconds);
  if (!r.push.empty()) {
    fmt::print("#### Push ({} envs per batched call; single: push_one per env)\n\n", r.envs);
    fmt::print("The input of a push is staged first, outside the clock, as an env worker has it (just written by its "
               "envs' frame stackers: in cache), except in the \"input from memory\" row, where it comes straight "
               "from the {} MB cycle of steps. one frame: the unstacked push of `{}` with the newest frame of each "
               "stack (the stacked push less its continuity compare and frame bookkeeping).\n\n",
               r.envs * r.cycle_steps * r.step_bytes / 1000000, r.frame_schema);
    fmt::print("| push | stacked ns/step | unstacked ns/step | memcpy {} B ns/step | stacked/unstacked time | "
               "stacked/memcpy time | one frame ns/step | stacked/one frame time | memcpy {} B ns/step | "
               "stacked/memcpy {} B time | stacked, episodes rule ns/step | episodes rule/unstacked time | "
               "unstacked, episode field ns/step | episodes rule/unstacked with episode field time |\n"
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
               r.step_bytes, kFrameBytes + 9, kFrameBytes + 9);
    for (const PixelPush& p : r.push) {
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", p.mode,
                 ns(p.stacked_ns), ns(p.unstacked_ns), ns(p.memcpy_ns), times(p.stacked_over_unstacked),
                 times(p.stacked_over_memcpy), ns(p.frame_ns), times(p.stacked_over_frame), ns(p.memcpy_frame_ns),
                 times(p.stacked_over_memcpy_frame), ns(p.trusted_ns), times(p.trusted_over_unstacked),
                 ns(p.unstacked_episodes_ns), times(p.trusted_over_unstacked_episodes));
    }
    fmt::print("\n");
  }
  if (!r.sample.empty()) {
    fmt::print("#### Sample (no writer; replay view; memcpy and gather copy the same output bytes from random places "
               "of an unstacked store)\n\n");
    fmt::print("| sample | rows x steps | stacked rows/s | stacked GB/s | unstacked rows/s | memcpy rows/s | gather "
               "rows/s | stacked/memcpy | stacked/unstacked | stacked/gather | unstacked/memcpy |\n"
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const PixelSample& p : r.sample) {
      const double gbs = p.stacked * static_cast<double>(p.length * r.step_bytes) * 1e-9;
      fmt::print("| {} | {} x {} | {} | {:.2f} | {} | {} | {} | {} | {} | {} | {} |\n", p.kind, p.rows, p.length,
                 num(p.stacked), gbs, num(p.unstacked), num(p.memcpy), num(p.gather), pct(p.stacked_over_memcpy),
                 pct(p.stacked_over_unstacked), pct(p.stacked_over_gather), pct(p.unstacked_over_memcpy));
    }
    fmt::print("\nSampleable steps of the stacked store after the run: {} of {} stored.\n\n", r.stacked_sampleable,
               r.stacked_stored);
  }
  if (!r.push.empty() || !r.sample.empty()) {
    fmt::print("#### Pixel targets (issue 32)\n\n| target | case | measured | verdict |\n|---|---|---:|---|\n");
    for (const PixelPush& p : r.push) {
      fmt::print("| stacked push <= 0.35x today's time (about a quarter) | {} | {} | {} |\n", p.mode,
                 times(p.stacked_over_unstacked), p.stacked_over_unstacked <= 0.35 ? "met" : "**missed**");
    }
    for (const PixelPush& p : r.push) {
      fmt::print("| stacked push, episodes rule, <= 0.35x today's time (with the same episode field) | {} | {} | {} "
                 "|\n",
                 p.mode, times(p.trusted_over_unstacked_episodes),
                 p.trusted_over_unstacked_episodes <= 0.35 ? "met" : "**missed**");
    }
    for (const PixelSample& p : r.sample) {
      const double worst = std::min(p.stacked_over_memcpy, p.stacked_over_unstacked);
      fmt::print("| stacked sample >= 90% of memcpy and of today's layout | {} | {} / {} | {} |\n", p.kind,
                 pct(p.stacked_over_memcpy), pct(p.stacked_over_unstacked), worst >= 0.9 ? "met" : "**missed**");
    }
    fmt::print("\n");
  }
}

nlohmann::json pixels_json(const PixelReport& r) {
  nlohmann::json j = {{"stacked_schema", r.stacked_schema},
                      {"unstacked_schema", r.unstacked_schema},
                      {"frame_schema", r.frame_schema},
                      {"num_envs", r.envs},
                      {"capacity", r.capacity},
                      {"cycle_steps", r.cycle_steps},
                      {"episode_steps", {r.episode_min, r.episode_max}},
                      {"step_bytes", r.step_bytes},
                      {"restarts_per_step", r.restarts_per_step},
                      {"stored_bytes_per_step", r.stored_bytes_per_step},
                      {"stacked_segment_bytes", r.stacked_segment_bytes},
                      {"unstacked_segment_bytes", r.unstacked_segment_bytes},
                      {"stacked_sampleable_steps", r.stacked_sampleable},
                      {"stacked_stored_steps", r.stacked_stored}};
  nlohmann::json push = nlohmann::json::array();
  for (const PixelPush& p : r.push) {
    push.push_back({{"mode", p.mode},
                    {"stacked_ns_per_step", p.stacked_ns},
                    {"unstacked_ns_per_step", p.unstacked_ns},
                    {"memcpy_ns_per_step", p.memcpy_ns},
                    {"one_frame_ns_per_step", p.frame_ns},
                    {"memcpy_one_frame_ns_per_step", p.memcpy_frame_ns},
                    {"stacked_over_unstacked_time", p.stacked_over_unstacked},
                    {"stacked_over_memcpy_time", p.stacked_over_memcpy},
                    {"stacked_over_one_frame_time", p.stacked_over_frame},
                    {"stacked_over_memcpy_one_frame_time", p.stacked_over_memcpy_frame},
                    {"episodes_rule_ns_per_step", p.trusted_ns},
                    {"episodes_rule_over_unstacked_time", p.trusted_over_unstacked},
                    {"unstacked_episode_field_ns_per_step", p.unstacked_episodes_ns},
                    {"episodes_rule_over_unstacked_episode_field_time", p.trusted_over_unstacked_episodes}});
  }
  nlohmann::json sample = nlohmann::json::array();
  for (const PixelSample& p : r.sample) {
    sample.push_back({{"kind", p.kind},
                      {"rows", p.rows},
                      {"sequence_length", p.length},
                      {"stacked_rows_per_s", p.stacked},
                      {"unstacked_rows_per_s", p.unstacked},
                      {"memcpy_rows_per_s", p.memcpy},
                      {"gather_rows_per_s", p.gather},
                      {"stacked_over_memcpy", p.stacked_over_memcpy},
                      {"stacked_over_unstacked", p.stacked_over_unstacked},
                      {"stacked_over_gather", p.stacked_over_gather},
                      {"unstacked_over_memcpy", p.unstacked_over_memcpy}});
  }
  j["push"] = push;
  j["sample"] = sample;
  return j;
}


}  // namespace shmreplay::bench
