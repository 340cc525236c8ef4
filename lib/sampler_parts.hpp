// lib/sampler_parts.hpp: what the Sampler's source files share and sampler.hpp does not carry: the drawing state
// (Sampler::Scratch), the segment behind the planners' interfaces (episode starts, priority trees), the snapshot
// of the views, and the helpers more than one of those files calls. Private to lib/sampler*.cpp; a role-layer
// header (it needs Sampler and Buffer), so it lives in lib/, not lib/detail.
//
// The Sampler's files, one idea each:
//   sampler.cpp             the public calls: sample, sample_mixed, sizes, wait, the online reset, episode records
//   sampler_lease.cpp       construction: the learner lease, and the repair of a dead learner's state
//   sampler_checks.cpp      the argument checks, and the error of a snapshot with nothing to draw
//   sampler_rounds.cpp      the sample rounds (snapshot, planner, copy, validate) and peek, through the gather
//   sampler_weights.cpp     weights: importance weights, total_weight, priority_weights
//   sampler_update.cpp      the learner's writes: try_update, update_priorities
//   sampler_rate_limit.cpp  the learner's half of the rate limiter
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "detail/protocol/episodes.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/storage/field_storage.hpp"
#include "detail/storage/gather.hpp"
#include "detail/sampling/planner.hpp"
#include "detail/sampling/planner_table.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay::sampler_parts {

// A gather chunk: the rows drawn before they are copied and validated together (sample_with). Up to kGatherRows
// rows, and no more rows once kGatherBytes are drawn: a chunk is the window of its rows' validation, so it stays
// short (a row whose slot a writer reclaims during the chunk is redrawn, even if it was copied before that).
inline constexpr std::size_t kGatherRows = 256;
inline constexpr uint64_t kGatherBytes = uint64_t{64} << 10;

// Episode boundaries for the stop/within planners, read from the segment's step meta words (one relaxed load
// each; a row whose meta a writer was overwriting fails the validation of its copy, which covers the meta).
class SegmentEpisodeStarts final : public detail::EpisodeStarts {
 public:
  explicit SegmentEpisodeStarts(const Segment& buffer) : capacity_(buffer.capacity()) {
    if (!buffer.has_episodes()) return;  // then no planner asks (stop and within need episode fields)
    for (uint64_t e = 0; e < buffer.num_envs(); ++e) meta_.push_back(buffer.step_meta(e));
  }
  uint64_t episode_start(std::size_t env, uint64_t step) const noexcept override {
    return detail::meta_start(detail::load_meta(meta_[env], capacity_, step));
  }

 private:
  uint64_t capacity_;
  std::vector<const std::atomic<uint64_t>*> meta_;  // per env, its step meta words in the mapping
};

// The envs' priority trees in the mapping, for the priority planner.
class SegmentPriorityTrees final : public detail::PriorityTrees {
 public:
  explicit SegmentPriorityTrees(const Segment& buffer) : buffer_(&buffer) {}
  detail::PriorityTree tree(std::size_t env) const noexcept override {
    return detail::priority_tree_of(*buffer_, env);
  }

 private:
  const Segment* buffer_;
};

// Env `e`'s view in a snapshot: view_range, bounded to the ring. A no-op in a consistent segment (claimed >=
// head); a segment whose counters were damaged (claimed far below head) gives a longer view, which the Inspector
// reports as corrupt, and which neither the draws (their slot computation) nor total_weight may see: both take
// their views from here, so total_weight weighs the view that sample draws from.
// The online view is the Sampler's learner slot's (`me`).
inline detail::EnvView snapshot_view(const Segment& b, const detail::LearnerSlotWords& me, uint64_t e,
                                     View view) noexcept {
  const uint64_t cap = b.capacity();
  const detail::StepRange r = detail::view_range(b.env_control(e), view, cap, me.online_start(e));
  return {std::max(r.lo, r.hi > cap ? r.hi - cap : 0), r.hi};
}

// Steps published and not yet overwritten by a completed write, over all envs (a write in progress does not
// count against the view here): what SampleOptions::min_steps is checked against, once per call
// (sampler_rounds.cpp).
uint64_t published_steps(const Segment& b, const detail::LearnerSlotWords& me, View view) noexcept;

