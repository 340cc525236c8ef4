// shmreplay/internal/layout.hpp: the only file that declares bytes in the shared-memory segment.
//
// One buffer is one file, /dev/shm/<name> (the directory can be changed with SHMREPLAY_SHM_DIR), laid out as:
//
//   offset 0 ---------> +--------------------------------------------------+
//                       | SegmentHeader                          448 bytes |
//                       |   magic "SHMRPLAY", layout major.minor,          |
//                       |   header_bytes, total_bytes, state (ready last), |
//                       |   num_envs, capacity, num_fields, step_bytes,    |
//                       |   creator pid + start ticks, creation time,      |
//                       |   section table: {offset, bytes} x kMaxSections, |
//                       |   max_learners (1.7; at offset 384 since 1.10)   |
//   sections[kFields] > +--------------------------------------------------+
//                       | FieldDesc[num_fields]              192 bytes each |
//                       |   name, dtype, shape, step bytes, data offset    |
//   sections[kEnvs] --> +--------------------------------------------------+ 64-byte aligned
//                       | EnvControl[num_envs]      3 cache lines (192 B)  |
//                       |   line 0, writer:  claimed, head, last push time,|
//                       |     rate-limit reservation (1.4), waiting (1.5)  |
//                       |   line 1, learner: online-queue start, update seq|
//                       |   line 2, leases:  owner (pid, start), since     |
//   sections[kGlobal] > +--------------------------------------------------+ 64-byte aligned
//                       | GlobalControl             9 cache lines (576 B)  |
//                       |   line 0, learner lease: owner, since, takeovers |
//                       |   line 1, learner stats: rows, calls, retries    |
//                       |   line 2, wake-up word and waiter count          |
//                       |   line 3, priorities: max, walk, updates (1.3)   |
//                       |   line 4, rate limiter: which settings slot,     |
//                       |     rewriter, changes (1.4)                      |
//                       |   line 5, rate limiter, learner: samples, wake   |
//                       |   line 6, rate limiter, writers: admissions,     |
//                       |     re-check promise (1.5)                       |
//                       |   lines 7-8, rate limiter settings, two slots    |
//                       |   (lines 0, 1 and the walk and waiting words of  |
//                       |   lines 2, 3, 5 are learner slot 0's)            |
//   Since 1.7, only in a buffer created with max_learners > 1; 0 bytes otherwise:
//   sections[kLearners] +--------------------------------------------------+ 64-byte aligned
//                       | LearnerSlot[max_learners - 1]  3 lines (192 B)   |
//                       |   slots 1.. : lease, counters, walk and waits    |
//                       | online_start[max_learners - 1][num_envs] u64     |
//                       |   each slot's online-queue start per env         |
//   Since 1.8, in every buffer (max_learners entries, slot 0's included):
//   sections[kLearnerStats] +----------------------------------------------+ 64-byte aligned
//                       | LearnerStats[max_learners]     2 lines (128 B)   |
//                       |   the slot's sample ages (rows, sum, 13 buckets) |
//                       |   and its rate-limiter timeouts; informational   |
//   sections[kData] --> +--------------------------------------------------+ 4096-byte aligned
//                       | field 0: [num_envs][capacity][field 0 bytes]     |
//                       | field 1: [num_envs][capacity][field 1 bytes]     | each field 64-byte aligned
//                       | ...                                              |
//                       | a stacked field (1.6): frames [num_envs][frames] |
//                       |   [frame bytes], then [num_envs][capacity] u64   |
//                       |   newest-frame index per step                    |
//                       +--------------------------------------------------+ 64-byte aligned
//   Since 1.2, only in a buffer with episode fields (FieldDesc::role); 0 bytes otherwise:
//   sections[kEpisodes] +--------------------------------------------------+
//                       | EpisodeControl[num_envs]  4 cache lines (256 B)  |
//                       |   lines 0-1, writer: journal[2]: episode start,  |
//                       |     running return, episodes completed, last     |
//                       |     episode; journal[s % 2] is the state for     |
//                       |     head = s                                     |
//                       |   line 2, writer:  record queue tail, dropped    |
//                       |   line 3, learner: record queue head, taker lock,|
//                       |     records delivered and lost (1.9)             |
//   sections[kStepMeta] +--------------------------------------------------+ 64-byte aligned
//                       | step meta: [num_envs][capacity] u64, one per     |
//                       |   ring slot: the first step of the step's        |
//                       |   episode, bit 63 ends it, bit 62 by truncation  |
//   sections[kEpisodeQ] +--------------------------------------------------+ 64-byte aligned
//                       | EpisodeRecordSlot[num_envs][queue cap.], 32 B    |
//                       |   completed-episode records, one SPSC ring/env   |
//                       +--------------------------------------------------+ 64-byte aligned
//   Since 1.3, only in a buffer created with priorities; 0 bytes otherwise:
//   sections[kPriorities] +------------------------------------------------+
//                       | one sum tree per env: [num_envs][2 x leaves] u64 |
//                       |   (1.11: then as many fresh-step trees, only    |
//                       |   with initial priority +infinity; then window  |
//                       |   max trees and window mean trees, only with   |
//                       |   sequence priorities)                          |
//                       |   leaves = bit_ceil(capacity); words [1, leaves) |
//                       |   internal sums (f64 bits), [leaves, 2 leaves)   |
//                       |   one leaf per ring slot: priority^alpha (f32)   |
//                       |   and the low 32 bits of the step it belongs to  |
//                       +--------------------------------------------------+ 64-byte aligned
//   Since 1.11, in every buffer (internal/policy_layout.hpp):
//   sections[kPolicy] --> PolicyControl, PolicyLearner[max_learners], PolicyEnv[num_envs]
//   Since 1.11, only in a buffer created with max_times_sampled; 0 bytes otherwise (internal/caps_layout.hpp):
//   sections[kSampleCaps] +------------------------------------------------+ 64-byte aligned
//                       | CapLearner[max_learners]           64 B each     |
//                       | count words [num_envs][capacity] u64: ring slot  |
//                       |   s % capacity holds (step << 8) | deliveries    |
//                       +--------------------------------------------------+ 64-byte aligned
//   Since 1.11, only in a buffer created with consuming_queue; 0 bytes otherwise (internal/queue_layout.hpp):
//   sections[kQueue]    +--------------------------------------------------+
//                       | QueueControl (tickets; blocked writers)  128 B   |
//                       | QueueLearner[max_learners] (call word)   64 B    |
//                       | QueueEnv[num_envs] (frontier; blocking)  64 B    |
//                       | insertion tickets [num_envs][capacity] u64       |
//                       +--------------------------------------------------+ 64-byte aligned
//   Since 1.11, only in a buffer created with reanalyse_chunk; 0 bytes otherwise (internal/walk_layout.hpp):
//   sections[kWalk]     +--------------------------------------------------+
//                       | WalkControl (pass, newest version)       64 B    |
//                       | WalkWorker[kMaxWalkers] (lease, counts)  64 B    |
//                       | WalkEnv[num_envs] (handed, completed)    64 B    |
//                       | WalkChunk[num_envs][ceil(cap / C) + 1]   32 B    |
//                       +--------------------------------------------------+ 64-byte aligned
//   Since 1.11, only in a buffer created with cold_capacity; 0 bytes otherwise (internal/cold_layout.hpp):
//   sections[kCold]     +--------------------------------------------------+
//                       | ColdControl (capacity, format, directory) 512 B  |
//                       | ColdEnv[num_envs] (cold claimed, head)   64 B    |
//                       +--------------------------------------------------+ 64-byte aligned
//   Since 1.11, in every buffer (internal/journal_layout.hpp):
//   sections[kJournal]  +--------------------------------------------------+
//                       | JournalControl (lease, bound, newest link) 128 B |
//                       | durable heads [num_envs] u64                     |
//                       +--------------------------------------------------+ total_bytes (page multiple)
//
// Rules that every reader relies on:
// - Offsets, never pointers; every offset is from the start of the segment.
// - Identity fields (everything in SegmentHeader except `state`, and the whole field table) are written once by
//   the creator before `state` becomes kStateReady and never again.
// - Counters are std::atomic<uint64_t> (asserted lock-free, so they work across processes) and monotonic:
//   head and claimed count steps since creation; the ring slot of step s is s % capacity.
// - A newer minor version may append sections or grow the header; it never moves what is here. A different
//   major version is refused by open(), and so is an older minor version (1.0 lacks the learner lease, 1.1 the
//   episode bookkeeping): "recreate the segment".
// - What each minor version added, and what older libraries do with a newer segment: CHANGELOG.md, "Segment layout
//   history" (the design of each part: docs/design/).
// The layout-pinning test (tests/layout/pins.cpp) fixes every size and offset below to kLayoutMajor.kLayoutMinor:
// change one and that test tells you to bump the version.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmreplay/sample_age.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay::layout {

