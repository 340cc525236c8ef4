// detail/storage/cold_gather.hpp: the copy of a sampled row that reaches below its env's hot ring (layout 1.11; a
// cold tier, docs/design/cold_tier.md): its steps below `split` from the env's cold records, the rest from the ring,
// in order, then the validation of both parts: the cold seqlock for the cold steps (detail/protocol/cold_seal.hpp),
// the step seqlock for the hot ones (seqlock.hpp).
//
// Who calls it: the Sampler's gather stage (lib/sampler_gather.hpp), after a chunk's ring rows: every cold row of the
// chunk copied, then each validated (the reads after the copies only see later values, which can only reject
// more). Never blocks, never allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>

#include "detail/copy_bytes.hpp"
#include "detail/protocol/cold_seal.hpp"
#include "detail/protocol/seqlock.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// A row of the cold gather: steps [start, start + steps) of `env`, those below `split` in the cold tier (split is
/// where the snapshot's view of the ring began: its claim - capacity, at least hi - capacity), into batch row `row`.
/// copy_cold_row fills the last two words for validate_cold_row.
struct ColdRow {
  uint64_t env = 0;
  uint64_t start = 0;
  uint64_t steps = 0;
  uint64_t split = 0;
  uint64_t row = 0;
  uint64_t begin_seq = 0;  ///< the env's update_seq before the copy (read_begin)
  bool sealed = false;     ///< every cold step of the row was sealed before the copy
};

/// Copies `r` into the batch's field arrays `outs` (row-major [rows][length][field bytes]) and its `mask`, zeros and
/// mask 0 past its steps; `field_bytes`: each field's bytes per step, in schema order. A chunk's cold rows are all
/// copied before any is validated (validate_cold_row, after one end_copies()), so that their copies' misses overlap.
inline void copy_cold_row(const Segment& seg, const uint64_t* field_bytes, std::byte* const* outs, uint8_t* mask,
                          std::size_t length, ColdRow& r) noexcept {
  const uint64_t cap = seg.capacity();
  const uint64_t cold_cap = seg.cold_capacity();
  const uint64_t end = r.start + r.steps;
  const uint64_t split = std::min(std::max(r.split, r.start), end);
  r.begin_seq = read_begin(seg.env_control(r.env));
  r.sealed = cold_sealed(seg.cold_env(r.env)) >= split;  // else a stale snapshot: not in the cold tier yet
  const std::size_t fields = seg.schema().size();
  // The cold steps, field by field: one run of the field's column (the files are column-major, as the ring), in two
  // pieces where it wraps.
  if (split > r.start) {
    const uint64_t slot = r.start % cold_cap;
    const uint64_t first = std::min(split - r.start, cold_cap - slot);
    for (std::size_t f = 0; f < fields; ++f) {
      const uint64_t bytes = field_bytes[f];
      std::byte* dst = outs[f] + r.row * length * bytes;
      const std::byte* column = seg.cold_column(r.env, f);
      std::memcpy(dst, column + slot * bytes, first * bytes);
      if (split - r.start > first) std::memcpy(dst + first * bytes, column, (split - r.start - first) * bytes);
    }
  }
  // The ring's steps, field by field: one run of slots, in two pieces where it wraps; then the zeros.
  for (std::size_t f = 0; f < fields; ++f) {
    const uint64_t bytes = field_bytes[f];
    if (end > split) {
      std::byte* dst = outs[f] + (r.row * length + (split - r.start)) * bytes;
      const std::byte* ring = seg.field_data(f) + r.env * cap * bytes;
      const uint64_t ring_slot = split % cap;
      const uint64_t first = std::min(end - split, cap - ring_slot);
      std::memcpy(dst, ring + ring_slot * bytes, first * bytes);
      if (end - split > first) std::memcpy(dst + first * bytes, ring, (end - split - first) * bytes);
    }
    if (r.steps < length) std::memset(outs[f] + (r.row * length + r.steps) * bytes, 0, (length - r.steps) * bytes);
  }
  uint8_t* m = mask + r.row * length;
  for (std::size_t k = 0; k < length; ++k) m[k] = k < r.steps ? 1 : 0;
}

/// After copy_cold_row and an end_copies() (the acquire fence both seqlocks' ends need): whether the copy of `r` is
/// whole: its cold steps were sealed before the copy and no seal had begun to reuse their records by now, and no
/// writer reclaimed (nor learner updated) a slot of its ring steps.
inline bool validate_cold_row(const Segment& seg, const ColdRow& r) noexcept {
  const uint64_t end = r.start + r.steps;
  const uint64_t split = std::min(std::max(r.split, r.start), end);
  if (!r.sealed) return false;
  if (split > r.start && !cold_copy_intact(cold_read_end(seg.cold_env(r.env)), r.start, seg.cold_capacity())) {
    return false;
  }
  return split == end || copy_intact(r.begin_seq, read_end_loads(seg.env_control(r.env)), split, seg.capacity());
}

}  // namespace shmreplay::detail
