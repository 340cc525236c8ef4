// shmreplay/inspector.hpp: a read-only view of a segment, for tools and monitoring.
//
// An Inspector maps a segment read-only (PROT_READ): it can never write the segment, so it never disturbs the
// writers or the learner. Snapshots read each counter with one atomic load; counters of different envs are not
// read at one instant, which is fine for display. read_steps() copies stored steps out with the Sampler's seqlock
// validation, so what it returns was never torn, without taking the learner lease. Safe to use from any thread
// and any process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shmreplay/buffer.hpp"

namespace shmreplay {

enum class OwnerState {
  none,   ///< no writer holds the env's lease
  alive,  ///< the lease holder is running (its pid exists with the recorded start time)
  dead,   ///< the lease holder is gone; a new writer may take the lease over
};
std::string_view to_string(OwnerState state) noexcept;

struct EnvInfo {
  uint64_t env = 0;
  uint64_t head = 0;           ///< steps published since creation
  uint64_t claimed = 0;        ///< steps whose write has begun (head + 1 while a write is in progress)
  uint64_t online_start = 0;   ///< head at the last reset of the online queue
  uint64_t length = 0;         ///< steps in the replay view: head - max(0, claimed - capacity)
  uint64_t online_length = 0;  ///< steps in the online view: those of the replay view at or after online_start
  OwnerState owner = OwnerState::none;
  uint64_t owner_pid = 0;
  uint64_t owner_start_ticks = 0;
  uint64_t lease_since_ns = 0;   ///< CLOCK_REALTIME; 0 when there is no owner
  uint64_t lease_takeovers = 0;
  uint64_t last_push_ns = 0;     ///< CLOCK_REALTIME; 0 when nothing was pushed
  // Episodes (all 0 in a buffer without episode fields):
  uint64_t episodes_completed = 0;       ///< episodes whose last step was published, since creation
  uint64_t episode_records_dropped = 0;  ///< records lost because the queue was full when the episode ended
  uint64_t episode_queue_depth = 0;      ///< records waiting for the learner (Sampler::pop_episodes)
  uint64_t episode_start = 0;            ///< first step of the episode in progress
  uint64_t last_episode_length = 0;      ///< the last completed episode (0: none yet)
  double last_episode_return = 0.0;
  EpisodeEnd last_episode_end = EpisodeEnd::none;
  // Priorities (0 in a buffer without): the sum of priority^alpha over the replay view, read from the env's tree.
  double priority_total = 0.0;
};

/// The learner (the Sampler holding the learner lease) and its counters.
struct LearnerInfo {
  OwnerState state = OwnerState::none;
  uint64_t pid = 0;
  uint64_t start_ticks = 0;
  uint64_t since_ns = 0;        ///< CLOCK_REALTIME when it attached; 0 when none
  uint64_t takeovers = 0;       ///< dead learners replaced
  uint64_t rows_sampled = 0;    ///< over the segment's life
  uint64_t sample_calls = 0;
  uint64_t retries = 0;         ///< rows redrawn because writers overwrote them during the copy
  uint64_t online_resets = 0;
  uint64_t steps_updated = 0;
  uint64_t waiters = 0;         ///< learners blocked in wait() right now
};

struct SegmentInfo {
  std::string name;
  std::string path;
  uint32_t layout_major = 0;
  uint32_t layout_minor = 0;
  uint64_t num_envs = 0;
  uint64_t capacity = 0;
  uint64_t step_bytes = 0;
  uint64_t total_bytes = 0;
  uint64_t data_bytes = 0;
  Schema schema;
  uint32_t owner_uid = 0;       ///< the uid that owns the segment file
  std::string owner_name;       ///< its user name; "" when the password database has none
  uint64_t creator_pid = 0;
  bool creator_alive = false;
  uint64_t creation_time_ns = 0;  ///< CLOCK_REALTIME
  std::vector<EnvInfo> envs;
  uint64_t total_pushed = 0;   ///< sum of heads
  uint64_t replay_steps = 0;   ///< sum of lengths
  uint64_t online_steps = 0;   ///< sum of online lengths
  uint64_t live_writers = 0;   ///< distinct alive lease holders
  LearnerInfo learner;
  // Episodes (layout 1.2): the fields with episode roles, and totals over envs.
  EpisodeFieldIndices episode_fields;  ///< schema indices of done / terminated / truncated / reward
  uint64_t episode_queue_capacity = 0; ///< records per env's queue; 0 without episode fields
  uint64_t episodes_completed = 0;
  uint64_t episode_records_dropped = 0;
  uint64_t episode_queue_depth = 0;
  // Priorities (layout 1.3): alpha (nullopt without priorities), the running maximum, the learner's updates.
  std::optional<double> priority_exponent;
  double max_priority = 0.0;
  double priority_total = 0.0;          ///< sum of priority^alpha over every env's replay view
  uint64_t priority_updates = 0;
  uint64_t priority_updates_dropped = 0;
  // The rate limiter (layout 1.4): its settings (limit is nullopt without one), counts and waits.
  RateLimitState rate_limit;
};

/// Consecutive published steps of one env, copied out of the segment (Inspector::read_steps). Each record is one
/// step: its fields in schema order, back to back.
struct StepRecords {
  uint64_t env = 0;
  uint64_t first_step = 0;              ///< the global index of the first record's step
  uint64_t count = 0;                   ///< records held: steps first_step .. first_step + count - 1
  uint64_t record_bytes = 0;            ///< bytes of one record (the schema's step bytes)
  std::vector<uint64_t> field_offsets;  ///< where each field starts inside a record, in schema order
  std::vector<std::byte> bytes;         ///< count records, oldest first