// Throws the error of a snapshot with nothing to draw from when the planner can tell it is not a write in
// progress (Planner::shortfall: every start of the views weighs 0, or a weight is not finite). Returns whether
// asking again in a later round of the call would only repeat this answer (sampler_checks.cpp).
bool check_shortfall(detail::Planner& planner, detail::Shortfall found, const Segment& b, const char* op, View view);

// The learner slot's counters after a call (`me`), and its statistics of the rows' ages (layout 1.8: `ages`, one per
// row returned, how far behind its env's head each row ended); a sample call's rows (not a peek's) were reserved for
// the rate limiter before the call drew them (Sampler::wait_for_rate_limit), and now wake the writers waiting for
// them (detail/protocol/rate_limit.hpp; sampler.cpp).
// `unreserved`: the rows of a sample call that no reservation counted (all of them without a limiter).
void count_call(Segment& b, const detail::LearnerSlotWords& me, std::span<const uint64_t> ages, bool sample,
                std::size_t unreserved = 0) noexcept;

}  // namespace shmreplay::sampler_parts

namespace shmreplay {

// What the Sampler decides with: the snapshot's views, one planner per way of drawing (detail/sampling, chosen by
// its planner table), the rows still to draw in this call, and the planners' work counters. On the heap, so that
// sampler.hpp does not carry it; a moved Sampler takes it along (the planners point into it, never into the
// Sampler).
struct Sampler::Scratch {
  Scratch(const Buffer& buffer, uint64_t rank)
      : slot(detail::learner_slot(segment_of(buffer), rank)),
        starts(segment_of(buffer)),
        trees(segment_of(buffer)),
        planners(inputs),
        views(static_cast<std::size_t>(buffer.num_envs())),
        hi_base(views.size()),
        read(views.size()),
        online_seen(views.size(), 0),
        reserved_heads(views.size(), 0),
        storages(segment_of(buffer)) {
    chunk.resize(sampler_parts::kGatherRows);
    capacity = buffer.capacity();
  }

  detail::LearnerSlotWords slot;  // the words of the Sampler's learner slot (layout 1.7)
  SamplerStats stats;
  sampler_parts::SegmentEpisodeStarts starts;
  sampler_parts::SegmentPriorityTrees trees;
  detail::PlannerInputs inputs{stats, starts, trees};
  detail::Planners planners;             // one of each (detail/sampling/planner_table.hpp)
  std::vector<detail::EnvView> views;    // per env, the view [lo, hi) of the current round's snapshot
  std::vector<uint32_t> failed;          // rows to draw in the next round
  std::vector<uint32_t> redraw;          // rows of the current round
  // The gather (detail/storage/gather.hpp): the rows of the current chunk, and their validation.
  std::vector<detail::GatherRow> chunk;  // its first chunk_size entries (never shrinks: no reallocation)
  std::size_t chunk_size = 0;
  bool chunk_whole = true;               // every row of the chunk is a whole_run (gather.hpp)
  std::vector<uint64_t> hi_base;         // per env, views[e].hi - views[e].hi % capacity: the step in slot 0
  detail::BatchedReader read;            // the chunk's seqlock validation (detail/protocol/seqlock.hpp)
  uint64_t capacity = 0;
  std::size_t length = 1;                    // the sequence length of the rows being added
  // update_priorities' copy of the caller's arrays, checked and then used (grows to the largest update only)
  std::vector<uint64_t> update_envs;
  std::vector<uint64_t> update_steps;
  std::vector<float> update_priorities;
  // Per env, the head of the last round's snapshot of the last draw from the online view: every step below it was
  // one that draw could take (reset_online_queue(OnlineReset::sampled) restarts the view there).
  std::vector<uint64_t> online_seen;
  // Per env, its head just before this call's rate-limiter reservation (when `heads_reserved`): the steps at or
  // above it may have been published by writers that the reservation let through, after the call began, so the
  // online view's reset to "sampled" keeps them (issue 30's stall otherwise: the reset drops them, the limiter
  // holds the writers, and the learner waits for online steps that never come).
  std::vector<uint64_t> reserved_heads;
  bool heads_reserved = false;
  // Per batch row, its age: the head of its env in the snapshot it was drawn from, minus its end (start + valid
  // steps); a row redrawn after a failed validation overwrites its entry. count_call adds them to the slot's
  // statistics (layout 1.8). Grows to the largest batch only.
  std::vector<uint64_t> ages;
  // Where each field's bytes live, and their gather (detail/storage/field_storage.hpp).
  detail::StorageSet storages;
};

}  // namespace shmreplay
