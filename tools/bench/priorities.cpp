// shmreplay_bench_priorities: what priorities cost, against uniform sampling in the same run, at stored sizes from 10^3
// to 10^7 steps (docs/benchmarks/priorities_rate_limit.md, "Priorities"). One process, one thread, no writer running:
// each figure is the median of --trials trials of --seconds each, and each row's figures come from the same buffer.
//
//   shmreplay_bench_priorities                  sizes 10^3 .. 10^7, 5 trials of 0.2 s
//   shmreplay_bench_priorities --quick          sizes 10^3 and 10^4, one 10 ms trial: a smoke run for CI
//
// Per size (16 envs of size/16 steps, a MuJoCo-like 97-byte step, every slot filled, random priorities):
//   plain push      steps/s of batched pushes of 16 envs into a buffer of the same geometry without priorities
//   push            the same into the buffer with priorities, without giving any (each enters at the maximum)
//   push+prio       the same with a priority per step (the writer's leaf store and walk)
//   uniform         rows/s of sample_transitions, 256 rows per call
//   prioritized     rows/s of prioritized sample_transitions, 256 rows per call (weights included)
//   seq 32x16 prio  rows/s of prioritized sample, 32 rows of 16 steps
//   (these three interleaved, per second of the thread's CPU time, as in the tables below)
//   update          priorities/s of update_priorities for the 256 rows of a sample
// Then a table of the selectors (issue 47) against a uniform call of the same shape in the same run, from the same
// buffers: recency (recency_half_life a quarter of each env's ring, so that rows spread over the whole ring and read
// the memory uniform rows read) for flat rows (sample_transitions, 256 rows) and
// sequences (sample, 32 rows of 16 steps, power 1), and the time ratio of each to its uniform call.
// Last, a table of the priority selectors (issue 47), each against a call of the same shape in the same run:
// sequence priorities (a second buffer of the same geometry with sequence_priority_length 16: 32 rows of 16 steps
// weighed by 0.9 max + 0.1 mean) against uniform sequences (power 0) and against prioritized sequences weighed by
// the start's own priority; zero-on-sample (256 flat prioritized rows, then the update that gives them their
// priorities back) against the same prioritized call and update without it; and the push with priorities into the
// buffer with sequence priorities (16 windows refreshed per step) against the same push without them.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "median_rate.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace shmreplay;

using Options = bench::TrialOptions;

double rate(const Options& o, const std::function<uint64_t()>& op) {
  return bench::median_rate(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 20), op);
}

std::string mega(double per_s) { return fmt::format("{:.2f} M", per_s / 1e6); }

const Schema kSchema = Schema::parse("obs:f32[17] action:f32[6] reward:f32 done:bool");
constexpr uint64_t kEnvs = 16;

// One size's row of the selectors' table: rows/s of uniform and recency calls of two shapes.
struct SelectorRow {
  uint64_t size = 0;
  double flat_uniform = 0, flat_recency = 0, seq_uniform = 0, seq_recency = 0;
};

SelectorRow measure_selectors(const Options& o, uint64_t size, Sampler& s, Rng& rng) {
  SampleBatch batch;
  const SampleOptions recency{.recency_half_life = static_cast<double>(size / kEnvs) / 4};
  const std::vector<std::function<uint64_t()>> ops = {
      [&] {
        s.sample_transitions(View::replay, 256, rng, batch);
        return uint64_t{256};
      },
      [&] {
        s.sample_transitions(View::replay, 256, rng, batch, recency);
        return uint64_t{256};
      },
      [&] {
        s.sample(View::replay, 32, 16, 1.0, rng, batch);
        return uint64_t{32};
      },
      [&] {
        s.sample(View::replay, 32, 16, 1.0, rng, batch, recency);
        return uint64_t{32};
      },
  };
  // Interleaved trials, rates per second of the thread's CPU time: the calls alternate on one machine, and a
  // neighbour's load on the cores falls on neither.
  std::vector<std::vector<double>> cpu;
  (void)bench::interleaved_rates(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 20), ops, &cpu);
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {size, median(cpu[0]), median(cpu[1]), median(cpu[2]), median(cpu[3])};
}

