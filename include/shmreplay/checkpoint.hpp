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
// -- The file format, version 1.0 ------------------------------------------------------------------------------
//
// All integers are little-endian. CRC-32 is the IEEE polynomial of zlib (check value crc32("123456789") =
// 0xcbf43926). The structs are declared below in namespace checkpoint_format with their sizes pinned.
//
//   offset 0 -------------> +-----------------------------------------------+
//                           | CheckpointHeader                    160 bytes |
//                           |   magic "SHMRCKPT", format major.minor,       |
//                           |   header_bytes, file_bytes (the whole file),  |
//                           |   num_envs, capacity, num_fields, step_bytes, |
//                           |   total_steps, meta_bytes, name_bytes,        |
//                           |   schema_bytes, saved time, source creation   |
//                           |   time, source layout major.minor, episode    |
//                           |   fields (done, terminated, truncated, reward |
//                           |   field indices) and queue capacity,          |
//                           |   meta_crc, header_crc (of these 160 bytes    |
//                           |   with header_crc = 0)                        |
//   header_bytes ---------> +-----------------------------------------------+
//                           | meta: the source segment's name (name_bytes), |
//                           |   then the schema's text form (schema_bytes), |
//                           |   e.g. "obs:f32[4] action:i32 done:bool"      |
//                           +-----------------------------------------------+
//                           | env 0: EnvSection                    80 bytes |
//                           |   magic "SHMRENV.", env, first_step, steps,   |
//                           |   head (= first_step + steps), claimed (head  |
//                           |   or head + 1), online_start, last_push_ns,   |
//                           |   data_crc (of the records), header_crc       |
//                           |   (of these 80 bytes with header_crc = 0)     |
//                           | records: steps x step_bytes, oldest first;    |
//                           |   a record is one step, its fields in schema  |
//                           |   order, back to back, no padding             |
//                           | env 1: EnvSection, records                    |
//                           | ...                                           |
//                           +-----------------------------------------------+
//                           | CheckpointTrailer                    32 bytes |
//                           |   magic "SHMRCEND", total_steps,              |
//                           |   record bytes, trailer_crc                   |
//   file_bytes -----------> +-----------------------------------------------+
//
// Invariants a loader checks: the file is exactly file_bytes long (shorter: Errc::truncated); the sections are
// back to back in env order; per env first_step = max(0, claimed - capacity) (at least that, up to head, for a
// schema with a stacked field), steps <= capacity, online_start <= head; step_bytes and num_fields agree with the
// schema text; episode field indices are below num_fields; total_steps is the sum of the envs' steps.
//
// Episodes (a buffer created with CreateOptions::episodes, layout 1.2): the file records which fields are the
// episode flags and reward, and the queue capacity, so a new segment is created with the same episode fields, and
// an existing one must have the same. The per-step episode bookkeeping (step meta, the writers' journals) is not
// stored: it follows from the flag and reward bytes of the steps, and a load rebuilds it (detail::rebuild_env).
// An episode in progress at the window's start counts only its stored steps in its running return; the learner's
// completed-episode queues are not part of a checkpoint (an existing segment keeps its own).
// Versioning: a reader refuses another major version (Errc::version_mismatch) and reads any minor version of its
// own major; a newer minor version may grow the header (header_bytes) and only append where a 1.0 reader does
// not look.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay {

