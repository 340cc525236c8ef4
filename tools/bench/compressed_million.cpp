// tools/bench/compressed_million.cpp: shmreplay_bench_compressed --atari-1e6 (compressed_store.hpp; the goal figure
// of issue 45): per game and obs codec, a buffer of 16 x 62,500 Atari steps whose segment is at most
// --segment-bytes (the byte budget is what is left after the index, descriptors and other fields), filled through
// the Writer from the recorded frames (each env replays a recorded env cyclically: recorded_feed.hpp), its newest
// steps checked against the file, and sampled; prints the segment's size, its resident bytes, the process's, the
// fill and sample rates, and the size the same steps take stacked only (computed: that buffer is not created).
// Never in CI but its --quick form.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compressed_store.hpp"
#include "median_rate.hpp"
#include "proc_memory.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::bench {
namespace {

constexpr std::size_t kSeqRows = 32, kSeqLength = 32, kFlatRows = 256;

struct MillionRow {
  std::string game, codec;
  uint64_t budget = 0;
  StoreCounters c;
  double fill_steps_s = 0, seq_s = 0, flat_s = 0;
  uint64_t seg_rss = 0, rss = 0, rss_before = 0;
};

MillionRow measure(const MillionOptions& o, const Recording& rec, const std::string& codec) {
  MillionRow r{.game = rec.name, .codec = codec};
  const std::string schema = recorded_schema(rec, ":" + codec);
  r.budget = budget_for_segment(o.envs, o.capacity, Schema::parse(schema), o.segment_bytes);
  r.rss_before = process_rss();
  const std::string name = fmt::format("shmreplay-bench-{}-compressed-1e6", ::getpid());
  fmt::print(stderr, "shmreplay_bench_compressed --atari-1e6: {} {}: creating {} x {} steps, budget {:.3f} GB\n",
             rec.name, codec, o.envs, o.capacity, static_cast<double>(r.budget) * 1e-9);
  RecordedStore store(name, schema, o.envs, o.capacity, {&rec}, {.compressed_bytes = r.budget});
  const uint64_t tenth = std::max<uint64_t>(o.capacity / 10, 1);
  r.fill_steps_s = store.fill(o.capacity, [&](uint64_t done) {
    if (done / tenth != (done - 4096) / tenth) {
      fmt::print(stderr, "  filled {} of {} steps per env\n", done, o.capacity);
    }
  });
  store.check_newest(4);
  r.c = store.counters();
  r.seg_rss = mapping_rss(&segment_of(store.buffer()).header());
  r.rss = process_rss();
  const auto warm = std::chrono::milliseconds(o.trials > 1 ? 100 : 1);
  r.seq_s = median_rate(o.seconds, o.trials, warm, [&] { return store.sample_sequences(kSeqRows, kSeqLength); });
  r.flat_s = median_rate(o.seconds, o.trials, warm, [&] { return store.sample_transitions(kFlatRows); });
  return r;
}

double gb(uint64_t bytes) { return static_cast<double>(bytes) * 1e-9; }

void print_million(const MillionOptions& o, const std::string& command, const std::vector<MillionRow>& rows,
                   uint64_t stacked_bytes) {
  const uint64_t steps = o.envs * o.capacity;
  fmt::print("## shmreplay_bench_compressed --atari-1e6\n\n- command: `{}`\n", command);
  fmt::print("- {} envs x {} steps = {} steps per buffer, each env replaying one recorded env of the game cyclically "
             "(1024 steps per recorded env: each cycle is whole episodes, and a cyclic replay compresses as the "
             "recording does, the codec's chain restarting at each key frame); the byte budget is what a segment of "
             "at most {:.3f} GB leaves after the index, descriptors and other fields\n",
             o.envs, o.capacity, steps, gb(o.segment_bytes));
  fmt::print("- the same steps stacked only (`obs:u8[4,84,84]:stack=0`, not created here): {:.2f} GB\n\n",
             gb(stacked_bytes));
  fmt::print("### 10^6 Atari steps compressed\n\n");
  fmt::print("| game | codec | segment GB | budget GB | B/step stored | stored steps | lost to budget | fill s | "
             "fill steps/s | segment resident GB | process RSS GB | {}x{} sequences/s | ms/call | {} transitions/s "
             "|\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
             kSeqRows, kSeqLength, kFlatRows);
  for (const MillionRow& r : rows) {
    fmt::print("| {} | {} | {:.3f} | {:.3f} | {:.0f} | {} | {} | {:.1f} | {:.0f} | {:.3f} | {:.3f} | {:.0f} | {:.2f} | "
               "{:.0f} |\n",
               r.game, r.codec, gb(r.c.segment_bytes), gb(r.budget), r.c.bytes_per_step, r.c.stored_steps, r.c.lost,
               static_cast<double>(steps) / r.fill_steps_s, r.fill_steps_s, gb(r.seg_rss), gb(r.rss), r.seq_s,
               1e3 * kSeqRows / r.seq_s, r.flat_s);
  }
  fmt::print("\nfill: the first pass, pages populated at creation, the feed's stack copies included; process RSS: "
             "VmRSS after the fill (the segment's pages included; {:.0f} MB before creating); {} trial(s) of {:g} s "
             "per sample figure (median). Every env's newest 4 steps were read back and compared with the file's "
             "stacks.\n",
             rows.empty() ? 0.0 : gb(rows.front().rss_before) * 1e3, o.trials, o.seconds);
}

}  // namespace

int run_million(const MillionOptions& o, const std::string& frames, const std::string& games,
                const std::string& command) {
  std::vector<MillionRow> rows;
  std::vector<std::string> codecs;
  for (std::size_t at = 0; at <= o.codecs.size();) {
    const std::size_t end = std::min(o.codecs.find(',', at), o.codecs.size());
    if (end > at) codecs.push_back(o.codecs.substr(at, end - at));
    at = end + 1;
  }
  uint64_t stacked = 0;
  for (const Recording& rec : atari_recordings(frames, games)) {
    stacked = detail::plan_segment(o.envs, o.capacity, Schema::parse(recorded_schema(rec, "")), 0, false, 0)
                  .total_bytes;
    for (const std::string& c : codecs) rows.push_back(measure(o, rec, c));
  }
  print_million(o, command, rows, stacked);
  return 0;
}

}  // namespace shmreplay::bench
