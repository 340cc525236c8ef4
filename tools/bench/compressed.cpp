// shmreplay_bench_compressed: the compressed storage kind on real Atari frames (docs/benchmarks/compression.md,
// "The storage on real frames"; issue 45). One process, one thread. Per game of the recorded frames
// (tools/frames/record_atari.py) and per storage of obs (stacked only, `:lz4`, `:zstd=1`, `:zstd=3`), a buffer of
// --envs x --capacity steps is filled through a Writer from the recorded frames (each step's stack rebuilt exactly
// from the file, the envs replaying the file cyclically: recorded_feed.hpp), its newest steps are read back and
// compared with the file's stacks, and then, in interleaved trials (medians):
//   - bytes per stored step (the segment's counters: stored_bytes over the replay view's steps) and the ratio;
//   - push cost per step: a batched push of every env's next step, against memcpy of the same bytes;
//   - sample rates: 32 sequences of 32 steps, and 256 transitions, against memcpy of the same output bytes from
//     random places of the stacked-only buffer's frames.
// Every storage is also given as a multiple of stacked-only storage in the same round.
//
//   shmreplay_bench_compressed [--frames build/frames] [--games Pong,MsPacman] [--envs 16] [--capacity 8192]
//                              [--seconds 0.2] [--trials 5]
//   shmreplay_bench_compressed --atari-1e6 [--budget-bytes 1000000000] ...   the goal figure (compressed_million.cpp)
//   shmreplay_bench_compressed --seed-scale [--writers 6] [--codec lz4] ...   the seed's run (compressed_seed.cpp)
//   shmreplay_bench_compressed --quick      2 envs x 64 steps, one 10 ms trial: a smoke run for CI
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "bench_support.hpp"
#include "compressed_seed.hpp"
#include "compressed_store.hpp"
#include "median_rate.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::bench {
namespace {

constexpr std::size_t kSeqRows = 32, kSeqLength = 32, kFlatRows = 256;

struct Kind {
  const char* name;
  const char* obs_options;
};
constexpr Kind kKinds[] = {{"stacked only", ""}, {"lz4", ":lz4"}, {"zstd 1", ":zstd=1"}, {"zstd 3", ":zstd=3"}};
constexpr std::size_t kNumKinds = sizeof kKinds / sizeof kKinds[0];

// One storage's figures on one game (rates: per round, for the ratios).
struct Row {
  std::string game, kind;
  StoreCounters counters;
  double fill_steps_s = 0;
  std::vector<double> push, seq, flat;  // steps/s, sequences/s, transitions/s per round
};

// memcpy of what a push hands over: every env's step as pushed into a 64 MiB ring.
class CopyPush {
 public:
  CopyPush() : ring_(std::size_t{64} << 20) {}
  uint64_t operator()(const RecordedFeed& feed) {
    for (const FieldBytes& f : feed.batch()) {
      if (at_ + f.bytes > ring_.size()) at_ = 0;
      std::memcpy(ring_.data() + at_, f.data, f.bytes);
      at_ += f.bytes;
    }
    clobber(ring_.data());
    return feed.envs();
  }

 private:
  std::size_t at_ = 0;
  std::vector<std::byte> ring_;
};

// memcpy of a sample's output bytes (rows x length stacks) from the stacked store's frame rings: per row a random env
// and place, then each step's stack, the frames of step t + 1 one frame on from step t's (as the rings hold them).
class CopySample {
 public:
  CopySample(Buffer& stacked, uint64_t envs, std::size_t rows, std::size_t length)
      : st_(segment_of(stacked).stacks()[0]),
        rings_(segment_of(stacked).frame_data(0)),
        envs_(envs),
        rows_(rows),
        length_(length),
        stack_bytes_(st_.depth * st_.frame_bytes),
        out_(rows * length * stack_bytes_) {}
  uint64_t operator()() {
    const uint64_t places = st_.frames - st_.depth + 1;
    std::byte* dst = out_.data();
    for (std::size_t r = 0; r < rows_; ++r) {
      const std::byte* ring = rings_ + mix_.below(envs_) * st_.frames * st_.frame_bytes;
      const uint64_t p = mix_.below(places);
      for (std::size_t t = 0; t < length_; ++t, dst += stack_bytes_) {
        std::memcpy(dst, ring + (p + t) % places * st_.frame_bytes, stack_bytes_);
      }
    }
    clobber(out_.data());
    return rows_;
  }

