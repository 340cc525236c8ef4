// shmreplay/inspector.hpp: a read-only view of a segment, for tools and monitoring.
//
// An Inspector maps a segment read-only (PROT_READ): it can never write the segment, so it never disturbs the
// writers or the learner. Snapshots read each counter with one atomic load; counters of different envs are not
// read at one instant, which is fine for display. read_steps() copies stored steps out with the Sampler's seqlock
// validation, so what it returns was never torn, without taking the learner lease. Safe to use from any thread
// and any process.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/counters.hpp"
#include "shmreplay/sample_age.hpp"

namespace shmreplay {

/// Whether a lease (an env's, or the learner's) has a holder, and whether that holder lives.
enum class OwnerState {
  none,   ///< no writer holds the env's lease
  alive,  ///< the lease holder is running (its pid exists with the recorded start time)
  dead,   ///< the lease holder is gone; a new writer may take the lease over
};
/// "none", "alive" or "dead".
std::string_view to_string(OwnerState state) noexcept;

/// One env's counters, lease and episode state, as Inspector::snapshot() read them.
struct EnvInfo {
  uint64_t env = 0;            ///< the env id
  uint64_t head = 0;           ///< steps published since creation
  uint64_t claimed = 0;        ///< steps whose write has begun (head + 1 while a write is in progress)
  uint64_t online_start = 0;   ///< head at the last reset of the online queue
  uint64_t length = 0;         ///< steps in the replay view: head - max(0, claimed - capacity, stacks_intact_from)
  uint64_t online_length = 0;  ///< steps in the online view: those of the replay view at or after online_start
  OwnerState owner = OwnerState::none;  ///< the writer holding the env's lease: none, alive or dead
  uint64_t owner_pid = 0;               ///< its pid; 0 when there is no owner
  uint64_t owner_start_ticks = 0;       ///< its start time (clock ticks after boot, /proc/PID/stat field 22)
  uint64_t lease_since_ns = 0;   ///< CLOCK_REALTIME; 0 when there is no owner
  uint64_t lease_takeovers = 0;  ///< how often a dead owner's lease of this env was taken over
  uint64_t last_push_ns = 0;     ///< CLOCK_REALTIME; 0 when nothing was pushed
  /// Stacked fields (layout 1.6; 0 without): the oldest step whose frames are intact. The steps from
  /// max(0, claimed - capacity) up to it lost their stacks to frames that restarts overwrote.
  uint64_t stacks_intact_from = 0;
  /// The env's update lock (a learner's try_update holds it while it rewrites a stored step): none, alive (a live
  /// learner is rewriting) or dead (the learner died holding it: every learner's and writer's next touch of the env
  /// repairs it; until then samples redraw its rows, and a save or dump leaves out its steps up to the torn one).
  OwnerState update_lock = OwnerState::none;
  uint64_t update_lock_slot = 0;  ///< the learner slot named in the lock (when not none)
  /// (layout 1.9) Steps that left the replay view because a learner died rewriting one of them: the torn step and
  /// the older ones (a view is a range), counted by the repair.
  uint64_t steps_lost_to_dead_updates = 0;
  /// (layout 1.9) Under stack_continuity "episodes": steps whose stack the rule's spot check found not to continue
  /// the previous step's though no flag said so (the env restarts stacks without flags; use "compare").
  uint64_t stack_flagless_restarts = 0;
  /// (layout 1.10, compressed fields; 0 without) Steps that left the replay view because the env's compressed
  /// frames outgrew their byte budget before the steps' ring slots were reclaimed: of the field that lost most.
  uint64_t steps_lost_to_budget = 0;
  // Episodes (all 0 in a buffer without episode fields):
  uint64_t episodes_completed = 0;       ///< episodes whose last step was published, since creation
  uint64_t episode_records_dropped = 0;  ///< records lost because the queue was full when the episode ended
  uint64_t episode_queue_depth = 0;      ///< records waiting for the learner (Sampler::pop_episodes)
  uint64_t episode_records_lost = 0;     ///< records a learner took from the queue and never handed to its caller:
                                         ///< it was killed inside pop_episodes (or its delivery threw)
  uint64_t episode_start = 0;            ///< first step of the episode in progress
  uint64_t last_episode_length = 0;      ///< the last completed episode (0: none yet)
  double last_episode_return = 0.0;      ///< the last completed episode's return (its rewards' sum)
  EpisodeEnd last_episode_end = EpisodeEnd::none;  ///< how the last completed episode ended
  /// Priorities (0 in a buffer without): the sum of priority^alpha over the replay view, read from the env's tree.
  double priority_total = 0.0;
  /// Every env row of the counter table (counters(CounterScope::env), counters.hpp), in row order: the numbers
  /// above that are rows, and the rows without a field here (such as stored_bytes, the bytes the env's replay view
  /// occupies in the segment). counter_index() finds a row by name.
  std::vector<uint64_t> counters;
};

/// The learner (the Sampler holding the learner lease) and its counters: one learner slot's, or every slot's summed
/// (SegmentInfo::learner).
struct LearnerInfo {
  uint64_t slot = 0;            ///< the learner slot (layout 1.7; SegmentInfo::learner: the slot it names)
  OwnerState state = OwnerState::none;  ///< whether a learner holds the lease, and whether it lives
  uint64_t pid = 0;             ///< its pid; 0 when none
  uint64_t start_ticks = 0;     ///< its start time (clock ticks after boot)
  uint64_t since_ns = 0;        ///< CLOCK_REALTIME when it attached; 0 when none
  uint64_t takeovers = 0;       ///< dead learners replaced
  uint64_t rows_sampled = 0;    ///< over the segment's life
  uint64_t sample_calls = 0;    ///< sample calls and peeks, over the segment's life
  uint64_t retries = 0;         ///< rows redrawn because writers overwrote them during the copy
  uint64_t online_resets = 0;   ///< calls of Sampler::reset_online_queue
  uint64_t steps_updated = 0;   ///< steps rewritten by Sampler::update and try_update
  uint64_t waiters = 0;         ///< learners blocked in wait() or on the rate limiter right now
  uint64_t waiting_rows = 0;    ///< rows of its sample call waiting for the rate limiter now; 0 when none
  uint64_t limiter_timeouts = 0;  ///< sample calls the rate limiter held back that gave up at their timeout (1.8)
  // The age of the rows it sampled (layout 1.8; docs/design/learners.md, "Sample ages"): for each row returned by a
  // sample call or peek, how far behind its env's head (in the snapshot it was drawn from) the row ended, in steps.
  // Counted since the segment's creation or its last checkpoint load (a load starts them at 0).
  uint64_t age_rows = 0;       ///< rows counted: the histogram's count (+Inf bucket); at least the buckets' sum
  uint64_t age_sum_steps = 0;  ///< the sum of their ages
  // Sample caps (layout 1.11; docs/design/sample_caps.md), 0 in a buffer without a cap.
  uint64_t cap_claimed = 0;   ///< deliveries the slot claimed: rows its sample calls returned, each counted once
  uint64_t cap_rejected = 0;  ///< rows it drew and redrew because their start was capped (or overwritten)
  uint64_t cap_retired = 0;   ///< starts whose last delivery (the cap's N-th) it claimed
  uint64_t queue_delivered = 0;  ///< rows its consuming calls delivered (a consuming queue; layout 1.11)
  uint64_t queue_refused = 0;    ///< claims lost to another learner's claim of the same step
  uint64_t queue_waits = 0;      ///< consuming calls that waited for free steps
  uint64_t queue_returned = 0;   ///< claims given back undelivered (short calls; its dead learners' uncommitted)
  /// Rows per age bucket, not cumulative: bucket k holds the ages in (layout::age_bucket_le(k - 1),
  /// layout::age_bucket_le(k)] (bucket 0: age 0); rows older than the last bound are in age_rows only.
  std::array<uint64_t, layout::kAgeBuckets> age_buckets{};
  /// Every learner row of the counter table (counters(CounterScope::learner), counters.hpp), in row order.
  std::vector<uint64_t> counters;
};

/// One compressed field (":lz4", ":zstd=LEVEL"; layout 1.10, docs/design/compression.md): its codec, its share of
/// the byte budget, and its writers' counters summed over the envs.
struct CompressedFieldInfo {
  std::size_t field = 0;        ///< its schema index
  Codec codec = Codec::none;    ///< lz4 or zstd
  int32_t level = 0;            ///< zstd's level (0 for lz4)
  uint64_t depth = 1;           ///< frames per step (1 for an unstacked field)
  uint64_t frame_bytes = 0;     ///< bytes of one frame as pushed
  uint64_t ring_bytes = 0;      ///< bytes of one env's record ring: its share of the byte budget
  uint64_t frames = 0;          ///< frames stored since creation (a continuing stack adds one per step)
  uint64_t record_bytes = 0;    ///< bytes of their records
  uint64_t raw_frames = 0;      ///< frames stored as pushed: the codec did not shrink them
  uint64_t budget_lost = 0;     ///< steps that left a view because the field's records outgrew its ring
  /// The achieved ratio: the frames' bytes as pushed over their records' bytes (0 before a frame was stored).
  double ratio() const noexcept;
};

/// Policy versions as published, and the holds they caused (layout 1.11; docs/design/policy.md).
struct PolicyInfo {
  std::string field;                      ///< the policy-version field's name; "" without one
  uint64_t version = 0;                   ///< the current version the learners published (0 before any)
  std::optional<uint64_t> max_staleness;  ///< the window; nullopt when none
  uint64_t publishes = 0;                 ///< publish calls that moved the version or changed the window
  uint64_t writers_held = 0;              ///< push calls the window held back (every env's)
  uint64_t writer_timeouts = 0;           ///< ... that gave up at their timeout
  uint64_t learner_paced = 0;             ///< publish calls that waited for a slow writer (pacing)
  uint64_t learner_pace_timeouts = 0;     ///< ... that gave up at their timeout
};

/// The reanalyse walk (layout 1.11; CreateOptions::reanalyse_chunk; docs/design/reanalyse.md): the buffer-wide
/// words. Its per-env counters (chunks handed, completed, handed again after a death, stale completions, and steps
/// per target-version age) are the counter table's walk rows.
struct WalkInfo {
  uint64_t chunk_steps = 0;  ///< steps per chunk; 0: no walk
  uint64_t pass = 0;         ///< the pass in progress (from 1)
  std::optional<uint64_t> newest_version;  ///< the newest target version a completion recorded; nullopt before any
  uint64_t workers = 0;      ///< worker slots held by live processes
  uint64_t repairs = 0;      ///< dead worker slots whose claims were given back
};

/// A buffer's cold tier (layout 1.11; CreateOptions::cold_capacity), as Inspector::snapshot() read it.
struct ColdInfo {
  uint64_t capacity = 0;    ///< steps per env on disk; 0 without a cold tier
  std::string dir;          ///< the directory its `NAME.cold/` lies in
  uint64_t steps = 0;       ///< stored steps below the rings, every env together (the replay view's cold part)
  uint64_t file_bytes = 0;  ///< bytes of its env files on disk, headers included
};

/// The journal (layout 1.11; shmreplay/journal.hpp; docs/design/journal.md): its lease, bound and newest durable
/// link. Per env, the durable head and the steps not yet durable are the counter table's journal rows.
struct JournalInfo {
  OwnerState state = OwnerState::none;  ///< whether a journal holds the lease, and whether it runs
  uint64_t pid = 0;             ///< the holder's pid (0: none)
  uint64_t since_ns = 0;        ///< CLOCK_REALTIME when it took the lease (0: none)
  double bound_s = 0.0;         ///< its bound: published steps are durable within it
  uint64_t link_seq = 0;        ///< the newest durable link's number in the chain directory; 0 before any
  uint64_t durable_ns = 0;      ///< CLOCK_REALTIME when that link's save began: every step published before is durable
  uint64_t done_ns = 0;         ///< CLOCK_REALTIME when it was synced and named
  uint64_t link_ns = 0;         ///< how long its save took
  uint64_t max_lag_ns = 0;      ///< the largest lag a link ended (since the buffer's creation)
  uint64_t links = 0;           ///< links the buffer's journals wrote
  uint64_t failures = 0;        ///< links that failed
  uint64_t late_links = 0;      ///< links whose lag passed the bound
  uint64_t takeovers = 0;       ///< dead journals' leases taken over
  uint64_t pending_steps = 0;   ///< steps published that the newest durable link lacks, every env together
  /// Whether the buffer has been journaled at all (a lease held, or a link written).
  bool present() const noexcept { return state != OwnerState::none || links != 0; }
  /// The journal's lag at `now_ns`: seconds since the instant up to which every published step is durable (the
  /// newest link's start, or before the first link the journal's start), while some step is not yet durable; 0
  /// when every published step is durable.
  double lag_s(uint64_t now_ns) const noexcept;
};

/// Everything Inspector::snapshot() reads from a segment: geometry, creation record, per-env and learner state,
/// episode, priority and rate-limiter counters (what `shmreplay info` prints).
struct SegmentInfo {
  std::string name;             ///< the segment's name
  std::string path;             ///< its file (shm_directory()/name)
  uint32_t layout_major = 0;    ///< the layout version it was created with
  uint32_t layout_minor = 0;    ///< ... minor
  uint64_t num_envs = 0;        ///< envs
  uint64_t capacity = 0;        ///< steps per env
  uint64_t step_bytes = 0;      ///< bytes of one step, all fields together, as pushed and sampled
  uint64_t total_bytes = 0;     ///< the file's size
  uint64_t data_bytes = 0;      ///< bytes of the steps as stored: num_envs * capacity * step_bytes, but for a
                                ///< stacked field its frame rings and frame-index words instead of its share
  std::vector<StackGeometry> stacks;  ///< the stacked fields (layout 1.6), in schema order; empty without
  std::vector<CompressedFieldInfo> compressed;  ///< the compressed fields (layout 1.10), in schema order; empty without
  StackContinuity stack_continuity = StackContinuity::compare;  ///< how writers tell a continuing stack (1.6)
  Schema schema;                ///< the fields of a step
  uint32_t owner_uid = 0;       ///< the uid that owns the segment file
  std::string owner_name;       ///< its user name; "" when the password database has none
  uint64_t creator_pid = 0;     ///< the process that created the segment
  bool creator_alive = false;   ///< whether that process still runs (same pid and start time)
  uint64_t creation_time_ns = 0;  ///< CLOCK_REALTIME
  std::vector<EnvInfo> envs;   ///< one per env, in env order
  uint64_t total_pushed = 0;   ///< sum of heads
  uint64_t replay_steps = 0;   ///< sum of lengths
  uint64_t online_steps = 0;   ///< sum of online lengths
  uint64_t live_writers = 0;   ///< distinct alive lease holders
  uint64_t stored_bytes = 0;   ///< sum of the envs' stored_bytes rows: the bytes the replay views occupy
  uint64_t steps_lost_to_budget = 0;  ///< sum of EnvInfo::steps_lost_to_budget (compressed fields)
  /// Every learner together: counters summed over the slots; state, pid, start_ticks and since_ns of the first
  /// slot held by a live learner (else the first held slot, else none); slot that slot's. In a one-learner buffer,
  /// exactly its learner.
  LearnerInfo learner;
  std::vector<LearnerInfo> learners;  ///< each learner slot, slot 0 first (layout 1.7: max_learners of them)
  uint64_t live_learners = 0;         ///< slots held by a live learner
  // Episodes (layout 1.2): the fields with episode roles, and totals over envs.
  EpisodeFieldIndices episode_fields;  ///< schema indices of done / terminated / truncated / reward
  uint64_t episode_queue_capacity = 0; ///< records per env's queue; 0 without episode fields
  uint64_t episodes_completed = 0;       ///< sum of EnvInfo::episodes_completed
  uint64_t episode_records_dropped = 0;  ///< sum of EnvInfo::episode_records_dropped
  uint64_t episode_queue_depth = 0;      ///< sum of EnvInfo::episode_queue_depth
  uint64_t episode_records_lost = 0;     ///< sum of EnvInfo::episode_records_lost
  // Priorities (layout 1.3): alpha (nullopt without priorities), the running maximum, the learner's updates.
  std::optional<double> priority_exponent;  ///< alpha (sampling weight priority^alpha); nullopt without priorities
  double max_priority = 0.0;            ///< the largest priority ever given (new steps enter at it)
  double priority_total = 0.0;          ///< sum of priority^alpha over every env's replay view
  uint64_t priority_updates = 0;        ///< priorities the learner set (Sampler::update_priorities)
  uint64_t priority_updates_dropped = 0;  ///< ... refused because the step had been overwritten
  /// New steps' priority (layout 1.11, CreateOptions::initial_priority): nullopt the running maximum, a value, or
  /// +infinity (never-sampled steps first).
  std::optional<double> initial_priority;
  uint64_t sequence_priority_length = 0;  ///< L of sequence priorities (layout 1.11); 0 without
  // The rate limiter (layout 1.4): its settings (limit is nullopt without one), counts and waits.
  RateLimitState rate_limit;  ///< the rate limiter's settings (limit: nullopt without one), counts and waits
  PolicyInfo policy;          ///< policy versions (layout 1.11): the published version and window, the holds
  uint64_t max_times_sampled = 0;  ///< the sample cap (layout 1.11): deliveries per stored step; 0 without
  bool consuming_queue = false;    ///< a consuming queue (layout 1.11; CreateOptions::consuming_queue)
  WalkInfo walk;                   ///< the reanalyse walk (layout 1.11); chunk_steps 0 without
  ColdInfo cold;                   ///< the cold tier (layout 1.11): its steps and bytes; capacity 0 without.
                                   ///< replay_steps and stored_bytes count the rings' steps only
  JournalInfo journal;             ///< the journal (layout 1.11); present() false when never journaled
};

/// Consecutive published steps of one env, copied out of the segment (Inspector::read_steps). Each record is one
/// step: its fields in schema order, back to back.
struct StepRecords {
  uint64_t env = 0;                     ///< the env they are steps of
  uint64_t first_step = 0;              ///< the global index of the first record's step
  uint64_t count = 0;                   ///< records held: steps first_step .. first_step + count - 1
  uint64_t record_bytes = 0;            ///< bytes of one record (the schema's step bytes)
  std::vector<uint64_t> field_offsets;  ///< where each field starts inside a record, in schema order
  std::vector<std::byte> bytes;         ///< count records, oldest first

