// detail/protocol/packed_frames.hpp: compressed fields (layout 1.10, kStorageCompressed), both halves in one place:
// the writer's store of a step's new frames as compressed records in the env's byte ring, and the readers' rebuild
// of a step's field (a stack of K frames, or one frame for an unstacked field) from them. docs/design/compression.md
// has the layout and the argument; it is the frame ring's protocol (stacks.hpp) with variable-sized frames.
//
//   word                           written by                               read by
//   byte ring (records)            the env's writer (store_packed)          readers (read_frame)
//   frame descriptors              the env's writer, before the step's      readers, for each frame they decode;
//   (pos, meta, crc, frame)        index word                               the writer's resume and loss scan
//   frame-index words              the env's writer, with the step          readers, for each step they copy
//   EnvControl::stacks_intact_from the env's writer, before it overwrites   the views' lower bound and the
//                                  records or descriptors (store_packed)    validation (seqlock.hpp)
//   PackedEnvControl               the env's writer (relaxed counters)      the Inspector
//
// The validation is the frame ring's: a step's field is frames [index - K + 1, index]; frames only grow with the
// step, so when the oldest step of a copy still has its frames, every later step has them too. Before it writes a
// record over older bytes (the byte budget) or a descriptor over an older one (the descriptor ring), the writer
// raises stacks_intact_from past every step whose frames those were, then a release fence, then the stores. A reader
// that finds stacks_intact_from <= its first step after its copy (acquire fence, seqlock.hpp end_copies) read intact
// records. A reader may decode a record while it is being overwritten: decoding is bounded by the frame's size and
// checked (the descriptor's frame number, the length, the CRC-32, an exact decoded size), so torn bytes give a
// fault, never a crash; a fault in a copy that validates is a corrupt segment (the caller's error, never a batch).
//
// Who calls what: the compressed kind's face on the storage seam (detail/storage/packed_ring.cpp): the writer side
// from its KindWriter (a Writer's push paths, a checkpoint load), for an env whose lease the caller holds; the
// reader side from its copy_steps and gather, on any mapping, read-only too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "detail/os/codec.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// Every kPackedKeyEvery-th frame of an env (frame numbers divisible by it) is coded alone (a key frame); the others
/// against the frame before them, which the codec finds mostly unchanged. A reader decodes a frame after the ones
/// it is coded against, back to the key frame before it: at most kPackedKeyEvery - 1 more, and none in a sequence,
/// whose frames it decodes in order.
inline constexpr uint64_t kPackedKeyEvery = 4;

// ---------------------------------------------------------------------------------------------------------------
// Reader side.

/// Why a step's frames could not be rebuilt; none when they were.
enum class FrameFault : uint8_t {
  none,
  stale,     ///< the descriptor holds another frame, or the record lies outside the ring
  checksum,  ///< the record's bytes do not match its CRC-32
  decode,    ///< the codec could not decode it to exactly the frame's size
};
/// "the descriptor names another frame", ...: for messages.
const char* frame_fault_text(FrameFault fault) noexcept;

/// Where a reader's copy of compressed field `p` failed first: the step and frame, and why.
struct PackedFault {
  FrameFault fault = FrameFault::none;
  uint64_t step = 0;
  uint64_t frame = 0;
};

/// The fields of steps [first, first + count) of env `env` of compressed field `p` into `out`, one step every
/// `stride` bytes, each frame decoded once (a frame shared by consecutive steps' stacks is copied from the step
/// before). `before`: step first - 1's bytes when the caller has rebuilt them already (another row of the same
/// call), else nullptr. Returns the first fault (the other steps are still written; a faulted step's bytes are
/// unspecified). Reader side: its bytes are valid when the caller's validation of the copy passes; a fault in a copy
/// that validates means the segment's bytes are corrupt.
PackedFault copy_packed_steps(const Segment& seg, std::size_t p, uint64_t env, uint64_t first, uint64_t count,
                              std::byte* out, uint64_t stride, const std::byte* before = nullptr) noexcept;

