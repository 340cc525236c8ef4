// detail/storage/cold_gather.hpp: the copy of a sampled row that reaches below its env's hot ring (layout 1.11; a
// cold tier, docs/design/cold_tier.md): its steps below `split` from the env's cold records, the rest from the ring,
// in order, then the validation of both parts: the cold seqlock for the cold steps (detail/protocol/cold_seal.hpp),
// the step seqlock for the hot ones (seqlock.hpp).
//
// Who calls it: the Sampler's gather stage (lib/sampler_gather.hpp), after a chunk's ring rows. One row at a time: a
// cold row is page-cache bound, not latency bound like the ring's rows. Never blocks, never allocates.
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
struct ColdRow {
  uint64_t env = 0;
  uint64_t start = 0;
  uint64_t steps = 0;
  uint64_t split = 0;
  uint64_t row = 0;
};

/// Copies `r` into the batch's field arrays `outs` (row-major [rows][length][field bytes]) and its `mask`, zeros and
/// mask 0 past its steps, and returns whether the copy is whole: every cold step was sealed before the copy and its
/// record not reused by the end of it, and no writer reclaimed (nor learner updated) a hot step's slot meanwhile.
/// `field_bytes`: each field's bytes per step, in schema order.
inline bool gather_cold_row(const Segment& seg, const uint64_t* field_bytes, std::byte* const* outs, uint8_t* mask,
                            std::size_t length, const ColdRow& r) noexcept {
  const uint64_t cap = seg.capacity();
  const uint64_t cold_cap = seg.cold_capacity();
  const layout::EnvControl& c = seg.env_control(r.env);
  const layout::ColdEnv& ce = seg.cold_env(r.env);
  const uint64_t end = r.start + r.steps;
  const uint64_t split = std::min(std::max(r.split, r.start), end);
  const uint64_t begin_seq = read_begin(c);
  if (cold_sealed(ce) < split) return false;  // a stale snapshot: the steps are not in the cold tier yet
  const std::byte* records = seg.cold_records(r.env);
  const uint64_t record_bytes = seg.cold_record_bytes();
  const std::size_t fields = seg.schema().size();
  // The cold steps, record by record (a record holds the step's fields side by side).
  for (uint64_t t = r.start; t < split; ++t) {
    const std::byte* record = records + (t % cold_cap) * record_bytes;
    for (std::size_t f = 0; f < fields; ++f) {
      const uint64_t bytes = field_bytes[f];
      copy_bytes(outs[f] + (r.row * length + (t - r.start)) * bytes, record, bytes);
      record += bytes;
    }
  }
  // The ring's steps, field by field: one run of slots, in two pieces where it wraps; then the zeros.
  for (std::size_t f = 0; f < fields; ++f) {
    const uint64_t bytes = field_bytes[f];
    std::byte* dst = outs[f] + (r.row * length + (split - r.start)) * bytes;
    const std::byte* ring = seg.field_data(f) + r.env * cap * bytes;
    const uint64_t hot = end - split;
    const uint64_t slot = split % cap;
    const uint64_t first = std::min(hot, cap - slot);
    std::memcpy(dst, ring + slot * bytes, first * bytes);
    if (hot > first) std::memcpy(dst + first * bytes, ring, (hot - first) * bytes);
    if (r.steps < length) std::memset(outs[f] + (r.row * length + r.steps) * bytes, 0, (length - r.steps) * bytes);
  }
  uint8_t* m = mask + r.row * length;
  std::memset(m, 1, r.steps);
  std::memset(m + r.steps, 0, length - r.steps);
  end_copies();  // the acquire fence both seqlocks' ends need
  if (split > r.start && !cold_copy_intact(cold_read_end(ce), r.start, cold_cap)) return false;
  return split == end || copy_intact(begin_seq, read_end_loads(c), split, cap);
}

}  // namespace shmreplay::detail
