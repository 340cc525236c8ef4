#include "workloads.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <numeric>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <boost/interprocess/sync/interprocess_mutex.hpp>
#include <boost/interprocess/sync/scoped_lock.hpp>
#include <fmt/format.h>

#include "detail/copy_bytes.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay::bench {
namespace {

namespace bip = boost::interprocess;

constexpr uint64_t round_up(uint64_t x, uint64_t to) noexcept { return (x + to - 1) / to * to; }

// -- The references' segment -------------------------------------------------------------------------------------

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

// -- Inputs and outputs ------------------------------------------------------------------------------------------

// What an env worker hands to a push: per field an array [rows][field bytes] (envpool's recv output), with a
// recognisable pattern.
struct Staging {
  std::vector<std::vector<std::byte>> data;  // per field
  std::vector<FieldBytes> all;               // per field: the whole array
  std::vector<std::vector<FieldBytes>> one;  // per row, per field: that row's value
  std::vector<std::size_t> bytes;            // per field: bytes per step

  Staging(const Schema& schema, std::size_t rows) {
    for (std::size_t f = 0; f < schema.size(); ++f) {
      const auto b = static_cast<std::size_t>(schema[f].bytes());
      bytes.push_back(b);
      data.emplace_back(rows * b);
      for (std::size_t i = 0; i < data.back().size(); ++i) data.back()[i] = static_cast<std::byte>(i * 7 + f);
      all.push_back({data.back().data(), data.back().size()});
    }
    one.resize(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t f = 0; f < schema.size(); ++f) one[r].push_back({data[f].data() + r * bytes[f], bytes[f]});
    }
  }
};

// Per field: an output array of `rows` x `length` steps (the references' sample output).
struct Rows {
  std::vector<std::vector<std::byte>> data;
  explicit Rows(const Schema& schema, std::size_t rows, std::size_t length) {
    for (const Field& f : schema.fields()) data.emplace_back(rows * length * static_cast<std::size_t>(f.bytes()));
  }
};