 private:
  StackGeometry st_;
  const std::byte* rings_;
  uint64_t envs_;
  std::size_t rows_, length_, stack_bytes_;
  std::vector<std::byte> out_;
  SplitMix mix_{9};
};

struct Options {
  std::string frames = "build/frames", games;
  uint64_t envs = 16, capacity = 8192;
  TrialOptions trials{.quick = false, .seconds = 0.2, .trials = 5};
};

// Fills, checks and measures every storage on one game; appends a row per storage and one for memcpy.
void measure_game(const Options& o, const Recording& rec, std::vector<Row>& rows) {
  std::vector<std::unique_ptr<RecordedStore>> stores;
  for (const Kind& k : kKinds) {
    const std::string name = fmt::format("shmreplay-bench-{}-compressed-{}", ::getpid(), stores.size());
    stores.push_back(std::make_unique<RecordedStore>(name, recorded_schema(rec, k.obs_options), o.envs, o.capacity,
                                                     std::vector<const Recording*>{&rec}, StoreOptions{}));
  }
  Row base{.game = rec.name, .kind = "memcpy"};
  std::vector<Row> out;
  for (std::size_t i = 0; i < kNumKinds; ++i) {
    fmt::print(stderr, "shmreplay_bench_compressed: {}: filling {} ({} x {} steps)\n", rec.name, kKinds[i].name,
               o.envs, o.capacity);
    Row r{.game = rec.name, .kind = kKinds[i].name};
    r.fill_steps_s = stores[i]->fill(o.capacity);
    stores[i]->check_newest(4);
    r.counters = stores[i]->counters();
    out.push_back(std::move(r));
  }
  RecordedFeed copy_feed({&rec}, o.envs);
  CopyPush copy_push;
  std::vector<PreparedOp> push_ops;
  for (auto& s : stores) push_ops.push_back({[&s] { s->feed().next(); }, [&s] { return s->push(); }});
  push_ops.push_back({[&] { copy_feed.next(); }, [&] { return copy_push(copy_feed); }});
  const auto warm = std::chrono::milliseconds(o.trials.quick ? 1 : 100);
  fmt::print(stderr, "shmreplay_bench_compressed: {}: push\n", rec.name);
  const auto push = interleaved_prepared_rates(o.trials.seconds, o.trials.trials, warm, push_ops);
  CopySample copy_seq(stores[0]->buffer(), o.envs, kSeqRows, kSeqLength);
  CopySample copy_flat(stores[0]->buffer(), o.envs, kFlatRows, 1);
  std::vector<std::function<uint64_t()>> seq_ops, flat_ops;
  for (auto& s : stores) {
    seq_ops.push_back([&s] { return s->sample_sequences(kSeqRows, kSeqLength); });
    flat_ops.push_back([&s] { return s->sample_transitions(kFlatRows); });
  }
  seq_ops.push_back([&] { return copy_seq(); });
  flat_ops.push_back([&] { return copy_flat(); });
  fmt::print(stderr, "shmreplay_bench_compressed: {}: sampling\n", rec.name);
  const auto seq = interleaved_rates(o.trials.seconds, o.trials.trials, warm, seq_ops);
  const auto flat = interleaved_rates(o.trials.seconds, o.trials.trials, warm, flat_ops);
  for (std::size_t i = 0; i < kNumKinds; ++i) {
    out[i].push = push[i], out[i].seq = seq[i], out[i].flat = flat[i];
  }
  base.push = push[kNumKinds], base.seq = seq[kNumKinds], base.flat = flat[kNumKinds];
  base.counters.bytes_per_step = static_cast<double>(copy_feed.step_bytes());
  out.push_back(std::move(base));
  rows.insert(rows.end(), out.begin(), out.end());
}

std::string rate(double per_s) {
  if (per_s >= 1e6) return fmt::format("{:.2f} M", per_s * 1e-6);
  if (per_s >= 1e3) return fmt::format("{:.1f} k", per_s * 1e-3);
  return fmt::format("{:.0f}", per_s);
}
std::string times(const std::vector<double>& a, const std::vector<double>& b) {
  return fmt::format("{:.2f}x", median_ratio(a, b));
}

void print_table(const Options& o, const std::string& command, const std::vector<Row>& rows) {
  fmt::print("## shmreplay_bench_compressed\n\n- command: `{}`\n- {} envs x {} steps per buffer, the envs replaying "
             "the game's recorded envs cyclically; {} trial(s) of {:g} s per operation, interleaved, medians; x "
             "stacked and x memcpy: the median of the per-round ratios (above 1: faster, for a rate; for push ns, "
             "the time's ratio: above 1 slower)\n\n",
             command, o.envs, o.capacity, o.trials.trials, o.trials.seconds);
  fmt::print("### Compressed storage on real frames\n\n");
  fmt::print("Per game and storage of obs: bytes per stored step (the segment's counters: stored bytes of the replay "
             "view over its steps, every field, index and descriptor included), the ratio of the frames' bytes as "
             "pushed to their records', steps lost to the budget, the segment's size; push ns per step (a batched "
             "push of every env; memcpy: of the step's bytes as pushed); rows per second of a sample of {} "
             "sequences of {} and of {} transitions (memcpy: of the same output bytes from random places of the "
             "stacked-only frame rings, a stack per step).\n\n",
             kSeqRows, kSeqLength, kFlatRows);
  fmt::print("| game | storage | B/step stored | ratio | lost | segment MB | push ns/step | x stacked | x memcpy | "
             "seq/s ({}x{}) | x stacked | x memcpy | transitions/s | x stacked | x memcpy |\n",
             kSeqRows, kSeqLength);
  fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Row& stacked = rows[i - i % (kNumKinds + 1)];
    const Row& copy = rows[i - i % (kNumKinds + 1) + kNumKinds];
    const bool is_copy = &r == &copy;
    const auto vs = [&](const std::vector<double>& mine, const std::vector<double>& theirs, bool inverse) {
      if (is_copy) return std::string("-");
      return inverse ? times(theirs, mine) : times(mine, theirs);
    };
    fmt::print("| {} | {} | {:.0f} | {} | {} | {} | {:.0f} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.game, r.kind,
               r.counters.bytes_per_step, is_copy ? "-" : fmt::format("{:.1f}", r.counters.ratio),
               is_copy ? "-" : std::to_string(r.counters.lost),
               is_copy ? "-" : fmt::format("{:.0f}", static_cast<double>(r.counters.segment_bytes) * 1e-6),
               1e9 / median(r.push), vs(r.push, stacked.push, true), vs(r.push, copy.push, true), rate(median(r.seq)),
               vs(r.seq, stacked.seq, false), vs(r.seq, copy.seq, false), rate(median(r.flat)),
               vs(r.flat, stacked.flat, false), vs(r.flat, copy.flat, false));
  }
  fmt::print("\nratio: the steps' bytes as pushed (every field) over B/step stored. Every storage's newest 4 steps "
             "of every env were read back and compared with the file's stacks before the trials.\n");
}

