// A self-checking step payload shared by the concurrency tests: every step carries its env, its step index, a
// version (bumped by the learner's try_update) and a checksum over all of its bytes, so a torn, misplaced or
// stale step is detected wherever it turns up.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "shmreplay/internal/segment.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"  // spawn

#include <vector>

namespace shmreplay::test {

// hdr = {env, step, version, checksum}; body and tail are derived from (env, step, version).
inline const Schema kPayloadSchema = Schema::parse("hdr:u64[4] body:f32[13] tail:u8[29]");
constexpr std::size_t kBody = 13;
constexpr std::size_t kTail = 29;

struct Payload {
  uint64_t hdr[4];
  float body[kBody];
  uint8_t tail[kTail];
};

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

inline uint64_t checksum(const uint64_t* hdr, const float* body, const uint8_t* tail) {
  uint64_t h = mix(hdr[0] * 31 + hdr[1] * 7 + hdr[2]);
  for (std::size_t i = 0; i < kBody; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, body + i, 4);
    h = mix(h ^ bits);
  }
  for (std::size_t i = 0; i < kTail; ++i) h = mix(h ^ tail[i]);
  return h;
}

inline Payload make_payload(uint64_t env, uint64_t step, uint64_t version) {
  Payload p{};
  p.hdr[0] = env;
  p.hdr[1] = step;
  p.hdr[2] = version;
  for (std::size_t i = 0; i < kBody; ++i) p.body[i] = static_cast<float>((env * 131 + step * 17 + version + i) % 4096);
  for (std::size_t i = 0; i < kTail; ++i) p.tail[i] = static_cast<uint8_t>(env * 31 + step * 7 + version * 3 + i);
  p.hdr[3] = checksum(p.hdr, p.body, p.tail);
  return p;
}

/// make_payload(env, step, version), remembered: the soak checks each stored step many times over, and computing
/// its expected bytes (a chain of 43 multiplications) cost more than sampling it. A direct-mapped cache per thread;
/// an entry is used only when its whole key matches.
inline const Payload& expected_payload(uint64_t env, uint64_t step, uint64_t version) {
  struct Entry {
    uint64_t env = ~0ull, step = ~0ull, version = ~0ull;
    Payload payload{};
  };
  constexpr std::size_t kEntries = 4096;
  thread_local std::vector<Entry> cache(kEntries);
  Entry& entry = cache[mix(env * 0x9e3779b97f4a7c15ull + step * 31 + version) % kEntries];
  if (entry.env != env || entry.step != step || entry.version != version) {
    entry = {env, step, version, make_payload(env, step, version)};
  }
  return entry.payload;
}

/// How long a soak loop runs: SHMREPLAY_SOAK_SECONDS when it is set to a positive number of seconds (exactly that,
/// as the README promises), else `ci_seconds`, the loop's own default for CI.
inline double run_seconds(double ci_seconds = 0.6) {
  const char* soak = std::getenv("SHMREPLAY_SOAK_SECONDS");
  return soak != nullptr && std::atof(soak) > 0 ? std::atof(soak) : ci_seconds;
}

/// How many steps of a row are valid, when its mask is a prefix (as every row's must be); nullopt on a hole.
inline std::optional<std::size_t> mask_prefix(const SampleBatch& b, std::size_t row) {
  const std::size_t L = b.sequence_length();
  std::size_t valid = 0;
  while (valid < L && b.valid(row, valid)) ++valid;
  for (std::size_t t = valid; t < L; ++t) {
    if (b.valid(row, t)) return std::nullopt;
  }
  return valid;
}

// Checks one row of a batch; returns a description of the first violation, or "" when the row is sound.
// `head_after` is the row's env's head read after the sample call: no valid step may reach it. `head_before`,
// when given, is that head read before the call: the row was cut at a head at least that high, so it must hold
// at least min(L, head_before - start) steps (the mask is not cut short). 0 checks no lower bound.
inline std::string check_row(const SampleBatch& b, std::size_t row, uint64_t head_after, uint64_t head_before = 0) {
  const uint64_t env = b.env_ids()[row];
  const uint64_t start = b.start_steps()[row];
  const std::size_t L = b.sequence_length();
  const std::optional<std::size_t> prefix = mask_prefix(b, row);
  if (!prefix) return "mask has a hole";
  const std::size_t valid = *prefix;
  if (valid == 0) return "row with no valid step";
  if (start + valid > head_after) return "row reaches past the head";
  if (head_before > start && valid < std::min<uint64_t>(L, head_before - start)) {
    return fmt::format("mask cut short: {} valid steps from start {}, but the head was already {} (L = {})", valid,
                       start, head_before, L);
  }
  for (std::size_t t = 0; t < L; ++t) {
    uint64_t hdr[4];
    float body[kBody];
    uint8_t tail[kTail];
    std::memcpy(hdr, b.step(0, row, t), sizeof hdr);
    std::memcpy(body, b.step(1, row, t), sizeof body);
    std::memcpy(tail, b.step(2, row, t), sizeof tail);
    if (t >= valid) {
      for (const uint64_t h : hdr) if (h != 0) return "masked step not zero";
      continue;
    }
    if (hdr[0] != env) return fmt::format("step of env {} in a row of env {}", hdr[0], env);
    if (hdr[1] != start + t) return fmt::format("step {} at position {} of a row starting at {}", hdr[1], t, start);
    // Every byte against the payload that (env, step, version) makes, checksum included: a step torn between two
    // writes differs from both in some byte.
    const Payload& expect = expected_payload(env, hdr[1], hdr[2]);
    if (hdr[3] != expect.hdr[3]) return fmt::format("torn step {} of env {}", hdr[1], env);
    if (std::memcmp(body, expect.body, sizeof body) != 0 || std::memcmp(tail, expect.tail, sizeof tail) != 0) {
      return "payload does not match its header";
    }
  }
  return "";
}

