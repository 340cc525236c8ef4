// shmreplay/internal/checkpoint_format.hpp: the bytes of a checkpoint file, format 2.4 (what save_checkpoint and
// save_link write; 2.0 is 2.1 without learner slots, 2.2 is 2.3 without packed records and sample-cap counts, 2.3
// is 2.4 without the reanalyse chunk and the write-back counters) and
// format 1.0 (what earlier releases wrote, which load_checkpoint still reads).
//
// Who reads it: lib/checkpoint/ (save.cpp, save_env.cpp, verify.cpp), tests that damage files on purpose, fuzzers.
// Programs use shmreplay/checkpoint.hpp, which includes this file.
//
// All integers are little-endian. CRC-32 is the IEEE polynomial of zlib (check value crc32("123456789") =
// 0xcbf43926). The structs' sizes are pinned below and by tests/checkpoint/format.cpp.
//
// -- Format 2.0 ---------------------------------------------------------------------------------------------------
//
//   offset 0 -------------> +-----------------------------------------------+
//                           | CheckpointHeader                    512 bytes |
//                           |   magic "SHMRCKPT", format major.minor,       |
//                           |   sizes, geometry, episode fields (as 1.0),   |
//                           |   the chain: id and link number, alpha and    |
//                           |   the running maximum priority, the stacked   |
//                           |   fields' restarts and continuity rule, the   |
//                           |   rate limiter's settings, offset and counts, |
//                           |   the learner's counters, meta_crc and        |
//                           |   header_crc (of these 512 bytes with         |
//                           |   header_crc = 0)                             |
//   header_bytes ---------> +-----------------------------------------------+
//                           | meta: the source segment's name (name_bytes), |
//                           |   then the schema's text form (schema_bytes)  |
//                           +-----------------------------------------------+
//                           | env 0: EnvSection                   192 bytes |
//                           |   magic "SHMRENV2", env, first_step,          |
//                           |   data_from, records, head, claimed,          |
//                           |   online_start, last_push_ns, update_seq,     |
//                           |   weights (0 or head - first_step), queue     |
//                           |   head, tail and drops, queued records,       |
//                           |   data_crc, extra_crc, header_crc             |
//                           | records: (head - data_from) x record_bytes,   |
//                           |   steps data_from .. head - 1, oldest first,  |
//                           |   one step's fields in schema order (2.3: a   |
//                           |   compressed field as its newest frame, u64)  |
//                           | (2.3) frame block, frame_bytes: per           |
//                           |   compressed field a PackedBlockHeader, then  |
//                           |   its frame records (PackedFrameBytes, bytes, |
//                           |   padding to 8)                               |
//                           | weights: f32 priority^alpha of steps          |
//                           |   first_step .. head - 1 (with priorities)    |
//                           | queued: EpisodeRecord x queued, the episode   |
//                           |   records [queue_head, queue_tail) waiting    |
//                           | (2.3) cap counts: u8 x cap_counts, each       |
//                           |   window step's deliveries (with a cap; in a  |
//                           |   queue 0 free, 1 delivered)                  |
//                           | (2.3) fresh: u8 x fresh, each window step's   |
//                           |   fresh flag (initial priority +inf)          |
//                           | (2.3) tickets: u64 x queue_tickets, each      |
//                           |   window step's insertion ticket (a queue)    |
//                           | (2.4) walk: u64 x walk_versions, each window  |
//                           |   full chunk's target version + 1 (a walk)    |
//                           | env 1: EnvSection, records, weights, queued   |
//                           | ...                                           |
//                           +-----------------------------------------------+
//                           | (2.1, only with max_learners > 1) the learner |
//                           |   block, learner_bytes: LearnerSlotBytes x    |
//                           |   (max_learners - 1), slots 1.. counters;     |
//                           |   then u64 online starts [max_learners - 1]   |
//                           |   [num_envs], each <= its env's head          |
//                           +-----------------------------------------------+
//                           | CheckpointTrailer                    32 bytes |
//                           |   magic "SHMRCEND", records in the file,      |
//                           |   their bytes, trailer_crc                    |
//   file_bytes -----------> +-----------------------------------------------+
//
// An env's window is [first_step, head): the steps the env held at the instant its section describes. A
// self-contained checkpoint (save_checkpoint) holds every one of them: data_from = first_step. A link of a chain
// (save_link) may hold only the steps published since the previous link: data_from >= first_step, and the steps
// [first_step, data_from) are in earlier links of the same chain (the loader takes each step from the newest link
// that holds it; checkpoint.hpp, "Chains"). Everything but the records describes the instant itself and is in every
// link whole: weights, queued records, counters.
//
// Invariants a loader checks (besides every CRC and the exact length): the sections are back to back in env order;
// first_step <= data_from <= head; head - first_step <= capacity; claimed is head or head + 1; first_step =
// max(0, claimed - capacity) (at least that for a schema with a stacked field); online_start <= head; weights is 0
// (no priorities) or head - first_step; queue_head <= queue_tail, queued = queue_tail - queue_head <= the queue
// capacity (0 without episode fields); the header's records = the sum of the envs' (head - data_from); and values a
// segment can hold: alpha finite and >= 0, the running maximum priority from 1 to FLT_MAX, the limiter's offset
// finite, every weight from 0 to FLT_MAX (not NaN).
//
// -- Format 1.0 (read, never written) ----------------------------------------------------------------------------
//
// A 160-byte header (v1::CheckpointHeader: the fields of the 2.0 header up to episode_queue_capacity, then
// meta_crc and header_crc), the same meta block, per env an 80-byte v1::EnvSection ("SHMRENV.", env, first_step,
// steps, head, claimed, online_start, last_push_ns, data_crc, header_crc) followed by its records [first_step,
// head), and the same 32-byte trailer. It holds no priorities, limiter, learner counters, episode records or stack
// settings: a load says so (LoadResult::notes) and the target keeps what it would have had without them.
//
// Versioning: a reader refuses a major version it does not know (Errc::version_mismatch) and reads any minor version
// of the majors it knows; a newer minor version may grow the header (header_bytes) or the env section
// (section_bytes) and only append where an older reader does not look. 2.1 adds the learner slots of layout 1.7
// (three header words that were reserved, zero for one learner, and the learner block): a 2.1 file of a one-learner
// buffer is a 2.0 file but for its version; one with several slots a 2.0 reader refuses as corrupt (its trailer
// is not where the env sections end), as it could not restore those slots. 2.3 takes a header word (record_bytes)
// and three env-section words (cap_counts, frame_bytes, frame_crc), then four header words (the consuming queue, its
// next ticket, the initial priority, the sequence-priority length) and two env-section words (fresh, queue_tickets):
// a file without compressed fields saved as records, without a sample cap and without fresh flags is a 2.2 file but
// for its version (a 2.2 reader ignores the new header words: it loads a plain buffer); one with either a 2.2 reader refuses as corrupt (its
// sections are not where it expects), as it could not decode the records or keep the counts. 2.4 takes three header
// words (reanalyse_chunk, learner slot 0's write_backs_applied and write_backs_refused), two words of each
// LearnerSlotBytes (the other slots' write-back counters) and an env-section word (walk_versions), all zero in a 2.3
// file: a 2.4 file of a buffer without a walk is a 2.3 file but for its version and those words, which a 2.3 reader
// ignores (it loads without the counters); one with a walk a 2.3 reader refuses as corrupt (its sections are not
// where it expects).
#pragma once