std::vector<uint64_t> env_range(uint64_t first, uint64_t count) {
  std::vector<uint64_t> ids(static_cast<std::size_t>(count));
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

// -- ours --------------------------------------------------------------------------------------------------------

Body ours_push(const Geometry& g, const std::string& name, PushMode mode, uint64_t first_env) {
  return [g, name, mode, first_env](Worker& worker) {
    Buffer buffer = Buffer::open(name, {.expected_schema = g.schema});
    populate(&buffer.segment().header(), static_cast<std::size_t>(buffer.total_bytes()));
    const std::vector<uint64_t> envs = env_range(first_env, g.envs_per_writer);
    Writer writer(buffer, envs);
    const std::size_t k = envs.size();
    const Staging in(g.schema, k);
    std::vector<int32_t> ids;
    for (const uint64_t e : envs) ids.push_back(static_cast<int32_t>(e));
    const std::span<const int32_t> id_span(ids);
    const std::span<const FieldBytes> all(in.all);
    if (!worker.start()) return;
    if (mode == PushMode::batched) {
      do {
        writer.push(id_span, all);
      } while (worker.done(k));
    } else {
      std::size_t i = 0;
      do {
        writer.push_one(envs[i], std::span<const FieldBytes>(in.one[i]));
        if (++i == k) i = 0;
      } while (worker.done(1));
    }
  };
}

Body ours_sample(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length,
                 uint64_t seed) {
  return [g, name, batch, length, seed](Worker& worker) {
    Buffer buffer = Buffer::open(name, {.expected_schema = g.schema});
    populate(&buffer.segment().header(), static_cast<std::size_t>(buffer.total_bytes()));
    Sampler sampler(buffer);
    Rng rng(seed);
    SampleBatch out;
    sampler.sample(View::replay, batch, length, 1.0, rng, out);  // sizes (and touches) the output once
    if (!worker.start()) return;
    do {
      sampler.sample(View::replay, batch, length, 1.0, rng, out);
    } while (worker.done(batch));
    worker.set_retries(sampler.retries());
  };
}

// -- memcpy: the physical limit ----------------------------------------------------------------------------------

Body memcpy_push(const Geometry& g, const std::string& name, PushMode mode, uint64_t first_env) {
  return [g, name, mode, first_env](Worker& worker) {
    PlainRing ring(name, g, false);
    ring.populate_all();
    const std::size_t k = static_cast<std::size_t>(g.envs_per_writer);
    const std::size_t nf = g.schema.size();
    const Staging in(g.schema, k);
    std::vector<std::byte*> base(nf);
    for (std::size_t f = 0; f < nf; ++f) base[f] = ring.field(f);
    std::vector<uint64_t> cursor(k, 0);  // the next slot of each env: a private counter, no division
    const uint64_t cap = g.capacity;
    auto push_row = [&](std::size_t i) {
      const uint64_t slot = (first_env + i) * cap + cursor[i];
      if (++cursor[i] == cap) cursor[i] = 0;
      for (std::size_t f = 0; f < nf; ++f) {
        const std::size_t b = in.bytes[f];
        std::memcpy(base[f] + slot * b, in.data[f].data() + i * b, b);
      }
    };
    if (!worker.start()) return;
    if (mode == PushMode::batched) {
      do {
        for (std::size_t i = 0; i < k; ++i) push_row(i);
        clobber(base[0]);
      } while (worker.done(k));
    } else {
      std::size_t i = 0;
      do {
        push_row(i);
        clobber(base[0]);
        if (++i == k) i = 0;
      } while (worker.done(1));
    }
  };
}

Body memcpy_sample(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length,
                   uint64_t seed) {
  return [g, name, batch, length, seed](Worker& worker) {
    PlainRing ring(name, g, false);
    ring.populate_all();
    const std::size_t nf = g.schema.size();
    std::vector<std::byte*> base(nf);
    std::vector<std::size_t> bytes(nf);
    for (std::size_t f = 0; f < nf; ++f) {
      base[f] = ring.field(f);
      bytes[f] = static_cast<std::size_t>(g.schema[f].bytes());
    }
    // Random (env, start) positions from splitmix64 (a few ns per row, no division): fresh positions over the
    // whole store, as a sampler draws them, so that the rows are not cached from an earlier pass. Rows never wrap.
    SplitMix mix{seed};
    Rows out(g.schema, batch, length);
    const uint64_t starts = g.capacity - length + 1;
    auto sample = [&] {
      for (std::size_t row = 0; row < batch; ++row) {
        const uint64_t env = mix.below(g.num_envs);
        const uint64_t start = mix.below(starts);
        for (std::size_t f = 0; f < nf; ++f) {
          const std::size_t b = bytes[f];
          std::memcpy(out.data[f].data() + row * length * b, base[f] + (env * g.capacity + start) * b, length * b);
        }
      }
      clobber(out.data[0].data());
    };
    sample();  // touches the output once
    if (!worker.start()) return;
    do {
      sample();
    } while (worker.done(batch));
  };
}

// -- gather: the prefetching gather, the best a copy can do ------------------------------------------------------

// Prefetches the lines of [p, p + n), at most 8 (the hardware prefetcher takes over on longer runs).
inline void prefetch_lines(const std::byte* p, std::size_t n) noexcept {
  const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const auto last = std::min((reinterpret_cast<uintptr_t>(p) + n - 1) & ~uintptr_t{63}, first + 7 * 64);
  for (uintptr_t a = first; a <= last; a += 64) __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 3);
}

