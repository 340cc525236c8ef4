// tools/bench/workloads.cpp: the stores of each geometry (created, filled, removed) and the dispatch from an
// implementation to its workers (workloads.hpp). The workers are in ours.cpp, memcpy.cpp and mutex.cpp. Called
// by main.cpp.
#include "workloads.hpp"

#include <unistd.h>

#include <span>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "bodies.hpp"
#include "plain_ring.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/writer.hpp"
#include "staging.hpp"

namespace shmreplay::bench {

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
