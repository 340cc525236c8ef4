// tests/learners/processes_helpers.hpp: what the learner-process tests share (learners/torture.cpp,
// learners/limiter.cpp, learners/updates.cpp): the shared report the forked children write, the row checks and the
// model of excused steps, the stored-ring and tree checks.
//
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
#pragma once

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
  const auto t = detail::priority_tree_of(segment_of(buf), env);
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

}  // namespace shmreplay::test::learner_processes