  /// The bytes of field `field` in record `index` (step first_step + index). Preconditions: in range.
  std::span<const std::byte> field(std::size_t index, std::size_t field) const noexcept;
};

/// A read-only view of a segment's state, for monitoring and tools (the CLI's `info`, `dump` and `ls`): never
/// takes a lease, never writes the segment.
class Inspector {
 public:
  /// Opens `name` read-only (whatever options.read_only says), with open()'s full validation and `options`
  /// otherwise: a segment of another user is refused unless options.allow_other_owner (tools that only display
  /// it, as `shmreplay info`, set it and show the owner). Throws Error as Buffer::open does.
  explicit Inspector(std::string_view name, OpenOptions options = {});
  /// Inspects a Buffer this process holds already (mapped read-only or not).
  explicit Inspector(Buffer buffer) : buffer_(std::move(buffer)) {}

  /// Reads every counter of the segment. O(num_envs); checks the liveness of each distinct owner once. Each env's
  /// episode state (completed, last episode, episode in progress) is one consistent read of its writer's journal.
  SegmentInfo snapshot() const;

  /// Copies the published steps of env `env` in [first_step, first_step + count) that are stored (the part of
  /// that range inside the replay view, [max(0, claimed - capacity, stacks_intact_from), head); a stacked field's
  /// stacks are rebuilt from its frames). Writers keep pushing meanwhile: the
  /// copy is validated like a sample row, and steps whose slots a writer reclaimed before they were copied are
  /// left out, so the result is the newer end of the range (its first_step may be above the one asked for, and
  /// count may be 0). Every record is exactly what its writer published. Never writes the segment and never
  /// blocks. Throws env_out_of_range, and contended when the learner kept rewriting the env during the copy.
  /// O(count * num_fields) time and memory.
  StepRecords read_steps(uint64_t env, uint64_t first_step, uint64_t count) const;