inline constexpr uint64_t kMagic = 0x59414c50524d4853ull;  ///< the bytes "SHMRPLAY" read as little-endian u64
/// The layout's major version: open() refuses a segment of another (Errc::version_mismatch).
inline constexpr uint32_t kLayoutMajor = 1;
inline constexpr uint32_t kLayoutMinor = 11;  ///< CHANGELOG.md, "Segment layout history", says what each added

/// SegmentHeader::state while the creator initialises the segment (open() waits, then throws not_ready).
inline constexpr uint64_t kStateInitializing = 0;
inline constexpr uint64_t kStateReady = 0x59444145522e2e2eull;  ///< "...READY"; unlikely to be left by chance

inline constexpr std::size_t kCacheLineBytes = 64;  ///< the unit the control blocks are laid out in
inline constexpr std::size_t kDataAlignBytes = 64;    ///< alignment of each field's storage (vector copies)
inline constexpr std::size_t kPageBytes = 4096;       ///< alignment of the data section and of total_bytes
inline constexpr uint64_t kMaxEnvs = 1ull << 20;     ///< envs of a segment, at most
inline constexpr uint64_t kMaxCapacity = 1ull << 40;  ///< steps per env

static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "segment counters must be lock-free atomics, or they would not work across processes");

/// Indices into SegmentHeader::sections.
enum SectionIndex : uint32_t {
  kSectionFields = 0,  ///< FieldDesc[num_fields]
  kSectionEnvs = 1,    ///< EnvControl[num_envs]
  kSectionData = 2,    ///< every field's storage
  kSectionGlobal = 3,  ///< GlobalControl (since layout 1.1)
  kSectionEpisodes = 4,       ///< EpisodeControl[num_envs] (since 1.2; 0 bytes without episode fields)
  kSectionStepMeta = 5,       ///< std::atomic<uint64_t>[num_envs][capacity] step meta (since 1.2; idem)
  kSectionEpisodeQueues = 6,  ///< EpisodeRecordSlot[num_envs][episode_queue_capacity] (since 1.2; idem)
  kSectionPriorities = 7,     ///< std::atomic<uint64_t>[num_envs][2 * bit_ceil(capacity)] sum trees (since 1.3;
                              ///< 0 bytes without priorities)
  kSectionLearners = 8,       ///< LearnerSlot[max_learners - 1], then std::atomic<uint64_t>[max_learners - 1]
                              ///< [num_envs] online starts (since 1.7; 0 bytes with one learner)
  kSectionLearnerStats = 9,   ///< LearnerStats[max_learners], slot 0's first (since 1.8; every buffer)
  kSectionPolicy = 10,       ///< PolicyControl, PolicyLearner[max_learners], PolicyEnv[num_envs] (since 1.11;
                              ///< every buffer; internal/policy_layout.hpp)
  kSectionSampleCaps = 11,    ///< CapLearner[max_learners], then std::atomic<uint64_t>[num_envs][capacity] sample
                              ///< counts (since 1.11; 0 bytes without a cap; internal/caps_layout.hpp)
  kSectionQueue = 12,         ///< QueueControl, QueueLearner[max_learners], QueueEnv[num_envs], then u64
                              ///< [num_envs][capacity] insertion tickets (since 1.11; 0 bytes without a consuming
                              ///< queue; internal/queue_layout.hpp)
  kSectionWalk = 13,          ///< WalkControl, WalkWorker[kMaxWalkers], WalkEnv[num_envs], then WalkChunk
                              ///< [num_envs][walk_slots_per_env] (since 1.11; 0 bytes without a reanalyse walk;
                              ///< internal/walk_layout.hpp)
  kSectionCold = 14,          ///< ColdControl, then ColdEnv[num_envs]: the cold tier's identity and each env's cold
                              ///< seqlock (since 1.11; 0 bytes without a cold tier; internal/cold_layout.hpp)
  kSectionJournal = 15,       ///< JournalControl, then u64 [num_envs] durable heads (since 1.11; every buffer;
                              ///< internal/journal_layout.hpp)
  kSectionsUsed = 16,  ///< sections this minor version defines; the rest of the table is zero
};
inline constexpr std::size_t kMaxSections = 16;  ///< entries of the section table (1.10: room for six more; 1.11
                                                 ///< took them all)
