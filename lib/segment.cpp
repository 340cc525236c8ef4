// lib/segment.cpp: a Segment's mapping and its accessors to each section's words (shmreplay/internal/segment.hpp).
#include "shmreplay/internal/segment.hpp"

#include <sys/mman.h>

#include <cassert>
#include <new>
#include <utility>

namespace shmreplay {

using namespace layout;

Segment::Segment(std::byte* base, std::size_t map_bytes, bool read_only, SegmentGeometry geometry) noexcept
    : base_(base), map_bytes_(map_bytes), read_only_(read_only), g_(std::move(geometry)) {}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    unmap();
    base_ = std::exchange(other.base_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    read_only_ = other.read_only_;
    g_ = std::exchange(other.g_, {});
    cold_ = std::exchange(other.cold_, {});
  }
  return *this;
}

Segment::~Segment() { unmap(); }

void Segment::unmap() noexcept {
  cold_ = {};  // the cold files' mappings go with the segment's
  if (base_ != nullptr) ::munmap(base_, map_bytes_);
  base_ = nullptr;
  map_bytes_ = 0;
}

const SegmentHeader& Segment::header() const noexcept {
  return *std::launder(reinterpret_cast<const SegmentHeader*>(base_));
}

const GlobalControl& Segment::global_control() const noexcept {
  return *std::launder(reinterpret_cast<const GlobalControl*>(base_ + g_.sections[kSectionGlobal].offset));
}

GlobalControl& Segment::global_control() noexcept {
  assert(!read_only_);
  return *std::launder(reinterpret_cast<GlobalControl*>(base_ + g_.sections[kSectionGlobal].offset));
}

const EpisodeControl& Segment::episode_control(uint64_t env) const noexcept {
  assert(has_episodes() && env < g_.num_envs);
  return std::launder(reinterpret_cast<const EpisodeControl*>(base_ + g_.sections[kSectionEpisodes].offset))[env];
}

EpisodeControl& Segment::episode_control(uint64_t env) noexcept {
  assert(!read_only_ && has_episodes() && env < g_.num_envs);
  return std::launder(reinterpret_cast<EpisodeControl*>(base_ + g_.sections[kSectionEpisodes].offset))[env];
}

const std::atomic<uint64_t>* Segment::priority_tree(uint64_t env) const noexcept {
  assert(has_priorities() && env < g_.num_envs);
  return std::launder(reinterpret_cast<const std::atomic<uint64_t>*>(base_ + g_.sections[kSectionPriorities].offset)) +
         env * 2 * g_.priority_leaves;
}

std::atomic<uint64_t>* Segment::priority_tree(uint64_t env) noexcept {
  assert(!read_only_ && has_priorities() && env < g_.num_envs);
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + g_.sections[kSectionPriorities].offset)) +
         env * 2 * g_.priority_leaves;
}

const layout::LearnerSlot* Segment::learner_slot(uint64_t slot) const noexcept {
  assert(slot >= 1 && slot < g_.max_learners);
  return std::launder(reinterpret_cast<const layout::LearnerSlot*>(base_ + g_.sections[kSectionLearners].offset)) +
         (slot - 1);
}

layout::LearnerSlot* Segment::learner_slot(uint64_t slot) noexcept {
  assert(!read_only_ && slot >= 1 && slot < g_.max_learners);
  return std::launder(reinterpret_cast<layout::LearnerSlot*>(base_ + g_.sections[kSectionLearners].offset)) + (slot - 1);
}

const std::atomic<uint64_t>* Segment::learner_online_starts(uint64_t slot) const noexcept {
  assert(slot >= 1 && slot < g_.max_learners);
  return std::launder(reinterpret_cast<const std::atomic<uint64_t>*>(base_ + g_.learner_online_offset)) +
         (slot - 1) * g_.num_envs;
}

std::atomic<uint64_t>* Segment::learner_online_starts(uint64_t slot) noexcept {
  assert(!read_only_ && slot >= 1 && slot < g_.max_learners);
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + g_.learner_online_offset)) +
         (slot - 1) * g_.num_envs;
}

const layout::LearnerStats* Segment::learner_stats(uint64_t slot) const noexcept {
  assert(slot < g_.max_learners);
  return std::launder(reinterpret_cast<const layout::LearnerStats*>(base_ + g_.sections[kSectionLearnerStats].offset)) +
         slot;
}

layout::LearnerStats* Segment::learner_stats(uint64_t slot) noexcept {
  assert(!read_only_ && slot < g_.max_learners);
  return std::launder(reinterpret_cast<layout::LearnerStats*>(base_ + g_.sections[kSectionLearnerStats].offset)) + slot;
}

