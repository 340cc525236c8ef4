// tools/bench/policy_pacing.cpp: pacing against discard, in one run (policy_bench.hpp; docs/benchmarks/policy.md).
//
// One process. Every env has an actor thread with its own Writer; the fast group's actors take fast_step_ms per
// step, the slow group's speed_ratio times that (each sleeps to a fixed schedule, so the machine's load barely
// moves the rates; the table prints the rates measured). An episode is episode_steps steps, all carrying the
// version the actor loaded at the episode's start from the learner's broadcast: a std::atomic the learner stores
// after each publish_policy returns, standing for the weight broadcast of an RL system (actors never call
// Sampler::policy(): that is the learners' view, and a real actor knows the version of the weights it loaded).
// The learner thread (main) samples `batch` single steps with the window max_staleness, sleeps train_ms per batch
// (its gradient step) and publishes version + 1 every batches_per_version batches. Three modes, run one after the
// other on fresh buffers of the same shape:
//   paced     admission control: every publish with PolicyPublish::pace and the window; actors push each step as
//             they produce it, through the writers' gate (a stale push would be held, WriterOptions::policy_timeout_ms)
//   discard   the usual asynchronous-RL loop, written here: publishes without a window (nothing is held or paced);
//             an actor keeps its episode and at its end checks the version it loaded against the broadcast: inside
//             the window, it pushes the episode; left behind, it drops it (counted) and starts a fresh one with the
//             newest version. The learner's calls draw with the same window (SampleOptions::max_staleness).
//   queue     a consuming queue (CreateOptions::consuming_queue): actors push each step as they produce it, the
//             learner's calls consume `batch` steps at random (SampleOptions::consume), each step delivered once;
//             versions are published without a window (a consuming call draws every undelivered step).
// The buffer holds every step either mode produces (no ring wraps), so only the window decides what is sampled.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "bench_cli.hpp"
#include "policy_bench.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay::bench::policy {

