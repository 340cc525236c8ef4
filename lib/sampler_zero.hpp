// lib/sampler_zero.hpp: the learner's half of zero-on-sample (SampleOptions::zero_on_sample; docs/design/priorities.md,
// "Zero-on-sample"): after a chunk of prioritized rows is copied and validated, each row's start step is taken, its
// priority set from the positive weight the draw found to 0 by one compare-and-swap on its leaf
// (detail::take_priority); a row whose step another learner took first is drawn again. A call that throws gives
// back the weights it took.
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

  // Before a view's rows are drawn (sample_with): on for a zero-on-sample prioritized draw of `rows` rows.
  void begin_call(bool zero_on_sample, std::size_t first_row, std::size_t rows) {
    on_ = zero_on_sample && seg_->has_priorities();
    if (on_) held_.reserve(first_row + rows);  // a batch row takes once: no allocation once warmed up
  }

  // Takes the start step of each row of `rows` (a gathered chunk) that is not in failed[failed_before, end) (failed
  // its validation, or refused by the sample caps). A row whose step is taken already (another learner, or priority
  // 0) is appended to `failed`, to be drawn again; a row whose step was overwritten since its validated copy is
  // kept (its step can be drawn by no one again). `walk_word`: the learner slot's priority_walk.
  void take(std::span<const detail::GatherRow> rows, std::vector<uint32_t>& failed, std::size_t failed_before,
            std::atomic<uint64_t>& walk_word) noexcept;

  // Gives back every weight this call took (a call that throws returns no row), each while its leaf still holds
  // its step at 0.
  void release(std::atomic<uint64_t>& walk_word) noexcept;

 private:
  Segment* seg_;
  bool on_ = false;
  struct Held {
    uint64_t env;
    uint64_t step;
    double weight;
  };
  std::vector<Held> held_;  // the steps this call took, until it returns
};

}  // namespace shmreplay::sampler_parts
