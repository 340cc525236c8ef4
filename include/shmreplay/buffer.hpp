// shmreplay/buffer.hpp: create, open and remove a named shared-memory segment (an RAII mapping of it).
//
// A Buffer is one process's mapping of one segment. Any number of processes may hold a Buffer of the same
// segment at once. The segment outlives every Buffer: it stays in the shared-memory directory until remove()
// (or the CLI's `shmreplay rm`), even when every process that used it has died.
//
// Thread safety: a Buffer is immutable after create()/open() and may be shared between threads; the segment's
// counters are atomics, and the roles that write them (writers, the learner) are defined by their own classes.
//
//   auto schema = shmreplay::Schema::parse("obs:f32[4] action:i32 reward:f32 done:bool");
//   auto buf = shmreplay::Buffer::create("cartpole", /*num_envs=*/8, /*capacity=*/4096, schema);
//   auto same = shmreplay::Buffer::open("cartpole", {.expected_schema = schema});
//   shmreplay::Buffer::remove("cartpole");
//
//   // With episode bookkeeping (stop/within sampling, completed-episode records): name the flag and reward fields.
//   auto eps = shmreplay::Schema::parse("obs:f32[4] action:i32 reward:f32 terminated:bool truncated:bool");
//   auto ebuf = shmreplay::Buffer::create("cartpole-ep", 8, 4096, eps,
//       {.episodes = {.terminated = "terminated", .truncated = "truncated", .reward = "reward"}});
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shmreplay/policy.hpp"
#include "shmreplay/rate_limit.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/vocabulary.hpp"  // IWYU pragma: export (EpisodeFields, EpisodeEnd, EpisodeFieldIndices: were declared here)

