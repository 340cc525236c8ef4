// tools/bench/scaling_report.cpp: shmreplay_bench_scaling's Markdown (scaling_report.hpp).
#include "scaling_report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "atari_steps.hpp"

#include "shmreplay/buffer.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/version.hpp"

namespace shmreplay::bench {

namespace {

std::string commas(uint64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<std::size_t>(i), ",");
  return s;
}
std::string mrate(double x) { return fmt::format("{:.3f}", x * 1e-6); }  // M per s
std::string pct(double x) { return std::isfinite(x) && x > 0 ? fmt::format("{:.0f}%", 100 * x) : "-"; }
std::string us(double x) { return x >= 100 ? fmt::format("{:.0f}", x) : fmt::format("{:.1f}", x); }
std::string times(double x) { return std::isfinite(x) && x > 0 ? fmt::format("{:.2f}x", x) : "-"; }
std::string share(double x) { return x < 0 ? "?" : fmt::format("{:.0f}%", 100 * x); }
double per(double a, double b) { return b > 0 ? a / b : 0; }

std::string read_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The bracketed choice of a sysfs switch ("always within_size advise [never] deny force" -> "never").
std::string chosen(const std::string& s) {
  const auto a = s.find('['), b = s.find(']');
  return a != std::string::npos && b > a ? s.substr(a + 1, b - a - 1) : (s.empty() ? "unknown" : s);
}

// How a limit and ours moved from the first measured size to the last, in words and figures.
void size_note(Markdown& md, const char* what, const std::vector<SizeRow>& rows, const SampleCase SizeRow::*c) {
  const SizeRow* a = nullptr;
  const SizeRow* b = nullptr;
  for (const SizeRow& r : rows) {
    if (!r.skipped.empty()) continue;
    if (a == nullptr) a = &r;
    b = &r;
  }
  if (a == nullptr || a == b) return;
  const SampleCase& x = a->*c;
  const SampleCase& y = b->*c;
  const double limit_fell = 1 - per(y.gather, x.gather);
  const double moved = y.over_gather - x.over_gather;
  std::string reading;
  if (y.over_gather > 1.05 && x.over_gather > 1.05) {
    reading = "ours stays above its limit, which copies more bytes than ours reads (the note above the table)";
  } else if (std::fabs(moved) < 0.15) {
    reading = limit_fell > 0.2 ? "ours falls with its limit: the drop is the memory system's, not the buffer's"
                               : "flat, and flat against its limit";
  } else if (moved < 0) {
    reading = "ours falls further than its limit: a cost of the buffer's that grows with the size";
  } else {
    reading = "ours falls less than its limit: in cache ours is bound by its own work (the draw, the chunks, the "
              "validation), out of cache both wait on memory";
  }
  md.print("- {}: from {} to {} stored steps, ours {} -> {} M rows/s ({}), the gather {} -> {} ({}); ours/gather {} "
           "-> {}: {}. p99/p50 {} -> {}, the gather's {} -> {} in the same rounds{}.\n",
           what, commas(a->stored), commas(b->stored), mrate(x.ours), mrate(y.ours), times(per(y.ours, x.ours)),
           mrate(x.gather), mrate(y.gather), times(per(y.gather, x.gather)), pct(x.over_gather), pct(y.over_gather),
           reading, times(per(x.ours_latency.p99_us, x.ours_latency.p50_us)),
           times(per(y.ours_latency.p99_us, y.ours_latency.p50_us)),
           times(per(x.gather_latency.p99_us, x.gather_latency.p50_us)),
           times(per(y.gather_latency.p99_us, y.gather_latency.p50_us)),
           per(y.ours_latency.p99_us, y.ours_latency.p50_us) >
                   1.25 * per(y.gather_latency.p99_us, y.gather_latency.p50_us)
               ? ": ours' tail is longer than the limit's"
               : ": where over 2x, the limit's tail is as long (the machine's, not the call's)");
}

// Why a latency row missed (or met) the goal, from its own measurements: the calls that kept their core against all
// of them, and against the gather's calls under the same load.
std::string latency_reading(const LatencyStats& o, const LatencyStats& g, double wait, uint64_t processes,
                            unsigned cores) {
  if (o.tail_met()) return "met";
  std::string s = fmt::format("{} of the calls were preempted and the learner waited for a CPU {} of its time",
                              share(o.preempted_share), share(wait));
  if (processes > cores) s += fmt::format(" ({} busy processes on {} cores)", processes, cores);
  const double quiet = per(o.quiet_p99_us, o.quiet_p50_us);
  const double limit = per(g.quiet_p99_us, g.quiet_p50_us);
  if (quiet > 0 && quiet <= 2) {
    return s + fmt::format("; the calls that kept their core meet the goal (p99/p50 {}): the tail is the wait for a "
                           "CPU",
                           times(quiet));
  }
  s += fmt::format("; the calls that kept their core have p99/p50 {}, the gather's {}", times(quiet), times(limit));
  if (limit > 2 && quiet <= 1.25 * limit) {
    return s + ": the limit has the same tail under this load, so it is the machine's (its memory and caches shared "
               "with the other processes, interrupts), not the call's work";
  }
  return s + ": a tail of the call's own, beyond the limit's";
}

}  // namespace

