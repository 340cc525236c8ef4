// shmreplay/internal/segment.hpp: one process's mapping of a validated segment: its geometry, its section offsets, and
// accessors to the words of each section (the structs of shmreplay/internal/layout.hpp).
//
// Who makes one: Buffer::create (from create's placement rule) and Buffer::open (from open's acceptance rule),
// both in lib/detail/segment/; nothing else. Who uses one: the roles (Writer, Sampler, Inspector, checkpoints)
// through segment_of(buffer), and the protocol code under lib/detail/protocol, which takes a Segment (the words it
// works on), never a role object. Tools and tests reach the words the same way.
//
// Every value here was validated by create or open and is kept in this process, so a stranger scribbling on the
// header later cannot send the accessors out of bounds. A Segment owns its mapping: moving one hands the mapping
// over; destroying one unmaps it (the segment itself lives on until removed).
//
// Thread safety: immutable after it is made; the words it points to are atomics or guarded by the protocols in
// lib/detail/protocol. Mutable accessors require a writable mapping (read_only() false).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/cold_layout.hpp"
#include "shmreplay/internal/journal_layout.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/policy_layout.hpp"
#include "shmreplay/internal/queue_layout.hpp"
#include "shmreplay/internal/walk_layout.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay {

class Buffer;  // shmreplay/buffer.hpp

/// A compressed field's storage (layout 1.10; detail/protocol/packed_frames.hpp), as create placed it or open
/// accepted it.
struct PackedGeometry {
  StackGeometry stack;  ///< the frames: depth (1 for an unstacked field), frame_bytes, outer, inner_bytes; `frames`
                        ///< descriptors per env at frames_offset; the frame-index words at index_offset
  uint64_t controls_offset = 0;  ///< layout::PackedEnvControl[num_envs]
  uint64_t rings_offset = 0;     ///< the byte rings, [num_envs][ring_bytes]
  uint64_t ring_bytes = 0;       ///< bytes of one env's ring (a multiple of 64)
  Codec codec = Codec::none;
  int32_t level = 0;             ///< zstd's level
};

/// Where everything is in a segment, as create placed it or open accepted it (byte offsets from the start of the
/// mapping).
struct SegmentGeometry {
  std::string name;  ///< the segment's name (for messages)
  Schema schema;     ///< the fields of a step
  uint64_t num_envs = 0;     ///< envs (rings)
  uint64_t capacity = 0;     ///< steps per env ring
  uint64_t total_bytes = 0;  ///< the file's size
  /// Every section, indexed by layout::SectionIndex (lib/detail/segment/section_table.cpp); {0, 0} for a section
  /// the segment does not have (episodes without episode fields, priorities without priorities, the learner
  /// section with one learner).
  std::array<layout::SectionDesc, layout::kMaxSections> sections{};
  uint64_t max_learners = 1;          ///< learner slots (layout 1.7)
  uint64_t max_times_sampled = 0;     ///< the sample cap (layout 1.11); 0 without
  bool consuming_queue = false;       ///< a consuming queue (layout 1.11; the queue section)
  uint64_t learner_online_offset = 0; ///< slots 1..'s online starts, [max_learners - 1][num_envs] u64, inside the
                                      ///< learner section (0 with one slot)
  std::vector<uint64_t> field_offsets;  ///< each field's storage, in schema order (a stacked field's frame rings)
  std::vector<uint32_t> field_kinds;    ///< each field's storage kind (FieldDesc::storage_kind, layout 1.10)
  std::vector<StackGeometry> stacks;    ///< the stacked fields, in schema order (layout 1.6); empty without
  std::vector<PackedGeometry> packed;   ///< the compressed fields, in schema order (layout 1.10); empty without
  StackContinuity stack_continuity = StackContinuity::compare;  ///< how writers tell a continuing stack (1.6)
  EpisodeFieldIndices episode_fields;   ///< the episode fields' schema indices (none: no episode bookkeeping)
  uint64_t episode_queue_capacity = 0;  ///< 0 without episode fields
  uint64_t priority_leaves = 0;     ///< bit_ceil(capacity) with priorities, else 0
  double priority_exponent = 0.0;  ///< alpha; 0 without priorities
  uint64_t initial_priority_bits = 0;  ///< SegmentHeader::initial_priority_bits (layout 1.11)
  uint64_t sequence_priority_length = 0;  ///< SegmentHeader::sequence_priority_length (layout 1.11); 0 without
  uint64_t reanalyse_chunk = 0;  ///< SegmentHeader::reanalyse_chunk (layout 1.11): steps per walk chunk; 0 without
};

