// shmreplay_bench_push_cost: what one pushed small step costs against memcpy of the same bytes into the same
// layout, in one process, with the trials of every case interleaved (so that the machine's noise falls on all of
// them alike), and, under callgrind, in instructions per step (docs/benchmarks/small_rows.md, "Push cost").
//
//   shmreplay_bench_push_cost                 ns per step of each case, the median over --trials interleaved trials
//   shmreplay_bench_push_cost --quick         tiny sizes, one 10 ms trial: a smoke run for CI
//   valgrind --tool=callgrind --instr-atstart=no shmreplay_bench_push_cost --callgrind
//       counts the instructions of --calls calls of each case only, one profile part per case
//
// The store: 16 envs of 65536 slots of the 97-byte MuJoCo-like step (obs:f32[17] action:f32[6] reward:f32
// done:bool), 10^6 steps, as `shmreplay_bench --step small`. One Writer leases 8 envs, as one of that benchmark's
// two writers. Cases:
//   batched   push() of the 8 envs in one call (envpool's recv hands back a batch of envs)
//   single    push_one() of one env per call, round robin over the 8
// The reference, memcpy, copies the same rows into a plain mapping of the same layout ([field][env][slot][bytes],
// each env's next slot from a private counter: no protocol at all), per row and field.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "bench_support.hpp"
#include "median_rate.hpp"
#include "plain_store.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/writer.hpp"

namespace {

using namespace shmreplay;

struct Options {
  bool quick = false;
  bool callgrind = false;
  double seconds = 0.2;
  uint32_t trials = 9;
  uint32_t calls = 20000;
};

struct Case {
  const char* name;
  std::function<uint64_t()> op;  // returns the steps it pushed
};

// The rows of k envs' steps, field by field: per field [k][bytes] (a batched push's arrays), and per env its rows.
struct Rows {
  std::vector<std::vector<std::byte>> data;
  std::vector<FieldBytes> fields;               // per field: [k][bytes]
  std::vector<std::vector<FieldBytes>> one;     // per env, per field: its row
  std::vector<int32_t> ids;                     // 0 .. k - 1