inline constexpr uint64_t kMaxLearners = 64;    ///< learner slots of a segment, at most (1.7)

/// One entry of the section table: where a section lies in the segment.
struct SectionDesc {
  uint64_t offset;  ///< from the start of the segment
  uint64_t bytes;   ///< its length (0 for a section this segment does not have)
};

/// The segment's first 448 bytes: identity, geometry, the creation record and the section table.
struct SegmentHeader {
  // -- cache line 0: identity and geometry, written once before `state` turns ready --
  uint64_t magic;                ///< kMagic
  uint32_t layout_major;         ///< kLayoutMajor of the creator
  uint32_t layout_minor;         ///< kLayoutMinor of the creator
  uint64_t header_bytes;         ///< sizeof(SegmentHeader) of the creator's version
  uint64_t total_bytes;          ///< the file's size
  std::atomic<uint64_t> state;   ///< kStateReady, stored with release by create(), last; open() loads it acquire
  uint64_t num_envs;             ///< envs (rings)
  uint64_t capacity;             ///< steps per env
  uint64_t num_fields;           ///< entries of the field table
  // -- cache line 1: creation record --
  uint64_t step_bytes;           ///< bytes of one step, all fields together
  uint64_t creator_pid;          ///< the process that created the segment
  uint64_t creator_start_ticks;  ///< the creator's start time, /proc/PID/stat field 22 (clock ticks after boot)
  uint64_t creation_time_ns;     ///< CLOCK_REALTIME at creation
  uint64_t num_sections;         ///< kSectionsUsed of the creator's version
  uint64_t episode_queue_capacity;  ///< records per env's completed-episode queue; 0 without episode fields (1.2)
  uint64_t priority_exponent_bits;  ///< f64 bits of alpha (sampling weight priority^alpha); 0 without priorities
                                    ///< (1.3; alpha = 0 is stored as -0.0, so 0 always means "none")
  uint64_t stack_continuity;  ///< (1.6) a StackContinuity code: how writers tell that a stacked field's stack
                              ///< continues the previous step's (0, compare, also in a buffer without stacks)
  // -- cache lines 2-5: the section table (1.7: nine entries, the header grew by a line; 1.8: ten, in two of the
  //    reserved words; 1.10: sixteen, the header grew by two lines), then the learner count --
  SectionDesc sections[kMaxSections];  ///< indexed by SectionIndex; entries past num_sections are zero
  uint64_t max_learners;  ///< (1.7) learner slots: learner processes that may sample at once, 1 to kMaxLearners
                          ///< (offset 272 in 1.7, 288 in 1.8 and 1.9, 384 since 1.10)
  uint64_t max_times_sampled;  ///< (1.11) the sample cap: deliveries per stored step, 1 to kMaxTimesSampled; 0
                               ///< without (then the sample-caps section is empty)
  uint64_t consuming_queue;  ///< (1.11) 1: a consuming queue (then max_times_sampled is 1 and the queue section
                             ///< is there); 0 without
  uint64_t initial_priority_bits;  ///< (1.11) the priority of a step pushed without one: 0, the running maximum;
                                   ///< else f64 bits of a fixed value (0 stored as -0.0), or of +infinity:
                                   ///< never-sampled steps are drawn first (a second tree per env)
  uint64_t sequence_priority_length;  ///< (1.11) L of sequence priorities: then the priority section holds two
                                      ///< window trees per env after the others (max and mean over [q, q + L)); 0
                                      ///< without
  uint64_t reanalyse_chunk;  ///< (1.11) steps per chunk of the reanalyse walk (then the walk section is there); 0
                             ///< without
  uint64_t reserved[2];   ///< reserved for a later minor version; zero
};

/// SegmentHeader::initial_priority_bits of "never-sampled steps are drawn first" (+infinity's f64 bits).
inline constexpr uint64_t kInitialPriorityFirst = 0x7ff0000000000000ull;

/// One entry of the field table. Unused dims are 0; the name is NUL-padded.
struct FieldDesc {
  uint8_t name[kMaxNameBytes + 1];  ///< the field's name, NUL-padded
  uint32_t dtype;        ///< a DType value
  uint32_t ndim;         ///< 0 for a scalar, at most kMaxDims
  uint64_t dims[kMaxDims];  ///< the shape's dimensions, ndim of them
  uint64_t step_bytes;   ///< bytes of this field in one step
  uint64_t data_offset;  ///< where [num_envs][capacity][step_bytes] starts; kDataAlignBytes-aligned
  uint64_t data_bytes;   ///< num_envs * capacity * step_bytes
  uint32_t role;         ///< a FieldRole code (since 1.2): the field's part in episode bookkeeping; 0 for none
  uint32_t stack;        ///< (1.6) a stacked field's stacked axis + 1 (Field::stack_axis); 0 for a field stored as
                         ///< pushed. Then data_offset holds the frame rings, [num_envs][stack_frames][frame
                         ///< bytes], and data_bytes counts them alone
  uint64_t stack_frames;        ///< (1.6) frames per env ring of a stacked field; 0 otherwise
  uint64_t stack_index_offset;  ///< (1.6) a stacked field's frame-index words, [num_envs][capacity] u64: the
                                ///< newest frame of the step in each ring slot; 0 otherwise
  uint32_t storage_kind;  ///< (1.10) the field's storage kind: its row id in detail/storage/storage_kinds.cpp
                          ///< (kStoragePlainRing, kStorageFrameRing); open refuses a code it does not know
  uint32_t codec;         ///< (1.10) a compressed field's Codec (bits 0-7) and zstd level (bits 8-15, two's
                          ///< complement); 0 for a field stored as pushed. (1.11) Bits 16-31 are the field's
                          ///< flags: kFieldDerived; the rest 0
};

