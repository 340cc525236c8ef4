// tools/bench/bodies.hpp: each implementation's writer and sampler bodies (workloads.hpp says what each does).
// Defined in ours.cpp, memcpy.cpp (memcpy and the prefetching gather) and mutex.cpp; called by workloads.cpp's
// push_body and sample_body with the store's name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "harness.hpp"
#include "workloads.hpp"

namespace shmreplay::bench {

Body ours_push(const Geometry& g, const std::string& name, PushMode mode, uint64_t first_env);
Body ours_sample(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length, uint64_t seed);
Body memcpy_push(const Geometry& g, const std::string& name, PushMode mode, uint64_t first_env);
Body memcpy_sample(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length, uint64_t seed);
Body gather_sample(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length, uint64_t seed);
Body mutex_push(const Geometry& g, const std::string& name, PushMode mode, uint64_t first_env);
Body mutex_sample(const Geometry& g, const std::string& name, std::size_t batch, std::size_t length, uint64_t seed);

}  // namespace shmreplay::bench