#include <cstddef>
#include <cstdint>

namespace shmreplay::checkpoint_format {

inline constexpr uint64_t kMagic = 0x54504b43524d4853ull;         ///< "SHMRCKPT" read as little-endian u64
inline constexpr uint64_t kEnvMagic = 0x32564e45524d4853ull;      ///< "SHMRENV2" (format 2)
inline constexpr uint64_t kTrailerMagic = 0x444e4543524d4853ull;  ///< "SHMRCEND"
inline constexpr uint32_t kFormatMajor = 2;  ///< the format this library writes
inline constexpr uint32_t kFormatMinor = 4;  ///< ... minor (2.1: learner slots; 2.2: policy versions, the sample cap;
                                             ///< 2.3: compressed records as they are, the sample-cap counts; 2.4:
                                             ///< the reanalyse walk's chunk, the write-back counters)
inline constexpr uint64_t kMaxMetaBytes = 1ull << 20;  ///< bound on the name + schema text a loader accepts
inline constexpr uint32_t kNoField = 0xffffffffu;      ///< an episode field index meaning "none"

/// The file's first 512 bytes (format 2.0); the meta block (the source's name, then its schema text) follows.
struct CheckpointHeader {
  // -- words 0-17: as format 1.0 up to episode_queue_capacity --
  uint64_t magic;                    ///< kMagic
  uint32_t format_major;             ///< kFormatMajor of the writer
  uint32_t format_minor;             ///< kFormatMinor of the writer
  uint64_t header_bytes;             ///< sizeof(CheckpointHeader) of the writer's version; the meta block follows
  uint64_t file_bytes;               ///< the whole file
  uint64_t num_envs;                 ///< the source segment's envs
  uint64_t capacity;                 ///< the source segment's steps per env
  uint64_t num_fields;               ///< fields of the schema
  uint64_t step_bytes;               ///< bytes of one record
  uint64_t total_records;            ///< records in the file, all envs together
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
  // -- words 18-25: the chain, the section size, stacks, priorities --
  uint64_t section_bytes;            ///< sizeof(EnvSection) of the writer's version
  uint64_t chain_id;                 ///< a chain's random id, the same in all its links; 0 for save_checkpoint
  uint64_t link_seq;                 ///< the link's number in its directory (1, 2, ...); 0 for save_checkpoint
  uint64_t save_started_ns;          ///< CLOCK_REALTIME when the save began
  uint64_t stack_restarts;           ///< the source's CreateOptions::stack_restarts as placed (0 without stacks)
  uint64_t stack_continuity;         ///< the source's StackContinuity code
  uint64_t priority_exponent_bits;   ///< f64 bits of alpha; 0 without priorities (alpha 0 is stored as -0.0)
  uint64_t max_priority_bits;        ///< f64 bits of the running maximum priority (GlobalControl::max_priority)
  // -- words 26-37: the rate limiter --
  uint64_t limiter_enabled;          ///< 1 with a rate limiter, 0 without
  uint64_t limiter_min_size;         ///< RateLimit::min_size_to_sample
  uint64_t limiter_spi_bits;         ///< f64 bits of RateLimit::samples_per_insert
  uint64_t limiter_min_diff_bits;    ///< f64 bits of RateLimit::min_diff
  uint64_t limiter_max_diff_bits;    ///< f64 bits of RateLimit::max_diff
  uint64_t limiter_offset_bits;      ///< f64 bits of the error offset in force
  uint64_t limiter_samples;          ///< GlobalControl::samples: rows the limiter counted
  uint64_t limiter_changes;          ///< GlobalControl::limiter_changes
  uint64_t last_sample_ns;           ///< GlobalControl::last_sample_ns
  uint64_t learner_limited;          ///< GlobalControl::learner_limited
  uint64_t writers_limited;          ///< GlobalControl::writers_limited
  uint64_t writer_timeouts;          ///< GlobalControl::writer_timeouts
  // -- words 38-45: the learner's counters --
  uint64_t rows_sampled;             ///< GlobalControl::rows_sampled
  uint64_t sample_calls;             ///< GlobalControl::sample_calls
  uint64_t retries;                  ///< GlobalControl::retries
  uint64_t online_resets;            ///< GlobalControl::online_resets
  uint64_t steps_updated;            ///< GlobalControl::steps_updated
  uint64_t priority_updates;         ///< GlobalControl::priority_updates
  uint64_t priority_updates_dropped; ///< GlobalControl::priority_updates_dropped
  uint64_t extra_bytes;              ///< bytes of all envs' weights and queued records together
  // -- words 46-63 --
  uint64_t max_learners;             ///< (2.1) the source's learner slots when more than one; 0 for one (and in 2.0)
  uint64_t learner_bytes;            ///< (2.1) bytes of the learner block before the trailer; 0 with one slot
  uint64_t learner_crc;              ///< (2.1) CRC-32 of the learner block (in the low 32 bits); 0 with one slot
  uint64_t expected_compression_bits;  ///< f64 bits of the ratio that gives each of the source's compressed fields
                                       ///< (layout 1.10) at least its byte ring; 0 without
  uint64_t policy_field;             ///< (2.2) the policy-version field's schema index + 1; 0 without one
  uint64_t policy_version;           ///< (2.2) the version the learners had published (PolicyControl::version)
  uint64_t policy_window;            ///< (2.2) their window max_staleness + 1; 0 when none
  uint64_t max_times_sampled;        ///< (2.2) the source's sample cap (layout 1.11); 0 without
  uint64_t record_bytes;             ///< (2.3) bytes of one record in the file: step_bytes with each compressed
                                     ///< field's bytes replaced by its u64 frame number (PackedStepWord); 0 when the
                                     ///< records are whole steps (no compressed field, and every older format)
  uint64_t consuming_queue;          ///< (2.3) 1: the source is a consuming queue (layout 1.11); 0 without
  uint64_t queue_next_ticket;        ///< (2.3) its next insertion ticket (QueueControl::tickets); 0 without a queue
  uint64_t initial_priority_bits;    ///< (2.3) f64 bits of CreateOptions::initial_priority (0 is stored as -0.0,
                                     ///< +inf for "never-sampled steps first"); 0: the running maximum
  uint64_t sequence_priority_length; ///< (2.3) CreateOptions::sequence_priority_length; 0 without
  uint64_t reanalyse_chunk;          ///< (2.4) CreateOptions::reanalyse_chunk, steps per chunk of the reanalyse
                                     ///< walk; 0 without a walk (and in older files, which do not say)
  uint64_t write_backs_applied;      ///< (2.4) learner slot 0's write_backs_applied (its others are the header's
  uint64_t write_backs_refused;      ///< (2.4) ... and write_backs_refused   rows_sampled .. steps_updated)
  uint64_t reserved[1];              ///< zero
  uint32_t meta_crc;                 ///< CRC-32 of the meta block
  uint32_t header_crc;               ///< CRC-32 of this header with header_crc = 0
};

/// The header of one env's section (format 2.0); its records, weights and queued episode records follow.
struct EnvSection {
  uint64_t magic;            ///< kEnvMagic
  uint64_t env;              ///< the env id
  uint64_t first_step;       ///< the window's first step: max(0, claimed - capacity), or above with a stacked field
  uint64_t data_from;        ///< the first step whose record is in this section; first_step .. head
  uint64_t records;          ///< head - data_from
  uint64_t head;             ///< the window's end: steps first_step .. head - 1 were stored
  uint64_t claimed;          ///< head, or head + 1 when the writer was writing step `head`
  uint64_t online_start;     ///< the learner's online-queue start, <= head
  uint64_t last_push_ns;     ///< CLOCK_REALTIME of the env's last push; informational
  uint64_t update_seq;       ///< EnvControl::update_seq when copied: a chain's next link copies the whole window
                             ///< of an env whose update_seq moved (the learner rewrote a step, or a load)
  uint64_t weights;          ///< f32 weights that follow the records: head - first_step, or 0 without priorities
  uint64_t queue_head;       ///< the env's completed-episode queue: records popped since creation
  uint64_t queue_tail;       ///< ... records pushed since creation
  uint64_t records_dropped;  ///< ... records dropped because it was full
  uint64_t queued;           ///< queue_tail - queue_head: EpisodeRecord entries after the weights
  uint64_t cap_counts;       ///< (2.3) u8 sample-cap counts after the queued records, one per window step
                             ///< first_step .. head - 1 with a cap (max_times_sampled), else 0; in extra_crc
  uint64_t frame_bytes;      ///< (2.3) bytes of the compressed frame block after the records (0 without)
  uint64_t frame_crc;        ///< (2.3) CRC-32 of the frame block (in the low 32 bits); 0 without
  uint64_t fresh;            ///< (2.3) u8 fresh flags after the cap counts, one per window step, with initial
                             ///< priority +inf (1: no prioritized draw returned the step yet), else 0; in extra_crc
  uint64_t queue_tickets;    ///< (2.3) u64 insertion tickets after the fresh flags, one per window step, in a
                             ///< consuming queue, else 0; in extra_crc
  uint64_t walk_versions;    ///< (2.4) u64 words after the tickets, with a reanalyse walk (reanalyse_chunk C): one
                             ///< per full chunk k with a window step, k from first_step / C to head / C - 1: the
                             ///< target version of its last completion + 1 (0: never reanalysed); else 0; in
                             ///< extra_crc
  uint64_t reserved[1];      ///< zero
  uint32_t data_crc;         ///< CRC-32 of the records
  uint32_t extra_crc;        ///< CRC-32 of the weights, then the queued records, counts, flags and tickets
  uint32_t header_crc;       ///< CRC-32 of this section header with header_crc = 0
  uint32_t reserved2;        ///< zero
};

/// One queued completed-episode record, as EpisodeRecordSlot holds it.
struct EpisodeRecordBytes {
  uint64_t first_step;      ///< the episode's first step
  uint64_t length;          ///< its steps
  uint64_t return_bits;     ///< f64 bits of its return
  uint64_t end;             ///< an EpisodeEnd code
};

/// One learner slot's counters past slot 0 in the learner block (2.1; slot 0's are the header's).
struct LearnerSlotBytes {
  uint64_t rows_sampled;   ///< the slot's LearnerSlot::rows_sampled
  uint64_t sample_calls;   ///< ... sample_calls
  uint64_t retries;        ///< ... retries
  uint64_t online_resets;  ///< ... online_resets
  uint64_t steps_updated;  ///< ... steps_updated
  uint64_t write_backs_applied;  ///< (2.4) ... write_backs_applied (0 in older files)
  uint64_t write_backs_refused;  ///< (2.4) ... write_backs_refused
  uint64_t reserved[1];    ///< zero
};

/// (2.3) The frame block of an env whose schema has compressed fields: for each compressed field, in schema order,
/// this header, then `frames` frame records [first_frame, first_frame + frames), each a PackedFrameBytes and its
/// `length` bytes, padded with zeros to a multiple of 8. The records are the segment's as they were (its codec, each
/// coded alone or against the frame before it); first_frame is a key frame, the one the env's first record's oldest
/// frame is coded back to. A record's u64 word for the field is its newest frame; its stack the depth frames up to it.
struct PackedBlockHeader {
  uint64_t field;        ///< the field's schema index
  uint64_t first_frame;  ///< the number of the block's first frame
  uint64_t frames;       ///< frame records that follow
  uint64_t bytes;        ///< their bytes, PackedFrameBytes and padding included
};
/// (2.3) One frame record of a frame block.
struct PackedFrameBytes {
  uint32_t length;  ///< bytes of the record: 1 to the frame's bytes
  uint32_t flags;   ///< kFrameRaw | kFrameKey
  uint32_t crc32c;  ///< CRC-32C (Castagnoli) of the record's bytes, as the segment holds it
  uint32_t reserved;  ///< zero
};
inline constexpr uint32_t kFrameRaw = 1;  ///< the frame as pushed (always a key frame)
inline constexpr uint32_t kFrameKey = 2;  ///< coded alone; else against the frame before it

/// Bytes of the learner block of a file with `max_learners` slots and `num_envs` envs (2.1; 0 for one slot).
constexpr uint64_t learner_block_bytes(uint64_t max_learners, uint64_t num_envs) noexcept {
  return max_learners <= 1 ? 0 : (max_learners - 1) * (sizeof(LearnerSlotBytes) + num_envs * sizeof(uint64_t));
}

/// The file's last 32 bytes, after the last env section (the same in formats 1.0 and 2.0).
struct CheckpointTrailer {
  uint64_t magic;         ///< kTrailerMagic
  uint64_t total_steps;   ///< records in the file (as the header says)
  uint64_t record_bytes;  ///< bytes of all records together
  uint32_t reserved;      ///< zero
  uint32_t trailer_crc;   ///< CRC-32 of this trailer with trailer_crc = 0
};

static_assert(sizeof(CheckpointHeader) == 512, "the checkpoint header is 512 bytes in format 2.0");
static_assert(sizeof(EnvSection) == 192, "an env section header is 192 bytes in format 2.0");
static_assert(sizeof(EpisodeRecordBytes) == 32, "a queued episode record is 32 bytes");
static_assert(sizeof(LearnerSlotBytes) == 64, "a learner slot's counters are 64 bytes in format 2.1");
static_assert(sizeof(CheckpointTrailer) == 32, "the checkpoint trailer is 32 bytes");
static_assert(sizeof(PackedBlockHeader) == 32, "a frame block's field header is 32 bytes in format 2.3");
static_assert(sizeof(PackedFrameBytes) == 16, "a frame record's header is 16 bytes in format 2.3");

/// Format 1.0, which earlier releases wrote: read by load_checkpoint and verify_checkpoint, never written.
namespace v1 {

inline constexpr uint64_t kEnvMagic = 0x2e564e45524d4853ull;  ///< "SHMRENV."
inline constexpr uint32_t kFormatMajor = 1;  ///< format 1.x files: read, never written

/// The 160-byte header of a 1.0 file.
struct CheckpointHeader {
  uint64_t magic;  ///< as in format 2.0's magic
  uint32_t format_major;  ///< as in format 2.0's format_major
  uint32_t format_minor;  ///< as in format 2.0's format_minor
  uint64_t header_bytes;  ///< as in format 2.0's header_bytes
  uint64_t file_bytes;  ///< as in format 2.0's file_bytes
  uint64_t num_envs;  ///< as in format 2.0's num_envs
  uint64_t capacity;  ///< as in format 2.0's capacity
  uint64_t num_fields;  ///< as in format 2.0's num_fields
  uint64_t step_bytes;  ///< as in format 2.0's step_bytes
  uint64_t total_steps;  ///< records in the file
  uint64_t meta_bytes;  ///< as in format 2.0's meta_bytes
  uint64_t name_bytes;  ///< as in format 2.0's name_bytes
  uint64_t schema_bytes;  ///< as in format 2.0's schema_bytes
  uint64_t saved_time_ns;  ///< as in format 2.0's saved_time_ns
  uint64_t source_creation_time_ns;  ///< as in format 2.0's source_creation_time_ns
  uint32_t source_layout_major;  ///< as in format 2.0's source_layout_major
  uint32_t source_layout_minor;  ///< as in format 2.0's source_layout_minor
  uint32_t episode_done;  ///< as in format 2.0's episode_done
  uint32_t episode_terminated;  ///< as in format 2.0's episode_terminated
  uint32_t episode_truncated;  ///< as in format 2.0's episode_truncated
  uint32_t episode_reward;  ///< as in format 2.0's episode_reward
  uint64_t episode_queue_capacity;  ///< as in format 2.0's episode_queue_capacity
  uint32_t meta_crc;  ///< as in format 2.0's meta_crc
  uint32_t header_crc;  ///< as in format 2.0's header_crc
  uint64_t reserved;  ///< zero
};

/// The 80-byte env section header of a 1.0 file; its records [first_step, head) follow.
struct EnvSection {
  uint64_t magic;  ///< as in format 2.0's magic
  uint64_t env;  ///< as in format 2.0's env
  uint64_t first_step;  ///< as in format 2.0's first_step
  uint64_t steps;  ///< records that follow: head - first_step
  uint64_t head;  ///< as in format 2.0's head
  uint64_t claimed;  ///< as in format 2.0's claimed
  uint64_t online_start;  ///< as in format 2.0's online_start
  uint64_t last_push_ns;  ///< as in format 2.0's last_push_ns
  uint32_t data_crc;  ///< as in format 2.0's data_crc
  uint32_t header_crc;  ///< as in format 2.0's header_crc
  uint64_t reserved;  ///< zero
};

static_assert(sizeof(CheckpointHeader) == 160, "the checkpoint header is 160 bytes in format 1.0");
static_assert(sizeof(EnvSection) == 80, "an env section header is 80 bytes in format 1.0");

}  // namespace v1

}  // namespace shmreplay::checkpoint_format