  /// The bytes of field `field` in record `index` (step first_step + index). Preconditions: in range.
  std::span<const std::byte> field(std::size_t index, std::size_t field) const noexcept;
};

class Inspector {
 public:
  /// Opens `name` read-only (whatever options.read_only says), with open()'s full validation and `options`
  /// otherwise: a segment of another user is refused unless options.allow_other_owner (tools that only display
  /// it, as `shmreplay info`, set it and show the owner). Throws Error as Buffer::open does.
  explicit Inspector(std::string_view name, OpenOptions options = {});
  explicit Inspector(Buffer buffer) : buffer_(std::move(buffer)) {}

  /// Reads every counter of the segment. O(num_envs); checks the liveness of each distinct owner once. Each env's
  /// episode state (completed, last episode, episode in progress) is one consistent read of its writer's journal.
  SegmentInfo snapshot() const;

  /// Copies the published steps of env `env` in [first_step, first_step + count) that are stored (the part of
  /// that range inside the replay view, [max(0, claimed - capacity), head)). Writers keep pushing meanwhile: the
  /// copy is validated like a sample row, and steps whose slots a writer reclaimed before they were copied are
  /// left out, so the result is the newer end of the range (its first_step may be above the one asked for, and
  /// count may be 0). Every record is exactly what its writer published. Never writes the segment and never
  /// blocks. Throws env_out_of_range, and contended when the learner kept rewriting the env during the copy.
  /// O(count * num_fields) time and memory.
  StepRecords read_steps(uint64_t env, uint64_t first_step, uint64_t count) const;

  const Buffer& buffer() const noexcept { return buffer_; }

 private:
  Buffer buffer_;
};

/// Inspector::read_steps on a Buffer this process holds already (mapped read-only or not), without opening the
/// segment again by name (which could be another file by now).
StepRecords read_steps(const Buffer& buffer, uint64_t env, uint64_t first_step, uint64_t count);

/// One entry of list_segments(): a file whose first bytes are shmreplay's magic.
struct ListedSegment {
  std::string name;
  std::optional<SegmentInfo> info;  ///< when it opened cleanly
  std::string error;                ///< why it did not (truncated, version mismatch, ...)
};

/// Every shmreplay segment in shm_directory(), sorted by name, other users' included (SegmentInfo::owner_uid
/// says whose). Files without shmreplay's magic (other programs' segments, anything unreadable) are skipped
/// silently; segments with the magic that fail validation are listed with their error.
std::vector<ListedSegment> list_segments();

}  // namespace shmreplay
