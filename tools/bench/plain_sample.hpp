// tools/bench/plain_sample.hpp: the sampling references of the single-process benchmarks (shmreplay_bench's pixels
// section, shmreplay_bench_scaling): rows of `length` steps at uniform random (env, start) positions (splitmix64)
// of field arrays laid out as a segment's ([env][capacity][bytes] per field: a PlainStore's, or a segment's own
// while nothing writes), copied per field with memcpy row by row, or all drawn first and copied by the Sampler's
// own gather loop (lib/detail/storage/gather.hpp: prefetching ahead, fixed-width moves for small rows). Rows never
// wrap at the ring's end. Not thread-safe; one per thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "bench_support.hpp"
#include "detail/storage/gather.hpp"
#include "plain_store.hpp"

namespace shmreplay::bench {

class PlainSample {
 public:
  /// `base[f]`: field f's array of `envs` x `capacity` steps of `bytes[f]` bytes; capacity >= length.
  PlainSample(std::vector<const std::byte*> base, std::vector<std::size_t> bytes, uint64_t capacity, uint64_t envs,
              std::size_t rows, std::size_t length, uint64_t seed)
      : base_(std::move(base)), bytes_(std::move(bytes)), capacity_(capacity), envs_(envs), rows_(rows),
        length_(length), mix_{seed}, gather_rows_(rows) {
    for (const std::size_t b : bytes_) {
      out_.emplace_back(rows * length * b, std::byte{1});
      outs_.push_back(out_.back().data());
    }
  }
  PlainSample(const PlainStore& store, uint64_t envs, std::size_t rows, std::size_t length, uint64_t seed)
      : PlainSample(fields_of(store), bytes_of(store), store.capacity(), envs, rows, length, seed) {}

  /// A memcpy per row and field. Returns the rows copied.
  uint64_t memcpy_rows() noexcept {
    for (std::size_t r = 0; r < rows_; ++r) {
      const uint64_t env = mix_.below(envs_);
      const uint64_t start = mix_.below(capacity_ - length_ + 1);
      for (std::size_t f = 0; f < base_.size(); ++f) {
        std::memcpy(outs_[f] + r * length_ * bytes_[f], base_[f] + (env * capacity_ + start) * bytes_[f],
                    length_ * bytes_[f]);
      }
    }
    clobber(outs_[0]);
    return rows_;
  }
  /// Every row drawn first, then the Sampler's gather loop over them: over all of them at once, or, with
  /// `chunk_bytes`, over chunks of rows of at most that many bytes together (at least one row), as the Sampler
  /// gathers (kGatherBytes, 64 KiB: the chunk's output stays in cache while its fields are copied). Returns the
  /// rows copied.
  uint64_t gather_rows(std::size_t chunk_bytes = 0) noexcept {
    for (std::size_t r = 0; r < rows_; ++r) {
      const uint64_t env = mix_.below(envs_);
      const uint64_t start = mix_.below(capacity_ - length_ + 1);
      gather_rows_[r] = {start, env, env * capacity_ + start, start, length_, r};
    }
    std::size_t row_bytes = 0;
    for (const std::size_t b : bytes_) row_bytes += b * length_;
    const std::size_t chunk = chunk_bytes == 0 ? rows_ : std::max<std::size_t>(chunk_bytes / row_bytes, 1);
    for (std::size_t first = 0; first < rows_; first += chunk) {
      detail::gather_fields(base_.data(), outs_.data(), bytes_.data(), base_.size(), length_, capacity_,
                            gather_rows_.data() + first, std::min(chunk, rows_ - first), true);
    }
    clobber(outs_[0]);
    return rows_;
  }

 private:
  static std::vector<const std::byte*> fields_of(const PlainStore& s) {
    std::vector<const std::byte*> v;
    for (std::size_t f = 0; f < s.fields(); ++f) v.push_back(s.field(f));
    return v;
  }
  static std::vector<std::size_t> bytes_of(const PlainStore& s) {
    std::vector<std::size_t> v;
    for (std::size_t f = 0; f < s.fields(); ++f) v.push_back(s.field_bytes(f));
    return v;
  }

  std::vector<const std::byte*> base_;
  std::vector<std::size_t> bytes_;
  uint64_t capacity_, envs_;
  std::size_t rows_, length_;
  SplitMix mix_;
  std::vector<std::vector<std::byte>> out_;
  std::vector<std::byte*> outs_;
  std::vector<detail::GatherRow> gather_rows_;
};

}  // namespace shmreplay::bench