void print_header(Markdown& md, const RunInfo& info, const MachineInfo& m) {
  md.print("## shmreplay_bench_scaling\n\n");
  md.print("- command: `{}`\n", info.command);
  md.print("- sweeps: {}\n", info.sweeps);
  md.print("- cpu: {}; {} cores online ({} configured); {}; {}\n", m.cpu, m.cores_online, m.cores_configured,
           m.caches.empty() ? "caches unknown" : m.caches, m.virtualization);
  md.print("- memory: {:.1f} GiB; {} free: {:.1f} GiB; transparent huge pages for shmem: {}\n", m.memory_gib,
           shm_directory(), m.shm_free_gib, chosen(read_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled")));
  md.print("- kernel: {}; load average at start: {}\n", m.kernel, load_now());
  md.print("- compiler: {}; build type {}; sanitizers: {}; shmreplay {}\n", m.compiler, m.build_type, m.sanitizers,
           kVersion);
  md.print("- hardware counters: {}\n", info.counters);
  md.print("- method: {}; every sample call timed alone (steady_clock) with getrusage(RUSAGE_THREAD) around it, so "
           "that a preempted call is known; percentiles are nearest-rank over every call of the trials; M = 1e6, "
           "GB = 1e9 bytes, µs per call\n\n",
           info.timing);
}

void print_size_tables(Markdown& md, StepKind kind, const SizeConfig& c, const std::vector<SizeRow>& rows) {
  const bool atari = kind == StepKind::atari;
  const Schema schema = Schema::parse(schema_of(kind));
  const std::string seq = atari ? "seq 8" : "seq 64";
  md.print("### Size: {} steps\n\n", atari ? "Atari" : "small");
  md.print("`{}`, {} B per step as pushed; 16 envs; one process, no writer; buffers created with their pages populated "
           "(`Populate::always`), every ring full. Per call: {}; {}. The limits read the same segment's arrays: "
           "**gather**, the prefetching gather of the same kind of rows drawn the same way (uniform (env, start)) in "
           "the Sampler's 64 KiB chunks, "
           "and **memcpy**, a memcpy per row and field. The push's **limit**: memcpy of the bytes a push stores into "
           "the same layout at each env's next slot{}, with and without the next slot prefetched for writing (as "
           "`Writer::push` does), the faster in each round. {} rounds of {:.2f} s per case, interleaved; rates are medians "
           "over rounds, ratios medians of per-round ratios.\n\n",
           schema.to_string(), Schema::parse(atari ? kUnstacked : schema_of(kind)).step_bytes(),
           "transitions: 256 rows (`sample_transitions`)",
           atari ? "sequences: 32 rows of 8 steps (`sample`, power 1); the limits copy the same output bytes, a "
                   "stack's 4 frames per step, from random places of the frame rings"
                 : "sequences: 256 rows of 64 steps (`sample`, power 1)",
           atari ? " (one frame and the other fields, 7,065 bytes, into a plain store of the one-frame layout)"
                 : " (the segment's own arrays)",
           c.trials, c.trial_s);
  md.print("| stored steps | segment GB | transitions M rows/s | transitions gather M rows/s | transitions ours/gather | "
           "transitions ours/memcpy | {0} M rows/s | {0} gather M rows/s | {0} ours/gather | {0} ours/memcpy | push M "
           "steps/s | push limit M steps/s | push ours/limit |{1}\n",
           seq, atari ? " push ours/memcpy of the pushed bytes | push references' steps |" : "");
  md.print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}\n", atari ? "---:|---:|" : "");
  for (const SizeRow& r : rows) {
    if (!r.skipped.empty()) {
      md.print("| {} | {:.2f} | skipped |", commas(r.stored), static_cast<double>(r.segment_bytes) * 1e-9);
      for (int i = 0; i < (atari ? 12 : 10); ++i) md.print(" - |");
      md.print("\n");
      continue;
    }
    md.print("| {} | {:.3f} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{}\n", commas(r.stored),
             static_cast<double>(r.segment_bytes) * 1e-9, mrate(r.transitions.ours), mrate(r.transitions.gather),
             pct(r.transitions.over_gather), pct(r.transitions.over_memcpy), mrate(r.sequences.ours),
             mrate(r.sequences.gather), pct(r.sequences.over_gather), pct(r.sequences.over_memcpy), mrate(r.push),
             mrate(r.push_ref), pct(r.push_over_ref),
             atari ? fmt::format(" {} | {} |", pct(r.push_over_ref_pushed), commas(r.ref_steps)) : "");
  }
  md.print("\n");
  if (atari) {
    md.print("Of the pushed bytes: memcpy of all 28,233 bytes of a step as pushed (the stack) into a plain store of the "
             "unstacked layout. The push references' stores hold at most the steps in the last column (--ref-gb "
             "together). Sequences above 100%: a sequence of 8 stacks reads 11 distinct frames of the ring, the limits "
             "copy the 32 frames of its output.\n\n");
  }
  md.print("Latency of the calls ({} steps), the same rounds:\n\n", atari ? "Atari" : "small");
  md.print("| stored steps | transitions p50 µs | transitions p99 µs | transitions p99.9 µs | transitions p99/p50 | "
           "transitions gather p99/p50 | {0} p50 µs | {0} p99 µs | {0} p99.9 µs | {0} p99/p50 | {0} gather p99/p50 | "
           "calls preempted | calls with a page fault |\n",
           seq);
  md.print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const SizeRow& r : rows) {
    if (!r.skipped.empty()) continue;
    const LatencyStats& t = r.transitions.ours_latency;
    const LatencyStats& s = r.sequences.ours_latency;
    const LatencyStats& tg = r.transitions.gather_latency;
    const LatencyStats& sg = r.sequences.gather_latency;
    md.print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} |\n", commas(r.stored),
             us(t.p50_us),
             us(t.p99_us), us(t.p999_us), times(per(t.p99_us, t.p50_us)), times(per(tg.p99_us, tg.p50_us)),
             us(s.p50_us), us(s.p99_us), us(s.p999_us), times(per(s.p99_us, s.p50_us)),
             times(per(sg.p99_us, sg.p50_us)), share(t.preempted_share), share(s.preempted_share),
             share(t.faulted_share), share(s.faulted_share));
  }
  md.print("\nCalls preempted, with a page fault: of the transitions / sequence calls, those during which the "
           "process was switched out (another process took the core), and those that took a page fault.\n\n");
  for (const SizeRow& r : rows) {
    if (!r.skipped.empty()) md.print("- {} stored steps: skipped: {}.\n", commas(r.stored), r.skipped);
  }
  size_note(md, "transitions", rows, &SizeRow::transitions);
  size_note(md, seq.c_str(), rows, &SizeRow::sequences);
  md.print("\n");
}

