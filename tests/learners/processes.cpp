// Several learner processes on one buffer, SIGKILLed at random, beside writers (issue 34's torture, limiter and
// update tests). Written by a helper session; see docs/design/learners.md, "Tests".
//
// Every step is a self-checking payload (tests/payload.hpp): a row any learner samples is checked byte for byte. A
// learner SIGKILLed inside try_update may leave the step it was rewriting mixed in the ring; the repair of its lock
// takes that step (and the older ones) out of the view (docs/design/seqlock.md, "A learner killed while it
// rewrites"). Each learner process marks the step it is about to rewrite in shared memory: the model of which
// rewrites finished. A marked step of a dead learner is "excused" only in the ring below the view: no sampled row may
// ever show it (issue 43, item 3: the test fails on any sighting), and none may remain inside a view at the end.
//
// SHMREPLAY_SOAK_SECONDS=N runs the torture and the limiter case for N seconds each (CI: 3 s and 2.5 s).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "learners/learners_helpers.hpp"
#include "shmreplay/inspector.hpp"

namespace shmreplay::test::learner_processes {

using Clock = std::chrono::steady_clock;
using StepKey = std::pair<uint64_t, uint64_t>;  // (env, step)
constexpr uint64_t kNoStep = ~0ull;             // a violation that no step explains (a mask hole, the head crossed)
constexpr std::size_t kMaxProcs = 8;            // learner processes of one test, at most

// An object of type T in a shared anonymous mapping, for a test and its forked children (a SIGKILLed child cannot
// report at exit). The parent reads what children wrote after reaping them (waitpid orders it).
template <class T>
class Shared {
 public:
  Shared() {
    void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    ptr_ = new (p) T;
  }
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  ~Shared() { ::munmap(ptr_, sizeof(T)); }
  T* operator->() const { return ptr_; }
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
};

// What the children of a test report: totals, the violations they saw (one log entry per distinct step, the first
// kLogged steps, each with the number of times it was seen: an excused mixed step is sampled again and again until it
// is overwritten), and per learner process the step it is rewriting now (((env + 1) << 40) | step, 0 when none) and
// whether it is in a call.
struct Report {
  static constexpr std::size_t kLogged = 256;
  struct Entry {
    std::atomic<uint64_t> env{0}, step{0}, seen{0};
    std::atomic<uint64_t> ready{0};  // release: publishes env, step and text to a reader's acquire in violation/unexcused
    char text[112];
  };
  std::atomic<uint64_t> rows{0}, calls{0}, updates{0}, updates_applied{0}, prio_applied{0}, prio_dropped{0};
  std::atomic<uint64_t> waits{0}, failures{0}, ranked{0}, first_free{0};
  std::atomic<uint64_t> stop{0};  // set by the parent: children that are not killed return (exit code 0)
  std::atomic<uint64_t> violations{0}, entries{0}, unlogged{0};
  Entry log[kLogged] = {};
  std::atomic<uint64_t> updating[kMaxProcs] = {};
  std::atomic<uint64_t> in_call[kMaxProcs] = {};