/// A segment's cold files as one process mapped them (layout 1.11; lib/detail/storage/cold_files.cpp): each env's
/// records and what unmaps them. Made by create and open only, handed to the Segment with attach_cold.
struct ColdMapping {
  uint64_t cold_capacity = 0;           ///< records per env file
  uint64_t record_bytes = 0;            ///< bytes of one step's fields together
  std::vector<std::byte*> records;      ///< per env, the start of its records in this process's mapping of its file
  std::vector<uint64_t> columns;        ///< per field, where its column starts from records: cold_capacity x offset
  std::shared_ptr<void> maps;           ///< unmaps every file's mapping when the last owner lets go
};

/// One process's mapping of a validated segment: its geometry and the accessors to its sections' words (see the
/// top of this file). Made by Buffer::create and Buffer::open only; reached through segment_of(buffer).
class Segment {
 public:
  /// An empty Segment (no mapping): what a moved-from one is.
  Segment() = default;
  /// Adopts `map_bytes` of mapping at `base` (unmapped by the destructor), described by `geometry`. Called by
  /// Buffer::create and Buffer::open only, after the placement or acceptance rule produced `geometry`.
  Segment(std::byte* base, std::size_t map_bytes, bool read_only, SegmentGeometry geometry) noexcept;
  /// Takes over `other`'s mapping; `other` is left empty.
  Segment(Segment&& other) noexcept;
  /// Unmaps this Segment's mapping, then takes over `other`'s; `other` is left empty.
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  /// The segment's name, as given to create or open after normalisation.
  const std::string& name() const noexcept { return g_.name; }
  /// The fields of a step.
  const Schema& schema() const noexcept { return g_.schema; }
  /// Envs (rings).
  uint64_t num_envs() const noexcept { return g_.num_envs; }
  /// Steps per env ring.
  uint64_t capacity() const noexcept { return g_.capacity; }
  /// The file's size.
  uint64_t total_bytes() const noexcept { return g_.total_bytes; }
  /// Whether the mapping is read-only (then the mutable accessors may not be used).
  bool read_only() const noexcept { return read_only_; }
  /// The episode fields (schema indices), and whether the segment records episodes.
  const EpisodeFieldIndices& episode_fields() const noexcept { return g_.episode_fields; }
  /// Whether the segment records episodes (it has a done, terminated or truncated field).
  bool has_episodes() const noexcept { return g_.episode_fields.any_flag(); }
  /// Records per env's completed-episode queue; 0 without episode fields.
  uint64_t episode_queue_capacity() const noexcept { return g_.episode_queue_capacity; }
  /// Whether the segment has priorities, their exponent alpha (0 without), and each env's tree leaves.
  bool has_priorities() const noexcept { return g_.priority_leaves != 0; }
  /// Alpha, the priority exponent (a sampling weight is priority^alpha); 0 without priorities.
  double priority_exponent() const noexcept { return g_.priority_exponent; }
  /// Leaves of each env's priority tree: bit_ceil(capacity), 0 without priorities.
  uint64_t priority_leaves() const noexcept { return g_.priority_leaves; }
  /// CreateOptions::initial_priority (layout 1.11): nullopt, the running maximum; a fixed priority; or +infinity,
  /// never-sampled steps first (then fresh_trees()).
  std::optional<double> initial_priority() const noexcept {
    if (g_.initial_priority_bits == 0) return std::nullopt;
    return std::abs(std::bit_cast<double>(g_.initial_priority_bits));
  }
  /// Whether each env has a fresh-step tree beside its priority tree (initial priority +infinity; layout 1.11).
  bool fresh_trees() const noexcept { return g_.initial_priority_bits == layout::kInitialPriorityFirst; }
  /// L of sequence priorities (CreateOptions::sequence_priority_length; layout 1.11); 0 without.
  uint64_t sequence_priority_length() const noexcept { return g_.sequence_priority_length; }
  /// Field `field`'s storage kind (layout::kStoragePlainRing, ...; lib/detail/storage/storage_kinds.cpp).
  uint32_t field_kind(std::size_t field) const noexcept { return g_.field_kinds[field]; }
  /// Byte offset of each field's storage in the segment, in schema order.
  const std::vector<uint64_t>& field_offsets() const noexcept { return g_.field_offsets; }

