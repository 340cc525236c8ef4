// Helpers of test_cold (the cold tier, layout 1.11): a fresh cold directory per test, a tiered payload buffer, and
// the run of stored steps a model of the two tiers says an env holds.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "payload.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"

namespace shmreplay::test {

/// A fresh directory for a test's cold files (removed with everything in it at scope exit).
class ColdDir {
 public:
  explicit ColdDir(const std::string& tag)
      : guard_((std::filesystem::temp_directory_path() / unique_name("cold-" + tag)).string()) {
    std::filesystem::create_directories(guard_.path());
  }
  const std::string& path() const { return guard_.path(); }
  /// Where a segment's env files are: <dir>/<name>.cold.
  std::string of(const std::string& name) const { return path() + "/" + name + ".cold"; }

 private:
  DirGuard guard_;
};

/// A payload buffer (kPayloadSchema) with a cold tier of `cold` steps per env in `dir`.
inline Buffer make_tiered(const std::string& name, const ColdDir& dir, uint64_t envs, uint64_t capacity,
                          uint64_t cold, bool replace = false) {
  return Buffer::create(name, envs, capacity, kPayloadSchema,
                        {.replace = replace, .cold_capacity = cold, .cold_dir = dir.path()});
}

/// Pushes `steps` payload steps into every env of `b` (one batched push per step).
inline void push_payloads(Buffer& b, uint64_t steps) {
  std::vector<int32_t> ids;
  for (uint64_t e = 0; e < b.num_envs(); ++e) ids.push_back(static_cast<int32_t>(e));
  Writer w = Writer::range(b, 0, b.num_envs());
  PayloadPusher pusher;
  for (uint64_t n = 0; n < steps; ++n) pusher.push(w, ids);
}

/// The stored run of an env of a quiet tiered buffer after `head` pushes: [lo, head), the cold tier's records below
/// the ring (sealed: head - capacity of them once the ring is full).
inline uint64_t tiered_lo(uint64_t head, uint64_t capacity, uint64_t cold) {
  const uint64_t sealed = head > capacity ? head - capacity : 0;
  return sealed > cold ? sealed - cold : 0;
}

}  // namespace shmreplay::test