  void violation(uint64_t env, uint64_t step, const std::string& text) {
    violations.fetch_add(1, std::memory_order_relaxed);
    if (step != kNoStep) {
      // A step already logged is counted there. Two processes that log the same new step at once take two entries:
      // harmless, each is judged on its own.
      const uint64_t n = std::min<uint64_t>(entries.load(std::memory_order_relaxed), kLogged);
      for (uint64_t i = 0; i < n; ++i) {
        Entry& e = log[i];
        if (e.ready.load(std::memory_order_acquire) != 0 && e.env.load(std::memory_order_relaxed) == env &&
            e.step.load(std::memory_order_relaxed) == step) {
          e.seen.fetch_add(1, std::memory_order_relaxed);
          return;
        }
      }
    }
    const uint64_t i = entries.fetch_add(1, std::memory_order_relaxed);
    if (i >= kLogged) {
      unlogged.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Entry& e = log[i];
    e.env.store(env, std::memory_order_relaxed);
    e.step.store(step, std::memory_order_relaxed);
    e.seen.fetch_add(1, std::memory_order_relaxed);
    std::snprintf(e.text, sizeof e.text, "%s", text.c_str());
    e.ready.store(1, std::memory_order_release);  // pairs with the acquire loads above and in unexcused
  }
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the report's counters work across processes");

// Runs a child's body; an exception ends the child with exit code 3 (it must never unwind into the parent's copy of
// the test runner), counted in `report`.
[[noreturn]] inline void child_main(Report* report, const char* who, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s %d: %s\n", who, static_cast<int>(::getpid()), e.what());
    if (report != nullptr) report->failures.fetch_add(1);
  }
  ::_exit(3);  // only reached on failure: a healthy child is killed
}

// Waits for a child that ends by itself; its exit code, or 128 + the signal that ended it.
inline int reap_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

// The first step of row `row` whose bytes are not the payload of (env, step, version) for the version its header
// names (or whose header names another env or step), kNoStep when every valid step is whole.
inline uint64_t first_bad_step(const SampleBatch& b, std::size_t row) {
  const uint64_t env = b.env_ids()[row];
  const uint64_t start = b.start_steps()[row];
  for (std::size_t t = 0; t < b.sequence_length() && b.valid(row, t); ++t) {
    uint64_t hdr[4];
    float body[kBody];
    uint8_t tail[kTail];
    std::memcpy(hdr, b.step(0, row, t), sizeof hdr);
    std::memcpy(body, b.step(1, row, t), sizeof body);
    std::memcpy(tail, b.step(2, row, t), sizeof tail);
    const Payload& expect = expected_payload(env, start + t, hdr[2]);
    if (hdr[0] != env || hdr[1] != start + t || hdr[3] != expect.hdr[3] ||
        std::memcmp(body, expect.body, sizeof body) != 0 || std::memcmp(tail, expect.tail, sizeof tail) != 0) {
      return start + t;
    }
  }
  return kNoStep;
}

// Checks every row of `batch` (check_row: mask a prefix, no step at or past the head read after the call, the mask
// not cut short of the head read before it, every byte the payload its header names) and that every version is one
// a writer (0) or an updater (its slot + 1 in bits 40 and up, slots below `max_updaters`) wrote. Reports violations.
inline void check_batch(const Buffer& buf, const SampleBatch& batch, const std::vector<uint64_t>& heads_before,
                        Report* report, uint64_t max_updaters) {
  for (std::size_t row = 0; row < batch.rows(); ++row) {
    const uint64_t env = batch.env_ids()[row];
    const uint64_t head_after = segment_of(buf).env_control(env).head.load(std::memory_order_acquire);
    std::string v = check_row(batch, row, head_after, heads_before[env]);
    for (std::size_t t = 0; v.empty() && t < batch.sequence_length() && batch.valid(row, t); ++t) {
      uint64_t version = 0;
      std::memcpy(&version, batch.step(0, row, t) + 2 * sizeof(uint64_t), sizeof version);
      if (version != 0 && (version >> 40) > max_updaters) v = fmt::format("version {:#x} written by nobody", version);
    }
    if (!v.empty()) {
      report->violation(env, first_bad_step(batch, row),
                        fmt::format("env {} row from {}: {}", env, batch.start_steps()[row], v));
    }
  }
  report->rows.fetch_add(batch.rows(), std::memory_order_relaxed);
}

// The heads of every env now (before a sample call: check_row's lower bound on each row's length).
inline void read_heads(const Buffer& buf, std::vector<uint64_t>& heads) {
  heads.resize(buf.num_envs());
  for (uint64_t e = 0; e < heads.size(); ++e) heads[e] = segment_of(buf).env_control(e).head.load(std::memory_order_acquire);
}

// try_update of (env, step) to payload version `version`, marked in the report for the learner process `index` while
// it runs (a kill inside it may leave the step mixed: excused).
inline bool marked_update(Sampler& s, Report* report, std::size_t index, uint64_t env, uint64_t step,
                          uint64_t version) {
  const Payload p = make_payload(env, step, version);
  report->updating[index].store(((env + 1) << 40) | step, std::memory_order_seq_cst);
  const bool done = s.try_update(env, step, {field_bytes(std::span<const uint64_t>(p.hdr, 4)),
                                             field_bytes(std::span<const float>(p.body, kBody)),
                                             field_bytes(std::span<const uint8_t>(p.tail, kTail))});
  report->updating[index].store(0, std::memory_order_seq_cst);
  report->updates.fetch_add(1, std::memory_order_relaxed);
  report->updates_applied.fetch_add(done ? 1 : 0, std::memory_order_relaxed);
  return done;
}

// The step a dead learner process `index` was rewriting, into `excused`.
inline void excuse_marked(Report* report, std::size_t index, std::set<StepKey>& excused) {
  const uint64_t w = report->updating[index].load();
  if (w != 0) excused.emplace((w >> 40) - 1, w & ((1ull << 40) - 1));
  report->updating[index].store(0);
}

// The violations the children logged that no excused step explains, as text ("" when none); `excused_seen` counts
// the sightings it excused. A violation the log had no room for fails the test: nothing shows it was excused.
inline std::string unexcused(const Report* report, const std::set<StepKey>& excused, uint64_t* excused_seen) {
  const uint64_t n = std::min<uint64_t>(report->entries.load(), Report::kLogged);
  std::string out;
  for (uint64_t i = 0; i < n; ++i) {
    const Report::Entry& e = report->log[i];
    if (e.ready.load(std::memory_order_acquire) == 0) {  // pairs with violation's release (its writer was killed)
      if (out.empty()) out = "a violation whose writer died before it was logged";
      continue;
    }
    const uint64_t step = e.step.load();
    if (step != kNoStep && excused.count({e.env.load(), step}) != 0) {
      *excused_seen += e.seen.load();
      continue;
    }
    if (out.empty()) out = fmt::format("{} (seen {} times)", e.text, e.seen.load());
  }
  if (out.empty() && report->unlogged.load() > 0) {
    out = fmt::format("{} violations of {} distinct steps, more than the log holds ({})", report->violations.load(),
                      report->entries.load(), Report::kLogged);
  }
  return out;
}

// Every step of every env's view straight from the ring (nobody may be writing): its header names its env and step,
// and every byte is the payload of the version it names. Steps in `excused` are skipped (counted in *skipped: a
// killed learner's mixed step left inside a view, which the caller requires to be 0).
inline std::string verify_stored(const Buffer& buf, const std::set<StepKey>& excused, uint64_t* skipped) {
  const uint64_t cap = buf.capacity();
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    const layout::EnvControl& c = segment_of(buf).env_control(e);
    const uint64_t head = c.head.load();
    const uint64_t claimed = c.claimed.load() & layout::kClaimMask;
    const uint64_t from = std::max(claimed > cap ? claimed - cap : 0, c.stacks_intact_from.load());
    for (uint64_t s = from; s < head; ++s) {
      if (stored_version(buf, e, s)) continue;
      if (excused.count({e, s}) != 0) {
        ++*skipped;
        continue;
      }
      const std::string bytes = stored_step(buf, e, s);
      uint64_t hdr[4];
      std::memcpy(hdr, bytes.data(), sizeof hdr);
      return fmt::format("env {} step {} (header: env {} step {} version {:#x}) is not one payload", e, s, hdr[0],
                         hdr[1], hdr[2]);
    }
  }
  return "";
}

// The tree of env `env` against a rebuild from its leaves in private memory: every internal node bit for bit, "" when
// they agree. Then every stored step's leaf is its own (tagged with the step).
inline std::string tree_vs_rebuild(const Buffer& buf, uint64_t env) {
  const detail::PriorityTree t = detail::priority_tree_of(segment_of(buf), env);
  std::vector<std::atomic<uint64_t>> words(2 * t.leaves);
  for (uint64_t i = 0; i < words.size(); ++i) words[i].store(t.words[i].load());
  const detail::PriorityTree copy{words.data(), t.leaves, t.capacity};
  detail::rebuild(copy);
  for (uint64_t n = 1; n < t.leaves; ++n) {
    if (copy.words[n].load() != t.words[n].load()) {
      return fmt::format("env {} node {}: walked {}, rebuilt {}", env, n, std::bit_cast<double>(t.words[n].load()),
                         std::bit_cast<double>(copy.words[n].load()));
    }
  }
  for (uint64_t n = t.leaves + t.capacity; n < 2 * t.leaves; ++n) {
    if (t.words[n].load() != 0) return fmt::format("env {}: leaf {} past the capacity is not 0", env, n - t.leaves);
  }
  const layout::EnvControl& c = segment_of(buf).env_control(env);
  const uint64_t head = c.head.load();
  const uint64_t claimed = c.claimed.load() & layout::kClaimMask;
  for (uint64_t s = claimed > t.capacity ? claimed - t.capacity : 0; s < head; ++s) {
    if (detail::step_weight(t, c, s) < 0) return fmt::format("env {}: stored step {} has no leaf of its own", env, s);
  }
  return "";
}

// Pushes one payload step (version 0) to each env of `ids`, with a random priority each when the buffer has
// priorities.
struct PrioritizedPusher {
  std::vector<uint64_t> hdr;
  std::vector<float> body;
  std::vector<uint8_t> tail;
  std::vector<float> prios;

