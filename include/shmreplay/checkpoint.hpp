// shmreplay/checkpoint.hpp: save a live buffer to a file, and load it back, into a new segment or an existing one.
//
// Who calls it: tools (`shmreplay save`, `shmreplay load`) and programs that checkpoint their replay buffer.
//
// Saving reads the segment the way a sampler does, without being the learner and without writing a byte of it
// (a read-only mapping is enough), while writers keep pushing: per env it copies the stored steps oldest first in
// chunks, validates each chunk with the seqlock (docs/design/seqlock.md, "Concurrency protocol"), and follows the
// writer
// until it holds a complete ring window. What it records per env is a state the env really was in: the steps
// [first_step, head), each exactly as its writer published it, where first_step = max(0, claimed - capacity),
// with claimed = head, or head + 1 when the writer was writing step `head` at that instant (then the slot being
// rewritten is not part of the window). With stacked fields (layout 1.6) the run may start above that, at the
// oldest step whose frames were intact (EnvControl::stacks_intact_from), when it is the env's whole view; and a full
// window copied while the writer pushed may hold oldest steps whose frames were overwritten by the instant it
// describes (each record still exact): a load stores the frames again from the first record and leaves out the
// steps they do not fit, with the same reserve those the env could not sample then. The original step indices, the
// head and online_start are kept, so after a load the writers continue at the same step numbers and the learner's
// online queue is where it was.
//
// Loading validates the whole file first (magic, version, sizes, the schema, every checksum) and only then
// writes: into a new segment created with the file's geometry (filled while it has no name, and named only once
// complete, so an interrupted load leaves nothing), or into an existing segment whose schema, env
// count and capacity equal the file's. For an existing segment it first takes the learner lease and the lease of
// every env (so no writer and no learner run during the load; it fails with Errc::lease_held naming a live
// holder), and rewrites each env inside the update seqlock, so concurrent readers (shmreplay dump, save) never see
// a half-loaded env. It takes the leases itself, building no Sampler or Writer, so no role's repair of a dead
// predecessor runs on data the load replaces (lib/checkpoint/load_leases.cpp says which repairs it keeps). A
// truncated or corrupt file fails with an error that says where and what, before anything in
// the target is touched. (The file must not change between validation and loading; if it does, the second read's
// checksums catch it and a new segment never gets its name, but an existing one is left partly loaded.)
//
// Thread safety: the functions are independent; a save and a load of the same segment may run at once in
// different processes (the save then sees the load as a rewrite and copies again).
//
// -- What a checkpoint holds (format 2.0; shmreplay/internal/checkpoint_format.hpp has the bytes) -------------------------
//
// Everything the segment holds that a run needs to go on: per env its window of steps (every field, stacked fields
// as whole stacks), head, claim, online-queue start, every stored step's priority weight, and the completed-episode
// records waiting in its queue (with the queue's indices and drop count); for the buffer alpha and the running
// maximum priority, the rate limiter's settings, error offset and counts (inserts are the heads, so the limiter's
// error carries over), the learner's counters, the stacked fields' restart reserve and continuity rule. Not held:
// leases and their history, wake-up words, the writers' episode journals and step meta (rebuilt from the steps'
// flags by the load: an episode in progress at the window's start counts only its stored steps in its running
// return), anything a process would have held privately.
//
// What a load does with each part (LoadResult::notes says it for the parts that differ):
//   part                      new segment              existing segment
//   steps, head, claim,       the file's               the file's (schema, episode fields, envs and capacity
//   online start                                       must equal the file's)
//   priorities                alpha and weights of     the file's weights when alpha is the same; another alpha
//                             the file                 (or none in the file or the target) is refused unless
//                                                      LoadOptions::allow_mismatch: then weights are converted
//                                                      (w^(alpha_target / alpha_file)) or enter at the running max
//   running max priority      the file's               the larger of the two
//   rate limiter              the file's settings,     the file's counts; the file's offset when the settings are
//                             offset and counts        the same, else refused unless allow_mismatch (then the
//                                                      target keeps its settings and its error restarts at the
//                                                      middle of its bounds, as `shmreplay limit` does)
//   learner counters          the file's (2.4: the     the file's
//   (2.4: write-backs)        write-back counters too)
//   episode queues            the file's records       the file's records (the target's own are replaced)
//   stack restarts, rule      the file's               the rule must be the same, and the target's restart
//                                                      reserve at least the file's, unless allow_mismatch (the
//                                                      reserve stays the target's: the saved steps whose frames do
//                                                      not fit are left out, and a note says which)
//   compressed fields (2.3:   decoded (each record's   the same, into the target's budget: steps whose frames do
//   their records as they     CRC-32C checked first)   not fit leave the view, counted as lost to the budget; the
//   are)                      and coded again          codec must be the same (it is part of the schema)
//   sample cap, counts (2.3)  the file's cap and each  the cap must be the same; each loaded step's count (at
//                             step's deliveries        most the cap)
//   consuming queue (2.3)     a queue; each step free  the same, if the target is a queue too (else refused
//                             or delivered as saved,   unless allow_mismatch: a plain file's steps enter a queue
//                             in the saved order       undelivered; a queue file's states leave with it)
//   initial priority (2.3)    the file's; with +inf    must be the same unless allow_mismatch; with +inf each
//                             each step's fresh flag   step's fresh flag (none in a file without: not fresh)
//   sequence priorities (2.3) the file's length; the   must be the same unless allow_mismatch; the windows are
//                             windows recomputed       recomputed from the loaded weights either way
//   reanalyse walk (2.4)      the file's chunk; each    the chunk must be the same (2.3 files do not say: not
//                             loaded chunk's last       checked) unless allow_mismatch; the walk is reset (holds
//                             target version, due in    dropped), then given the file's versions when the chunk
//                             a new pass                is the same (else every loaded chunk never reanalysed)
// A format 1.0 file lacks priorities, limiter, counters, episode records and stack settings: it loads as before
// (the target keeps its own counters and limiter, every loaded step's priority is the running maximum, a new
// segment has none of them) with a note that names what the file lacks.
//
// -- Chains: periodic, incremental checkpoints (save_link, load_chain) ------------------------------------------
//
// save_link writes one link of a chain into a directory: `DIR/link-SEQ.shmrckpt`, SEQ counting up (10 digits, up to
// kMaxLinkSeq: a save whose number would pass it is refused, and a name of that shape with another number is
// named in the notes and never read). A link is a
// format 2.0 file whose env sections hold, per env, the records published since the previous link (data_from = that
// link's head for the env), or the whole window when the env's steps may have changed (its update_seq moved: the
// learner rewrote a step or a load replaced the env; the heads went back; no usable previous link; a new chain).
// Everything that is not a record (weights, episode records, counters, limiter) is whole in every link. A link
// restores the state it describes from itself and earlier links of its chain: each step of each env's window comes
// from the newest link that holds it. Each link is written as a save_checkpoint file is (a temporary file, synced,
// renamed, the directory synced), so a save killed at any instruction, or failing for a full disk, leaves the links
// there were; then save_link removes the links no longer needed by the newest `keep` links (a link is needed by
// link n when it holds a step of n's windows that no newer link up to n holds). When the links the newest one needs
// exceed ChainOptions::compact_ratio times its window's bytes (or times 1 MiB, for a smaller window), the next link is
// whole (a new chain), which bounds the disk a chain takes. The previous link a new one builds on is the newest
// whose own checksums verify (save_link reads it whole): a damaged link is skipped, counts as no restore point, and
// is removed once no kept link needs it, so one bad file neither spoils the links after it nor gets the good ones
// before it pruned.
//
// load_chain restores the newest link whose needed links are all there and verify (every checksum): the newest
// complete state.
//
// Whose files a chain takes (the rule Buffer::open applies to segments, OpenOptions::allow_other_owner): a
// directory in a world-writable place may have been made by another user, who can then plant files in it. So the
// directory, its lock (`chain.lock`), its list of chains (`chain.ids`) and each link must belong to this process's
// user, unless ChainOptions::allow_other_owner / LoadOptions::allow_other_owner, which also takes the files of the
// directory's owner: another user's directory is refused (Errc::permission_denied), and a link of another user is
// not read (named in the notes, never removed). The lock, the list and the links are opened without following a
// symbolic link. And a directory restores only its own chains: save_link writes the id of each chain it starts
// into `chain.ids` before that chain's first link, and load_chain and verify_chain skip a link whose chain the list
// lacks (one copied from another chain directory, or of another buffer), naming it in the notes. A directory
// without the list (saved by a release before it) takes every link, with a note; its next save_link writes the list,
// naming the chains of the links there. With save_link every S seconds, a crash of every process and of /dev/shm loses at most the steps
// published in the last S seconds plus one save's duration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/rate_limit.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay {

