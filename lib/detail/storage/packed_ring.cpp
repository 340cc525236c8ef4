// detail/storage/packed_ring.cpp: the compressed kind's face on the seam and its geometry (packed_ring.hpp).
#include "detail/storage/packed_ring.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "detail/protocol/packed_frames.hpp"
#include "detail/protocol/stacks.hpp"
#include "detail/storage/frame_ring.hpp"

namespace shmreplay::detail {
namespace {

// The most rows a gather sorts (the Sampler's chunks hold at most 256: sampler_gather.hpp); more are copied in
// their own order.
constexpr std::size_t kMaxGatherRows = 256;

// The stores of one Writer (or one load) into the compressed fields of its envs: per env its cursors and raw
// copies, and one scratch (packed_frames.hpp: PackedWriterEnv, PackedScratch, store_packed).
class PackedRingWriter final : public KindWriter {
 public:
  PackedRingWriter(Segment& seg, std::span<const uint64_t> envs, KindWriterMode mode)
      : seg_(&seg), mode_(mode), scratch_(seg), pushed_(envs.size(), 0) {
    envs_.reserve(envs.size());
    for (const uint64_t env : envs) {
      // A Writer goes on after the newest published step's record (a predecessor's unpublished records are written
      // again); a load restarts each env before its first step (restart()).
      // acquire: pairs with publish_step's release store of head
      const uint64_t head = mode == KindWriterMode::writer ? seg.env_control(env).head.load(std::memory_order_acquire)
                                                           : 0;
      envs_.push_back(make_packed_env(seg, env, head));
    }
  }

  void store(std::size_t local, uint64_t env, uint64_t step, const std::byte* const* sources,
             bool ends_episode) noexcept override {
    const ContinuityTest t = mode_ == KindWriterMode::load
                                 ? ContinuityTest{pushed_[local] != 0, true, false}
                                 : continuity_test(*seg_, env, step, pushed_[local] != 0, [&] { return ends_episode; });
    const bool restarted = store_packed(*seg_, env, step, sources, envs_[local], scratch_, t.may_continue, t.compare);
    if (t.audit && restarted) {
      ++flagless_restarts_;
      // The env's count, for the Inspector, `info` and the metrics (one writer per env: a relaxed add, rarely taken).
      seg_->env_control(env).stack_flagless_restarts.fetch_add(1, std::memory_order_relaxed);
    }
    pushed_[local] = 1;
  }

  void restart(std::size_t local, uint64_t first_step) noexcept override {
    for (PackedCursor& c : envs_[local].cursors) c = PackedCursor{0, 0, 0, first_step, false};
    pushed_[local] = 0;
  }

  uint64_t flagless_restarts() const noexcept override { return flagless_restarts_; }