const layout::PolicyControl& Segment::policy_control() const noexcept {
  return *std::launder(reinterpret_cast<const layout::PolicyControl*>(base_ + g_.sections[kSectionPolicy].offset));
}

layout::PolicyControl& Segment::policy_control() noexcept {
  assert(!read_only_);
  return *std::launder(reinterpret_cast<layout::PolicyControl*>(base_ + g_.sections[kSectionPolicy].offset));
}

const layout::PolicyLearner& Segment::policy_learner(uint64_t slot) const noexcept {
  assert(slot < g_.max_learners);
  return std::launder(reinterpret_cast<const layout::PolicyLearner*>(base_ + g_.sections[kSectionPolicy].offset +
                                                                     layout::policy_learners_at()))[slot];
}

layout::PolicyLearner& Segment::policy_learner(uint64_t slot) noexcept {
  assert(!read_only_ && slot < g_.max_learners);
  return std::launder(reinterpret_cast<layout::PolicyLearner*>(base_ + g_.sections[kSectionPolicy].offset +
                                                               layout::policy_learners_at()))[slot];
}

const layout::PolicyEnv& Segment::policy_env(uint64_t env) const noexcept {
  assert(env < g_.num_envs);
  return std::launder(reinterpret_cast<const layout::PolicyEnv*>(base_ + g_.sections[kSectionPolicy].offset +
                                                                 layout::policy_envs_at(g_.max_learners)))[env];
}

layout::PolicyEnv& Segment::policy_env(uint64_t env) noexcept {
  assert(!read_only_ && env < g_.num_envs);
  return std::launder(reinterpret_cast<layout::PolicyEnv*>(base_ + g_.sections[kSectionPolicy].offset +
                                                           layout::policy_envs_at(g_.max_learners)))[env];
}

const std::atomic<uint64_t>* Segment::cap_words(uint64_t env) const noexcept {
  assert(g_.max_times_sampled != 0 && env < g_.num_envs);
  return std::launder(reinterpret_cast<const std::atomic<uint64_t>*>(
             base_ + g_.sections[kSectionSampleCaps].offset + layout::cap_words_at(g_.max_learners))) +
         env * g_.capacity;
}

std::atomic<uint64_t>* Segment::cap_words(uint64_t env) noexcept {
  assert(!read_only_ && g_.max_times_sampled != 0 && env < g_.num_envs);
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + g_.sections[kSectionSampleCaps].offset +
                                                               layout::cap_words_at(g_.max_learners))) +
         env * g_.capacity;
}

const layout::CapLearner& Segment::cap_learner(uint64_t slot) const noexcept {
  assert(g_.max_times_sampled != 0 && slot < g_.max_learners);
  return std::launder(
      reinterpret_cast<const layout::CapLearner*>(base_ + g_.sections[kSectionSampleCaps].offset))[slot];
}

layout::CapLearner& Segment::cap_learner(uint64_t slot) noexcept {
  assert(!read_only_ && g_.max_times_sampled != 0 && slot < g_.max_learners);
  return std::launder(reinterpret_cast<layout::CapLearner*>(base_ + g_.sections[kSectionSampleCaps].offset))[slot];
}

// The queue section's parts are atomics: a const Segment (a read-only mapping's) hands them out for loads only.
layout::QueueControl& Segment::queue_control() const noexcept {
  assert(g_.consuming_queue);
  return *std::launder(reinterpret_cast<layout::QueueControl*>(base_ + g_.sections[kSectionQueue].offset));
}

layout::QueueLearner& Segment::queue_learner(uint64_t slot) const noexcept {
  assert(g_.consuming_queue && slot < g_.max_learners);
  return std::launder(reinterpret_cast<layout::QueueLearner*>(base_ + g_.sections[kSectionQueue].offset +
                                                              layout::queue_learners_at()))[slot];
}

layout::QueueEnv& Segment::queue_env(uint64_t env) const noexcept {
  assert(g_.consuming_queue && env < g_.num_envs);
  return std::launder(reinterpret_cast<layout::QueueEnv*>(base_ + g_.sections[kSectionQueue].offset +
                                                          layout::queue_envs_at(g_.max_learners)))[env];
}

std::atomic<uint64_t>* Segment::queue_tickets(uint64_t env) const noexcept {
  assert(g_.consuming_queue && env < g_.num_envs);
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(
             base_ + g_.sections[kSectionQueue].offset + layout::queue_tickets_at(g_.max_learners, g_.num_envs))) +
         env * g_.capacity;
}

