// shmreplay_bench_codecs: what lossless codecs do to real frames (docs/benchmarks/compression.md; issue 45). One
// process, one thread. Per source (a frames file of tools/frames/record_atari.py or record_dmc.py: envpool's Atari,
// 84x84 gray; dm_control's 64x64 RGB), per codec (lz4, lz4 accel 4, lz4hc 4 and 9, zstd -1, 1, 3, 5), per record
// unit (a frame, 4 consecutive frames, the stack as pushed) and delta (none, or each frame XOR or minus the env's
// previous frame, an episode's first frame raw): compressed bytes per step (mean, p99, max), the ratio, and ns per
// step to compress and to decompress (CPU time of the thread), against memcpy of one frame in the same run (trials
// interleaved, medians).
// Every record is decoded once and compared with its frames before anything is timed.
//
//   shmreplay_bench_codecs [--frames build/frames] [--seconds 0.05] [--trials 5] [--per-source]
//   shmreplay_bench_codecs --quick       one 2 ms trial, at most 64 steps per env: a smoke run for CI
//
// The frames are made by the recorders (python tools/frames/record_atari.py --out build/frames; nothing of them is
// in git); every *.frames file in --frames is measured, the stacked (Atari) ones first.
#include "codecs.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "bench_support.hpp"
#include "frames_file.hpp"
#include "median_rate.hpp"

namespace shmreplay::bench {
namespace {

struct Options {
  std::string frames = "build/frames";
  uint32_t max_steps = 0;  // per env; 0: all
  bool per_source = false;
  TrialOptions trials{.quick = false, .seconds = 0.05, .trials = 5};
};

constexpr std::size_t kChunk = 16;  // records per timed call: the clock is read once per call

// One record's frames: each with the frame its delta is taken against (null: stored raw); that reference is the
// record's previous frame (group, stack) or the env's previous frame, another record (frame).
struct Part {
  const std::byte* frame;
  const std::byte* ref;
};

// The records of one source for one unit and delta: parts[first[r] .. first[r + 1]) are record r's.
struct Records {
  std::vector<Part> parts;
  std::vector<std::size_t> first{0};
  std::size_t steps_per_record = 1;
  std::size_t frame_bytes = 0;
  std::size_t count() const noexcept { return first.size() - 1; }
  std::size_t frames_in(std::size_t r) const noexcept { return first[r + 1] - first[r]; }
};

Records make_records(const Recording& rec, Unit unit, Delta delta) {
  Records out;
  out.frame_bytes = rec.frame_bytes();
  const bool d = delta != Delta::none;
  const auto close = [&] { out.first.push_back(out.parts.size()); };
  if (unit == Unit::frame) {
    for (std::size_t i = 0; i < rec.frames(); ++i) {
      out.parts.push_back({rec.frame(i), d && !rec.first(i) ? rec.frame(i - 1) : nullptr});
      close();
    }
  } else if (unit == Unit::group) {
    out.steps_per_record = kGroupFrames;
    for (std::size_t e = 0; e < rec.envs; ++e) {
      for (std::size_t s = 0; s + kGroupFrames <= rec.steps; s += kGroupFrames) {
        for (std::size_t k = 0; k < kGroupFrames; ++k) {
          const std::size_t i = e * rec.steps + s + k;
          out.parts.push_back({rec.frame(i), d && k > 0 && !rec.first(i) ? rec.frame(i - 1) : nullptr});
        }
        close();
      }
    }
  } else {
    for (std::size_t i = 0; i < rec.frames(); ++i) {
      for (std::size_t k = 0; k < rec.depth; ++k) {
        out.parts.push_back({rec.stack_frame(i, k), d && k > 0 ? rec.stack_frame(i, k - 1) : nullptr});
      }
      close();
    }
  }
  return out;
}

// A codec, unit and delta on one source: its records, their compressed bytes, and its scratch.
class Coded {
 public:
  Coded(const Recording& rec, Codec& codec, Unit unit, Delta delta)
      : codec_(codec), unit_(unit), delta_(delta), records_(make_records(rec, unit, delta)) {
    const std::size_t most = rec.depth > kGroupFrames ? rec.depth : kGroupFrames;
    raw_.resize(most * records_.frame_bytes);
    out_.resize(codec.bound(raw_.size()));
    decoded_.resize(kChunk * raw_.size());
  }
  Unit unit() const noexcept { return unit_; }
  Delta delta() const noexcept { return delta_; }
  const Records& records() const noexcept { return records_; }
  const std::vector<std::size_t>& at() const noexcept { return at_; }
  Codec& codec() noexcept { return codec_; }

