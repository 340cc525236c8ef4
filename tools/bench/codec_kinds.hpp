// tools/bench/codec_kinds.hpp: the codecs the codec benchmark (codecs.cpp) measures, each behind one small
// interface: LZ4 and LZ4HC (Debian's liblz4) and Zstandard (Debian's libzstd), with their contexts made once and
// reused (as a writer or a learner would keep them); and the byte-wise deltas against a reference frame.
#pragma once

#include <lz4.h>
#include <lz4hc.h>
#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace shmreplay::bench {

/// A lossless codec of byte records. compress() returns the record's compressed bytes (it throws where the codec
/// fails: `capacity` is at least bound(bytes)); decompress() writes exactly `bytes` bytes or throws. Not shared
/// between threads (each keeps its own state).
class Codec {
 public:
  explicit Codec(std::string name) : name_(std::move(name)) {}
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;
  const std::string& name() const noexcept { return name_; }
  /// The most bytes compress() can return for a record of `bytes` bytes (the codec's documented bound).
  virtual std::size_t bound(std::size_t bytes) const = 0;
  virtual std::size_t compress(const std::byte* src, std::size_t bytes, std::byte* dst, std::size_t capacity) = 0;
  virtual void decompress(const std::byte* src, std::size_t compressed, std::byte* dst, std::size_t bytes) = 0;

 protected:
  [[noreturn]] void fail(const char* what, std::size_t bytes, const std::string& why) const {
    throw std::runtime_error(fmt::format("codec {}: {} of a {}-byte record failed: {}", name_, what, bytes, why));
  }

 private:
  std::string name_;
};

/// LZ4's block format, whichever compressor wrote it: its bound and its one decoder (LZ4_decompress_safe).
class Lz4Block : public Codec {
 public:
  using Codec::Codec;
  std::size_t bound(std::size_t bytes) const override {
    return static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(bytes)));
  }
  void decompress(const std::byte* src, std::size_t compressed, std::byte* dst, std::size_t bytes) override {
    const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(src), reinterpret_cast<char*>(dst),
                                      static_cast<int>(compressed), static_cast<int>(bytes));
    if (n != static_cast<int>(bytes)) fail("decompression", bytes, fmt::format("LZ4_decompress_safe returned {}", n));
  }
};

/// LZ4's block format, LZ4_compress_fast_extState at `acceleration` (1 is LZ4_compress_default's).
class Lz4 final : public Lz4Block {
 public:
  explicit Lz4(int acceleration)
      : Lz4Block(acceleration == 1 ? "lz4" : fmt::format("lz4 accel {}", acceleration)),
        acceleration_(acceleration),
        state_(static_cast<std::size_t>(LZ4_sizeofState())) {}
  std::size_t compress(const std::byte* src, std::size_t bytes, std::byte* dst, std::size_t capacity) override {
    const int n = LZ4_compress_fast_extState(state_.data(), reinterpret_cast<const char*>(src),
                                             reinterpret_cast<char*>(dst), static_cast<int>(bytes),
                                             static_cast<int>(capacity), acceleration_);
    if (n <= 0) fail("compression", bytes, "LZ4_compress_fast_extState returned 0");
    return static_cast<std::size_t>(n);
  }

 private:
  int acceleration_;
  std::vector<std::byte> state_;
};

/// LZ4HC at `level` (LZ4_compress_HC_extStateHC: its state made once); the same block format as Lz4, so the same
/// decoder.
class Lz4Hc final : public Lz4Block {
 public:
  explicit Lz4Hc(int level)
      : Lz4Block(fmt::format("lz4hc {}", level)), level_(level), state_(static_cast<std::size_t>(LZ4_sizeofStateHC())) {}
  std::size_t compress(const std::byte* src, std::size_t bytes, std::byte* dst, std::size_t capacity) override {
    const int n = LZ4_compress_HC_extStateHC(state_.data(), reinterpret_cast<const char*>(src),
                                             reinterpret_cast<char*>(dst), static_cast<int>(bytes),
                                             static_cast<int>(capacity), level_);
    if (n <= 0) fail("compression", bytes, "LZ4_compress_HC_extStateHC returned 0");
    return static_cast<std::size_t>(n);
  }

 private:
  int level_;
  std::vector<std::byte> state_;
};

