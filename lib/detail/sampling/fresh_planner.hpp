// detail/sampling/fresh_planner.hpp: FreshPlanner, the draws of SampleOptions::reanalysed (the reanalyse mix, issue
// 48 part 3; docs/design/reanalyse.md, "The learner's mix"): a start uniformly among the freshly reanalysed steps
// inside the views, each with probability 1 / their number. The fresh ranges come from FreshSteps (the walk's
// words, read once per prepare); the planner intersects them with the snapshot's views and draws by a binary search
// over their cumulative lengths. O(fresh chunks) per prepare, O(log fresh chunks) per row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "detail/sampling/planner.hpp"

namespace shmreplay::detail {

class FreshPlanner final : public Planner {
 public:
  explicit FreshPlanner(const PlannerInputs& in) noexcept : fresh_(in.fresh) {}
  bool prepare(std::span<const EnvView> views, std::size_t length, double power, const PlanOptions& options) override;
  std::optional<Draw> draw(Rng& rng) override;
  /// The fresh starts inside the views (each weighs 1).
  double total_weight() override { return static_cast<double>(total_); }
  /// 1 for a fresh start inside the views, 0 otherwise. O(log fresh ranges).
  double weight_of(std::size_t env, uint64_t start) const noexcept override;

 private:
  const FreshSteps* fresh_;
  std::span<const EnvView> views_;
  uint64_t length_ = 1;
  std::vector<FreshRange> read_;    // the walk's ranges, as read
  std::vector<FreshRange> ranges_;  // ... cut to the views, nonempty
  std::vector<uint64_t> ends_;      // ends_[i]: the fresh starts of ranges_[0..i]
  uint64_t total_ = 0;
};

}  // namespace shmreplay::detail