void print_selectors(const std::vector<SelectorRow>& rows) {
  fmt::print("\n### Selectors\n\nThe same buffers; recency_half_life a quarter of each env's ring (the oldest step weighs "
             "1/16 of the newest); interleaved trials, rates per second "
             "of the thread's CPU time. `x uniform` is the recency call's time over the uniform call's of the same "
             "shape in the same run (the goal: at most 1.2).\n\n");
  fmt::print("| stored steps | flat uniform rows/s | flat recency rows/s | x uniform | seq 32x16 uniform rows/s | "
             "seq 32x16 recency rows/s | x uniform |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const SelectorRow& r : rows) {
    fmt::print("| {} | {} | {} | {:.2f} | {} | {} | {:.2f} |\n", r.size, mega(r.flat_uniform), mega(r.flat_recency),
               r.flat_uniform / r.flat_recency, mega(r.seq_uniform), mega(r.seq_recency),
               r.seq_uniform / r.seq_recency);
  }
}

// One size's row of the priority selectors' table (see the top of this file).
struct PrioritySelectorRow {
  uint64_t size = 0;
  double seq_uniform = 0, seq_start = 0, seq_windows = 0, flat_prio = 0, flat_zero = 0, push_plain = 0,
         push_windows = 0;
};

// Interleaved rates per second of the thread's CPU time, medians, for `ops`.
std::vector<double> interleaved_medians(const Options& o, const std::vector<std::function<uint64_t()>>& ops) {
  std::vector<std::vector<double>> cpu;
  (void)bench::interleaved_rates(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 20), ops, &cpu);
  std::vector<double> out;
  for (std::vector<double>& v : cpu) {
    std::sort(v.begin(), v.end());
    out.push_back(v[v.size() / 2]);
  }
  return out;
}

// The priority selectors at one size: `s` samples the plain prioritized buffer, `w` pushes into it (fields
// `fields`, priorities `prio`); a second buffer of the same geometry holds sequence priorities.
PrioritySelectorRow measure_priority_selectors(const Options& o, uint64_t size, Sampler& s, Writer& w,
                                               std::span<const FieldBytes> fields, std::vector<float>& prio,
                                               std::mt19937_64& gen) {
  const uint64_t cap = size / kEnvs;
  const std::string name = fmt::format("bench-seqprio-{}-{}", ::getpid(), size);
  const bench::RemoveBuffer remove{name};
  Buffer seq_buf = Buffer::create(name, kEnvs, cap, kSchema, {.priority_exponent = 0.6, .sequence_priority_length = 16});
  std::vector<uint64_t> ids(kEnvs);
  for (uint64_t e = 0; e < kEnvs; ++e) ids[e] = e;
  Writer sw(seq_buf, ids);
  for (uint64_t i = 0; i < cap; ++i) {
    for (float& p : prio) p = static_cast<float>(gen() % 1000) / 100.0f;
    sw.push(std::span<const uint64_t>(ids), fields, std::span<const float>(prio));
  }
  Sampler ss(seq_buf);
  Rng rng(11);
  SampleBatch a, b;
  const SampleOptions po{.prioritized = true};
  const SampleOptions zero{.prioritized = true, .zero_on_sample = true};
  std::vector<float> back(256);
  std::vector<uint64_t> envs(256), steps(256);
  const auto sample_and_restore = [&](const SampleOptions& opts) {
    s.sample_transitions(View::replay, 256, rng, a, opts);
    for (std::size_t r = 0; r < 256; ++r) {  // each row's priority back (zero-on-sample took it)
      envs[r] = a.env_ids()[r];
      steps[r] = a.start_steps()[r];
      back[r] = 1.0f + static_cast<float>(r % 7);
    }
    s.update_priorities(envs, steps, back);
    return uint64_t{256};
  };
  const std::vector<double> m = interleaved_medians(
      o, {[&] { s.sample(View::replay, 32, 16, 0.0, rng, a); return uint64_t{32}; },
          [&] { s.sample(View::replay, 32, 16, 0.0, rng, a, po); return uint64_t{32}; },
          [&] { ss.sample(View::replay, 32, 16, 0.0, rng, b, po); return uint64_t{32}; },
          [&] { return sample_and_restore(po); }, [&] { return sample_and_restore(zero); },
          [&] { w.push(std::span<const uint64_t>(ids), fields, std::span<const float>(prio)); return kEnvs; },
          [&] { sw.push(std::span<const uint64_t>(ids), fields, std::span<const float>(prio)); return kEnvs; }});
  return {size, m[0], m[1], m[2], m[3], m[4], m[5], m[6]};
}

