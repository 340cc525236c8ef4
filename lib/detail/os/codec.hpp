// detail/os/codec.hpp: one frame's bytes through a codec (Debian's liblz4 and libzstd; docs/design/compression.md
// says why each), with nothing of the segment: the compressed-frames storage (detail/protocol/packed_frames.hpp)
// encodes each new frame once as its writer stores it, and decodes it wherever a reader rebuilds a step.
//
// Decoding never trusts its input: the output is bounded by the frame's size and must come out exactly that size,
// so torn or corrupt bytes give `false`, never a crash, an overrun or an allocation sized by the input.
//
// Thread safety: a FrameEncoder belongs to one writer; decode_frame may be called from any thread (zstd's
// decompression context is one per thread, made on its first zstd frame).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "shmreplay/schema.hpp"

namespace shmreplay::detail {

/// The compressor of one writer: the codec's state, made once and reused for every frame.
class FrameEncoder {
 public:
  /// Throws std::bad_alloc when the codec's state cannot be made.
  FrameEncoder(Codec codec, int32_t level);
  ~FrameEncoder();
  FrameEncoder(const FrameEncoder&) = delete;
  FrameEncoder& operator=(const FrameEncoder&) = delete;

  /// Compresses the `n` bytes at `src` into `dst`, at most `cap` bytes, against the `n` bytes at `dict` when it is
  /// not nullptr (the previous frame: the codec finds the parts that did not change there). Returns the bytes
  /// written, or 0 when the result would not fit in `cap` (then the caller stores the frame as it is). Never throws,
  /// never allocates.
  std::size_t encode(const std::byte* src, std::size_t n, const std::byte* dict, std::byte* dst,
                     std::size_t cap) noexcept;

 private:
  Codec codec_;
  int32_t level_;
  void* zstd_ = nullptr;          // ZSTD_CCtx*
  void* lz4_stream_ = nullptr;    // LZ4_stream_t*, for a frame coded against a dictionary
  std::vector<char> lz4_state_;   // LZ4_compress_fast_extState's state
};

/// Decodes the `len` bytes at `src` into exactly `n` bytes at `dst`, against the `n` bytes at `dict` when the frame
/// was encoded against a dictionary (else nullptr); false when they do not decode to exactly `n` bytes (torn or
/// corrupt). Never writes past dst + n; never throws.
bool decode_frame(Codec codec, const std::byte* src, std::size_t len, const std::byte* dict, std::byte* dst,
                  std::size_t n) noexcept;

}  // namespace shmreplay::detail
