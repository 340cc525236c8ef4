// lib/sampler_weights.cpp: a Sampler's weights: the total weight of a view's starts (total_weight: what learners
// that sample several buffers split a batch by), and the sampling weights of given stored steps (priority_weights).
// (A prioritized batch's importance weights are the sample call's last stage: finish_weights, sampler_sample.cpp.)
//
// Who calls it: the learner (total_weight, priority_weights; shmreplay.ray through the Python module).
#include <utility>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

using layout::EnvControl;

double Sampler::total_weight(View view, std::size_t sequence_length, double distribution_power,
                             const SampleOptions& options) {
  check_args("compute the total weight of", 1, sequence_length, distribution_power, options);
  Scratch& z = *scratch_;
  if (options.min_steps > 0 && sampler_parts::published_steps(segment_of(*buffer_), z.slot, view) < options.min_steps) {
    return 0.0;
  }
  const uint64_t cap = buffer_->capacity();
  std::vector<detail::EnvView>& views = z.snapshot.views;
  for (std::size_t e = 0; e < views.size(); ++e) {
    views[e] = sampler_parts::snapshot_view(segment_of(*buffer_), z.slot, e, view);  // as sample_with
  }
  begin_window(options, "compute the total weight of");
  if (cut_views_to_window()) return 0.0;  // no step inside the window
  // The planner a sample call with these options would use (detail/sampling/planner_table.hpp).
  return z.planning.planners.with(options, sequence_length, [&](detail::Planner& planner) {
    planner.begin_call();
    const detail::PlanOptions plan{options.episodes, std::min(options.period, cap), options.recency_half_life,
                                   options.sequence_priority_eta};
    if (planner.prepare(views, sequence_length, distribution_power, plan)) return planner.total_weight();
    // Nothing to draw: 0, unless a weight is not finite (a damaged segment: check_shortfall throws).
    (void)sampler_parts::check_shortfall(planner, planner.shortfall(/*scan=*/false), segment_of(*buffer_),
                                         "compute the total weight of", view);
    return 0.0;
  });
}

void Sampler::priority_weights(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                               std::span<double> out) const {
  lease_.check_process("read priorities of");
  if (!buffer_->has_priorities()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot read priorities of '{}': it was created without priorities (create it with a "
                            "priority exponent)",
                            buffer_->name()));
  }
  if (steps.size() != env_ids.size() || out.size() != env_ids.size()) {
    throw Error(Errc::size_mismatch,
                fmt::format("cannot read priorities of '{}': {} env ids, {} steps and room for {} weights; expected "
                            "one of each per step",
                            buffer_->name(), env_ids.size(), steps.size(), out.size()));
  }
  for (std::size_t i = 0; i < env_ids.size(); ++i) {
    // each id and step read once and the id checked as read: another thread may change the caller's arrays
    const uint64_t e = env_ids[i];
    const uint64_t step = steps[i];
    detail::check_env_id(segment_of(*buffer_), e, "read priorities of");
    const EnvControl& c = segment_of(*buffer_).env_control(e);
    const detail::PriorityTreeView tree = detail::priority_tree_of(std::as_const(segment_of(*buffer_)), e);
    out[i] = step < detail::load_head(c) ? detail::step_weight(tree, c, step) : -1.0;
  }
}

}  // namespace shmreplay