/// The largest link number of a chain (link-N.shmrckpt): N has at most 19 digits, so that every name reads back.
inline constexpr uint64_t kMaxLinkSeq = 9'999'999'999'999'999'999ull;

/// One env as a checkpoint holds it.
struct CheckpointEnv {
  uint64_t env = 0;           ///< the env id
  uint64_t first_step = 0;    ///< the window's first step: max(0, claimed - capacity), or above it with a stacked
                              ///< field (its steps before first_step lost their frames)
  uint64_t data_from = 0;     ///< the first step whose record this file holds: first_step, or (a chain's link)
                              ///< later, the steps before it being in earlier links
  uint64_t steps = 0;         ///< records of this env in the file: head - data_from
  uint64_t head = 0;          ///< the window's end: steps first_step .. head - 1 were stored
  uint64_t claimed = 0;       ///< head or head + 1 (see the top of this file)
  uint64_t online_start = 0;  ///< the learner's online-queue start, <= head
  uint64_t last_push_ns = 0;  ///< CLOCK_REALTIME of the env's last push when saved; informational
  uint64_t update_seq = 0;    ///< the env's update_seq when saved (format 2.0)
  uint64_t offset = 0;        ///< where the env's section starts in the file
  uint64_t records_offset = 0;  ///< where its records start (after the section header), then its frame block
                                ///< (2.3), weights, queued episode records and sample-cap counts (2.3)
  uint32_t data_crc = 0;      ///< CRC-32 of the env's records
  uint32_t extra_crc = 0;     ///< CRC-32 of its weights and queued records (format 2.0)
  uint64_t weights = 0;       ///< priority weights in the file: head - first_step, or 0 without priorities
  uint64_t queue_head = 0;    ///< its completed-episode queue: records popped since creation (format 2.0)
  uint64_t queue_tail = 0;    ///< ... pushed since creation
  uint64_t records_dropped = 0;  ///< ... dropped because it was full
  uint64_t queued = 0;        ///< queue_tail - queue_head: records waiting, in the file
  uint64_t cap_counts = 0;    ///< (format 2.3) sample-cap counts in the file, one per window step (0 without a cap)
  uint64_t fresh = 0;         ///< (format 2.3) fresh flags in the file, one per window step (initial priority +inf)
  uint64_t queue_tickets = 0; ///< (format 2.3) insertion tickets in the file, one per window step (a consuming queue)
  uint64_t walk_versions = 0; ///< (format 2.4) target versions + 1 in the file, one per full chunk with a window step
  uint64_t frame_bytes = 0;   ///< (format 2.3) bytes of its compressed frame block, after its records (0 without)
  uint32_t frame_crc = 0;     ///< (format 2.3) CRC-32 of that block
};

