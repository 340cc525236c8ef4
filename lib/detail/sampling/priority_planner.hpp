// detail/sampling/priority_planner.hpp: the planner of prioritized sampling. A start p of an env's view [lo, hi)
// has the weight its writer or the learner last gave it, priority^alpha, held in the env's sum tree
// (detail/protocol/priorities.hpp); the length of the row does not enter the weight (R2D2 keeps one priority per
// sequence, stored at its start). See planner.hpp for the interface, who calls it and what is safe.
//
// prepare: one range sum per env (O(num_envs log capacity)). draw: an env by its share of the total (binary search
// over the envs' running totals), then a descent of that env's tree (O(log capacity)). Told how many rows come
// (expect_draws, by the Sampler before each chunk), it draws up to kDescentGroup of them at once: their uniforms and
// envs in the engine's order, then their descents together (descend_group: level by level, prefetched, no branch
// on the sums), so that their cache misses overlap; the same rows as one draw at a time, unless a leaf reads 0
// (then that row's redraw comes after the group's uniforms). A draw whose leaf reads 0
// (its sums moved under the descent, or rounding at a range's edge) is redrawn, up to kMaxTries times; then draw
// returns nullopt and the Sampler retakes its snapshot. prepare finds nothing to draw when the views hold no
// step, or weigh 0 in all (every stored step has priority 0), or, in a damaged segment only, weigh something that
// is not finite (every weight that enters a tree is checked: priority_fits): shortfall tells these apart for
// the Sampler's error. With episodes = stop the row ends at its episode's last step
// (a binary search over at most L steps of EpisodeStarts), as in unprioritized stop sampling.
//
// With fresh-step trees (initial priority +infinity; docs/design/priorities.md, "Initial priorities"), prepare
// first sums each env's fresh tree over its view: while any step of the snapshot is fresh (no prioritized draw has
// returned it), every draw of the snapshot is uniform over the fresh steps (the same descent, in the fresh trees),
// and only a snapshot without one draws by priority. drawing_fresh() tells the Sampler which, so that it takes each
// returned fresh step's leaf (sampler_zero.hpp).
//
// With sequence priorities (layout 1.11) and a call of their length L, a start q weighs eta M[q] + (1 - eta) A[q]
// (its window's max and mean step weight: sequence_priorities.hpp): prepare sums each env's two window trees over its
// view, and a draw picks the env, then the max tree with probability eta M_env / (its total), else the mean tree,
// and descends it: one descent, exact for any eta.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "detail/protocol/priorities.hpp"
#include "detail/protocol/sequence_priorities.hpp"
#include "detail/sampling/planner.hpp"

namespace shmreplay::detail {

/// Where each env's tree is: the Sampler implements it over the segment, a test over private memory.
class PriorityTrees {
 public:
  virtual ~PriorityTrees() = default;
  virtual PriorityTreeView tree(std::size_t env) const noexcept = 0;
  /// Whether each env has a fresh-step tree (initial priority +infinity, layout 1.11), and env's.
  virtual bool has_fresh() const noexcept { return false; }
  virtual PriorityTreeView fresh(std::size_t /*env*/) const noexcept { return {}; }
  /// L of sequence priorities (layout 1.11), 0 without, and env's trees.
  virtual uint64_t sequence_length() const noexcept { return 0; }
  virtual SequenceTreesView windows(std::size_t /*env*/) const noexcept { return {}; }
};

class PriorityPlanner final : public Planner {
 public:
  static constexpr uint32_t kMaxTries = 64;

  /// `trees` and `starts` must outlive the planner.
  PriorityPlanner(const PriorityTrees& trees, const EpisodeStarts& starts) noexcept : trees_(&trees), starts_(&starts) {}
  explicit PriorityPlanner(const PlannerInputs& in) noexcept : PriorityPlanner(in.trees, in.starts) {}
  /// Precondition: options.period == 1 and options.episodes is cross or stop. `power` is not used (the Sampler
  /// refuses any but 0). False also when the total is not finite (a damaged tree).
  bool prepare(std::span<const EnvView> views, std::size_t length, double power, const PlanOptions& options) override;
  /// Draws up to kDescentGroup rows ahead at a time, while expect_draws says more are coming (draw_group); else one.
  std::optional<Draw> draw(Rng& rng) override;
  /// The next `rows` draws come from this snapshot: they are drawn kDescentGroup at a time, their descents
  /// interleaved. Draws made ahead and not taken by the next expect_draws or prepare are dropped (independent draws
  /// of one snapshot: dropping some changes no other's distribution).
  void expect_draws(std::size_t rows) noexcept override {
    ahead_ = rows;
    next_ = drawn_count_ = 0;
  }
  /// The last prepare's total, also when it returned false (0, or not finite in a damaged segment); while fresh
  /// steps are drawn, their number.
  double total_weight() override { return total_; }
  /// The start's leaf in the tree(s) the snapshot's draws use: its fresh leaf, its window leaves mixed by eta, or its
  /// priority leaf; 0 outside the view.
  double weight_of(std::size_t env, uint64_t start) const noexcept override;
  /// Whether the last prepare's snapshot held fresh steps, so that its draws are of those.
  bool drawing_fresh() const noexcept { return fresh_; }

