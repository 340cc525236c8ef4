// tools/bench/compressed_store.hpp: a buffer fed with recorded real frames (recorded_feed.hpp) for the compressed
// storage benchmark (compressed.cpp, compressed_million.cpp): its Writer, Sampler and feed; the fill, the check of its
// newest steps against the file's stacks, and its counters. Also the --atari-1e6 mode's options (compressed_million).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "detail/segment/rules.hpp"
#include "recorded_feed.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay::bench {

/// The compressed fields' byte budget (CreateOptions::compressed_bytes) that makes a segment of `envs` x `capacity`
/// steps of `schema` at most `segment_bytes` long (0 when not even its other sections fit), from the segment's plan.
inline uint64_t budget_for_segment(uint64_t envs, uint64_t capacity, const Schema& schema, uint64_t segment_bytes) {
  const auto total = [&](uint64_t b) {
    return detail::plan_segment(envs, capacity, schema, 0, false, 0, 1, {.bytes = b}).total_bytes;
  };
  const uint64_t probe = envs << 20;
  const uint64_t fixed = total(probe) - std::min(total(probe), probe);
  uint64_t b = segment_bytes > fixed ? segment_bytes - fixed : 0;
  while (b > 0 && total(b) > segment_bytes) b -= std::min<uint64_t>(b, envs * 4096);
  return b;
}

/// How a RecordedStore's buffer is created.
struct StoreOptions {
  uint64_t compressed_bytes = 0;  ///< CreateOptions::compressed_bytes (0: the default budget)
  Populate populate = Populate::always;
};

/// A store's figures from its segment's counters (Inspector::snapshot).
struct StoreCounters {
  double bytes_per_step = 0;   ///< stored_bytes_per_step: the replay view's bytes over its steps
  double ratio = 0;            ///< the steps' bytes as pushed over bytes_per_step
  uint64_t lost = 0;           ///< steps lost to the byte budget
  uint64_t segment_bytes = 0;  ///< the file's size
  uint64_t stored_steps = 0;   ///< steps in the replay views
  uint64_t record_bytes = 0;   ///< compressed: bytes of every record stored since creation
  uint64_t frames = 0;         ///< compressed: frames stored since creation
};

/// A named buffer of recorded_schema(obs_options) (its name removed when it is destroyed), a Writer of all its envs
/// fed by a RecordedFeed, and a Sampler. One thread.
class RecordedStore {
 public:
  RecordedStore(const std::string& name, const std::string& schema, uint64_t envs, uint64_t capacity,
                const std::vector<const Recording*>& recordings, const StoreOptions& options)
      : guard_(name),
        buffer_(Buffer::create(name, envs, capacity, Schema::parse(schema),
                               {.replace = true, .compressed_bytes = options.compressed_bytes,
                                .populate = options.populate})),
        writer_(Writer::range(buffer_, 0, envs)),
        sampler_(buffer_),
        feed_(recordings, envs),
        ids_(envs),
        rng_(7) {
    for (uint64_t e = 0; e < envs; ++e) ids_[e] = e;
  }

  Buffer& buffer() noexcept { return buffer_; }
  RecordedFeed& feed() noexcept { return feed_; }
  const std::string& name() const noexcept { return guard_.name; }

