// detail/protocol/priorities.hpp: the per-env priority sum trees (layout 1.3), both halves of their protocol.
//
// Who calls it: the Writer (set_new_priority for each step it publishes, repair_walks when it takes an env over),
// the Sampler (update_priority for the learner's updates; the reads, through the priority planner), the Inspector
// and the CLI (totals, read-only), checkpoint load (rebuild). docs/design/priorities.md, "Priorities", has the
// argument.
//
// One tree per env over its ring slots: `leaves` = bit_ceil(capacity) leaf words at [leaves, 2 leaves), internal
// sums at [1, leaves) (word 0 unused), node n's children at 2n and 2n + 1. A leaf word holds the slot's sampling
// weight priority^alpha as f32 bits (low half) and the low 32 bits of the step it belongs to (high half), so that
// the learner's update of a step that a writer has since overwritten fails its compare-and-swap. Internal words
// hold f64 bits of the sum of their children; leaves past the capacity stay 0.
//
// Two parties write one env's tree: its writer (a new step's leaf) and the learner (an update of a stored step's
// leaf); neither waits for the other. After writing a leaf, each walks to the root and at each node recomputes the
// sum from both children, stores it, and reads the children again: if either changed, it recomputes. The last
// store to a node was made by a party that then saw the children unchanged, so once both parties are done every
// node equals the sum of its children (the design doc's proof), however their walks interleaved. Every word is
// accessed seq_cst, which that argument assumes. A party killed mid-walk leaves some nodes stale: a writer taking
// the env over redoes the walk of the slot its predecessor was writing, and a learner taking over the learner
// lease redoes the walk recorded in GlobalControl::priority_walk.
//
// Readers (the sampler's draws, the Inspector) read sums while they change: a draw is then only approximately
// proportional to the weights (exactly, once writes stop), and is clamped to the view; the data it leads to is
// validated by the step seqlock like any other row.
//
// Thread safety: the writer half from the env's lease holder only, the learner half from the learner only; reads
// from anyone.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// One env's tree in a mapping (or, in tests, in private memory), read-only: 2 * leaves words. What the readers take.
struct PriorityTreeView {
  const std::atomic<uint64_t>* words = nullptr;
  uint64_t leaves = 0;    ///< bit_ceil(capacity)
  uint64_t capacity = 0;  ///< ring slots: the slot of step s is s % capacity
};

/// The same tree, writable: what the writer and learner halves take (and, read-only, the readers).
struct PriorityTree {
  std::atomic<uint64_t>* words = nullptr;
  uint64_t leaves = 0;    ///< bit_ceil(capacity)
  uint64_t capacity = 0;  ///< ring slots: the slot of step s is s % capacity
  operator PriorityTreeView() const noexcept { return {words, leaves, capacity}; }
};

/// Env `env`'s tree in `seg`, writable (a writable mapping). Precondition: seg.has_priorities() and
/// env < seg.num_envs().
inline PriorityTree priority_tree_of(Segment& seg, uint64_t env) noexcept {
  return {seg.priority_tree(env), seg.priority_leaves(), seg.capacity()};
}
/// The same, read-only.
inline PriorityTreeView priority_tree_of(const Segment& seg, uint64_t env) noexcept {
  return {seg.priority_tree(env), seg.priority_leaves(), seg.capacity()};
}
/// Env `env`'s fresh-step tree (layout 1.11: initial priority +infinity), writable: a leaf of weight 1 for a step no
/// prioritized draw has returned yet. The same protocol as the priority tree's (set_new_priority by the writer,
/// take_priority by the learner that returns the step). Precondition: seg.fresh_trees().
inline PriorityTree fresh_tree_of(Segment& seg, uint64_t env) noexcept {
  return {seg.fresh_tree(env), seg.priority_leaves(), seg.capacity()};
}
/// The same, read-only.
inline PriorityTreeView fresh_tree_of(const Segment& seg, uint64_t env) noexcept {
  return {seg.fresh_tree(env), seg.priority_leaves(), seg.capacity()};
}

/// The largest weight a leaf holds (an f32), which is also the largest priority: priorities reach the library
/// as f32 (Writer::push, Sampler::update_priorities), and a larger one would be infinite there.
inline constexpr double kMaxWeight = std::numeric_limits<float>::max();
/// The smallest positive weight a leaf holds: a positive priority whose priority^alpha is smaller gets this one.
inline constexpr double kMinWeight = std::numeric_limits<float>::denorm_min();

/// Whether a step may be given `priority` in a buffer with exponent `alpha`: a number in [0, kMaxWeight] (a finite
/// f32 >= 0) whose weight priority^alpha is at most kMaxWeight. What push, StepSlot::set_priority and
/// update_priorities check, on the value as given, before anything is written. An infinite weight made a tree's
/// total infinite, and every prioritized draw from it failed; a running maximum can only hold priorities that
/// passed. O(1); a pow only for alpha > 1 and priority > 1.
bool priority_fits(double priority, double alpha) noexcept;