// ---------------------------------------------------------------------------------------------------------------
// Writer side.

/// The writer's place in one compressed field of one env (held by the writer, not the segment; a new lease holder
/// resumes it from the segment with resume_packed).
struct PackedCursor {
  uint64_t next_frame = 0;    ///< the number of the next frame: the newest stored + 1
  uint64_t byte_end = 0;      ///< where the newest record ends (monotonic position in the env's ring)
  uint64_t oldest_frame = 0;  ///< the oldest frame whose descriptor and record are intact (a lower bound)
  uint64_t intact_from = 0;   ///< the oldest step whose frames are intact (a lower bound)
  bool raw_valid = false;     ///< the writer's copy of the newest frames (PackedWriterEnv) holds this env's
};

/// Where the writer of env `env` goes on in compressed field `p` after taking the env's lease at `head`: after the
/// newest published step's frames and record (its raw copy empty: make_packed_env fills it).
PackedCursor resume_packed(const Segment& seg, std::size_t p, uint64_t env, uint64_t head) noexcept;

/// One writer's state of every compressed field for one env: its cursors and the raw newest K frames of each field
/// (for the continuity compare: the segment holds them compressed).
struct PackedWriterEnv {
  std::vector<PackedCursor> cursors;        ///< per compressed field
  std::vector<std::vector<std::byte>> raw;  ///< per compressed field: K frames, frame n at slot n % K
};

/// One new record of a step: where it goes and what it holds (the bytes in PackedScratch::encoded).
struct PackedRecord {
  uint64_t pos = 0;  ///< its first byte's position in the env's ring (monotonic)
  uint64_t len = 0;
  bool raw = false;  ///< the frame as pushed
  bool key = false;  ///< coded alone (kPackedKey), else against the frame before
  uint32_t crc = 0;
};

/// One writer's codec state and scratch for every compressed field of a segment, made once (store_packed never
/// allocates). Throws std::bad_alloc.
struct PackedScratch {
  explicit PackedScratch(const Segment& seg);
  std::vector<std::unique_ptr<FrameEncoder>> encoders;  ///< per field
  std::vector<std::vector<std::byte>> encoded;          ///< per field: K records of at most a frame each
  std::vector<std::vector<std::byte>> frame;            ///< per field: two frames, gathered from an interleaved
                                                        ///< stack (frame n at n % 2: the next one's dictionary)
  std::vector<std::vector<PackedRecord>> records;       ///< per field: K
  std::vector<uint64_t> first_new;                      ///< per field: the first frame of the step's stack that is new
  std::vector<uint64_t> lost;                           ///< per field: steps the step's records made leave the view
};

/// Makes a writer's state for env `env` at `head`: resume_packed for each field, and its raw copy of the newest
/// published step's frames decoded (left empty where they do not decode), so that a new Writer's first step may
/// continue the stack. May allocate.
PackedWriterEnv make_packed_env(const Segment& seg, uint64_t env, uint64_t head);

/// Stores the compressed fields of step `step` of env `env`, which the caller claimed and publishes after:
/// `fields[i]` is the pushed bytes of compressed field i (seg.packed() order). `may_continue` and `compare` as for
/// store_stacks (stacks.hpp); a field whose raw copy is not yet whole stores all K frames. For each field: its
/// continuity with the previous step's stack (against the raw copy), its new frames encoded (a frame the codec does
/// not shrink is stored as pushed), the records placed after the newest, and the oldest step whose frames survive
/// them; then stacks_intact_from raised, a release fence, and the records, descriptors and the step's index word.
/// Precondition: the caller holds the env's lease; `step` is the env's head. Returns whether a field's stack that
/// may continue was compared and found not to. Never allocates.
bool store_packed(Segment& seg, uint64_t env, uint64_t step, const std::byte* const* fields, PackedWriterEnv& w,
                  PackedScratch& scratch, bool may_continue, bool compare) noexcept;

}  // namespace shmreplay::detail
