// detail/sampling/episode_planners.hpp: the planners of Episodes::stop and Episodes::within, which read episode
// boundaries through EpisodeStarts. A grid point p of a view [lo, hi) (grid lo, lo + P, ...) has r steps left:
// up to the end of p's episode or the head. stop weighs it min(r, L)^power; within weighs it 1 when r >= L and 0
// otherwise. See planner.hpp for the interface, who calls it and what is safe; docs/design/sampling.md, "Episodes,
// period and minimum size", for the algorithms and their cost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "detail/sampling/planner.hpp"
#include "detail/sampling/tail_table.hpp"

namespace shmreplay::detail {

/// The exact method: walks each view from its newest step down, one episode_start() per episode piece, and gives
/// each piece its exact total weight (full starts 1 each; for stop the tail's S[r] from TailTable, scaled by the
/// longest remaining length found). prepare: O(num_envs + pieces), growing its piece table on first use; draw: one
/// engine output and binary searches. Counts exact_fallbacks, segments_enumerated and meta_loads in `stats`.
class ExactPlanner final : public Planner {
 public:
  /// `stats` and `starts` must outlive the planner.
  ExactPlanner(SamplerStats& stats, const EpisodeStarts& starts) noexcept : stats_(&stats), starts_(&starts) {}
  /// Precondition: options.episodes is stop or within.
  bool prepare(std::span<const EnvView> views, std::size_t length, double power, const PlanOptions& options) override;
  std::optional<Draw> draw(Rng& rng) override;
  double total_weight() override;

 private:
  // One piece of an episode inside an env's view: starts on the grid from first_grid up to end (exclusive);
  // `full` of them have L steps left in the episode; `cumulative` totals the weights of pieces so far.
  struct Piece {
    uint64_t env;
    uint64_t first_grid;
    uint64_t end;
    uint64_t full;
    double cumulative;
  };
  SamplerStats* stats_;
  const EpisodeStarts* starts_;
  uint64_t length_ = 0;
  PlanOptions options_;
  double power_ = 0.0;
  uint64_t scale_ = 1;  // r_max: stop's weights in pieces_ are (r / r_max)^power (within's are 1)
  std::vector<Piece> pieces_;
  TailTable tail_;
};

/// Rejection sampling: propose a grid point uniformly over all envs (uniform_below, then a binary search over
/// envs; within proposes only points with L steps before the head), place it in its episode (one
/// episode_start() of its last possible step; stop: a binary search for the episode's end, at most log2 L more),
/// and accept with probability (steps / L)^power, which is exact because every weight is at most L^power (within
/// and power 0 always accept). A row refused kMaxTries times switches the rest of the call to ExactPlanner (until
/// begin_call), whose prepare then runs on every later snapshot of the call. prepare: O(num_envs). Counts rows,
/// tries and meta_loads in `stats`.
class RejectionPlanner final : public Planner {
 public:
  /// Proposals for one row before the call switches to the exact method.
  static constexpr uint32_t kMaxTries = 64;

  /// `stats` and `starts` must outlive the planner.
  RejectionPlanner(SamplerStats& stats, const EpisodeStarts& starts) noexcept
      : stats_(&stats), starts_(&starts), exact_(stats, starts) {}
  explicit RejectionPlanner(const PlannerInputs& in) noexcept : RejectionPlanner(in.stats, in.starts) {}
  void begin_call() noexcept override { use_exact_ = false; }
  /// Precondition: options.episodes is stop or within.
  bool prepare(std::span<const EnvView> views, std::size_t length, double power, const PlanOptions& options) override;
  /// nullopt when the call has switched to the exact method and this snapshot has no start with a positive weight.
  std::optional<Draw> draw(Rng& rng) override;
  /// Enumerates the prepared snapshot with the exact method (counted in stats like a fallback); the call's draws
  /// go on as before.
  double total_weight() override;
  /// Whether this call has switched to the exact method.
  bool exact() const noexcept { return use_exact_; }

 private:
  std::optional<Draw> propose(Rng& rng) noexcept;

  SamplerStats* stats_;
  const EpisodeStarts* starts_;
  std::span<const EnvView> views_;
  uint64_t length_ = 0;
  double power_ = 0.0;
  PlanOptions options_;
  std::vector<uint64_t> grid_cumulative_;  // grid_cumulative_[e] = proposal grid points of envs 0..e
  ExactPlanner exact_;
  bool use_exact_ = false;
};

}  // namespace shmreplay::detail