namespace shmreplay {

class Segment;  // one process's mapping of a segment (shmreplay/internal/segment.hpp: not part of the API)

/// Whether create() faults the segment's pages into its own mapping before it returns (CreateOptions::populate).
/// Otherwise the first write of each 4 KiB page (usually a writer's prefill) takes a page fault that zeroes it.
/// It pays when the process that creates the buffer also fills it (create + prefill of a 0.9 GB Atari-like buffer
/// 1.1x faster on a moderately loaded machine, 0.76x under heavy load); when other processes fill it, they still
/// fault the pages into their own mappings and populating only adds to create() (0.7x): docs/benchmarks/pages.md,
/// "Creating and prefilling a buffer". Hence never by default.
enum class Populate : uint8_t {
  never,      ///< leave the pages to be faulted in by their first writer (the default, and the old behaviour)
  always,     ///< populate; a failure other than "not supported" is an error
  automatic,  ///< populate when the segment is at most half of the machine's MemAvailable (/proc/meminfo), else not
};

/// How Buffer::create makes a segment: its mode, whether it replaces one, its episode fields, priorities, rate
/// limiter, and whether its pages are faulted in at creation.
struct CreateOptions {
  /// Permission bits of the segment file (the umask does not apply): read and write bits only, a subset of 0666
  /// (create() refuses execute, set-uid, set-gid and sticky bits with Errc::invalid_argument). 0666 (world-writable)
  /// is allowed but lets every local user corrupt the buffer; share it with a group (0660) instead.
  uint32_t mode = 0600;
  bool replace = false;  ///< atomically replace a segment of the same name instead of failing
  /// The episode fields (see EpisodeFields). With at least one flag, writers record every env's episode
  /// boundaries as they push (one word per stored step), which enables Episodes::stop and Episodes::within
  /// sampling and the completed-episode records (Sampler::pop_episodes). Without, the buffer is as before.
  EpisodeFields episodes;
  /// Records each env's completed-episode queue holds before records are dropped (counted) because the learner
  /// did not pop them; 0 means layout::kDefaultEpisodeQueueCapacity. Only with episode fields.
  uint64_t episode_queue_capacity = 0;
  /// Policy versions (layout 1.11; docs/design/policy.md): the name of a scalar integer field that holds, for each
  /// step, the version of the policy that produced it (non-decreasing per env, checked at push). With it, a learner
  /// publishes its current version and a staleness window (Sampler::publish_policy), samples only steps inside the
  /// window (SampleOptions::max_staleness), and writers whose version the window has left behind are held back
  /// (Writer::push waits) instead of having their steps discarded. Empty (the default): no such field.
  std::string policy_version;
  /// Priorities (layout 1.3): with a value alpha (finite, >= 0), every stored step has a priority, and a
  /// prioritized sample draws a start with probability proportional to priority^alpha (Sampler::sample with
  /// SampleOptions::prioritized; Writer::push with priorities; Sampler::update_priorities). Costs 16 bytes per
  /// ring slot (rounded up to a power of two per env). Without, the buffer is as before.
  std::optional<double> priority_exponent;
  /// The priority of a step pushed without one (layout 1.11; a buffer with priorities): nullopt (the default), the
  /// running maximum, the largest priority given so far (Schaul et al.); a fixed value in [0, FLT_MAX] (a step at 0 is
  /// drawn by priority only once a learner raises it); or +infinity, DreamerV3's "initial priority infinity": a
  /// step that no prioritized draw has returned yet is drawn before any other (uniformly among such steps, by any
  /// learner, exactly once: docs/design/priorities.md, "Initial priorities"), and enters the priority tree at the
  /// running maximum for the draws after. +infinity costs a second tree per env (16 bytes per ring slot).
  std::optional<double> initial_priority;
  /// Sequence priorities (layout 1.11; a buffer with priorities; R2D2): with L (1 to the capacity), a prioritized
  /// sample of sequence_length L draws a start q with weight eta * max + (1 - eta) * mean of the step weights
  /// priority^alpha of the sequence's stored steps [q, q + L) (SampleOptions::sequence_priority_eta, 0.9 by
  /// default), exactly as steps arrive and priorities change: two more sum trees per env, refreshed by every writer
  /// and learner that changes a step's priority (docs/design/priorities.md, "Sequence priorities"). Costs 32 bytes
  /// per ring slot and O(L) work per pushed step and per updated run of steps. 0, the default: none.
  uint64_t sequence_priority_length = 0;
  /// A rate limiter (layout 1.4; shmreplay/rate_limit.hpp): samples per inserted step within an error buffer,
  /// and/or no sampling before a minimum size, counted across every process. Changeable later
  /// (Buffer::set_rate_limit, `shmreplay limit`). Without, nothing is limited or counted.
  std::optional<RateLimit> rate_limit;
  /// Stacked fields (layout 1.6; Field::stack_axis): each env's frame ring holds one frame per stored step, the
  /// K - 1 older frames of the oldest step, and K - 1 more for each of `stack_restarts` steps whose stack does not
  /// continue its predecessor's (an episode's first step, whose stack holds padding frames). Past that many such
  /// steps among an env's stored steps, the oldest steps' frames are overwritten first and those steps cannot be
  /// sampled (K - 1 steps per restart past the reserve; the views leave them out exactly). 0 means the default,
  /// 1 + capacity / 128 (for K = 4: 2.3% more frames than steps). Only with a stacked field.
  uint64_t stack_restarts = 0;
  /// How writers tell that a stacked field's stack continues the previous step's (see StackContinuity): compare
  /// the bytes (the default: exact whatever the env does), or trust the episode flags (needs episode fields; a
  /// push then reads and writes one frame of each stack). Only with a stacked field.
  StackContinuity stack_continuity = StackContinuity::compare;
  /// Compressed fields (layout 1.10; Field::codec, ":lz4" or ":zstd=LEVEL"): the bytes of their records, every
  /// compressed field and env together. Each field's share follows its frames' bytes as pushed, and each env has
  /// an equal part of it (a byte ring). When an env's frames compress worse than its part holds, its oldest steps
  /// leave the views before their slots are reclaimed (counted per env). 0 means the frames' bytes as pushed divided
  /// by expected_compression. Only with a compressed field.
  uint64_t compressed_bytes = 0;
  /// The ratio (bytes as pushed over bytes stored) the budget assumes when compressed_bytes is 0; 0 means
  /// kDefaultExpectedCompression. Only with a compressed field; at least 1.
  double expected_compression = 0;
  /// Learner processes that may sample the buffer at once (layout 1.7), 1 to layout::kMaxLearners (64): one learner
  /// slot each, which a Sampler takes (SamplerOptions::rank: a GPU rank's slot). Each slot costs 192 bytes and 8
  /// bytes per env; 1, the default, is the buffer a single learner has always had.
  uint64_t max_learners = 1;
  /// Sample caps (layout 1.11; docs/design/sample_caps.md): with N (1 to layout::kMaxTimesSampled, 255), a stored
  /// step is delivered as the start of a sampled row at most N times in total, by all learners together, whatever
  /// their races and deaths; a step sampled N times leaves the views (sample calls draw from the steps not yet
  /// capped). Costs 8 bytes per stored step and 64 per learner slot. 0, the default: no cap.
  uint64_t max_times_sampled = 0;
  /// A consuming queue (layout 1.11; docs/design/consuming_queue.md), Reverb's queue across processes: each stored
  /// step is delivered once, by sample calls with SampleOptions::consume (in insertion order or at random; the
  /// buffer's other sample calls are refused), and a writer never overwrites a step not yet delivered: it waits
  /// (WriterOptions::queue_timeout_ms) until the step in the ring slot it needs was delivered. A learner killed
  /// during a call delivers its claimed rows or gives them back, never both and never neither. Implies
  /// max_times_sampled 1 (0 or 1 may be given). Not with stacked or compressed fields (their steps may leave the
  /// views undelivered) or a rate limiter (the queue is its own). Costs 16 bytes per stored step.
  bool consuming_queue = false;
  /// A reanalyse walk (layout 1.11; docs/design/reanalyse.md): steps per chunk, 1 to the capacity. Reanalyser
  /// workers (shmreplay/reanalyse.hpp) are handed each env's aligned chunks [k C, (k + 1) C) in a chosen order, each
  /// to one worker at a time, and record the target version they used; a dead worker's chunks are handed again.
  /// Costs 32 bytes per chunk slot (ceil(capacity / C) + 1 per env), 64 per env and 4 KiB. 0, the default: no walk.
  uint64_t reanalyse_chunk = 0;
  /// A cold tier (layout 1.11; docs/design/cold_tier.md): steps per env kept on disk beyond the RAM ring, 1 to
  /// layout::kMaxColdCapacity (2^40). Before a writer's claim reclaims a ring slot, it copies the slot's step into
  /// its env's cold file, a ring of cold_capacity records under cold_dir, mapped by every process that opens the
  /// buffer; sample calls, read_steps and `dump` see both tiers as one run of stored steps per env (an env holds up to
  /// capacity + cold_capacity steps), the segment's RAM stays that of the ring. Writers never fsync. This first
  /// slice refuses (invalid_argument) stacked or compressed fields, priorities, episode fields, a policy-version
  /// field, a consuming queue, sample caps and a reanalyse walk, and checkpoints of a tiered buffer. 0, the default:
  /// none.
  uint64_t cold_capacity = 0;
  /// The cold tier's directory (with cold_capacity; an absolute path of an existing directory on a local disk, below
  /// 448 bytes): create makes `cold_dir/NAME.cold/` with one file per env (env-0, env-1, ...; mode as the
  /// segment's), and Buffer::remove (`shmreplay rm`) removes them with the segment.
  std::string cold_dir;
  /// Fault the segment's pages in at creation (see Populate): madvise(MADV_POPULATE_WRITE) in 64 MiB chunks, or,
  /// on kernels without it (before Linux 5.14), a write of zero to each page. Done before the segment is linked
  /// under its name, so it changes no guarantee of create(); it moves the page-zeroing cost from the first writer to
  /// create(), and the pages are the ones posix_fallocate already reserved, so no extra memory is used.
  Populate populate = Populate::never;
  /// Called (when set) from create() after each populated chunk with the bytes done so far and the total; the
  /// last call has done == total. Not called when nothing is populated. An exception it throws aborts create()
  /// (nothing is left behind).
  std::function<void(uint64_t done_bytes, uint64_t total_bytes)> populate_progress;
};



/// How Buffer::open attaches: the schema it must have, read-only, how long to wait for a creator, another user's.
struct OpenOptions {
  /// When set, open() fails with Errc::schema_mismatch unless the segment's schema equals it; the message lists
  /// every difference, field by field.
  std::optional<Schema> expected_schema;
  /// Map the segment read-only (for inspection); the mutable accessors below may not be used then.
  bool read_only = false;
  /// How long to wait for a segment whose creator has not yet published it as ready, before failing with
  /// Errc::not_ready. (Segments made by create() are only linked into the directory once ready.)
  uint64_t ready_timeout_ms = 0;
  /// Open a segment whose file belongs to another user (its owner, fstat's st_uid, is not this process's
  /// effective uid). By default open() refuses one with Errc::permission_denied naming both users, read-only or
  /// not: any local user can create a file under a known name in the world-writable /dev/shm before your
  /// programs do, to read what your writers push or to feed your learner. Set it only for an owner you trust
  /// (a buffer another account shares with you on purpose).
  bool allow_other_owner = false;
};

/// One process's mapping of a named segment: create, open and remove one, and its properties (see the top of this
/// file). Immutable after create()/open(), so it may be shared between threads; move-only.
class Buffer {
 public:
  /// Creates the segment `name` (file shm_directory()/name) with `num_envs` rings of `capacity` steps each,
  /// every step holding one value of each field of `schema`.
  ///
  /// The file is built invisibly (an unnamed O_TMPFILE), sized and fully reserved with posix_fallocate, filled,
  /// marked ready, and only then linked under its name, so no process ever sees a half-made segment and a
  /// crash during create() leaves nothing behind. Before anything is allocated the free space of the directory
  /// is checked with statvfs.
  ///
  /// Throws Error with: invalid_argument (bad name; a mode with bits outside 0666; num_envs outside
  /// [1, kMaxEnvs]; capacity outside [1, kMaxCapacity]; sizes that overflow; episode fields that name no field,
  /// have the wrong dtype or shape, combine done with terminated/truncated, repeat a field, or a reward without a
  /// flag; an episode_queue_capacity outside [1, kMaxEpisodeQueueCapacity] or without episode fields; a rate
  /// limit that cannot work),
  /// invalid_schema (an empty schema), no_space (the file system lacks the bytes; the message gives the bytes
  /// needed and free), already_exists (unless options.replace), permission_denied or system.
  static Buffer create(std::string_view name, uint64_t num_envs, uint64_t capacity, const Schema& schema,
                       const CreateOptions& options = {});