  /// The mapping it reads.
  const Buffer& buffer() const noexcept { return buffer_; }

 private:
  Buffer buffer_;
};

/// Inspector::read_steps on a Buffer this process holds already (mapped read-only or not), without opening the
/// segment again by name (which could be another file by now).
StepRecords read_steps(const Buffer& buffer, uint64_t env, uint64_t first_step, uint64_t count);

/// Bytes of `buffer`'s step storage (SegmentInfo::data_bytes): num_envs x capacity x each field's bytes, and for a
/// stacked field (layout 1.6) its frame rings and frame-index words instead, for a compressed field (layout 1.10)
/// its env counters, frame descriptors, record rings and frame-index words. From the geometry open accepted; O(1)
/// per field.
uint64_t stored_data_bytes(const Buffer& buffer) noexcept;

/// Whether counter-table row `row` applies to the segment `info` describes (CounterPresence): its family is
/// exported and its column shown only then.
bool counter_applies(const Counter& row, const SegmentInfo& info) noexcept;

/// Bytes per step the replay views occupy (stored_bytes over replay_steps; 0 when nothing is stored).
double stored_bytes_per_step(const SegmentInfo& info) noexcept;

/// One entry of list_segments(): a file whose first bytes are shmreplay's magic.
struct ListedSegment {
  std::string name;                 ///< the file's name in shm_directory()
  std::optional<SegmentInfo> info;  ///< when it opened cleanly
  std::string error;                ///< why it did not (truncated, version mismatch, ...)
};

/// Every shmreplay segment in shm_directory(), sorted by name, other users' included (SegmentInfo::owner_uid
/// says whose). Files without shmreplay's magic (other programs' segments, anything unreadable) are skipped
/// silently; segments with the magic that fail validation are listed with their error.
std::vector<ListedSegment> list_segments();

}  // namespace shmreplay
