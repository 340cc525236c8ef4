#include "detail/os/codec.hpp"

#include <new>

#include <lz4.h>
#include <zstd.h>

namespace shmreplay::detail {
namespace {

struct DCtxFree {
  void operator()(ZSTD_DCtx* c) const noexcept { ZSTD_freeDCtx(c); }
};

// This thread's zstd decompression context, made on its first zstd frame (nullptr when that fails).
ZSTD_DCtx* thread_dctx() noexcept {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> ctx(ZSTD_createDCtx());
  return ctx.get();
}

}  // namespace

FrameEncoder::FrameEncoder(Codec codec, int32_t level) : codec_(codec), level_(level) {
  if (codec_ == Codec::zstd) {
    auto* c = ZSTD_createCCtx();
    if (c == nullptr) throw std::bad_alloc();
    zstd_ = c;
    // The record's length and checksum are kept beside it (packed_frames.hpp): the frame need not repeat them.
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level_);
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 0);
    ZSTD_CCtx_setParameter(c, ZSTD_c_dictIDFlag, 0);
  } else if (codec_ == Codec::lz4) {
    lz4_state_.resize(static_cast<std::size_t>(LZ4_sizeofState()));
    lz4_stream_ = LZ4_createStream();
    if (lz4_stream_ == nullptr) throw std::bad_alloc();
  }
}

FrameEncoder::~FrameEncoder() {
  if (zstd_ != nullptr) ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(zstd_));
  if (lz4_stream_ != nullptr) LZ4_freeStream(static_cast<LZ4_stream_t*>(lz4_stream_));
}

std::size_t FrameEncoder::encode(const std::byte* src, std::size_t n, const std::byte* dict, std::byte* dst,
                                 std::size_t cap) noexcept {
  const auto* in = reinterpret_cast<const char*>(src);
  auto* out = reinterpret_cast<char*>(dst);
  if (codec_ == Codec::lz4) {
    int r = 0;
    if (dict == nullptr) {
      r = LZ4_compress_fast_extState(lz4_state_.data(), in, out, static_cast<int>(n), static_cast<int>(cap), 1);
    } else {
      // The dictionary is the previous frame, at most 2^30 bytes (the compressed kind's limit); LZ4 uses its last
      // 64 KiB.
      auto* stream = static_cast<LZ4_stream_t*>(lz4_stream_);
      LZ4_resetStream_fast(stream);
      LZ4_loadDict(stream, reinterpret_cast<const char*>(dict), static_cast<int>(n));
      r = LZ4_compress_fast_continue(stream, in, out, static_cast<int>(n), static_cast<int>(cap), 1);
    }
    return r > 0 ? static_cast<std::size_t>(r) : 0;
  }
  if (codec_ == Codec::zstd) {
    auto* c = static_cast<ZSTD_CCtx*>(zstd_);
    // A prefix is used by the next frame only.
    if (dict != nullptr && ZSTD_isError(ZSTD_CCtx_refPrefix(c, dict, n))) return 0;
    const std::size_t r = ZSTD_compress2(c, dst, cap, src, n);
    if (ZSTD_isError(r)) {
      // A frame that does not fit (the caller stores it as pushed) may leave the prefix referenced: drop it with the
      // session, or the next frame, a key frame, would be coded against it (the parameters stay).
      ZSTD_CCtx_reset(c, ZSTD_reset_session_only);
      return 0;
    }
    return r;
  }
  return 0;
}

bool decode_frame(Codec codec, const std::byte* src, std::size_t len, const std::byte* dict, std::byte* dst,
                  std::size_t n) noexcept {
  const auto* in = reinterpret_cast<const char*>(src);
  auto* out = reinterpret_cast<char*>(dst);
  if (codec == Codec::lz4) {
    const int r = dict == nullptr
                      ? LZ4_decompress_safe(in, out, static_cast<int>(len), static_cast<int>(n))
                      : LZ4_decompress_safe_usingDict(in, out, static_cast<int>(len), static_cast<int>(n),
                                                      reinterpret_cast<const char*>(dict), static_cast<int>(n));
    return r >= 0 && static_cast<std::size_t>(r) == n;
  }
  if (codec == Codec::zstd) {
    ZSTD_DCtx* ctx = thread_dctx();
    if (ctx == nullptr) return false;
    if (dict != nullptr && ZSTD_isError(ZSTD_DCtx_refPrefix(ctx, dict, n))) return false;
    const std::size_t r = ZSTD_decompressDCtx(ctx, dst, n, src, len);
    if (ZSTD_isError(r)) ZSTD_DCtx_reset(ctx, ZSTD_reset_session_and_parameters);  // drop an unused prefix
    return !ZSTD_isError(r) && r == n;
  }
  return false;
}

}  // namespace shmreplay::detail