  /// Pushes the feed's current step of every env; returns the envs.
  uint64_t push() {
    writer_.push(std::span<const uint64_t>(ids_), feed_.batch());
    return ids_.size();
  }
  /// Pushes `steps` more steps of every env; returns the steps per second (every env's), feed included.
  double fill(uint64_t steps, const std::function<void(uint64_t done)>& progress = {}) {
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t s = 0; s < steps; ++s) {
      feed_.next();
      push();
      if (progress && (s + 1) % 4096 == 0) progress(s + 1);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(steps * ids_.size()) / secs;
  }
  /// Reads every env's newest `n` steps back (read_steps) and compares their obs with the file's stacks; throws
  /// std::runtime_error naming the env and step that differs.
  void check_newest(uint64_t n) const {
    std::vector<std::byte> want(feed_.step_obs_bytes());
    for (uint64_t e = 0; e < ids_.size(); ++e) {
      const uint64_t made = feed_.made(), first = made > n ? made - n : 0;
      const StepRecords got = read_steps(buffer_, e, first, made - first);
      if (got.count != made - first) {
        throw std::runtime_error(fmt::format("{}: env {}: read {} of its newest {} steps", name(), e, got.count, n));
      }
      for (uint64_t i = 0; i < got.count; ++i) {
        feed_.stack(e, got.first_step + i, want.data());
        const auto obs = got.field(i, 0);
        if (obs.size() != want.size() || std::memcmp(obs.data(), want.data(), want.size()) != 0) {
          throw std::runtime_error(fmt::format("{}: env {} step {}: obs differs from the recorded stack", name(), e,
                                               got.first_step + i));
        }
      }
    }
  }
  /// The segment's counters now.
  StoreCounters counters() const {
    const SegmentInfo info = Inspector(name()).snapshot();
    StoreCounters c;
    c.bytes_per_step = stored_bytes_per_step(info);
    c.ratio = c.bytes_per_step > 0 ? static_cast<double>(info.step_bytes) / c.bytes_per_step : 0;
    c.lost = info.steps_lost_to_budget;
    c.segment_bytes = info.total_bytes;
    c.stored_steps = info.replay_steps;
    for (const CompressedFieldInfo& f : info.compressed) c.record_bytes += f.record_bytes, c.frames += f.frames;
    return c;
  }
  /// `rows` sequences of `length` steps from the replay view (weights length^1); returns rows.
  uint64_t sample_sequences(std::size_t rows, std::size_t length) {
    sampler_.sample(View::replay, rows, length, 1.0, rng_, seq_);
    return rows;
  }
  /// `rows` transitions from the replay view; returns rows.
  uint64_t sample_transitions(std::size_t rows) {
    sampler_.sample_transitions(View::replay, rows, rng_, flat_);
    return rows;
  }

 private:
  RemoveBuffer guard_;
  Buffer buffer_;
  Writer writer_;
  Sampler sampler_;
  RecordedFeed feed_;
  std::vector<uint64_t> ids_;
  SampleBatch seq_, flat_;
  Rng rng_;
};

/// shmreplay_bench_compressed --atari-1e6 (compressed_million.cpp): 10^6 Atari steps (16 envs x 62,500) filled from
/// the recorded frames through the Writer and sampled, per game and codec, in a segment of at most --budget-bytes.
struct MillionOptions {
  bool enabled = false;
  uint64_t envs = 16, capacity = 62500, segment_bytes = 1000000000;
  std::string codecs = "lz4,zstd=3";
  double seconds = 0.5;
  uint32_t trials = 5;

  void add_to(CLI::App& app) {
    app.add_flag("--atari-1e6", enabled, "The goal figure: 16 x 62,500 steps per game and codec in --segment-bytes");
    app.add_option("--million-envs", envs, "--atari-1e6: envs (default 16)")->check(CLI::Range(1, 4096));
    app.add_option("--million-capacity", capacity, "--atari-1e6: steps per env (default 62500)")
        ->check(CLI::Range(64, 1 << 24));
    app.add_option("--segment-bytes", segment_bytes, "--atari-1e6: the most bytes of the segment (default 10^9)");
    app.add_option("--codecs", codecs, "--atari-1e6: obs codecs, comma-separated (default lz4,zstd=3)");
  }
  void quick_defaults(const QuickDefaults& given) {
    given("--million-envs", envs, 2);
    given("--million-capacity", capacity, 256);
    given("--segment-bytes", segment_bytes, 1000000);
    seconds = 0.01, trials = 1;
  }
};
int run_million(const MillionOptions& options, const std::string& frames, const std::string& games,
                const std::string& command);

}  // namespace shmreplay::bench