/// The learner's counters (GlobalControl line 1 and the priority counters), as a checkpoint holds them.
struct CheckpointLearner {
  uint64_t rows_sampled = 0;   ///< rows returned by sample calls and peeks
  uint64_t sample_calls = 0;   ///< sample calls (and peeks) that returned
  uint64_t retries = 0;        ///< rows redrawn because a writer overwrote them during the copy
  uint64_t online_resets = 0;  ///< calls of reset_online_queue
  uint64_t steps_updated = 0;  ///< steps rewritten in place by the learner
  uint64_t priority_updates = 0;          ///< priorities the learner set
  uint64_t priority_updates_dropped = 0;  ///< ... refused because the step had been overwritten
  uint64_t write_backs_applied = 0;  ///< (format 2.4) rows write_back rewrote; 0 in older files
  uint64_t write_backs_refused = 0;  ///< (format 2.4) ... refused (overwritten since, or a load came between)
  /// Equal when every counter is.
  friend bool operator==(const CheckpointLearner&, const CheckpointLearner&) = default;
};

/// A learner slot past slot 0 as a checkpoint holds it (format 2.1; layout 1.7): its counters (the priority
/// counters are the buffer's, in CheckpointInfo::learner) and its online start per env (each <= the env's head).
struct CheckpointLearnerSlot {
  CheckpointLearner counters;           ///< rows_sampled .. steps_updated of the slot
  std::vector<uint64_t> online_starts;  ///< per env, the slot's online-queue start
  /// Equal when every member is.
  friend bool operator==(const CheckpointLearnerSlot&, const CheckpointLearnerSlot&) = default;
};

