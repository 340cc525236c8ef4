// tools/bench/ours.cpp: shmreplay's workers (bodies.hpp): a writer process pushing with Writer::push or push_one,
// a sampler process sampling with Sampler::sample. Called by workloads.cpp.
#include <cstdint>
#include <span>
#include <vector>

#include "shmreplay/internal/segment.hpp"
#include "bodies.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "staging.hpp"

namespace shmreplay::bench {

Body ours_push(const Geometry& g, const std::string& name, PushMode mode, uint64_t first_env) {
  return [g, name, mode, first_env](Worker& worker) {
    Buffer buffer = Buffer::open(name, {.expected_schema = g.schema});
    populate(&segment_of(buffer).header(), static_cast<std::size_t>(buffer.total_bytes()));
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
    populate(&segment_of(buffer).header(), static_cast<std::size_t>(buffer.total_bytes()));
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

}  // namespace shmreplay::bench
