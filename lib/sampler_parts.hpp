// lib/sampler_parts.hpp: what the Sampler's source files share and sampler.hpp does not carry: the Sampler's state
// (Sampler::Scratch), one struct per stage of its calls, the segment behind the planners' interfaces (episode
// starts, priority trees), the snapshot of the views, and the helpers more than one of those files calls. Private
// to lib/sampler*.cpp; a role-layer header (it needs Sampler and Buffer), so it lives in lib/, not lib/detail.
//
// The Sampler's files, one call path each (a call reads top to bottom in its file):
//   sampler.cpp             construction and the learner lease; the views' sizes, wait, the online reset
//   sampler_sample.cpp      sample and sample_mixed: the rate limiter's reservation, the rounds (snapshot, planner,
//                           gather), the importance weights, the call's counters
//   sampler_gather.hpp/.cpp the gather stage (a chunk of rows copied and validated) and peek, one gather of the
//                           newest steps
//   sampler_mixture.cpp     sample with a mixture of selectors: a block of rows per selector, each by sample_rows
//   sampler_checks.cpp      the argument checks, and the error of a snapshot with nothing to draw
//   sampler_weights.cpp     total_weight and priority_weights
//   sampler_update.cpp      the learner's writes: try_update, update_priorities
//   sampler_write_back.cpp  write_back: derived fields rewritten by handle, many rows per call
//   sampler_rate_limit.cpp  the learner's half of the rate limiter
//   sampler_episodes.cpp    pop_episodes
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <optional>
#include <utility>
#include <vector>

#include "detail/protocol/episodes.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/protocol/cold_seal.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/walk.hpp"
#include "detail/storage/field_storage.hpp"
#include "detail/sampling/planner.hpp"
#include "detail/sampling/planner_table.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "sampler_caps.hpp"
#include "sampler_consume.hpp"
#include "sampler_gather.hpp"
#include "sampler_zero.hpp"

namespace shmreplay::sampler_parts {

// Episode boundaries for the stop/within planners, read from the segment's step meta words (one relaxed load
// each; a row whose meta a writer was overwriting fails the validation of its copy, which covers the meta).
class SegmentEpisodeStarts final : public detail::EpisodeStarts {
 public:
  explicit SegmentEpisodeStarts(const Segment& seg) : capacity_(seg.capacity()) {
    if (!seg.has_episodes()) return;  // then no planner asks (stop and within need episode fields)
    for (uint64_t e = 0; e < seg.num_envs(); ++e) meta_.push_back(seg.step_meta(e));
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
  explicit SegmentPriorityTrees(const Segment& seg) : seg_(&seg) {}
  detail::PriorityTreeView tree(std::size_t env) const noexcept override { return detail::priority_tree_of(*seg_, env); }
  bool has_fresh() const noexcept override { return seg_->has_priorities() && seg_->fresh_trees(); }
  detail::PriorityTreeView fresh(std::size_t env) const noexcept override { return detail::fresh_tree_of(*seg_, env); }
  uint64_t sequence_length() const noexcept override {
    return seg_->has_priorities() ? seg_->sequence_priority_length() : 0;
  }
  detail::SequenceTreesView windows(std::size_t env) const noexcept override {
    return detail::sequence_trees_of(*seg_, env);
  }

 private:
  const Segment* seg_;
};

// Env `e`'s view in a snapshot: view_range, bounded to the ring. A no-op in a consistent segment (claimed >=
// head); a segment whose counters were damaged (claimed far below head) gives a longer view, which the Inspector
// reports as corrupt, and which neither the draws (their slot computation) nor total_weight may see: both take
// their views from here, so total_weight weighs the view that sample draws from.
// The online view is the Sampler's learner slot's (`me`).
// A tiered buffer's view (layout 1.11; docs/design/cold_tier.md): the ring's view `r` extended below the ring by the
// cold tier, down to the oldest step whose cold record no seal has begun to reuse. The writer seals a step before
// its claim reclaims the step's slot, so the two tiers' steps are one run; a step of the run that a stale snapshot
// places in the wrong tier fails its validation (cold_gather.hpp) and is drawn again.
inline detail::EnvView cold_view(const Segment& seg, const detail::LearnerSlotWords& me, uint64_t e, View view,
                                 detail::StepRange r) noexcept {
  const layout::EnvControl& c = seg.env_control(e);
  uint64_t lo = detail::cold_intact_from(detail::cold_read_end(seg.cold_env(e)), seg.cold_capacity());
  lo = std::max(lo, c.stacks_intact_from.load(std::memory_order_relaxed));  // a dead updater's repair, as the ring
  if (view == View::online) lo = std::max(lo, me.online_start(e).load(std::memory_order_relaxed));
  const uint64_t stored = seg.capacity() + seg.cold_capacity();  // at most both tiers, as the ring view at most the ring
  lo = std::max(lo, r.hi > stored ? r.hi - stored : 0);
  return {std::min(lo, r.hi), r.hi};
}

// `hot_lo` (a tiered buffer's): where the ring's part of the view starts; the steps below it are the cold tier's.
inline detail::EnvView snapshot_view(const Segment& seg, const detail::LearnerSlotWords& me, uint64_t e,
                                     View view, uint64_t* hot_lo = nullptr) noexcept {
  const uint64_t cap = seg.capacity();
  const detail::StepRange r = detail::view_range(seg.env_control(e), view, cap, me.online_start(e));
  const detail::EnvView ring{std::max(r.lo, r.hi > cap ? r.hi - cap : 0), r.hi};
  if (seg.cold_capacity() == 0) return ring;
  if (hot_lo != nullptr) *hot_lo = ring.lo;
  return cold_view(seg, me, e, view, r);
}

// Steps published and not yet overwritten by a completed write, over all envs (a write in progress does not
// count against the view here): what SampleOptions::min_steps is checked against, once per call
// (sampler_sample.cpp).
uint64_t published_steps(const Segment& seg, const detail::LearnerSlotWords& me, View view) noexcept;

// Throws the error of a snapshot with nothing to draw from when the planner can tell it is not a write in
// progress (Planner::shortfall: every start of the views weighs 0, or a weight is not finite). Returns whether
// asking again in a later round of the call would only repeat this answer (sampler_checks.cpp).
bool check_shortfall(detail::Planner& planner, detail::Shortfall found, const Segment& seg, const char* op,
                     View view);

// The learner slot's counters after a call (`me`), and its statistics of the rows' ages (layout 1.8: `ages`, one per
// row returned, how far behind its env's head each row ended); a sample call's rows (not a peek's) were reserved for
// the rate limiter before the call drew them (Sampler::wait_for_rate_limit), and now wake the writers waiting for
// them (detail/protocol/rate_limit.hpp; sampler_sample.cpp).
// `unreserved`: the rows of a sample call that no reservation counted (all of them without a limiter).
void count_call(Segment& seg, const detail::LearnerSlotWords& me, std::span<const uint64_t> ages, bool sample,
                std::size_t unreserved = 0) noexcept;

// The rows a sample call reserved with the rate limiter (try_reserve_samples), given back if the call fails
// before keep(): an empty view, a contended ring, an interrupt (sampler_sample.cpp, sampler_mixture.cpp).
class Reservation {
 public:
  Reservation(layout::GlobalControl& g, std::size_t rows) noexcept : g_(g), rows_(rows) {}
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() {
    if (rows_ != 0) detail::return_samples(g_, rows_);
  }
  /// The rows drawn: they stay counted. Returns how many were reserved.
  std::size_t keep() noexcept { return std::exchange(rows_, 0); }