/// Why `priority` does not fit (priority_fits false), as the rest of a sentence that starts "priority <value>":
/// "is not a finite number >= 0", or past which bound, with the bound. Cold path (allocates).
std::string priority_misfit(double priority, double alpha);

/// The sampling weight of a priority that fits: priority^alpha (1 for alpha 0, even for priority 0), raised to
/// kMinWeight when the priority is positive and the power underflows the f32 leaf (a positive priority stays
/// drawable). A weight past kMaxWeight, which only a damaged running maximum can give, is lowered to kMaxWeight, so
/// that a leaf never holds a weight that is not finite.
double priority_weight(double priority, double alpha) noexcept;

/// The weight a leaf word holds (its low half), and the leaf word for step `step` with weight `weight`.
inline double leaf_weight(uint64_t word) noexcept {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(word & 0xffffffffull)));
}
uint64_t make_leaf(uint64_t step, double weight) noexcept;

// -- writer half ----------------------------------------------------------------------------------------------

/// Sets the leaf of the slot of `step` (which the caller has claimed and not yet published) to `weight`, tagged
/// with the step, and walks to the root. O(log capacity).
void set_new_priority(const PriorityTree& tree, uint64_t step, double weight) noexcept;

/// Redoes the walk of `slot` (the recompute-and-verify of every node above it): what a party taking over a dead
/// one's role calls for the slot the dead one may have been walking. O(log capacity).
void walk(const PriorityTree& tree, uint64_t slot) noexcept;

// -- learner half ---------------------------------------------------------------------------------------------

/// Sets the weight of stored step `step` to `weight` and walks to the root, unless a writer has overwritten or
/// begun to overwrite the step (claimed, read from `env`, past step + capacity, or the leaf no longer tagged with
/// the step): then nothing is written and it returns false. `walk_word` (GlobalControl::priority_walk) records
/// the walk while it runs, as ((env_index + 1) << 40) | slot.
bool update_priority(const PriorityTree& tree, const layout::EnvControl& env, uint64_t env_index, uint64_t step,
                     double weight, std::atomic<uint64_t>& walk_word) noexcept;

/// What take_priority found at a stored step's leaf.
enum class Take : uint8_t {
  taken,    ///< its positive weight was set to 0 by this call (the weight it had is returned)
  zero,     ///< it weighs 0 already: another learner took it first (zero-on-sample), or it was given priority 0
  gone,     ///< the slot holds, or is being given, another step (overwritten): nothing written
};

/// Zero-on-sample's claim: sets the weight of stored step `step` from a positive value to 0 with one compare-and-swap
/// (so of two learners taking one step at once, exactly one gets `taken`, the other `zero`) and walks to the root.
/// `old` receives the weight replaced. `walk_word` as for update_priority. O(log capacity).
Take take_priority(const PriorityTree& tree, const layout::EnvControl& env, uint64_t env_index, uint64_t step,
                   double& old, std::atomic<uint64_t>& walk_word) noexcept;

/// Gives back a take (a sample call that throws returns no row): sets step `step`'s leaf from 0 back to `weight`,
/// only while it still holds that step at 0 (a later update, or a writer's new step, wins). O(log capacity).
void untake_priority(const PriorityTree& tree, uint64_t env_index, uint64_t step, double weight,
                     std::atomic<uint64_t>& walk_word) noexcept;

/// What a new learner does with a walk its dead predecessor left in `walk_word`: redoes it and clears the word.
/// `redo(env, slot)` walks that slot of env's trees (each of them: the word does not say which tree the walk was
/// in, and a walk of an unchanged tree changes nothing). A word naming an env or slot outside the buffer (a damaged
/// segment) is cleared without a walk.
template <class Redo>
void finish_dead_walk(std::atomic<uint64_t>& walk_word, uint64_t num_envs, uint64_t capacity, Redo&& redo) noexcept {
  const uint64_t w = walk_word.load(std::memory_order_seq_cst);  // pairs with update_priority's store of the word
  if (w == 0) return;
  const uint64_t env = (w >> 40) - 1;
  const uint64_t slot = w & ((1ull << 40) - 1);
  if ((w >> 40) != 0 && env < num_envs && slot < capacity) redo(env, slot);
  walk_word.store(0, std::memory_order_seq_cst);
}

/// Raises GlobalControl::max_priority to `priority` if it is larger (a CAS loop; no write otherwise).
void raise_max_priority(std::atomic<uint64_t>& max_word, double priority) noexcept;
/// GlobalControl::max_priority as a double; 1 before any priority was given.
double max_priority(const std::atomic<uint64_t>& max_word) noexcept;

// -- readers --------------------------------------------------------------------------------------------------

/// The weight of the leaf of the slot of `step` (whatever step it now holds). Inline: a draw reads one per row.
inline double slot_weight(const PriorityTreeView& tree, uint64_t step) noexcept {
  return leaf_weight(tree.words[tree.leaves + step % tree.capacity].load(std::memory_order_seq_cst));
}
/// The same for a slot (slot < capacity): no division.
inline double weight_at_slot(const PriorityTreeView& tree, uint64_t slot) noexcept {
  return leaf_weight(tree.words[tree.leaves + slot].load(std::memory_order_seq_cst));
}