/// FieldDesc::codec's flag (1.11) of a derived field (Field::derived: a value Sampler::write_back rewrites).
inline constexpr uint32_t kFieldDerived = 1u << 16;

/// FieldDesc::storage_kind (1.10): where a field's bytes live. Stored in the segment: never renumber. Codes from
/// kStorageTestKinds up are kinds that only tests register (tests/storage/).
inline constexpr uint32_t kStoragePlainRing = 0;  ///< [num_envs][capacity][step_bytes] at data_offset
inline constexpr uint32_t kStorageFrameRing = 1;  ///< a stacked field's frame rings and frame-index words (1.6)
/// A compressed field's frames (1.10; detail/protocol/packed_frames.hpp): at data_offset, per env a control line,
/// then per env stack_frames frame descriptors, then per env a byte ring of compressed records; a frame-index word
/// per step at stack_index_offset.
inline constexpr uint32_t kStorageCompressed = 2;
inline constexpr uint32_t kStorageTestKinds = 0x7e570000;

/// FieldDesc::role: which field holds the episode-end flags and the reward. Identity data, set at creation
/// (CreateOptions::episodes). Stored in the segment: never renumber.
enum FieldRole : uint32_t {
  kRoleNone = 0,
  kRoleDone = 1,        ///< the step ends its episode (terminated or truncated, not told apart)
  kRoleTerminated = 2,  ///< the step ends its episode by termination
  kRoleTruncated = 3,   ///< the step ends its episode by truncation (a time limit)
  kRoleReward = 4,      ///< the step's reward, summed into completed-episode records
  kRolePolicyVersion = 5,  ///< (1.11) the policy version that produced the step (CreateOptions::policy_version)
  kRoleCount = 6,
};

/// The owner lease word: pid in the high half, the low 32 bits of its start ticks in the low half; 0 when free.
/// One word so that taking a lease is a single compare-and-swap. (Start ticks wrap 32 bits after ~497 days of
/// uptime at 100 Hz, so a reused pid would also need a start time congruent modulo that to be mistaken.)
constexpr uint64_t pack_owner(uint64_t pid, uint64_t start_ticks) noexcept {
  return (pid << 32) | (start_ticks & 0xffffffffull);
}
/// The pid of a lease word (pack_owner()).
constexpr uint64_t owner_pid(uint64_t lease) noexcept { return lease >> 32; }
/// The low 32 bits of the start ticks of a lease word (pack_owner()).
constexpr uint64_t owner_start_low(uint64_t lease) noexcept { return lease & 0xffffffffull; }

/// Bit 63 of EnvControl::claimed: a learner's update lock. While it is set, the env's writer does not claim a
/// new slot (it spins on the word). Bits 56-62 hold the learner slot that holds the lock (1.7), so that a
/// takeover of one slot releases only that slot's locks; the step count is the low 56 bits (kClaimMask: 2^56
/// steps of one env is 2,000 years at a million steps a second).
inline constexpr uint64_t kUpdateLockBit = 1ull << 63;
inline constexpr uint64_t kUpdateOwnerShift = 56;  ///< (1.7) the lock holder's slot, in bits 56-62 of claimed
inline constexpr uint64_t kClaimMask = (1ull << kUpdateOwnerShift) - 1;  ///< (1.7) the step count in claimed
/// claimed's lock bits for learner slot `slot` (1.7): the lock bit and the holder's slot.
constexpr uint64_t update_lock_bits(uint64_t slot) noexcept { return kUpdateLockBit | (slot << kUpdateOwnerShift); }
/// The slot that holds the update lock of a claimed word whose kUpdateLockBit is set (1.7).
constexpr uint64_t update_lock_owner(uint64_t claimed) noexcept {
  return (claimed & ~kUpdateLockBit) >> kUpdateOwnerShift;
}
static_assert(kMaxLearners <= (1ull << (63 - kUpdateOwnerShift)), "every learner slot fits the lock's owner bits");

/// Per-env control block. Each line is written by one role, so that roles never share a written cache line.
struct alignas(kCacheLineBytes) EnvControl {
  // -- cache line 0: written by the env's writer on every push --
  std::atomic<uint64_t> claimed;       ///< steps whose write has begun (low 56 bits, kClaimMask); head <= claimed
                                       ///< <= head + 1; kUpdateLockBit and the holder's slot while a learner
                                       ///< updates a stored step (update_lock_bits)
  std::atomic<uint64_t> head;          ///< steps published since creation; slot of step s is s % capacity
  std::atomic<uint64_t> last_push_ns;  ///< CLOCK_REALTIME of the last publish (0: never); informational
  std::atomic<uint64_t> limiter_reserved;  ///< (1.4) steps of this env counted by the rate limiter's admissions:
                                           ///< max(head, limiter_reserved) is what a waiting writer counts; set by
                                           ///< a writer that waits for the limiter before it claims, back to head
                                           ///< when it withdraws or a new owner takes the lease over
  std::atomic<uint64_t> limiter_waiting_since_ns;  ///< (1.5) CLOCK_REALTIME when the env's writer began to wait
                                                   ///< for the rate limiter (on the first env of its push), 0
                                                   ///< when it does not wait; counted only while the lease
                                                   ///< holder lives, cleared by a new owner
  std::atomic<uint64_t> stacks_intact_from;  ///< the oldest step whose bytes are intact (monotonic): raised (1.6)
                                             ///< by the env's writer before it overwrites frames of a stacked
                                             ///< field (as `claimed` before the slot's), and (1.9) past the step
                                             ///< a dead learner was rewriting, by the repair of its section;
                                             ///< both raise it with a CAS, never lower it; 0 when neither did
  std::atomic<uint64_t> stack_flagless_restarts;  ///< (1.9) under stack_continuity "episodes": steps whose stack
                                                  ///< the rule's spot check found not to continue the previous
                                                  ///< step's with no flag saying so (Writer::stack_flagless_restarts)
  uint64_t pad0[1];  ///< padding to the end of the cache line
  // -- cache line 1: written by the learners --
  std::atomic<uint64_t> online_start;  ///< learner slot 0's: head at its last reset of the online queue (the other
                                       ///< slots' are in the learner section, 1.7)
  std::atomic<uint64_t> update_seq;    ///< odd while a learner (the update lock's holder) rewrites a stored step
                                       ///< of this env, or a checkpoint load the env (seqlock)
  std::atomic<uint64_t> update_step;   ///< (1.9) the step the update lock's holder rewrites in its open section
                                       ///< (stored before update_seq goes odd): the step a repair of a dead
                                       ///< holder's section takes out of the view, with every older one
  std::atomic<uint64_t> steps_lost_to_dead_updates;  ///< (1.9) steps that left the view because a learner died
                                                     ///< rewriting one of them (counted by the repair)
  uint64_t pad1[4];  ///< padding to the end of the cache line
  // -- cache line 2: the owner lease, written when a writer takes, releases or takes over the env --
  std::atomic<uint64_t> lease;              ///< pack_owner(pid, start ticks) of the owner, 0 when free
  std::atomic<uint64_t> owner_start_ticks;  ///< the owner's full start ticks (the lease keeps only 32 bits)
  std::atomic<uint64_t> lease_since_ns;     ///< CLOCK_REALTIME when the lease was taken
  std::atomic<uint64_t> lease_takeovers;    ///< how often a dead owner's lease was taken over
  uint64_t pad2[4];  ///< padding to the end of the cache line
};

