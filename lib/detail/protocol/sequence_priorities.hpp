// detail/protocol/sequence_priorities.hpp: sequence priorities (layout 1.11, CreateOptions::sequence_priority_length;
// docs/design/priorities.md, "Sequence priorities"): for each stored start q of an env, two window leaves over the
// per-step weights w (the leaves of the env's priority tree) of the sequence's steps [q, q + L), cut at the newest
// stored step: M[q] = max w and A[q] = mean w. Each kind is a sum tree like the priority tree (same words, same walk:
// priorities.hpp), so that a prioritized draw of start q with weight eta M[q] + (1 - eta) A[q] is one descent of
// one of the two trees, for any eta a call gives.
//
// Who calls it: every party that changes a step leaf refreshes the windows that contain it, after the change: the
// writer for each step it publishes (before its head store), the learner after update_priorities; takeovers of a
// dead writer or learner refresh what the dead one may have left stale. Readers: the priority planner (draws),
// total_weight.
//
// The protocol. A window leaf is tagged with its start q (as a step leaf with its step). refresh reads the step
// leaves of the windows it recomputes, stores each window leaf (a CAS from the value it loaded, tagged q; a slot that
// holds another start is left alone, except by the writer that publishes q, which stores it), then reads the same
// step leaves again: if any changed, it recomputes. So the last store to a window leaf was made by a party that then
// found its inputs unchanged, and every party that changes an input refreshes the window after its change: once
// all parties are done each window leaf equals its definition (the argument of priorities.hpp's walk, with the
// window's step leaves as the node's children). Then it walks the stored window leaves' ancestors in both trees
// (walk_range). Every word is accessed seq_cst.
#pragma once

#include <atomic>
#include <cstdint>

#include "detail/protocol/priorities.hpp"

namespace shmreplay::detail {

/// One env's priority tree and its two window trees, and the sequence length L.
struct SequenceTrees {
  PriorityTree steps;  ///< the per-step weights (the priority tree)
  PriorityTree max;    ///< M[q]: the largest step weight of start q's window
  PriorityTree mean;   ///< A[q]: the mean step weight of start q's window
  uint64_t length = 0;
};
/// The same, read-only.
struct SequenceTreesView {
  PriorityTreeView steps;
  PriorityTreeView max;
  PriorityTreeView mean;
  uint64_t length = 0;
};

/// Env `env`'s trees in `seg`. Precondition: seg.sequence_priority_length() > 0.
SequenceTrees sequence_trees_of(Segment& seg, uint64_t env) noexcept;
SequenceTreesView sequence_trees_of(const Segment& seg, uint64_t env) noexcept;

/// Recomputes the windows that contain any of steps [first, last] (the starts [first - L + 1, last] whose step is
/// stored) and walks their leaves in both window trees. `newest`: the writer's step being published (its window
/// leaf is stored whatever start its slot held), or ~0 for none. O(last - first + L) loads and stores, plus the
/// walks (O(last - first + L + log capacity) nodes per tree). Precondition: last - first < capacity.
void refresh_windows(const SequenceTrees& trees, uint64_t first, uint64_t last, uint64_t newest) noexcept;

/// Refreshes every window of env's stored steps [lo, hi): a takeover of a learner that may have died inside a
/// refresh, O(capacity). Safe while other parties refresh (the same protocol).
void refresh_all_windows(const SequenceTrees& trees, uint64_t lo, uint64_t hi) noexcept;

/// Recomputes every node of `tree` above leaves [lo_slot, hi_slot) (hi_slot <= capacity), each from its two
/// children with the walk's recompute-and-verify: the walks of those leaves, sharing their common ancestors.
void walk_range(const PriorityTree& tree, uint64_t lo_slot, uint64_t hi_slot) noexcept;

/// The max and mean of start q's window from the step leaves (the definition the window leaves converge to); false
/// when step q is not stored (its leaf holds another step).
bool window_of(const PriorityTreeView& steps, uint64_t length, uint64_t q, double& max, double& mean) noexcept;

}  // namespace shmreplay::detail
