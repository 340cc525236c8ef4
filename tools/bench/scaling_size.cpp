// tools/bench/scaling_size.cpp: shmreplay_bench_scaling's size sweep (scaling_size.hpp).
#include "scaling_size.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "atari_steps.hpp"
#include "detail/segment/rules.hpp"
#include "median_rate.hpp"
#include "memory_room.hpp"
#include "plain_sample.hpp"
#include "plain_store.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "staging.hpp"

namespace shmreplay::bench {

const char* schema_of(StepKind kind) noexcept {
  return kind == StepKind::small ? "obs:f32[17] action:f32[6] reward:f32 done:bool" : kStacked;
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kEnvs = 16;
constexpr std::size_t kBatch = 256;     // small steps: rows per call, transitions and sequences alike
constexpr std::size_t kSmallLength = 64;
// The gather's chunk: the Sampler copies its rows in chunks of at most 64 KiB (lib/sampler_parts.hpp, kGatherBytes),
// whose output stays in cache while every field is copied; the limit does the same.
constexpr std::size_t kChunkBytes = std::size_t{64} << 10;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double gb(uint64_t bytes) { return static_cast<double>(bytes) * 1e-9; }

// The sample cases of one size, in the order ours, gather, memcpy for transitions then sequences.
void sample_figures(const std::vector<std::vector<double>>& r, const std::vector<std::vector<CallRecord>>& calls,
                    std::size_t first, SampleCase& s) {
  s.ours = median(r[first]);
  s.gather = median(r[first + 1]);
  s.memcpy = median(r[first + 2]);
  s.over_gather = median_ratio(r[first], r[first + 1]);
  s.over_memcpy = median_ratio(r[first], r[first + 2]);
  s.ours_latency = latency_stats(calls[first]);
  s.gather_latency = latency_stats(calls[first + 1]);
}

// The push's figures from rounds of (ours, memcpy, memcpy with the next slot prefetched, ...): the limit is, in each
// round, the faster of the two copies.
void push_figures(const std::vector<std::vector<double>>& p, SizeRow& row) {
  std::vector<double> limit;
  for (std::size_t i = 0; i < p[1].size(); ++i) limit.push_back(std::max(p[1][i], p[2][i]));
  row.push = median(p[0]);
  row.push_ref = median(limit);
  row.push_over_ref = median_ratio(p[0], limit);
}

// The interleaved sampling cases of one size, transitions then sequences, each beside its limit: ours, the gather of
// the same rows, a memcpy of them (measure_small and measure_atari differ only in the rows and the sequence length).
// Runs them and fills the row's two sample figures.
void measure_samples(const SizeConfig& c, Sampler& sampler, PlainSample& flat, PlainSample& seq,
                     std::size_t transitions, std::size_t sequences, std::size_t length, SizeRow& row) {
  Rng rng(1);
  SampleBatch out_t, out_s;
  std::vector<std::function<uint64_t()>> ops = {
      [&] {
        sampler.sample_transitions(View::replay, transitions, rng, out_t);
        return uint64_t{transitions};
      },
      [&] { return flat.gather_rows(kChunkBytes); },
      [&] { return flat.memcpy_rows(); },
      [&] {
        sampler.sample(View::replay, sequences, length, 1.0, rng, out_s);
        return uint64_t{sequences};
      },
      [&] { return seq.gather_rows(kChunkBytes); },
      [&] { return seq.memcpy_rows(); },
  };
  std::vector<std::vector<CallRecord>> calls;
  const auto r = interleaved_timed_rates(c.trial_s, c.trials, c.warm, ops, calls);
  sample_figures(r, calls, 0, row.transitions);
  sample_figures(r, calls, 3, row.sequences);
}

// A buffer created with its pages populated and its name removed at once (the mapping stays).
Buffer create_populated(const std::string& name, uint64_t capacity, const Schema& schema) {
  Buffer b = Buffer::create(name, kEnvs, capacity, schema, {.replace = true, .populate = Populate::always});
  Buffer::remove(name);
  return b;
}

SizeRow measure_small(SizeRow row, const SizeConfig& c, const Schema& schema, uint64_t cap) {
  const std::string name = fmt::format("shmreplay-bench-scaling-{}-small", ::getpid());
  auto t0 = Clock::now();
  Buffer buf = create_populated(name, cap, schema);
  row.create_s = seconds_since(t0);
  Writer writer = Writer::range(buf, 0, kEnvs);
  const std::vector<uint64_t> ids = env_range(0, kEnvs);
  const Staging in(schema, kEnvs);
  t0 = Clock::now();
  for (uint64_t s = 0; s < cap; ++s) writer.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(in.all));
  row.fill_s = seconds_since(t0);
  fmt::print(stderr, "  created in {:.1f} s, filled in {:.1f} s; measuring\n", row.create_s, row.fill_s);

  std::vector<const std::byte*> bases;
  std::vector<std::byte*> fields;
  std::vector<std::size_t> bytes;
  for (std::size_t f = 0; f < schema.size(); ++f) {
    fields.push_back(segment_of(buf).field_data(f));
    bases.push_back(fields.back());
    bytes.push_back(static_cast<std::size_t>(schema[f].bytes()));
  }
  Sampler sampler(buf);
  PlainSample flat(bases, bytes, cap, kEnvs, kBatch, 1, 3);
  PlainSample seq(bases, bytes, cap, kEnvs, kBatch, kSmallLength, 5);
  measure_samples(c, sampler, flat, seq, kBatch, kBatch, kSmallLength, row);

  // The push, after the samples (it overwrites the oldest steps): the Writer against memcpy of the same rows into
  // the same arrays, each env's next slot from a private cursor.
  PlainStore plain(fields, bytes, kEnvs, cap);
  const auto p = interleaved_rates(c.trial_s, c.trials, c.warm,
                                   {[&] {
                                      writer.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(in.all));
                                      return kEnvs;
                                    },
                                    [&] {
                                      for (uint64_t e = 0; e < kEnvs; ++e) plain.push_row(e, in.all.data(), e);
                                      return kEnvs;
                                    },
                                    [&] {
                                      for (uint64_t e = 0; e < kEnvs; ++e) plain.push_row_ahead(e, in.all.data(), e);
                                      return kEnvs;
                                    }});
  push_figures(p, row);
  row.ref_steps = row.stored;
  return row;
}