namespace {

using Clock = std::chrono::steady_clock;

const Schema kStep = Schema::parse("version:u32 env:u32 obs:f32[8]");
constexpr std::size_t kEnvField = 1;
constexpr uint64_t kLongWaitMs = 60'000;  // a held push or a paced publish that waits this long is an error

enum class Mode { paced, queue, discard };
const char* to_string(Mode m) {
  return m == Mode::paced ? "paced (admission control)" : m == Mode::queue ? "consuming queue" : "discard and requeue";
}
const char* short_name(Mode m) { return m == Mode::paced ? "paced" : m == Mode::queue ? "queue" : "discard"; }

// One env's counts, written by its actor only.
struct alignas(64) EnvCounts {
  std::atomic<uint64_t> produced{0};   // steps generated (discard mode: of finished episodes)
  std::atomic<uint64_t> inserted{0};   // steps pushed
  std::atomic<uint64_t> discarded{0};  // steps of episodes dropped as stale (discard mode)
};

struct Run {
  const PacingOptions& o;
  Mode mode;
  Buffer& buf;
  std::atomic<uint64_t> broadcast{0};  // the weight broadcast: the version the learner published last
  std::atomic<bool> stop{false};
  std::unique_ptr<EnvCounts[]> counts;
  std::mutex failed_lock;
  std::exception_ptr failed;
  Run(const PacingOptions& opts, Mode m, Buffer& b)
      : o(opts), mode(m), buf(b), counts(std::make_unique<EnvCounts[]>(opts.fast_envs + opts.slow_envs)) {}
  bool fast(uint64_t env) const { return env < o.fast_envs; }
};

// What one mode measured, per group (0 fast, 1 slow) where an array.
struct ModeResult {
  Mode mode = Mode::paced;
  std::array<uint64_t, 2> produced{}, inserted{}, discarded{}, sampled{};
  std::array<double, 2> steps_per_s_env{};
  double seconds = 0, publish_wait_s = 0;
  uint64_t batches = 0, moves = 0, empty_calls = 0, held_pushes = 0, paced_publishes = 0;
};

void push_step(Writer& w, uint64_t env, uint32_t version, uint64_t step) {
  const auto e = static_cast<uint32_t>(env);
  std::array<float, 8> obs{};
  obs.fill(static_cast<float>(step));
  w.push_one(env, {FieldBytes{&version, sizeof version}, FieldBytes{&e, sizeof e}, FieldBytes{obs.data(), sizeof obs}});
}

void actor_loop(Run& r, uint64_t env) {
  Writer w(r.buf, {env}, {.policy_timeout_ms = kLongWaitMs, .queue_timeout_ms = kLongWaitMs});
  const double step_ms = r.o.fast_step_ms * (r.fast(env) ? 1.0 : r.o.speed_ratio);
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(step_ms));
  const auto max_lag = std::max(Clock::duration(std::chrono::milliseconds(5)), 2 * period);
  EnvCounts& c = r.counts[env];
  auto next = Clock::now();
  uint64_t step = 0;
  while (!r.stop.load(std::memory_order_relaxed)) {
    // acquire: pairs with the learner's release store after publish_policy returned (the weights "arrive").
    const auto version = static_cast<uint32_t>(r.broadcast.load(std::memory_order_acquire));
    uint32_t s = 0;
    for (; s < r.o.episode_steps && !r.stop.load(std::memory_order_relaxed); ++s, ++step) {
      next += period;
      if (Clock::now() - next > max_lag) next = Clock::now();  // fell far behind (a loaded machine): no burst
      std::this_thread::sleep_until(next);
      if (r.mode != Mode::discard) {  // paced and queue: each step as it is produced
        push_step(w, env, version, step);
        c.produced.fetch_add(1, std::memory_order_relaxed);
        c.inserted.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (r.mode != Mode::discard || s < r.o.episode_steps) continue;  // an unfinished episode counts nowhere
    c.produced.fetch_add(s, std::memory_order_relaxed);
    if (version + r.o.max_staleness >= r.broadcast.load(std::memory_order_acquire)) {
      for (uint64_t i = step - s; i < step; ++i) push_step(w, env, version, i);
      c.inserted.fetch_add(s, std::memory_order_relaxed);
    } else {
      c.discarded.fetch_add(s, std::memory_order_relaxed);  // stale: dropped; the next episode loads a new version
    }
  }
}

void actor(Run& r, uint64_t env) {
  try {
    actor_loop(r, env);
  } catch (...) {
    const std::lock_guard<std::mutex> lock(r.failed_lock);
    if (!r.failed) r.failed = std::current_exception();
    r.stop.store(true);
  }
}

// The learner: samples, trains (sleeps), moves its version; fills the learner's part of `m`.
void learn(Run& r, Sampler& s, ModeResult& m) {
  const PacingOptions& o = r.o;
  Rng rng(47);
  SampleBatch batch;
  const SampleOptions draw = r.mode == Mode::queue
                                 ? SampleOptions{.consume = Consume::random, .consume_timeout_ms = 1000}
                                 : SampleOptions{.max_staleness = o.max_staleness};
  const PolicyPublish pace{.pace = true, .pace_timeout_ms = kLongWaitMs,
                           .max_lag = o.max_lag == 0 ? std::nullopt : std::optional<uint64_t>(o.max_lag)};
  const auto train = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(o.train_ms));
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  uint64_t version = r.broadcast.load();
  while (Clock::now() < end && !r.stop.load()) {
    try {
      s.sample_transitions(View::replay, o.batch, rng, batch, draw);
    } catch (const Error& e) {
      if (e.errc() != Errc::empty_view) throw;
      ++m.empty_calls;  // nothing inside the window yet
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      uint32_t env = 0;
      std::memcpy(&env, batch.step(kEnvField, row, 0), sizeof env);
      ++m.sampled[r.fast(env) ? 0 : 1];
    }
    std::this_thread::sleep_for(train);
    if (++m.batches % o.batches_per_version != 0) continue;
    const auto before = Clock::now();
    if (r.mode == Mode::paced) {
      s.publish_policy(version + 1, o.max_staleness, pace);
    } else {
      s.publish_policy(version + 1, std::nullopt);
    }
    m.publish_wait_s += std::chrono::duration<double>(Clock::now() - before).count();
    r.broadcast.store(++version, std::memory_order_release);  // release: pairs with the actors' acquire
    ++m.moves;
  }
  m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
}

ModeResult run_mode(const PacingOptions& o, Mode mode) {
  const uint64_t envs = o.fast_envs + o.slow_envs;
  const double fast_steps = o.seconds * 1000.0 / o.fast_step_ms;
  uint64_t capacity = 1024;
  while (static_cast<double>(capacity) < 1.5 * fast_steps + 4.0 * o.episode_steps) capacity *= 2;
  const std::string name = fmt::format("bench-policy-{}-{}", ::getpid(), short_name(mode));
  Buffer buf = Buffer::create(name, envs, capacity, kStep,
                              {.replace = true, .policy_version = "version", .consuming_queue = mode == Mode::queue});
  const RemoveBuffer remove(name);
  Run r(o, mode, buf);
  ModeResult m;
  m.mode = mode;
  Sampler s(buf);
  s.publish_policy(1, mode == Mode::paced ? std::optional<uint64_t>(o.max_staleness) : std::nullopt);
  r.broadcast.store(1);
  std::vector<std::thread> actors;
  for (uint64_t e = 0; e < envs; ++e) actors.emplace_back([&r, e] { actor(r, e); });
  try {
    learn(r, s, m);
  } catch (...) {
    r.stop.store(true);
    for (auto& t : actors) t.join();
    throw;
  }
  r.stop.store(true);
  for (auto& t : actors) t.join();
  if (r.failed) std::rethrow_exception(r.failed);
  for (uint64_t e = 0; e < envs; ++e) {
    const std::size_t g = r.fast(e) ? 0 : 1;
    m.produced[g] += r.counts[e].produced.load();
    m.inserted[g] += r.counts[e].inserted.load();
    m.discarded[g] += r.counts[e].discarded.load();
  }
  m.steps_per_s_env[0] = static_cast<double>(m.produced[0]) / o.fast_envs / m.seconds;
  m.steps_per_s_env[1] = static_cast<double>(m.produced[1]) / o.slow_envs / m.seconds;
  const SegmentInfo info = Inspector(name).snapshot();
  m.held_pushes = info.policy.writers_held;
  m.paced_publishes = info.policy.learner_paced;
  return m;
}

double share(const std::array<uint64_t, 2>& v, std::size_t g) {
  const uint64_t total = v[0] + v[1];
  return total == 0 ? 0.0 : static_cast<double>(v[g]) / static_cast<double>(total);
}

std::string bias(double sampled, double base) {
  return base == 0 ? std::string("-") : fmt::format("{:+.1f} %", 100.0 * (sampled / base - 1.0));
}

void print_groups(const PacingOptions& o, const std::vector<ModeResult>& results) {
  fmt::print("| mode | group | envs | steps/s per env | produced | inserted | discarded | produced share | "
             "inserted share | sampled share | bias vs inserted | bias vs produced |\n");
  fmt::print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const ModeResult& m : results) {
    for (std::size_t g = 0; g < 2; ++g) {
      const double sp = share(m.produced, g);
      const double si = share(m.inserted, g);
      const double ss = share(m.sampled, g);
      fmt::print("| {} | {} | {} | {:.0f} | {} | {} | {} | {:.2f} % | {:.2f} % | {:.2f} % | {} | {} |\n",
                 to_string(m.mode), g == 0 ? "fast" : "slow", g == 0 ? o.fast_envs : o.slow_envs,
                 m.steps_per_s_env[g], m.produced[g], m.inserted[g], m.discarded[g], 100 * sp, 100 * si, 100 * ss,
                 bias(ss, si), bias(ss, sp));
    }
  }
}

