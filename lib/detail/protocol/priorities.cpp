// detail/protocol/priorities.cpp: the per-env priority sum trees; see priorities.hpp and docs/design/priorities.md,
// "Priorities". Every tree word is accessed seq_cst: the convergence argument of the recompute-and-verify walk
// is about one total order of all those accesses.
#include "detail/protocol/priorities.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace shmreplay::detail {
namespace {

constexpr uint64_t kWeightMask = 0xffffffffull;

double node_value(const PriorityTreeView& t, uint64_t n, uint64_t word) noexcept {
  return n >= t.leaves ? leaf_weight(word) : std::bit_cast<double>(word);
}

double value(const PriorityTreeView& t, uint64_t n) noexcept {
  return node_value(t, n, t.words[n].load(std::memory_order_seq_cst));
}

// The sum of the leaves of slots [0, x), x <= leaves: a root-to-leaf path, adding each left sibling passed.
double prefix(const PriorityTreeView& t, uint64_t x) noexcept {
  if (x >= t.leaves) return value(t, 1);
  double sum = 0;
  uint64_t n = 1;
  uint64_t lo = 0;
  for (uint64_t span = t.leaves; n < t.leaves; span /= 2) {
    const uint64_t half = span / 2;
    if (x >= lo + half) {
      sum += value(t, 2 * n);
      n = 2 * n + 1;
      lo += half;
    } else {
      n = 2 * n;
    }
  }
  return sum;
}

// The slot where the running sum from slot 0 first exceeds `target`: one root-to-leaf descent.
uint64_t descend(const PriorityTreeView& t, double target) noexcept {
  uint64_t n = 1;
  while (n < t.leaves) {
    const double left = value(t, 2 * n);
    if (target < left) {
      n = 2 * n;
    } else {
      target -= left;
      n = 2 * n + 1;
    }
  }
  return n - t.leaves;
}

}  // namespace

bool priority_fits(double priority, double alpha) noexcept {
  if (!(priority >= 0 && priority <= kMaxWeight)) return false;  // NaN, negative, infinite, or past f32
  return alpha <= 1 || priority <= 1 || std::pow(priority, alpha) <= kMaxWeight;  // else p^alpha <= max(p, 1)
}

std::string priority_misfit(double priority, double alpha) {
  if (!(priority >= 0) || std::isinf(priority)) return "is not a finite number >= 0";
  if (priority > kMaxWeight) {
    return fmt::format("is past {}, the largest priority (priorities are float32)", static_cast<float>(kMaxWeight));
  }
  return fmt::format("has the sampling weight priority^alpha = {:.3g} (alpha {}), past {}, the largest that the "
                     "priority trees hold (float32): with this alpha, priorities up to about {:.3g} fit",
                     std::pow(priority, alpha), alpha, static_cast<float>(kMaxWeight),
                     std::pow(kMaxWeight, 1.0 / alpha));
}

double priority_weight(double priority, double alpha) noexcept {
  if (alpha == 0) return 1.0;
  const double w = std::pow(priority, alpha);
  if (!(w <= kMaxWeight)) return kMaxWeight;  // (a damaged running maximum; priority_fits refused the rest)
  return priority > 0 && w < kMinWeight ? kMinWeight : w;
}

uint64_t make_leaf(uint64_t step, double weight) noexcept {
  const auto w = static_cast<float>(weight);
  return (step << 32) | std::bit_cast<uint32_t>(w);
}

// -- the walk: both parties --------------------------------------------------------------------------------------

void walk(const PriorityTree& t, uint64_t slot) noexcept {
  for (uint64_t n = (t.leaves + slot) / 2; n >= 1; n /= 2) {
    for (;;) {
      const uint64_t l = t.words[2 * n].load(std::memory_order_seq_cst);
      const uint64_t r = t.words[2 * n + 1].load(std::memory_order_seq_cst);
      const double sum = node_value(t, 2 * n, l) + node_value(t, 2 * n + 1, r);
      t.words[n].store(std::bit_cast<uint64_t>(sum), std::memory_order_seq_cst);
      // Verify: a child that changed since we read it has a party that will (or did) walk through here after
      // changing it; but if that party's store to this node came before ours, ours would hide its change.
      if (t.words[2 * n].load(std::memory_order_seq_cst) == l &&
          t.words[2 * n + 1].load(std::memory_order_seq_cst) == r) {
        break;
      }
    }
  }
}

// -- writer half ---------------------------------------------------------------------------------------------------

void set_new_priority(const PriorityTree& t, uint64_t step, double weight) noexcept {
  const uint64_t slot = step % t.capacity;
  t.words[t.leaves + slot].store(make_leaf(step, weight), std::memory_order_seq_cst);  // read by update_priority's CAS
  walk(t, slot);
}

