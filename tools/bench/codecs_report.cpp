// tools/bench/codecs_report.cpp: shmreplay_bench_codecs's Markdown tables (codecs.hpp). The sources of a kind
// (the Atari games; the DMC tasks) are pooled: sizes over every record of them, times the mean over the sources.
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "codecs.hpp"

namespace shmreplay::bench {
namespace {

// The figures of one codec, unit and delta over a group of sources.
struct Pooled {
  std::vector<double> step_bytes;
  std::size_t frame_bytes = 0, max_record = 0;
  double compress_ns = 0, decompress_ns = 0, compress_x = 0, decompress_x = 0;
  std::size_t sources = 0;

  double mean() const {
    return step_bytes.empty() ? 0 : std::accumulate(step_bytes.begin(), step_bytes.end(), 0.0) /
                                        static_cast<double>(step_bytes.size());
  }
  double quantile(double q) const {
    std::vector<double> v = step_bytes;
    if (v.empty()) return 0;
    const auto at = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at), v.end());
    return v[at];
  }
  double ratio() const { return static_cast<double>(frame_bytes) / mean(); }
};

// The groups the tables print: a label per kind of source, or per source.
struct Group {
  std::string label;
  std::vector<std::string> sources;
  double memcpy_ns = 0;
  std::size_t frame_bytes = 0;
};

std::vector<Group> groups_of(const std::vector<Baseline>& baselines, bool per_source) {
  std::vector<Group> out;
  for (const bool atari : {true, false}) {
    Group g;
    for (const Baseline& b : baselines) {
      if (b.atari != atari) continue;
      if (per_source) {
        out.push_back({b.source, {b.source}, b.memcpy_ns, b.frame_bytes});
        continue;
      }
      g.sources.push_back(b.source);
      g.memcpy_ns += b.memcpy_ns;
      g.frame_bytes = b.frame_bytes;
    }
    if (per_source || g.sources.empty()) continue;
    g.memcpy_ns /= static_cast<double>(g.sources.size());
    const bool one = g.sources.size() == 1;
    g.label = fmt::format("{} ({} {})", atari ? "Atari" : "DMC", g.sources.size(),
                          atari ? (one ? "game" : "games") : (one ? "task" : "tasks"));
    out.push_back(std::move(g));
  }
  return out;
}

Pooled pool(const std::vector<Figures>& figures, const Group& g, const std::string& codec, Unit unit, Delta delta) {
  Pooled p;
  for (const Figures& f : figures) {
    if (f.codec != codec || f.unit != unit || f.delta != delta) continue;
    if (std::find(g.sources.begin(), g.sources.end(), f.source) == g.sources.end()) continue;
    p.step_bytes.insert(p.step_bytes.end(), f.step_bytes.begin(), f.step_bytes.end());
    p.frame_bytes = g.frame_bytes;
    p.max_record = std::max(p.max_record, f.max_record_bytes);
    p.compress_ns += f.compress_ns, p.decompress_ns += f.decompress_ns;
    p.compress_x += f.compress_x, p.decompress_x += f.decompress_x;
    ++p.sources;
  }
  if (p.sources > 0) {
    const auto n = static_cast<double>(p.sources);
    p.compress_ns /= n, p.decompress_ns /= n, p.compress_x /= n, p.decompress_x /= n;
  }
  return p;
}

std::string times(const Pooled& p) {
  return fmt::format("{:.0f} | {:.1f}x | {:.0f} | {:.1f}x", p.compress_ns, p.compress_x, p.decompress_ns,
                     p.decompress_x);
}

void per_game_table(const std::vector<Baseline>& baselines, const std::vector<Figures>& figures,
                    const std::vector<std::string>& codecs) {
  fmt::print("### Frame records per game\n\nMean compressed bytes of one frame record, no delta (ratio to the raw "
             "frame).\n\n| codec |");
  for (const Baseline& b : baselines) fmt::print(" {} |", b.source);
  fmt::print("\n|---|");
  for (std::size_t i = 0; i < baselines.size(); ++i) fmt::print("---:|");
  fmt::print("\n| raw |");
  for (const Baseline& b : baselines) fmt::print(" {} |", b.frame_bytes);
  fmt::print("\n");
  for (const std::string& c : codecs) {
    fmt::print("| {} |", c);
    for (const Baseline& b : baselines) {
      const Pooled p = pool(figures, {b.source, {b.source}, 0, b.frame_bytes}, c, Unit::frame, Delta::none);
      fmt::print(" {:.0f} ({:.0f}x) |", p.mean(), p.ratio());
    }
    fmt::print("\n");
  }
  fmt::print("\n");
}

void frames_table(const std::vector<Group>& groups, const std::vector<Figures>& figures,
                  const std::vector<std::string>& codecs) {
  fmt::print("### Codecs on frame records\n\nOne frame per record, no delta: compressed bytes per frame (mean, p99, "
             "max), the ratio of the raw frame to the mean, and ns per frame to compress and to decompress, each "
             "also as a multiple of memcpy of the frame.\n\n| frames | codec | mean B | p99 B | max B | ratio | "
             "compress ns | x memcpy | decompress ns | x memcpy |\n"
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Group& g : groups) {
    fmt::print("| {} | memcpy | {} | {} | {} | 1 | {:.0f} | 1.0x | {:.0f} | 1.0x |\n", g.label, g.frame_bytes,
               g.frame_bytes, g.frame_bytes, g.memcpy_ns, g.memcpy_ns);
    for (const std::string& c : codecs) {
      const Pooled p = pool(figures, g, c, Unit::frame, Delta::none);
      fmt::print("| {} | {} | {:.0f} | {:.0f} | {} | {:.0f} | {} |\n", g.label, c, p.mean(), p.quantile(0.99),
                 p.max_record, p.ratio(), times(p));
    }
  }
  fmt::print("\n");
}