SizeRow measure_atari(SizeRow row, const SizeConfig& c, const Schema& schema, uint64_t cap, const AtariSteps& steps,
                      uint64_t ref_cap) {
  const std::string name = fmt::format("shmreplay-bench-scaling-{}-atari", ::getpid());
  auto t0 = Clock::now();
  Buffer buf = create_populated(name, cap, schema);
  row.create_s = seconds_since(t0);
  Writer writer = Writer::range(buf, 0, kEnvs);
  const std::vector<uint64_t> ids = env_range(0, kEnvs);
  const std::size_t cycle = steps.steps();
  std::size_t t = 0;
  auto push = [&] {
    writer.push(std::span<const uint64_t>(ids), steps.batch(t));
    if (++t == cycle) t = 0;
    return kEnvs;
  };
  t0 = Clock::now();
  for (uint64_t s = 0; s < cap + cycle; ++s) push();  // every slot written, the frame rings wrapped
  row.fill_s = seconds_since(t0);
  fmt::print(stderr, "  created in {:.1f} s, filled in {:.1f} s; measuring\n", row.create_s, row.fill_s);

  const StackGeometry& st = segment_of(buf).stacks()[0];
  const std::vector<const std::byte*> rings = {segment_of(buf).frame_data(0)};
  const std::vector<std::size_t> frame = {static_cast<std::size_t>(st.frame_bytes)};
  PlainSample flat(rings, frame, st.frames, kEnvs, kTransitions, kDepth, 3);
  PlainSample seq(rings, frame, st.frames, kEnvs, kSequences, kSequenceLength * kDepth, 5);
  Sampler sampler(buf);
  measure_samples(c, sampler, flat, seq, kTransitions, kSequences, kSequenceLength, row);

  // The push against memcpy of the stored bytes (one frame per step) and of the pushed bytes (the whole stack),
  // each into a plain store of its layout of at most ref_cap steps per env, from the same cycle of steps.
  PlainStore one_frame(Schema::parse(kFrame), kEnvs, ref_cap);
  PlainStore unstacked(Schema::parse(kUnstacked), kEnvs, ref_cap);
  std::size_t t1 = 0, t2 = 0;
  auto plain_push = [&](PlainStore& store, std::size_t& at, bool newest, bool ahead) {
    const std::span<const FieldBytes> b = steps.batch(at, newest);
    for (uint64_t e = 0; e < kEnvs; ++e) {
      if (ahead) {
        store.push_row_ahead(e, b.data(), e);
      } else {
        store.push_row(e, b.data(), e);
      }
    }
    if (++at == cycle) at = 0;
    return kEnvs;
  };
  for (uint64_t s = 0; s < ref_cap; ++s) {  // every slot written once, as the segment's
    plain_push(one_frame, t1, true, false);
    plain_push(unstacked, t2, false, false);
  }
  const auto p = interleaved_rates(c.trial_s, c.trials, c.warm,
                                   {push, [&] { return plain_push(one_frame, t1, true, false); },
                                    [&] { return plain_push(one_frame, t1, true, true); },
                                    [&] { return plain_push(unstacked, t2, false, false); }});
  push_figures(p, row);
  row.push_ref_pushed = median(p[3]);
  row.push_over_ref_pushed = median_ratio(p[0], p[3]);
  row.ref_steps = kEnvs * ref_cap;
  return row;
}

}  // namespace

