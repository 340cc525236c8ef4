// lib/sampler_write_back.cpp: Sampler::write_back, reanalyse's writes: the derived fields of many stored steps
// rewritten by handle (env, step) in one call. The update side of the step seqlock, as try_update's
// (sampler_update.cpp), with each env's update lock taken once for all of its rows; docs/design/write_back.md has the
// handle and the argument that a write-back never lands on a newer step.
//
// Who calls it: any learner rank (a reanalyse worker holds a learner slot like a GPU rank).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/test_hooks.hpp"
#include "sampler_parts.hpp"
#include "detail/storage/cold_files.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {
namespace {

// Throws unless `fields` holds, for each field, nothing or exactly `rows` values, and values only for derived
// fields that write_back may rewrite.
void check_write_back_fields(const Buffer& buffer, const detail::StorageSet& storages,
                             std::span<const FieldBytes> fields, std::size_t rows) {
  const Schema& schema = buffer.schema();
  if (fields.size() != schema.size()) {
    throw Error(Errc::size_mismatch, fmt::format("cannot write back into '{}': {} field values given, the schema has "
                                                 "{} ({})",
                                                 buffer.name(), fields.size(), schema.size(), schema.to_string()));
  }
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (fields[f].data == nullptr) continue;
    const Field& field = schema[f];
    if (!field.derived) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot write back into '{}': field '{}' ({}) is not derived; write_back rewrites only "
                              "fields declared ':derived' (what a writer pushed otherwise stays as pushed); pass no "
                              "data for it",
                              buffer.name(), field.name, field.to_string()));
    }
    if (!storages.kind_of(f).direct()) {  // a derived field is stored as pushed (Schema); a test kind might not be
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot write back into '{}': {}", buffer.name(),
                              storages.kind_of(f).why_not_direct(schema, storages.index_in_kind(f))));
    }
    if (fields[f].bytes != rows * field.bytes()) {
      throw Error(Errc::size_mismatch,
                  fmt::format("cannot write back into '{}': field '{}' ({}) has {} bytes, expected {} ({} rows x {})",
                              buffer.name(), field.name, field.to_string(), fields[f].bytes, rows * field.bytes(),
                              rows, field.bytes()));
    }
  }
  const EpisodeFieldIndices& ef = buffer.episode_fields();
  for (const auto& fixed : {ef.done, ef.terminated, ef.truncated, ef.policy_version}) {
    if (fixed && fields[*fixed].data != nullptr) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot write back into '{}': field '{}' is an episode flag or the policy version, "
                              "fixed when a step is pushed; pass no data for it",
                              buffer.name(), schema[*fixed].name));
    }
  }
}

// Every row refused and counted, nothing written.
WriteBackResult refuse_all(std::span<uint8_t> refused, std::size_t n, std::atomic<uint64_t>& counter) noexcept {
  std::fill(refused.begin(), refused.end(), uint8_t{1});
  counter.fetch_add(n, std::memory_order_relaxed);
  return {.applied = 0, .refused = n};
}

}  // namespace

WriteBackResult Sampler::write_back(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                                    std::span<const FieldBytes> fields, std::span<uint8_t> refused) {
  return write_back(env_ids, steps, fields, refused, loads_seen());
}

WriteBackResult Sampler::write_back(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                                    std::span<const FieldBytes> fields, std::span<uint8_t> refused,
                                    uint64_t load_generation) {
  lease_.check_process("write back into");
  const std::size_t n = env_ids.size();
  if (steps.size() != n || (!refused.empty() && refused.size() != n)) {
    throw Error(Errc::size_mismatch,
                fmt::format("cannot write back into '{}': {} env ids, {} steps{}; expected one of each per row",
                            buffer_->name(), n, steps.size(),
                            refused.empty() ? std::string() : fmt::format(" and {} refused flags", refused.size())));
  }
  // (1.11) as try_update: the sealed copies would keep the old values
  detail::refuse_cold(segment_of(*buffer_), "write back into", "write-backs are not supported with one yet");
  if (buffer_->consuming_queue()) {  // as try_update: a learner killed mid-write would leave its step undeliverable
    throw Error(Errc::invalid_argument, fmt::format("cannot write back into '{}': it is a consuming queue, whose "
                                                    "steps are delivered as pushed",
                                                    buffer_->name()));
  }
  Segment& seg = segment_of(*buffer_);
  check_write_back_fields(*buffer_, scratch_->storages, fields, n);
  // The handles are copied once, then checked, and the copy is what is written: another thread may change the
  // caller's arrays meanwhile.
  sampler_parts::WriteBackCopy& copy = scratch_->write_back;
  copy.envs.assign(env_ids.begin(), env_ids.end());
  copy.steps.assign(steps.begin(), steps.end());
  for (std::size_t i = 0; i < n; ++i) {
    detail::check_env_id(seg, copy.envs[i], "write back into");
    const uint64_t head = detail::load_head(seg.env_control(copy.envs[i]));
    if (copy.steps[i] >= head) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot write back into step {} of env {} of '{}' (row {}): it was never published (the "
                              "env has {} steps)",
                              copy.steps[i], copy.envs[i], buffer_->name(), i, head));
    }
  }
  // Handles from before a checkpoint load: the load may have given their step indices other content (an older
  // checkpoint's steps, then new pushes). No load runs while this Sampler holds its learner lease, so the check
  // once, here, holds for the whole call.
  if (load_generation != loads_seen()) return refuse_all(refused, n, scratch_->slot.write_backs_refused);
  copy.order.resize(n);
  for (std::size_t i = 0; i < n; ++i) copy.order[i] = i;
  std::stable_sort(copy.order.begin(), copy.order.end(), [&](std::size_t a, std::size_t b) {
    return copy.envs[a] != copy.envs[b] ? copy.envs[a] < copy.envs[b] : copy.steps[a] < copy.steps[b];
  });
  const Schema& schema = buffer_->schema();
  const uint64_t cap = buffer_->capacity();
  WriteBackResult result;
  for (std::size_t k = 0; k < n;) {
    const uint64_t env = copy.envs[copy.order[k]];
    layout::EnvControl& c = seg.env_control(env);
    // While the lock is held the writer cannot claim a new slot: steps in [claimed - cap, head) stay stored.
    const uint64_t claimed = detail::lock_for_update(c, seg, rank_);
    const uint64_t intact_from = c.stacks_intact_from.load(std::memory_order_relaxed);  // a dead update's repair
    for (; k < n && copy.envs[copy.order[k]] == env; ++k) {
      const std::size_t i = copy.order[k];
      const uint64_t step = copy.steps[i];
      const bool stored = step + cap >= claimed && step >= intact_from;
      if (!refused.empty()) refused[i] = stored ? 0 : 1;
      if (!stored) {
        ++result.refused;
        continue;
      }
      const detail::UpdateSection section(c, step);
      for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].data == nullptr) continue;
        const uint64_t bytes = schema[f].bytes();
        const detail::FieldStorage& kind = scratch_->storages.kind_of(f);
        std::memcpy(kind.direct_bytes(seg, scratch_->storages.index_in_kind(f), env, step),
                    static_cast<const std::byte*>(fields[f].data) + i * bytes, bytes);
        detail::test_hooks::call(detail::test_hooks::in_update_section);  // after each field: a test's kill point
      }
      ++result.applied;
    }
    detail::unlock_update(c, claimed);
  }
  scratch_->slot.write_backs_applied.fetch_add(result.applied, std::memory_order_relaxed);
  scratch_->slot.write_backs_refused.fetch_add(result.refused, std::memory_order_relaxed);
  return result;
}

}  // namespace shmreplay