  // Encodes record r (its deltas into the scratch, then the codec) into dst; returns the compressed bytes.
  std::size_t encode(std::size_t r, std::byte* dst, std::size_t capacity) {
    const std::size_t fb = records_.frame_bytes, n = records_.frames_in(r);
    for (std::size_t q = 0; q < n; ++q) {
      const Part& p = records_.parts[records_.first[r] + q];
      if (p.ref != nullptr) {
        apply_delta(delta_, p.frame, p.ref, raw_.data() + q * fb, fb);
      } else {
        std::memcpy(raw_.data() + q * fb, p.frame, fb);
      }
    }
    return codec_.compress(raw_.data(), n * fb, dst, capacity);
  }
  // Decodes record r from the store into dst: the codec, then each delta against the frame it was taken from
  // (the record's previous frame, decoded just before; or the env's previous frame, which a storage would have
  // decoded already).
  void decode(std::size_t r, std::byte* dst) {
    const std::size_t fb = records_.frame_bytes, n = records_.frames_in(r);
    codec_.decompress(store_.data() + at_[r], at_[r + 1] - at_[r], dst, n * fb);
    for (std::size_t q = 0; q < n; ++q) {
      const Part& p = records_.parts[records_.first[r] + q];
      if (p.ref == nullptr) continue;
      undo_delta(delta_, dst + q * fb, unit_ == Unit::frame ? p.ref : dst + (q - 1) * fb, fb);
    }
  }
  // Compresses every record into the store, then decodes each and compares it with its frames (throws where one
  // differs: a figure of a wrong codec path is no figure).
  void fill() {
    at_.assign(1, 0);
    store_.clear();
    for (std::size_t r = 0; r < records_.count(); ++r) {
      const std::size_t n = encode(r, out_.data(), out_.size());
      store_.insert(store_.end(), out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(n));
      at_.push_back(store_.size());
    }
    for (std::size_t r = 0; r < records_.count(); ++r) {
      decode(r, decoded_.data());
      for (std::size_t q = 0; q < records_.frames_in(r); ++q) {
        const std::byte* want = records_.parts[records_.first[r] + q].frame;
        if (std::memcmp(decoded_.data() + q * records_.frame_bytes, want, records_.frame_bytes) != 0) {
          throw std::runtime_error(fmt::format("{} ({}, delta {}): record {} frame {} decodes to other bytes",
                                               codec_.name(), unit_name(unit_), delta_name(delta_), r, q));
        }
      }
    }
  }
  // The timed calls: kChunk records from a cursor that goes round; each returns the steps it covered.
  uint64_t compress_chunk() {
    for (std::size_t k = 0; k < kChunk; ++k, next(enc_)) sink_ += encode(enc_, out_.data(), out_.size());
    return kChunk * records_.steps_per_record;
  }
  uint64_t decompress_chunk() {
    for (std::size_t k = 0; k < kChunk; ++k, next(dec_)) decode(dec_, decoded_.data() + k * raw_.size());
    clobber(decoded_.data());
    return kChunk * records_.steps_per_record;
  }
  std::size_t sink() const noexcept { return sink_; }

