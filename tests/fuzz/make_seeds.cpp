// shmreplay_fuzz_seeds OUT_DIR: writes the fuzz targets' seed corpora, made by the library itself, into
// OUT_DIR/schema (schema texts), OUT_DIR/segment (segment files) and OUT_DIR/checkpoint (checkpoint files):
// small buffers of several schemas, with and without episode fields, empty, partly filled, wrapped, with an
// abandoned reservation, an online-queue reset, an updated step and completed episodes. tools/fuzz/make_corpus.sh
// runs it (and adds a segment and a checkpoint made by the CLI).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "shmreplay/shmreplay.hpp"

namespace {

using namespace shmreplay;
namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

struct Shape {
  std::string tag;
  std::string spec;
  uint64_t envs;
  uint64_t capacity;
  EpisodeFields episodes;
  uint64_t queue_capacity = 0;
  std::optional<double> priority_exponent = std::nullopt;
};

// Pushes `steps` steps into every env: field bytes from a counter, flags set every `episode` steps.
void fill(Buffer& b, uint64_t steps, uint64_t episode) {
  Writer w = Writer::range(b, 0, b.num_envs());
  const Schema& schema = b.schema();
  std::vector<std::vector<std::byte>> values(schema.size());
  for (uint64_t s = 0; s < steps; ++s) {
    for (uint64_t e = 0; e < b.num_envs(); ++e) {
      std::vector<FieldBytes> fields;
      for (std::size_t f = 0; f < schema.size(); ++f) {
        values[f].assign(schema[f].bytes(), std::byte{0});
        const bool flag = schema[f].dtype == DType::boolean && episode != 0 && (s + e) % episode == episode - 1;
        for (std::size_t i = 0; i < values[f].size(); ++i) {
          values[f][i] = schema[f].dtype == DType::boolean ? std::byte{flag} : std::byte((s * 7 + e * 3 + i) & 0x3f);
        }
        fields.push_back({values[f].data(), values[f].size()});
      }
      w.push_one(e, fields);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  for (const char* sub : {"schema", "segment", "checkpoint"}) fs::create_directories(out / sub);
  char dir_template[] = "/dev/shm/shmreplay-seeds-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) return 1;
  ::setenv("SHMREPLAY_SHM_DIR", dir_template, 1);

  const std::vector<std::string> specs = {
      "obs:f32[4] action:i32 reward:f32 done:bool",
      "hdr:u64[4] body:f32[13] tail:u8[29]",
      "img:u8[84,84,4] action:u8 reward:f32 terminated:bool truncated:bool",
      "a:i8 b:u8 c:i16 d:u16 e:i32 f:u32 g:i64 h:u64",
      "h:f16[2,3] b:bf16 d:f64[1] flag:bool",
      "x:u8",
  };
  for (std::size_t i = 0; i < specs.size(); ++i) write_text(out / "schema" / fmt::format("spec-{}", i), specs[i]);
  write_text(out / "schema" / "spaced", "  obs : f32 [ 4 ]\n action:i32\treward:f32  ");

  const std::vector<Shape> shapes = {
      {"cartpole", specs[0], 2, 8, {.done = "done", .reward = "reward"}, 4},
      {"payload", specs[1], 3, 4, {}},
      {"flags", "obs:u8[3] reward:f64 terminated:bool truncated:bool", 2, 16,
       {.terminated = "terminated", .truncated = "truncated", .reward = "reward"}, 2},
      {"dtypes", specs[4], 1, 5, {}},
      {"tiny", specs[5], 1, 1, {}},
      {"prio", specs[0], 2, 8, {.done = "done", .reward = "reward"}, 4, 0.6},
      {"prio-flat", specs[5], 3, 5, {}, 0, 1.0},
  };
  int made = 0;
  for (const Shape& shape : shapes) {
    for (const uint64_t steps : {uint64_t{0}, uint64_t{3}, shape.capacity * 2 + 1}) {
      const std::string name = fmt::format("{}-{}", shape.tag, steps);
      Buffer b = Buffer::create(name, shape.envs, shape.capacity, Schema::parse(shape.spec),
                                {.episodes = shape.episodes,
                                 .episode_queue_capacity = shape.queue_capacity,
                                 .priority_exponent = shape.priority_exponent});
      fill(b, steps, 3);
      if (steps > 0) {
        Sampler learner(b);
        learner.reset_online_queue();
        fill(b, 1, 2);
        if (b.schema()[0].bytes() > 0) {
          std::vector<std::byte> bytes(b.schema().step_bytes(), std::byte{0x55});
          std::vector<FieldBytes> fields;
          std::size_t at = 0;
          const EpisodeFieldIndices& roles = b.episode_fields();
          for (std::size_t f = 0; f < b.schema().size(); ++f) {
            const bool fixed = roles.done == f || roles.terminated == f || roles.truncated == f;  // set at push
            fields.push_back(fixed ? FieldBytes{} : FieldBytes{bytes.data() + at, b.schema()[f].bytes()});
            at += b.schema()[f].bytes();
          }
          (void)learner.try_update(0, b.segment().env_control(0).head.load() - 1, fields);
        }
        if (b.has_priorities()) {  // some priorities the learner set, and a running maximum above 1
          const uint64_t head = b.segment().env_control(0).head.load();
          const std::vector<uint64_t> envs = {0, 0};
          const std::vector<uint64_t> steps = {head - 1, head > 1 ? head - 2 : head - 1};
          const std::vector<float> prios = {3.5f, 0.0f};
          (void)learner.update_priorities(envs, steps, prios);
        }
      }
      if (steps == 3) {  // an abandoned reservation: claimed = head + 1
        Writer w(b, {0});
        StepSlot slot = w.reserve(0);
      }
      fs::copy_file(b.path(), out / "segment" / name, fs::copy_options::overwrite_existing);
      (void)save_checkpoint(b, (out / "checkpoint" / (name + ".ckpt")).string());
      Buffer::remove(name);
      ++made;
    }
  }
  fs::remove_all(dir_template);
  std::printf("wrote %zu schema texts, %d segments and %d checkpoints under %s\n", specs.size() + 1, made, made,
              out.c_str());
  return 0;
}