/// One copy of the rate limiter's settings (Reverb's RateLimiter: inserts are published steps, samples rows).
struct alignas(kCacheLineBytes) LimiterSlot {
  std::atomic<uint64_t> enabled;             ///< 1 when the buffer has a limiter, 0 when none
  std::atomic<uint64_t> min_size_to_sample;  ///< no sample before this many steps are stored
  std::atomic<uint64_t> samples_per_insert;  ///< f64 bits
  std::atomic<uint64_t> min_diff;            ///< f64 bits: a sample may not take inserts*spi - samples below it
  std::atomic<uint64_t> max_diff;            ///< f64 bits: a waiting writer's insert may not take it above it
  std::atomic<uint64_t> error_offset;        ///< f64 bits, added to inserts*spi - samples: 0 from creation; a
                                             ///< change restarts the error at the middle of the new bounds
  uint64_t reserved[2];  ///< reserved for a later minor version; zero
};

/// Segment-wide control block: learner slot 0's lease and counters, and the word writers wake waiters on.
struct alignas(kCacheLineBytes) GlobalControl {
  // -- cache line 0: learner slot 0's lease, written when a learner attaches to slot 0 or leaves it --
  std::atomic<uint64_t> learner_lease;        ///< pack_owner(pid, start ticks) of the learner, 0 when none
  std::atomic<uint64_t> learner_start_ticks;  ///< the learner's full start ticks
  std::atomic<uint64_t> learner_since_ns;     ///< CLOCK_REALTIME when the lease was taken
  std::atomic<uint64_t> learner_takeovers;    ///< how often a dead learner's lease was taken over
  uint64_t pad0[4];  ///< padding to the end of the cache line
  // -- cache line 1: learner slot 0's counters, written by its learner after each call; informational --
  std::atomic<uint64_t> rows_sampled;   ///< rows (sequences) returned by sample calls and peeks
  std::atomic<uint64_t> sample_calls;   ///< sample calls (and peeks) that returned
  std::atomic<uint64_t> retries;        ///< rows redrawn because a writer overwrote them during the copy
  std::atomic<uint64_t> online_resets;  ///< calls of reset_online_queue
  std::atomic<uint64_t> steps_updated;  ///< steps rewritten by the learner's update
  std::atomic<uint64_t> write_backs_applied;  ///< (1.11) rows Sampler::write_back rewrote
  std::atomic<uint64_t> write_backs_refused;  ///< (1.11) rows it refused: their step was overwritten (or left the
                                              ///< view) since it was sampled
  uint64_t pad1[1];  ///< padding to the end of the cache line
  // -- cache line 2: blocking waits. The low 32 bits of wake_seq are a shared futex word. --
  std::atomic<uint64_t> wake_seq;  ///< bumped by a writer after publishing when waiters != 0
  std::atomic<uint64_t> waiters;   ///< learners sleeping on wake_seq, every slot's
  std::atomic<uint64_t> slot0_waiters;  ///< (1.7) ... of them learner slot 0's (a takeover subtracts a dead
                                        ///< slot's own count from `waiters`)
  uint64_t pad2[5];  ///< padding to the end of the cache line
  // -- cache line 3: priorities (since 1.3; zeros without) --
  std::atomic<uint64_t> max_priority;      ///< f64 bits: the largest priority ever given; new steps enter at it.
                                           ///< Raised by writers and the learner with a CAS, rarely written
  std::atomic<uint64_t> priority_walk;     ///< learner slot 0's tree walk in progress: ((env + 1) << 40) | slot, 0
                                           ///< when none; a learner taking over a dead one's lease redoes it
  std::atomic<uint64_t> priority_updates;  ///< priorities the learners set (update_priorities), every slot's
  std::atomic<uint64_t> priority_updates_dropped;  ///< ... refused because the step had been overwritten
  std::atomic<uint64_t> load_generation;  ///< (1.11) checkpoint loads that rewrote this segment: a handle's
                                          ///< generation (SampleBatch::load_generation) that differs is refused
                                          ///< by write_back (a load may give its step indices other content)
  uint64_t reserved[3];  ///< reserved for a later minor version; zero
  // -- cache line 4: which of the rate limiter's two settings slots (lines 7-8) is in force (since 1.4). A
  //    rewriter fills the other slot and then flips the index, so a rewriter killed at any instruction leaves the
  //    settings in force whole (detail/protocol/rate_limit.hpp) --
  std::atomic<uint64_t> limiter_index;    ///< (generation << 1) | the slot in force; stored with release
  std::atomic<uint64_t> limiter_writer;   ///< pack_owner() of the process rewriting the settings, 0 when none
  std::atomic<uint64_t> limiter_changes;  ///< how often the settings were changed after creation
  uint64_t reserved4[5];  ///< reserved for a later minor version; zero
  // -- cache line 5: rate limiter, written by the learners --
  std::atomic<uint64_t> samples;              ///< rows the limiter admitted, every slot's (sample calls; not
                                              ///< peeks): reserved by CAS before a call draws (1.7)
  std::atomic<uint64_t> last_sample_ns;       ///< CLOCK_REALTIME of the last admitted sample call (0: never)
  std::atomic<uint64_t> writer_wake_seq;      ///< low 32 bits: the futex word waiting writers sleep on
  std::atomic<uint64_t> learner_waiting_rows; ///< slot 0's: rows of its sample call waiting for the limiter; 0
                                              ///< when none
  std::atomic<uint64_t> learner_waiting_since_ns;  ///< slot 0's: CLOCK_REALTIME when that wait began
  std::atomic<uint64_t> learner_limited;      ///< sample calls the limiter held back (waited or refused)
  uint64_t reserved5[2];  ///< reserved for a later minor version; zero
  // -- cache line 6: rate limiter, written by writers that wait for it --
  std::atomic<uint64_t> admit_seq;            ///< one increment per admission by a waiting writer (CAS)
  std::atomic<uint64_t> writer_recheck_by_ns;  ///< (1.5) CLOCK_MONOTONIC by which every writer sleeping on
                                              ///< writer_wake_seq re-checks by itself (the latest promise; it
                                              ///< only grows); the learner wakes them while it lies ahead.
                                              ///< Was writer_waiters, a count, in 1.4
  uint64_t reserved6a;                        ///< was writer_waiting_since_ns in 1.4; not used since 1.5
  std::atomic<uint64_t> writers_limited;      ///< push calls the limiter held back
  std::atomic<uint64_t> writer_timeouts;      ///< ... that gave up at their timeout
  uint64_t reserved6[3];  ///< reserved for a later minor version; zero
  // -- cache lines 7-8: the rate limiter's settings, two slots (limiter_index says which is in force) --
  LimiterSlot limiter_slots[2];  ///< the settings; limiter_index's low bit says which slot is in force
};