int run(const Options& o, const std::string& command) {
  std::vector<Row> rows;
  for (const Recording& rec : atari_recordings(o.frames, o.games)) measure_game(o, rec, rows);
  print_table(o, command, rows);
  return 0;
}

}  // namespace
}  // namespace shmreplay::bench

int main(int argc, char** argv) {
  using namespace shmreplay::bench;
  Options o;
  MillionOptions m;
  SeedOptions seed;
  CLI::App app{"shmreplay_bench_compressed: the compressed storage kind on real Atari frames against stacked-only "
               "storage and memcpy"};
  o.trials.add_to(app, "2 envs x 64 steps, one 10 ms trial: a smoke run for CI");
  app.add_option("--frames", o.frames, "The folder of the frames files (default build/frames)");
  app.add_option("--games", o.games, "Games to measure, comma-separated (Pong,MsPacman); default every Atari file");
  app.add_option("--envs", o.envs, "Envs per buffer (default 16)")->check(CLI::Range(1, 4096));
  app.add_option("--capacity", o.capacity, "Steps per env (default 8192)")->check(CLI::Range(64, 1 << 24));
  m.add_to(app);
  seed.add_to(app);
  return bench_main(
      app, argc, argv,
      [&](const QuickDefaults& given) {
        o.trials.quick_defaults(given);
        given("--envs", o.envs, 2);
        given("--capacity", o.capacity, 64);
        m.quick_defaults(given);
        seed.quick_defaults(given);
      },
      [&](const std::string& command) {
        if (m.enabled) return run_million(m, o.frames, o.games, command);
        if (seed.enabled) return run_seed_scale(seed, o.frames, command);
        return run(o, command);
      });
}