/// The rate limiter as a checkpoint holds it: settings and offset in force, and its counts (inserts are the heads).
struct CheckpointLimiter {
  std::optional<RateLimit> limit;  ///< the settings; nullopt without a limiter
  double error_offset = 0;         ///< the offset in force
  uint64_t samples = 0;            ///< rows counted (GlobalControl::samples)
  uint64_t changes = 0;            ///< settings changes since creation
  uint64_t last_sample_ns = 0;     ///< CLOCK_REALTIME of the last counted sample call
  uint64_t learner_limited = 0;    ///< sample calls held back
  uint64_t writers_limited = 0;    ///< push calls held back
  uint64_t writer_timeouts = 0;    ///< ... that gave up
  /// Equal when every setting and count is.
  friend bool operator==(const CheckpointLimiter&, const CheckpointLimiter&) = default;
};

/// What a checkpoint file holds, as read from (or written to) its headers.
struct CheckpointInfo {
  std::string path;                      ///< the file
  uint32_t format_major = 0;             ///< its format version
  uint32_t format_minor = 0;             ///< ... minor
  std::string source_name;               ///< the name of the segment it was saved from
  uint32_t source_layout_major = 0;      ///< that segment's layout version
  uint32_t source_layout_minor = 0;      ///< ... minor
  uint64_t source_creation_time_ns = 0;  ///< that segment's creation time (CLOCK_REALTIME)
  uint64_t save_started_ns = 0;          ///< CLOCK_REALTIME when the save began (format 2.0; 0 in 1.0)
  uint64_t saved_time_ns = 0;            ///< CLOCK_REALTIME when the save finished
  uint64_t num_envs = 0;                 ///< envs of the source
  uint64_t capacity = 0;                 ///< steps per env of the source
  Schema schema;                         ///< the source's schema
  EpisodeFieldIndices episode_fields;   ///< the source's episode fields (none: a buffer without episodes)
  uint64_t episode_queue_capacity = 0;  ///< the source's records per env queue; 0 without episode fields
  uint64_t stack_restarts = 0;          ///< the source's stack restart reserve (0 without stacked fields or in 1.0)
  StackContinuity stack_continuity = StackContinuity::compare;  ///< the source's continuity rule
  std::optional<double> priority_exponent;  ///< alpha; nullopt without priorities (or in a 1.0 file)
  double max_priority = 1.0;             ///< the running maximum priority
  CheckpointLimiter limiter;             ///< the rate limiter (format 2.0)
  CheckpointLearner learner;             ///< learner slot 0's counters, and the priority updates (format 2.0)
  uint64_t max_learners = 1;             ///< the source's learner slots (format 2.1; 1 in older files)
  double expected_compression = 0;       ///< a ratio (CreateOptions::expected_compression) that gives each of the
                                         ///< source's compressed fields at least its byte ring: what a load into a new
                                         ///< segment creates it with; 0 without compressed fields
  std::vector<CheckpointLearnerSlot> learner_slots;  ///< slots 1 to max_learners - 1 (format 2.1)
  /// The policy version the learners had published (format 2.2; layout 1.11): a load publishes it in the target;
  /// the policy-version field is episode_fields.policy_version. 0 in older files.
  uint64_t policy_version = 0;
  /// Their window (format 2.2): a load publishes it with the version; nullopt when none (and in older files).
  std::optional<uint64_t> policy_max_staleness;
  /// The source's sample cap (format 2.2; layout 1.11, CreateOptions::max_times_sampled): a load into a new segment
  /// creates it with the cap; from format 2.3 each loaded step keeps the deliveries counted when it was saved (older
  /// files: none counted). 0 without (and in older files).
  uint64_t max_times_sampled = 0;
  /// Whether the source is a consuming queue (format 2.3; layout 1.11, CreateOptions::consuming_queue): a load into a
  /// new segment makes a queue again, each loaded step free or delivered as saved (a claim pending at the save is
  /// free: its call never committed), in the saved insertion order. false in older files.
  bool consuming_queue = false;
  /// The queue's next insertion ticket when saved (format 2.3): a load continues the order after the loaded steps'.
  uint64_t queue_next_ticket = 0;
  /// The priority of a step pushed without one (format 2.3; CreateOptions::initial_priority): nullopt the running
  /// maximum, a fixed value, or +infinity (never-sampled steps first: each loaded step stays fresh as saved).
  std::optional<double> initial_priority;
  /// L of sequence priorities (format 2.3; CreateOptions::sequence_priority_length); 0 without (and in older files).
  uint64_t sequence_priority_length = 0;
  /// Steps per chunk of the source's reanalyse walk (format 2.4; CreateOptions::reanalyse_chunk): a load into a new
  /// segment recreates the walk (each loaded chunk with its saved target version, CheckpointEnv::walk_versions), a
  /// load into one with another chunk is refused. 0 without a walk; nullopt in older files, which do not say (a
  /// load then keeps the target's walk, every loaded chunk never reanalysed).
  std::optional<uint64_t> reanalyse_chunk;
  /// Bytes of one record in the file (format 2.3): schema.step_bytes(), or less when compressed fields are saved as
  /// their compressed records (each such field's bytes in a record are then its u64 newest frame number, and the
  /// env's frame block holds the records). Older files: schema.step_bytes().
  uint64_t record_bytes = 0;
  uint64_t chain_id = 0;                 ///< a chain's id (save_link); 0 for a self-contained checkpoint
  uint64_t link_seq = 0;                 ///< the link's number in its chain directory; 0 for save_checkpoint
  uint64_t file_bytes = 0;               ///< the file's size
  uint64_t total_steps = 0;              ///< records in the file, all envs together
  std::vector<CheckpointEnv> envs;       ///< one per env, in env order

