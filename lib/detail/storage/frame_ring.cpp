#include "detail/storage/frame_ring.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <new>

#include <fmt/format.h>

#include "detail/protocol/stacks.hpp"

namespace shmreplay::detail {
namespace {

// The stores of one Writer (or one load) into the frame rings of its envs: a cursor per (env, stacked field), and
// per env whether a step was stored (stacks.hpp: StackCursor, continuity_test, store_stacks).
class FrameRingWriter final : public KindWriter {
 public:
  FrameRingWriter(Segment& seg, std::span<const uint64_t> envs, KindWriterMode mode)
      : seg_(&seg), fields_(seg.stacks().size()), mode_(mode), pushed_(envs.size(), 0) {
    cursors_.reserve(envs.size() * fields_);
    for (const uint64_t env : envs) {
      // A Writer goes on after the newest published step's frames (a predecessor's unpublished frames are written
      // again); a load restarts each env before its first step (restart()).
      // acquire: pairs with publish_step's release store of head
      const uint64_t head = mode == KindWriterMode::writer ? seg.env_control(env).head.load(std::memory_order_acquire)
                                                           : 0;
      for (std::size_t i = 0; i < fields_; ++i) cursors_.push_back(resume_stack(seg, i, env, head));
    }
  }

  void store(std::size_t local, uint64_t env, uint64_t step, const std::byte* const* sources,
             bool ends_episode) noexcept override {
    // A load compares every step after its first (nothing of the file is trusted); a Writer as the segment's
    // continuity rule says.
    const ContinuityTest t = mode_ == KindWriterMode::load
                                 ? ContinuityTest{pushed_[local] != 0, true, false}
                                 : continuity_test(*seg_, env, step, pushed_[local] != 0, [&] { return ends_episode; });
    const bool restarted =
        store_stacks(*seg_, env, step, sources, cursors_.data() + local * fields_, t.may_continue, t.compare);
    if (t.audit && restarted) {
      ++flagless_restarts_;
      // The env's count, for the Inspector, `info` and the metrics (one writer per env: a relaxed add, rarely taken).
      seg_->env_control(env).stack_flagless_restarts.fetch_add(1, std::memory_order_relaxed);
    }
    pushed_[local] = 1;
  }

  void restart(std::size_t local, uint64_t first_step) noexcept override {
    for (std::size_t i = 0; i < fields_; ++i) cursors_[local * fields_ + i] = StackCursor{0, first_step};
    pushed_[local] = 0;
  }

  uint64_t flagless_restarts() const noexcept override { return flagless_restarts_; }

 private:
  Segment* seg_;  // a Buffer's Segment does not move (the Buffer holds it on the heap)
  std::size_t fields_;
  KindWriterMode mode_;
  std::vector<StackCursor> cursors_;  // [env][stacked field]
  std::vector<uint8_t> pushed_;       // [env]: a step was stored (the episodes rule compares the first all the same)
  uint64_t flagless_restarts_ = 0;
};

}  // namespace

FrameRing::FrameRing(const Segment& seg, std::vector<std::size_t> fields) : FieldStorage(std::move(fields)) {
  assert(this->fields().size() == seg.stacks().size());
  for (std::size_t i = 0; i < this->fields().size(); ++i) assert(seg.stacks()[i].field == this->fields()[i]);
  (void)seg;
}

void FrameRing::copy_steps(const Segment& seg, uint64_t env, uint64_t first, uint64_t count, std::byte* const* outs,
                           uint64_t stride) const noexcept {
  for (std::size_t i = 0; i < fields().size(); ++i) copy_step_stacks(seg, i, env, first, count, outs[i], stride);
}

void FrameRing::gather(const Segment& seg, std::byte* const* outs, std::size_t length, const GatherRow* rows,
                       std::size_t count, bool /*all_whole*/) const noexcept {
  for (std::size_t i = 0; i < fields().size(); ++i) {
    gather_stacks(seg, i, outs[i], seg.schema()[fields()[i]].bytes(), length, rows, count);
  }
}

uint64_t FrameRing::stored_bytes(const Segment& seg, uint64_t env, uint64_t lo, uint64_t hi) const noexcept {
  if (hi <= lo) return 0;
  // Per field: an index word per step, and the frames the steps' stacks span (frames [index(lo) - K + 1,
  // index(hi - 1)], at most the ring).
  uint64_t bytes = 0;
  for (std::size_t k = 0; k < seg.stacks().size(); ++k) {
    const StackGeometry& st = seg.stacks()[k];
    const std::atomic<uint64_t>* index = seg.frame_index(k, env);
    const uint64_t first = index[lo % seg.capacity()].load(std::memory_order_relaxed);
    const uint64_t last = index[(hi - 1) % seg.capacity()].load(std::memory_order_relaxed);
    const uint64_t frames = last >= first ? std::min(last - first + st.depth, st.frames) : std::min(st.depth, st.frames);
    bytes += (hi - lo) * sizeof(uint64_t) + frames * st.frame_bytes;
  }
  return bytes;
}

std::string FrameRing::why_not_direct(const Schema& schema, std::size_t i) const {
  const Field& f = schema[fields()[i]];
  return fmt::format("field '{}' ({}) is stacked, and its frames are shared with the steps before and after it",
                     f.name, f.to_string());
}

std::unique_ptr<KindWriter> FrameRing::writer(Segment& seg, std::span<const uint64_t> envs,
                                              KindWriterMode mode) const {
  return std::make_unique<FrameRingWriter>(seg, envs, mode);
}

}  // namespace shmreplay::detail