namespace {

// The writers' tables: at full speed, and at a fixed rate per env.
void print_writers_tables(Markdown& md, const FleetConfig& c, const FleetResults& r) {
  const auto w_push = &FleetFigures::push;
  const auto w_rows = &FleetFigures::rows;
  md.print("### Writers at full speed\n\nOne learner process samples 256 transitions per call meanwhile.\n\n");
  md.print("| writers | envs written | push M steps/s | per writer M steps/s | push per writer-core M steps/s | plain "
           "push M steps/s | push ours/plain | writers' cores | learner M rows/s | plain learner M rows/s | sample "
           "ours/plain | p50 µs | p99 µs | p99.9 µs | p99/p50 | learner cores | learner waited for a CPU | calls "
           "preempted |\n");
  md.print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const WritersRow& w : r.writers) {
    const Paired& p = w.full;
    const LatencyStats l = p.ours_latency();
    const double push = p.ours_median(w_push);
    md.print("| {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} | {} |\n",
             w.writers, w.writers * r.envs_per_writer, mrate(push), mrate(push / static_cast<double>(w.writers)),
             mrate(per(push, p.ours_median(&FleetFigures::push_cores))), mrate(p.plain_median(w_push)),
             pct(p.ratio(w_push)), p.ours_median(&FleetFigures::push_cores), mrate(p.ours_median(w_rows)),
             mrate(p.plain_median(w_rows)), pct(p.ratio(w_rows)), us(l.p50_us), us(l.p99_us), us(l.p999_us),
             times(per(l.p99_us, l.p50_us)), p.ours_median(&FleetFigures::learner_cores),
             share(p.ours_median(&FleetFigures::learner_wait)), share(l.preempted_share));
  }
  md.print("\nPush per writer-core: the writers' steps per CPU second of theirs: flat while the total stops growing "
           "means the cores, not the buffer, set the total.\n\n");
  md.print("### Writers at a fixed rate ({} steps/s per env)\n\nEach writer pushes its {} envs once per {:.0f} µs on "
           "an absolute schedule; one learner samples 256 transitions per call meanwhile. Plain: as many memcpy "
           "writers at the same rate, beside the gather.\n\n",
           c.env_rate, r.envs_per_writer, 1e6 / c.env_rate);
  md.print("| writers | envs written | target M steps/s | push M steps/s | push/target | writers' cores | learner M "
           "rows/s | plain learner M rows/s | sample ours/plain | p50 µs | p99 µs | p99.9 µs | p99/p50 | learner "
           "waited for a CPU | calls preempted |\n");
  md.print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const WritersRow& w : r.writers) {
    const Paired& p = w.fixed;
    const LatencyStats l = p.ours_latency();
    const double target = c.env_rate * static_cast<double>(w.writers * r.envs_per_writer);
    md.print("| {} | {} | {} | {} | {} | {:.2f} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", w.writers,
             w.writers * r.envs_per_writer, mrate(target), mrate(p.ours_median(w_push)),
             pct(per(p.ours_median(w_push), target)), p.ours_median(&FleetFigures::push_cores),
             mrate(p.ours_median(w_rows)), mrate(p.plain_median(w_rows)), pct(p.ratio(w_rows)), us(l.p50_us),
             us(l.p99_us), us(l.p999_us), times(per(l.p99_us, l.p50_us)),
             share(p.ours_median(&FleetFigures::learner_wait)), share(l.preempted_share));
  }
  md.print("\n");
}