Body gather_sample(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length,
                   uint64_t seed) {
  return [g, name, batch, length, seed](Worker& worker) {
    PlainRing ring(name, g, false);
    ring.populate_all();
    const std::size_t nf = g.schema.size();
    std::vector<std::byte*> base(nf);
    std::vector<std::size_t> bytes(nf);
    for (std::size_t f = 0; f < nf; ++f) {
      base[f] = ring.field(f);
      bytes[f] = static_cast<std::size_t>(g.schema[f].bytes());
    }
    SplitMix mix{seed};  // the memcpy reference's positions
    Rows out(g.schema, batch, length);
    std::vector<uint64_t> at(batch);  // each row's first step: env * capacity + start
    const uint64_t starts = g.capacity - length + 1;
    auto sample = [&] {
      for (std::size_t row = 0; row < batch; ++row) {
        const uint64_t env = mix.below(g.num_envs);
        at[row] = env * g.capacity + mix.below(starts);
      }
      for (std::size_t f = 0; f < nf; ++f) {
        const std::size_t b = bytes[f] * length;
        const std::size_t lines = std::min<std::size_t>((b + 63) / 64 + 1, 8);
        const std::size_t ahead = std::max<std::size_t>(24 / lines, 2);
        // Rows of at most 128 bytes: two fixed-width moves each (as ours), not a call to memcpy.
        auto copy_rows = [&](auto width) {
          constexpr std::size_t k = decltype(width)::value;
          for (std::size_t row = 0; row < batch; ++row) {
            if (row + ahead < batch) prefetch_lines(base[f] + at[row + ahead] * bytes[f], b);
            std::byte* d = out.data[f].data() + row * b;
            const std::byte* src = base[f] + at[row] * bytes[f];
            if constexpr (k == 0) {
              std::memcpy(d, src, b);
            } else if constexpr (k == 1) {
              *d = *src;
            } else {
              shmreplay::detail::copy_ends<k>(d, src, b);
            }
          }
        };
        using W = std::size_t;
        if (b == 1) {
          copy_rows(std::integral_constant<W, 1>{});
        } else if (b < 4) {
          copy_rows(std::integral_constant<W, 2>{});
        } else if (b < 8) {
          copy_rows(std::integral_constant<W, 4>{});
        } else if (b <= 16) {
          copy_rows(std::integral_constant<W, 8>{});
        } else if (b <= 32) {
          copy_rows(std::integral_constant<W, 16>{});
        } else if (b <= 64) {
          copy_rows(std::integral_constant<W, 32>{});
        } else if (b <= 128) {
          copy_rows(std::integral_constant<W, 64>{});
        } else {
          copy_rows(std::integral_constant<W, 0>{});
        }
      }
      clobber(out.data[0].data());
    };
    sample();  // touches the output once
    if (!worker.start()) return;
    do {
      sample();
    } while (worker.done(batch));
  };
}

// -- mutex: the lock-based baseline ------------------------------------------------------------------------------

Body mutex_push(const Geometry& g, const std::string& name, PushMode mode, uint64_t first_env) {
  return [g, name, mode, first_env](Worker& worker) {
    PlainRing ring(name, g, false);
    ring.populate_all();
    PlainHeader& h = ring.header();
    const std::size_t k = static_cast<std::size_t>(g.envs_per_writer);
    const std::size_t nf = g.schema.size();
    const Staging in(g.schema, k);
    std::vector<std::byte*> base(nf);
    for (std::size_t f = 0; f < nf; ++f) base[f] = ring.field(f);
    const uint64_t cap = g.capacity;
    auto push_row = [&](std::size_t i) {  // called with the mutex held
      const uint64_t env = first_env + i;
      const uint64_t slot = env * cap + h.heads[env]++ % cap;
      for (std::size_t f = 0; f < nf; ++f) {
        const std::size_t b = in.bytes[f];
        std::memcpy(base[f] + slot * b, in.data[f].data() + i * b, b);
      }
    };
    if (!worker.start()) return;
    if (mode == PushMode::batched) {
      do {
        bip::scoped_lock<bip::interprocess_mutex> lock(h.mutex);
        for (std::size_t i = 0; i < k; ++i) push_row(i);
      } while (worker.done(k));
    } else {
      std::size_t i = 0;
      do {
        {
          bip::scoped_lock<bip::interprocess_mutex> lock(h.mutex);
          push_row(i);
        }
        if (++i == k) i = 0;
      } while (worker.done(1));
    }
  };
}

Body mutex_sample(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length,
                  uint64_t seed) {
  return [g, name, batch, length, seed](Worker& worker) {
    PlainRing ring(name, g, false);
    ring.populate_all();
    PlainHeader& h = ring.header();
    const std::size_t nf = g.schema.size();
    std::vector<std::byte*> base(nf);
    std::vector<std::size_t> bytes(nf);
    for (std::size_t f = 0; f < nf; ++f) {
      base[f] = ring.field(f);
      bytes[f] = static_cast<std::size_t>(g.schema[f].bytes());
    }
    Rng rng(seed);
    Rows out(g.schema, batch, length);
    const uint64_t cap = g.capacity;
    const uint64_t L = length;
    // Uniform over the stored full-length starts of a uniformly drawn env; the ring may wrap (two copies).
    auto sample = [&] {
      bip::scoped_lock<bip::interprocess_mutex> lock(h.mutex);
      for (std::size_t row = 0; row < batch; ++row) {
        const uint64_t env = rng() % g.num_envs;
        const uint64_t head = h.heads[env];
        const uint64_t stored = std::min(head, cap);
        const uint64_t r = std::min(stored, L);
        const uint64_t start = head - stored + (stored > L ? rng() % (stored - L + 1) : 0);
        const uint64_t slot0 = start % cap;
        const uint64_t first = std::min(r, cap - slot0);
        for (std::size_t f = 0; f < nf; ++f) {
          const std::size_t b = bytes[f];
          std::byte* dst = out.data[f].data() + row * length * b;
          const std::byte* ring_base = base[f] + env * cap * b;
          std::memcpy(dst, ring_base + slot0 * b, first * b);
          if (r > first) std::memcpy(dst + first * b, ring_base, (r - first) * b);
          if (r < L) std::memset(dst + r * b, 0, (L - r) * b);
        }
      }
      clobber(out.data[0].data());
    };
    sample();  // touches the output once
    if (!worker.start()) return;
    do {
      sample();
    } while (worker.done(batch));
  };
}

}  // namespace

