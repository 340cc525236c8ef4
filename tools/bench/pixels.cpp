// tools/bench/pixels.cpp: shmreplay_bench's pixels section and --atari-1e6 mode (pixels.hpp). Called by main.cpp.
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

#include "bench_support.hpp"
#include "detail/sampling/gather.hpp"
#include "detail/segment/rules.hpp"
#include "median_rate.hpp"
#include "plain_store.hpp"
#include "report.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay::bench {
namespace {

constexpr std::size_t kDepth = 4;
constexpr std::size_t kFrameBytes = 84 * 84;
constexpr std::size_t kFields = 4;  // obs, action, reward, done
constexpr const char* kStacked = "obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool";
constexpr const char* kUnstacked = "obs:u8[4,84,84] action:i32 reward:f32 done:bool";
constexpr const char* kFrame = "obs:u8[1,84,84] action:i32 reward:f32 done:bool";
constexpr std::size_t kTransitions = 256;                // rows per flat sample call
constexpr std::size_t kSequences = 32, kSequenceLength = 8;  // rows and steps per sequence sample call

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

std::vector<double> ratios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return r;
}

// The memcpy and gather references of a sample: rows of `length` steps at uniform random (env, start) positions
// of a PlainStore (splitmix64), copied per field with memcpy row by row, or all drawn first and copied by the
// Sampler's own gather loop (prefetching ahead).
class PlainSample {
 public:
  PlainSample(const PlainStore& store, uint64_t envs, std::size_t rows, std::size_t length, uint64_t seed)
      : store_(store), envs_(envs), rows_(rows), length_(length), mix_{seed}, gather_rows_(rows) {
    for (std::size_t f = 0; f < store.fields(); ++f) {
      base_.push_back(store.field(f));
      bytes_.push_back(store.field_bytes(f));
      out_.emplace_back(rows * length * store.field_bytes(f), std::byte{1});
      outs_.push_back(out_.back().data());
    }
  }
  uint64_t memcpy_rows() noexcept {
    const uint64_t cap = store_.capacity();
    for (std::size_t r = 0; r < rows_; ++r) {
      const uint64_t env = mix_.below(envs_);
      const uint64_t start = mix_.below(cap - length_ + 1);
      for (std::size_t f = 0; f < base_.size(); ++f) {
        std::memcpy(outs_[f] + r * length_ * bytes_[f], base_[f] + (env * cap + start) * bytes_[f],
                    length_ * bytes_[f]);
      }
    }
    clobber(outs_[0]);
    return rows_;
  }
  uint64_t gather_rows() noexcept {
    const uint64_t cap = store_.capacity();
    for (std::size_t r = 0; r < rows_; ++r) {
      const uint64_t env = mix_.below(envs_);
      const uint64_t start = mix_.below(cap - length_ + 1);
      gather_rows_[r] = {start, env, env * cap + start, start, length_, r};
    }
    detail::gather_fields(base_.data(), outs_.data(), bytes_.data(), base_.size(), length_, cap,
                          gather_rows_.data(), rows_, true);
    clobber(outs_[0]);
    return rows_;
  }

 private:
  const PlainStore& store_;
  uint64_t envs_;
  std::size_t rows_, length_;
  SplitMix mix_;
  std::vector<const std::byte*> base_;
  std::vector<std::size_t> bytes_;
  std::vector<std::vector<std::byte>> out_;
  std::vector<std::byte*> outs_;
  std::vector<detail::GatherRow> gather_rows_;
};

