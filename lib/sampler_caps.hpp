// lib/sampler_caps.hpp: the learner's half of sample caps (layout 1.11, CreateOptions::max_times_sampled;
// docs/design/sample_caps.md): the draw-time check that skips a start already capped, the claim of one delivery
// per validated row (a CAS on the start's count word), and the emptiness check when rejections pile up. The
// writer's half is one store in Writer::finish_step (lib/writer_push.cpp).
//
// Who calls it: the sample rounds (lib/sampler_sample.cpp, draw_round), on the Sampler's thread. Private to
// lib/sampler*.cpp; nothing here allocates.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "detail/always_inline.hpp"
#include "detail/sampling/planner.hpp"
#include "detail/storage/gather.hpp"
#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay::sampler_parts {

// Draw-time rejections in one call before the first check that some start is still uncapped: a base plus this
// many per row; each check doubles the budget (so the checks cost O(stored steps) per doubling of the rejections).
inline constexpr uint64_t kCapCheckBase = 64;
inline constexpr uint64_t kCapCheckPerRow = 16;
// Rejections in one call past which the call gives up (Errc::empty_view): the starts left uncapped weigh too
// little under the call's distribution (or none of them can start a row under its options).
inline constexpr uint64_t kCapMaxRejections = uint64_t{1} << 26;

// A Sampler's sample-cap state: the count words and its slot's counters in the mapping, and one call's rejections.
class Caps {
 public:
  Caps(Segment& seg, uint64_t rank) noexcept;

  bool on() const noexcept { return words_ != nullptr; }

  // At the start of a call's first rows (sample_rows with first_row 0): forgets the claims of the previous call,
  // whose rows were returned (see release).
  void forget_claims() noexcept { held_.clear(); }

  // Before a view's rows are drawn (sample_with): resets the rejection budget for rows [first_row, first_row + rows)
  // of the batch, drawn from `view`.
  void begin_call(std::size_t rows, View view, std::size_t first_row) {
    held_.reserve(first_row + rows);  // no allocation once warmed up
    view_ = view;
    rejections_ = 0;
    next_check_ = kCapCheckBase + kCapCheckPerRow * rows;
  }

  // Whether the call checks each draw's count word before its copy (refused): from its first rejection on. Until
  // then a draw only prefetches the word for its claim: a load whose branch waits on it before every copy cost the
  // uniform call about half its rate (docs/benchmarks/caps.md), while a start capped in the common case (few are)
  // costs only its copy, refused at the claim.
  bool checking() const noexcept { return rejections_ != 0; }

  // Brings ring slot index `index`'s count word into the cache, for writing (the claim's CAS).
  SHMREPLAY_ALWAYS_INLINE void prefetch(uint64_t index) const noexcept { __builtin_prefetch(&words_[index], 1, 3); }

  // Whether a draw of `start`, in ring slot index `index` (env * capacity + slot), must be refused now: its count
  // word counts another step (overwritten since the snapshot) or reached the cap. Counts only grow, so a start
  // refused here would be refused by claim too: skipping it before the copy keeps the draw exact.
  SHMREPLAY_ALWAYS_INLINE bool refused(uint64_t index, uint64_t start) const noexcept {
    const uint64_t w = words_[index].load(std::memory_order_relaxed);
    return !layout::cap_word_for(w, start) || layout::cap_word_count(w) >= cap_;
  }

  // Counts `n` refused draws (refused, or claim's). At each doubling of the call's rejections, checks the snapshot's
  // `views`: returns true (take a fresh snapshot) when a writer published steps since it; throws Error(empty_view)
  // when every start of the views is capped, or past kCapMaxRejections.
  bool note_rejections(const Segment& seg, std::span<const detail::EnvView> views, uint64_t n);

  // Claims one delivery for each row of `rows` (a gathered chunk) that passed its validation: the rows from
  // failed[failed_before] on are the chunk's failed ones, in chunk order. A row whose claim fails (its start was
  // capped or overwritten meanwhile) is appended to `failed`, to be redrawn. Returns the rows refused (the caller
  // counts them with note_rejections).
  std::size_t claim(std::span<const detail::GatherRow> rows, std::vector<uint32_t>& failed,
                    std::size_t failed_before) noexcept;

  // Gives back every delivery this call claimed (a call that throws returns no row): each count goes down by one
  // while its word still counts the same step. Safe for the bound: a delivery given back was never returned.
  void release() noexcept;

  // Adds the counts kept since the last flush to the learner slot's counters (once per round).
  void flush() noexcept;

 private:
  std::atomic<uint64_t>* words_ = nullptr;  // env 0's count words; env e's start at e * capacity
  layout::CapLearner* mine_ = nullptr;      // this learner slot's counters
  uint64_t cap_ = 0;
  uint64_t capacity_ = 0;
  View view_ = View::replay;  // the view being drawn from (for messages)
  uint64_t rejections_ = 0;  // this call's, draw-time and claim-time
  uint64_t next_check_ = 0;
  struct Held {
    uint64_t index;  // env * capacity + slot
    uint64_t start;
  };
  std::vector<Held> held_;   // the deliveries this call claimed, until it returns
  uint64_t rejected_ = 0;    // since the last flush
  uint64_t claimed_ = 0;
  uint64_t retired_ = 0;
};

}  // namespace shmreplay::sampler_parts
