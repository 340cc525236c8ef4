// detail/protocol/sequence_priorities.cpp: the window trees of sequence priorities; see sequence_priorities.hpp and
// docs/design/priorities.md, "Sequence priorities".
#include "detail/protocol/sequence_priorities.hpp"

#include <algorithm>
#include <bit>

namespace shmreplay::detail {
namespace {

constexpr uint64_t kTagMask = 0xffffffffull;

bool holds(uint64_t word, uint64_t step) noexcept { return (word >> 32) == (step & kTagMask); }

// Recomputes node n from its children, as priorities.cpp's walk does at each level.
void recompute(const PriorityTree& t, uint64_t n) noexcept {
  for (;;) {
    const uint64_t l = t.words[2 * n].load(std::memory_order_seq_cst);
    const uint64_t r = t.words[2 * n + 1].load(std::memory_order_seq_cst);
    const auto value = [&](uint64_t i, uint64_t w) { return i >= t.leaves ? leaf_weight(w) : std::bit_cast<double>(w); };
    t.words[n].store(std::bit_cast<uint64_t>(value(2 * n, l) + value(2 * n + 1, r)), std::memory_order_seq_cst);
    if (t.words[2 * n].load(std::memory_order_seq_cst) == l && t.words[2 * n + 1].load(std::memory_order_seq_cst) == r) {
      return;
    }
  }
}

// Stores window leaf q (slot q % capacity) of `t` as `value`, unless its slot holds another start (then only the
// writer publishing q stores it). Returns whether it stored.
bool store_window(const PriorityTree& t, uint64_t q, double value, bool newest) noexcept {
  std::atomic<uint64_t>& leaf = t.words[t.leaves + q % t.capacity];
  const uint64_t want = make_leaf(q, value);
  if (newest) {
    leaf.store(want, std::memory_order_seq_cst);
    return true;
  }
  uint64_t cur = leaf.load(std::memory_order_seq_cst);
  while (holds(cur, q)) {
    if (leaf.compare_exchange_strong(cur, want, std::memory_order_seq_cst)) return true;
  }
  return false;
}

}  // namespace

SequenceTrees sequence_trees_of(Segment& seg, uint64_t env) noexcept {
  return {priority_tree_of(seg, env),
          {seg.window_tree(0, env), seg.priority_leaves(), seg.capacity()},
          {seg.window_tree(1, env), seg.priority_leaves(), seg.capacity()},
          seg.sequence_priority_length()};
}

SequenceTreesView sequence_trees_of(const Segment& seg, uint64_t env) noexcept {
  return {priority_tree_of(seg, env),
          {seg.window_tree(0, env), seg.priority_leaves(), seg.capacity()},
          {seg.window_tree(1, env), seg.priority_leaves(), seg.capacity()},
          seg.sequence_priority_length()};
}

// The mean is summed from the window's last step back to its first, whoever computes it: a window leaf's value must
// be a function of its inputs alone (the protocol's argument compares it with a recomputation), and the writer's
// refresh sums its windows, which all end at its new step, in that order in one pass (refresh_newest).
bool window_of(const PriorityTreeView& steps, uint64_t length, uint64_t q, double& max, double& mean) noexcept {
  max = 0;
  uint64_t end = q;  // the window is [q, end): the stored steps from q on, at most L, within one lap
  for (; end < q + length && (end == q || end % steps.capacity != q % steps.capacity); ++end) {
    const uint64_t w = steps.words[steps.leaves + end % steps.capacity].load(std::memory_order_seq_cst);
    if (!holds(w, end)) break;  // not stored (yet)
    max = std::max(max, leaf_weight(w));
  }
  double sum = 0;
  for (uint64_t s = end; s > q; --s) {
    sum += leaf_weight(steps.words[steps.leaves + (s - 1) % steps.capacity].load(std::memory_order_seq_cst));
  }
  mean = end == q ? 0.0 : sum / static_cast<double>(end - q);
  return end != q;
}

void walk_range(const PriorityTree& t, uint64_t lo_slot, uint64_t hi_slot) noexcept {
  if (hi_slot <= lo_slot) return;
  uint64_t a = (t.leaves + lo_slot) / 2;
  uint64_t b = (t.leaves + hi_slot - 1) / 2;
  for (; a >= 1; a /= 2, b /= 2) {
    for (uint64_t n = a; n <= b; ++n) recompute(t, n);
    if (a == 1) break;
  }
}

namespace {

// The writer's refresh for its new step h (no later step stored): the windows of starts [h - L + 1, h] all end at
// h + 1 (or at the first step not stored), so one pass from h back computes every one, in window_of's order, O(L).
// `store`: store each window leaf (else compare it); returns whether every stored window leaf held its value.
bool pass_newest(const SequenceTrees& t, uint64_t h, uint64_t begin, bool store) noexcept {
  const uint64_t cap = t.steps.capacity;
  double max = 0;
  double sum = 0;
  bool same = true;
  for (uint64_t q = h + 1; q > begin; --q) {
    const uint64_t s = q - 1;
    if (h - s >= cap) break;
    const uint64_t w = t.steps.words[t.steps.leaves + s % cap].load(std::memory_order_seq_cst);
    if (!holds(w, s)) break;  // step s is not stored, nor any older one
    max = std::max(max, leaf_weight(w));
    sum += leaf_weight(w);
    const double mean = sum / static_cast<double>(h + 1 - s);
    if (store) {
      store_window(t.max, s, max, s == h);
      store_window(t.mean, s, mean, s == h);
    } else if (same) {
      const uint64_t m = t.max.words[t.max.leaves + s % cap].load(std::memory_order_seq_cst);
      const uint64_t a = t.mean.words[t.mean.leaves + s % cap].load(std::memory_order_seq_cst);
      same = !holds(m, s) || (m == make_leaf(s, max) && a == make_leaf(s, mean));
    }
  }
  return same;
}

// Recomputes the windows of starts [begin, last] (window_of each), until a verifying pass finds every one unchanged:
// a changed input has a party that refreshes after changing it; if that party's store came before ours, ours would
// hide its change.
void refresh_range(const SequenceTrees& t, uint64_t begin, uint64_t last, uint64_t length, uint64_t cap) noexcept {
  for (;;) {
    for (uint64_t q = begin; q <= last; ++q) {
      double max = 0;
      double mean = 0;
      if (!window_of(t.steps, length, q, max, mean)) continue;  // start q not stored
      store_window(t.max, q, max, false);
      store_window(t.mean, q, mean, false);
    }
    bool same = true;
    for (uint64_t q = begin; q <= last && same; ++q) {
      double max = 0;
      double mean = 0;
      if (!window_of(t.steps, length, q, max, mean)) continue;
      const uint64_t m = t.max.words[t.max.leaves + q % cap].load(std::memory_order_seq_cst);
      const uint64_t a = t.mean.words[t.mean.leaves + q % cap].load(std::memory_order_seq_cst);
      same = !holds(m, q) || (m == make_leaf(q, max) && a == make_leaf(q, mean));
    }
    if (same) return;
  }
}

// Walks the window leaves of starts [begin, begin + starts) in both window trees: one run of slots, or two when it
// wraps the ring.
void walk_windows(const SequenceTrees& t, uint64_t begin, uint64_t starts) noexcept {
  const uint64_t cap = t.steps.capacity;
  const uint64_t a = begin % cap;
  const uint64_t b = a + starts;
  for (const PriorityTree* tree : {&t.max, &t.mean}) {
    if (b <= cap) {
      walk_range(*tree, a, b);
    } else {
      walk_range(*tree, a, cap);
      walk_range(*tree, 0, b - cap);
    }
  }
}

}  // namespace

void refresh_windows(const SequenceTrees& t, uint64_t first, uint64_t last, uint64_t newest) noexcept {
  const uint64_t cap = t.steps.capacity;
  const uint64_t length = t.length;
  const uint64_t lo = first >= length - 1 ? first - (length - 1) : 0;  // the windows' starts: [lo, last]
  // At most a ring's worth of starts (the caller's range is within the ring, the windows add L - 1).
  const uint64_t starts = std::min(last - lo + 1, cap);
  const uint64_t begin = last + 1 - starts;
  if (newest == last && first == last) {  // the writer's new step: one pass back from it (pass_newest)
    do {
      pass_newest(t, last, begin, /*store=*/true);
    } while (!pass_newest(t, last, begin, /*store=*/false));
  } else {
    refresh_range(t, begin, last, length, cap);
  }
  walk_windows(t, begin, starts);
}

void refresh_all_windows(const SequenceTrees& t, uint64_t lo, uint64_t hi) noexcept {
  if (hi <= lo) return;
  refresh_windows(t, std::max(lo, hi > t.steps.capacity ? hi - t.steps.capacity : 0), hi - 1, ~0ull);
}

}  // namespace shmreplay::detail