  /// create() without its last step: the segment is complete and ready but has no name yet. It exists only as
  /// this Buffer's descriptor and mapping, so no other process can open it, and it vanishes, leaving nothing
  /// behind, when the Buffer is destroyed or the process dies (SIGKILL included) before publish(). Writers and
  /// Samplers of this process may use it meanwhile: it is how load_checkpoint fills a new segment before anyone
  /// can see it. Throws as create() (already_exists when the name exists now, unless options.replace).
  static Buffer create_unnamed(std::string_view name, uint64_t num_envs, uint64_t capacity, const Schema& schema,
                               const CreateOptions& options = {});

  /// Gives a segment made by create_unnamed() its name, in one atomic step: linkat() fails with already_exists
  /// when the name appeared meanwhile (of racing publishers exactly one wins), or, with options.replace, the
  /// segment replaces the old one with rename(). Throws already_exists, invalid_argument (already published),
  /// permission_denied or system; on failure the segment stays unnamed.
  void publish();

  /// False only for a segment from create_unnamed() that publish() has not named yet.
  bool published() const noexcept { return unnamed_fd_ < 0; }

  /// Opens an existing segment after validating, before touching anything else: its owner (this process's
  /// effective user, unless options.allow_other_owner), the magic, the layout version
  /// (same major; this minor or a newer one: older minors lack sections this library needs and are refused with
  /// version_mismatch, "recreate the segment"), the header size, the file size against the header, the ready state,
  /// every
  /// section's offset and length against the file size, and the schema table. Throws Error with not_found,
  /// not_a_segment (a symbolic link, a FIFO, ...: never followed or waited on), truncated, version_mismatch,
  /// not_ready, corrupt, schema_mismatch or permission_denied (the OS refused, or another user owns the file);
  /// each message names the segment and gives expected versus actual.
  static Buffer open(std::string_view name, const OpenOptions& options = {});