// The walk section's parts are atomics, like the queue section's: a const Segment hands them out for loads only.
layout::WalkControl& Segment::walk_control() const noexcept {
  assert(g_.reanalyse_chunk != 0);
  return *std::launder(reinterpret_cast<layout::WalkControl*>(base_ + g_.sections[kSectionWalk].offset));
}

layout::WalkWorker& Segment::walk_worker(uint64_t slot) const noexcept {
  assert(g_.reanalyse_chunk != 0 && slot < layout::kMaxWalkers);
  return std::launder(reinterpret_cast<layout::WalkWorker*>(base_ + g_.sections[kSectionWalk].offset +
                                                            layout::walk_workers_at()))[slot];
}

layout::WalkEnv& Segment::walk_env(uint64_t env) const noexcept {
  assert(g_.reanalyse_chunk != 0 && env < g_.num_envs);
  return std::launder(
      reinterpret_cast<layout::WalkEnv*>(base_ + g_.sections[kSectionWalk].offset + layout::walk_envs_at()))[env];
}

layout::WalkChunk* Segment::walk_chunks(uint64_t env) const noexcept {
  assert(g_.reanalyse_chunk != 0 && env < g_.num_envs);
  return std::launder(reinterpret_cast<layout::WalkChunk*>(base_ + g_.sections[kSectionWalk].offset +
                                                           layout::walk_chunks_at(g_.num_envs))) +
         env * walk_slots();
}

const layout::JournalControl& Segment::journal_control() const noexcept {
  return *std::launder(reinterpret_cast<const layout::JournalControl*>(base_ + g_.sections[kSectionJournal].offset));
}

layout::JournalControl& Segment::journal_control() noexcept {
  assert(!read_only_);
  return *std::launder(reinterpret_cast<layout::JournalControl*>(base_ + g_.sections[kSectionJournal].offset));
}

const std::atomic<uint64_t>& Segment::journal_head(uint64_t env) const noexcept {
  assert(env < g_.num_envs);
  return std::launder(reinterpret_cast<const std::atomic<uint64_t>*>(base_ + g_.sections[kSectionJournal].offset +
                                                                     layout::journal_heads_at()))[env];
}

std::atomic<uint64_t>& Segment::journal_head(uint64_t env) noexcept {
  assert(!read_only_ && env < g_.num_envs);
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + g_.sections[kSectionJournal].offset +
                                                               layout::journal_heads_at()))[env];
}

const std::atomic<uint64_t>* Segment::step_meta(uint64_t env) const noexcept {
  assert(has_episodes() && env < g_.num_envs);
  return std::launder(reinterpret_cast<const std::atomic<uint64_t>*>(base_ + g_.sections[kSectionStepMeta].offset)) + env * g_.capacity;
}

std::atomic<uint64_t>* Segment::step_meta(uint64_t env) noexcept {
  assert(!read_only_ && has_episodes() && env < g_.num_envs);
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + g_.sections[kSectionStepMeta].offset)) + env * g_.capacity;
}

const EpisodeRecordSlot* Segment::episode_queue(uint64_t env) const noexcept {
  assert(has_episodes() && env < g_.num_envs);
  return std::launder(reinterpret_cast<const EpisodeRecordSlot*>(base_ + g_.sections[kSectionEpisodeQueues].offset)) +
         env * g_.episode_queue_capacity;
}

EpisodeRecordSlot* Segment::episode_queue(uint64_t env) noexcept {
  assert(!read_only_ && has_episodes() && env < g_.num_envs);
  return std::launder(reinterpret_cast<EpisodeRecordSlot*>(base_ + g_.sections[kSectionEpisodeQueues].offset)) + env * g_.episode_queue_capacity;
}

std::byte* Segment::frame_data(std::size_t stack) noexcept {
  assert(!read_only_ && stack < g_.stacks.size());
  return base_ + g_.stacks[stack].frames_offset;
}

const std::atomic<uint64_t>* Segment::frame_index(std::size_t stack, uint64_t env) const noexcept {
  assert(stack < g_.stacks.size() && env < g_.num_envs);
  return std::launder(reinterpret_cast<const std::atomic<uint64_t>*>(base_ + g_.stacks[stack].index_offset)) +
         env * g_.capacity;
}

std::atomic<uint64_t>* Segment::frame_index(std::size_t stack, uint64_t env) noexcept {
  assert(!read_only_ && stack < g_.stacks.size() && env < g_.num_envs);
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + g_.stacks[stack].index_offset)) +
         env * g_.capacity;
}

std::byte* Segment::field_data(std::size_t field) noexcept {
  assert(!read_only_ && field < g_.field_offsets.size());
  return base_ + g_.field_offsets[field];
}

}  // namespace shmreplay
