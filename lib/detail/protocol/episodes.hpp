// detail/protocol/episodes.hpp: episode bookkeeping in the segment (layout 1.2), every side of it: the step meta
// words and the journal (the Writer records them: stage_step, recover_env; the Sampler reads boundaries:
// load_meta; the Inspector shows the journal: read_journal; a checkpoint load rebuilds both: rebuild_env), and the
// completed-episode record queue's producer (emit_record; its consumer is episode_queue.hpp). docs/design/episodes.md,
// "Episode boundaries and records", has the protocol and the argument that a writer killed at any instruction
// leaves it consistent with the published steps. Safe across processes as each function's precondition says
// (the env's lease for the writer's halves; the readers need none).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "detail/elements.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/vocabulary.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay::detail {

inline double f64_of(uint64_t bits) noexcept { return std::bit_cast<double>(bits); }
inline uint64_t bits_of(double value) noexcept { return std::bit_cast<uint64_t>(value); }

// element_as_double (detail/elements.hpp): a reward field's element as a double.

/// Whether a flag field's bytes are set: any nonzero byte.
inline bool flag_set(const std::byte* p, std::size_t bytes) noexcept {
  for (std::size_t i = 0; i < bytes; ++i) {
    if (p[i] != std::byte{0}) return true;
  }
  return false;
}

/// The episode fields of a buffer, resolved once for the hot paths.
struct EpisodeRoles {
  bool enabled = false;  ///< the buffer records episodes
  int done = -1;         ///< field indices; -1 when absent
  int terminated = -1;
  int truncated = -1;
  int reward = -1;
  std::size_t flag_bytes[3] = {0, 0, 0};  ///< bytes of done, terminated, truncated
  DType reward_dtype = DType::f32;

  explicit EpisodeRoles(const Segment& seg);
  EpisodeRoles() = default;
};

/// What a step's own bytes say about its episode.
struct StepFlags {
  EpisodeEnd end = EpisodeEnd::none;  ///< none unless the step ends its episode
  double reward = 0.0;
};

/// Reads the flags and reward of one step; `field(f)` gives the bytes of field f for that step.
template <class FieldPtr>
StepFlags read_step_flags(const EpisodeRoles& r, FieldPtr&& field) noexcept {
  StepFlags s;
  if (r.done >= 0 && flag_set(field(static_cast<std::size_t>(r.done)), r.flag_bytes[0])) s.end = EpisodeEnd::done;
  if (r.truncated >= 0 && flag_set(field(static_cast<std::size_t>(r.truncated)), r.flag_bytes[2])) {
    s.end = EpisodeEnd::truncated;
  }
  if (r.terminated >= 0 && flag_set(field(static_cast<std::size_t>(r.terminated)), r.flag_bytes[1])) {
    s.end = EpisodeEnd::terminated;  // termination wins: there is no state to bootstrap from
  }
  if (r.reward >= 0) s.reward = element_as_double(r.reward_dtype, field(static_cast<std::size_t>(r.reward)));
  return s;
}

/// The first step of the episode of the step whose meta word is `meta`.
inline uint64_t meta_start(uint64_t meta) noexcept { return meta & layout::kMetaStartMask; }

/// The meta word of step `step` of an env (one relaxed load; the caller validates with the step seqlock).
inline uint64_t load_meta(const std::atomic<uint64_t>* meta, uint64_t capacity, uint64_t step) noexcept {
  return meta[step % capacity].load(std::memory_order_relaxed);
}

/// The writer's half of publishing step `step` of `env`, between writing the step's bytes and its release store
/// of head: stores the step's meta word (its episode's first step and how it ends) and the journal for head
/// step + 1. Returns whether the step ended an episode, i.e. a record is due (emit_record, after the head store).
/// Precondition: this process holds the env's lease and has claimed step `step`. O(1), never blocks.
bool stage_step(Segment& seg, uint64_t env, uint64_t step, const StepFlags& flags) noexcept;

// The completed-episode record queue of an env (EpisodeControl lines 2-3 and the env's record slots): a
// single-producer ring with monotonic counters. The env's writer produces (emit_record, advancing queue_tail); the
// learners consume (episode_queue.hpp: take_records under the env's taker lock, advancing queue_head by CAS).

/// The writer's half after its head store of step + 1 when stage_step returned true: pushes the record of the
/// episode that ended (from journal[head % 2]) onto the env's queue, or counts it dropped when the queue is full.
/// Precondition: this process holds the env's lease. O(1), never blocks.
void emit_record(Segment& seg, uint64_t env, uint64_t head) noexcept;

/// Makes a newly leased env's episode state agree with its head: after a writer died between its head store and
/// its record push, pushes that record (exactly once). Called by the Writer for every env it leases, after taking
/// the lease. O(1).
void recover_env(Segment& seg, uint64_t env) noexcept;

/// Rebuilds an env's step meta and journal from the flag and reward bytes of its stored steps, for a tool that
/// rewrote the env's steps and counters wholesale (a checkpoint load). The running episode's return counts only
/// its stored steps; records already queued stay, none is pushed. Precondition: no writer runs on the env (the
/// caller holds its lease). O(stored steps).
void rebuild_env(Segment& seg, uint64_t env) noexcept;

/// One consistent read of an env's journal for the head it is at, for display (seqlock-style: retried while the
/// writer rewrites it). Returns false when no consistent state was read in a few tries (the writer is very busy).
struct JournalState {
  uint64_t for_head = 0;
  uint64_t episode_start = 0;
  double running_return = 0.0;
  uint64_t episodes_completed = 0;
  uint64_t last_first_step = 0;
  uint64_t last_length = 0;
  double last_return = 0.0;
  EpisodeEnd last_end = EpisodeEnd::none;
};
bool read_journal(const Segment& seg, uint64_t env, JournalState& out) noexcept;

}  // namespace shmreplay::detail