  Rows(const Schema& schema, std::size_t k) : one(k), ids(k) {
    data.reserve(schema.size());
    for (std::size_t f = 0; f < schema.size(); ++f) {
      const auto b = static_cast<std::size_t>(schema[f].bytes());
      data.emplace_back(k * b);
      for (std::size_t i = 0; i < data.back().size(); ++i) data.back()[i] = static_cast<std::byte>(i * 7 + f);
      fields.push_back({data.back().data(), data.back().size()});
      for (std::size_t r = 0; r < k; ++r) one[r].push_back({data.back().data() + r * b, b});
    }
    for (std::size_t i = 0; i < k; ++i) ids[i] = static_cast<int32_t>(i);
  }
};

// Each case's op run `ops` times under callgrind's instrumentation, its counts dumped under the case's name.
int run_instrumented(std::vector<Case>& cases, uint64_t ops) {
  for (Case& c : cases) {
    uint64_t steps = 0;
    CALLGRIND_START_INSTRUMENTATION;
    for (uint64_t i = 0; i < ops; ++i) steps += c.op();
    CALLGRIND_DUMP_STATS_AT(c.name);
    CALLGRIND_STOP_INSTRUMENTATION;
    fmt::print("{}: {} steps pushed while instrumented\n", c.name, steps);
  }
  return 0;
}

int run(const Options& o) {
  const Schema schema = Schema::parse("obs:f32[17] action:f32[6] reward:f32 done:bool");
  const uint64_t envs = 16;
  const uint64_t cap = o.quick ? 1024 : 65536;
  const std::size_t k = 8;  // envs per writer
  const std::string name = fmt::format("shmreplay-push-cost-{}", ::getpid());
  Buffer buf = Buffer::create(name, envs, cap, schema, {.replace = true, .populate = Populate::always});
  Buffer::remove(name);  // the mapping stays; nothing is left behind
  Writer w = Writer::range(buf, 0, k);
  bench::PlainStore plain(schema, envs, cap);

  const Rows rows(schema, k);
  const std::vector<FieldBytes>& fields = rows.fields;
  const std::vector<std::vector<FieldBytes>>& one = rows.one;
  const std::vector<int32_t>& ids = rows.ids;
  // Every slot written once, so that both stores start full and warm alike.
  for (uint64_t s = 0; s < cap; ++s) {
    w.push(std::span<const int32_t>(ids), fields);
    for (std::size_t i = 0; i < k; ++i) plain.push_row(i, fields, i);
  }

  const std::size_t per_call = 64;  // calls per timed op, so that the clock is read rarely
  std::size_t next_one = 0;
  std::size_t next_plain = 0;
  std::vector<Case> cases = {
      {"ours batched",
       [&] {
         for (std::size_t c = 0; c < per_call; ++c) w.push(std::span<const int32_t>(ids), fields);
         return uint64_t{per_call * k};
       }},
      {"memcpy batched",
       [&] {
         for (std::size_t c = 0; c < per_call; ++c) {
           for (std::size_t i = 0; i < k; ++i) plain.push_row(i, fields, i);
         }
         return uint64_t{per_call * k};
       }},
      {"ours single",
       [&] {
         for (std::size_t c = 0; c < per_call; ++c) {
           w.push_one(next_one, one[next_one]);
           if (++next_one == k) next_one = 0;
         }
         return uint64_t{per_call};
       }},
      {"memcpy single",
       [&] {
         for (std::size_t c = 0; c < per_call; ++c) {
           plain.push_row(next_plain, fields, next_plain);
           if (++next_plain == k) next_plain = 0;
         }
         return uint64_t{per_call};
       }},
  };

  if (o.callgrind) return run_instrumented(cases, o.calls / per_call + 1);
  std::vector<std::function<uint64_t()>> ops;
  for (const Case& c : cases) ops.push_back(c.op);
  const auto rates =
      bench::interleaved_rates(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 50), ops);  // steps/s
  fmt::print("| push | ours ns/step | memcpy ns/step | ours/memcpy time (median of per-trial ratios) |\n"
             "|---|---:|---:|---:|\n");
  for (std::size_t i = 0; i < cases.size(); i += 2) {
    // Time per step is 1 / rate: ours/memcpy time = memcpy's rate / ours.
    fmt::print("| {} | {:.1f} | {:.1f} | {:.2f}x |\n", i == 0 ? "batched, 8 envs per call" : "single (push_one)",
               1e9 / bench::median(rates[i]), 1e9 / bench::median(rates[i + 1]),
               bench::median_ratio(rates[i + 1], rates[i]));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_push_cost: the cost of a pushed small step against memcpy (one process)");
  app.add_flag("--quick", o.quick, "Tiny sizes, one 10 ms trial: a smoke run for CI");
  app.add_flag("--callgrind", o.callgrind,
               "Run each case for about --calls steps between CALLGRIND_START/STOP_INSTRUMENTATION (run under "
               "valgrind --tool=callgrind --instr-atstart=no)");
  app.add_option("--seconds", o.seconds, "Duration of one trial of one case (default 0.2)")
      ->check(CLI::Range(0.001, 60.0));
  app.add_option("--trials", o.trials, "Interleaved trials per case; the median is reported (default 9)")
      ->check(CLI::Range(1u, 101u));
  app.add_option("--calls", o.calls, "Steps per case with --callgrind (default 20000)")
      ->check(CLI::Range(1u, 10000000u));
  return shmreplay::bench::bench_main(
      app, argc, argv,
      [&](const shmreplay::bench::QuickDefaults& quick) {
        quick("--seconds", o.seconds, 0.01);
        quick("--trials", o.trials, 1);
      },
      [&](const std::string&) { return run(o); });
}
