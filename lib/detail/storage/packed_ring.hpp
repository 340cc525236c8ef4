// detail/storage/packed_ring.hpp: the compressed fields' storage kind (layout 1.10, kStorageCompressed;
// docs/design/compression.md): per env a byte ring of compressed frame records with a descriptor per frame, and per
// step a frame-index word, a step's field being the `depth` frames up to its index (one frame for an unstacked
// field). The protocol's words and both of its halves are in detail/protocol/packed_frames.hpp; this file is the
// kind's face on the seam (field_storage.hpp) and its geometry.
//
// A record's bytes are shared with nothing, but they are compressed: a stored step's field cannot be rewritten in
// place (why_not_direct), and a reserved step's compressed fields are staged and stored at commit. Overwriting
// records (the byte budget) or descriptors loses the oldest steps before their slots are reclaimed: the store raises
// EnvControl::stacks_intact_from first.
#pragma once

#include "detail/storage/field_geometry.hpp"
#include "detail/storage/field_storage.hpp"

namespace shmreplay::detail {

/// Every compressed field of one segment, in Segment::packed() order (which is schema order).
class PackedRing final : public FieldStorage {
 public:
  PackedRing(const Segment& seg, std::vector<std::size_t> fields);
  const char* kind() const noexcept override { return "compressed"; }
  void copy_steps(const Segment& seg, uint64_t env, uint64_t first, uint64_t count, std::byte* const* outs,
                  uint64_t stride) const noexcept override;
  void gather(const Segment& seg, std::byte* const* outs, std::size_t length, const GatherRow* rows,
              std::size_t count, bool all_whole) const noexcept override;
  std::string why_not_direct(const Schema& schema, std::size_t i) const override;
  uint64_t stored_bytes(const Segment& seg, uint64_t env, uint64_t lo, uint64_t hi) const noexcept override;
  std::unique_ptr<KindWriter> writer(Segment& seg, std::span<const uint64_t> envs,
                                     KindWriterMode mode) const override;
};

/// The frames of compressed field `field` (schema index `index`): its stack shape (depth 1 for an unstacked field);
/// offsets and ring sizes left 0.
StackGeometry packed_shape(const Field& field, std::size_t index) noexcept;

/// Frame descriptors per env of a compressed field of `depth` frames per step: a stacked field's frame-ring count
/// (stack_ring_frames), capacity + 1 for an unstacked one, and kPackedKeyEvery - 1 more (the frames the oldest
/// step's are coded against).
uint64_t packed_frames(uint64_t capacity, uint64_t depth, uint64_t restarts);

/// The least byte ring an env may have: two steps' frames as pushed, with their alignment.
uint64_t packed_min_ring(const StackGeometry& st) noexcept;

// -- The geometry (its row of storage_kinds.cpp) --

/// Placement: the env controls, the descriptors and the byte rings (the field's storage), then its frame-index words.
PlacedField place_packed_ring(const Field& field, std::size_t index, FieldPlacer& placer);
/// The FieldDesc words of a placed compressed field (stack, stack_frames, stack_index_offset) and its atomics.
void write_packed_ring(const PlacedField& placed, layout::FieldDesc& desc, std::byte* base, uint64_t num_envs,
                       uint64_t capacity);
/// Acceptance: descriptors of at least the smallest reserve create makes, byte rings of at least packed_min_ring,
/// one index word per ring slot; adds the field's PackedGeometry to `g`.
void accept_packed_ring(const layout::FieldDesc& desc, const Field& field, std::size_t index, const FieldAcceptor& a,
                        SegmentGeometry& g);

}  // namespace shmreplay::detail