// The learners' table: 1 to 4 learner processes, no writer.
void print_learners_table(Markdown& md, const FleetResults& r, unsigned cores) {
  const auto w_rows = &FleetFigures::rows;
  md.print("### Learners\n\n1 to 4 learner processes on the buffer, no writer; each its own `Sampler` (rank 0 to "
           "3), 256 rows per call. Plain: the gather in as many processes.\n\n");
  md.print("| learners | seq len | ours M rows/s | per learner M rows/s | ours n/1 | plain M rows/s | plain n/1 | "
           "ours/plain | p50 µs | p99 µs | p99.9 µs | p99/p50 | learners' cores | waited for a CPU |\n");
  md.print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const LearnersRow& row : r.learners) {
    const LearnersRow* one = nullptr;
    for (const LearnersRow& x : r.learners) {
      if (x.length == row.length && x.learners == 1) one = &x;
    }
    const Paired& p = row.run;
    const LatencyStats l = p.ours_latency();
    const double ours = p.ours_median(w_rows), plain = p.plain_median(w_rows);
    md.print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} |\n", row.learners,
             row.length, mrate(ours), mrate(ours / static_cast<double>(row.learners)),
             one ? times(per(ours, one->run.ours_median(w_rows))) : "-", mrate(plain),
             one ? times(per(plain, one->run.plain_median(w_rows))) : "-", pct(p.ratio(w_rows)), us(l.p50_us),
             us(l.p99_us), us(l.p999_us), times(per(l.p99_us, l.p50_us)),
             p.ours_median(&FleetFigures::learner_cores), share(p.ours_median(&FleetFigures::learner_wait)));
  }
  md.print("\nn/1: the rate of n learners over one's, for ours and for plain: beyond {} learners the processes "
           "share {} cores (learners' cores), and both stop growing there.\n\n",
           cores, cores);
}