 private:
  Segment* seg_;  // a Buffer's Segment does not move (the Buffer holds it on the heap)
  KindWriterMode mode_;
  PackedScratch scratch_;
  std::vector<PackedWriterEnv> envs_;  // [env]
  std::vector<uint8_t> pushed_;        // [env]: a step was stored
  uint64_t flagless_restarts_ = 0;
};

}  // namespace

PackedRing::PackedRing(const Segment& seg, std::vector<std::size_t> fields) : FieldStorage(std::move(fields)) {
  assert(this->fields().size() == seg.packed().size());
  for (std::size_t i = 0; i < this->fields().size(); ++i) assert(seg.packed()[i].stack.field == this->fields()[i]);
  (void)seg;
}

void PackedRing::copy_steps(const Segment& seg, uint64_t env, uint64_t first, uint64_t count, std::byte* const* outs,
                            uint64_t stride) const noexcept {
  for (std::size_t i = 0; i < fields().size(); ++i) {
    const PackedFault f = copy_packed_steps(seg, i, env, first, count, outs[i], stride);
    if (f.fault != FrameFault::none) note_storage_fault({fields()[i], env, f.step, f.frame, frame_fault_text(f.fault)});
  }
}

void PackedRing::gather(const Segment& seg, std::byte* const* outs, std::size_t length, const GatherRow* rows,
                        std::size_t count, bool /*all_whole*/) const noexcept {
  // The rows in (env, start) order, so that a row that overlaps an earlier one of its env (overlapping sequences of
  // one call) copies the steps they share from that row's bytes and decodes only the rest.
  uint16_t order[kMaxGatherRows];
  const std::size_t n = std::min(count, kMaxGatherRows);
  for (std::size_t k = 0; k < n; ++k) order[k] = static_cast<uint16_t>(k);
  std::sort(order, order + n, [&](uint16_t a, uint16_t b) {
    return rows[a].env != rows[b].env ? rows[a].env < rows[b].env : rows[a].start < rows[b].start;
  });
  for (std::size_t i = 0; i < fields().size(); ++i) {
    const uint64_t bytes = seg.schema()[fields()[i]].bytes();
    const GatherRow* prev = nullptr;  // the row before in that order
    for (std::size_t j = 0; j < count; ++j) {
      const GatherRow& r = rows[j < n ? order[j] : j];
      std::byte* dst = outs[i] + r.row * length * bytes;
      uint64_t shared = 0;  // leading steps of r that `prev` holds
      if (prev != nullptr && prev->env == r.env && r.start >= prev->start && r.start < prev->start + prev->steps) {
        shared = std::min(prev->start + prev->steps - r.start, r.steps);
        std::memcpy(dst, outs[i] + (prev->row * length + (r.start - prev->start)) * bytes, shared * bytes);
      }
      if (shared < r.steps) {
        const PackedFault f = copy_packed_steps(seg, i, r.env, r.start + shared, r.steps - shared,
                                                dst + shared * bytes, bytes,
                                                shared > 0 ? dst + (shared - 1) * bytes : nullptr);
        if (f.fault != FrameFault::none) {
          note_storage_fault({fields()[i], r.env, f.step, f.frame, frame_fault_text(f.fault)});
        }
      }
      if (r.steps < length) std::memset(dst + r.steps * bytes, 0, (length - r.steps) * bytes);
      if (prev == nullptr || prev->env != r.env || r.start + r.steps > prev->start + prev->steps) prev = &r;
    }
  }
}

uint64_t PackedRing::stored_bytes(const Segment& seg, uint64_t env, uint64_t lo, uint64_t hi) const noexcept {
  if (hi <= lo) return 0;
  // Per field: an index word per step, and the descriptors and records of the frames the steps span (at most the
  // ring and its descriptors).
  uint64_t bytes = 0;
  for (std::size_t p = 0; p < seg.packed().size(); ++p) {
    const PackedGeometry& g = seg.packed()[p];
    const std::atomic<uint64_t>* index = seg.packed_index(p, env);
    const layout::PackedFrameDesc* descs = seg.packed_descs(p, env);
    const uint64_t last = index[(hi - 1) % seg.capacity()].load(std::memory_order_relaxed);
    const uint64_t first_step_newest = index[lo % seg.capacity()].load(std::memory_order_relaxed);
    const uint64_t first = first_step_newest + 1 >= g.stack.depth ? first_step_newest + 1 - g.stack.depth : 0;
    const uint64_t frames = last >= first ? std::min(last - first + 1, g.stack.frames) : 0;
    const layout::PackedFrameDesc& a = descs[(last + 1 - frames) % g.stack.frames];
    const layout::PackedFrameDesc& b = descs[last % g.stack.frames];
    const uint64_t from = a.pos.load(std::memory_order_relaxed);
    const uint64_t to = b.pos.load(std::memory_order_relaxed) + (b.meta.load(std::memory_order_relaxed) & 0xffffffffu);
    bytes += (hi - lo) * sizeof(uint64_t) + frames * sizeof(layout::PackedFrameDesc) +
             (to >= from ? std::min(to - from, g.ring_bytes) : 0);
  }
  return bytes;
}

std::string PackedRing::why_not_direct(const Schema& schema, std::size_t i) const {
  const Field& f = schema[fields()[i]];
  return fmt::format("field '{}' ({}) is compressed: its frames are records of their own size", f.name, f.to_string());
}

std::unique_ptr<KindWriter> PackedRing::writer(Segment& seg, std::span<const uint64_t> envs,
                                               KindWriterMode mode) const {
  return std::make_unique<PackedRingWriter>(seg, envs, mode);
}

// -- geometry --

StackGeometry packed_shape(const Field& field, std::size_t index) noexcept {
  if (field.stacked()) return stack_shape(field, index);
  StackGeometry st;
  st.field = index;
  st.depth = 1;
  st.frame_bytes = field.bytes();
  st.outer = 1;
  st.inner_bytes = st.frame_bytes;
  return st;
}

uint64_t packed_frames(uint64_t capacity, uint64_t depth, uint64_t restarts) {
  // kPackedKeyEvery - 1 more: the oldest step's frames may be coded against as many older ones.
  return (depth > 1 ? stack_ring_frames(capacity, depth, restarts) : capacity + 1) + kPackedKeyEvery - 1;
}

uint64_t packed_min_ring(const StackGeometry& st) noexcept {
  // A step's frames as pushed, each aligned to 8 bytes and possibly moved past the ring's end: two of them.
  return (2 * st.depth * (2 * st.frame_bytes + 8) + 63) / 64 * 64;
}

namespace {

// The bytes of field `f`'s frames as pushed over its descriptors (the budget's share).
uint64_t raw_bytes(const Field& f, uint64_t capacity, uint64_t restarts) {
  const StackGeometry st = packed_shape(f, 0);
  return packed_frames(capacity, st.depth, restarts) * st.frame_bytes;
}

// One env's byte ring for field `field`: its share of the budget (by its frames' bytes as pushed), or those bytes
// over the expected ratio; at least packed_min_ring.
uint64_t ring_bytes_for(const Field& field, const StackGeometry& st, const FieldPlacer& placer) {
  const CompressionBudget& b = placer.compression_budget();
  const uint64_t mine = raw_bytes(field, placer.capacity(), placer.stack_restarts());
  const uint64_t least = packed_min_ring(st);
  if (b.bytes == 0) {
    const double ratio = b.expected_ratio > 0 ? b.expected_ratio : kDefaultExpectedCompression;
    return std::max(least, static_cast<uint64_t>(static_cast<double>(mine) / ratio) / 64 * 64);
  }
  double all = 0;
  for (const Field& f : placer.schema().fields()) {
    if (f.compressed()) all += static_cast<double>(raw_bytes(f, placer.capacity(), placer.stack_restarts()));
  }
  const double share = static_cast<double>(b.bytes) * static_cast<double>(mine) / all;
  const uint64_t ring = static_cast<uint64_t>(share / static_cast<double>(placer.num_envs())) / 64 * 64;
  if (ring < least) {
    throw Error(Errc::invalid_argument,
                fmt::format("compressed_bytes {} gives field '{}' ({}) {} bytes per env, fewer than the {} it needs "
                            "(two steps' frames as pushed); give at least {} in all",
                            b.bytes, field.name, field.to_string(), ring, least,
                            static_cast<uint64_t>(static_cast<double>(least) * static_cast<double>(placer.num_envs()) *
                                                  all / static_cast<double>(mine)) + 64 * placer.num_envs()));
  }
  return ring;
}

}  // namespace

PlacedField place_packed_ring(const Field& field, std::size_t index, FieldPlacer& placer) {
  const std::string what = fmt::format("the storage of field '{}' ({} bytes per step)", field.name, field.bytes());
  if (field.frame_bytes() > (1u << 30)) {
    throw Error(Errc::invalid_argument, fmt::format("field '{}' ({}) has frames of {} bytes; a compressed field's "
                                                    "frames are at most 2^30 bytes",
                                                    field.name, field.to_string(), field.frame_bytes()));
  }
  PackedGeometry g;
  g.stack = packed_shape(field, index);
  g.stack.frames = packed_frames(placer.capacity(), g.stack.depth, placer.stack_restarts());
  g.ring_bytes = ring_bytes_for(field, g.stack, placer);
  g.codec = field.codec;
  g.level = field.codec_level;
  PlacedField p;
  p.kind = layout::kStorageCompressed;
  const uint64_t envs = placer.num_envs();
  g.controls_offset = placer.take(placer.mul(envs, sizeof(layout::PackedEnvControl), what));
  const uint64_t descs = placer.mul(placer.mul(envs, g.stack.frames, what), sizeof(layout::PackedFrameDesc), what);
  g.stack.frames_offset = placer.take((descs + 63) / 64 * 64);
  g.rings_offset = placer.take(placer.mul(envs, g.ring_bytes, what));
  p.data_offset = g.controls_offset;
  p.data_bytes = g.rings_offset + envs * g.ring_bytes - g.controls_offset;
  g.stack.index_offset = placer.take(placer.mul(placer.steps(), sizeof(uint64_t), what));
  p.packed = g;
  return p;
}

void write_packed_ring(const PlacedField& placed, layout::FieldDesc& d, std::byte* base, uint64_t num_envs,
                       uint64_t capacity) {
  const PackedGeometry& g = *placed.packed;
  d.stack_frames = g.stack.frames;
  d.stack_index_offset = g.stack.index_offset;
  // The file came from fallocate (zero bytes): construct the atomics in place.
  auto* controls = reinterpret_cast<layout::PackedEnvControl*>(base + g.controls_offset);
  for (uint64_t e = 0; e < num_envs; ++e) new (controls + e) layout::PackedEnvControl{};
  auto* descs = reinterpret_cast<layout::PackedFrameDesc*>(base + g.stack.frames_offset);
  for (uint64_t i = 0; i < num_envs * g.stack.frames; ++i) {
    new (descs + i) layout::PackedFrameDesc{};
    descs[i].frame.store(UINT64_MAX, std::memory_order_relaxed);  // holds no frame yet
  }
  auto* index = reinterpret_cast<std::atomic<uint64_t>*>(base + g.stack.index_offset);
  for (uint64_t i = 0; i < num_envs * capacity; ++i) new (index + i) std::atomic<uint64_t>(0);
}

void accept_packed_ring(const layout::FieldDesc& d, const Field& f, std::size_t index, const FieldAcceptor& a,
                        SegmentGeometry& g) {
  PackedGeometry pg;
  pg.stack = packed_shape(f, index);
  pg.codec = f.codec;
  pg.level = f.codec_level;
  const uint64_t least = packed_frames(a.capacity, pg.stack.depth, 1);
  if (d.stack_frames < least) {
    a.fail(Errc::corrupt, fmt::format("{} ({}) has {} frame descriptors per env, expected at least {}", a.what,
                                      f.to_string(), d.stack_frames, least));
  }
  pg.stack.frames = d.stack_frames;
  uint64_t controls = 0;
  uint64_t descs = 0;
  uint64_t index_bytes = 0;
  if (__builtin_mul_overflow(a.num_envs, sizeof(layout::PackedEnvControl), &controls) ||
      __builtin_mul_overflow(a.num_envs, pg.stack.frames, &descs) ||
      __builtin_mul_overflow(descs, sizeof(layout::PackedFrameDesc), &descs) || descs > UINT64_MAX - 63 ||
      (descs = (descs + 63) / 64 * 64, false) ||
      __builtin_mul_overflow(a.steps, sizeof(uint64_t), &index_bytes) || d.data_bytes < controls + descs ||
      (d.data_bytes - controls - descs) % a.num_envs != 0 || (d.data_bytes - controls - descs) / a.num_envs % 64 != 0 ||
      (d.data_bytes - controls - descs) / a.num_envs < packed_min_ring(pg.stack)) {
    a.fail(Errc::corrupt, fmt::format("{} ({}) has {} bytes of storage, which is not {} envs x ({} + {} frames x {} + "
                                      "a byte ring of at least {} bytes, a multiple of 64)",
                                      a.what, f.to_string(), d.data_bytes, a.num_envs,
                                      sizeof(layout::PackedEnvControl), pg.stack.frames,
                                      sizeof(layout::PackedFrameDesc), packed_min_ring(pg.stack)));
  }
  pg.ring_bytes = (d.data_bytes - controls - descs) / a.num_envs;
  a.place(fmt::format("the frame-index words of {}", a.what), d.stack_index_offset, index_bytes);
  a.place(fmt::format("the storage of {}", a.what), d.data_offset, d.data_bytes);
  pg.controls_offset = d.data_offset;
  pg.stack.frames_offset = d.data_offset + controls;
  pg.rings_offset = pg.stack.frames_offset + descs;
  pg.stack.index_offset = d.stack_index_offset;
  g.packed.push_back(pg);
}

}  // namespace shmreplay::detail