/// Zstandard's frame format at `level` (negative: its fast levels), through one ZSTD_CCtx and one ZSTD_DCtx with
/// the level set once (ZSTD_compress2); the frame keeps zstd's default header (content size, no checksum).
class Zstd final : public Codec {
 public:
  explicit Zstd(int level)
      : Codec(fmt::format("zstd {}", level)),
        cctx_(ZSTD_createCCtx(), ZSTD_freeCCtx),
        dctx_(ZSTD_createDCtx(), ZSTD_freeDCtx) {
    if (!cctx_ || !dctx_) throw std::runtime_error("zstd: ZSTD_createCCtx or ZSTD_createDCtx failed");
    const std::size_t rc = ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_compressionLevel, level);
    if (ZSTD_isError(rc)) throw std::runtime_error(fmt::format("zstd: level {}: {}", level, ZSTD_getErrorName(rc)));
  }
  std::size_t bound(std::size_t bytes) const override { return ZSTD_compressBound(bytes); }
  std::size_t compress(const std::byte* src, std::size_t bytes, std::byte* dst, std::size_t capacity) override {
    const std::size_t n = ZSTD_compress2(cctx_.get(), dst, capacity, src, bytes);
    if (ZSTD_isError(n)) fail("compression", bytes, ZSTD_getErrorName(n));
    return n;
  }
  void decompress(const std::byte* src, std::size_t compressed, std::byte* dst, std::size_t bytes) override {
    const std::size_t n = ZSTD_decompressDCtx(dctx_.get(), dst, bytes, src, compressed);
    if (ZSTD_isError(n) || n != bytes) {
      fail("decompression", bytes, ZSTD_isError(n) ? ZSTD_getErrorName(n) : fmt::format("{} bytes out", n));
    }
  }

 private:
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx_;
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx_;
};

/// The codecs measured, fastest first: LZ4 (and its acceleration), LZ4HC at two levels, zstd from its fast level -1
/// to 5.
inline std::vector<std::unique_ptr<Codec>> make_codecs() {
  std::vector<std::unique_ptr<Codec>> c;
  c.push_back(std::make_unique<Lz4>(1));
  c.push_back(std::make_unique<Lz4>(4));
  c.push_back(std::make_unique<Lz4Hc>(4));
  c.push_back(std::make_unique<Lz4Hc>(9));
  for (const int level : {-1, 1, 3, 5}) c.push_back(std::make_unique<Zstd>(level));
  return c;
}

/// A byte-wise delta of a frame against a reference frame: none, XOR, or subtraction modulo 256.
enum class Delta : uint8_t { none, xor_bytes, sub_bytes };

inline const char* delta_name(Delta d) noexcept {
  return d == Delta::none ? "none" : d == Delta::xor_bytes ? "xor" : "sub";
}

namespace detail {
// 16 bytes as one GCC/Clang vector: XOR and subtraction act on each byte lane, so a delta runs 16 bytes at a time at
// any optimisation level (a byte loop is left scalar at -O2 by GCC 12).
using Bytes16 = uint8_t __attribute__((vector_size(16)));

template <class Op>
void bytewise(const std::byte* a, const std::byte* b, std::byte* out, std::size_t n, Op op) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    Bytes16 x, y;
    std::memcpy(&x, a + i, 16);
    std::memcpy(&y, b + i, 16);
    const Bytes16 z = op(x, y);
    std::memcpy(out + i, &z, 16);
  }
  for (; i < n; ++i) {
    out[i] = static_cast<std::byte>(op(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])));
  }
}
}  // namespace detail

/// out = frame (op) ref, byte by byte (XOR, or subtraction modulo 256). `out` may be `frame` (in place).
inline void apply_delta(Delta d, const std::byte* frame, const std::byte* ref, std::byte* out, std::size_t n) {
  if (d == Delta::xor_bytes) {
    detail::bytewise(frame, ref, out, n, [](auto x, auto y) { return x ^ y; });
  } else {
    detail::bytewise(frame, ref, out, n, [](auto x, auto y) { return x - y; });
  }
}

/// Undoes apply_delta in place: frame = delta (inverse op) ref.
inline void undo_delta(Delta d, std::byte* frame, const std::byte* ref, std::size_t n) {
  if (d == Delta::xor_bytes) {
    detail::bytewise(frame, ref, frame, n, [](auto x, auto y) { return x ^ y; });
  } else {
    detail::bytewise(frame, ref, frame, n, [](auto x, auto y) { return x + y; });
  }
}

}  // namespace shmreplay::bench