std::vector<SizeRow> run_size_sweep(StepKind kind, const SizeConfig& c) {
  const Schema schema = Schema::parse(schema_of(kind));
  const bool atari = kind == StepKind::atari;
  const char* label = atari ? "Atari" : "small";
  // The Atari workload: a cycle of steps per env, made once for every size (about 145 MB at 256 steps).
  std::unique_ptr<AtariSteps> steps;
  uint64_t steps_bytes = 0;
  if (atari) {
    const std::size_t cycle = c.quick ? 64 : 256;
    steps_bytes = cycle * kEnvs * (kDepth + 1) * kFrameBytes;
    steps = std::make_unique<AtariSteps>(kEnvs, cycle, c.quick ? 10 : 150, c.quick ? 40 : 450, 11);
  }
  std::vector<SizeRow> rows;
  for (const uint64_t asked : c.sizes) {
    SizeRow row;
    row.asked = asked;
    const uint64_t cap = std::max<uint64_t>(asked / kEnvs, 64);
    row.stored = kEnvs * cap;
    row.segment_bytes = detail::plan_segment(kEnvs, cap, schema, 0, false, 0).total_bytes;
    uint64_t ref_cap = cap;
    uint64_t ref_bytes = 0;
    if (atari) {
      const uint64_t per_step = Schema::parse(kUnstacked).step_bytes() + Schema::parse(kFrame).step_bytes();
      ref_cap = std::clamp<uint64_t>(c.ref_store_bytes / (kEnvs * per_step), 64, cap);
      ref_bytes = kEnvs * ref_cap * per_step;
    }
    fmt::print(stderr, "shmreplay_bench_scaling: size: {} steps, {} x {} = {} steps ({:.2f} GB segment)\n", label,
               kEnvs, cap, row.stored, gb(row.segment_bytes));
    row.skipped = why_not_room(row.segment_bytes + ref_bytes, c.budget_bytes - std::min(c.budget_bytes, steps_bytes),
                               c.spare_bytes);
    if (!row.skipped.empty()) {
      fmt::print(stderr, "  skipped: {}\n", row.skipped);
      rows.push_back(row);
      continue;
    }
    rows.push_back(atari ? measure_atari(row, c, schema, cap, *steps, ref_cap) : measure_small(row, c, schema, cap));
    const SizeRow& m = rows.back();
    fmt::print(stderr, "  transitions {:.3f} M rows/s ({:.0f}% of the gather), sequences {:.3f} M rows/s ({:.0f}%), "
                       "push {:.2f} M steps/s ({:.0f}% of its limit)\n",
               m.transitions.ours * 1e-6, 100 * m.transitions.over_gather, m.sequences.ours * 1e-6,
               100 * m.sequences.over_gather, m.push * 1e-6, 100 * m.push_over_ref);
  }
  return rows;
}

}  // namespace shmreplay::bench
