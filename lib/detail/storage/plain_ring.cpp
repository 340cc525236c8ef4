#include "detail/storage/plain_ring.hpp"

#include <cassert>
#include <cstring>

#include <fmt/format.h>

namespace shmreplay::detail {
namespace {

// A checkpoint load's store of plain fields (the Writer's push path stores them inline: plain_ring.hpp).
class PlainRingWriter final : public KindWriter {
 public:
  PlainRingWriter(Segment& seg, const std::vector<std::size_t>& fields) : seg_(&seg), fields_(fields) {}
  void store(std::size_t /*local*/, uint64_t env, uint64_t step, const std::byte* const* sources,
             bool /*ends_episode*/) noexcept override {
    const uint64_t cap = seg_->capacity();
    for (std::size_t i = 0; i < fields_.size(); ++i) {
      const uint64_t b = seg_->schema()[fields_[i]].bytes();
      std::memcpy(plain_slot(seg_->field_data(fields_[i]), b, cap, env, step), sources[i], b);
    }
  }

 private:
  Segment* seg_;  // a Buffer's Segment does not move (the Buffer holds it on the heap)
  std::vector<std::size_t> fields_;
};

}  // namespace

PlainRing::PlainRing(const Segment& seg, std::vector<std::size_t> fields) : FieldStorage(std::move(fields)) {
  for (const std::size_t f : this->fields()) bytes_.push_back(static_cast<std::size_t>(seg.schema()[f].bytes()));
}

void PlainRing::copy_steps(const Segment& seg, uint64_t env, uint64_t first, uint64_t count, std::byte* const* outs,
                           uint64_t stride) const noexcept {
  const uint64_t cap = seg.capacity();
  for (std::size_t i = 0; i < fields().size(); ++i) {
    const uint64_t b = bytes_[i];
    const std::byte* ring = seg.field_data(fields()[i]) + env * cap * b;
    uint64_t slot = first % cap;
    for (uint64_t k = 0; k < count; ++k) {
      std::memcpy(outs[i] + k * stride, ring + slot * b, b);
      if (++slot == cap) slot = 0;
    }
  }
}

void PlainRing::gather(const Segment& seg, std::byte* const* outs, std::size_t length, const GatherRow* rows,
                       std::size_t count, bool all_whole) const noexcept {
  const std::byte* bases[kMaxFields];
  const std::size_t n = fields().size();
  assert(n <= kMaxFields);
  for (std::size_t i = 0; i < n; ++i) bases[i] = seg.field_data(fields()[i]);
  gather_fields(bases, outs, bytes_.data(), n, length, seg.capacity(), rows, count, all_whole);
}

std::byte* PlainRing::direct_bytes(Segment& seg, std::size_t i, uint64_t env, uint64_t step) const noexcept {
  return plain_slot(seg.field_data(fields()[i]), bytes_[i], seg.capacity(), env, step);
}

uint64_t PlainRing::stored_bytes(const Segment& /*seg*/, uint64_t /*env*/, uint64_t lo, uint64_t hi) const noexcept {
  if (hi <= lo) return 0;
  uint64_t step_bytes = 0;
  for (const std::size_t b : bytes_) step_bytes += b;
  return (hi - lo) * step_bytes;  // one slot per step
}

std::unique_ptr<KindWriter> PlainRing::writer(Segment& seg, std::span<const uint64_t> /*envs*/,
                                              KindWriterMode /*mode*/) const {
  return std::make_unique<PlainRingWriter>(seg, fields());
}

}  // namespace shmreplay::detail

namespace shmreplay::detail {

PlacedField place_plain_ring(const Field& field, std::size_t /*index*/, FieldPlacer& placer) {
  PlacedField p;
  p.kind = layout::kStoragePlainRing;
  p.data_bytes = placer.mul(placer.steps(), field.bytes(),
                            fmt::format("the storage of field '{}' ({} bytes per step)", field.name, field.bytes()));
  p.data_offset = placer.take(p.data_bytes);
  return p;
}

void write_plain_ring(const PlacedField& /*placed*/, layout::FieldDesc& /*desc*/, std::byte* /*base*/,
                      uint64_t /*num_envs*/, uint64_t /*capacity*/) {}

void accept_plain_ring(const layout::FieldDesc& d, const Field& f, std::size_t /*index*/, const FieldAcceptor& a,
                       SegmentGeometry& /*g*/) {
  if (d.stack_frames != 0 || d.stack_index_offset != 0) {
    a.fail(Errc::corrupt, fmt::format("{} is not stacked but has stack_frames {} and stack_index_offset {}", a.what,
                                      d.stack_frames, d.stack_index_offset));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(a.steps, f.bytes(), &bytes) || d.data_bytes != bytes) {
    a.fail(Errc::corrupt, fmt::format("{} has {} bytes of storage, expected {} envs x {} steps x {} bytes", a.what,
                                      d.data_bytes, a.num_envs, a.capacity, f.bytes()));
  }
  a.place(fmt::format("the storage of {}", a.what), d.data_offset, d.data_bytes);
}

}  // namespace shmreplay::detail