// -- learner half --------------------------------------------------------------------------------------------------

bool update_priority(const PriorityTree& t, const layout::EnvControl& env, uint64_t env_index, uint64_t step,
                     double weight, std::atomic<uint64_t>& walk_word) noexcept {
  const uint64_t slot = step % t.capacity;
  std::atomic<uint64_t>& leaf = t.words[t.leaves + slot];
  uint64_t cur = leaf.load(std::memory_order_seq_cst);
  if ((cur >> 32) != (step & kWeightMask)) return false;  // the slot holds another step
  // acquire: pairs with the writer's claim (claim_step); a claim past step + capacity means the slot is being
  // rewritten, and its new leaf may not be stored yet.
  const uint64_t claimed = env.claimed.load(std::memory_order_acquire) & layout::kClaimMask;
  if (claimed > step + t.capacity) return false;
  // A step whose stack lost its frames (stacked fields, layout 1.6) is dropped as an overwritten one is.
  if (env.stacks_intact_from.load(std::memory_order_relaxed) > step) return false;
  // Recorded before the leaf changes, so that a learner killed anywhere from here on leaves its walk to redo.
  walk_word.store(((env_index + 1) << 40) | slot, std::memory_order_seq_cst);  // read by finish_dead_walk
  // The CAS pairs with the writer's store in set_new_priority: if the writer got there first, the tag differs and
  // the update is dropped. Another learner's update of the same step (layout 1.7) keeps the tag: ours comes later
  // in the leaf's modification order, so it is tried again from that value and wins.
  bool applied = false;
  while (!(applied = leaf.compare_exchange_strong(cur, make_leaf(step, weight), std::memory_order_seq_cst))) {
    if ((cur >> 32) != (step & kWeightMask)) break;  // a writer's new step: dropped
  }
  if (applied) walk(t, slot);
  walk_word.store(0, std::memory_order_seq_cst);
  return applied;
}

Take take_priority(const PriorityTree& t, const layout::EnvControl& env, uint64_t env_index, uint64_t step,
                   double& old, std::atomic<uint64_t>& walk_word) noexcept {
  const uint64_t slot = step % t.capacity;
  std::atomic<uint64_t>& leaf = t.words[t.leaves + slot];
  uint64_t cur = leaf.load(std::memory_order_seq_cst);
  if ((cur >> 32) != (step & kWeightMask)) return Take::gone;
  // acquire: pairs with the writer's claim (claim_step), as in update_priority.
  const uint64_t claimed = env.claimed.load(std::memory_order_acquire) & layout::kClaimMask;
  if (claimed > step + t.capacity) return Take::gone;
  walk_word.store(((env_index + 1) << 40) | slot, std::memory_order_seq_cst);  // read by finish_dead_walk
  // The CAS from a positive weight tagged with the step: one modification order per leaf, so of two learners that
  // both loaded the positive weight, the second's CAS fails and reloads 0 (zero), and a writer's new leaf (another
  // tag) fails it too (gone).
  Take result = Take::zero;
  for (;;) {
    if ((cur >> 32) != (step & kWeightMask)) {
      result = Take::gone;
      break;
    }
    if (!(leaf_weight(cur) > 0)) break;
    if (leaf.compare_exchange_strong(cur, make_leaf(step, 0.0), std::memory_order_seq_cst)) {
      old = leaf_weight(cur);
      result = Take::taken;
      walk(t, slot);
      break;
    }
  }
  walk_word.store(0, std::memory_order_seq_cst);
  return result;
}

void untake_priority(const PriorityTree& t, uint64_t env_index, uint64_t step, double weight,
                     std::atomic<uint64_t>& walk_word) noexcept {
  const uint64_t slot = step % t.capacity;
  std::atomic<uint64_t>& leaf = t.words[t.leaves + slot];
  uint64_t expected = make_leaf(step, 0.0);
  walk_word.store(((env_index + 1) << 40) | slot, std::memory_order_seq_cst);
  if (leaf.compare_exchange_strong(expected, make_leaf(step, weight), std::memory_order_seq_cst)) walk(t, slot);
  walk_word.store(0, std::memory_order_seq_cst);
}

void raise_max_priority(std::atomic<uint64_t>& max_word, double priority) noexcept {
  uint64_t cur = max_word.load(std::memory_order_relaxed);
  while (priority > max_priority(max_word) &&
         !max_word.compare_exchange_weak(cur, std::bit_cast<uint64_t>(priority), std::memory_order_relaxed)) {
  }
}