  void push(Writer& w, const std::vector<uint64_t>& ids, Rng& rng) {
    hdr.clear();
    body.clear();
    tail.clear();
    prios.clear();
    for (const uint64_t e : ids) {
      const Payload p = make_payload(e, w.head(e), 0);
      hdr.insert(hdr.end(), p.hdr, p.hdr + 4);
      body.insert(body.end(), p.body, p.body + kBody);
      tail.insert(tail.end(), p.tail, p.tail + kTail);
      prios.push_back(static_cast<float>(1 + rng() % 100) / 10.0f);
    }
    const FieldBytes fields[3] = {field_bytes(hdr), field_bytes(body), field_bytes(tail)};
    if (w.buffer().has_priorities()) {
      w.push(std::span<const uint64_t>(ids), fields, prios);
    } else {
      w.push(std::span<const uint64_t>(ids), fields);
    }
  }
};

// ---------------------------------------------------------------------------------------------------------------
// 1. The torture

// A writer process of the torture: leases `envs` (taking dead leases over) and pushes forever: batched pushes of
// random subsets with priorities, and reservations, some half-filled and held a moment, some abandoned.
[[noreturn]] void torture_writer(const std::string& name, std::vector<uint64_t> envs, uint64_t seed, Report* report) {
  child_main(report, "writer", [&] {
    Buffer b = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Writer w(b, envs);
    Rng rng(seed);
    PrioritizedPusher pusher;
    std::vector<uint64_t> ids;
    for (uint64_t n = 1;; ++n) {
      if (rng() % 5 != 0) {
        ids.clear();
        for (const uint64_t e : envs) {
          if (rng() % 3 != 0) ids.push_back(e);
        }
        for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng() % i]);
        if (!ids.empty()) pusher.push(w, ids, rng);
      } else {
        StepSlot slot = w.reserve(envs[rng() % envs.size()]);
        if (rng() % 4 == 0) {
          fill_slot(slot, 1);
          ::usleep(static_cast<useconds_t>(rng() % 200));
        }
        fill_slot(slot);
        if (b.has_priorities()) slot.set_priority(static_cast<double>(1 + rng() % 100) / 10);
        if (rng() % 8 != 0) slot.commit();
      }
      if (n % 4 == 0) ::usleep(300);  // leave the cores to the learners (CI has 2)
    }
  });
}

// A learner process of the torture: takes slot `preferred` (or, when it is held by a live learner or `preferred` is
// empty, the first free one), then samples every way, updates steps and priorities, waits and resets its online
// view, checking every row, until killed.
[[noreturn]] void torture_learner(const std::string& name, std::size_t index, std::optional<uint64_t> preferred,
                                  uint64_t seed, Report* report) {
  child_main(report, "learner", [&] {
    Buffer buf = Buffer::open(name, {.expected_schema = kPayloadSchema});
    std::optional<Sampler> s;
    if (preferred) {
      try {
        s.emplace(buf, SamplerOptions{.rank = preferred});
        report->ranked.fetch_add(1);
      } catch (const Error& e) {
        if (e.errc() != Errc::lease_held) throw;  // another new learner took it first (it is first-free's)
      }
    }
    if (!s) {
      s.emplace(buf);
      report->first_free.fetch_add(1);
    }
    const uint64_t slot = s->rank();
    const bool prio = buf.has_priorities();
    Rng rng(seed);
    SampleBatch batch;
    std::vector<uint64_t> heads;
    std::vector<float> prios;
    for (uint64_t call = 1;; ++call) {
      const int kind = static_cast<int>(rng() % 8);
      const std::size_t L = 1 + static_cast<std::size_t>(rng() % 8);
      read_heads(buf, heads);
      report->in_call[index].store(1, std::memory_order_relaxed);
      try {
        bool sampled = true;
        switch (kind) {
          case 0: s->sample(View::replay, 32, L, 0.0, rng, batch); break;
          case 1: s->sample(View::replay, 32, L, 1.0, rng, batch); break;  // length^power
          case 2: s->sample(View::online, 16, L, 2.0, rng, batch); break;
          case 3: s->sample_mixed(24, 8, L, 1.0, rng, batch); break;
          case 4:
            if (prio) {
              const View view = rng() % 2 == 0 ? View::replay : View::online;
              s->sample(view, 32, L, 0.0, rng, batch, {.prioritized = true, .importance_exponent = 0.4});
            } else {
              s->sample_transitions(View::replay, 32, rng, batch);
            }
            break;
          default: sampled = false;
        }
        if (sampled) {
          check_batch(buf, batch, heads, report, /*max_updaters=*/kMaxProcs);
          if (kind == 4 && prio) {
            prios.resize(batch.rows());
            for (float& p : prios) p = static_cast<float>(1 + rng() % 1000) / 100.0f;
            const PriorityUpdateResult u = s->update_priorities(batch.env_ids(), batch.start_steps(), prios);
            report->prio_applied.fetch_add(u.applied, std::memory_order_relaxed);
            report->prio_dropped.fetch_add(u.dropped, std::memory_order_relaxed);
          }
        } else if (kind == 5 || kind == 6) {
          // Rewrite a few of the newest steps of an env (where the other learners rewrite too), as version
          // (slot + 1) << 40 | call.
          const uint64_t env = rng() % buf.num_envs();
          const uint64_t head = heads[env];
          for (int i = 0; i < 3 && head > 8; ++i) {
            marked_update(*s, report, index, env, head - 1 - rng() % 8, ((slot + 1) << 40) | call);
          }
        } else if (rng() % 2 == 0) {
          report->waits.fetch_add(1, std::memory_order_relaxed);
          const uint64_t most = buf.num_envs() * buf.capacity();
          s->wait(View::online, std::min(most, s->size(View::online) + 4), 5);  // a kill here leaves the slot's sleeper counted
        } else {
          s->reset_online_queue(rng() % 2 == 0 ? OnlineReset::now : OnlineReset::sampled);
        }
      } catch (const Error& e) {
        if (e.errc() != Errc::empty_view) throw;
      }
      report->in_call[index].store(0, std::memory_order_relaxed);
      report->calls.fetch_add(1, std::memory_order_relaxed);
      if (call % 2 == 0) ::usleep(200);
    }
  });
}