namespace checkpoint_format {

inline constexpr uint64_t kMagic = 0x54504b43524d4853ull;         ///< "SHMRCKPT" read as little-endian u64
inline constexpr uint64_t kEnvMagic = 0x2e564e45524d4853ull;      ///< "SHMRENV."
inline constexpr uint64_t kTrailerMagic = 0x444e4543524d4853ull;  ///< "SHMRCEND"
inline constexpr uint32_t kFormatMajor = 1;  ///< the format's major version: a loader refuses another
inline constexpr uint32_t kFormatMinor = 0;  ///< the format's minor version
inline constexpr uint64_t kMaxMetaBytes = 1ull << 20;  ///< bound on the name + schema text a loader accepts
inline constexpr uint32_t kNoField = 0xffffffffu;      ///< an episode field index meaning "none"

/// The file's first 160 bytes; the meta block (the source's name, then its schema text) follows.
struct CheckpointHeader {
  uint64_t magic;                    ///< kMagic
  uint32_t format_major;             ///< kFormatMajor of the writer
  uint32_t format_minor;             ///< kFormatMinor of the writer
  uint64_t header_bytes;             ///< sizeof(CheckpointHeader) of the writer's version; the meta block follows
  uint64_t file_bytes;               ///< the whole file
  uint64_t num_envs;                 ///< the source segment's envs
  uint64_t capacity;                 ///< the source segment's steps per env
  uint64_t num_fields;               ///< fields of the schema
  uint64_t step_bytes;               ///< bytes of one record
  uint64_t total_steps;              ///< records in the file, all envs together
  uint64_t meta_bytes;               ///< bytes of the meta block: the name, then the schema text
  uint64_t name_bytes;               ///< bytes of the source segment's name at the start of the meta block
  uint64_t schema_bytes;             ///< bytes of the schema text after the name (the rest of the meta block)
  uint64_t saved_time_ns;            ///< CLOCK_REALTIME when the save finished
  uint64_t source_creation_time_ns;  ///< the source segment's creation time
  uint32_t source_layout_major;      ///< the source segment's layout version
  uint32_t source_layout_minor;      ///< ... minor
  uint32_t episode_done;             ///< schema index of the episode `done` field; kNoField when none
  uint32_t episode_terminated;       ///< ... of `terminated`
  uint32_t episode_truncated;        ///< ... of `truncated`
  uint32_t episode_reward;           ///< ... of `reward`
  uint64_t episode_queue_capacity;   ///< records per env's completed-episode queue; 0 without episode fields
  uint32_t meta_crc;                 ///< CRC-32 of the meta block
  uint32_t header_crc;               ///< CRC-32 of this header with header_crc = 0
  uint64_t reserved;                 ///< zero
};

/// The header of one env's section; its records (step_bytes each, oldest first) follow.
struct EnvSection {
  uint64_t magic;         ///< kEnvMagic
  uint64_t env;           ///< the env id
  uint64_t first_step;    ///< the step index of the first record
  uint64_t steps;         ///< records that follow
  uint64_t head;          ///< first_step + steps
  uint64_t claimed;       ///< head, or head + 1 when the writer was writing step `head`
  uint64_t online_start;  ///< the learner's online-queue start, <= head
  uint64_t last_push_ns;  ///< informational
  uint32_t data_crc;      ///< CRC-32 of the records
  uint32_t header_crc;    ///< CRC-32 of this section header with header_crc = 0
  uint64_t reserved;      ///< zero
};

/// The file's last 32 bytes, after the last env section.
struct CheckpointTrailer {
  uint64_t magic;         ///< kTrailerMagic
  uint64_t total_steps;   ///< records in the file (as the header says)
  uint64_t record_bytes;  ///< bytes of all records together
  uint32_t reserved;      ///< zero
  uint32_t trailer_crc;   ///< CRC-32 of this trailer with trailer_crc = 0
};

static_assert(sizeof(CheckpointHeader) == 160, "the checkpoint header is 160 bytes in format 1.0");
static_assert(sizeof(EnvSection) == 80, "an env section header is 80 bytes in format 1.0");
static_assert(sizeof(CheckpointTrailer) == 32, "the checkpoint trailer is 32 bytes in format 1.0");

}  // namespace checkpoint_format

