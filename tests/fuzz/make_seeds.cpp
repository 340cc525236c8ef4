// shmreplay_fuzz_seeds OUT_DIR: writes the fuzz targets' seed corpora, made by the library itself, into
// OUT_DIR/schema (schema texts), OUT_DIR/segment (segment files) and OUT_DIR/checkpoint (checkpoint files):
// small buffers of several schemas, with and without episode fields, priorities, a rate limiter and stacked fields,
// empty, partly filled, wrapped, with an abandoned reservation, an online-queue reset, an updated step, samples
// and completed episodes, some popped. Each checkpoint is written in format 2.0 (save_checkpoint) and again in
// format 1.0 (NAME.v1.ckpt: the same steps under the 1.0 headers, as the previous release wrote them), so that
// both readers are fuzzed; a chain's incremental link (save_link) is one more seed. tools/fuzz/make_corpus.sh runs
// it (and adds a segment and a checkpoint made by the CLI).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detail/os/crc32.hpp"
#include "shmreplay/internal/checkpoint_format.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"
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
  std::optional<RateLimit> rate_limit = std::nullopt;
  StackContinuity stack_continuity = StackContinuity::compare;
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

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class T>
T read_at(const std::string& bytes, uint64_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof value);
  return value;
}

template <class T>
void append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <class T>
uint32_t struct_crc(T copy, uint32_t T::*field) {
  copy.*field = 0;
  return detail::crc32(0, &copy, sizeof copy);
}

// The format 1.0 file of the self-contained format 2.0 checkpoint `v2` (checkpoint_format.hpp has both): the same
// meta block and records under a 1.0 header and 1.0 env sections, without the weights and queued episode records.
std::string as_format_1_0(const std::string& v2) {
  namespace cf = checkpoint_format;
  const auto h = read_at<cf::CheckpointHeader>(v2, 0);
  cf::v1::CheckpointHeader o{};
  o.magic = cf::kMagic;
  o.format_major = cf::v1::kFormatMajor;
  o.format_minor = 0;
  o.header_bytes = sizeof o;
  o.num_envs = h.num_envs;
  o.capacity = h.capacity;
  o.num_fields = h.num_fields;
  o.step_bytes = h.step_bytes;
  o.total_steps = h.total_records;
  o.meta_bytes = h.meta_bytes;
  o.name_bytes = h.name_bytes;
  o.schema_bytes = h.schema_bytes;
  o.saved_time_ns = h.saved_time_ns;
  o.source_creation_time_ns = h.source_creation_time_ns;
  o.source_layout_major = h.source_layout_major;
  o.source_layout_minor = h.source_layout_minor;
  o.episode_done = h.episode_done;
  o.episode_terminated = h.episode_terminated;
  o.episode_truncated = h.episode_truncated;
  o.episode_reward = h.episode_reward;
  o.episode_queue_capacity = h.episode_queue_capacity;
  o.meta_crc = h.meta_crc;
  std::string body = v2.substr(h.header_bytes, h.meta_bytes);
  uint64_t at = h.header_bytes + h.meta_bytes;
  for (uint64_t k = 0; k < h.num_envs; ++k) {
    const auto e = read_at<cf::EnvSection>(v2, at);
    cf::v1::EnvSection n{};
    n.magic = cf::v1::kEnvMagic;
    n.env = e.env;
    n.first_step = e.first_step;
    n.steps = e.records;
    n.head = e.head;
    n.claimed = e.claimed;
    n.online_start = e.online_start;
    n.last_push_ns = e.last_push_ns;
    n.data_crc = e.data_crc;
    n.header_crc = struct_crc(n, &cf::v1::EnvSection::header_crc);
    append(body, n);
    const uint64_t records = e.records * h.step_bytes;
    body.append(v2, at + sizeof e, records);
    at += sizeof e + records + e.weights * sizeof(float) + e.queued * sizeof(cf::EpisodeRecordBytes);
  }
  body.append(v2, at, sizeof(cf::CheckpointTrailer));
  o.file_bytes = sizeof o + body.size();
  o.header_crc = struct_crc(o, &cf::v1::CheckpointHeader::header_crc);
  std::string out;
  append(out, o);
  return out + body;
}

