// The smallest learner: attach as the buffer's learner, wait for data, sample sequences, read them.
//
//   example_minimal_learner NAME   sample from an existing buffer (any schema) that writers are filling
//   example_minimal_learner        create a demo buffer, fill it in-process, sample, remove it
#include <shmreplay/shmreplay.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  using namespace shmreplay;
  const bool demo = argc < 2;
  const std::string name = demo ? fmt::format("example-learner-{}", ::getpid()) : argv[1];
  try {
    if (demo) {  // a stand-in for writer processes: 2 envs, 100 steps each, obs = step index
      Buffer buffer = Buffer::create(name, 2, 64, Schema::parse("obs:f32 reward:f32 done:bool"));
      Writer writer(buffer, {0, 1});
      for (int i = 0; i < 100; ++i) {
        const int32_t ids[2] = {0, 1};
        const float obs[2] = {static_cast<float>(i), static_cast<float>(i)}, reward[2] = {1, 1};
        const uint8_t done[2] = {0, i % 10 == 9};
        writer.push(std::span<const int32_t>(ids), {value_bytes(obs), value_bytes(reward), value_bytes(done)});
      }
    }
    Buffer buffer = Buffer::open(name);
    Sampler learner(buffer);  // one learner per buffer: takes the learner lease

    // Block (on a futex shared with the writers) until the replay view holds 100 steps, at most 10 s.
    if (!learner.wait(View::replay, 100, 10'000)) {
      fmt::print(stderr, "no data after 10 s\n");
      return 1;
    }
    Rng rng(42);
    SampleBatch batch;  // reused: after the first call with a shape, sampling does not allocate
    // 4 rows from the replay view, then 4 from the online queue, 8 steps each, weights min(remaining, 8)^1.
    learner.sample_mixed(4, 4, 8, 1.0, rng, batch);
    learner.reset_online_queue();  // the online view now holds only steps pushed from here on

    const Schema& schema = buffer.schema();
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      fmt::print("row {} (env {}, steps {}..): ", row, batch.env_ids()[row], batch.start_steps()[row]);
      for (std::size_t t = 0; t < batch.sequence_length(); ++t) {
        if (!batch.valid(row, t)) {  // past the head: masked out, zero-filled
          fmt::print(" -");
          continue;
        }
        if (schema.fields()[0].dtype == DType::f32) {
          float first;
          std::memcpy(&first, batch.step(0, row, t), sizeof first);  // first element of field 0 at this step
          fmt::print(" {}", first);
        } else {
          fmt::print(" +");
        }
      }
      fmt::print("\n");
    }
    fmt::print("{} rows, {} retries\n", batch.rows(), learner.retries());
  } catch (const Error& e) {
    fmt::print(stderr, "example_minimal_learner: {}\n", e.what());
    if (demo) Buffer::remove(name);
    return 1;
  }
  if (demo) Buffer::remove(name);
  return 0;
}