 private:
  layout::GlobalControl& g_;
  std::size_t rows_;
};


// The stages' state, one struct each (Sampler::Scratch below holds one of each).

// The snapshot stage: per env, the view [lo, hi) of the current round's snapshot (at most the ring, or with a cold tier the two tiers: snapshot_view),
// and hi - hi % capacity, the step in slot 0 of hi's lap, so that a drawn row's slot needs no division.
// A tiered buffer's snapshot also keeps, per env, where the ring's part of its view starts (hot_lo; snapshot_view).
struct Snapshot {
  explicit Snapshot(std::size_t num_envs) : views(num_envs), hi_base(num_envs), hot_lo(num_envs) {}
  std::vector<detail::EnvView> views;
  std::vector<uint64_t> hi_base;
  std::vector<uint64_t> hot_lo;
};

// The walk's freshly reanalysed steps, for the fresh planner (SampleOptions::reanalysed).
class SegmentFreshSteps final : public detail::FreshSteps {
 public:
  explicit SegmentFreshSteps(const Segment& seg) : seg_(&seg) {}
  void fresh_ranges(std::vector<detail::FreshRange>& out) const override {
    detail::walk_fresh_ranges(*seg_, read_);
    out.clear();
    for (const detail::WalkRange& r : read_) out.push_back({r.env, r.lo, r.hi});
  }

