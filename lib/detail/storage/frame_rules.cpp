// detail/storage/frame_rules.cpp: the shape of a stacked field's storage (layout 1.6), which the frame ring's
// placement and acceptance (frame_ring.cpp) both derive from the field: how many frames a stack has, how a frame
// sits in it, and how many frames each env's ring holds (docs/design/stacks.md).
#include <fmt/format.h>

#include "detail/storage/frame_ring.hpp"

namespace shmreplay::detail {

StackGeometry stack_shape(const Field& field, std::size_t index) noexcept {
  StackGeometry st;
  const uint32_t axis = *field.stack_axis;
  st.field = index;
  st.depth = field.shape[axis];
  st.frame_bytes = field.bytes() / st.depth;
  st.outer = 1;
  for (uint32_t d = 0; d < axis; ++d) st.outer *= field.shape[d];
  st.inner_bytes = st.frame_bytes / st.outer;
  return st;
}

uint64_t default_stack_restarts(uint64_t capacity) noexcept { return 1 + capacity / 128; }

uint64_t stack_ring_frames(uint64_t capacity, uint64_t depth, uint64_t restarts) {
  uint64_t extra = 0;
  uint64_t frames = 0;
  if (restarts == UINT64_MAX || __builtin_mul_overflow(depth - 1, restarts + 1, &extra) ||
      __builtin_add_overflow(capacity, extra, &frames)) {
    throw Error(Errc::invalid_argument,
                fmt::format("a stacked field of {} frames with {} restarts per env overflows 64 bits of frames", depth,
                            restarts));
  }
  // Never exactly depth x capacity frames (restarts = capacity - 1, or capacity 2 with one restart): then the rings
  // would have the bytes an unstacked field has, and a 1.5 library, which accepts a 1.6 segment (a newer minor) and
  // checks only those bytes, would take the frames for whole stacks and the field for an unstacked one. One more
  // frame makes it refuse the segment as corrupt (docs/design/stacks.md, "Older libraries").
  if (frames / depth == capacity && frames % depth == 0 && frames != UINT64_MAX) ++frames;
  return frames;
}

}  // namespace shmreplay::detail