/// Pushes one payload step (version 0) for each env of `ids` in one batched push; `scratch` vectors are reused.
struct PayloadPusher {
  std::vector<uint64_t> hdr;
  std::vector<float> body;
  std::vector<uint8_t> tail;

  void push(Writer& writer, const std::vector<int32_t>& ids) {
    hdr.clear();
    body.clear();
    tail.clear();
    for (const int32_t e : ids) {
      const auto env = static_cast<uint64_t>(e);
      // Not writer.head(env): a test may list an env the writer does not lease, to see the push refused.
      const Payload p = make_payload(env, segment_of(writer.buffer()).env_control(env).head.load(std::memory_order_relaxed), 0);
      hdr.insert(hdr.end(), p.hdr, p.hdr + 4);
      body.insert(body.end(), p.body, p.body + kBody);
      tail.insert(tail.end(), p.tail, p.tail + kTail);
    }
    writer.push(ids, {field_bytes(hdr), field_bytes(body), field_bytes(tail)});
  }
};

/// A writer process (test::spawn) pushing payload steps into `envs` of `name` until killed: one batched push, and a
/// pause of `pause_us` every 8 pushes (1000: about 7,000 steps a second per env, an RL actor's pace; 100: a busy
/// writer that still leaves a core to the process under test). Exits with 3, naming the error, if a push fails.
inline pid_t spawn_payload_writer(const std::string& name, std::vector<int32_t> envs, unsigned pause_us) {
  return spawn([name, envs, pause_us] {
    try {
      Buffer b = Buffer::open(name);
      Writer w(b, std::vector<uint64_t>(envs.begin(), envs.end()));
      PayloadPusher pusher;
      for (uint64_t n = 1;; ++n) {
        pusher.push(w, envs);
        if (n % 8 == 0) ::usleep(pause_us);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "writer process: %s\n", e.what());
      ::_exit(3);
    }
  });
}

/// Fills a reserved slot with its payload (version 0); `fields` limits how many fields are written (to leave a
/// reservation half-filled).
inline void fill_slot(StepSlot& slot, std::size_t fields = 3) {
  const Payload p = make_payload(slot.env(), slot.step(), 0);
  if (fields > 0) std::memcpy(slot.field(0).data(), p.hdr, sizeof p.hdr);
  if (fields > 1) std::memcpy(slot.field(1).data(), p.body, sizeof p.body);
  if (fields > 2) std::memcpy(slot.field(2).data(), p.tail, sizeof p.tail);
}

/// The stored bytes of step `step` of env `env`, its fields in schema order (no writer may be writing it).
inline std::string stored_step(const Buffer& b, uint64_t env, uint64_t step) {
  std::string out;
  const uint64_t cap = b.capacity();
  for (std::size_t f = 0; f < b.schema().size(); ++f) {
    const uint64_t bytes = b.schema()[f].bytes();
    const auto* p = reinterpret_cast<const char*>(segment_of(b).field_data(f) + (env * cap + step % cap) * bytes);
    out.append(p, bytes);
  }
  return out;
}

/// The bytes of payload (env, step, version), fields in schema order: what a payload writer publishes (version 0), or
/// what a learner's try_update of it wrote (the version it chose).
inline std::string payload_bytes(uint64_t env, uint64_t step, uint64_t version = 0) {
  const Payload p = make_payload(env, step, version);
  std::string out(reinterpret_cast<const char*>(p.hdr), sizeof p.hdr);
  out.append(reinterpret_cast<const char*>(p.body), sizeof p.body);
  out.append(reinterpret_cast<const char*>(p.tail), sizeof p.tail);
  return out;
}

/// The version of stored step `step` of env `env` (no writer may be writing it) when its bytes are exactly the
/// payload of (env, step, the version its header names), nullopt when they are not (torn, misplaced, stale).
inline std::optional<uint64_t> stored_version(const Buffer& b, uint64_t env, uint64_t step) {
  const std::string bytes = stored_step(b, env, step);
  uint64_t hdr[4];
  std::memcpy(hdr, bytes.data(), sizeof hdr);
  if (bytes != payload_bytes(env, step, hdr[2])) return std::nullopt;
  return hdr[2];
}

// Checks every step in env's replay view is the payload of (env, step); returns the first violation or "".
inline std::string check_env_payloads(const Buffer& b, uint64_t env) {
  const layout::EnvControl& c = segment_of(b).env_control(env);
  const uint64_t head = c.head.load();
  const uint64_t claimed = c.claimed.load() & layout::kClaimMask;
  const uint64_t lo = claimed > b.capacity() ? claimed - b.capacity() : 0;
  for (uint64_t s = lo; s < head; ++s) {
    if (stored_step(b, env, s) != payload_bytes(env, s)) return fmt::format("env {} step {} differs", env, s);
  }
  return "";
}

}  // namespace shmreplay::test