 private:
  const Segment* seg_;
  mutable std::vector<detail::WalkRange> read_;  // scratch: only grows
};

// The planning stage: one planner per way of drawing (detail/sampling, chosen by its planner table), and what they
// are made from: the work counters and the segment behind their three interfaces.
struct Planning {
  Planning(const Segment& seg, SamplerStats& stats)
      : starts(seg), trees(seg), fresh(seg), inputs{stats, starts, trees, &fresh}, planners(inputs) {}
  SegmentEpisodeStarts starts;
  SegmentPriorityTrees trees;
  SegmentFreshSteps fresh;
  detail::PlannerInputs inputs;
  detail::Planners planners;  // one of each (detail/sampling/planner_table.hpp)
};

// The rounds of a sample call's rows (sampler_sample.cpp): the rows still to draw, and per batch row its age.
struct Rounds {
  std::vector<uint32_t> failed;  // rows to draw in the next round
  std::vector<uint32_t> redraw;  // rows of the current round
  // Per batch row, its age: the head of its env in the snapshot it was drawn from, minus its end (start + valid
  // steps); a row redrawn after a failed validation overwrites its entry. count_call adds them to the slot's
  // statistics. Grows to the largest batch only.
  std::vector<uint64_t> ages;
  std::vector<uint64_t> repair_envs;  // repair_dead_updaters' scratch (grows on that path only)
  std::vector<double> mixture_p;      // per row, its probability under the mixture (mixture_importance only)
};

// The online view's marks, for reset_online_queue(OnlineReset::sampled).
struct OnlineMarks {
  explicit OnlineMarks(std::size_t num_envs) : seen(num_envs, 0), reserved_heads(num_envs, 0) {}
  // Per env, the head of the last round's snapshot of the last draw from the online view: every step below it was
  // one that draw could take (reset_online_queue(OnlineReset::sampled) restarts the view there).
  std::vector<uint64_t> seen;
  // Per env, its head just before this call's rate-limiter reservation (when `heads_reserved`): the steps at or
  // above it may have been published by writers that the reservation let through, after the call began, so the
  // online view's reset to "sampled" keeps them (issue 30's stall otherwise: the reset drops them, the limiter
  // holds the writers, and the learner waits for online steps that never come).
  std::vector<uint64_t> reserved_heads;
  bool heads_reserved = false;
};

// A sample call's policy window (lib/sampler_policy.cpp): `on` when the call draws only versions >= floor; and
// what earlier rounds learned of each env's bound for `cached_floor`: the first step whose version is >= it, found
// (then every later step's is too: an env's versions never decrease, a stored step's never change), or not found
// below bound[e] (every step below it is older). So in the steady state a round cuts the views without a load.
struct Window {
  static constexpr uint64_t kNoFloor = ~0ull;
  bool on = false;
  uint64_t floor = 0;
  uint64_t version = 0;   // the published version it was computed from
  std::size_t field = 0;  // the policy-version field
  uint64_t cached_floor = kNoFloor;
  std::vector<uint64_t> bound;  // per env
  std::vector<uint8_t> found;   // per env: bound[e]'s version is >= cached_floor
};

// The first step of env e's view [v.lo, v.hi) whose policy version (field `field`) is >= floor, v.hi when none: a
// binary search over the stored versions (the oldest step probed first), validated as a copy is (a step
// overwritten or rewritten meanwhile restarts it above the overwritten steps); nullopt when writers reclaimed the
// whole view or lapped the ring through every try (the round draws nothing from the env). lib/sampler_policy.cpp.
std::optional<uint64_t> window_lo(const Segment& seg, std::size_t field, uint64_t e, detail::EnvView v,
                                  uint64_t floor) noexcept;

// update_priorities' copy of the caller's arrays, checked and then used (grows to the largest update only).
// Sampler::write_back's copy of its handles and the order it writes them in (by env, then step).
struct WriteBackCopy {
  std::vector<uint64_t> envs;
  std::vector<uint64_t> steps;
  std::vector<std::size_t> order;
};

struct UpdateCopy {
  std::vector<std::pair<uint64_t, uint64_t>> applied;  // (env, step) applied, with sequence priorities
  std::vector<uint64_t> envs;
  std::vector<uint64_t> steps;
  std::vector<float> priorities;
};

}  // namespace shmreplay::sampler_parts

namespace shmreplay {

// The Sampler's state, one member per stage of its calls. On the heap, so that sampler.hpp does not carry it; a
// moved Sampler takes it along (the planners and the gather point into it and into the segment, never into the
// Sampler).
struct Sampler::Scratch {
  Scratch(Buffer& buffer, uint64_t rank)
      : slot(detail::learner_slot(segment_of(buffer), rank)),
        storages(segment_of(buffer)),
        snapshot(static_cast<std::size_t>(buffer.num_envs())),
        planning(segment_of(buffer), stats),
        gather(segment_of(buffer), storages),
        online(static_cast<std::size_t>(buffer.num_envs())),
        caps(segment_of(buffer), rank),
        zeroing(segment_of(buffer)) {}

  detail::LearnerSlotWords slot;  // the words of the Sampler's learner slot
  SamplerStats stats;             // the planners' and the gather's work counters (Sampler::stats)
  detail::StorageSet storages;    // where each field's bytes live (detail/storage/field_storage.hpp)
  sampler_parts::Snapshot snapshot;
  sampler_parts::Planning planning;
  sampler_parts::Rounds rounds;
  sampler_parts::ChunkGather gather;
  sampler_parts::OnlineMarks online;
  sampler_parts::UpdateCopy update;
  sampler_parts::WriteBackCopy write_back;  // write_back's handles (sampler_write_back.cpp)
  sampler_parts::Window window;
  sampler_parts::Caps caps;  // the sample caps (sampler_caps.hpp); off without
  sampler_parts::Zeroing zeroing;  // zero-on-sample (sampler_zero.hpp); off for calls without
  sampler_parts::ConsumeState consume;  // a consuming call's claims (sampler_consume.hpp)
};

}  // namespace shmreplay