const char* to_string(Impl impl) noexcept {
  switch (impl) {
    case Impl::ours: return "ours";
    case Impl::memcpy: return "memcpy";
    case Impl::mutex: return "mutex";
    case Impl::gather: return "gather";
  }
  return "?";
}

const char* to_string(PushMode mode) noexcept { return mode == PushMode::batched ? "batched" : "single"; }

Stores::Stores(const Geometry& g, const std::string& prefix) {
  if (g.num_envs > kMaxBenchEnvs) throw std::invalid_argument("the benchmark supports at most 64 envs");
  const std::vector<std::string> all = paths(g, prefix);
  for (const Impl impl : kImpls) {
    const auto i = static_cast<std::size_t>(impl);
    names_[i] = fmt::format("{}-{}", prefix, to_string(impl));
    paths_[i] = all[i];
  }
  try {
    for (const std::string& path : paths_) register_segment_file(path);
    // ours: create, then fill every ring with batched pushes.
    {
      Buffer buffer = Buffer::create(name(Impl::ours), g.num_envs, g.capacity, g.schema);
      Writer writer = Writer::range(buffer, 0, g.num_envs);
      const Staging in(g.schema, static_cast<std::size_t>(g.num_envs));
      std::vector<uint64_t> ids = env_range(0, g.num_envs);
      for (uint64_t s = 0; s < g.capacity; ++s) writer.push(std::span<const uint64_t>(ids), std::span(in.all));
    }
    PlainRing(name(Impl::memcpy), g, true);
    PlainRing(name(Impl::mutex), g, true);
  } catch (...) {
    for (const std::string& path : paths_) {
      ::unlink(path.c_str());
      unregister_segment_file(path);
    }
    throw;
  }
}

std::vector<std::string> Stores::paths(const Geometry&, const std::string& prefix) {
  std::vector<std::string> out;
  for (const Impl impl : kImpls) {
    const std::string name = fmt::format("{}-{}", prefix, to_string(impl));
    // Boost.Interprocess names POSIX shared memory objects /dev/shm/<name> on Linux.
    out.push_back(impl == Impl::ours ? shm_directory() + "/" + name : "/dev/shm/" + name);
  }
  return out;
}

Stores::~Stores() {
  for (const std::string& path : paths_) {
    ::unlink(path.c_str());
    unregister_segment_file(path);
  }
}

const std::string& Stores::name(Impl impl) const noexcept {
  return names_[static_cast<std::size_t>(impl == Impl::gather ? Impl::memcpy : impl)];  // gather reads memcpy's
}

Body push_body(Impl impl, const Geometry& geometry, const Stores& stores, PushMode mode, uint64_t first_env) {
  switch (impl) {
    case Impl::ours: return ours_push(geometry, stores.name(impl), mode, first_env);
    case Impl::memcpy: return memcpy_push(geometry, stores.name(impl), mode, first_env);
    case Impl::mutex: return mutex_push(geometry, stores.name(impl), mode, first_env);
    case Impl::gather: break;  // a sampling reference only
  }
  throw std::invalid_argument("unknown implementation");
}

Body sample_body(Impl impl, const Geometry& geometry, const Stores& stores, std::size_t batch, std::size_t length,
                 uint64_t seed) {
  switch (impl) {
    case Impl::ours: return ours_sample(geometry, stores.name(impl), batch, length, seed);
    case Impl::memcpy: return memcpy_sample(geometry, stores.name(impl), batch, length, seed);
    case Impl::mutex: return mutex_sample(geometry, stores.name(impl), batch, length, seed);
    case Impl::gather: return gather_sample(geometry, stores.name(impl), batch, length, seed);
  }
  throw std::invalid_argument("unknown implementation");
}

}  // namespace shmreplay::bench