void print_learner(const std::vector<ModeResult>& results) {
  const ModeResult& base = results.back();  // the discard baseline
  const double base_rate = static_cast<double>(base.moves) / base.seconds;
  fmt::print("| mode | version moves/s | vs discard | batches/s | learner time in publish | paced publishes | "
             "held pushes | calls with an empty window |\n");
  fmt::print("|---|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const ModeResult& m : results) {
    const double rate = static_cast<double>(m.moves) / m.seconds;
    fmt::print("| {} | {:.1f} | {:.2f}x | {:.0f} | {:.1f} % | {} | {} | {} |\n", to_string(m.mode), rate,
               base_rate == 0 ? 0.0 : rate / base_rate, static_cast<double>(m.batches) / m.seconds,
               100.0 * m.publish_wait_s / m.seconds, m.paced_publishes, m.held_pushes, m.empty_calls);
  }
}

// How many slow episodes the window spans in time: (max_staleness + 1) version moves at the mode's rate.
double span_in_slow_episodes(const PacingOptions& o, const ModeResult& m) {
  if (m.moves == 0) return 0;
  const double window_s = static_cast<double>(o.max_staleness + 1) * m.seconds / static_cast<double>(m.moves);
  return window_s / (o.episode_steps * o.fast_step_ms * o.speed_ratio / 1000.0);
}

}  // namespace