/// The weight of step `step` while its slot's leaf holds it (tagged with the step, and `env` has not claimed the
/// slot for a later step); -1 when the slot holds or is being given another step. O(1).
double step_weight(const PriorityTreeView& tree, const layout::EnvControl& env, uint64_t step) noexcept;

/// The total weight of steps [lo, hi) (hi - lo <= capacity). O(log capacity); never negative.
double range_weight(const PriorityTreeView& tree, uint64_t lo, uint64_t hi) noexcept;

/// The step p in [lo, hi) where the running sum of weights from lo first exceeds `u` (0 <= u < range_weight):
/// a draw proportional to the weights when u is uniform. A range of the whole ring is summed from the ring's slot 0
/// instead (one descent from the root; the same distribution). Clamped to [lo, hi) when sums move underneath.
/// O(log capacity).
uint64_t find_step(const PriorityTreeView& tree, uint64_t lo, uint64_t hi, double u) noexcept;

/// find_step in two halves, for drawing several rows at once (the priority planner): plan_descent says where a draw
/// of `u` over steps [lo, hi) descends (the target of a descent from the root, and the slots its result is clamped
/// to: a partial view reads a prefix sum, O(log capacity); the whole ring, nothing), descend_group descends, and
/// step_of is the step of the slot found. find_step(t, lo, hi, u) == plan_descent(t, lo, hi, u).step_of(lo,
/// t.capacity, the descent of its target).
struct Descent {
  double target = 0;        ///< the running sum from slot 0 that the descent passes
  uint64_t first_slot = 0;  ///< the slot found is clamped to [first_slot, last_slot] (sums moving underneath)
  uint64_t last_slot = 0;
  uint64_t lo_slot = 0;     ///< lo's slot, lo % capacity
  /// A slot the descent found, clamped.
  uint64_t clamp(uint64_t slot) const noexcept {
    return slot < first_slot ? first_slot : slot > last_slot ? last_slot : slot;
  }
  /// The step of the view [lo, ...) in a clamped slot, and in slot `slot` (clamped first).
  uint64_t step_at(uint64_t lo, uint64_t capacity, uint64_t clamped) const noexcept {
    return lo + (clamped >= lo_slot ? clamped - lo_slot : clamped + capacity - lo_slot);
  }
  uint64_t step_of(uint64_t lo, uint64_t capacity, uint64_t slot) const noexcept {
    return step_at(lo, capacity, clamp(slot));
  }
};
Descent plan_descent(const PriorityTreeView& tree, uint64_t lo, uint64_t hi, double u) noexcept;

/// What plan_descent reads of a tree for a view, read once for all the draws of a snapshot (the priority planner's
/// prepare): the view's total, the sum of the slots before its first (`before`), and the root (read for a view that
/// wraps the ring only). For a view of the whole ring, the root only (total).
struct RangeSums {
  double total = 0;
  double before = 0;
  double root = 0;
};
RangeSums range_sums(const PriorityTreeView& tree, uint64_t lo, uint64_t hi) noexcept;

/// plan_descent from sums read before (`lo_slot` = lo % capacity, `steps` = hi - lo > 0): no load. The same descent
/// as plan_descent's while the sums stay as they were read.
inline Descent plan_descent(const RangeSums& sums, uint64_t lo_slot, uint64_t steps, uint64_t capacity,
                            double u) noexcept {
  const uint64_t a = lo_slot;
  const uint64_t b = a + steps;
  if (steps >= capacity) return {u, 0, capacity - 1, a};  // the whole ring: one descent from the root
  if (b <= capacity) return {sums.before + u, a, b - 1, a};
  const double left = sums.root - sums.before;
  const double first = left < 0.0 ? 0.0 : left;  // slots [a, capacity); std::max(left, 0.0), NaN kept
  if (u < first) return {sums.before + u, a, capacity - 1, a};
  return {u - first, 0, b - capacity - 1, a};  // slots [0, b - capacity)
}

/// The most descents descend_group takes at once.
inline constexpr std::size_t kDescentGroup = 64;

/// Several descents at once, in trees of one geometry (`leaves`: one buffer's trees): descent i goes down the tree at
/// words[i] to the slot where the running sum from slot 0 first exceeds targets[i] (find_step's descent) and leaves
/// it in slots[i]. Level by level over the descents, without a branch on the sums, each descent's next node
/// prefetched while the others load theirs: the loads of one level are independent, so their cache misses overlap
/// (one descent's are a chain). The same slots as one descent each, bit for bit. At most kDescentGroup descents;
/// `targets` is consumed. O(n log capacity).
void descend_group(std::span<const std::atomic<uint64_t>* const> words, uint64_t leaves, std::span<double> targets,
                   std::span<uint64_t> slots) noexcept;

/// Recomputes every internal node from the leaves (no party may be walking): checkpoint load, tests. O(leaves).
void rebuild(const PriorityTree& tree) noexcept;

}  // namespace shmreplay::detail
