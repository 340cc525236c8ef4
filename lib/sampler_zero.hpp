// lib/sampler_zero.hpp: the learner's half of zero-on-sample (SampleOptions::zero_on_sample) and of fresh steps
// (CreateOptions::initial_priority +infinity; docs/design/priorities.md, "Zero-on-sample" and "Initial
// priorities"): after a chunk of prioritized rows is copied and validated, each row's start step is taken: the leaf
// it was drawn by (its fresh-tree leaf in a round that drew fresh steps; with zero-on-sample, its priority leaf) goes
// from the positive weight the draw found to 0 by one compare-and-swap (detail::take_priority); a row whose step
// another learner took first is drawn again. A call that throws gives back the weights it took.
//
// Who calls it: the sample rounds (lib/sampler_sample.cpp, draw_round and sample_rows), on the Sampler's thread.
// Private to lib/sampler*.cpp; nothing here allocates once warmed up.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "detail/storage/gather.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::sampler_parts {

class Zeroing {
 public:
  explicit Zeroing(Segment& seg) noexcept : seg_(&seg) {}

  bool on() const noexcept { return on_; }

  // At the start of a call's first rows (sample_rows with first_row 0): forgets the previous call's takes.
  void forget_takes() noexcept { held_.clear(); }

  // Before a view's rows are drawn (sample_with): on for a prioritized draw of `rows` rows with zero-on-sample, or
  // in a buffer with fresh-step trees.
  void begin_call(bool prioritized, bool zero_on_sample, std::size_t first_row, std::size_t rows) {
    zero_ = prioritized && zero_on_sample && seg_->has_priorities();
    fresh_trees_ = prioritized && seg_->has_priorities() && seg_->fresh_trees();
    fresh_ = false;
    on_ = zero_ || fresh_trees_;
    if (on_) held_.reserve(2 * (first_row + rows));  // a batch row takes at most two leaves: no allocation once warm
  }

  // After each prepare: whether the round's rows were drawn from the fresh steps (PriorityPlanner::drawing_fresh).
  void set_round(bool fresh) noexcept { fresh_ = fresh_trees_ && fresh; }

  // Takes the start step of each row of `rows` (a gathered chunk) that is not in failed[failed_before, end) (failed
  // its validation, or refused by the sample caps). A row whose step is taken already from the tree it was drawn by
  // (by another learner; or, with zero-on-sample, given priority 0) is appended to `failed`, to be drawn again; a row
  // whose step was overwritten since its validated copy is kept (no one can draw it again). `walk_word`: the
  // learner slot's priority_walk.
  void take(std::span<const detail::GatherRow> rows, std::vector<uint32_t>& failed, std::size_t failed_before,
            std::atomic<uint64_t>& walk_word) noexcept;

  // Gives back every weight this call took (a call that throws returns no row), each while its leaf still holds
  // its step at 0.
  void release(std::atomic<uint64_t>& walk_word) noexcept;

 private:
  Segment* seg_;
  bool on_ = false;
  bool zero_ = false;         // zero-on-sample
  bool fresh_trees_ = false;  // the buffer has fresh-step trees and the call draws by priority
  bool fresh_ = false;        // this round drew fresh steps
  struct Held {
    uint64_t env;
    uint64_t step;
    double weight;
    bool fresh;  // the leaf was the fresh tree's
  };
  std::vector<Held> held_;  // the steps this call took, until it returns
};

}  // namespace shmreplay::sampler_parts