// The slot whose lease `pid` holds, if any (the pid is dead and reaped: its lease words no longer move).
inline std::optional<uint64_t> slot_of(const Buffer& buf, pid_t pid) {
  for (uint64_t r = 0; r < segment_of(buf).max_learners(); ++r) {
    if (layout::owner_pid(detail::learner_slot(segment_of(buf), r).lease.lease.load()) == static_cast<uint64_t>(pid)) {
      return r;
    }
  }
  return std::nullopt;
}

TEST_CASE("learner processes and writer processes SIGKILLed at random on one buffer with priorities: no torn row, "
          "one takeover per dead slot holder, exact trees, no lock held and no update_seq odd afterwards") {
  const auto start = Clock::now();
  const uint64_t num_envs = 8;
  const uint64_t capacity = 64;
  const uint64_t slots = 3;
  const std::size_t num_writers = 2;
  SegmentGuard guard(unique_name("lproc-torture"));
  Shared<Report> report;
  std::vector<std::vector<uint64_t>> slices(num_writers);
  for (uint64_t e = 0; e < num_envs; ++e) slices[e % num_writers].push_back(e);

  Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kPayloadSchema,
                              {.priority_exponent = 0.6, .max_learners = slots});
  uint64_t seed = 1;
  std::vector<pid_t> writers(num_writers), learners(slots);
  for (std::size_t w = 0; w < num_writers; ++w) {
    writers[w] = spawn([&, w, s = seed++] { torture_writer(guard.name(), slices[w], s, report.get()); });
  }
  {
    Sampler first(buf);  // the learners start once every env has steps (the parent's slot is released after)
    REQUIRE(first.wait(View::replay, num_envs * 8, 10'000));
  }
  for (std::size_t i = 0; i < slots; ++i) {
    learners[i] = spawn([&, i, s = seed++] { torture_learner(guard.name(), i, i, s, report.get()); });
  }

  std::vector<uint64_t> holder_kills(slots, 0);  // kills of the process that held the slot's lease
  std::set<StepKey> excused;                     // steps a killed learner may have left mixed (documented)
  uint64_t learner_kills = 0, writer_kills = 0, kills_in_call = 0, kills_in_update = 0;
  const auto kill_learner = [&](std::size_t i) {
    kills_in_call += report->in_call[i].load();
    kills_in_update += report->updating[i].load() != 0;
    CHECK_MESSAGE(kill_and_reap(learners[i]), "a learner process exited on its own (see its stderr)");
    ++learner_kills;
    excuse_marked(report.get(), i, excused);
    report->in_call[i].store(0);
    const std::optional<uint64_t> held = slot_of(buf, learners[i]);
    if (held) ++holder_kills[*held];
    return held;
  };
  Rng rng(17);
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_seconds(3.0)));
  while (Clock::now() < deadline || learner_kills < 3 || writer_kills == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(15 + rng() % 60));
    if (rng() % 3 != 0) {
      const std::size_t i = rng() % slots;
      const std::optional<uint64_t> held = kill_learner(i);
      // Half of the new learners ask for the dead one's slot by rank, half take the first free (or dead) slot.
      std::optional<uint64_t> preferred;
      if (rng() % 2 == 0) preferred = held ? *held : i;
      learners[i] = spawn([&, i, preferred, s = seed++] {
        torture_learner(guard.name(), i, preferred, s, report.get());
      });
    } else {
      const std::size_t w = rng() % num_writers;
      CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
      ++writer_kills;
      writers[w] = spawn([&, w, s = seed++] { torture_writer(guard.name(), slices[w], s, report.get()); });
    }
  }
  const double ran_s = std::chrono::duration<double>(Clock::now() - start).count();
  for (std::size_t i = 0; i < slots; ++i) kill_learner(i);
  for (const pid_t pid : writers) CHECK(kill_and_reap(pid));

  // A new Sampler of every slot: each takes its dead holder's lease over and repairs what it left (locks, walks,
  // sleepers); a Writer of every env does the same for the writers (a walk of the slot being written).
  std::vector<Sampler> mine;
  for (uint64_t r = 0; r < slots; ++r) mine.emplace_back(buf, SamplerOptions{.rank = r});
  std::vector<uint64_t> every_env(num_envs);
  for (uint64_t e = 0; e < num_envs; ++e) every_env[e] = e;
  const Writer all(buf, every_env);
  const layout::GlobalControl& g = segment_of(buf).global_control();
  uint64_t takeovers_total = 0;
  for (uint64_t r = 0; r < slots; ++r) {
    const detail::LearnerSlotWords w = detail::learner_slot(segment_of(buf), r);
    CAPTURE(r);
    // At least one takeover per dead holder seen at its kill, and at most one per death: a repairer of a dead
    // updater (or a new learner taking the first dead slot) may take the slot over between the kill and this test's
    // look at who held it, and a repairer killed while it held a slot is a dead holder of that slot too.
    CHECK(w.lease.takeovers.load() >= holder_kills[r]);
    takeovers_total += w.lease.takeovers.load();
    CHECK(w.priority_walk.load() == 0);
    CHECK(w.waiters.load() == 0);
    CHECK(w.waiting_rows.load() == 0);
  }
  CHECK(g.waiters.load() == 0);  // every dead learner's sleepers were taken back, nobody else's
  for (uint64_t e = 0; e < num_envs; ++e) {
    const layout::EnvControl& c = segment_of(buf).env_control(e);
    CAPTURE(e);
    CHECK((c.claimed.load() & ~layout::kClaimMask) == 0);  // no update lock left held
    CHECK(c.update_seq.load() % 2 == 0);                  // no update section left open
    CHECK(tree_vs_rebuild(buf, e) == "");
  }
  uint64_t excused_stored = 0, excused_rows = 0;
  CHECK(verify_stored(buf, excused, &excused_stored) == "");
  const std::string bad = unexcused(report.get(), excused, &excused_rows);

  // The parent's learners sample sound rows (by priority too) from what is left.
  Rng mine_rng(99);
  SampleBatch batch;
  std::vector<uint64_t> heads;
  for (uint64_t r = 0; r < slots; ++r) {
    read_heads(buf, heads);
    mine[r].sample(View::replay, 64, 4, 0.0, mine_rng, batch, {.prioritized = true});
    check_batch(buf, batch, heads, report.get(), kMaxProcs);
  }
  MESSAGE(fmt::format("{} learner kills ({} inside a call, {} inside try_update; holders per slot {}/{}/{}), {} "
                      "writer kills; new learners: {} by rank, {} first free; {} calls, {} rows checked, {} "
                      "try_update ({} applied), {} priorities set, {} dropped, {} waits; {} excused mixed steps "
                      "({} rows, {} stored); the torture ran for {:.3f} s",
                      learner_kills, kills_in_call, kills_in_update, holder_kills[0], holder_kills[1],
                      holder_kills[2], writer_kills, report->ranked.load(), report->first_free.load(),
                      report->calls.load(), report->rows.load(), report->updates.load(),
                      report->updates_applied.load(), report->prio_applied.load(), report->prio_dropped.load(),
                      report->waits.load(), excused.size(), excused_rows, excused_stored, ran_s));
  CHECK_MESSAGE(bad == "", bad);
  CHECK(excused_rows == 0);    // no sampled row ever showed a killed learner's mixed step
  CHECK(excused_stored == 0);  // and none is left inside a view
  CHECK(report->failures.load() == 0);
  CHECK(report->rows.load() > 0);
  CHECK(report->updates_applied.load() > 0);
  CHECK(report->prio_applied.load() > 0);
  CHECK(holder_kills[0] + holder_kills[1] + holder_kills[2] > 0);
  CHECK(takeovers_total <= learner_kills + writer_kills);  // no takeover without a death
}