// The latency of a sample call beside writers at full speed, against the gather's under the same load.
void print_latency_table(Markdown& md, const FleetResults& r, unsigned cores) {
  md.print("### Latency of a sample call beside writers at full speed\n\nOne learner, 256 rows per call; the "
           "writers (ours) push at full speed. The goal (issue 36): p99 within 2x of p50. Gather: the prefetching "
           "gather's calls beside the same writers, the machine's limit for the same rows under the same load.\n\n");
  md.print("| writers | seq len | processes / cores | p50 µs | p99 µs | p99.9 µs | p99/p50 | p99 <= 2x p50 | calls "
           "preempted | calls with a page fault | not preempted p99/p50 | learner waited for a CPU | gather p50 µs | "
           "gather p99 µs | gather p99/p50 | gather not preempted p99/p50 |\n");
  md.print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<std::string> notes;
  for (const LatencyRow& row : r.latency) {
    const LatencyStats o = row.run.ours_latency();
    const LatencyStats g = row.run.plain_latency();
    const double wait = row.run.ours_median(&FleetFigures::learner_wait);
    md.print("| {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
             row.writers, row.length, row.writers + 1, cores, us(o.p50_us), us(o.p99_us), us(o.p999_us),
             times(per(o.p99_us, o.p50_us)), o.tail_met() ? "met" : "**missed**", share(o.preempted_share),
             share(o.faulted_share),
             times(per(o.quiet_p99_us, o.quiet_p50_us)), share(wait), us(g.p50_us), us(g.p99_us),
             times(per(g.p99_us, g.p50_us)), times(per(g.quiet_p99_us, g.quiet_p50_us)));
    notes.push_back(fmt::format("- {} writers, L {}: {}.", row.writers, row.length,
                                latency_reading(o, g, wait, row.writers + 1, cores)));
  }
  md.print("\nNot preempted: the calls during which the learner kept its core (no involuntary context switch).\n\n");
  for (const std::string& n : notes) md.print("{}\n", n);
  md.print("\n");
}

}  // namespace

void print_fleet_tables(Markdown& md, const FleetConfig& c, const FleetResults& r, unsigned cores) {
  md.print("### Processes: the buffer\n\n`{}`, {} envs x {} steps = {} steps ({:.2f} GB), created with max_learners "
           "4 and its pages populated, every ring full. Writer w leases envs [{}w, {}w + {}) and pushes all of them per "
           "call (`Writer::push`, batched); a learner is a `Sampler` with its own rank. **plain**, the machine's limit "
           "for the same processes: writers that memcpy the same rows into the same arrays at each env's next slot, "
           "and learners that run the prefetching gather of the same kind of rows; no protocol. Each configuration "
           "runs ours and plain in each of {} rounds (adjacent, the order reversed every other round), each run a "
           "warm-up of {:.2f} s and {} trials of {:.2f} s; rates are medians, ratios medians of per-round ratios, "
           "percentiles over every round's calls. Cores: CPU seconds per wall second, together ({} cores here). "
           "Waited for a CPU: the learners' time runnable but not running (/proc/thread-self/schedstat), of their "
           "wall time.\n\n",
           "obs:f32[17] action:f32[6] reward:f32 done:bool", r.envs, r.capacity, commas(r.envs * r.capacity),
           static_cast<double>(r.segment_bytes) * 1e-9, r.envs_per_writer, r.envs_per_writer, r.envs_per_writer,
           c.rounds, c.timing.warmup_s, c.timing.trials, c.timing.trial_s, cores);
  if (!r.writers.empty()) print_writers_tables(md, c, r);
  if (!r.learners.empty()) print_learners_table(md, r, cores);
  if (!r.latency.empty()) print_latency_table(md, r, cores);
}

}  // namespace shmreplay::bench
