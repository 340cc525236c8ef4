#include "detail/protocol/step_copy.hpp"

#include <atomic>
#include <cstring>

#include "shmreplay/layout.hpp"

namespace shmreplay::detail {

std::vector<uint64_t> record_field_offsets(const Schema& schema) {
  std::vector<uint64_t> offsets;
  offsets.reserve(schema.size());
  uint64_t at = 0;
  for (const Field& f : schema.fields()) {
    offsets.push_back(at);
    at += f.bytes();
  }
  return offsets;
}

CopyResult copy_records(const Buffer& buffer, uint64_t env, uint64_t first, uint64_t count,
                        const std::vector<uint64_t>& record_offsets, std::byte* dst) noexcept {
  const layout::EnvControl& c = buffer.env_control(env);
  const uint64_t cap = buffer.capacity();
  const Schema& schema = buffer.schema();
  const uint64_t record_bytes = schema.step_bytes();
  // acquire: pairs with the release store of update_seq that ends a learner's update or a checkpoint load, so
  // the bytes and counters they wrote are seen below. Loaded before the head so that a load that ends before
  // this point shows its new head, and one that ends after it changes update_seq.
  const uint64_t u0 = c.update_seq.load(std::memory_order_acquire);
  if ((u0 & 1) != 0) return {CopyOutcome::raced, 0};
  // acquire: pairs with the writer's release store of head: every step below it is completely written.
  const uint64_t head = c.head.load(std::memory_order_acquire);
  if (head < first + count) return {CopyOutcome::reset, 0};
  for (std::size_t f = 0; f < schema.size(); ++f) {
    const uint64_t b = schema[f].bytes();
    const std::byte* ring = buffer.field_data(f) + env * cap * b;
    std::byte* out = dst + record_offsets[f];
    uint64_t slot = first % cap;
    for (uint64_t i = 0; i < count; ++i) {
      std::memcpy(out + i * record_bytes, ring + slot * b, b);
      if (++slot == cap) slot = 0;
    }
  }
  // acquire fence: pairs with the writer's release fence after raising `claimed` (and the learner's or loader's
  // after making update_seq odd): if the copy read any byte written after those, the loads below see them.
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t claimed = c.claimed.load(std::memory_order_relaxed) & ~layout::kUpdateLockBit;
  const uint64_t u1 = c.update_seq.load(std::memory_order_relaxed);
  if (u1 != u0) return {CopyOutcome::raced, 0};
  // Step s is intact while no writer has claimed step s + cap, which reuses its slot.
  return {CopyOutcome::ok, claimed > cap ? claimed - cap : 0};
}

}  // namespace shmreplay::detail
