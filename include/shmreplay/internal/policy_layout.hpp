// shmreplay/internal/policy_layout.hpp: the policy section (layout 1.11): the policy version the learners publish,
// the staleness window, the words held-back writers and pacing learners sleep on, and the starvation counters per
// env and per learner slot. docs/design/policy.md has the protocol; detail/protocol/policy.hpp both halves of it.
//
// Every buffer has the section (its size follows from num_envs and max_learners, like the learner statistics):
// publishing a version needs no field, a window and the writers' gate need a field with the policy-version role
// (layout::kRolePolicyVersion, CreateOptions::policy_version). Segment-resident: fixed-width atomics only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmreplay/internal/layout.hpp"

namespace shmreplay::layout {

/// PolicyControl::max_staleness when no window is published (sampling and pushes ignore versions).
inline constexpr uint64_t kNoPolicyWindow = ~0ull;
/// PolicyEnv::newest before the env's first step with a version.
inline constexpr uint64_t kNoPolicyVersion = ~0ull;
/// Buckets of PolicyLearner::age_buckets: a sampled row's version age (current version - the row's first step's
/// version) 0, 1, 2, 3, 4-7, 8 and more.
inline constexpr std::size_t kVersionAgeBuckets = 6;

/// The bucket of a version age (kVersionAgeBuckets).
constexpr std::size_t version_age_bucket(uint64_t age) noexcept {
  return age < 4 ? static_cast<std::size_t>(age) : age < 8 ? 4 : 5;
}

/// The segment-wide words, two cache lines.
struct alignas(kCacheLineBytes) PolicyControl {
  // -- cache line 0: what the learners publish (any slot; rarely written) --
  std::atomic<uint64_t> version;        ///< the current policy version, 0 until published; only grows (CAS)
  std::atomic<uint64_t> max_staleness;  ///< the window k: steps of versions >= version - k are sampled and
                                        ///< admitted; kNoPolicyWindow when none
  std::atomic<uint64_t> publishes;      ///< calls that moved the version or changed the window
  std::atomic<uint64_t> writer_wake;    ///< low 32 bits: the futex word held-back writers sleep on; bumped after
                                        ///< every move of version or window
  std::atomic<uint64_t> writer_waiters;   ///< writers sleeping on writer_wake
  std::atomic<uint64_t> learner_wake;     ///< low 32 bits: the futex word pacing learners sleep on; bumped by a
                                          ///< writer after its env's newest version moved while learners wait
  std::atomic<uint64_t> learner_waiters;  ///< learners sleeping on learner_wake
  uint64_t pad0[1];
  // -- cache line 1: totals, read-modify-writes by writers and learners; informational --
  std::atomic<uint64_t> writers_held;     ///< push calls the window held back (every env's)
  std::atomic<uint64_t> writer_timeouts;  ///< ... that gave up at their timeout
  std::atomic<uint64_t> learner_paced;    ///< publish calls that waited for a slow writer (pacing)
  std::atomic<uint64_t> learner_pace_timeouts;  ///< ... that gave up at their timeout
  uint64_t pad1[4];
};

/// One learner slot's version ages of sampled rows, one cache line, written by the slot's learner only (relaxed;
/// informational). Counted only for calls made with a window.
struct alignas(kCacheLineBytes) PolicyLearner {
  std::atomic<uint64_t> rows;     ///< rows whose version age was counted
  std::atomic<uint64_t> age_sum;  ///< the sum of their version ages
  std::atomic<uint64_t> age_buckets[kVersionAgeBuckets];  ///< rows per version_age_bucket()
};

/// One env's policy words, one cache line, written by the env's writer (relaxed except `newest`).
struct alignas(kCacheLineBytes) PolicyEnv {
  std::atomic<uint64_t> newest;         ///< the version of the newest step pushed or being pushed (stored before
                                        ///< the claim, so it is never below a published step's); kNoPolicyVersion
  std::atomic<uint64_t> held_pushes;    ///< push calls of this env the window held back (starvation)
  std::atomic<uint64_t> held_ns;        ///< nanoseconds they waited, in total
  std::atomic<uint64_t> held_since_ns;  ///< CLOCK_REALTIME when the current hold began, 0 when not held
  std::atomic<uint64_t> timeouts;       ///< held pushes that gave up at their timeout
  uint64_t pad[3];
};

/// Where the section's parts lie, from its start.
constexpr uint64_t policy_learners_at() noexcept { return sizeof(PolicyControl); }
constexpr uint64_t policy_envs_at(uint64_t max_learners) noexcept {
  return sizeof(PolicyControl) + max_learners * sizeof(PolicyLearner);
}

static_assert(sizeof(PolicyControl) == 2 * kCacheLineBytes && offsetof(PolicyControl, writers_held) == kCacheLineBytes,
              "the published words and the totals each own a cache line");
static_assert(sizeof(PolicyLearner) == kCacheLineBytes && sizeof(PolicyEnv) == kCacheLineBytes,
              "a slot's ages and an env's words are one cache line each");

}  // namespace shmreplay::layout