  /// Whether the file holds its state (1.0: only the steps): priorities, limiter, counters, episode records.
  bool holds_state() const noexcept { return format_major >= 2; }
  /// Whether every env's window is in this file (true but for a chain's incremental link).
  bool self_contained() const noexcept;
  /// Bytes of every env's window's records: what a self-contained save of the same instant writes (with
  /// compressed records, format 2.3, an estimate from the bytes per step of those this file holds).
  uint64_t window_bytes() const noexcept;
};

/// A progress report: `phase` is "saving", "verifying" or "loading"; done_bytes grows to total_bytes.
struct CheckpointProgress {
  std::string_view phase;   ///< "saving", "verifying" or "loading"
  uint64_t done_bytes = 0;  ///< bytes done so far in this phase
  uint64_t total_bytes = 0; ///< bytes the phase will do
};
/// A progress callback (SaveOptions::progress, LoadOptions::progress, verify_checkpoint).
using CheckpointProgressFn = std::function<void(const CheckpointProgress&)>;

/// How save_checkpoint runs: progress reports, its retry bound, its temporary file, and what it may replace.
struct SaveOptions {
  /// Called after each chunk (about 1 MiB of records) and once at the end; may be empty.
  CheckpointProgressFn progress;
  /// How many times an env's copy may be spoilt (rewritten by the learner or a load, lapped by its writer) before
  /// save_checkpoint gives up with Errc::contended.
  uint32_t max_rounds = 100000;
  /// Called once with the temporary file's path, right after it is created with its final mode and before a byte
  /// is written to it; may be empty. save_checkpoint removes the file itself on every error; this lets a program
  /// remove it on a signal too (the CLI's `save` does, from its SIGINT/SIGTERM handler).
  std::function<void(const std::string& temp_path)> temp_file_created;
  /// Replace `path` whatever it is. By default save_checkpoint replaces only a checkpoint file (one that starts
  /// with "SHMRCKPT") and refuses anything else there (another file, a symbolic link, a directory) with
  /// Errc::already_exists, before it starts and again just before its rename.
  bool force = false;
  /// Save compressed fields decoded, as whole steps (what format 2.2 wrote), instead of as their compressed records
  /// (format 2.3's default: a file about as large as the segment's records). For comparisons and for readers older
  /// than 2.3; a load reads both.
  bool decode_compressed = false;
};

