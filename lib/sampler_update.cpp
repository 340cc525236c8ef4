// lib/sampler_update.cpp: the learner's writes to stored steps: try_update rewrites a step's fields in place (the
// update side of the step seqlock: the update lock and an UpdateSection, so that readers reject a copy that
// overlaps it), and update_priorities sets steps' priorities (the learner's half of the sum trees' protocol).
//
// Who calls it: the learner (the learner lease holder, the only process that rewrites stored steps).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/sequence_priorities.hpp"
#include "detail/test_hooks.hpp"
#include "sampler_parts.hpp"
#include "detail/storage/cold_files.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

using layout::EnvControl;
using layout::GlobalControl;

// ---------------------------------------------------------------------------------------------------------------
// Update

bool Sampler::try_update(uint64_t env_id, uint64_t step, std::span<const FieldBytes> fields) {
  lease_.check_process("update");
  const Schema& schema = buffer_->schema();
  detail::check_env_id(segment_of(*buffer_), env_id, "update");
  if (buffer_->consuming_queue()) {  // a learner killed inside an update would leave its step undeliverable
    throw Error(Errc::invalid_argument,
                fmt::format("cannot update step {} of env {} of '{}': it is a consuming queue, whose steps are "
                            "delivered as pushed",
                            step, env_id, buffer_->name()));
  }
  // (1.11) its sealed copy in the cold tier would keep the old bytes
  detail::refuse_cold(segment_of(*buffer_), "update a step of", "updates of stored steps are not supported with one yet");
  if (fields.size() != schema.size()) {
    throw Error(Errc::size_mismatch, fmt::format("cannot update '{}': {} field values given, the schema has {} ({})",
                                                 buffer_->name(), fields.size(), schema.size(), schema.to_string()));
  }
  const EpisodeFieldIndices& ef = buffer_->episode_fields();
  for (const auto& flag : {ef.done, ef.terminated, ef.truncated}) {
    if (flag && fields.size() == schema.size() && fields[*flag].data != nullptr) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot update step {} of env {} of '{}': field '{}' is an episode flag field, and "
                              "episode boundaries are fixed when a step is pushed; pass no data for it",
                              step, env_id, buffer_->name(), schema[*flag].name));
    }
  }
  if (ef.policy_version && fields[*ef.policy_version].data != nullptr) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot update step {} of env {} of '{}': field '{}' is the policy-version field, fixed "
                            "when a step is pushed (a sample's window relies on each env's versions never "
                            "decreasing); pass no data for it",
                            step, env_id, buffer_->name(), schema[*ef.policy_version].name));
  }
  for (std::size_t f = 0; f < fields.size(); ++f) {
    const detail::StorageSet& storages = scratch_->storages;
    if (fields[f].data != nullptr && !storages.kind_of(f).direct()) {
      // A kind that does not keep each step's bytes apart (a stacked field's frames are shared with the
      // neighbouring steps' stacks: rewriting one step's stack would change theirs).
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot update step {} of env {} of '{}': {}; pass no data for it", step, env_id,
                              buffer_->name(), storages.kind_of(f).why_not_direct(schema, storages.index_in_kind(f))));
    }
    if (fields[f].data != nullptr && fields[f].bytes != schema[f].bytes()) {
      throw Error(Errc::size_mismatch, fmt::format("cannot update '{}': field '{}' ({}) has {} bytes, expected {}",
                                                   buffer_->name(), schema[f].name, schema[f].to_string(),
                                                   fields[f].bytes, schema[f].bytes()));
    }
  }
  EnvControl& c = segment_of(*buffer_).env_control(env_id);
  const uint64_t head = detail::load_head(c);
  if (step >= head) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot update step {} of env {} of '{}': it was never published (the env has {} "
                            "steps)",
                            step, env_id, buffer_->name(), head));
  }
  const uint64_t cap = buffer_->capacity();
  // While the update lock is held the writer cannot claim a new slot, and the slot it may be writing right now
  // (claimed - 1) is outside the steps accepted here.
  const uint64_t claimed = detail::lock_for_update(c, segment_of(*buffer_), rank_);
  // step's slot has not been claimed for step + cap, and (stacked fields, layout 1.6) its frames are intact
  const bool stored = step + cap >= claimed && step >= c.stacks_intact_from.load(std::memory_order_relaxed);
  if (stored) {
    {
      const detail::UpdateSection section(c, step);
      for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].data == nullptr) continue;
        const detail::FieldStorage& kind = scratch_->storages.kind_of(f);
        std::memcpy(kind.direct_bytes(segment_of(*buffer_), scratch_->storages.index_in_kind(f), env_id, step),
                    fields[f].data, schema[f].bytes());
        detail::test_hooks::call(detail::test_hooks::in_update_section);  // after each field: a test's kill point
      }
    }
    scratch_->slot.steps_updated.fetch_add(1, std::memory_order_relaxed);
  }
  detail::unlock_update(c, claimed);
  return stored;
}