// -- Learner slots (since 1.7) ---------------------------------------------------------------------------------
//
// A buffer created with max_learners = N admits N learner processes at once, each holding one slot's lease. Slot 0
// is the words a one-learner buffer has always had (GlobalControl lines 0-1, priority_walk, learner_waiting_rows
// and _since_ns, slot0_waiters; EnvControl::online_start); slots 1 to N - 1 are a LearnerSlot each in the learner
// section, followed by their online starts, online_start[N - 1][num_envs]. Everything a slot holds is written by
// its learner only (and repaired by the one that takes a dead holder's slot over), so learners never share a
// written line except GlobalControl's totals (samples, waiters, priority_updates), which they change with
// read-modify-writes. detail/protocol/learner_slots.hpp reads the words of any slot.

/// One learner slot past slot 0 (1.7): the words of GlobalControl lines 0-1 and the slot's walk and waits.
struct alignas(kCacheLineBytes) LearnerSlot {
  // -- cache line 0: the slot's lease, written when a learner attaches to the slot or leaves it --
  std::atomic<uint64_t> lease;        ///< pack_owner(pid, start ticks) of the slot's learner, 0 when none
  std::atomic<uint64_t> start_ticks;  ///< the learner's full start ticks
  std::atomic<uint64_t> since_ns;     ///< CLOCK_REALTIME when the lease was taken
  std::atomic<uint64_t> takeovers;    ///< how often a dead learner's lease of the slot was taken over
  uint64_t pad0[4];  ///< padding to the end of the cache line
  // -- cache line 1: the slot's counters, written by its learner after each call; informational --
  std::atomic<uint64_t> rows_sampled;   ///< as GlobalControl's, for this slot
  std::atomic<uint64_t> sample_calls;   ///< ...
  std::atomic<uint64_t> retries;        ///< ...
  std::atomic<uint64_t> online_resets;  ///< ...
  std::atomic<uint64_t> steps_updated;  ///< ...
  std::atomic<uint64_t> write_backs_applied;  ///< (1.11) ...
  std::atomic<uint64_t> write_backs_refused;  ///< (1.11) ...
  uint64_t pad1[1];  ///< padding to the end of the cache line
  // -- cache line 2: the slot's tree walk and waits --
  std::atomic<uint64_t> priority_walk;     ///< as GlobalControl::priority_walk, for this slot's walks
  std::atomic<uint64_t> waiting_rows;      ///< as GlobalControl::learner_waiting_rows, for this slot
  std::atomic<uint64_t> waiting_since_ns;  ///< as GlobalControl::learner_waiting_since_ns, for this slot
  std::atomic<uint64_t> waiters;           ///< this slot's learners sleeping on wake_seq (counted in waiters too)
  uint64_t pad2[4];  ///< padding to the end of the cache line
};

// -- Learner statistics (since 1.8) -----------------------------------------------------------------------------
//
// The age of a sampled row is how far behind its env's head the row ended, in steps: head - (start + valid steps),
// with head the env's head in the snapshot the row was drawn from (0 for a row ending at the newest step; a peek's
// rows are 0). Ages are counted in kAgeBuckets buckets: bucket 0 holds age 0, bucket k (1 to 12) the ages in
// (4^(k-2), 4^(k-1)], so the upper bounds (Prometheus's `le`) are 0, 1, 4, 16, ..., 4^11 = 4,194,304 steps; an age
// above the last bound is counted in age_rows only (the +Inf bucket). age_bucket_raw() (the sampler's per-row index),
// age_bucket() and age_bucket_le() are the one definition of the buckets that the sampler, the tests and every reader
// (the Inspector, the exporter's `le` bounds) use; they are in shmreplay/sample_age.hpp.

/// One learner slot's statistics (1.8), two cache lines, written by the slot's learner only (relaxed read-modify-
/// writes once per call; informational): what a reader sums or exports, never what a protocol decides with. Cumulative
/// over the segment's life: a takeover of the slot keeps them, a checkpoint load sets them to zero (they are not in a
/// checkpoint).
struct alignas(kCacheLineBytes) LearnerStats {
  // -- cache lines 0-1, all the slot's learner's (slots never share a line): ages, added after each sample call or
  //    peek, then the limiter's timeouts --
  std::atomic<uint64_t> age_rows;       ///< rows whose age was counted (every row returned); the histogram's count
  std::atomic<uint64_t> age_sum_steps;  ///< the sum of their ages in steps
  std::atomic<uint64_t> age_buckets[kAgeBuckets];  ///< rows per age bucket, not cumulative (age_bucket()); rows
                                                   ///< past the last bound are in age_rows only
  std::atomic<uint64_t> limiter_timeouts;  ///< sample calls the rate limiter held back that gave up at their timeout
                                           ///< (a timeout of 0 refuses at once, and counts)
};

