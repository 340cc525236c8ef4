// Consistent copies of published steps for readers that are not the learner and may map the segment read-only
// (Inspector::read_steps, save_checkpoint). It is the Sampler's seqlock validation (docs/design.md, "Concurrency
// protocol") with two additions that make it safe against a checkpoint being loaded into the segment meanwhile:
// update_seq is loaded before the head, and a head that went down is reported instead of trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay::detail {

/// Byte offset of each field inside a record (one step, its fields in schema order, back to back).
std::vector<uint64_t> record_field_offsets(const Schema& schema);

enum class CopyOutcome {
  ok,      ///< the records were copied; those of steps below intact_from were overwritten meanwhile
  raced,   ///< the learner (or a checkpoint load) rewrote the env during the copy: copy again
  reset,   ///< the env's head is below the steps asked for: the env was reloaded; start over from a new snapshot
};

struct CopyResult {
  CopyOutcome outcome = CopyOutcome::raced;
  uint64_t intact_from = 0;  ///< for ok: the oldest step whose slot no writer had reclaimed by the end of the copy
};

/// Copies steps [first, first + count) of `env` into `dst` (count records of schema.step_bytes() each) and
/// validates the copy. Never writes the segment. The records of steps >= intact_from are exactly what their
/// writers published; the others must be dropped. Preconditions: env < num_envs, count >= 1, and
/// first + count <= a head of the env that the caller loaded with acquire. O(count * num_fields); never blocks.
CopyResult copy_records(const Buffer& buffer, uint64_t env, uint64_t first, uint64_t count,
                        const std::vector<uint64_t>& record_offsets, std::byte* dst) noexcept;

}  // namespace shmreplay::detail
