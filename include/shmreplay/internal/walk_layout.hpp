// shmreplay/internal/walk_layout.hpp: the reanalyse-walk section (layout 1.11): the walk's pass and newest target
// version, one lease line per worker slot, one counter line per env, then one chunk slot per chunk an env's ring can
// hold, [num_envs][walk_slots_per_env]. docs/design/reanalyse.md has the protocol; detail/protocol/walk.hpp both
// halves of it and its repair.
//
// Present only in a buffer created with CreateOptions::reanalyse_chunk (SegmentHeader::reanalyse_chunk != 0).
// Segment-resident: fixed-width atomics only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmreplay/internal/layout.hpp"

namespace shmreplay::layout {

/// Worker slots of a walk: Reanalyser processes (or objects) that may hold chunks at once.
inline constexpr uint64_t kMaxWalkers = 64;
/// The largest chunk: steps per chunk, at most the capacity and at most this.
inline constexpr uint64_t kMaxReanalyseChunk = uint64_t{1} << 32;

/// A chunk slot's claim word: (chunk index << 8) | holder, where holder is 0 when no worker holds the chunk and
/// worker slot + 1 while one does. Chunk k of an env is its steps [k C, (k + 1) C); it lives in chunk slot
/// k % walk_slots_per_env. A slot whose tag is below k and that no worker holds describes a chunk that writers
/// overwrote: the next claim of k takes the slot over (a held one waits for its holder's completion or repair).
inline constexpr unsigned kWalkHolderBits = 8;
constexpr uint64_t walk_claim(uint64_t chunk, uint64_t holder) noexcept { return (chunk << kWalkHolderBits) | holder; }
constexpr uint64_t walk_claim_chunk(uint64_t word) noexcept { return word >> kWalkHolderBits; }
constexpr uint64_t walk_claim_holder(uint64_t word) noexcept { return word & ((uint64_t{1} << kWalkHolderBits) - 1); }

/// Chunk slots per env: every chunk that overlaps the ring's stored steps has its own, ceil(capacity / C) + 1.
constexpr uint64_t walk_slots_per_env(uint64_t capacity, uint64_t chunk_steps) noexcept {
  return (capacity + chunk_steps - 1) / chunk_steps + 1;
}

/// The segment-wide words, one cache line.
struct alignas(kCacheLineBytes) WalkControl {
  std::atomic<uint64_t> pass;            ///< the pass in progress, from 1: a chunk is due when its done_pass is lower
  std::atomic<uint64_t> newest_version;  ///< the largest target version a completion recorded, + 1; 0 before any
  std::atomic<uint64_t> repairs;         ///< dead worker slots whose claims were given back
  /// The workers' sleeping place (Reanalyser::next; detail/protocol/wake.hpp's WakeWord): the sequence whose low 32
  /// bits are the futex word, bumped by whatever can make a chunk due (a writer filling a chunk, a completion, a
  /// give-back, a repair) while `waiters` is not 0, and the count of workers sleeping on it.
  std::atomic<uint64_t> wake_seq;
  std::atomic<uint64_t> waiters;
  uint64_t pad[3];
};

/// One worker slot, one cache line: the lease words (detail/protocol/lease.hpp's LeaseWords order) and the slot's
/// counters (relaxed, informational).
struct alignas(kCacheLineBytes) WalkWorker {
  std::atomic<uint64_t> lease;        ///< pack_owner(pid, start ticks) of the worker, 0 when free
  std::atomic<uint64_t> start_ticks;  ///< its full start ticks
  std::atomic<uint64_t> since_ns;     ///< CLOCK_REALTIME when it took the slot
  std::atomic<uint64_t> takeovers;    ///< dead workers of the slot whose claims were given back
  std::atomic<uint64_t> handed;       ///< chunks handed to the slot's workers
  std::atomic<uint64_t> completed;    ///< chunks they completed
  /// This slot's part of WalkControl::waiters (0 or 1, never ahead of it): what a successor of a worker killed
  /// while it slept takes back from the global count (forget_waiters).
  std::atomic<uint64_t> waiters;
  uint64_t pad[1];
};

/// One env's walk counters, one cache line (relaxed, informational; any worker adds to them).
struct alignas(kCacheLineBytes) WalkEnv {
  std::atomic<uint64_t> handed;     ///< chunks of the env handed to a worker
  std::atomic<uint64_t> completed;  ///< chunks completed (their version recorded)
  std::atomic<uint64_t> rehanded;   ///< claims given back because their worker died (the chunk is handed again)
  std::atomic<uint64_t> stale;      ///< completions refused: writers overwrote the chunk's slot meanwhile
  std::atomic<uint64_t> given_back;  ///< hand-outs let go unrecorded by a live worker (give_back, its detach)
  uint64_t pad[3];
};

/// A chunk slot's done word: walk_done(lap, pass) of its last completion, lap = chunk / walk_slots_per_env (which
/// chunk of the slot it was) and the pass it was handed in, low 32 bits each; 0 before any. One store is the
/// completion (its linearization point), so a worker killed inside complete either recorded it or did not.
constexpr uint64_t walk_done(uint64_t lap, uint64_t pass) noexcept { return (lap << 32) | (pass & 0xffffffffu); }
constexpr uint64_t walk_done_lap(uint64_t word) noexcept { return word >> 32; }
constexpr uint64_t walk_done_pass(uint64_t word) noexcept { return word & 0xffffffffu; }

/// One chunk slot, 32 bytes. `claim` is every worker's (a CAS); the rest its holder's, stored before the release
/// that lets the claim go, so that whoever next acquires the claim word reads them.
struct WalkChunk {
  std::atomic<uint64_t> claim;    ///< walk_claim(chunk, holder)
  std::atomic<uint64_t> done;     ///< walk_done(lap, pass) of the last completion; 0: never completed
  std::atomic<uint64_t> version;  ///< the target version of the last completion + 1 (0: never); stored before
                                  ///< `done`, so it may name a completion a killed worker did not finish
  uint64_t pad;
};

/// Where the section's parts lie, from its start.
constexpr uint64_t walk_workers_at() noexcept { return sizeof(WalkControl); }
constexpr uint64_t walk_envs_at() noexcept { return sizeof(WalkControl) + kMaxWalkers * sizeof(WalkWorker); }
constexpr uint64_t walk_chunks_at(uint64_t num_envs) noexcept { return walk_envs_at() + num_envs * sizeof(WalkEnv); }

static_assert(sizeof(WalkControl) == kCacheLineBytes && sizeof(WalkWorker) == kCacheLineBytes &&
                  sizeof(WalkEnv) == kCacheLineBytes,
              "the walk's control, each worker slot and each env's counters are one cache line each");
static_assert(sizeof(WalkChunk) == 32 && kCacheLineBytes % sizeof(WalkChunk) == 0, "two chunk slots a cache line");
static_assert(kMaxWalkers + 1 < (uint64_t{1} << kWalkHolderBits) && walk_claim_holder(walk_claim(5, 64)) == 64 &&
                  walk_claim_chunk(walk_claim(kMaxCapacity, 3)) == kMaxCapacity,
              "a claim word holds any worker slot + 1 and any chunk index of a ring of kMaxCapacity steps x 2^16 laps");

}  // namespace shmreplay::layout