/// Saves `source` (which may be mapped read-only) to the file `path`: written under a temporary name in the same
/// directory (`path.tmp-<pid>-<n>`), synced, then renamed over `path`, so `path` is either the complete new
/// checkpoint or what it was. What is at `path` is replaced only when it is a checkpoint (or options.force). The
/// file's permission bits are the segment's read/write bits for group and others
/// plus 0600 for the owner (a 0600 buffer gives a 0600 file, a 0640 one a 0640 file), set when the temporary file
/// is created, before any data is in it, whatever the umask. Before it starts, it removes the temporary files
/// that earlier saves to `path` left when they were killed (`path.tmp-<pid>-<n>` of pids that no longer exist and
/// that no process holds locked); on an error it removes its own.
/// Never writes the segment and never waits for writers or the learner; it runs at the calling thread's CPU priority
/// (`shmreplay save` and the Python Checkpointer lower theirs: docs/cli.md). Throws Error: already_exists (`path` is
/// not a checkpoint; see SaveOptions::force), contended (see SaveOptions), system / permission_denied / no_space /
/// not_found for the file (no_space: its file system or quota is full, or the file would pass this process's file
/// size limit, RLIMIT_FSIZE; the message says the bytes free or the limit). O(stored steps x fields) time,
/// O(1 MiB + one record) memory.
CheckpointInfo save_checkpoint(const Buffer& source, const std::string& path, const SaveOptions& options = {});

/// Reads and validates the whole file, every checksum included, and returns what it holds; writes nothing.
/// Throws Error: not_found, not_a_segment (not a checkpoint file), version_mismatch, truncated, corrupt (each
/// message says which part, at which offset, and expected versus actual), system.
CheckpointInfo verify_checkpoint(const std::string& path, const CheckpointProgressFn& progress = {});

/// How load_checkpoint runs: progress reports, a new segment's mode, and whether another user's segment may be
/// the target.
struct LoadOptions {
  /// Called during validation ("verifying") and writing ("loading"); may be empty.
  CheckpointProgressFn progress;
  /// For a new segment: its file's permission bits.
  uint32_t mode = 0600;
  /// Load into an existing segment that belongs to another user (OpenOptions::allow_other_owner): refused by
  /// default with Errc::permission_denied, since it would hand that user the checkpoint's steps. For load_chain,
  /// also take a chain directory of another user and the links of the directory's owner ("Chains" above).
  bool allow_other_owner = false;
  /// Load into an existing segment whose priorities (alpha, or having them), rate limiter settings or stack
  /// continuity rule differ from the file's, or whose stack restart reserve is smaller: refused by default with
  /// Errc::schema_mismatch naming each difference, since the load would change what the restored state means (or
  /// leave saved steps out). With it, the load does what the top of this file
  /// says for each part, and LoadResult::notes says what it did.
  bool allow_mismatch = false;
};

/// What load_checkpoint did.
struct LoadResult {
  std::string name;     ///< the segment loaded into
  bool created = false; ///< whether load created it
  CheckpointInfo info;  ///< what the file holds (as verify_checkpoint returns it); for a chain, the restored link
  std::vector<std::string> notes;  ///< what the load left out or changed: a 1.0 file's missing parts, a mismatch
                                   ///< allowed by allow_mismatch, a chain's newer links that were incomplete, the
                                   ///< steps whose frames did not fit the target's stack restart reserve
  uint64_t steps_restored = 0;  ///< steps the target holds of the restored windows: info's, less those left out
};

/// Loads the checkpoint `path` into the segment `name` (empty: the name the checkpoint was saved from). When no
/// such segment exists it is created with the file's geometry and schema, filled while it has no name
/// (Buffer::create_unnamed) and named only when complete, so a load that fails or is killed at any moment leaves no
/// segment behind (Errc::already_exists if another process creates the name meanwhile);
/// otherwise the existing segment must belong to this process's user unless options.allow_other_owner
/// (Errc::permission_denied), and have the same schema and episode fields (Errc::schema_mismatch, listing
/// the differences), envs and capacity (Errc::invalid_argument), and no live writer or learner
/// (Errc::lease_held), and the same priorities, rate limiter settings and stack rule and a stack restart reserve at
/// least the file's unless options.allow_mismatch (Errc::schema_mismatch naming each difference). The file is
/// validated completely (as verify_checkpoint) before the target is touched. Each env ends with the file's steps,
/// head, claimed, online_start, weights and waiting episode records (and, with episode fields, the episode
/// bookkeeping rebuilt from them); the buffer with the file's learner counters and limiter counts; the leases'
/// history is kept. The top of this file says what happens to each part in detail. A link of a chain that is not
/// self-contained is refused (Errc::invalid_argument): load its directory with load_chain.
LoadResult load_checkpoint(const std::string& path, std::string_view name = {}, const LoadOptions& options = {});