namespace shmreplay::detail {

PlacedField place_frame_ring(const Field& field, std::size_t index, FieldPlacer& placer) {
  const std::string what = fmt::format("the storage of field '{}' ({} bytes per step)", field.name, field.bytes());
  StackGeometry st = stack_shape(field, index);
  st.frames = stack_ring_frames(placer.capacity(), st.depth, placer.stack_restarts());
  PlacedField p;
  p.kind = layout::kStorageFrameRing;
  p.data_bytes = placer.mul(placer.mul(placer.num_envs(), st.frames, what), st.frame_bytes, what);
  p.data_offset = placer.take(p.data_bytes);
  st.frames_offset = p.data_offset;
  st.index_offset = placer.take(placer.mul(placer.steps(), sizeof(uint64_t), what));
  p.stack = st;
  return p;
}

void write_frame_ring(const PlacedField& placed, layout::FieldDesc& d, std::byte* base, uint64_t num_envs,
                      uint64_t capacity) {
  const StackGeometry& st = *placed.stack;
  d.stack_frames = st.frames;
  d.stack_index_offset = st.index_offset;
  // The file came from fallocate (zero bytes): construct the index words in place.
  auto* index = reinterpret_cast<std::atomic<uint64_t>*>(base + st.index_offset);
  for (uint64_t i = 0; i < num_envs * capacity; ++i) new (index + i) std::atomic<uint64_t>(0);
}

void accept_frame_ring(const layout::FieldDesc& d, const Field& f, std::size_t index, const FieldAcceptor& a,
                       SegmentGeometry& g) {
  if (d.stack == 0) {  // the kind of a stacked field with the field's stacked axis gone
    a.fail(Errc::corrupt, fmt::format("{} is not stacked but has stack_frames {} and stack_index_offset {}", a.what,
                                      d.stack_frames, d.stack_index_offset));
  }
  // Frame rings of at least the smallest reserve create makes, and one index word per ring slot.
  StackGeometry st = stack_shape(f, index);
  const uint64_t least = stack_ring_frames(a.capacity, st.depth, 1);
  if (d.stack_frames < least) {
    a.fail(Errc::corrupt, fmt::format("{} ({}) has {} frames per env, expected at least {}", a.what, f.to_string(),
                                      d.stack_frames, least));
  }
  st.frames = d.stack_frames;
  uint64_t bytes = 0;
  uint64_t index_bytes = 0;
  if (__builtin_mul_overflow(a.num_envs, st.frames, &bytes) || __builtin_mul_overflow(bytes, st.frame_bytes, &bytes) ||
      d.data_bytes != bytes || __builtin_mul_overflow(a.steps, sizeof(uint64_t), &index_bytes)) {
    a.fail(Errc::corrupt, fmt::format("{} has {} bytes of frames, expected {} envs x {} frames x {} bytes", a.what,
                                      d.data_bytes, a.num_envs, st.frames, st.frame_bytes));
  }
  a.place(fmt::format("the frame-index words of {}", a.what), d.stack_index_offset, index_bytes);
  a.place(fmt::format("the storage of {}", a.what), d.data_offset, d.data_bytes);
  st.frames_offset = d.data_offset;
  st.index_offset = d.stack_index_offset;
  g.stacks.push_back(st);
}

}  // namespace shmreplay::detail