  /// Removes the segment's name, and the files of its cold tier if it has one (layout 1.11). Processes that have it
  /// mapped keep working on their mapping; the memory is freed when the last one unmaps. Refuses (Errc::not_a_segment) a file that does not start with
  /// shmreplay's magic; throws Errc::not_found when there is no such file.
  static void remove(std::string_view name);

  /// Whether a file called `name` exists in shm_directory() (whatever it holds).
  static bool exists(std::string_view name);

  /// Takes over the other Buffer's mapping; the other may then only be destroyed or assigned to.
  Buffer(Buffer&&) noexcept;
  /// Unmaps this Buffer's mapping, then takes over the other's.
  Buffer& operator=(Buffer&&) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  // -- Properties (of the segment, validated by create()/open() and kept in this process) --

  /// The segment's name.
  const std::string& name() const noexcept;
  /// Its file: shm_directory()/name.
  const std::string& path() const noexcept { return path_; }
  /// The fields of a step.
  const Schema& schema() const noexcept;
  /// Envs (one ring of steps each).
  uint64_t num_envs() const noexcept;
  /// Steps kept per env.
  uint64_t capacity() const noexcept;
  /// The size of the segment's file.
  uint64_t total_bytes() const noexcept;
  /// Whether this process mapped it read-only (OpenOptions::read_only).
  bool read_only() const noexcept;
  /// The segment file's permission bits (st_mode & 07777) when this process created or opened it. A checkpoint
  /// saved from the segment gets its read/write bits, so saving a private buffer gives a private file.
  uint32_t mode() const noexcept { return mode_; }
  /// The uid that owns the segment file (fstat's st_uid when this process created or opened it).
  uint32_t owner_uid() const noexcept { return owner_uid_; }
  /// The episode fields the buffer was created with (schema indices), and whether it records episodes.
  const EpisodeFieldIndices& episode_fields() const noexcept;
  /// Whether it records episodes (it has a done, terminated or truncated field).
  bool has_episodes() const noexcept;
  /// Records per env's completed-episode queue; 0 when the buffer has no episode fields.
  uint64_t episode_queue_capacity() const noexcept;
  /// Whether the buffer has priorities, and their exponent alpha (0 without).
  bool has_priorities() const noexcept;
  /// Learner processes that may sample at once, one per learner slot (CreateOptions::max_learners; layout 1.7).
  uint64_t max_learners() const noexcept;
  /// The sample cap (CreateOptions::max_times_sampled; layout 1.11): deliveries per stored step; 0 without.
  uint64_t max_times_sampled() const noexcept;
  /// Whether it is a consuming queue (CreateOptions::consuming_queue; layout 1.11).
  bool consuming_queue() const noexcept;
  /// How writers tell that a stacked field's stack continues the previous step's (CreateOptions::stack_continuity).
  StackContinuity stack_continuity() const noexcept;
  /// CreateOptions::initial_priority: nullopt (the running maximum), a fixed priority, or +infinity (never-sampled
  /// steps first). Layout 1.11.
  std::optional<double> initial_priority() const noexcept;
  /// CreateOptions::sequence_priority_length: L of sequence priorities; 0 without. Layout 1.11.
  uint64_t sequence_priority_length() const noexcept;
  /// CreateOptions::reanalyse_chunk: steps per chunk of the reanalyse walk; 0 without. Layout 1.11.
  uint64_t reanalyse_chunk() const noexcept;
  /// CreateOptions::cold_capacity: steps per env kept on disk; 0 without a cold tier. Layout 1.11.
  uint64_t cold_capacity() const noexcept;
  /// Alpha, the priority exponent (a sampling weight is priority^alpha); 0 without priorities.
  double priority_exponent() const noexcept;
  /// Leaves of each env's priority tree: bit_ceil(capacity), 0 without priorities.
  uint64_t priority_leaves() const noexcept;