 private:
  void next(std::size_t& r) const noexcept { r = r + 1 == records_.count() ? 0 : r + 1; }
  Codec& codec_;
  Unit unit_;
  Delta delta_;
  Records records_;
  std::vector<std::byte> raw_, out_, decoded_, store_;
  std::vector<std::size_t> at_;
  std::size_t enc_ = 0, dec_ = 0, sink_ = 0;
};

// The configurations measured on a source: every codec on frame records with each delta; the LZ4 and zstd 1-5
// codecs on groups of 4 frames and (a stacked source) on the stack as pushed, raw and with XOR.
std::vector<std::unique_ptr<Coded>> configurations(const Recording& rec,
                                                   const std::vector<std::unique_ptr<Codec>>& codecs) {
  std::vector<std::unique_ptr<Coded>> out;
  for (const auto& c : codecs) {
    for (const Delta d : {Delta::none, Delta::xor_bytes, Delta::sub_bytes}) {
      out.push_back(std::make_unique<Coded>(rec, *c, Unit::frame, d));
    }
  }
  for (const auto& c : codecs) {
    if (c->name() != "lz4" && c->name().rfind("zstd", 0) != 0) continue;
    if (c->name() == "zstd -1") continue;
    for (const Unit u : {Unit::group, Unit::stack}) {
      if (u == Unit::stack && rec.depth == 1) continue;
      for (const Delta d : {Delta::none, Delta::xor_bytes}) out.push_back(std::make_unique<Coded>(rec, *c, u, d));
    }
  }
  return out;
}

// Measures one source: fills every configuration, then times memcpy and every configuration's compress and
// decompress calls, interleaved. Appends the figures.
void measure_source(const Options& o, const Recording& rec, const std::vector<std::unique_ptr<Codec>>& codecs,
                    std::vector<Baseline>& baselines, std::vector<Figures>& figures) {
  const std::size_t fb = rec.frame_bytes();
  std::vector<std::unique_ptr<Coded>> coded = configurations(rec, codecs);
  for (auto& c : coded) c->fill();
  std::vector<std::byte> copies(kChunk * fb);
  std::size_t cursor = 0;
  std::vector<std::function<uint64_t()>> ops;
  ops.emplace_back([&] {
    for (std::size_t k = 0; k < kChunk; ++k, cursor = cursor + 1 == rec.frames() ? 0 : cursor + 1) {
      std::memcpy(copies.data() + k * fb, rec.frame(cursor), fb);
    }
    clobber(copies.data());
    return uint64_t{kChunk};
  });
  for (auto& c : coded) {
    ops.emplace_back([&c] { return c->compress_chunk(); });
    ops.emplace_back([&c] { return c->decompress_chunk(); });
  }
  // Per second of this thread's CPU time, not of the wall clock: on a machine shared with other busy processes the
  // wall-clock rates count the time the thread waited for a core.
  std::vector<std::vector<double>> rates;
  interleaved_rates(o.trials.seconds, o.trials.trials, std::chrono::milliseconds(o.trials.quick ? 1 : 20), ops,
                    &rates);
  const bool atari = rec.depth > 1;
  baselines.push_back({rec.name, atari, fb, 1e9 / median(rates[0])});
  for (std::size_t i = 0; i < coded.size(); ++i) {
    Coded& c = *coded[i];
    const Records& r = c.records();
    Figures f{.source = rec.name, .atari = atari, .codec = c.codec().name(), .unit = c.unit(), .delta = c.delta()};
    f.raw_record_bytes = r.frames_in(0) * fb;
    f.raw_step_bytes = f.raw_record_bytes / r.steps_per_record;
    f.bound_bytes = c.codec().bound(f.raw_record_bytes);
    for (std::size_t k = 0; k < r.count(); ++k) {
      const std::size_t bytes = c.at()[k + 1] - c.at()[k];
      f.step_bytes.push_back(static_cast<double>(bytes) / static_cast<double>(r.steps_per_record));
      f.max_record_bytes = std::max(f.max_record_bytes, bytes);
    }
    f.compress_ns = 1e9 / median(rates[1 + 2 * i]);
    f.decompress_ns = 1e9 / median(rates[2 + 2 * i]);
    f.compress_x = median_ratio(rates[0], rates[1 + 2 * i]);
    f.decompress_x = median_ratio(rates[0], rates[2 + 2 * i]);
    figures.push_back(std::move(f));
  }
}

int run(const Options& o, const std::string& command) {
  const std::vector<Recording> sources = load_recordings(o.frames, o.max_steps);
  const std::vector<std::unique_ptr<Codec>> codecs = make_codecs();
  std::vector<Baseline> baselines;
  std::vector<Figures> figures;
  for (const Recording& rec : sources) measure_source(o, rec, codecs, baselines, figures);
  std::vector<std::string> names;
  for (const auto& c : codecs) names.push_back(c->name());
  print_codec_tables(command, baselines, figures, names, o.per_source, o.trials.seconds, o.trials.trials);
  return 0;
}

}  // namespace
}  // namespace shmreplay::bench

int main(int argc, char** argv) {
  using namespace shmreplay::bench;
  Options o;
  CLI::App app("shmreplay_bench_codecs: lz4, lz4hc and zstd on real Atari and DMC frames, with and without a delta, "
               "per frame, per 4 frames and per stack, against memcpy");
  o.trials.add_to(app, "One 2 ms trial, at most 64 steps per env: a smoke run for CI");
  app.add_option("--frames", o.frames, "The folder of the frames files (default build/frames)");
  app.add_option("--max-steps", o.max_steps, "At most this many steps per env of each source (default: all)");
  app.add_flag("--per-source", o.per_source, "The pooled tables once per source");
  return bench_main(
      app, argc, argv,
      [&](const QuickDefaults& quick) {
        quick("--seconds", o.trials.seconds, 0.002);
        quick("--trials", o.trials.trials, 1);
        quick("--max-steps", o.max_steps, 64);
      },
      [&](const std::string& command) { return run(o, command); });
}
