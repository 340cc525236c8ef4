// detail/storage/plain_ring.hpp: the plain ring, the default storage kind: each field's bytes of step s of env e in
// ring slot s % capacity of the env's ring, [num_envs][capacity][field bytes] (layout.hpp's data section). A step's
// bytes are its own (direct_bytes), so a reserved step is filled in place and a learner may rewrite a stored step.
//
// The Writer's push path stores a plain field inline (Writer::write_step: a fixed-width copy and a prefetch of the
// next slot, measured in docs/benchmarks/small_rows.md), at the address plain_slot() gives; everything else goes
// through the FieldStorage interface (field_storage.hpp).
#pragma once

#include "detail/storage/field_geometry.hpp"
#include "detail/storage/field_storage.hpp"

namespace shmreplay::detail {

/// The bytes of step `step` of env `env` in a plain field's ring `base` ([num_envs][capacity][bytes]).
inline std::byte* plain_slot(std::byte* base, uint64_t bytes, uint64_t capacity, uint64_t env,
                             uint64_t step) noexcept {
  return base + (env * capacity + step % capacity) * bytes;
}

/// Every plain-ring field of one segment (the kind table's last row: it claims any field the others leave).
class PlainRing final : public FieldStorage {
 public:
  PlainRing(const Segment& seg, std::vector<std::size_t> fields);
  const char* kind() const noexcept override { return "plain_ring"; }
  void copy_steps(const Segment& seg, uint64_t env, uint64_t first, uint64_t count, std::byte* const* outs,
                  uint64_t stride) const noexcept override;
  void gather(const Segment& seg, std::byte* const* outs, std::size_t length, const GatherRow* rows,
              std::size_t count, bool all_whole) const noexcept override;
  std::byte* direct_bytes(Segment& seg, std::size_t i, uint64_t env, uint64_t step) const noexcept override;
  bool direct() const noexcept override { return true; }
  uint64_t stored_bytes(const Segment& seg, uint64_t env, uint64_t lo, uint64_t hi) const noexcept override;
  std::unique_ptr<KindWriter> writer(Segment& seg, std::span<const uint64_t> envs,
                                     KindWriterMode mode) const override;

 private:
  std::vector<std::size_t> bytes_;  // per field of the kind: bytes per step
};

// -- The plain ring's geometry (its row of storage_kinds.cpp) --

/// Placement: [num_envs][capacity][bytes], kDataAlignBytes-aligned.
PlacedField place_plain_ring(const Field& field, std::size_t index, FieldPlacer& placer);
/// Nothing beyond the generic FieldDesc words (the file is zero).
void write_plain_ring(const PlacedField& placed, layout::FieldDesc& desc, std::byte* base, uint64_t num_envs,
                      uint64_t capacity);
/// Acceptance: no frame words, and num_envs x capacity x bytes of storage.
void accept_plain_ring(const layout::FieldDesc& desc, const Field& field, std::size_t index, const FieldAcceptor& a,
                       SegmentGeometry& g);

}  // namespace shmreplay::detail