std::chrono::milliseconds warm_ms(const PixelConfig& c) { return std::chrono::milliseconds(c.quick ? 1 : 50); }

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

  const std::string prefix = fmt::format("shmreplay-bench-{}-pixels", ::getpid());
  OursStore ours_stacked(prefix + "-stacked", stacked, rep.envs, rep.capacity, Populate::always);
  OursStore ours_unstacked(prefix + "-unstacked", unstacked, rep.envs, rep.capacity, Populate::always);
  OursStore ours_frame(prefix + "-frame", frame, rep.envs, rep.capacity, Populate::always);
  OursStore ours_trusted(prefix + "-trusted", stacked, rep.envs, rep.capacity, Populate::always, true);
  OursStore ours_unstacked_episodes(prefix + "-unstacked-episodes", unstacked, rep.envs, rep.capacity,
                                    Populate::always, true);
  PlainPush plain(unstacked, rep.envs, rep.capacity);
  PlainPush plain_frame(frame, rep.envs, rep.capacity);
  rep.stacked_segment_bytes = ours_stacked.buffer.total_bytes();
  rep.unstacked_segment_bytes = ours_unstacked.buffer.total_bytes();
  // Every slot written once (the rings full, their frames wrapped), so that every store starts full and warm.
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

  if (c.push) {
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
          {prep(stack_in, ours_stacked.t), ours(ours_stacked, stack_in, false)},
          {prep(stack_in, ours_unstacked.t), ours(ours_unstacked, stack_in, false)},
          {prep(stack_in, plain.t), [&] { return plain.push(in(stack_in, plain.t, false), envs, cycle); }},
          {prep(frame_in, ours_frame.t), ours(ours_frame, frame_in, true)},
          {prep(frame_in, plain_frame.t),
           [&] { return plain_frame.push(in(frame_in, plain_frame.t, true), envs, cycle); }},
          {prep(stack_in, ours_trusted.t), ours(ours_trusted, stack_in, false)},
          {prep(stack_in, ours_unstacked_episodes.t), ours(ours_unstacked_episodes, stack_in, false)},
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

  if (c.sample) {
    Sampler s_stacked(ours_stacked.buffer);
    Sampler s_unstacked(ours_unstacked.buffer);
    Rng rng_stacked(1), rng_unstacked(1);
    SampleBatch out_stacked, out_unstacked;
    for (const bool sequences : {false, true}) {
      const std::size_t rows = sequences ? kSequences : kTransitions;
      const std::size_t length = sequences ? kSequenceLength : 1;
      PlainSample ref(plain.store, rep.envs, rows, length, 3);
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

// -- --atari-1e6 ----------------------------------------------------------------------------------------------------

namespace {

// A "Key:   N kB" line of a /proc file, in bytes (0 when absent).
uint64_t proc_kb(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size())) * 1024;
  }
  return 0;
}

std::string read_text(const char* path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The Rss of the mapping that starts at `base`, from /proc/self/smaps.
uint64_t mapping_rss(const void* base) {
  std::ifstream f("/proc/self/smaps");
  const std::string start = fmt::format("{:x}-", reinterpret_cast<uintptr_t>(base));
  std::string line;
  bool in = false;
  while (std::getline(f, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') != std::string::npos &&
        line.find(' ') > line.find('-')) {
      in = line.rfind(start, 0) == 0;
      continue;
    }
    if (in && line.rfind("Rss:", 0) == 0) return std::stoull(line.substr(4)) * 1024;
  }
  return 0;
}

uint64_t shm_used_bytes() {
  struct statvfs s {};
  if (::statvfs(shm_directory().c_str(), &s) != 0) return 0;
  return (s.f_blocks - s.f_bfree) * s.f_frsize;
}

double gb(uint64_t bytes) { return static_cast<double>(bytes) * 1e-9; }

}  // namespace

int run_atari_million(const AtariMillionConfig& c, const std::string& command) {
  using Clock = std::chrono::steady_clock;
  const Schema stacked = Schema::parse(kStacked);
  const Schema unstacked = Schema::parse(kUnstacked);
  const uint64_t steps_total = c.envs * c.capacity;
  const uint64_t unstacked_bytes = detail::plan_segment(c.envs, c.capacity, unstacked, 0, false, 0).total_bytes;
  const uint64_t memory_total = proc_kb(read_text("/proc/meminfo"), "MemTotal:");
  struct statvfs shm {};
  ::statvfs(shm_directory().c_str(), &shm);
  const uint64_t shm_size = shm.f_blocks * shm.f_frsize;

  const uint64_t rss_before = proc_kb(read_text("/proc/self/status"), "VmRSS:");
  const uint64_t shm_before = shm_used_bytes();
  const std::string name = fmt::format("shmreplay-bench-{}-atari1e6", ::getpid());
  fmt::print(stderr, "shmreplay_bench: --atari-1e6: creating {} x {} steps with `{}`\n", c.envs, c.capacity,
             stacked.to_string());
  auto t0 = Clock::now();
  Buffer buf = Buffer::create(name, c.envs, c.capacity, stacked,
                              {.populate = c.populate ? Populate::always : Populate::never});
  Buffer::remove(name);  // the mapping stays; nothing is left behind however this process ends
  const double create_s = std::chrono::duration<double>(Clock::now() - t0).count();

  const AtariSteps steps(c.envs, 256, 150, 450, 11);
  const double restarts = static_cast<double>(steps.restarts()) / static_cast<double>(c.envs * steps.steps());
  Writer w = Writer::range(buf, 0, c.envs);
  std::vector<uint64_t> ids(c.envs);
  for (uint64_t e = 0; e < c.envs; ++e) ids[e] = e;
  fmt::print(stderr, "shmreplay_bench: --atari-1e6: filling ({:.1f} GB segment)\n", gb(buf.total_bytes()));
  t0 = Clock::now();
  for (uint64_t s = 0; s < c.capacity; ++s) {
    w.push(std::span<const uint64_t>(ids), steps.batch(s % steps.steps()));
  }
  const double fill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // Once more the same number of steps into the full buffer: the rate of a buffer whose pages are all in.
  t0 = Clock::now();
  for (uint64_t s = 0; s < c.capacity; ++s) {
    w.push(std::span<const uint64_t>(ids), steps.batch((c.capacity + s) % steps.steps()));
  }
  const double refill_s = std::chrono::duration<double>(Clock::now() - t0).count();

  const uint64_t rss_full = proc_kb(read_text("/proc/self/status"), "VmRSS:");
  const uint64_t seg_rss = mapping_rss(&buf.segment().header());
  const uint64_t shm_full = shm_used_bytes();

  Sampler sampler(buf);
  uint64_t sampleable = 0;
  for (uint64_t e = 0; e < c.envs; ++e) sampleable += sampler.sizes(e).replay;
  Rng rng(5);
  SampleBatch out;
  // The reference: memcpy of the same output bytes (a stack's 4 frames per step) from random places of the
  // segment's frame rings: 256 stacks, or 32 runs of 8 stacks' bytes.
  const StackGeometry& st = buf.segment().stacks()[0];
  const std::byte* rings = buf.segment().frame_data(0);
  std::vector<std::byte> ref(kTransitions * kDepth * kFrameBytes);
  SplitMix mix{9};
  auto memcpy_ref = [&](std::size_t rows, std::size_t length) {
    const std::size_t bytes = length * kDepth * kFrameBytes;
    const uint64_t places = st.frames - length * kDepth + 1;
    for (std::size_t r = 0; r < rows; ++r) {
      const uint64_t env = mix.below(c.envs);
      std::memcpy(ref.data() + r * bytes, rings + (env * st.frames + mix.below(places)) * kFrameBytes, bytes);
    }
    clobber(ref.data());
    return uint64_t{rows};
  };
  fmt::print(stderr, "shmreplay_bench: --atari-1e6: sampling\n");
  const auto rates = interleaved_rates(c.seconds, c.trials, std::chrono::milliseconds(100),
                                       {[&] {
                                          sampler.sample_transitions(View::replay, kTransitions, rng, out);
                                          return uint64_t{kTransitions};
                                        },
                                        [&] { return memcpy_ref(kTransitions, 1); },
                                        [&] {
                                          sampler.sample(View::replay, kSequences, kSequenceLength, 1.0, rng, out);
                                          return uint64_t{kSequences};
                                        },
                                        [&] { return memcpy_ref(kSequences, kSequenceLength); }});
  const double flat = median(rates[0]);
  const double seq = median(rates[2]);
  const double flat_ref = median(rates[1]);
  const double seq_ref = median(rates[3]);
  const double flat_ratio = median(ratios(rates[0], rates[1]));
  const double seq_ratio = median(ratios(rates[2], rates[3]));

  const double step_gb = static_cast<double>(unstacked.step_bytes()) * 1e-9;
  if (c.json) {
    nlohmann::json j = {{"command", command},
                        {"schema", stacked.to_string()},
                        {"num_envs", c.envs},
                        {"capacity", c.capacity},
                        {"steps", steps_total},
                        {"segment_bytes", buf.total_bytes()},
                        {"unstacked_segment_bytes", unstacked_bytes},
                        {"memory_bytes", memory_total},
                        {"shm_bytes", shm_size},
                        {"create_s", create_s},
                        {"restarts_per_step", restarts},
                        {"fill_s", fill_s},
                        {"fill_steps_per_s", static_cast<double>(steps_total) / fill_s},
                        {"refill_steps_per_s", static_cast<double>(steps_total) / refill_s},
                        {"process_rss_before_bytes", rss_before},
                        {"process_rss_bytes", rss_full},
                        {"segment_rss_bytes", seg_rss},
                        {"shm_used_growth_bytes", shm_full - shm_before},
                        {"sampleable_steps", sampleable},
                        {"populated", c.populate},
                        {"transitions_rows_per_s", flat},
                        {"transitions_memcpy_rows_per_s", flat_ref},
                        {"transitions_over_memcpy", flat_ratio},
                        {"sequences_rows_per_s", seq},
                        {"sequences_memcpy_rows_per_s", seq_ref},
                        {"sequences_over_memcpy", seq_ratio}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("## shmreplay_bench --atari-1e6\n\n- command: `{}`\n", command);
  fmt::print("- buffer: `{}`, {} envs x {} steps = {} steps; Atari-like steps as in the pixels section (episodes of "
             "150 to 450 steps, {:.2f}% of the steps begin one), pushed {} envs per call\n\n",
             stacked.to_string(), c.envs, c.capacity, steps_total, 100 * restarts, c.envs);
  fmt::print("| figure | value |\n|---|---:|\n");
  fmt::print("| segment size (stacked) | {:.2f} GB ({:.0f} B per step) |\n", gb(buf.total_bytes()),
             static_cast<double>(buf.total_bytes()) / static_cast<double>(steps_total));
  fmt::print("| the same steps stored as pushed (unstacked `obs:u8[4,84,84]`) | {:.2f} GB: RAM {:.2f} GB, {} {:.2f} GB"
             " ({}) |\n",
             gb(unstacked_bytes), gb(memory_total), shm_directory(), gb(shm_size),
             unstacked_bytes > memory_total || unstacked_bytes > shm_size ? "does not fit" : "fits");
  fmt::print("| create{} | {:.2f} s |\n", c.populate ? " (pages populated: Populate::always)" : "", create_s);
  fmt::print("| fill, first pass{} | {:.1f} s, {} steps/s ({:.2f} GB/s pushed) |\n",
             c.populate ? "" : " (page faults included)", fill_s,
             num(static_cast<double>(steps_total) / fill_s), static_cast<double>(steps_total) / fill_s * step_gb);
  fmt::print("| fill, second pass (overwriting the full buffer) | {:.1f} s, {} steps/s ({:.2f} GB/s pushed) |\n",
             refill_s,
             num(static_cast<double>(steps_total) / refill_s), static_cast<double>(steps_total) / refill_s * step_gb);
  fmt::print("| segment resident (Rss of its mapping) | {:.2f} GB |\n", gb(seg_rss));
  fmt::print("| {} used, growth | {:.2f} GB |\n", shm_directory(), gb(shm_full - shm_before));
  fmt::print("| process resident (VmRSS; before creating: {:.0f} MB) | {:.2f} GB |\n", gb(rss_before) * 1e3,
             gb(rss_full));
  fmt::print("| sampleable steps (replay view) | {} of {} |\n", sampleable, steps_total);
  fmt::print("| sample 256 transitions | {} rows/s ({:.2f} GB/s out); memcpy of the same bytes from random places of "
             "the frames: {} rows/s; ours/memcpy {} |\n",
             num(flat), flat * step_gb, num(flat_ref), pct(flat_ratio));
  fmt::print("| sample 32 sequences of 8 | {} sequences/s ({} steps/s, {:.2f} GB/s out); memcpy: {} sequences/s; "
             "ours/memcpy {} |\n",
             num(seq), num(seq * kSequenceLength), seq * kSequenceLength * step_gb, num(seq_ref), pct(seq_ratio));
  fmt::print("\n{} trials of >= {:.2f} s per sample figure (median). The segment's name was removed right after "
             "creation; its memory goes with this process.\n",
             c.trials, c.seconds);
  return 0;
}

}  // namespace shmreplay::bench