double max_priority(const std::atomic<uint64_t>& max_word) noexcept {
  const uint64_t w = max_word.load(std::memory_order_relaxed);
  return w == 0 ? 1.0 : std::bit_cast<double>(w);
}

// -- readers -------------------------------------------------------------------------------------------------------

double step_weight(const PriorityTreeView& t, const layout::EnvControl& env, uint64_t step) noexcept {
  const uint64_t word = t.words[t.leaves + step % t.capacity].load(std::memory_order_seq_cst);
  if ((word >> 32) != (step & kWeightMask)) return -1;  // the slot holds another step
  // acquire: pairs with the writer's claim (claim_step), as in update_priority: a claim past step + capacity means
  // the slot is being rewritten, and its new leaf may not be stored yet.
  const uint64_t claimed = env.claimed.load(std::memory_order_acquire) & layout::kClaimMask;
  // A step whose stack lost its frames (stacked fields, layout 1.6) can no longer be sampled either.
  const bool lost = env.stacks_intact_from.load(std::memory_order_relaxed) > step;
  return claimed > step + t.capacity || lost ? -1 : leaf_weight(word);
}

// A range of steps is one run of slots, or two when it wraps the ring. The sum of all slots is the root: leaves past
// the capacity are 0.
RangeSums range_sums(const PriorityTreeView& t, uint64_t lo, uint64_t hi) noexcept {
  if (hi <= lo) return {};
  if (hi - lo >= t.capacity) return {value(t, 1), 0, 0};  // the whole ring
  const uint64_t a = lo % t.capacity;
  const uint64_t b = a + (hi - lo);
  const double before = prefix(t, a);
  if (b <= t.capacity) return {std::max(prefix(t, b) - before, 0.0), before, 0};
  const double root = value(t, 1);
  return {std::max(root - before + prefix(t, b - t.capacity), 0.0), before, root};
}

double range_weight(const PriorityTreeView& t, uint64_t lo, uint64_t hi) noexcept {
  return range_sums(t, lo, hi).total;
}

Descent plan_descent(const PriorityTreeView& t, uint64_t lo, uint64_t hi, double u) noexcept {
  const uint64_t cap = t.capacity;
  const uint64_t a = lo % cap;
  if (hi - lo >= cap) return plan_descent(RangeSums{}, a, hi - lo, cap, u);
  const bool wraps = a + (hi - lo) > cap;
  return plan_descent(RangeSums{0, prefix(t, a), wraps ? value(t, 1) : 0}, a, hi - lo, cap, u);
}

uint64_t find_step(const PriorityTreeView& t, uint64_t lo, uint64_t hi, double u) noexcept {
  const Descent d = plan_descent(t, lo, hi, u);
  return d.step_of(lo, t.capacity, descend(t, d.target));
}

void descend_group(std::span<const std::atomic<uint64_t>* const> words, uint64_t leaves, std::span<double> targets,
                   std::span<uint64_t> slots) noexcept {
  const std::size_t n = std::min(words.size(), kDescentGroup);
  uint64_t nodes[kDescentGroup];
  for (std::size_t i = 0; i < n; ++i) nodes[i] = 1;
  // Level by level: `level` is the first node of the level the descents stand on. Children below the last internal
  // level are leaves (an f32 weight in the low half), above it f64 sums.
  for (uint64_t level = 1; level < leaves; level *= 2) {
    const bool leaf_children = 2 * level >= leaves;
    for (std::size_t i = 0; i < n; ++i) {
      const uint64_t left_child = 2 * nodes[i];
      const uint64_t word = words[i][left_child].load(std::memory_order_seq_cst);
      const double left = leaf_children ? leaf_weight(word) : std::bit_cast<double>(word);
      // Right unless the target is below the left sum (as descend: NaN goes right), then minus the left sum. A mask,
      // not a branch: the direction is a coin toss, which a branch would mispredict half the time. t - 0.0 == t:
      // the same bits as descend's.
      const uint64_t right = targets[i] < left ? 0 : 1;
      targets[i] -= std::bit_cast<double>(std::bit_cast<uint64_t>(left) & (0 - right));
      nodes[i] = left_child + right;
      if (!leaf_children) __builtin_prefetch(&words[i][2 * nodes[i]]);  // both children: one 16-byte pair
    }
  }
  for (std::size_t i = 0; i < n; ++i) slots[i] = nodes[i] - leaves;
}

void rebuild(const PriorityTree& t) noexcept {
  for (uint64_t n = t.leaves - 1; n >= 1; --n) {
    const double sum = value(t, 2 * n) + value(t, 2 * n + 1);
    t.words[n].store(std::bit_cast<uint64_t>(sum), std::memory_order_seq_cst);
  }
}

}  // namespace shmreplay::detail
