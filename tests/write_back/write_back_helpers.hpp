// Shared by the write-back tests (tests/write_back/): a schema whose steps say which env and step they are, with a
// derived field whose every word a write-back stamps with the (env, step) it was meant for and its own tag, so that
// a check can tell a write-back applied to the wrong step or a torn one.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "shmreplay/shmreplay.hpp"
#include "support.hpp"

namespace shmreplay::test {

// env, step: the handle's step as pushed; target: the derived field, 2 KiB, so that a copy of it takes long enough
// for a racing reader or a SIGKILL to land inside it.
inline const Schema kWriteBackSchema = Schema::parse("env:u64 step:u64 done:bool target:u64[256]:derived");
constexpr std::size_t kTargetField = 3;
constexpr std::size_t kTargetWords = 256;
using Target = std::array<uint64_t, kTargetWords>;

// The target a write-back with tag `tag` stores into step `step` of env `env` (tag 0: as pushed). Every word depends
// on all three, so a mix of two write-backs' words (a torn row) or another step's words never checks.
inline Target target_of(uint64_t env, uint64_t step, uint64_t tag) {
  Target t{};
  t[0] = (env << 48) ^ (step << 16) ^ tag;
  for (std::size_t k = 1; k < kTargetWords; ++k) t[k] = (env << 48) ^ (step << 8) ^ (tag * 0x9e3779b97f4a7c15ull) ^ k;
  return t;
}

// The tag of `t` if it is a whole target of (env, step) written with a tag below `tags` (< 2^16); nullopt otherwise.
inline std::optional<uint64_t> tag_of(const Target& t, uint64_t env, uint64_t step, uint64_t tags) {
  const uint64_t tag = t[0] ^ (env << 48) ^ (step << 16);
  if (tag >= tags || t != target_of(env, step, tag)) return std::nullopt;
  return tag;
}

// Pushes the next step of `env` (episodes of 7 steps), its target as pushed.
inline void push_stamped(Writer& w, uint64_t env) {
  const uint64_t step = w.head(env);
  const bool done = step % 7 == 6;
  const Target t = target_of(env, step, 0);
  w.push_one(env, {value_bytes(env), value_bytes(step), value_bytes(done), FieldBytes{t.data(), sizeof t}});
}

// The target of step t of row r of `batch`.
inline Target target_at(const SampleBatch& batch, std::size_t r, std::size_t t) {
  Target out{};
  std::memcpy(out.data(), batch.step(kTargetField, r, t), sizeof out);
  return out;
}

inline uint64_t word_at(const SampleBatch& batch, std::size_t field, std::size_t r, std::size_t t) {
  uint64_t v = 0;
  std::memcpy(&v, batch.step(field, r, t), sizeof v);
  return v;
}

// Write-back rows for handles (envs[i], steps[i]) with tag `tag`: one target per row, rows first.
inline std::vector<Target> targets_for(std::span<const uint64_t> envs, std::span<const uint64_t> steps, uint64_t tag) {
  std::vector<Target> rows(envs.size());
  for (std::size_t i = 0; i < envs.size(); ++i) rows[i] = target_of(envs[i], steps[i], tag);
  return rows;
}

// The fields of a write_back of `rows` (the target only).
inline std::vector<FieldBytes> target_fields(const std::vector<Target>& rows) {
  std::vector<FieldBytes> fields(kWriteBackSchema.size());
  fields[kTargetField] = {rows.data(), rows.size() * sizeof(Target)};
  return fields;
}

}  // namespace shmreplay::test
