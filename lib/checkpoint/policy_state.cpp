// lib/checkpoint/policy_state.cpp: policy versions in a checkpoint (format 2.2; layout 1.11, docs/design/policy.md):
// the version the learners had published and their window are saved, and a load publishes them in the target, and
// gives each env the newest version of its newest loaded step, so that its next writer goes on from it (an env's
// versions never decrease) and pacing learners see where each env stands.
//
// Who calls it: read_source_state (save) and load_into (load), which holds every env's and slot's lease.
#include <atomic>

#include "detail/protocol/policy.hpp"
#include "detail/protocol/seqlock.hpp"
#include "internal.hpp"

namespace shmreplay::detail {

void read_policy_state(const Buffer& b, CheckpointInfo& info) {
  const PolicyWindow w = load_policy_window(segment_of(b).policy_control());
  info.policy_version = w.version;
  info.policy_max_staleness = w.on() ? std::optional<uint64_t>(w.max_staleness) : std::nullopt;
}

void load_policy_state(Buffer& target, const CheckpointInfo& info) {
  Segment& seg = segment_of(target);
  const std::optional<std::size_t> field = target.episode_fields().policy_version;
  if (field) {
    const uint64_t bytes = target.schema()[*field].bytes();
    for (uint64_t e = 0; e < target.num_envs(); ++e) {
      const uint64_t head = load_head(seg.env_control(e));
      uint64_t newest = layout::kNoPolicyVersion;
      if (head > 0) {
        const std::byte* at = seg.field_data(*field) + (e * target.capacity() + (head - 1) % target.capacity()) * bytes;
        newest = read_policy_version(at, target.schema()[*field].dtype).value_or(layout::kNoPolicyVersion);
      }
      // relaxed: the load holds the env's lease; the lease's release publishes it to the next writer.
      seg.policy_env(e).newest.store(newest, std::memory_order_relaxed);
    }
  }
  if (info.policy_version != 0 || info.policy_max_staleness) {
    publish_policy(seg.policy_control(), info.policy_version,
                   field ? info.policy_max_staleness.value_or(layout::kNoPolicyWindow) : layout::kNoPolicyWindow);
  }
}

}  // namespace shmreplay::detail
