// lib/sampler_weights.cpp: a Sampler's weights: the importance weights of a prioritized batch (finish_weights),
// the total weight of a view's starts (total_weight: what learners that sample several buffers split a batch by),
// and the sampling weights of given stored steps (priority_weights).
//
// Who calls it: the sample calls (finish_weights, sampler.cpp) and the learner (total_weight, priority_weights;
// shmreplay.ray through the Python module).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include <fmt/format.h>

#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

using layout::EnvControl;

// Turns each row's N * P, which the priority planner left in the weights, into (N * P)^-beta over the batch's
// largest, computed as (smallest N * P / N * P)^beta: a ratio in (0, 1] to the power beta, which neither overflows
// nor, for the least likely row (exactly 1), underflows, whatever beta (as a quotient of two powers, beta = 1e9
// made it inf / inf). A row whose N * P rounded to 0 in the f32 weights is the least likely.
void Sampler::finish_weights(SampleBatch& out, double beta) noexcept {
  float smallest = std::numeric_limits<float>::infinity();
  for (std::size_t r = 0; r < out.rows_; ++r) smallest = std::min(smallest, out.weights_[r]);
  for (std::size_t r = 0; r < out.rows_; ++r) {
    const float np = out.weights_[r];
    out.weights_[r] = np <= smallest ? 1.0f : static_cast<float>(std::pow(static_cast<double>(smallest) / np, beta));
  }
}

double Sampler::total_weight(View view, std::size_t sequence_length, double distribution_power,
                             const SampleOptions& options) {
  check_args("compute the total weight of", 1, sequence_length, distribution_power, options);
  Scratch& z = *scratch_;
  if (options.min_steps > 0 && sampler_parts::published_steps(segment_of(*buffer_), z.slot, view) < options.min_steps) {
    return 0.0;
  }
  const uint64_t cap = buffer_->capacity();
  for (std::size_t e = 0; e < z.views.size(); ++e) {
    z.views[e] = sampler_parts::snapshot_view(segment_of(*buffer_), z.slot, e, view);  // as sample_with
  }
  // The planner a sample call with these options would use (detail/sampling/planner_table.hpp).
  return z.planners.with(options, sequence_length, [&](detail::Planner& planner) {
    planner.begin_call();
    const detail::PlanOptions plan{options.episodes, std::min(options.period, cap)};
    if (planner.prepare(z.views, sequence_length, distribution_power, plan)) return planner.total_weight();
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
    const detail::PriorityTree tree = detail::priority_tree_of(segment_of(*buffer_), e);
    out[i] = step < detail::load_head(c) ? detail::step_weight(tree, c, step) : -1.0;
  }
}

}  // namespace shmreplay