/// Loads the checkpoint `path` into `target`, an existing writable segment, as load_checkpoint does; `notes` (when
/// given) gets LoadResult::notes.
CheckpointInfo load_checkpoint_into(Buffer& target, const std::string& path, const LoadOptions& options = {},
                                    std::vector<std::string>* notes = nullptr);

// -- Chains -------------------------------------------------------------------------------------------------------

/// How save_link writes and prunes a chain.
struct ChainOptions {
  /// The newest links kept as restore points (at least 1); older links are removed once no kept link needs them.
  uint32_t keep = 3;
  /// A link is written whole (a new chain) when the links the newest one needs exceed this many times its
  /// window's bytes (at least 1). Bounds a chain's disk: an env that stops pushing keeps its old link alive.
  double compact_ratio = 2.0;
  /// Progress, retry bound and temporary-file callback of each link's save (force is ignored: a chain directory
  /// holds links only).
  SaveOptions save;
  /// Save into a directory of another user, and take the files of the directory's owner there ("Chains" above):
  /// refused by default with Errc::permission_denied.
  bool allow_other_owner = false;
};

/// What save_link wrote and removed.
struct LinkResult {
  CheckpointInfo info;                ///< the new link (info.path, info.link_seq, info.chain_id)
  bool whole = false;                 ///< every env's window is in it (a new chain, or every env changed)
  uint64_t record_bytes = 0;          ///< bytes of records it holds
  uint64_t chain_bytes = 0;           ///< bytes of the links kept in the directory, the new one included
  std::vector<std::string> removed;   ///< links removed because no kept link needs them
  std::vector<std::string> notes;     ///< the files of the directory the save did not take, each named with why
                                      ///< (another owner's, another chain's, unreadable, a name that is no link's)
};

/// Writes the next link of the chain in directory `dir` (created if missing, mode 0700 plus the segment's group and
/// other read/execute bits; checkpoint.hpp "Chains"). Never writes the segment and never waits for writers or the
/// learner. Throws as save_checkpoint; also Errc::permission_denied for a directory, lock or list of chains of
/// another user ("Chains"; ChainOptions::allow_other_owner) or a symbolic link in their place, Errc::lease_held
/// while another save into `dir` runs, Errc::invalid_argument when the next link number would pass kMaxLinkSeq.
/// What was in `dir` stays loadable whatever happens.
LinkResult save_link(const Buffer& source, const std::string& dir, const ChainOptions& options = {});

/// One link file of a chain directory, as its headers say.
struct ChainLink {
  std::string path;            ///< DIR/link-SEQ.shmrckpt, SEQ in 10 digits (up to 19)
  uint64_t seq = 0;            ///< its number in the directory
  uint64_t chain_id = 0;       ///< its chain's id
  uint64_t saved_time_ns = 0;  ///< CLOCK_REALTIME when its save finished
  uint64_t file_bytes = 0;     ///< its size
  std::string error;           ///< empty when its headers check; else why they do not
};
/// The links in `dir`, oldest first, as their headers say (each file's header and env sections checked, not its
/// data; a file that fails, belongs to another user or is of a chain the directory does not list is listed with
/// `error` set). Throws Errc::not_found when `dir` does not exist, Errc::permission_denied for another user's
/// directory unless `allow_other_owner` ("Chains").
std::vector<ChainLink> list_links(const std::string& dir, bool allow_other_owner = false);

/// Verifies the newest complete link of `dir` and every link it needs (every checksum) and returns the link's info;
/// `notes` gets what was skipped (newer links that were incomplete or damaged, and every file not taken: "Chains").
/// Throws Errc::not_found when no link restores, naming why each failed; Errc::permission_denied for another
/// user's directory unless `allow_other_owner`.
CheckpointInfo verify_chain(const std::string& dir, std::vector<std::string>* notes = nullptr,
                            const CheckpointProgressFn& progress = {}, bool allow_other_owner = false);

/// Restores the newest complete link of the chain in `dir` into the segment `name` (empty: the name it was saved
/// from), as load_checkpoint does with one file. LoadResult::notes names newer links that were skipped and every file
/// not taken ("Chains": another user's, another chain's, a name that is no link's).
LoadResult load_chain(const std::string& dir, std::string_view name = {}, const LoadOptions& options = {});

/// Whether `path` is a directory (then load and verify treat it as a chain).
bool is_chain_dir(const std::string& path);

}  // namespace shmreplay