/// One env as a checkpoint holds it.
struct CheckpointEnv {
  uint64_t env = 0;           ///< the env id
  uint64_t first_step = 0;    ///< steps first_step .. head - 1 are in the file: max(0, claimed - capacity), or
                              ///< above it with a stacked field (its steps before first_step lost their frames)
  uint64_t steps = 0;         ///< records of this env in the file
  uint64_t head = 0;          ///< first_step + steps
  uint64_t claimed = 0;       ///< head or head + 1 (see the top of this file)
  uint64_t online_start = 0;  ///< the learner's online-queue start, <= head
  uint64_t last_push_ns = 0;  ///< CLOCK_REALTIME of the env's last push when saved; informational
  uint64_t offset = 0;        ///< where the env's section starts in the file
  uint32_t data_crc = 0;      ///< CRC-32 of the env's records
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
  uint64_t saved_time_ns = 0;            ///< CLOCK_REALTIME when the save finished
  uint64_t num_envs = 0;                 ///< envs of the source
  uint64_t capacity = 0;                 ///< steps per env of the source
  Schema schema;                         ///< the source's schema
  EpisodeFieldIndices episode_fields;   ///< the source's episode fields (none: a buffer without episodes)
  uint64_t episode_queue_capacity = 0;  ///< the source's records per env queue; 0 without episode fields
  uint64_t file_bytes = 0;               ///< the file's size
  uint64_t total_steps = 0;              ///< records in the file, all envs together
  std::vector<CheckpointEnv> envs;       ///< one per env, in env order
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
};

/// Saves `source` (which may be mapped read-only) to the file `path`: written under a temporary name in the same
/// directory (`path.tmp-<pid>-<n>`), synced, then renamed over `path`, so `path` is either the complete new
/// checkpoint or what it was. What is at `path` is replaced only when it is a checkpoint (or options.force). The
/// file's permission bits are the segment's read/write bits for group and others
/// plus 0600 for the owner (a 0600 buffer gives a 0600 file, a 0640 one a 0640 file), set when the temporary file
/// is created, before any data is in it, whatever the umask. Before it starts, it removes the temporary files
/// that earlier saves to `path` left when they were killed (`path.tmp-<pid>-<n>` of pids that no longer exist and
/// that no process holds locked); on an error it removes its own.
/// Never writes the segment and never waits for writers or the learner. Throws Error: already_exists (`path` is
/// not a checkpoint; see SaveOptions::force), contended (see SaveOptions), system / permission_denied / no_space /
/// not_found for the file. O(stored steps x fields) time,
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
  /// default with Errc::permission_denied, since it would hand that user the checkpoint's steps.
  bool allow_other_owner = false;
};

/// What load_checkpoint did.
struct LoadResult {
  std::string name;     ///< the segment loaded into
  bool created = false; ///< whether load created it
  CheckpointInfo info;  ///< what the file holds (as verify_checkpoint returns it)
};

/// Loads the checkpoint `path` into the segment `name` (empty: the name the checkpoint was saved from). When no
/// such segment exists it is created with the file's geometry and schema, filled while it has no name
/// (Buffer::create_unnamed) and named only when complete, so a load that fails or is killed at any moment leaves no
/// segment behind (Errc::already_exists if another process creates the name meanwhile);
/// otherwise the existing segment must belong to this process's user unless options.allow_other_owner
/// (Errc::permission_denied), and have the same schema and episode fields (Errc::schema_mismatch, listing
/// the differences), envs and capacity (Errc::invalid_argument), and no live writer or learner
/// (Errc::lease_held). The file is
/// validated completely (as verify_checkpoint) before the target is touched. Each env ends with the file's
/// steps, head, claimed and online_start (and, with episode fields, the episode bookkeeping rebuilt from them);
/// the learner's counters, the episode queues and the leases' history are kept.
LoadResult load_checkpoint(const std::string& path, std::string_view name = {}, const LoadOptions& options = {});

/// Loads the checkpoint `path` into `target`, an existing writable segment, as load_checkpoint does.
CheckpointInfo load_checkpoint_into(Buffer& target, const std::string& path, const LoadOptions& options = {});

}  // namespace shmreplay
