// tools/bench/plain_ring.hpp: the references' segment (workloads.hpp): the memcpy reference's and the mutex
// baseline's store, a Boost.Interprocess shared memory object with shmreplay's data layout and a header of
// per-env heads guarded by one process-shared mutex. Used by memcpy.cpp, mutex.cpp and workloads.cpp (Stores).
#pragma once

#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <boost/interprocess/sync/interprocess_mutex.hpp>
#include <fmt/format.h>

#include "harness.hpp"
#include "workloads.hpp"

namespace shmreplay::bench {

namespace bip = boost::interprocess;

constexpr uint64_t round_up(uint64_t x, uint64_t to) noexcept { return (x + to - 1) / to * to; }

// The header of the lock-based baseline's segment (the memcpy reference has one too and ignores it). This is the
// usual hand-written shared buffer: one process-shared mutex guarding per-env heads and every ring.
struct PlainHeader {
  bip::interprocess_mutex mutex;
  alignas(64) uint64_t heads[kMaxBenchEnvs];  // steps pushed per env; guarded by mutex
};

// Where each field's storage starts: the header, then per field [num_envs][capacity][field bytes], each field
// 64-byte aligned, as in a shmreplay segment.
struct PlainLayout {
  std::vector<uint64_t> offsets;
  uint64_t total_bytes = 0;

  explicit PlainLayout(const Geometry& g) {
    uint64_t off = round_up(sizeof(PlainHeader), 4096);
    for (const Field& f : g.schema.fields()) {
      offsets.push_back(off);
      off = round_up(off + g.num_envs * g.capacity * f.bytes(), 64);
    }
    total_bytes = round_up(off, 4096);
  }
};

// One process's mapping of a reference segment (Boost.Interprocess shared memory object, /dev/shm/<name>).
class PlainRing {
 public:
  // Creates (and fills: every ring full, every head = capacity) or opens the segment `name`.
  PlainRing(const std::string& name, const Geometry& g, bool create) : layout_(g) {
    if (create) {
      shm_ = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write);
      shm_.truncate(static_cast<bip::offset_t>(layout_.total_bytes));
      // Reserve every page now, so that a full /dev/shm is an error here and never a SIGBUS later.
      const int rc = ::posix_fallocate(shm_.get_mapping_handle().handle, 0,
                                       static_cast<off_t>(layout_.total_bytes));
      if (rc != 0) {
        throw std::runtime_error(fmt::format("cannot reserve {} bytes for '{}': {}", layout_.total_bytes, name,
                                             std::strerror(rc)));
      }
    } else {
      shm_ = bip::shared_memory_object(bip::open_only, name.c_str(), bip::read_write);
    }
    region_ = bip::mapped_region(shm_, bip::read_write);
    if (create) {
      auto* h = new (region_.get_address()) PlainHeader{};
      for (uint64_t e = 0; e < g.num_envs; ++e) h->heads[e] = g.capacity;
      for (std::size_t f = 0; f < layout_.offsets.size(); ++f) {
        std::memset(field(f), 0x5a, static_cast<std::size_t>(g.num_envs * g.capacity * g.schema[f].bytes()));
      }
    }
  }

  PlainHeader& header() noexcept { return *static_cast<PlainHeader*>(region_.get_address()); }
  std::byte* field(std::size_t f) noexcept {
    return static_cast<std::byte*>(region_.get_address()) + layout_.offsets[f];
  }
  void populate_all() noexcept { populate(region_.get_address(), region_.get_size()); }

 private:
  PlainLayout layout_;
  bip::shared_memory_object shm_;
  bip::mapped_region region_;
};

}  // namespace shmreplay::bench