  /// The rate limiter's settings now (nullopt: none). Read from the segment at each call (they can change).
  std::optional<RateLimit> rate_limit() const noexcept;
  /// The limiter's settings, counts and waits, read now (O(num_envs); see RateLimitState).
  RateLimitState rate_limit_state() const;
  /// Sets (or, with nullopt, removes) the rate limiter of a running buffer, at once for every process, and wakes
  /// every process waiting on it so it re-checks. The counts go on; the error restarts at the middle of the new
  /// bounds (history counted under other settings holds neither side back). Throws invalid_argument (settings
  /// that cannot work: see RateLimit) and read_only.
  void set_rate_limit(const std::optional<RateLimit>& limit);

  /// The policy version and staleness window in force (what a learner or set_policy_window published last; layout
  /// 1.11, docs/design/policy.md). Read from the segment at each call.
  PolicyState policy() const noexcept;
  /// Sets (a number) or removes (nullopt) the staleness window of a running buffer, keeping the published version,
  /// at once for every process: sample calls without their own max_staleness draw inside it, and writers it held
  /// back re-check at once (`shmreplay limit --max-staleness`). Unlike Sampler::publish_policy it needs no learner
  /// slot and never paces. Throws invalid_argument (a window on a buffer without a policy-version field, or
  /// max_staleness kNoPolicyWindow, UINT64_MAX, which stands for "none") and read_only.
  PolicyState set_policy_window(std::optional<uint64_t> max_staleness);

 private:
  // The mapped segment's words are not part of the API: shmreplay's own roles, tools and tests reach them through
  // segment_of() (shmreplay/internal/segment.hpp).
  friend Segment& segment_of(Buffer& buffer) noexcept;
  friend const Segment& segment_of(const Buffer& buffer) noexcept;

  Buffer() = default;
  void close_unnamed() noexcept;

  // The mapping and its geometry; unmapped by the destructor; null only in a moved-from Buffer. Read it through
  // segment_of(*this), never segment_->: a unique_ptr does not carry const, and a const method must reach the
  // Segment's const accessors (a read-only mapping's mutable ones assert).
  std::unique_ptr<Segment> segment_;
  std::string path_;
  uint32_t mode_ = 0;
  uint32_t owner_uid_ = 0;
  int unnamed_fd_ = -1;  // the O_TMPFILE descriptor of an unpublished segment (create_unnamed); -1 once named
  bool replace_on_publish_ = false;
};

}  // namespace shmreplay
