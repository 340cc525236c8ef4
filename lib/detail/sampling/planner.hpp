// detail/sampling/planner.hpp: deciding where a sample reads. The start-drawing algorithms sit behind one
// interface, Planner; the Sampler does the rest (snapshot, copy, validation; lib/sampler_sample.cpp).
//
// Who calls it: the Sampler, in every round of a sample call: it reads each env's view [lo, hi) from the segment
// (the protocol side, detail/protocol/seqlock.hpp), hands the views to the planner that the planner table
// (planner_table.hpp) chooses for the call's options (prepare), asks it for one row per draw (draw), then copies
// and validates each row itself. A planner never
// touches the segment: no Buffer, no batch (the priority planner loads tree words, through PriorityTrees and
// detail/protocol/priorities). Episode boundaries reach it through EpisodeStarts, which
// the Sampler implements over the segment's step meta and a test implements over a vector
// (tests/planner/), so every planner can be tested without shared memory.
//
// The planners (docs/design/sampling.md, "Sampling algorithm"):
//   ClosedFormPlanner   cross, period 1: per-env weights in closed form, O(1) per env, O(log) per row
//   PeriodPlanner       cross, period > 1: the same over the period's grid, with a table along residue classes
//   RejectionPlanner    stop and within: uniform proposals over the grid, accepted with weight / L^power; after
//                       kMaxTries refusals in one row it switches the rest of the call to ExactPlanner
//   ExactPlanner        stop and within: enumerates the episode pieces of every view, exact weights
//   PriorityPlanner     prioritized (cross or stop, period 1): priority^alpha of the start step, from the env's
//                       sum tree (priority_planner.hpp)
//   RecencyPlanner      recency_half_life > 0 (cross, period 1): min(r, L)^power 2^(-age / half_life), per env in
//                       closed form, O(1) per env, O(log) per row (recency_planner.hpp)
// A new way of drawing starts is a new Planner (its own file, a constructor from PlannerInputs) and one row in
// planner_table.hpp.
//
// Thread safety: a planner belongs to one Sampler and is used by one thread at a time; it keeps scratch storage
// that only grows, so once warmed up prepare and draw never allocate. Nothing in it is shared between processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "shmreplay/vocabulary.hpp"

namespace shmreplay::detail {

/// Steps [lo, hi) of one env's view, as the Sampler read them from the segment (one snapshot).
struct EnvView {
  uint64_t lo = 0;
  uint64_t hi = 0;
};

/// One row to copy: steps [start, start + steps) of env `env`; 1 <= steps <= the sequence length.
struct Draw {
  uint64_t env = 0;
  uint64_t start = 0;
  uint64_t steps = 0;
  /// What the row's importance weight corrects for, N * P: the probability the start was drawn with, times the
  /// number of starts in the view (1 = as likely as under uniform sampling). Every planner fills it: the priority
  /// planner with its draw's N * P; the others leave 1, the value of a draw from the distribution the call asked for
  /// (a distribution_power, an episode mode), which no importance weight corrects. The Sampler stores it as the
  /// row's weight, and turns a prioritized batch's into importance weights (Sampler::finish_weights).
  double relative_probability = 1;
  friend bool operator==(const Draw&, const Draw&) = default;
};

/// What a planner needs of SampleOptions. `period` is at least 1 and already clamped to the capacity (a period
/// of the capacity or more keeps only each view's first step).
struct PlanOptions {
  Episodes episodes = Episodes::cross;
  uint64_t period = 1;
  /// SampleOptions::recency_half_life: the recency planner's (finite, > 0 when it is chosen); the others ignore it.
  double recency_half_life = 0.0;
  /// SampleOptions::sequence_priority_eta: the priority planner's, in a buffer with sequence priorities.
  double sequence_priority_eta = 0.9;
};

/// Where episodes start, for the stop/within planners: the first step of the episode that step `step` of env
/// `env` belongs to, as its writer recorded it. Only asked for steps inside the env's view. A value above `step`
/// means the step is being overwritten (a torn read); the planner then treats that start as going away (the
/// Sampler's validation of the copy rejects such rows in any case). Called from the sampling thread only.
class EpisodeStarts {
 public:
  virtual ~EpisodeStarts() = default;
  virtual uint64_t episode_start(std::size_t env, uint64_t step) const noexcept = 0;
};

class PriorityTrees;  // the envs' priority trees (priority_planner.hpp)

/// Steps [lo, hi) of env `env` that a reanalyse worker completed with the walk's newest target version.
struct FreshRange {
  uint64_t env = 0;
  uint64_t lo = 0;
  uint64_t hi = 0;
};
/// The freshly reanalysed steps, for the fresh planner (SampleOptions::reanalysed): the Sampler implements it over
/// the walk's words (detail/protocol/walk.hpp), a test over a vector. Called from the sampling thread only.
class FreshSteps {
 public:
  virtual ~FreshSteps() = default;
  /// Replaces `out` with the fresh ranges of one snapshot, by env and then step, disjoint.
  virtual void fresh_ranges(std::vector<FreshRange>& out) const = 0;
};

/// What a Sampler gives each planner it makes (one of each: planner_table.hpp): the work counters (SamplerStats)
/// and the two ways a planner may look at the segment. Every planner has a constructor from it.
struct PlannerInputs {
  SamplerStats& stats;
  const EpisodeStarts& starts;
  const PriorityTrees& trees;
  const FreshSteps* fresh = nullptr;  ///< the fresh planner's (nullptr: it finds nothing to draw)
};

/// What a planner can tell of a snapshot that it found nothing to draw from (Planner::shortfall), for the caller's
/// error (the Sampler's, lib/sampler_checks.cpp).
enum class Shortfall : uint8_t {
  unknown,     ///< nothing more (the default): a fresh snapshot may do, and asking again tells nothing new
  no_start,    ///< the views held no start (a write in progress may hide them): ask again after a fresh snapshot
  positive,    ///< some start weighs more than 0 (its sums read 0 beside far larger weights): a fresh snapshot may do
  all_zero,    ///< every start of the views weighs 0: none can be drawn
  not_finite,  ///< a weight is not a finite number >= 0: the segment is damaged
};

/// One way of drawing (env, start) pairs with their weights.
class Planner {
 public:
  virtual ~Planner() = default;

