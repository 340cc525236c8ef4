// shmreplay_bench_sample_cost: what one sampled row costs, from 10^3 to 10^7 stored steps, in one process with no
// writer running: rows/s (the median of --trials interleaved trials of --seconds) against references that copy the
// same rows of the same buffer in the same rounds, and, under callgrind, instructions per row
// (docs/benchmarks/small_rows.md, "Sampling cost against the stored size").
//
//   shmreplay_bench_sample_cost                       sizes 10^3 .. 10^7: rows/s of each case
//   shmreplay_bench_sample_cost --quick               sizes 10^3 and 10^4, one 10 ms trial: a smoke run for CI
//   valgrind --tool=callgrind --instr-atstart=no shmreplay_bench_sample_cost --callgrind --size 1000000
//       fills without instrumentation, then counts the instructions of --calls calls of each case only
//       (CALLGRIND_START_INSTRUMENTATION around them), writes one profile part per case (<out>.1, <out>.2) and
//       prints how many rows they sampled: instructions per row = the part's total / rows
//
// The buffer: 16 envs of size/16 steps of the 97-byte MuJoCo-like step (obs:f32[17] action:f32[6] reward:f32
// done:bool), every slot filled. Cases: flat transitions (sample_transitions, 256 rows per call), sequences of
// 64 steps (sample, 256 rows, power 1), and (timing only) a batched push of all 16 envs per call, in ns per step:
// the C++ side of tools/bench/python_call_cost.py. The references read the buffer's own field arrays (no
// protocol: nothing writes meanwhile), at uniform random (env, start) positions from splitmix64:
//   gather   every position of the batch first, then per field the sampler's own copy loop (gather.hpp: prefetch
//            ahead, fixed-width moves for small rows) over all 256 rows at once: ours without its draw, chunks,
//            validation and mask, so ours/gather is what those cost
//   memcpy   row by row, a memcpy per field (sequences only; for flat rows see shmreplay_bench)
// With --writers N, N forked writer processes push into the same buffer at full speed (each its share of the
// envs) for the whole measurement, so that ours and the references alternate under the same writers; the push
// column is then left out (the writers hold every env).
//
//   shmreplay_bench_sample_cost --writers 2 --size 1000000     ours against the references while 2 writers push
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <functional>
#include <string>
#include <optional>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <csignal>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "shmreplay/internal/segment.hpp"
#include "bench_support.hpp"
#include "detail/storage/gather.hpp"
#include "median_rate.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace {

using namespace shmreplay;

struct Options {
  bool quick = false;
  bool callgrind = false;
  double seconds = 0.2;
  uint32_t trials = 5;
  uint32_t calls = 200;
  uint32_t writers = 0;
  uint64_t envs = 16;
  std::vector<uint64_t> sizes;
};

