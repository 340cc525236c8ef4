// detail/storage/frame_ring.hpp: the frame ring, the storage kind of a stacked field (layout 1.6;
// docs/design/stacks.md): per env a ring of frames and per step a frame-index word, a step's stack being the
// `depth` frames up to its index. A step that continues its predecessor's stack stores one new frame, so a stack of
// K frames costs about one frame. The protocol's words and both of its halves are in detail/protocol/stacks.hpp;
// this file is the kind's face on the seam (field_storage.hpp).
//
// A stack shares its frames with its neighbours', so a stored step's stack cannot be rewritten in place
// (why_not_direct), and a reserved step's stacked fields are staged and stored at commit. Overwriting frames loses
// the oldest steps' stacks before their slots are reclaimed: the store raises EnvControl::stacks_intact_from first.
#pragma once

#include "detail/storage/field_geometry.hpp"
#include "detail/storage/field_storage.hpp"

namespace shmreplay::detail {

/// Every stacked field of one segment, in Segment::stacks() order (which is schema order).
class FrameRing final : public FieldStorage {
 public:
  FrameRing(const Segment& seg, std::vector<std::size_t> fields);
  const char* kind() const noexcept override { return "frame_ring"; }
  void copy_steps(const Segment& seg, uint64_t env, uint64_t first, uint64_t count, std::byte* const* outs,
                  uint64_t stride) const noexcept override;
  void gather(const Segment& seg, std::byte* const* outs, std::size_t length, const GatherRow* rows,
              std::size_t count, bool all_whole) const noexcept override;
  std::string why_not_direct(const Schema& schema, std::size_t i) const override;
  uint64_t stored_bytes(const Segment& seg, uint64_t env, uint64_t lo, uint64_t hi) const noexcept override;
  std::unique_ptr<KindWriter> writer(Segment& seg, std::span<const uint64_t> envs,
                                     KindWriterMode mode) const override;
};

// -- The stack rules (frame_rules.cpp) --

/// The stack shape of stacked field `field` (schema index `index`): depth, frame_bytes, outer and inner_bytes of
/// its StackGeometry; the offsets and ring size are left 0. Precondition: the field is validated and stacked.
StackGeometry stack_shape(const Field& field, std::size_t index) noexcept;

/// Non-continuing stacks per env ring that create's default reserve holds at no loss: 1 + capacity / 128.
uint64_t default_stack_restarts(uint64_t capacity) noexcept;

/// Frames per env ring of a stacked field of `depth` frames: capacity + (depth - 1) x (1 + restarts) (one frame per
/// stored step, the depth - 1 older frames of the oldest stored step, and depth - 1 more for each of `restarts`
/// stacks that do not continue their predecessor's), one more when that is depth x capacity (so that an older
/// library never takes the rings for an unstacked field's storage). Throws Error(invalid_argument) when it
/// overflows.
uint64_t stack_ring_frames(uint64_t capacity, uint64_t depth, uint64_t restarts);

// -- The frame ring's geometry (its row of storage_kinds.cpp) --

/// Placement: the field's frame rings, then its frame-index words, each kDataAlignBytes-aligned.
PlacedField place_frame_ring(const Field& field, std::size_t index, FieldPlacer& placer);
/// The FieldDesc words of a placed frame ring (stack, stack_frames, stack_index_offset) and its index words.
void write_frame_ring(const PlacedField& placed, layout::FieldDesc& desc, std::byte* base, uint64_t num_envs,
                      uint64_t capacity);
/// Acceptance: frame rings of at least the smallest reserve create makes, and one index word per ring slot; adds
/// the field's StackGeometry to `g`.
void accept_frame_ring(const layout::FieldDesc& desc, const Field& field, std::size_t index, const FieldAcceptor& a,
                       SegmentGeometry& g);

}  // namespace shmreplay::detail