void print_pacing(const PacingOptions& o) {
  fmt::print("## Pacing against discard\n\n");
  fmt::print("{} fast envs at {:g} ms per step, {} slow envs at {:g} ms per step ({:g}x slower); episodes of {} steps, "
             "each step carrying the version loaded at its episode's start; the learner samples {} single steps "
             "with max_staleness {}, trains {:g} ms per batch and moves its version every {} batches; {:g} s per "
             "mode\n\n",
             o.fast_envs, o.fast_step_ms, o.slow_envs, o.fast_step_ms * o.speed_ratio, o.speed_ratio,
             o.episode_steps, o.batch, o.max_staleness, o.train_ms, o.batches_per_version, o.seconds);
  std::vector<ModeResult> results;
  results.push_back(run_mode(o, Mode::paced));
  results.push_back(run_mode(o, Mode::queue));
  results.push_back(run_mode(o, Mode::discard));
  print_groups(o, results);
  fmt::print("\nshares: of all envs' steps, per group; bias: sampled share / inserted (produced) share - 1\n\n");
  print_learner(results);
  fmt::print("\nvs discard: version moves/s over the discard baseline's (pacing holds the learner back while a slow "
             "actor would fall out of the window)\n\n");
  const ModeResult& paced = results.front();
  double worst = 0;
  for (std::size_t g = 0; g < 2; ++g) {
    worst = std::max(worst, std::abs(share(paced.sampled, g) / share(paced.inserted, g) - 1.0));
  }
  fmt::print("goal: with admission control each group's sampled share within 5 % of its inserted share: {} (worst "
             "{:.1f} %); the window spans {:.1f} slow episodes\n\n",
             worst <= 0.05 ? "met" : "NOT met", 100 * worst, span_in_slow_episodes(o, paced));
  const ModeResult& queue = results[1];
  worst = 0;
  for (std::size_t g = 0; g < 2; ++g) {
    worst = std::max(worst, std::abs(share(queue.sampled, g) / share(queue.inserted, g) - 1.0));
  }
  fmt::print("goal, drawing through the consuming queue (each step delivered once): {} (worst {:.1f} %)\n\n",
             worst <= 0.05 ? "met" : "NOT met", 100 * worst);
}

void print_pacing_sweep(const PacingOptions& o, const std::vector<uint32_t>& batches_per_version) {
  fmt::print("## Pacing against discard, by the learner's speed\n\n");
  fmt::print("as above ({:g} s per mode), for each number of batches between version moves; window span: "
             "(max_staleness + 1) version moves, in slow episodes ({} x {:g} ms)\n\n",
             o.seconds, o.episode_steps, o.fast_step_ms * o.speed_ratio);
  fmt::print("| batches per version | paced: moves/s | paced: span | paced: slow bias | paced: fast bias | "
             "discard: moves/s | discard: span | discard: slow steps dropped | discard: slow bias vs produced | "
             "discard: vs inserted |\n");
  fmt::print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const uint32_t n : batches_per_version) {
    PacingOptions p = o;
    p.batches_per_version = n;
    const ModeResult a = run_mode(p, Mode::paced);
    const ModeResult d = run_mode(p, Mode::discard);
    const double dropped =
        d.produced[1] == 0 ? 0.0 : static_cast<double>(d.discarded[1]) / static_cast<double>(d.produced[1]);
    fmt::print("| {} | {:.1f} | {:.1f} | {} | {} | {:.1f} | {:.1f} | {:.1f} % | {} | {} |\n", n,
               static_cast<double>(a.moves) / a.seconds, span_in_slow_episodes(p, a),
               bias(share(a.sampled, 1), share(a.inserted, 1)), bias(share(a.sampled, 0), share(a.inserted, 0)),
               static_cast<double>(d.moves) / d.seconds, span_in_slow_episodes(p, d), 100 * dropped,
               bias(share(d.sampled, 1), share(d.produced, 1)), bias(share(d.sampled, 1), share(d.inserted, 1)));
  }
  fmt::print("\nbias: sampled share / inserted share - 1 (the discard baseline: also against the produced share)\n\n");
}

}  // namespace shmreplay::bench::policy