// -- Episodes (since 1.2) ---------------------------------------------------------------------------------------
//
// A buffer created with episode fields (a done flag, or terminated and/or truncated flags, and optionally a
// reward) has three more sections. Everything in them is written by the env's writer before (or, for records,
// right after) its release store of `head`, so a sampler that acquires head sees the episode structure of every
// step below it. docs/design/episodes.md, "Episodes", has the protocol and its crash argument.
//
// Step meta. One word per ring slot, [num_envs][capacity], written with the step it describes (after the
// writer's claim, before its head store), so it is covered by the step seqlock exactly as the step's bytes are:
// a copy that validates (claimed <= p + capacity) also read intact meta for every step >= p. The word holds the
// first step of the episode the step belongs to; starts are non-decreasing in the step index, so "does an episode
// end in [p, q]" is one load (start(q) > p), and where, a binary search. It never overflows: there is exactly one
// word per stored step.

inline constexpr uint64_t kMetaEndsEpisode = 1ull << 63;  ///< the step ends its episode
inline constexpr uint64_t kMetaTruncated = 1ull << 62;    ///< ... by truncation (only with a truncated field)
inline constexpr uint64_t kMetaStartMask = kMetaTruncated - 1;  ///< the episode's first step (steps < 2^62)

/// The journal value of for_head while the slot is being rewritten (never a head: heads stay below 2^62).
inline constexpr uint64_t kJournalWriting = ~0ull;

/// The writer's episode state for one head value, one cache line. A writer publishing step s reads journal[s % 2]
/// (the state for head = s) and writes journal[(s + 1) % 2] (for head = s + 1) before its head store, so whatever
/// instruction it dies at, journal[head % 2] holds the complete state for the published head: that is what a
/// replacement writer continues from (it never trusts a slot whose for_head is not the head).
struct alignas(kCacheLineBytes) EpisodeJournal {
  std::atomic<uint64_t> for_head;            ///< the head this state is for; kJournalWriting while rewritten
  std::atomic<uint64_t> episode_start;       ///< first step of the episode that step for_head belongs to
  std::atomic<uint64_t> running_return;      ///< f64 bits: reward sum of steps [episode_start, for_head)
  std::atomic<uint64_t> episodes_completed;  ///< episodes that ended at a step < for_head, since creation
  std::atomic<uint64_t> last_first_step;     ///< the last completed episode: its first step,
  std::atomic<uint64_t> last_length;         ///<   its length in steps (0: none yet),
  std::atomic<uint64_t> last_return;         ///<   its return (f64 bits),
  std::atomic<uint64_t> last_end;            ///<   how it ended (an EpisodeEnd code)
};

/// Per-env episode block. The record queue is a single-producer (the env's writer) ring of EpisodeRecordSlot with
/// 64-bit monotonic indices, whose consumers (the learner) take records by CAS: the slot of record i is
/// i % episode_queue_capacity. Producer: if queue_tail - queue_head (acquire) < capacity, store the slot's words,
/// then queue_tail + 1 (release); else records_dropped + 1. Consumer (1.9): takes the env's taker lock
/// (queue_taker, a lease word; a dead holder's records in hand are counted lost), queue_head h, queue_tail t
/// (acquire), reads slots [h, t), CASes queue_head from h to t (release), and once the records are in its caller's
/// hands stores records_delivered and frees the lock (detail/protocol/episode_queue.hpp). A producer killed between
/// its slot stores and its tail store leaves the record
/// unpublished, and its replacement re-pushes it (journal.episodes_completed > queue_tail + records_dropped).
///
/// Why not boost::lockfree::spsc_queue (fixed capacity, pointer-free, and lock-free, so usable in shared memory):
/// its capacity is a compile-time constant (one size for every segment, where ours is chosen at creation and
/// recorded in the header); its members are private, so their offsets cannot be pinned by test_layout, and two
/// programs built against different Boost versions could disagree on them without any check failing (we
/// support mixed builds of one layout version); its indices wrap modulo the capacity, so "did this record get
/// pushed?" cannot be answered from them after a crash, which the exactly-once recovery above needs; and the
/// read-only Inspector needs the queue depth from a PROT_READ mapping, which is two plain loads here. The ring
/// above is the same algorithm (a release store of the producer index after the element, an acquire load by
/// the consumer), written with std::atomic<uint64_t> words only.
struct alignas(kCacheLineBytes) EpisodeControl {
  // -- cache lines 0-1: the writer's journal, written on every push --
  EpisodeJournal journal[2];  ///< journal[h % 2] holds the state for head h (see EpisodeJournal)
  // -- cache line 2: the queue's producer side, written by the env's writer when an episode ends --
  std::atomic<uint64_t> queue_tail;       ///< records pushed since creation
  std::atomic<uint64_t> records_dropped;  ///< records dropped because the queue was full (the writer never waits)
  uint64_t pad2[6];  ///< padding to the end of the cache line
  // -- cache line 3: the queue's consumer side, written by the learner --
  std::atomic<uint64_t> queue_head;  ///< records popped since creation; queue_head <= queue_tail
  std::atomic<uint64_t> queue_taker;        ///< (1.9) pack_owner of the process holding taken records in hand (its
                                            ///< pop_episodes has not handed them to its caller yet), 0 when none
  std::atomic<uint64_t> records_delivered;  ///< (1.9) records handed to a caller of pop_episodes
  std::atomic<uint64_t> records_lost;       ///< (1.9) records taken by a learner that died holding them (or whose
                                            ///< hand-over threw); queue_head = delivered + lost with no live taker
  uint64_t pad3[4];  ///< padding to the end of the cache line
};

/// One completed-episode record in a queue (the env is the queue's).
struct EpisodeRecordSlot {
  std::atomic<uint64_t> first_step;      ///< the episode's first step (a global step index)
  std::atomic<uint64_t> length;          ///< steps; the episode ended at step first_step + length - 1
  std::atomic<uint64_t> episode_return;  ///< f64 bits: the sum of its rewards (0 without a reward field)
  std::atomic<uint64_t> end;             ///< an EpisodeEnd code
};

