// tests/checkpoint/checkpoint_helpers.hpp: what the parts of test_checkpoint share (format.cpp, reads.cpp, save.cpp,
// load.cpp, state.cpp; tests/CMakeLists.txt builds them into one executable): files removed in a scope
// guard, file contents read and written whole, a source segment with every kind of env, its counters.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"

namespace shmreplay::test {

/// Removes a file when it goes out of scope.
class FileGuard {
 public:
  explicit FileGuard(std::string path) : path_(std::move(path)) {}
  FileGuard(const FileGuard&) = delete;
  FileGuard& operator=(const FileGuard&) = delete;
  ~FileGuard() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string temp_path(const std::string& tag) { return fmt::format("/tmp/{}.ckpt", unique_name(tag)); }

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes a new file (removing the old one first: truncating a file on ext4 flushes its pending writes, slowly).
inline void spit(const std::string& path, std::string_view bytes) {
  std::remove(path.c_str());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Pushes `steps` payload steps into each env of `envs`, one batched push per step.
inline void push_steps(shmreplay::Writer& w, const std::vector<int32_t>& envs, uint64_t steps) {
  PayloadPusher pusher;
  for (uint64_t i = 0; i < steps; ++i) pusher.push(w, envs);
}

struct EnvCounters {
  uint64_t head, claimed, online_start;
  friend bool operator==(const EnvCounters&, const EnvCounters&) = default;
};

inline EnvCounters counters(const shmreplay::Buffer& b, uint64_t env) {
  const shmreplay::layout::EnvControl& c = b.segment().env_control(env);
  return {c.head.load(), c.claimed.load(), c.online_start.load()};
}

// A source segment with four kinds of env: empty, partly filled, wrapped, and wrapped with an abandoned
// reservation (claimed = head + 1); the online queue was reset midway.
inline void fill_mixed(shmreplay::Buffer& b) {
  shmreplay::Writer w(b, {0, 1, 2, 3});
  push_steps(w, {1, 2, 3}, 5);
  {
    shmreplay::Sampler learner(b);
    learner.reset_online_queue();
  }
  push_steps(w, {2, 3}, 30);
  shmreplay::StepSlot slot = w.reserve(3);
  fill_slot(slot, 1);  // abandoned half-filled: never published
}

inline const shmreplay::Schema kOtherSchema = shmreplay::Schema::parse("hdr:u64[4] body:f32[13] tail:u8[30]");

}  // namespace shmreplay::test

using namespace shmreplay;
using test::FileGuard;
using test::SegmentGuard;
using test::UmaskGuard;
using test::check_env_payloads;
using test::counters;
using test::file_mode;
using test::fill_mixed;
using test::kOtherSchema;
using test::kPayloadSchema;
using test::payload_bytes;
using test::push_steps;
using test::slurp;
using test::spit;
using test::stored_step;
using test::temp_path;
using test::unique_name;