// Writer processes for --writers: each leases its share of the envs and pushes them until it is killed (also when
// this process dies: PR_SET_PDEATHSIG). The destructor kills and reaps them.
class WriterProcesses {
 public:
  WriterProcesses(Buffer& buf, uint32_t count, const std::vector<FieldBytes>& fields) {
    const uint64_t envs = buf.num_envs();
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t first = envs * i / count;
      const uint64_t n = envs * (i + 1) / count - first;
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("fork failed");
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        try {
          Writer w = Writer::range(buf, first, n);
          std::vector<uint64_t> ids(n);
          for (uint64_t k = 0; k < n; ++k) ids[k] = first + k;
          std::vector<FieldBytes> mine;  // the first n rows of each field's data
          for (std::size_t f = 0; f < fields.size(); ++f) {
            mine.push_back({fields[f].data, fields[f].bytes / envs * n});
          }
          for (;;) w.push(std::span<const uint64_t>(ids), mine);
        } catch (const std::exception& e) {
          fmt::print(stderr, "writer {}: {}\n", i, e.what());
        }
        ::_exit(1);
      }
      pids_.push_back(pid);
    }
  }
  WriterProcesses(const WriterProcesses&) = delete;
  WriterProcesses& operator=(const WriterProcesses&) = delete;
  ~WriterProcesses() {
    for (const pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (const pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }

 private:
  std::vector<pid_t> pids_;
};

// The references (see the top of the file), over the buffer's own field arrays: the prefetching gather and a plain
// memcpy of `batch` rows from uniform random starts (splitmix64).
struct References {
  std::size_t batch;
  uint64_t envs, cap;
  std::size_t nf;
  std::vector<const std::byte*> base;
  std::vector<std::size_t> bytes;
  std::vector<std::vector<std::byte>> ref_out;
  std::vector<std::byte*> outs;
  std::vector<detail::GatherRow> rows;
  bench::SplitMix mix{1};

  References(const Buffer& buf, std::size_t batch_rows)
      : batch(batch_rows), envs(buf.num_envs()), cap(buf.capacity()), nf(buf.schema().size()), base(nf), bytes(nf),
        ref_out(nf), outs(nf), rows(batch_rows) {
    for (std::size_t f = 0; f < nf; ++f) {
      base[f] = segment_of(buf).field_data(f);
      bytes[f] = static_cast<std::size_t>(buf.schema()[f].bytes());
      ref_out[f].resize(batch * 64 * bytes[f]);
      outs[f] = ref_out[f].data();
    }
  }

  uint64_t gather(std::size_t length) {
    for (std::size_t r = 0; r < batch; ++r) {
      const uint64_t env = mix.below(envs);
      const uint64_t start = mix.below(cap - length + 1);
      rows[r] = {start, env, env * cap + start, start, length, r};
    }
    detail::gather_fields(base.data(), outs.data(), bytes.data(), nf, length, cap, rows.data(), batch, true);
    bench::clobber(ref_out[0].data());
    return uint64_t{batch};
  }

  uint64_t memcpy_rows(std::size_t length) {
    for (std::size_t r = 0; r < batch; ++r) {
      const uint64_t env = mix.below(envs);
      const uint64_t start = mix.below(cap - length + 1);
      for (std::size_t f = 0; f < nf; ++f) {
        std::memcpy(ref_out[f].data() + r * length * bytes[f], base[f] + (env * cap + start) * bytes[f],
                    length * bytes[f]);
      }
    }
    bench::clobber(ref_out[0].data());
    return uint64_t{batch};
  }
};

// --callgrind: `calls` calls of each sampling case between CALLGRIND_START/STOP_INSTRUMENTATION, one profile part per
// case (`stored`: the buffer's steps, for the line printed).
void run_instrumented(const std::function<uint64_t()>& flat, const std::function<uint64_t()>& seq, uint32_t calls,
                      uint64_t stored) {
  flat();
  seq();  // sizes the output for both
  for (const auto& [label, op] : {std::pair<const char*, std::function<uint64_t()>>{"transitions", flat},
                                  std::pair<const char*, std::function<uint64_t()>>{"sequences-64", seq}}) {
    uint64_t rows = 0;
    CALLGRIND_START_INSTRUMENTATION;
    for (uint32_t c = 0; c < calls; ++c) rows += op();
    CALLGRIND_DUMP_STATS_AT(label);  // one profile part per case
    CALLGRIND_STOP_INSTRUMENTATION;
    fmt::print("{} stored steps, {}: {} rows sampled while instrumented\n", stored, label, rows);
  }
}

int run(const Options& o) {
  const Schema schema = Schema::parse("obs:f32[17] action:f32[6] reward:f32 done:bool");
  const uint64_t kEnvs = o.envs;
  constexpr std::size_t kBatch = 256;
  if (!o.callgrind) {
    fmt::print("| stored steps | transitions rows/s | ours/gather | sequences 64 rows/s | ours/gather | ours/memcpy | "
               "ours/memcpy per CPU-s | push 16 envs ns/step |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (const uint64_t size : o.sizes) {
    const uint64_t cap = std::max<uint64_t>(size / kEnvs, 64);
    const std::string name = fmt::format("shmreplay-sample-cost-{}", ::getpid());
    Buffer buf = Buffer::create(name, kEnvs, cap, schema, {.replace = true});
    Buffer::remove(name);  // the mapping stays; nothing is left behind
    std::optional<Writer> w = Writer::range(buf, 0, kEnvs);
    std::vector<std::vector<std::byte>> data;
    std::vector<FieldBytes> fields;
    std::vector<uint64_t> ids(kEnvs);
    {
      for (const Field& f : schema.fields()) {
        data.emplace_back(kEnvs * f.bytes(), std::byte{1});
        fields.push_back({data.back().data(), data.back().size()});
      }
      for (uint64_t e = 0; e < kEnvs; ++e) ids[e] = e;
      for (uint64_t s = 0; s < cap; ++s) w->push(std::span<const uint64_t>(ids), fields);
    }
    std::optional<WriterProcesses> writers;
    if (o.writers > 0) {
      w.reset();  // the writer processes lease the envs
      writers.emplace(buf, o.writers, fields);
    }
    Sampler sampler(buf);
    Rng rng(1);
    SampleBatch out;
    auto flat = [&] {
      sampler.sample_transitions(View::replay, kBatch, rng, out);
      return uint64_t{kBatch};
    };
    auto seq = [&] {
      sampler.sample(View::replay, kBatch, 64, 1.0, rng, out);
      return uint64_t{kBatch};
    };
    if (o.callgrind) {
      run_instrumented(flat, seq, o.calls, kEnvs * cap);
      continue;
    }
    References ref(buf, kBatch);
    auto push = [&] {
      w->push(std::span<const uint64_t>(ids), fields);
      return kEnvs;
    };
    std::vector<std::function<uint64_t()>> cases = {flat, [&] { return ref.gather(1); }, seq,
                                                    [&] { return ref.gather(64); }, [&] { return ref.memcpy_rows(64); }};
    if (w) cases.push_back(push);
    std::vector<std::vector<double>> cpu;
    const auto rates =
        bench::interleaved_rates(o.seconds, o.trials, std::chrono::milliseconds(o.quick ? 1 : 50), cases, &cpu);
    fmt::print("| {} | {:.2f} M | {:.0f}% | {:.3f} M | {:.0f}% | {:.0f}% | {:.0f}% | {} |\n", kEnvs * cap,
               bench::median(rates[0]) / 1e6, 100 * bench::median_ratio(rates[0], rates[1]),
               bench::median(rates[2]) / 1e6, 100 * bench::median_ratio(rates[2], rates[3]),
               100 * bench::median_ratio(rates[2], rates[4]), 100 * bench::median_ratio(cpu[2], cpu[4]),
               w ? fmt::format("{:.1f}", 1e9 / bench::median(rates[5])) : std::string("-"));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("shmreplay_bench_sample_cost: sampling cost per row against the stored size (one process)");
  app.add_flag("--quick", o.quick, "Sizes 10^3 and 10^4, one 10 ms trial: a smoke run for CI");
  app.add_flag("--callgrind", o.callgrind,
               "Run each case --calls times between CALLGRIND_START/STOP_INSTRUMENTATION (run under valgrind "
               "--tool=callgrind --instr-atstart=no)");
  app.add_option("--seconds", o.seconds, "Duration of one trial (default 0.2)")->check(CLI::Range(0.001, 60.0));
  app.add_option("--trials", o.trials, "Interleaved trials per figure; the median is reported (default 5)")
      ->check(CLI::Range(1u, 101u));
  app.add_option("--calls", o.calls, "Calls per case with --callgrind (default 200)")->check(CLI::Range(1u, 100000u));
  app.add_option("--size", o.sizes, "Stored steps (repeatable; default 10^3 .. 10^7)");
  app.add_option("--envs", o.envs, "Envs of the buffer (default 16; the peers' Python benchmark uses 512)")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--writers", o.writers, "Writer processes pushing at full speed during the measurement (default 0)")
      ->check(CLI::Range(0u, 16u));
  return shmreplay::bench::bench_main(
      app, argc, argv,
      [&](const shmreplay::bench::QuickDefaults& quick) {
        quick("--seconds", o.seconds, 0.01);
        quick("--trials", o.trials, 1);
        quick("--size", o.sizes, std::vector<uint64_t>{1000, 10000});
      },
      [&](const std::string&) {
        if (o.sizes.empty()) o.sizes = {1000, 10000, 100000, 1000000, 10000000};
        return run(o);
      });
}