/// A compressed field's frame descriptor (1.10; kStorageCompressed): where frame n of an env's byte ring lies,
/// descriptor n % stack_frames. Written by the env's writer before the step's frame-index word, covered by the step
/// seqlock like the step's other bytes (detail/protocol/packed_frames.hpp).
struct PackedFrameDesc {
  std::atomic<uint64_t> pos;   ///< the record's first byte, counted from the env's ring start since creation
                               ///< (monotonic; the byte at pos lies at ring offset pos % ring_bytes)
  std::atomic<uint64_t> meta;  ///< bits 0-31: the record's length; bit 32: stored as pushed (kPackedRaw); bit 33:
                               ///< coded alone (kPackedKey), else against the frame before; bits 34-63: zero
  std::atomic<uint64_t> crc;   ///< CRC-32C of the record's bytes (low 32 bits)
  std::atomic<uint64_t> frame; ///< the frame number this descriptor holds (a reader checks it is the one it wants)
};
inline constexpr uint64_t kPackedRaw = 1ull << 32;  ///< PackedFrameDesc::meta: the record is the frame as pushed
inline constexpr uint64_t kPackedKey = 1ull << 33;  ///< PackedFrameDesc::meta: the record decodes alone

/// A compressed field's counters of one env (1.10), one cache line per env, written by the env's writer only
/// (relaxed: informational, read by the Inspector).
struct alignas(kCacheLineBytes) PackedEnvControl {
  std::atomic<uint64_t> frames;        ///< frames stored since creation
  std::atomic<uint64_t> record_bytes;  ///< bytes of their records (compressed, or as pushed)
  std::atomic<uint64_t> raw_frames;    ///< frames stored as pushed because the codec did not shrink them
  std::atomic<uint64_t> budget_lost;   ///< steps that left the view because their frames' bytes were overwritten
                                       ///< before their ring slot was reclaimed (the byte budget, not the capacity)
  uint64_t pad[4];
};

inline constexpr uint64_t kDefaultEpisodeQueueCapacity = 128;  ///< records per env, when not given
inline constexpr uint64_t kMaxEpisodeQueueCapacity = 1ull << 24;  ///< records per env, at most

static_assert(sizeof(SegmentHeader) == 448, "SegmentHeader is 7 cache lines; changing it changes the layout");
static_assert(sizeof(LearnerSlot) == 3 * kCacheLineBytes && offsetof(LearnerSlot, rows_sampled) == kCacheLineBytes &&
                  offsetof(LearnerSlot, priority_walk) == 2 * kCacheLineBytes,
              "a learner slot is 3 cache lines: its lease, its counters, its walk and waits");
static_assert(offsetof(SegmentHeader, sections) % kCacheLineBytes == 0, "the section table starts a cache line");
static_assert(offsetof(SegmentHeader, max_learners) == 384 && offsetof(SegmentHeader, max_times_sampled) == 392 &&
                  offsetof(SegmentHeader, consuming_queue) == 400 &&
                  offsetof(SegmentHeader, initial_priority_bits) == 408 &&
                  offsetof(SegmentHeader, sequence_priority_length) == 416 &&
                  offsetof(SegmentHeader, reanalyse_chunk) == 424 &&
                  sizeof(SegmentHeader::reserved) == 2 * sizeof(uint64_t),
              "1.10: a section table of 16 entries; the header grew to 7 cache lines; 1.11 took five reserved words");
static_assert(sizeof(LearnerStats) == 2 * kCacheLineBytes && alignof(LearnerStats) == kCacheLineBytes &&
                  offsetof(LearnerStats, limiter_timeouts) == 2 * kCacheLineBytes - sizeof(uint64_t),
              "a slot's statistics are 2 cache lines of its own: ages, buckets, then the limiter's timeouts");
static_assert(sizeof(FieldDesc) == 192, "FieldDesc is 3 cache lines; changing it changes the layout");
static_assert(sizeof(EnvControl) == 3 * kCacheLineBytes, "EnvControl is 3 cache lines, one per writing role");
static_assert(offsetof(EnvControl, online_start) == kCacheLineBytes,
              "the learner's online_start must not share a cache line with the writer's counters");
static_assert(offsetof(EnvControl, lease) == 2 * kCacheLineBytes,
              "the lease must not share a cache line with the hot counters");
static_assert(sizeof(LimiterSlot) == kCacheLineBytes, "a settings slot is one cache line");
static_assert(sizeof(GlobalControl) == 9 * kCacheLineBytes, "GlobalControl is 9 cache lines");
static_assert(offsetof(GlobalControl, rows_sampled) == kCacheLineBytes &&
                  offsetof(GlobalControl, wake_seq) == 2 * kCacheLineBytes,
              "the learner's counters and the wake word each own a cache line");
static_assert(sizeof(EpisodeJournal) == kCacheLineBytes, "a journal slot is one cache line");
static_assert(sizeof(EpisodeControl) == 4 * kCacheLineBytes && alignof(EpisodeControl) == kCacheLineBytes,
              "EpisodeControl is 4 cache lines: two journal slots, the queue producer, the queue consumer");
static_assert(offsetof(EpisodeControl, queue_tail) == 2 * kCacheLineBytes &&
                  offsetof(EpisodeControl, queue_head) == 3 * kCacheLineBytes,
              "the queue's producer and consumer indices must not share a cache line with each other or the journal");
static_assert(sizeof(EpisodeRecordSlot) == 32, "a record slot is four words");
static_assert(sizeof(PackedFrameDesc) == 32 && sizeof(PackedEnvControl) == kCacheLineBytes,
              "a frame descriptor is four words; a compressed field's env counters one cache line");
static_assert(offsetof(GlobalControl, max_priority) == 3 * kCacheLineBytes, "the priority line is line 3");
static_assert(offsetof(GlobalControl, limiter_index) == 4 * kCacheLineBytes &&
                  offsetof(GlobalControl, samples) == 5 * kCacheLineBytes &&
                  offsetof(GlobalControl, admit_seq) == 6 * kCacheLineBytes &&
                  offsetof(GlobalControl, limiter_slots) == 7 * kCacheLineBytes,
              "the limiter's index, its learner side, its writer side and each settings slot own a cache line");
static_assert(sizeof(GlobalControl) <= kPageBytes, "GlobalControl fits the page before the data section");
static_assert(sizeof(std::atomic<uint64_t>) == 8 && alignof(std::atomic<uint64_t>) == 8,
              "step meta words are plain 8-byte atomics");

}  // namespace shmreplay::layout
