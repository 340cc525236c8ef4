// The smallest env worker: lease env ids, then push one step for whichever envs are ready, in any order.
//
//   example_minimal_writer NAME   push 1000 batches into an existing buffer whose schema is kSchema below, e.g.
//                                 shmreplay create NAME --envs 4 --capacity 1024 --schema 'obs:f32[4] action:i32 reward:f32 done:bool'
//   example_minimal_writer        create a demo buffer, push, print the heads, remove it
#include <shmreplay/shmreplay.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  using namespace shmreplay;
  const Schema schema = Schema::parse("obs:f32[4] action:i32 reward:f32 done:bool");
  const bool demo = argc < 2;
  const std::string name = demo ? fmt::format("example-writer-{}", ::getpid()) : argv[1];
  try {
    if (demo) Buffer::create(name, 4, 1024, schema);
    // Attaching checks the schema: a buffer made for other steps is refused with a message naming the field.
    Buffer buffer = Buffer::open(name, {.expected_schema = schema});
    // Lease every env of the buffer for this process (a live process holding one of them is an error).
    Writer writer = Writer::range(buffer, 0, buffer.num_envs());

    std::mt19937 rng(1);
    std::vector<int32_t> ids(buffer.num_envs());
    for (int i = 0; i < 1000; ++i) {
      // Whichever envs are ready, in any order, as envpool's async recv hands them back.
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      const std::size_t n = 1 + rng() % ids.size();
      // One contiguous array per field, in schema order, with a leading dimension of n.
      std::vector<float> obs(n * 4, static_cast<float>(i));
      std::vector<int32_t> action(n, i % 2);
      std::vector<float> reward(n, 1.0f);
      std::vector<uint8_t> done(n, i % 100 == 99);
      writer.push(std::span<const int32_t>(ids.data(), n),
                  {field_bytes(obs), field_bytes(action), field_bytes(reward), field_bytes(done)});
    }

    // Zero copy: reserve env 0's next slot, fill it in place, commit. Nothing is visible before commit().
    StepSlot slot = writer.reserve(0);
    std::ranges::fill(slot.as<float>(0), 42.0f);
    slot.as<int32_t>(1)[0] = 1;
    slot.as<float>(2)[0] = 0.5f;
    slot.as<uint8_t>(3)[0] = 0;
    slot.commit();

    for (uint64_t e = 0; e < buffer.num_envs(); ++e) {
      fmt::print("env {}: {} steps pushed, ring slot of the next one {}\n", e, writer.head(e),
                 writer.head(e) % buffer.capacity());
    }
  } catch (const Error& e) {
    fmt::print(stderr, "example_minimal_writer: {}\n", e.what());
    if (demo) Buffer::remove(name);
    return 1;
  }
  if (demo) Buffer::remove(name);
  return 0;
}
