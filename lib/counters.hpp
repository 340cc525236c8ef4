// lib/counters.hpp: the reading half of the counter table (shmreplay/counters.hpp): where each row's word is, and
// the loops that fill a snapshot's values (the Inspector) and copy the learner rows a checkpoint holds (save and
// load). The rows themselves are in counters.cpp, one place for a counter's name, help, type, unit, scope and word.
//
// Who calls it: lib/inspector.cpp (fill_env_counters, fill_learner_counters, sum_learner_counters),
// lib/checkpoint/state.cpp (save_learner_counters, load_learner_counters). Stateless; safe from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "detail/protocol/episode_queue.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/storage/field_storage.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/counters.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// What the Inspector read of one env before its rows: each read once, so that the rows made of them agree (the
/// views, one journal read, one look at the queue). `info` holds the env's lease and update-lock states already.
struct EnvReading {
  const Segment& seg;
  uint64_t env = 0;
  const layout::EnvControl& control;
  StepRange replay;
  StepRange online;
  uint64_t lease = 0;      ///< the lease word (0: no owner), loaded with acquire
  JournalState journal{};  ///< the episode journal (zeros without episode fields)
  QueueAccounts queue{};   ///< the episode queue's depth and lost records (zeros without episode fields)
  const EnvInfo& info;
  const StorageSet& storages;  ///< the segment's storage kinds (detail/storage/field_storage.hpp), made once per snapshot
};

/// One env row: its description, how its value is read, and the typed fields it also fills.
struct EnvCounterRow {
  Counter row;
  uint64_t (*read)(const EnvReading& r) noexcept;
  uint64_t EnvInfo::*field = nullptr;      ///< the EnvInfo field of the same value (the C++ API), if any
  uint64_t SegmentInfo::*total = nullptr;  ///< the SegmentInfo field that sums it over the envs, if any
};

/// How SegmentInfo::learner (every slot together) gets a learner row: summed over the slots, or the named slot's.
enum class LearnerTotal : uint8_t { sum, named_slot };

/// What the Inspector read of one learner slot before its rows. `info` holds the slot's state already.
struct LearnerReading {
  const LearnerSlotReadWords& words;
  uint64_t lease = 0;  ///< the slot's lease word (0: free), loaded with acquire
  const LearnerInfo& info;
};

/// One learner row: its description, its word (or how it is derived), and where else it goes.
struct LearnerCounterRow {
  Counter row;
  /// The slot's word (read-only: the rows are read by the Inspector and saves; a load stores through the word it
  /// names, load_learner_counters); nullptr: derived.
  const std::atomic<uint64_t>& (*word)(const LearnerSlotReadWords& w) noexcept;
  uint64_t (*derive)(const LearnerReading& r) noexcept;                 ///< when there is no word
  uint64_t LearnerInfo::*field = nullptr;                               ///< the LearnerInfo field, if any
  LearnerTotal total = LearnerTotal::sum;
  uint64_t CheckpointLearner::*saved = nullptr;  ///< where a checkpoint holds it (every slot's), if it does
};

std::span<const EnvCounterRow> env_counter_rows() noexcept;
std::span<const LearnerCounterRow> learner_counter_rows() noexcept;

/// Every env row's value into `info.counters` (and its typed field), each added to its total in `totals`.
void fill_env_counters(const EnvReading& r, EnvInfo& info, SegmentInfo& totals);
/// Every learner row's value into `info.counters` (and its typed field).
void fill_learner_counters(const LearnerReading& r, LearnerInfo& info);
/// `all`'s counters (SegmentInfo::learner) from the slots': summed, or kept from the named slot `all` copies.
void sum_learner_counters(std::span<const LearnerInfo> slots, LearnerInfo& all);

/// The learner rows a checkpoint holds, from a slot's words into `out` (relaxed loads: informational counters).
void save_learner_counters(const LearnerSlotReadWords& words, CheckpointLearner& out) noexcept;
/// ... and back into a slot's words (relaxed: the load publishes them with its lease releases).
void load_learner_counters(const CheckpointLearner& saved, const LearnerSlotWords& words) noexcept;

}  // namespace shmreplay::detail
