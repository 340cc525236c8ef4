// tools/bench/atari_million.cpp: shmreplay_bench's --atari-1e6 mode (atari_million.hpp): a buffer of 10^6 Atari
// steps with obs stacked, created, filled and sampled in this process, with its size and resident memory.
#include "atari_million.hpp"

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
#include "plain_store.hpp"
#include "proc_memory.hpp"
#include "report.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay::bench {

// -- --atari-1e6 ----------------------------------------------------------------------------------------------------

namespace {

uint64_t shm_used_bytes() {
  struct statvfs s {};
  if (::statvfs(shm_directory().c_str(), &s) != 0) return 0;
  return (s.f_blocks - s.f_bfree) * s.f_frsize;
}

double gb(uint64_t bytes) { return static_cast<double>(bytes) * 1e-9; }

}  // namespace

namespace {

// What --atari-1e6 measures.
struct MillionFigures {
  std::string schema;
  uint64_t steps_total = 0, segment_bytes = 0, unstacked_bytes = 0, memory_total = 0, shm_size = 0;
  uint64_t rss_before = 0, rss_full = 0, seg_rss = 0, shm_growth = 0, sampleable = 0;
  double create_s = 0, restarts = 0, fill_s = 0, refill_s = 0;
  double flat = 0, seq = 0, flat_ref = 0, seq_ref = 0, flat_ratio = 0, seq_ratio = 0;  // rows/s; ours/memcpy
};

// The sampling figures of the full buffer `buf`: 256 transitions and 32 sequences of 8, against the reference:
// memcpy of the same output bytes (a stack's 4 frames per step) from random places of the segment's frame rings.
void sample_figures(const AtariMillionConfig& c, Buffer& buf, MillionFigures& f) {
  Sampler sampler(buf);
  for (uint64_t e = 0; e < c.envs; ++e) f.sampleable += sampler.sizes(e).replay;
  Rng rng(5);
  SampleBatch out;
  const StackGeometry& st = segment_of(buf).stacks()[0];
  const std::byte* rings = segment_of(buf).frame_data(0);
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
  f.flat = median(rates[0]);
  f.seq = median(rates[2]);
  f.flat_ref = median(rates[1]);
  f.seq_ref = median(rates[3]);
  f.flat_ratio = median(ratios(rates[0], rates[1]));
  f.seq_ratio = median(ratios(rates[2], rates[3]));
}

void print_million_json(const AtariMillionConfig& c, const std::string& command, const MillionFigures& f) {
  const nlohmann::json j = {{"command", command},
                            {"schema", f.schema},
                            {"num_envs", c.envs},
                            {"capacity", c.capacity},
                            {"steps", f.steps_total},
                            {"segment_bytes", f.segment_bytes},
                            {"unstacked_segment_bytes", f.unstacked_bytes},
                            {"memory_bytes", f.memory_total},
                            {"shm_bytes", f.shm_size},
                            {"create_s", f.create_s},
                            {"restarts_per_step", f.restarts},
                            {"fill_s", f.fill_s},
                            {"fill_steps_per_s", static_cast<double>(f.steps_total) / f.fill_s},
                            {"refill_steps_per_s", static_cast<double>(f.steps_total) / f.refill_s},
                            {"process_rss_before_bytes", f.rss_before},
                            {"process_rss_bytes", f.rss_full},
                            {"segment_rss_bytes", f.seg_rss},
                            {"shm_used_growth_bytes", f.shm_growth},
                            {"sampleable_steps", f.sampleable},
                            {"populated", c.populate},
                            {"transitions_rows_per_s", f.flat},
                            {"transitions_memcpy_rows_per_s", f.flat_ref},
                            {"transitions_over_memcpy", f.flat_ratio},
                            {"sequences_rows_per_s", f.seq},
                            {"sequences_memcpy_rows_per_s", f.seq_ref},
                            {"sequences_over_memcpy", f.seq_ratio}};
  fmt::print("{}\n", j.dump(2));
}

void print_million_markdown(const AtariMillionConfig& c, const std::string& command, const MillionFigures& f) {
  const double step_gb = static_cast<double>(Schema::parse(kUnstacked).step_bytes()) * 1e-9;
  const auto steps = static_cast<double>(f.steps_total);
  fmt::print("## shmreplay_bench --atari-1e6\n\n- command: `{}`\n", command);
  fmt::print("- buffer: `{}`, {} envs x {} steps = {} steps; Atari-like steps as in the pixels section (episodes of "
             "150 to 450 steps, {:.2f}% of the steps begin one), pushed {} envs per call\n\n",
             f.schema, c.envs, c.capacity, f.steps_total, 100 * f.restarts, c.envs);
  fmt::print("| figure | value |\n|---|---:|\n");
  fmt::print("| segment size (stacked) | {:.2f} GB ({:.0f} B per step) |\n", gb(f.segment_bytes),
             static_cast<double>(f.segment_bytes) / steps);
  fmt::print("| the same steps stored as pushed (unstacked `obs:u8[4,84,84]`) | {:.2f} GB: RAM {:.2f} GB, {} {:.2f} GB"
             " ({}) |\n",
             gb(f.unstacked_bytes), gb(f.memory_total), shm_directory(), gb(f.shm_size),
             f.unstacked_bytes > f.memory_total || f.unstacked_bytes > f.shm_size ? "does not fit" : "fits");
  fmt::print("| create{} | {:.2f} s |\n", c.populate ? " (pages populated: Populate::always)" : "", f.create_s);
  fmt::print("| fill, first pass{} | {:.1f} s, {} steps/s ({:.2f} GB/s pushed) |\n",
             c.populate ? "" : " (page faults included)", f.fill_s, num(steps / f.fill_s), steps / f.fill_s * step_gb);
  fmt::print("| fill, second pass (overwriting the full buffer) | {:.1f} s, {} steps/s ({:.2f} GB/s pushed) |\n",
             f.refill_s, num(steps / f.refill_s), steps / f.refill_s * step_gb);
  fmt::print("| segment resident (Rss of its mapping) | {:.2f} GB |\n", gb(f.seg_rss));
  fmt::print("| {} used, growth | {:.2f} GB |\n", shm_directory(), gb(f.shm_growth));
  fmt::print("| process resident (VmRSS; before creating: {:.0f} MB) | {:.2f} GB |\n", gb(f.rss_before) * 1e3,
             gb(f.rss_full));
  fmt::print("| sampleable steps (replay view) | {} of {} |\n", f.sampleable, f.steps_total);
  fmt::print("| sample 256 transitions | {} rows/s ({:.2f} GB/s out); memcpy of the same bytes from random places of "
             "the frames: {} rows/s; ours/memcpy {} |\n",
             num(f.flat), f.flat * step_gb, num(f.flat_ref), pct(f.flat_ratio));
  fmt::print("| sample 32 sequences of 8 | {} sequences/s ({} steps/s, {:.2f} GB/s out); memcpy: {} sequences/s; "
             "ours/memcpy {} |\n",
             num(f.seq), num(f.seq * kSequenceLength), f.seq * kSequenceLength * step_gb, num(f.seq_ref),
             pct(f.seq_ratio));
  fmt::print("\n{} trials of >= {:.2f} s per sample figure (median). The segment's name was removed right after "
             "creation; its memory goes with this process.\n",
             c.trials, c.seconds);
}

}  // namespace