// ---------------------------------------------------------------------------------------------------------------
// Priorities

PriorityUpdateResult Sampler::update_priorities(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                                                std::span<const float> priorities) {
  lease_.check_process("update priorities of");
  if (!buffer_->has_priorities()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot update priorities of '{}': it was created without priorities (create it with a "
                            "priority exponent)",
                            buffer_->name()));
  }
  if (steps.size() != env_ids.size() || priorities.size() != env_ids.size()) {
    throw Error(Errc::size_mismatch,
                fmt::format("cannot update priorities of '{}': {} env ids, {} steps and {} priorities; expected one "
                            "of each per updated step",
                            buffer_->name(), env_ids.size(), steps.size(), priorities.size()));
  }
  // Everything is copied once, then checked before anything is set, and the checked copy is what is set: another
  // thread may change the caller's arrays meanwhile.
  Scratch& z = *scratch_;
  sampler_parts::UpdateCopy& copy = z.update;
  copy.applied.clear();
  copy.envs.assign(env_ids.begin(), env_ids.end());
  copy.steps.assign(steps.begin(), steps.end());
  copy.priorities.assign(priorities.begin(), priorities.end());
  env_ids = copy.envs;
  steps = copy.steps;
  priorities = copy.priorities;
  const double alpha = buffer_->priority_exponent();
  float largest = 0;
  for (std::size_t i = 0; i < env_ids.size(); ++i) {
    detail::check_env_id(segment_of(*buffer_), env_ids[i], "update priorities of");
    if (!detail::priority_fits(priorities[i], alpha)) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot update priorities of '{}': priority {} (position {}, env {} step {}) {}",
                              buffer_->name(), priorities[i], i, env_ids[i], steps[i],
                              detail::priority_misfit(priorities[i], alpha)));
    }
    const uint64_t head = detail::load_head(segment_of(*buffer_).env_control(env_ids[i]));
    if (steps[i] >= head) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot update the priority of step {} of env {} of '{}' (position {}): it was never "
                              "published (the env has {} steps)",
                              steps[i], env_ids[i], buffer_->name(), i, head));
    }
    largest = std::max(largest, priorities[i]);
  }
  GlobalControl& g = segment_of(*buffer_).global_control();
  PriorityUpdateResult result;
  for (std::size_t i = 0; i < env_ids.size(); ++i) {
    const uint64_t e = env_ids[i];
    const detail::PriorityTree tree = detail::priority_tree_of(segment_of(*buffer_), e);
    const double weight = detail::priority_weight(priorities[i], alpha);
    if (detail::update_priority(tree, segment_of(*buffer_).env_control(e), e, steps[i], weight, z.slot.priority_walk)) {
      ++result.applied;
      if (segment_of(*buffer_).sequence_priority_length() != 0) copy.applied.emplace_back(e, steps[i]);
    } else {
      ++result.dropped;
    }
  }
  if (!copy.applied.empty()) refresh_updated_windows();
  if (env_ids.size() > 0) detail::raise_max_priority(g.max_priority, largest);
  g.priority_updates.fetch_add(result.applied, std::memory_order_relaxed);
  g.priority_updates_dropped.fetch_add(result.dropped, std::memory_order_relaxed);
  return result;
}

// Sequence priorities: the windows of the steps update_priorities changed, refreshed once per run of nearby steps
// of one env (steps less than L apart share windows), so that a sequence's L updated steps cost O(L) rather than
// O(L^2). The slot's priority_walk word names the run's env while it runs: a learner taking over a dead one's slot
// refreshes every window of that env (learner_takeover.cpp).
void Sampler::refresh_updated_windows() noexcept {
  Segment& seg = segment_of(*buffer_);
  std::vector<std::pair<uint64_t, uint64_t>>& applied = scratch_->update.applied;
  std::sort(applied.begin(), applied.end());
  const uint64_t length = seg.sequence_priority_length();
  const uint64_t cap = seg.capacity();
  std::atomic<uint64_t>& walk_word = scratch_->slot.priority_walk;
  for (std::size_t i = 0; i < applied.size();) {
    const uint64_t env = applied[i].first;
    const uint64_t first = applied[i].second;
    uint64_t last = first;
    std::size_t j = i + 1;
    while (j < applied.size() && applied[j].first == env && applied[j].second < last + length &&
           applied[j].second - first + length < cap) {
      last = applied[j++].second;
    }
    walk_word.store(((env + 1) << 40) | (first % cap), std::memory_order_seq_cst);  // read by finish_dead_walk
    detail::refresh_windows(detail::sequence_trees_of(seg, env), first, last, ~0ull);
    walk_word.store(0, std::memory_order_seq_cst);
    i = j;
  }
}

}  // namespace shmreplay