  /// Called once at the start of each sample call (each view of a mixed call), before its first prepare: forgets
  /// what the previous call learned (the rejection planner's switch to the exact method).
  virtual void begin_call() noexcept {}

  /// Takes the views of one snapshot (one per env; they must stay unchanged until the next prepare, the planner
  /// keeps the span) and computes what draws need. Returns whether any start has a positive weight; draw may be
  /// called only after a prepare that returned true. O(num_envs) (the exact planner: O(num_envs + episode
  /// pieces)); allocates only to grow its scratch.
  virtual bool prepare(std::span<const EnvView> views, std::size_t length, double power,
                       const PlanOptions& options) = 0;

  /// Draws one row from the prepared snapshot, consuming the engine as the algorithm specifies (a seed gives the
  /// same rows on every machine). nullopt only from a planner that found, mid-call, that this snapshot has nothing
  /// to draw from (the rejection planner's exact fallback, when a write in progress hid every start): the caller
  /// takes a fresh snapshot. O(log(num_envs * length)) for the closed forms; expected O(L^power / mean weight)
  /// proposals for rejection.
  virtual std::optional<Draw> draw(Rng& rng) = 0;

  /// A hint before a run of draws: at most the next `rows` draws come from this snapshot (fewer when a draw finds
  /// nothing or the caller stops early; more when the sample caps refuse some). A planner may draw that many ahead
  /// together (the priority planner interleaves their tree descents) and drop what is not asked for; the default
  /// ignores it. Called by draw_round before each chunk.
  virtual void expect_draws(std::size_t rows) noexcept { (void)rows; }

  /// The total weight of the starts of the last prepare's snapshot (one that returned true), in the weights' own
  /// units: the sum of min(r, L)^power (cross, stop), of 1 (within), of priority^alpha (prioritized), of
  /// min(r, L)^power 2^(-age / half_life) (recency) over every
  /// start a draw could return, so that a draw returns a start with probability weight / total_weight(). What
  /// Sampler::total_weight returns; samplers of several buffers split a batch by it (shmreplay.ray). O(1), except
  /// the rejection planner's, which enumerates the snapshot with its exact method (O(num_envs + episode pieces)).
  /// Overflows to infinity only where L^power does.
  virtual double total_weight() = 0;

  /// After a prepare that returned false: what the planner can tell of why. `scan`: it may look at the weight of
  /// every start of the views (O(starts)); otherwise only at what prepare computed (O(1)). The priority planner,
  /// whose weights are stored in the segment, tells all_zero and not_finite (then total_weight() is the snapshot's
  /// total); a planner whose weights are computed from the views returns the default, unknown.
  virtual Shortfall shortfall(bool scan) const noexcept {
    (void)scan;
    return Shortfall::unknown;
  }

  /// The weight of start `start` of env `env` in the last prepare's snapshot, in total_weight()'s units (0 outside
  /// its view), so that a draw returns it with probability weight_of / total_weight(): what a mixture's own importance
  /// weights need of each selector (SampleOptions::mixture_importance). NaN from a planner that cannot tell (the
  /// period and episode planners, which a mixture with mixture_importance does not use). O(1).
  virtual double weight_of(std::size_t env, uint64_t start) const noexcept {
    (void)env;
    (void)start;
    return std::numeric_limits<double>::quiet_NaN();
  }

  /// What can leave a snapshot with no start to draw from, in words, for the Sampler's error after
  /// SamplerOptions::max_retry_rounds such snapshots in a row.
  virtual const char* no_start_causes() const noexcept { return "a write in progress hid every start"; }
};

/// The top 53 bits of one engine output, and those bits as a double in [0, 1) (exact: the same on every platform).
/// uniform01 is the two together; EnvPicker takes the bits, to index its guide table with them.
inline uint64_t draw_bits53(Rng& rng) noexcept { return rng() >> 11; }
inline double unit_of_bits53(uint64_t bits) noexcept { return static_cast<double>(bits) * 0x1.0p-53; }
inline double uniform01(Rng& rng) noexcept { return unit_of_bits53(draw_bits53(rng)); }

/// An integer in [0, n) from one engine output (the high half of a 64 x 64-bit product; bias below n / 2^64).
inline uint64_t uniform_below(Rng& rng, uint64_t n) noexcept {
  __extension__ using U128 = unsigned __int128;
  return static_cast<uint64_t>((static_cast<U128>(rng()) * n) >> 64);
}

/// The first point >= x of the grid anchor, anchor + period, ... (x >= anchor).
inline uint64_t grid_ceil(uint64_t anchor, uint64_t period, uint64_t x) noexcept {
  return anchor + (x - anchor + period - 1) / period * period;
}

/// Grid points p with p + length <= hi, from `first` on (the starts that have `length` steps left): their count.
inline uint64_t full_starts(uint64_t first, uint64_t hi, uint64_t length, uint64_t period) noexcept {
  // hi - first, not first + length: a hostile segment's head can lie at the top of the 64-bit range.
  return hi >= first && hi - first >= length ? (hi - first - length) / period + 1 : 0;
}

}  // namespace shmreplay::detail