  /// The stacked fields (layout 1.6), in schema order; empty when the schema has none.
  const std::vector<StackGeometry>& stacks() const noexcept { return g_.stacks; }
  /// How writers tell that a stacked field's stack continues the previous step's (layout 1.6).
  StackContinuity stack_continuity() const noexcept { return g_.stack_continuity; }
  /// Whether the schema has a stacked field.
  bool has_stacks() const noexcept { return !g_.stacks.empty(); }
  /// The frame rings of stacked field `stack` (an index into stacks()): [num_envs][frames][frame_bytes].
  const std::byte* frame_data(std::size_t stack) const noexcept { return base_ + g_.stacks[stack].frames_offset; }
  /// The same, writable (a writable mapping only).
  std::byte* frame_data(std::size_t stack) noexcept;
  /// The frame-index words of stacked field `stack` for env `env`: `capacity` words, slot s % capacity for step s.
  /// Only the env's writer (and a checkpoint load) stores to them, through the mutable overload.
  const std::atomic<uint64_t>* frame_index(std::size_t stack, uint64_t env) const noexcept;
  /// The same, writable (a writable mapping only).
  std::atomic<uint64_t>* frame_index(std::size_t stack, uint64_t env) noexcept;

  /// The compressed fields (layout 1.10), in schema order; empty when the schema has none.
  const std::vector<PackedGeometry>& packed() const noexcept { return g_.packed; }
  /// Compressed field `p`'s (an index into packed()) frame descriptors of env `env`: packed()[p].stack.frames of them.
  const layout::PackedFrameDesc* packed_descs(std::size_t p, uint64_t env) const noexcept {
    return std::launder(reinterpret_cast<const layout::PackedFrameDesc*>(base_ + g_.packed[p].stack.frames_offset)) +
           env * g_.packed[p].stack.frames;
  }
  /// The same, writable (a writable mapping only).
  layout::PackedFrameDesc* packed_descs(std::size_t p, uint64_t env) noexcept {
    assert(!read_only_);
    return std::launder(reinterpret_cast<layout::PackedFrameDesc*>(base_ + g_.packed[p].stack.frames_offset)) +
           env * g_.packed[p].stack.frames;
  }
  /// Compressed field `p`'s byte ring of env `env`: packed()[p].ring_bytes bytes.
  const std::byte* packed_ring(std::size_t p, uint64_t env) const noexcept {
    return base_ + g_.packed[p].rings_offset + env * g_.packed[p].ring_bytes;
  }
  /// The same, writable (a writable mapping only).
  std::byte* packed_ring(std::size_t p, uint64_t env) noexcept {
    assert(!read_only_);
    return base_ + g_.packed[p].rings_offset + env * g_.packed[p].ring_bytes;
  }
  /// Compressed field `p`'s frame-index words of env `env`: `capacity` words, slot s % capacity for step s.
  const std::atomic<uint64_t>* packed_index(std::size_t p, uint64_t env) const noexcept {
    return std::launder(reinterpret_cast<const std::atomic<uint64_t>*>(base_ + g_.packed[p].stack.index_offset)) +
           env * g_.capacity;
  }
  /// The same, writable (a writable mapping only).
  std::atomic<uint64_t>* packed_index(std::size_t p, uint64_t env) noexcept {
    assert(!read_only_);
    return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + g_.packed[p].stack.index_offset)) +
           env * g_.capacity;
  }
  /// Compressed field `p`'s counters of env `env`.
  const layout::PackedEnvControl& packed_control(std::size_t p, uint64_t env) const noexcept {
    return std::launder(reinterpret_cast<const layout::PackedEnvControl*>(base_ + g_.packed[p].controls_offset))[env];
  }
  /// The same, writable (a writable mapping only).
  layout::PackedEnvControl& packed_control(std::size_t p, uint64_t env) noexcept {
    assert(!read_only_);
    return std::launder(reinterpret_cast<layout::PackedEnvControl*>(base_ + g_.packed[p].controls_offset))[env];
  }

  /// The header (read it only for what open did not copy out: state, creator, limiter words live elsewhere).
  const layout::SegmentHeader& header() const noexcept;
  /// Precondition: env < num_envs(). Inline: the sampler reads every env's control block per call.
  const layout::EnvControl& env_control(uint64_t env) const noexcept {
    assert(env < g_.num_envs);
    return std::launder(reinterpret_cast<const layout::EnvControl*>(base_ + g_.sections[layout::kSectionEnvs].offset))[env];
  }
  /// The same, writable (a writable mapping only).
  layout::EnvControl& env_control(uint64_t env) noexcept {
    assert(!read_only_ && env < g_.num_envs);
    return std::launder(reinterpret_cast<layout::EnvControl*>(base_ + g_.sections[layout::kSectionEnvs].offset))[env];
  }
  /// Learner slots: learner processes that may sample at once (layout 1.7; 1 for a one-learner buffer).
  uint64_t max_learners() const noexcept { return g_.max_learners; }
  /// Learner slot `slot`'s block, for slots 1 to max_learners() - 1 (slot 0's words are in GlobalControl:
  /// detail/protocol/learner_slots.hpp reads any slot's). Only the slot's learner (and a checkpoint load) stores to
  /// them, through the mutable overload.
  const layout::LearnerSlot* learner_slot(uint64_t slot) const noexcept;
  /// The same, writable (a writable mapping only).
  layout::LearnerSlot* learner_slot(uint64_t slot) noexcept;
  /// Learner slot `slot`'s online start of env 0 (1 <= slot < max_learners()); env e's is e words further.
  const std::atomic<uint64_t>* learner_online_starts(uint64_t slot) const noexcept;
  /// The same, writable (a writable mapping only).
  std::atomic<uint64_t>* learner_online_starts(uint64_t slot) noexcept;
  /// Learner slot `slot`'s statistics (layout 1.8: sample ages, limiter timeouts), for every slot 0 to
  /// max_learners() - 1. Only the slot's learner (and a checkpoint load, which zeroes them) stores to them, through
  /// the mutable overload.
  const layout::LearnerStats* learner_stats(uint64_t slot) const noexcept;
  /// The same, writable (a writable mapping only).
  layout::LearnerStats* learner_stats(uint64_t slot) noexcept;
  /// The policy section (layout 1.11; internal/policy_layout.hpp): the published version and window, the words held
  /// writers and pacing learners sleep on. Learners and writers store through the mutable overloads.
  const layout::PolicyControl& policy_control() const noexcept;
  /// The same, writable (a writable mapping only).
  layout::PolicyControl& policy_control() noexcept;
  /// Learner slot `slot`'s version ages of sampled rows (0 to max_learners() - 1).
  const layout::PolicyLearner& policy_learner(uint64_t slot) const noexcept;
  /// The same, writable (a writable mapping only).
  layout::PolicyLearner& policy_learner(uint64_t slot) noexcept;
  /// Env `env`'s newest version and starvation counters.
  const layout::PolicyEnv& policy_env(uint64_t env) const noexcept;
  /// The same, writable (a writable mapping only).
  layout::PolicyEnv& policy_env(uint64_t env) noexcept;
  /// The sample cap (layout 1.11; internal/caps_layout.hpp): deliveries per stored step; 0 without.
  uint64_t max_times_sampled() const noexcept { return g_.max_times_sampled; }
  /// Env `env`'s count words, [capacity], one per ring slot (a buffer with a sample cap only). Learners CAS them and
  /// writers store them through the mutable overload.
  const std::atomic<uint64_t>* cap_words(uint64_t env) const noexcept;
  /// The same, writable (a writable mapping only).
  std::atomic<uint64_t>* cap_words(uint64_t env) noexcept;
  /// Learner slot `slot`'s cap counters (a buffer with a sample cap only).
  const layout::CapLearner& cap_learner(uint64_t slot) const noexcept;
  /// The same, writable (a writable mapping only).
  layout::CapLearner& cap_learner(uint64_t slot) noexcept;
  /// Whether it is a consuming queue (layout 1.11; internal/queue_layout.hpp): then max_times_sampled() is 1.
  bool consuming_queue() const noexcept { return g_.consuming_queue; }
  /// The consuming-queue section's parts (a consuming queue only): the segment-wide words, learner slot `slot`'s,
  /// env `env`'s, and env `env`'s insertion tickets, [capacity], one per ring slot. Writable through a writable
  /// mapping only.
  layout::QueueControl& queue_control() const noexcept;
  layout::QueueLearner& queue_learner(uint64_t slot) const noexcept;
  layout::QueueEnv& queue_env(uint64_t env) const noexcept;
  std::atomic<uint64_t>* queue_tickets(uint64_t env) const noexcept;
  /// Steps per chunk of the reanalyse walk (layout 1.11; internal/walk_layout.hpp); 0 without a walk.
  uint64_t reanalyse_chunk() const noexcept { return g_.reanalyse_chunk; }
  /// Chunk slots per env of the walk: walk_slots_per_env(capacity, reanalyse_chunk). A walk only.
  uint64_t walk_slots() const noexcept { return layout::walk_slots_per_env(g_.capacity, g_.reanalyse_chunk); }
  /// The walk section's parts (a walk only): the segment-wide words, worker slot `slot`'s, env `env`'s counters and
  /// env `env`'s chunk slots, [walk_slots()]. Writable through a writable mapping only.
  layout::WalkControl& walk_control() const noexcept;
  layout::WalkWorker& walk_worker(uint64_t slot) const noexcept;
  layout::WalkEnv& walk_env(uint64_t env) const noexcept;
  layout::WalkChunk* walk_chunks(uint64_t env) const noexcept;
  /// Steps per env of the cold tier, on disk (layout 1.11; internal/cold_layout.hpp); 0 without a cold tier.
  uint64_t cold_capacity() const noexcept { return cold_.cold_capacity; }
  /// Bytes of one cold record (the step's bytes, every field plain). A cold tier only.
  uint64_t cold_record_bytes() const noexcept { return cold_.record_bytes; }
  /// The cold section's identity words (a cold tier only): what create wrote; open copied and checked them.
  const layout::ColdControl& cold_control() const noexcept {
    return *std::launder(reinterpret_cast<const layout::ColdControl*>(base_ + g_.sections[layout::kSectionCold].offset));
  }
  /// Env `env`'s cold seqlock (a cold tier only). Only the env's writer stores to it, through the mutable overload.
  const layout::ColdEnv& cold_env(uint64_t env) const noexcept {
    return std::launder(reinterpret_cast<const layout::ColdEnv*>(base_ + g_.sections[layout::kSectionCold].offset +
                                                                 layout::cold_envs_at()))[env];
  }
  /// The same, writable (a writable mapping only).
  layout::ColdEnv& cold_env(uint64_t env) noexcept {
    assert(!read_only_);
    return std::launder(reinterpret_cast<layout::ColdEnv*>(base_ + g_.sections[layout::kSectionCold].offset +
                                                           layout::cold_envs_at()))[env];
  }
  /// Env `env`'s cold column of field `field` (the files are column-major), cold_capacity() values of the field's
  /// bytes each: cold step t's value at index t % cold_capacity.
  const std::byte* cold_column(uint64_t env, std::size_t field) const noexcept {
    return cold_.records[env] + cold_.columns[field];
  }
  /// The same, writable (a writable mapping only: the files are mapped as the segment is).
  std::byte* cold_column(uint64_t env, std::size_t field) noexcept {
    assert(!read_only_);
    return cold_.records[env] + cold_.columns[field];
  }
  /// Whether the segment has a cold section (create placed one, or open accepted one): then it has a cold tier.
  bool has_cold_section() const noexcept { return g_.sections[layout::kSectionCold].bytes != 0; }
  /// Hands this Segment its cold files' mappings (create and open only, before the Segment is shared).
  void attach_cold(ColdMapping cold) noexcept { cold_ = std::move(cold); }

  /// The journal section (layout 1.11; internal/journal_layout.hpp; every buffer): the journal's lease, bound and
  /// newest durable link, and env `env`'s durable head. Only the journal stores, through the mutable overloads.
  const layout::JournalControl& journal_control() const noexcept;
  /// The same, writable (a writable mapping only).
  layout::JournalControl& journal_control() noexcept;
  const std::atomic<uint64_t>& journal_head(uint64_t env) const noexcept;
  /// The same, writable (a writable mapping only).
  std::atomic<uint64_t>& journal_head(uint64_t env) noexcept;
  /// The segment-wide control block (learner slot 0's lease and counters, wake word, limiter).
  const layout::GlobalControl& global_control() const noexcept;
  /// The same, writable (a writable mapping only).
  layout::GlobalControl& global_control() noexcept;
  /// Start of field `field`'s storage, [num_envs][capacity][schema()[field].bytes()]. Precondition:
  /// field < schema().size().
  const std::byte* field_data(std::size_t field) const noexcept { return base_ + g_.field_offsets[field]; }
  /// The same, writable (a writable mapping only).
  std::byte* field_data(std::size_t field) noexcept;
  /// The episode sections (layout 1.2). Precondition: has_episodes() and env < num_envs(). step_meta(env) is the
  /// env's `capacity` meta words, slot s % capacity for step s; episode_queue(env) its record slots.
  const layout::EpisodeControl& episode_control(uint64_t env) const noexcept;
  /// The same, writable (a writable mapping only).
  layout::EpisodeControl& episode_control(uint64_t env) noexcept;
  /// The env's step meta words (see episode_control()).
  const std::atomic<uint64_t>* step_meta(uint64_t env) const noexcept;
  /// The same, writable (a writable mapping only).
  std::atomic<uint64_t>* step_meta(uint64_t env) noexcept;
  /// The env's completed-episode queue slots (see episode_control()).
  const layout::EpisodeRecordSlot* episode_queue(uint64_t env) const noexcept;
  /// The same, writable (a writable mapping only).
  layout::EpisodeRecordSlot* episode_queue(uint64_t env) noexcept;
  /// The env's priority tree words, 2 * priority_leaves() of them (layout 1.3; detail/protocol/priorities.hpp).
  /// Precondition: has_priorities() and env < num_envs(). Writers and the learner store to them through the mutable
  /// overload; readers (the Inspector) load them through this one.
  const std::atomic<uint64_t>* priority_tree(uint64_t env) const noexcept;
  /// The same, writable (a writable mapping only).
  std::atomic<uint64_t>* priority_tree(uint64_t env) noexcept;
  /// The env's fresh-step tree words, 2 * priority_leaves() of them, after every env's priority tree (layout 1.11):
  /// leaf weight 1 for a step no prioritized draw has returned yet, 0 after. Precondition: fresh_trees().
  const std::atomic<uint64_t>* fresh_tree(uint64_t env) const noexcept {
    return priority_tree(env) + g_.num_envs * 2 * g_.priority_leaves;
  }
  /// The same, writable (a writable mapping only).
  std::atomic<uint64_t>* fresh_tree(uint64_t env) noexcept {
    return priority_tree(env) + g_.num_envs * 2 * g_.priority_leaves;
  }
  /// The env's window tree `kind` (0: window max, 1: window mean) of sequence priorities, after the priority and
  /// fresh-step trees (layout 1.11; detail/protocol/sequence_priorities.hpp). Precondition:
  /// sequence_priority_length() > 0.
  const std::atomic<uint64_t>* window_tree(uint64_t kind, uint64_t env) const noexcept {
    return priority_tree(env) + (1 + (fresh_trees() ? 1 : 0) + kind) * g_.num_envs * 2 * g_.priority_leaves;
  }
  /// The same, writable (a writable mapping only).
  std::atomic<uint64_t>* window_tree(uint64_t kind, uint64_t env) noexcept {
    return priority_tree(env) + (1 + (fresh_trees() ? 1 : 0) + kind) * g_.num_envs * 2 * g_.priority_leaves;
  }

 private:
  void unmap() noexcept;

  std::byte* base_ = nullptr;  // the mapping, map_bytes_ long
  std::size_t map_bytes_ = 0;
  bool read_only_ = false;
  SegmentGeometry g_;
  ColdMapping cold_;  // the cold files' mappings (layout 1.11); empty without a cold tier
};

/// The Segment a Buffer maps: its words, for shmreplay's own roles (writer, sampler, inspector, checkpoints), the
/// tools and the tests; not part of the API. The mutable one requires a writable mapping to be written through.
Segment& segment_of(Buffer& buffer) noexcept;
/// The same, read-only.
const Segment& segment_of(const Buffer& buffer) noexcept;

}  // namespace shmreplay
