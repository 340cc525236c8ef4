// lib/sampler_zero.cpp: the learner's half of zero-on-sample (sampler_zero.hpp; docs/design/priorities.md,
// "Zero-on-sample").
#include "sampler_zero.hpp"

#include <algorithm>

#include "detail/protocol/priorities.hpp"

namespace shmreplay::sampler_parts {

void Zeroing::take(std::span<const detail::GatherRow> rows, std::vector<uint32_t>& failed, std::size_t failed_before,
                   std::atomic<uint64_t>& walk_word) noexcept {
  const std::size_t failed_end = failed.size();
  const auto first_failed = failed.begin() + static_cast<std::ptrdiff_t>(failed_before);
  const auto end_failed = failed.begin() + static_cast<std::ptrdiff_t>(failed_end);
  for (const detail::GatherRow& r : rows) {
    // Rows that failed are few (overwritten during their copy, or capped): a scan of them.
    if (failed_end != failed_before && std::find(first_failed, end_failed, static_cast<uint32_t>(r.row)) != end_failed) {
      continue;
    }
    const layout::EnvControl& env = seg_->env_control(r.env);
    double old = 0;
    if (fresh_) {  // the row was drawn as a fresh step: it must be the one learner that takes its fresh leaf
      const detail::Take t = detail::take_priority(detail::fresh_tree_of(*seg_, r.env), env, r.env, r.start, old,
                                                   walk_word);
      if (t == detail::Take::zero) {  // another learner returned it first: drawn again
        failed.push_back(static_cast<uint32_t>(r.row));
        continue;
      }
      if (t == detail::Take::taken) held_.push_back({r.env, r.start, old, true});  // within begin_call's reserve
      if (!zero_) continue;
      // With zero-on-sample too, its priority goes to 0 as well; the fresh take alone decides the row.
      if (detail::take_priority(detail::priority_tree_of(*seg_, r.env), env, r.env, r.start, old, walk_word) ==
          detail::Take::taken) {
        held_.push_back({r.env, r.start, old, false});
      }
      continue;
    }
    if (!zero_) continue;
    const detail::Take t = detail::take_priority(detail::priority_tree_of(*seg_, r.env), env, r.env, r.start, old,
                                                 walk_word);
    if (t == detail::Take::taken) {
      held_.push_back({r.env, r.start, old, false});
    } else if (t == detail::Take::zero) {
      // Another learner took it between our draw and here (or it was given priority 0): drawn again. With sample
      // caps, the delivery this row claimed stays counted: a step is then delivered fewer times, never more.
      failed.push_back(static_cast<uint32_t>(r.row));
    }
  }
}

void Zeroing::release(std::atomic<uint64_t>& walk_word) noexcept {
  for (const Held& h : held_) {
    detail::untake_priority(h.fresh ? detail::fresh_tree_of(*seg_, h.env) : detail::priority_tree_of(*seg_, h.env),
                            h.env, h.step, h.weight, walk_word);
  }
  held_.clear();
}

}  // namespace shmreplay::sampler_parts