// ---------------------------------------------------------------------------------------------------------------
// 2. The rate limiter with three learners

// A writer process that waits for the limiter: pushes one payload step to each of its envs per call, forever.
[[noreturn]] void limited_writer(const std::string& name, std::vector<uint64_t> envs, uint64_t seed, Report* report) {
  child_main(report, "writer", [&] {
    Buffer b = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Writer w(b, envs, {.wait_for_rate_limit = true, .rate_limit_timeout_ms = 60'000});
    Rng rng(seed);
    PrioritizedPusher pusher;
    for (uint64_t n = 1;; ++n) {
      pusher.push(w, envs, rng);
      if (n % 8 == 0) ::usleep(static_cast<useconds_t>(rng() % 400));
    }
  });
}

// A learner process of rank `rank` under the limiter: sample calls of kLimitedBatch rows (now and then a mixed one,
// whose empty online view gives its reservation back), every row checked, until killed.
constexpr std::size_t kLimitedBatch = 16;
[[noreturn]] void limited_learner(const std::string& name, uint64_t rank, uint64_t seed, Report* report) {
  child_main(report, "learner", [&] {
    Buffer buf = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Sampler s(buf, {.rank = rank});
    Rng rng(seed);
    SampleBatch batch;
    std::vector<uint64_t> heads;
    SampleOptions o;
    o.rate_limit_timeout_ms = 60'000;
    for (uint64_t call = 1;; ++call) {
      const std::size_t L = 1 + static_cast<std::size_t>(rng() % 4);
      read_heads(buf, heads);
      report->in_call[rank].store(1, std::memory_order_relaxed);
      try {
        if (rng() % 8 == 0) {
          s.sample_mixed(kLimitedBatch - 4, 4, L, 1.0, rng, batch, o);
        } else {
          s.sample(View::replay, kLimitedBatch, L, static_cast<double>(rng() % 2), rng, batch, o);
        }
        check_batch(buf, batch, heads, report, /*max_updaters=*/0);  // adds the rows of every completed call
      } catch (const Error& e) {
        if (e.errc() != Errc::empty_view) throw;
      }
      report->in_call[rank].store(0, std::memory_order_relaxed);
      report->calls.fetch_add(1, std::memory_order_relaxed);
      if (call % 4 == 0) s.reset_online_queue(OnlineReset::sampled);
      if (rng() % 4 == 0) ::usleep(static_cast<useconds_t>(rng() % 1500));
    }
  });
}

TEST_CASE("three learner processes and waiting writers under a rate limiter, learners SIGKILLed while they wait or "
          "sample: the error never leaves [min_diff, max_diff + a batch per learner], and it stays live") {
  const uint64_t num_envs = 6;
  const uint64_t slots = 3;
  const RateLimit limit = RateLimit::ratio(2.0, 64, 96.0);  // error bounds 32 .. 224
  // Above max_diff only by rows a failed call gives back after writers were admitted against them: a batch per learner.
  const double slack = static_cast<double>(slots * kLimitedBatch);
  SegmentGuard guard(unique_name("lproc-limit"));
  Shared<Report> report;
  Buffer buf = Buffer::create(guard.name(), num_envs, 1024, kPayloadSchema,
                              {.rate_limit = limit, .max_learners = slots});
  const layout::GlobalControl& g = segment_of(buf).global_control();
  uint64_t seed = 100;
  std::vector<std::vector<uint64_t>> slices = {{0, 1}, {2, 3}, {4, 5}};
  std::vector<pid_t> writers, learners;
  for (const auto& slice : slices) {
    writers.push_back(spawn([&, slice, s = seed++] { limited_writer(guard.name(), slice, s, report.get()); }));
  }
  for (uint64_t r = 0; r < slots; ++r) {
    learners.push_back(spawn([&, r, s = seed++] { limited_learner(guard.name(), r, s, report.get()); }));
  }

  uint64_t readings = 0, below = 0, above = 0, learner_kills = 0, writer_kills = 0;
  uint64_t killed_waiting = 0, killed_in_call = 0;
  double lowest = 1e300, highest = -1e300;
  std::string first_out;
  // A sound reading of the error: samples read before and after the heads and equal (inserts only grow, so the
  // pair lies between the errors at the two reads, and both lie within the bounds).
  const auto read = [&](uint64_t& inserts, uint64_t& samples) {
    for (int tries = 0; tries < 100; ++tries) {
      samples = g.samples.load(std::memory_order_seq_cst);
      inserts = detail::count_inserts(segment_of(buf)).inserts;
      if (g.samples.load(std::memory_order_seq_cst) == samples) return true;
    }
    return false;
  };
  const auto kill_learner = [&](uint64_t r) {
    const bool in_call = report->in_call[r].load() != 0;
    CHECK_MESSAGE(kill_and_reap(learners[r]), "a learner process exited on its own (see its stderr)");
    ++learner_kills;
    // The dead learner's waiting mark stays as it died: rows waiting for the limiter, or 0.
    if (detail::learner_slot(segment_of(buf), r).waiting_rows.load() != 0) {
      ++killed_waiting;
    } else if (in_call) {
      ++killed_in_call;  // drawing, checking, or between its reservation and its draw
    }
    report->in_call[r].store(0);
  };
  Rng rng(23);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(run_seconds(2.5)));
  auto next_kill = Clock::now() + std::chrono::milliseconds(40);
  uint64_t inserts = 0, samples = 0;
  // Past the deadline it goes on (10 s at most) until a kill has landed in a learner's wait or call: which moment a
  // kill meets is chance, and the check below wants one.
  const auto last_chance = deadline + std::chrono::seconds(10);
  while (Clock::now() < deadline || learner_kills < 4 ||
         (killed_waiting + killed_in_call == 0 && Clock::now() < last_chance)) {
    if (read(inserts, samples)) {
      ++readings;
      const double error = static_cast<double>(inserts) * limit.samples_per_insert - static_cast<double>(samples);
      if (samples > 0) lowest = std::min(lowest, error);
      highest = std::max(highest, error);
      if (samples > 0 && error < limit.min_diff && below++ == 0) {
        first_out = fmt::format("error {} below min_diff {} ({} inserts, {} samples)", error, limit.min_diff,
                                inserts, samples);
      }
      if (error > limit.max_diff + slack && above++ == 0) {
        first_out = fmt::format("error {} above max_diff {} + {} ({} inserts, {} samples)", error, limit.max_diff,
                                slack, inserts, samples);
      }
    }
    if (Clock::now() >= next_kill) {
      if (rng() % 4 != 0) {
        const uint64_t r = rng() % slots;
        kill_learner(r);
        learners[r] = spawn([&, r, s = seed++] { limited_learner(guard.name(), r, s, report.get()); });
      } else {
        const std::size_t w = rng() % writers.size();
        CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer process exited on its own (see its stderr)");
        ++writer_kills;
        writers[w] = spawn([&, w, s = seed++] { limited_writer(guard.name(), slices[w], s, report.get()); });
      }
      next_kill = Clock::now() + std::chrono::milliseconds(30 + rng() % 120);
    }
    ::usleep(300);
  }
  // Live after the kills: the new learners and writers make progress (no wait left hanging on a dead learner's
  // reservation, sleeper count or waiting mark).
  const uint64_t samples_at_end = g.samples.load(), inserts_at_end = detail::count_inserts(segment_of(buf)).inserts;
  bool live = false;
  for (const auto give_up = Clock::now() + std::chrono::seconds(20); !live && Clock::now() < give_up;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    live = g.samples.load() >= samples_at_end + 8 * kLimitedBatch &&
           detail::count_inserts(segment_of(buf)).inserts >= inserts_at_end + 4 * kLimitedBatch;
  }
  CHECK_MESSAGE(live, "no progress after the last kill");
  for (uint64_t r = 0; r < slots; ++r) kill_learner(r);
  for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
  // Rows reserved and never drawn: only by learners killed between their reservation and the end of their call.
  const uint64_t leaked = g.samples.load() - report->rows.load();
  CHECK(g.samples.load() >= report->rows.load());
  CHECK(leaked <= learner_kills * kLimitedBatch);
  std::vector<Sampler> mine;  // every slot taken over: the dead learners' sleepers and waiting marks go
  for (uint64_t r = 0; r < slots; ++r) mine.emplace_back(buf, SamplerOptions{.rank = r});
  const RateLimitState st = buf.rate_limit_state();
  CHECK(g.waiters.load() == 0);
  CHECK(st.learners_waiting == 0);
  CHECK(st.learner_waiting_rows == 0);
  CHECK(st.writer_timeouts == 0);
  std::set<StepKey> none;
  uint64_t unused = 0;
  const std::string bad = unexcused(report.get(), none, &unused);
  MESSAGE(fmt::format("{} readings, error within [{}, {}] (bounds [{}, {}] + {}); {} learner kills ({} waiting, {} "
                      "in a call), {} writer kills; {} inserts, {} samples, {} rows drawn by completed calls, {} "
                      "reserved rows never drawn; held back: {} sample calls, {} pushes",
                      readings, lowest, highest, limit.min_diff, limit.max_diff, slack, learner_kills,
                      killed_waiting, killed_in_call, writer_kills, st.inserts, st.samples, report->rows.load(), leaked,
                      st.learner_limited, st.writers_limited));
  CHECK_MESSAGE(below == 0, first_out);
  CHECK_MESSAGE(above == 0, first_out);
  CHECK(readings > 100);
  CHECK(killed_waiting + killed_in_call > 0);
  CHECK_MESSAGE(bad == "", bad);
  CHECK(report->failures.load() == 0);
}

// ---------------------------------------------------------------------------------------------------------------
// 3. Two learners' update_priorities of the same steps

TEST_CASE("two learners set the priorities of the same steps at once, while a third rewrites them: each leaf ends "
          "with one of the two values, nothing is dropped, and every tree equals its rebuild") {
  const uint64_t num_envs = 2;
  const uint64_t capacity = 64;
  SegmentGuard guard(unique_name("lproc-prio"));
  Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kPayloadSchema,
                              {.priority_exponent = 0.7, .max_learners = 3});
  {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    PrioritizedPusher pusher;
    Rng rng(1);
    for (uint64_t i = 0; i < capacity; ++i) pusher.push(w, {0, 1}, rng);  // full rings; nothing is overwritten after
  }
  std::vector<uint64_t> envs, steps;
  for (uint64_t e = 0; e < num_envs; ++e) {
    for (uint64_t s = 0; s < capacity; ++s) {
      envs.push_back(e);
      steps.push_back(s);
    }
  }
  const std::size_t n = envs.size();
  const int rounds = 150;
  // Round k's values: learner A's and B's differ at every step, so the leaf tells whose update was last.
  const auto value = [](int learner, int k, std::size_t i) {
    const auto round = static_cast<std::size_t>(k);
    return static_cast<float>(learner == 0 ? 1 + (round * 7 + i) % 50 : 100 + (round * 5 + i) % 50) / 4.0f;
  };
  std::barrier sync(3);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> dropped{0}, unweighted{0}, rewrites{0};
  const auto learner = [&](int who) {
    Sampler s(buf, {.rank = static_cast<uint64_t>(who)});
    std::vector<uint64_t> my_envs(n), my_steps(n);
    std::vector<float> prios(n);
    std::vector<double> weights(n);
    for (int k = 0; k < rounds; ++k) {
      // Even rounds in the same order (each leaf contended), odd ones in opposite orders (they cross mid-way).
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t j = who == 1 && k % 2 == 1 ? n - 1 - i : i;
        my_envs[i] = envs[j];
        my_steps[i] = steps[j];
        prios[i] = value(who, k, j);
      }
      sync.arrive_and_wait();  // the round starts
      const PriorityUpdateResult u = s.update_priorities(my_envs, my_steps, prios);
      dropped += u.dropped;
      s.priority_weights(my_envs, my_steps, weights);
      for (const double w : weights) unweighted += w < 0;
      sync.arrive_and_wait();  // the round is over: the main thread checks
    }
  };
  // A third learner (slot 2) rewrites the same steps meanwhile: its update lock, bits 63 and 56-62 of claimed, must
  // not make a stored step look overwritten to the others.
  std::thread rewriter([&] {
    Sampler s(buf, {.rank = 2});
    Rng rng(5);
    for (uint64_t k = 1; !stop.load(); ++k) {
      const uint64_t e = rng() % num_envs, step = rng() % capacity;
      const Payload p = make_payload(e, step, (3ull << 40) | k);
      rewrites += s.try_update(e, step, {field_bytes(std::span<const uint64_t>(p.hdr, 4)),
                                         field_bytes(std::span<const float>(p.body, kBody)),
                                         field_bytes(std::span<const uint8_t>(p.tail, kTail))});
    }
  });
  std::thread a(learner, 0), b(learner, 1);
  uint64_t last_a = 0, last_b = 0, bad_leaves = 0;
  std::string first_bad;
  const double alpha = 0.7;
  for (int k = 0; k < rounds; ++k) {
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    for (std::size_t i = 0; i < n; ++i) {
      const detail::PriorityTree t = detail::priority_tree_of(segment_of(buf), envs[i]);
      const double w = detail::slot_weight(t, steps[i]);
      const double wa = static_cast<float>(detail::priority_weight(value(0, k, i), alpha));
      const double wb = static_cast<float>(detail::priority_weight(value(1, k, i), alpha));
      last_a += w == wa;
      last_b += w == wb;
      if (w != wa && w != wb && bad_leaves++ == 0) {
        first_bad = fmt::format("round {}: env {} step {} has weight {}, neither {} nor {}", k, envs[i], steps[i], w,
                                wa, wb);
      }
    }
    for (uint64_t e = 0; e < num_envs; ++e) {
      const std::string t = tree_vs_rebuild(buf, e);
      if (!t.empty() && bad_leaves++ == 0) first_bad = fmt::format("round {}: {}", k, t);
    }
  }
  a.join();
  b.join();
  stop = true;
  rewriter.join();
  MESSAGE(fmt::format("{} rounds of {} steps: the last value was A's {} times and B's {} times; {} rewrites by a "
                      "third learner meanwhile",
                      rounds, n, last_a, last_b, rewrites.load()));
  CHECK_MESSAGE(bad_leaves == 0, first_bad);
  CHECK(dropped.load() == 0);     // no writer ran: no step was overwritten, so no update may be dropped
  CHECK(unweighted.load() == 0);  // ... nor any stored step be reported as not stored
  CHECK(last_a > 0);
  CHECK(last_b > 0);
  CHECK(rewrites.load() > 0);
  std::set<StepKey> none;
  uint64_t unused = 0;
  CHECK(verify_stored(buf, none, &unused) == "");
}