void print_priority_selectors(const std::vector<PrioritySelectorRow>& rows) {
  fmt::print("\n### Priority selectors\n\nInterleaved trials, rates per second of the thread's CPU time; each `x` is a "
             "call's time over its baseline's in the same run. Sequences: 32 rows of 16 steps, uniform (power 0), "
             "by the start's priority, and by sequence priority (0.9 max + 0.1 mean of the 16 steps' weights, a "
             "second buffer with sequence_priority_length 16). Zero-on-sample: 256 flat prioritized rows and the "
             "update that restores them, with and without zero_on_sample. Push: 16 envs with priorities, into the "
             "buffer without and with sequence priorities.\n\n");
  fmt::print("| stored steps | seq uniform rows/s | seq start-prio rows/s | seq sequence-prio rows/s | x uniform | "
             "x start-prio | prio+update rows/s | zero+update rows/s | x prio | push+prio steps/s | push+windows "
             "steps/s | x push |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const PrioritySelectorRow& r : rows) {
    fmt::print("| {} | {} | {} | {} | {:.2f} | {:.2f} | {} | {} | {:.2f} | {} | {} | {:.2f} |\n", r.size,
               mega(r.seq_uniform), mega(r.seq_start), mega(r.seq_windows), r.seq_uniform / r.seq_windows,
               r.seq_start / r.seq_windows, mega(r.flat_prio), mega(r.flat_zero), r.flat_prio / r.flat_zero,
               mega(r.push_plain), mega(r.push_windows), r.push_plain / r.push_windows);
  }
}

