// tools/bench/workloads.hpp: what the benchmark's workers do, for shmreplay and its two references (the workers are
// in ours.cpp, memcpy.cpp and mutex.cpp; the stores and the dispatch in workloads.cpp). Called by main.cpp.
//
// Three implementations of the same store, each in its own named segment of the same size and the same data
// layout (per field, [num_envs][capacity][field bytes]):
//   ours    a shmreplay Buffer: Writer::push / push_one and Sampler::sample.
//   memcpy  the physical limit: the same bytes copied with plain memcpy in the same pattern (per field, the
//           step's bytes into the next slot of the env's ring for a push; gathered rows of sequence_length
//           steps at random (env, start) positions for a sample), no synchronisation, no bookkeeping beyond a
//           private slot cursor per env.
//   gather  (sample only) the best a copy of the same rows can do: the memcpy reference's store and positions,
//           but every position of a batch drawn first, then per field a gather that prefetches the rows ahead
//           (software prefetch), so that many cache misses are in flight at once, and copies rows of at most
//           128 bytes with two fixed-width moves (no validation, no weights, no mask: less work than ours).
//   mutex   the lock-based design most hand-written shared buffers use: the same storage plus per-env heads in
//           a Boost.Interprocess shared memory object, every push call and every sample call holding one
//           process-shared boost::interprocess::interprocess_mutex for its whole duration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay::bench {

enum class Impl { ours, memcpy, mutex, gather };
/// The implementations that have a store of their own (gather reads the memcpy store).
inline constexpr Impl kImpls[] = {Impl::ours, Impl::memcpy, Impl::mutex};
/// The sample section's implementations: the three, and the prefetching gather.
inline constexpr Impl kSampleImpls[] = {Impl::ours, Impl::memcpy, Impl::gather, Impl::mutex};
const char* to_string(Impl impl) noexcept;

enum class PushMode { batched, single };
const char* to_string(PushMode mode) noexcept;

inline constexpr uint64_t kMaxBenchEnvs = 64;

/// The shape of one step kind's stores.
struct Geometry {
  std::string label;          ///< "small", "atari"
  Schema schema;
  uint64_t num_envs = 0;      ///< at most kMaxBenchEnvs
  uint64_t capacity = 0;      ///< steps per env
  uint64_t envs_per_writer = 0;  ///< writer w leases envs [w * envs_per_writer, (w + 1) * envs_per_writer)
  bool sample_only = false;      ///< measured in the sample (and contention) section only
  uint64_t data_bytes() const noexcept { return num_envs * capacity * schema.step_bytes(); }
};

/// The three segments of one geometry: created and filled (every ring full) by the constructor, removed by the
/// destructor (and by the signal handler, through the cleanup registry).
class Stores {
 public:
  Stores(const Geometry& geometry, const std::string& prefix);
  Stores(const Stores&) = delete;
  Stores& operator=(const Stores&) = delete;
  ~Stores();
  const std::string& name(Impl impl) const noexcept;
  /// The files that Stores(geometry, prefix) creates.
  static std::vector<std::string> paths(const Geometry& geometry, const std::string& prefix);

 private:
  std::string names_[3];
  std::string paths_[3];
};

/// A writer process: leases (or, for the references, uses) envs [first_env, first_env + envs_per_writer) and
/// pushes, either all of them in one call per operation (batched) or one env per operation, round robin.
/// Units: steps.
Body push_body(Impl impl, const Geometry& geometry, const Stores& stores, PushMode mode, uint64_t first_env);

/// A sampler process: `batch` rows of `length` steps per operation (ours: replay view, distribution power 1).
/// Units: rows.
Body sample_body(Impl impl, const Geometry& geometry, const Stores& stores, std::size_t batch, std::size_t length,
                 uint64_t seed);

}  // namespace shmreplay::bench