int run_atari_million(const AtariMillionConfig& c, const std::string& command) {
  using Clock = std::chrono::steady_clock;
  const Schema stacked = Schema::parse(kStacked);
  MillionFigures f;
  f.schema = stacked.to_string();
  f.steps_total = c.envs * c.capacity;
  f.unstacked_bytes = detail::plan_segment(c.envs, c.capacity, Schema::parse(kUnstacked), 0, false, 0).total_bytes;
  f.memory_total = proc_kb(read_text("/proc/meminfo"), "MemTotal:");
  struct statvfs shm {};
  ::statvfs(shm_directory().c_str(), &shm);
  f.shm_size = shm.f_blocks * shm.f_frsize;

  f.rss_before = process_rss();
  const uint64_t shm_before = shm_used_bytes();
  const std::string name = fmt::format("shmreplay-bench-{}-atari1e6", ::getpid());
  fmt::print(stderr, "shmreplay_bench: --atari-1e6: creating {} x {} steps with `{}`\n", c.envs, c.capacity, f.schema);
  auto t0 = Clock::now();
  Buffer buf = Buffer::create(name, c.envs, c.capacity, stacked,
                              {.populate = c.populate ? Populate::always : Populate::never});
  Buffer::remove(name);  // the mapping stays; nothing is left behind however this process ends
  f.create_s = std::chrono::duration<double>(Clock::now() - t0).count();
  f.segment_bytes = buf.total_bytes();

  const AtariSteps steps(c.envs, 256, 150, 450, 11);
  f.restarts = static_cast<double>(steps.restarts()) / static_cast<double>(c.envs * steps.steps());
  {
    Writer w = Writer::range(buf, 0, c.envs);
    std::vector<uint64_t> ids(c.envs);
    for (uint64_t e = 0; e < c.envs; ++e) ids[e] = e;
    fmt::print(stderr, "shmreplay_bench: --atari-1e6: filling ({:.1f} GB segment)\n", gb(buf.total_bytes()));
    t0 = Clock::now();
    for (uint64_t s = 0; s < c.capacity; ++s) {
      w.push(std::span<const uint64_t>(ids), steps.batch(s % steps.steps()));
    }
    f.fill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    // Once more the same number of steps into the full buffer: the rate of a buffer whose pages are all in.
    t0 = Clock::now();
    for (uint64_t s = 0; s < c.capacity; ++s) {
      w.push(std::span<const uint64_t>(ids), steps.batch((c.capacity + s) % steps.steps()));
    }
    f.refill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  f.rss_full = process_rss();
  f.seg_rss = mapping_rss(&segment_of(buf).header());
  f.shm_growth = shm_used_bytes() - shm_before;
  sample_figures(c, buf, f);
  if (c.json) {
    print_million_json(c, command, f);
  } else {
    print_million_markdown(c, command, f);
  }
  return 0;
}

}  // namespace shmreplay::bench
