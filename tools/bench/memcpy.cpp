// tools/bench/memcpy.cpp: the copy references' workers (bodies.hpp): memcpy, the physical limit (the same bytes
// copied in the same pattern, no synchronisation), and the prefetching gather, the best a copy of the sampled rows
// can do. Called by workloads.cpp.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "bodies.hpp"
#include "detail/copy_bytes.hpp"
#include "plain_ring.hpp"
#include "staging.hpp"

namespace shmreplay::bench {
namespace {

// Prefetches the lines of [p, p + n), at most 8 (the hardware prefetcher takes over on longer runs).
inline void prefetch_lines(const std::byte* p, std::size_t n) noexcept {
  const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const auto last = std::min((reinterpret_cast<uintptr_t>(p) + n - 1) & ~uintptr_t{63}, first + 7 * 64);
  for (uintptr_t a = first; a <= last; a += 64) __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 3);
}

}  // namespace

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

}  // namespace shmreplay::bench