  /// Why the last prepare or draw found nothing. Without `scan`: not_finite when the total is not finite, else
  /// unknown. With it, what the leaves of the views hold: no step at all (no_start: a write in progress, or an
  /// empty view), a leaf or the total that is not a finite number >= 0 (not_finite: a damaged segment), only
  /// weights of 0 (all_zero), or some positive weight (positive: the sums moved under the draws; a fresh snapshot
  /// may do). O(steps in the views) with `scan`: only on that error path.
  Shortfall shortfall(bool scan) const noexcept override;
  const char* no_start_causes() const noexcept override {
    return "a write in progress hid every start, or the view's priority sums read 0 beside weights over 2^53 times "
           "larger";
  }

 private:
  uint64_t steps_in_episode(std::size_t env, uint64_t start, uint64_t end) const noexcept;
  // The tree the snapshot's draws descend: env's fresh tree while drawing fresh steps, else its priority tree.
  PriorityTreeView drawn_tree(std::size_t env) const noexcept { return fresh_ ? trees_->fresh(env) : trees_->tree(env); }
  bool sum_views(bool fresh);
  bool sum_windows();
  // One draw (kMaxTries tries), and a group of `rows` draws into pending_ (a row whose leaf reads 0 redrawn alone).
  std::optional<Draw> draw_one(Rng& rng);
  void draw_group(Rng& rng, std::size_t rows);
  // The env whose running total first passes u (cumulative_'s upper bound, without a branch on the totals); the
  // number of envs when u is not below the total.
  std::size_t env_at(double u) const noexcept;
  // Where a draw of `u` (in [0, total_)) goes: its env (or none), the tree it descends and the descent.
  struct Aim {
    std::size_t env = 0;
    bool max_tree = false;  // sequence priorities: the window max tree, else the mean tree
    Descent descent;
  };
  bool aim(double u, Aim& out) const noexcept;
  PriorityTreeView aimed_tree(const Aim& a) const noexcept;
  // The weight of env's slot in the snapshot's draws (weight_of without the view check), and a draw.
  double weight_at(std::size_t env, uint64_t slot) const noexcept;
  Draw make_draw(std::size_t env, uint64_t start, double weight) const noexcept;

  const PriorityTrees* trees_;
  const EpisodeStarts* starts_;
  std::span<const EnvView> views_;
  uint64_t length_ = 0;
  PlanOptions options_;
  std::vector<double> cumulative_;  // cumulative_[e] = total weight of envs 0..e
  double total_ = 0;
  uint64_t starts_in_view_ = 0;     // N: steps in the views, all envs
  bool fresh_ = false;              // the draws are of fresh steps (drawn_tree)
  bool windows_ = false;            // the draws are by sequence priority (sum_windows)
  double eta_ = 0.9;
  std::vector<double> max_part_;    // per env, eta * (its view's window max total)
  // Per env, the trees the snapshot's draws descend (prepare: no virtual call per draw): drawn_tree, or with
  // sequence priorities the window max and mean trees.
  std::vector<PriorityTreeView> drawn_;
  std::vector<uint64_t> lo_slot_;   // per env, its view's lo % capacity
  // Per env, what the draws' descents start from (prepare reads them with the totals): the sums of its view in the
  // drawn tree (with sequence priorities, the mean tree), and in the window max tree.
  std::vector<RangeSums> sums_, max_sums_;
  std::vector<SequenceTreesView> windows_of_;
  // Draws made ahead (draw_group): pending_[next_, drawn_) are still to hand out; nullopt where a row found nothing.
  std::optional<Draw> pending_[kDescentGroup];
  std::size_t next_ = 0, drawn_count_ = 0;
  std::size_t ahead_ = 0;           // expect_draws' rows not yet drawn
};

}  // namespace shmreplay::detail
