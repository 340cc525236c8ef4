// tools/bench/plain_store.hpp: the single-process benchmarks' memcpy reference store (shmreplay_bench_push_cost,
// shmreplay_bench's pixels section, shmreplay_bench_scaling): a shared anonymous mapping (shmem pages, as
// /dev/shm's) laid out as a segment's fields, [env][slot][bytes] per field, each env's next slot from a private
// counter: no protocol at all. Or the same over field arrays it does not own (a segment's own, written while
// nothing reads them: shmreplay_bench_scaling's push limit, with no second store of the segment's size).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "bench_support.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay::bench {

class PlainStore {
 public:
  /// Maps and writes every byte (every page faulted in, as a segment's after its prefill).
  PlainStore(const Schema& schema, uint64_t envs, uint64_t capacity) : capacity_(capacity) {
    for (const Field& f : schema.fields()) {
      bytes_.push_back(static_cast<std::size_t>(f.bytes()));
      total_ += (envs * capacity * f.bytes() + 63) / 64 * 64;
    }
    void* p = ::mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<std::byte*>(p);
    std::memset(base_, 0x5a, total_);
    std::size_t off = 0;
    for (std::size_t f = 0; f < bytes_.size(); ++f) {
      fields_.push_back(base_ + off);
      off += (envs * capacity * bytes_[f] + 63) / 64 * 64;
    }
    cursor_.assign(static_cast<std::size_t>(envs), 0);
  }
  /// Over arrays it does not own: `fields[f]` is field f's [envs][capacity][bytes[f]] (a segment's field_data).
  PlainStore(std::vector<std::byte*> fields, std::vector<std::size_t> bytes, uint64_t envs, uint64_t capacity)
      : capacity_(capacity), fields_(std::move(fields)), bytes_(std::move(bytes)) {
    cursor_.assign(static_cast<std::size_t>(envs), 0);
  }
  ~PlainStore() {
    if (base_ != nullptr) ::munmap(base_, total_);
  }
  PlainStore(const PlainStore&) = delete;
  PlainStore& operator=(const PlainStore&) = delete;

  /// Row `row` of `in` (per field [rows][bytes]) into env `env`'s next slot.
  void push_row(uint64_t env, const FieldBytes* in, std::size_t row) noexcept {
    const uint64_t slot = env * capacity_ + cursor_[env];
    if (++cursor_[env] == capacity_) cursor_[env] = 0;
    for (std::size_t f = 0; f < bytes_.size(); ++f) {
      const std::size_t b = bytes_[f];
      std::memcpy(fields_[f] + slot * b, static_cast<const std::byte*>(in[f].data) + row * b, b);
    }
    clobber(fields_[0]);
  }
  void push_row(uint64_t env, const std::vector<FieldBytes>& in, std::size_t row) noexcept {
    push_row(env, in.data(), row);
  }
  /// push_row, and then, per field, the first and last cache line of the env's next slot prefetched for writing, as
  /// Writer::push does (lib/writer_push.cpp): many envs' rings are more write streams than the hardware prefetcher
  /// follows. shmreplay_bench_scaling's push limit is the faster of the two.
  void push_row_ahead(uint64_t env, const FieldBytes* in, std::size_t row) noexcept {
    const uint64_t slot = env * capacity_ + cursor_[env];
    if (++cursor_[env] == capacity_) cursor_[env] = 0;
    for (std::size_t f = 0; f < bytes_.size(); ++f) {
      const std::size_t b = bytes_[f];
      std::byte* dst = fields_[f] + slot * b;
      std::memcpy(dst, static_cast<const std::byte*>(in[f].data) + row * b, b);
      const uintptr_t next = reinterpret_cast<uintptr_t>(dst) + b;  // past the last slot: a prefetch never faults
      __builtin_prefetch(reinterpret_cast<const void*>(next), 1, 3);
      __builtin_prefetch(reinterpret_cast<const void*>(next + b - 1), 1, 3);
    }
    clobber(fields_[0]);
  }

  /// Field `f`'s array, [env][slot][bytes].
  const std::byte* field(std::size_t f) const noexcept { return fields_[f]; }
  std::size_t field_bytes(std::size_t f) const noexcept { return bytes_[f]; }
  std::size_t fields() const noexcept { return bytes_.size(); }
  uint64_t capacity() const noexcept { return capacity_; }

 private:
  uint64_t capacity_;
  std::size_t total_ = 0;
  std::byte* base_ = nullptr;
  std::vector<std::byte*> fields_;
  std::vector<std::size_t> bytes_;
  std::vector<uint64_t> cursor_;
};

}  // namespace shmreplay::bench