void delta_table(const std::vector<Group>& groups, const std::vector<Figures>& figures,
                 const std::vector<std::string>& codecs) {
  fmt::print("### Delta against the env's previous frame\n\nOne frame per record, each frame XOR or minus (modulo "
             "256) the env's previous frame before the codec (an episode's first frame raw); decompressing adds the "
             "delta back onto the previous frame, taken as decoded already. `vs none`: the mean bytes over those of "
             "the same codec without a delta.\n\n| frames | codec | delta | mean B | p99 B | max B | ratio | vs none "
             "| compress ns | x memcpy | decompress ns | x memcpy |\n"
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Group& g : groups) {
    for (const std::string& c : codecs) {
      const double none = pool(figures, g, c, Unit::frame, Delta::none).mean();
      for (const Delta d : {Delta::xor_bytes, Delta::sub_bytes}) {
        const Pooled p = pool(figures, g, c, Unit::frame, d);
        fmt::print("| {} | {} | {} | {:.0f} | {:.0f} | {} | {:.0f} | {:.2f} | {} |\n", g.label, c, delta_name(d),
                   p.mean(), p.quantile(0.99), p.max_record, p.ratio(), p.mean() / none, times(p));
      }
    }
  }
  fmt::print("\n");
}

void unit_table(const std::vector<Group>& groups, const std::vector<Figures>& figures,
                const std::vector<std::string>& codecs) {
  fmt::print("### Record unit\n\nPer step (one new frame): a record of one frame, of 4 consecutive frames of an env, "
             "or of the step's whole stack as pushed (its 4 frames, the repeats at an episode's start included); "
             "with XOR, each frame of a record after its first is XORed with the one before it in the record (a "
             "frame record: with the env's previous frame). `max record B` is the largest record, `ratio` the raw "
             "frame over the mean bytes per step.\n\n| frames | codec | record | delta | mean B/step | p99 B/step | "
             "max record B | ratio | compress ns/step | x memcpy | decompress ns/step | x memcpy |\n"
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Group& g : groups) {
    for (const std::string& c : codecs) {
      for (const Unit u : {Unit::frame, Unit::group, Unit::stack}) {
        for (const Delta d : {Delta::none, Delta::xor_bytes}) {
          const Pooled p = pool(figures, g, c, u, d);
          if (p.sources == 0 || (u == Unit::frame && pool(figures, g, c, Unit::group, d).sources == 0)) continue;
          fmt::print("| {} | {} | {} | {} | {:.0f} | {:.0f} | {} | {:.0f} | {} |\n", g.label, c, unit_name(u),
                     delta_name(d), p.mean(), p.quantile(0.99), p.max_record, p.ratio(), times(p));
        }
      }
    }
  }
  fmt::print("\n");
}

void worst_case_table(const std::vector<Baseline>& baselines, const std::vector<Figures>& figures) {
  fmt::print("### Worst case\n\nThe codecs' bounds on a record of a given size (LZ4_compressBound, also LZ4HC's; "
             "ZSTD_compressBound), against the largest record seen here of that size (any codec, unit and delta).\n\n"
             "| record | raw B | LZ4 bound B | zstd bound B | largest seen B | by |\n|---|---:|---:|---:|---:|---|\n");
  std::map<std::size_t, std::string> sizes;  // raw record bytes -> what it is
  for (const Baseline& b : baselines) {
    sizes.emplace(b.frame_bytes, fmt::format("a frame, {}", b.atari ? "Atari" : "DMC"));
    sizes.emplace(b.frame_bytes * kGroupFrames, fmt::format("4 frames, {}", b.atari ? "Atari" : "DMC"));
  }
  for (const auto& [raw, what] : sizes) {
    std::size_t seen = 0;
    std::string by = "-";
    for (const Figures& f : figures) {
      if (f.raw_record_bytes != raw || f.max_record_bytes <= seen) continue;
      seen = f.max_record_bytes;
      by = fmt::format("{}, {}, {}, delta {}", f.codec, f.source, unit_name(f.unit), delta_name(f.delta));
    }
    fmt::print("| {} | {} | {} | {} | {} | {} |\n", what, raw, LZ4_compressBound(static_cast<int>(raw)),
               ZSTD_compressBound(raw), seen, by);
  }
  fmt::print("\n");
}

}  // namespace

void print_codec_tables(const std::string& command, const std::vector<Baseline>& baselines,
                        const std::vector<Figures>& figures, const std::vector<std::string>& codecs, bool per_source,
                        double seconds, uint32_t trials) {
  std::size_t steps = 0;
  for (const Figures& f : figures) {
    if (f.codec == codecs.front() && f.unit == Unit::frame && f.delta == Delta::none) steps += f.step_bytes.size();
  }
  fmt::print("## Codecs on real frames\n\n`{}`; {} sources, {} frames in all; {} trial(s) of {} s per operation, "
             "interleaved, medians; ns of the thread's CPU time per frame (per step); one process, one thread; "
             "zstd {}, lz4 {}.\n\n",
             command, baselines.size(), steps, trials, seconds, ZSTD_versionString(), LZ4_versionString());
  per_game_table(baselines, figures, codecs);
  const std::vector<Group> groups = groups_of(baselines, per_source);
  frames_table(groups, figures, codecs);
  delta_table(groups, figures, codecs);
  unit_table(groups, figures, codecs);
  worst_case_table(baselines, figures);
  std::fflush(stdout);
}

}  // namespace shmreplay::bench
