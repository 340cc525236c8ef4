// Reads a buffer's schema at run time: open a segment by name and learn its whole shape from the segment.
//
//   example_read_schema NAME    describe an existing buffer (e.g. one made by `shmreplay create`)
//   example_read_schema         create a demo buffer, describe it, remove it
#include <shmreplay/shmreplay.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <string>

namespace {

void describe(const shmreplay::Buffer& buffer) {
  fmt::print("buffer '{}': {} envs x {} steps, {} bytes per step, {} bytes in all\n", buffer.name(),
             buffer.num_envs(), buffer.capacity(), buffer.schema().step_bytes(), buffer.total_bytes());
  for (const shmreplay::Field& field : buffer.schema().fields()) {
    // field.shape is empty for a scalar; elements() is the product of the shape.
    fmt::print("  {:<12} dtype {:<5} shape [{}]  {} elements, {} bytes per step\n", field.name,
               shmreplay::dtype_name(field.dtype), fmt::join(field.shape, ","), field.elements(), field.bytes());
  }
  fmt::print("  spec: {}\n", buffer.schema().to_string());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1) {
      // Read-only: a look inside never disturbs writers or the learner.
      describe(shmreplay::Buffer::open(argv[1], {.read_only = true}));
      return 0;
    }
    const std::string name = fmt::format("example-read-schema-{}", ::getpid());
    const auto schema = shmreplay::Schema::parse("obs:f32[4] action:i32 logprob:f32 reward:f32 value:f32 done:bool");
    (void)shmreplay::Buffer::create(name, 8, 1024, schema);
    describe(shmreplay::Buffer::open(name, {.expected_schema = schema}));
    shmreplay::Buffer::remove(name);
    return 0;
  } catch (const shmreplay::Error& e) {
    fmt::print(stderr, "example_read_schema: {}\n", e.what());
    return 1;
  }
}
