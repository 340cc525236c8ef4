// tests/storage/xor_ring.hpp: a storage kind that only tests use: a plain ring whose stored bytes are the pushed
// bytes XOR kXorKey. Deliberately simple; its point is that every path that moves a field's bytes (push, reserve and
// commit, sample, peek, read_steps, save, load) must go through the kind to return the pushed bytes: a path that
// read or wrote the ring directly would return them XORed. It claims the fields whose name starts with "xor_", once
// registered (register_xor_ring). It is the whole cost of a new kind: this file, one row, and the tests.
#pragma once

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "detail/storage/plain_ring.hpp"
#include "detail/storage/storage_kinds.hpp"

namespace shmreplay::test {

inline constexpr uint32_t kXorRing = shmreplay::layout::kStorageTestKinds + 1;
inline constexpr std::byte kXorKey{0xa5};

inline void xor_copy(std::byte* dst, const std::byte* src, uint64_t n) noexcept {
  for (uint64_t i = 0; i < n; ++i) dst[i] = src[i] ^ kXorKey;
}

class XorRing final : public shmreplay::detail::FieldStorage {
 public:
  XorRing(const shmreplay::Segment&, std::vector<std::size_t> fields) : FieldStorage(std::move(fields)) {}
  const char* kind() const noexcept override { return "xor_ring"; }

  void copy_steps(const shmreplay::Segment& seg, uint64_t env, uint64_t first, uint64_t count, std::byte* const* outs,
                  uint64_t stride) const noexcept override {
    for (std::size_t i = 0; i < fields().size(); ++i) {
      const uint64_t b = seg.schema()[fields()[i]].bytes();
      for (uint64_t k = 0; k < count; ++k) xor_copy(outs[i] + k * stride, slot(seg, i, env, first + k), b);
    }
  }

  void gather(const shmreplay::Segment& seg, std::byte* const* outs, std::size_t length,
              const shmreplay::detail::GatherRow* rows, std::size_t count, bool) const noexcept override {
    for (std::size_t i = 0; i < fields().size(); ++i) {
      const uint64_t b = seg.schema()[fields()[i]].bytes();
      for (std::size_t r = 0; r < count; ++r) {
        std::byte* dst = outs[i] + rows[r].row * length * b;
        for (uint64_t k = 0; k < rows[r].steps; ++k) xor_copy(dst + k * b, slot(seg, i, rows[r].env, rows[r].start + k), b);
        std::memset(dst + rows[r].steps * b, 0, (length - rows[r].steps) * b);
      }
    }
  }

  uint64_t stored_bytes(const shmreplay::Segment& seg, uint64_t, uint64_t lo, uint64_t hi) const noexcept override {
    uint64_t step_bytes = 0;
    for (const std::size_t f : fields()) step_bytes += seg.schema()[f].bytes();
    return hi > lo ? (hi - lo) * step_bytes : 0;
  }

  std::string why_not_direct(const shmreplay::Schema& schema, std::size_t i) const override {
    return fmt::format("field '{}' is stored by the test kind xor_ring, which keeps no pushed bytes to rewrite",
                       schema[fields()[i]].name);
  }

  std::unique_ptr<shmreplay::detail::KindWriter> writer(shmreplay::Segment& seg, std::span<const uint64_t>,
                                                        shmreplay::detail::KindWriterMode) const override {
    return std::make_unique<Writer>(seg, *this);
  }

 private:
  const std::byte* slot(const shmreplay::Segment& seg, std::size_t i, uint64_t env, uint64_t step) const noexcept {
    const std::size_t f = fields()[i];
    return seg.field_data(f) + (env * seg.capacity() + step % seg.capacity()) * seg.schema()[f].bytes();
  }

  class Writer final : public shmreplay::detail::KindWriter {
   public:
    Writer(shmreplay::Segment& seg, const XorRing& kind) : seg_(&seg), kind_(&kind) {}
    void store(std::size_t, uint64_t env, uint64_t step, const std::byte* const* sources, bool) noexcept override {
      for (std::size_t i = 0; i < kind_->fields().size(); ++i) {
        const std::size_t f = kind_->fields()[i];
        const uint64_t b = seg_->schema()[f].bytes();
        xor_copy(shmreplay::detail::plain_slot(seg_->field_data(f), b, seg_->capacity(), env, step), sources[i], b);
      }
    }

   private:
    shmreplay::Segment* seg_;
    const XorRing* kind_;
  };
};

inline shmreplay::detail::PlacedField place_xor_ring(const shmreplay::Field& field, std::size_t index,
                                                     shmreplay::detail::FieldPlacer& placer) {
  shmreplay::detail::PlacedField p = shmreplay::detail::place_plain_ring(field, index, placer);
  p.kind = kXorRing;
  return p;
}

/// Adds the kind's row (once per process; a forked child inherits it).
inline void register_xor_ring() {
  static const bool once = [] {
    shmreplay::detail::add_test_storage_kind(
        {kXorRing, "xor_ring", [](const shmreplay::Field& f) { return f.name.rfind("xor_", 0) == 0; },
         place_xor_ring, shmreplay::detail::write_plain_ring, shmreplay::detail::accept_plain_ring,
         [](const shmreplay::Segment& seg, std::vector<std::size_t> fields)
             -> std::unique_ptr<shmreplay::detail::FieldStorage> {
           return std::make_unique<XorRing>(seg, std::move(fields));
         }});
    return true;
  }();
  (void)once;
}

}  // namespace shmreplay::test
