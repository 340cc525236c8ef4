// tools/bench/mutex.cpp: the lock-based baseline's workers (bodies.hpp): the memcpy reference's copies, every
// push call and every sample call holding the store's one process-shared mutex. Called by workloads.cpp.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <boost/interprocess/sync/scoped_lock.hpp>

#include "bodies.hpp"
#include "plain_ring.hpp"
#include "shmreplay/sampler.hpp"
#include "staging.hpp"

namespace shmreplay::bench {

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

}  // namespace shmreplay::bench