// ---------------------------------------------------------------------------------------------------------------
// 4. The update lock under two learners

// An updater process of rank `rank`: rewrites the newest steps of env 0 (mostly) as versions (rank + 1) << 40 | k,
// until report->stop (then exits 0), or until killed (a victim).
[[noreturn]] void updater(const std::string& name, uint64_t rank, uint64_t seed, Report* report) {
  child_main(report, "updater", [&] {
    Buffer buf = Buffer::open(name, {.expected_schema = kPayloadSchema});
    Sampler s(buf, {.rank = rank});
    Rng rng(seed);
    for (uint64_t k = 1; report->stop.load() == 0; ++k) {
      const uint64_t env = rng() % 4 == 0 ? 1 : 0;
      const uint64_t head = segment_of(buf).env_control(env).head.load(std::memory_order_acquire);
      if (head > 4) marked_update(s, report, static_cast<std::size_t>(rank), env, head - 1 - rng() % 4, ((rank + 1) << 40) | k);
      if (k % 64 == 0) ::usleep(100);
    }
    ::_exit(0);
  });
}

TEST_CASE("two learner processes rewrite the same steps while a writer pushes, a third learner is SIGKILLed inside "
          "its rewrites and replaced, and a fourth samples: every step is one learner's whole bytes") {
  SegmentGuard guard(unique_name("lproc-lock"));
  Shared<Report> report;
  Buffer buf = Buffer::create(guard.name(), 2, 32, kPayloadSchema, {.max_learners = 4});
  const pid_t writer = spawn([&] {
    child_main(report.get(), "writer", [&] {
      Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
      Writer w(b, std::vector<uint64_t>{0, 1});
      PrioritizedPusher pusher;
      Rng rng(3);
      for (uint64_t n = 1; report->stop.load() == 0; ++n) {
        pusher.push(w, {0, 1}, rng);
        if (n % 2 == 0) ::usleep(150);
      }
      ::_exit(0);
    });
  });
  Sampler reader(buf, {.rank = 3});
  REQUIRE(reader.wait(View::replay, 16, 10'000));
  const pid_t a = spawn([&] { updater(guard.name(), 0, 11, report.get()); });
  const pid_t b = spawn([&] { updater(guard.name(), 1, 12, report.get()); });
  pid_t victim = spawn([&] { updater(guard.name(), 2, 13, report.get()); });
  std::set<StepKey> excused;
  uint64_t victim_kills = 0, victim_holders = 0, seed = 14;
  Rng rng(29);
  SampleBatch batch;
  std::vector<uint64_t> heads;
  const auto start = Clock::now();
  auto next_kill = start + std::chrono::milliseconds(20);
  while (Clock::now() - start < std::chrono::milliseconds(1500) || victim_kills < 3) {
    read_heads(buf, heads);
    reader.sample(View::replay, 32, 1 + rng() % 8, static_cast<double>(rng() % 2), rng, batch);
    check_batch(buf, batch, heads, report.get(), /*max_updaters=*/3);
    if (Clock::now() >= next_kill) {
      CHECK_MESSAGE(kill_and_reap(victim), "the victim exited on its own (see its stderr)");
      ++victim_kills;
      victim_holders += slot_of(buf, victim).has_value();
      excuse_marked(report.get(), 2, excused);  // before this process samples again
      victim = spawn([&, s = seed++] { updater(guard.name(), 2, s, report.get()); });
      next_kill = Clock::now() + std::chrono::milliseconds(10 + rng() % 40);
    }
  }
  CHECK(kill_and_reap(victim));  // before the stop flag, which would end it
  ++victim_kills;
  victim_holders += slot_of(buf, victim).has_value();
  excuse_marked(report.get(), 2, excused);
  report->stop = 1;
  CHECK(reap_child(a) == 0);
  CHECK(reap_child(b) == 0);
  CHECK(reap_child(writer) == 0);
  const Sampler last(buf, {.rank = 2});  // takes the last victim's slot over: releases its lock, if it held one
  // At least one takeover per victim that held the slot at its kill, at most one per kill (a repairer of the dead
  // victim's lock may take the slot over before this test looks at who held it).
  CHECK(detail::learner_slot(segment_of(buf), 2).lease.takeovers.load() >= victim_holders);
  CHECK(detail::learner_slot(segment_of(buf), 2).lease.takeovers.load() <= victim_kills);
  for (uint64_t e = 0; e < 2; ++e) {
    const layout::EnvControl& c = segment_of(buf).env_control(e);
    CHECK((c.claimed.load() & ~layout::kClaimMask) == 0);
    CHECK(c.update_seq.load() % 2 == 0);
  }
  uint64_t excused_stored = 0, excused_rows = 0;
  CHECK(verify_stored(buf, excused, &excused_stored) == "");
  const std::string bad = unexcused(report.get(), excused, &excused_rows);
  MESSAGE(fmt::format("{} rows checked, {} rewrites ({} applied) by 3 learners, {} victim kills; {} excused mixed "
                      "steps ({} rows, {} stored)",
                      report->rows.load(), report->updates.load(), report->updates_applied.load(), victim_kills,
                      excused.size(), excused_rows, excused_stored));
  CHECK_MESSAGE(bad == "", bad);
  CHECK(excused_rows == 0);    // no sampled row ever showed a killed learner's mixed step
  CHECK(excused_stored == 0);  // and none is left inside a view
  CHECK(report->failures.load() == 0);
  CHECK(report->updates_applied.load() > 0);
}

// ---------------------------------------------------------------------------------------------------------------
// 5. A lock left by a dead learner, and no writer to clear it

TEST_CASE("a learner's try_update of an env whose update lock a SIGKILLed learner holds returns, with no writer "
          "pushing to clear it") {
  SegmentGuard guard(unique_name("lproc-deadlock"));
  Shared<Report> report;
  Buffer buf = Buffer::create(guard.name(), 1, 16, kPayloadSchema, {.max_learners = 2});
  {
    Writer w(buf, std::vector<uint64_t>{0});
    PrioritizedPusher pusher;
    Rng rng(1);
    for (int i = 0; i < 8; ++i) pusher.push(w, {0}, rng);
  }  // the writer is gone: nobody will push to env 0
  layout::EnvControl& c = segment_of(buf).env_control(0);
  // Kill a learner of slot 1 that rewrites step 3 in a loop until one dies holding the lock (a few tries: it holds
  // it for most of each call).
  bool held = false;
  int tries = 0;
  for (; tries < 400 && !held; ++tries) {
    const pid_t victim = spawn([&] {
      child_main(report.get(), "updater", [&] {
        Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
        Sampler s(b, {.rank = 1});
        report->calls = 1;
        const Payload p = make_payload(0, 3, 2ull << 40);
        for (;;) {
          s.try_update(0, 3, {field_bytes(std::span<const uint64_t>(p.hdr, 4)),
                              field_bytes(std::span<const float>(p.body, kBody)),
                              field_bytes(std::span<const uint8_t>(p.tail, kTail))});
        }
      });
    });
    while (report->calls.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::this_thread::sleep_for(std::chrono::microseconds(500 + 97 * (tries % 13)));
    CHECK(kill_and_reap(victim));
    report->calls = 0;
    held = (c.claimed.load() & layout::kUpdateLockBit) != 0;
    if (!held) {
      // Its takeover by the next victim would repair any lock; start each try from a free lock.
      REQUIRE((c.claimed.load() & ~layout::kClaimMask) == 0);
    }
  }
  MESSAGE(fmt::format("a victim died holding the update lock after {} tries", tries));
  REQUIRE(held);
  CHECK(layout::update_lock_owner(c.claimed.load()) == 1);
  // The learner of slot 0, in a child with a deadline: its try_update must not spin forever on the dead learner's
  // lock (which only a writer's push or a takeover of slot 1 would clear today).
  const int code = run_in_child([&] {
    ::alarm(5);
    Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
    Sampler s(b, {.rank = 0});
    const Payload p = make_payload(0, 4, 1ull << 40);
    return s.try_update(0, 4, {field_bytes(std::span<const uint64_t>(p.hdr, 4)),
                               field_bytes(std::span<const float>(p.body, kBody)),
                               field_bytes(std::span<const uint8_t>(p.tail, kTail))});
  });
  CHECK_MESSAGE(code == 0, fmt::format("the learner's try_update ended with {} (128 + 14: still spinning on the "
                                       "dead learner's lock after 5 s)", code));
  const Sampler taker(buf, {.rank = 1});  // the takeover releases the lock, if it is still held
  CHECK((c.claimed.load() & ~layout::kClaimMask) == 0);
  CHECK(c.update_seq.load() % 2 == 0);
}

}  // namespace shmreplay::test::learner_processes