// What a learner leaves in a buffer with steps: an online reset, a step rewritten in place, priorities set (and a
// running maximum above 1), counters and limiter counts that moved, and a completed-episode record taken (others
// left waiting).
void use_as_a_learner(Buffer& b, uint64_t steps) {
  Sampler learner(b);
  learner.reset_online_queue();
  fill(b, 1, 2);
  if (b.schema()[0].bytes() > 0) {
    std::vector<std::byte> bytes(b.schema().step_bytes(), std::byte{0x55});
    std::vector<FieldBytes> fields;
    std::size_t at = 0;
    const EpisodeFieldIndices& roles = b.episode_fields();
    for (std::size_t f = 0; f < b.schema().size(); ++f) {
      // episode flags are set at push, a stacked field's frames shared with other steps: never rewritten
      const bool fixed =
          roles.done == f || roles.terminated == f || roles.truncated == f || b.schema()[f].stacked();
      fields.push_back(fixed ? FieldBytes{} : FieldBytes{bytes.data() + at, b.schema()[f].bytes()});
      at += b.schema()[f].bytes();
    }
    (void)learner.try_update(0, segment_of(b).env_control(0).head.load() - 1, fields);
  }
  if (b.has_priorities()) {  // some priorities the learner set, and a running maximum above 1
    const uint64_t head = segment_of(b).env_control(0).head.load();
    const std::vector<uint64_t> envs = {0, 0};
    const std::vector<uint64_t> which = {head - 1, head > 1 ? head - 2 : head - 1};
    const std::vector<float> prios = {3.5f, 0.0f};
    (void)learner.update_priorities(envs, which, prios);
  }
  // Counters and limiter counts that moved, and a completed-episode record taken (others left waiting).
  Rng rng(steps);
  SampleBatch batch;
  try {
    learner.sample(View::replay, 4, 1, 0.0, rng, batch, {.rate_limit_timeout_ms = 0});
  } catch (const Error&) {  // the limiter may hold a small buffer back
  }
  EpisodeRecord record[1];
  (void)learner.pop_episodes(record);
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
      {"limited", specs[0], 2, 8, {.done = "done", .reward = "reward"}, 4, 0.5, RateLimit::ratio(1.0, 2, 100.0)},
      {"stacked", "obs:u8[3,2,2]:stack=0 x:u16", 2, 8, {}},
      {"stacked-ep", "obs:u8[2,3]:stack=1 reward:f32 done:bool", 2, 8, {.done = "done", .reward = "reward"}, 4, 0.7,
       std::nullopt, StackContinuity::episodes},
      {"packed", "obs:u8[4,6,6]:stack=0:lz4 x:u16", 2, 8, {}},  // format 2.3: the records and their frame block
  };
  int made = 0;
  for (const Shape& shape : shapes) {
    for (const uint64_t steps : {uint64_t{0}, uint64_t{3}, shape.capacity * 2 + 1}) {
      const std::string name = fmt::format("{}-{}", shape.tag, steps);
      Buffer b = Buffer::create(name, shape.envs, shape.capacity, Schema::parse(shape.spec),
                                {.episodes = shape.episodes,
                                 .episode_queue_capacity = shape.queue_capacity,
                                 .priority_exponent = shape.priority_exponent,
                                 .rate_limit = shape.rate_limit,
                                 .stack_continuity = shape.stack_continuity});
      fill(b, steps, 3);
      if (steps > 0) use_as_a_learner(b, steps);
      if (steps == 3) {  // an abandoned reservation: claimed = head + 1
        Writer w(b, {0});
        StepSlot slot = w.reserve(0);
      }
      fs::copy_file(b.path(), out / "segment" / name, fs::copy_options::overwrite_existing);
      const fs::path saved = out / "checkpoint" / (name + ".ckpt");
      (void)save_checkpoint(b, saved.string());
      if (shape.tag != "packed") {  // 1.0 held whole records only
        std::ofstream(out / "checkpoint" / (name + ".v1.ckpt"), std::ios::binary) << as_format_1_0(read_bytes(saved));
      }
      if (shape.tag == "prio" && steps == 3) {  // a chain's incremental link: env 0's new steps only
        const fs::path dir = fs::path(dir_template) / "chain";
        (void)save_link(b, dir.string());
        fill(b, 2, 3);
        const LinkResult link = save_link(b, dir.string());
        fs::copy_file(link.info.path, out / "checkpoint" / "prio-link.ckpt", fs::copy_options::overwrite_existing);
        fs::remove_all(dir);
      }
      Buffer::remove(name);
      ++made;
    }
  }
  fs::remove_all(dir_template);
  std::printf("wrote %zu schema texts, %d segments and %d checkpoints (format 2.0, 1.0 and a chain link) under %s\n",
              specs.size() + 1, made, 2 * made + 1, out.c_str());
  return 0;
}