// Measures a buffer of `size` stored steps, prints its row of the table and returns its selectors' row.
SelectorRow measure_size(const Options& o, uint64_t size, std::mt19937_64& gen,
                         std::vector<PrioritySelectorRow>& priority_rows) {
  const Schema& schema = kSchema;
  const uint64_t envs = kEnvs;
  const uint64_t cap = size / envs;
  const std::string name = fmt::format("bench-prio-{}-{}", ::getpid(), size);
  const bench::RemoveBuffer remove{name};
  Buffer buf = Buffer::create(name, envs, cap, schema, {.priority_exponent = 0.6});
  std::vector<uint64_t> ids(envs);
  for (uint64_t e = 0; e < envs; ++e) ids[e] = e;
  Writer w(buf, ids);
  std::vector<float> obs(envs * 17, 0.5f), action(envs * 6, 0.1f), reward(envs, 1.0f), prio(envs);
  std::vector<uint8_t> done(envs, 0);
  const FieldBytes fields[4] = {field_bytes(std::span<const float>(obs)), field_bytes(std::span<const float>(action)),
                                field_bytes(std::span<const float>(reward)),
                                field_bytes(std::span<const uint8_t>(done))};
  const auto fill_prio = [&] {
    for (float& p : prio) p = static_cast<float>(gen() % 1000) / 100.0f;
  };
  // Fill every slot with random priorities first, so that the trees and rings are full.
  for (uint64_t s = 0; s < cap; ++s) {
    fill_prio();
    w.push(std::span<const uint64_t>(ids), fields, std::span<const float>(prio));
  }
  double plain_push = 0;
  {
    const std::string plain_name = name + "-plain";
    const bench::RemoveBuffer remove_plain{plain_name};
    Buffer plain = Buffer::create(plain_name, envs, cap, schema);
    Writer pw(plain, ids);
    plain_push = rate(o, [&] {
      pw.push(std::span<const uint64_t>(ids), fields);
      return envs;
    });
  }
  const double push = rate(o, [&] {
    w.push(std::span<const uint64_t>(ids), fields);
    return envs;
  });
  const double push_prio = rate(o, [&] {
    w.push(std::span<const uint64_t>(ids), fields, std::span<const float>(prio));
    return envs;
  });
  Sampler s(buf);
  Rng rng(7);
  SampleBatch batch;
  const SampleOptions po{.prioritized = true, .importance_exponent = 0.4};
  SampleBatch seq;
  // Interleaved, per second of the thread's CPU time, as the selectors' tables: the ratio is the result.
  const std::vector<double> sampled = interleaved_medians(
      o, {[&] { s.sample_transitions(View::replay, 256, rng, batch); return uint64_t{256}; },
          [&] { s.sample_transitions(View::replay, 256, rng, batch, po); return uint64_t{256}; },
          [&] { s.sample(View::replay, 32, 16, 0.0, rng, seq, po); return uint64_t{32}; }});
  const double uniform = sampled[0], prioritized = sampled[1], sequences = sampled[2];
  s.sample_transitions(View::replay, 256, rng, batch, po);
  std::vector<float> fresh(256);
  for (float& p : fresh) p = static_cast<float>(gen() % 1000) / 100.0f;
  const double updates = rate(o, [&] {
    s.update_priorities(batch.env_ids(), batch.start_steps(), fresh);
    return uint64_t{256};
  });
  fmt::print("| {} | {} | {} | {} | {} | {} | {:.2f} | {} | {} |\n", size, mega(plain_push), mega(push),
             mega(push_prio), mega(uniform), mega(prioritized), prioritized / uniform, mega(sequences),
             mega(updates));
  std::fflush(stdout);
  priority_rows.push_back(measure_priority_selectors(o, size, s, w, fields, prio, gen));
  return measure_selectors(o, size, s, rng);
}

int run(const Options& o, const std::string& command) {
  std::vector<uint64_t> sizes = {1000, 10'000, 100'000, 1'000'000, 10'000'000};
  if (o.quick) sizes.resize(2);
  fmt::print("### Priorities\n\n`{}`; {} trial(s) of {} s per figure, median; {} envs, a {}-byte step ({}), one "
             "process, no writer running. Rates in millions per second; `prio/uniform` is prioritized over uniform "
             "flat sampling in the same run (these three interleaved, per second of the thread's CPU time).\n\n",
             command, o.trials, o.seconds, kEnvs, kSchema.step_bytes(), kSchema.to_string());
  fmt::print("| stored steps | plain push steps/s | push steps/s | push+prio steps/s | uniform rows/s | "
             "prioritized rows/s | prio/uniform | seq 32x16 prio rows/s | updates/s |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::mt19937_64 gen(1);
  std::vector<SelectorRow> selectors;
  std::vector<PrioritySelectorRow> priority_selectors;
  for (const uint64_t size : sizes) selectors.push_back(measure_size(o, size, gen, priority_selectors));
  print_selectors(selectors);
  print_priority_selectors(priority_selectors);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_priorities: prioritized sampling and priority updates against uniform sampling, "
               "at stored sizes 10^3 to 10^7 steps");
  o.add_to(app, "Sizes 10^3 and 10^4, one 10 ms trial: a smoke run for CI");
  return shmreplay::bench::bench_main(
      app, argc, argv, [&](const shmreplay::bench::QuickDefaults& quick) { o.quick_defaults(quick); },
      [&](const std::string& command) { return run(o, command); });
}
