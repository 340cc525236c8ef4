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
  std::unique_ptr<KindWriter> writer(Segment& seg, std::span<const uint64_t> envs,
                                     KindWriterMode mode) const override;
};

}  // namespace shmreplay::detail
