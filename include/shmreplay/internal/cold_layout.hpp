// shmreplay/internal/cold_layout.hpp: the cold-tier section (layout 1.11, section 14) and the cold files' header.
// docs/design/cold_tier.md has the protocol (the writer's seal, the readers' validation) and the disk layout;
// lib/detail/storage/cold_files.{hpp,cpp} makes, opens and removes the files; lib/detail/protocol/cold_seal.hpp is
// both sides of the cold seqlock.
//
// Present only in a buffer created with CreateOptions::cold_capacity (its section table entry has bytes then; no
// header word says so: the header's last two reserved words stay free). In the segment:
//
//   sections[kCold] --> +--------------------------------------------------+ 64-byte aligned
//                       | ColdControl                       512 bytes      |
//                       |   cold capacity, file format, record bytes,     |
//                       |   the directory (NUL-padded)                    |
//                       | ColdEnv[num_envs]                 64 bytes each  |
//                       |   cold claimed, cold head (the cold seqlock)    |
//                       +--------------------------------------------------+
//
// On disk, per env e, the file <cold_dir>/<segment name>.cold/env-<e>:
//
//   offset 0 ---------> ColdFileHeader (kColdRecordsOffset bytes, zero-padded)
//   offset 4096 ------> per field f in schema order, its column: cold_capacity values of the field's bytes, cold
//                       step t's at index t % cold_capacity (column-major, as the ring's field arrays;
//                       record_bytes = the step's bytes, cold_capacity x record_bytes in all)
//
// Segment-resident: fixed-width words only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmreplay/internal/layout.hpp"

namespace shmreplay::layout {

/// The version of the cold files' format (ColdControl::format_version, ColdFileHeader::format_version); a library
/// refuses a segment whose cold files are of another.
inline constexpr uint64_t kColdFormatVersion = 1;
/// The most steps per env on disk.
inline constexpr uint64_t kMaxColdCapacity = uint64_t{1} << 40;
/// Bytes of ColdControl::dir, its NUL included: a cold directory's path is at most kColdDirBytes - 1 bytes.
inline constexpr std::size_t kColdDirBytes = 448;
/// Where the records of a cold file start (its header page before).
inline constexpr uint64_t kColdRecordsOffset = 4096;
/// ColdFileHeader::magic: the bytes "SHMRCOLD" read as little-endian u64.
inline constexpr uint64_t kColdMagic = 0x444c4f43524d4853ull;

/// The cold tier's identity, written once by create before the segment has a name; 512 bytes.
struct alignas(kCacheLineBytes) ColdControl {
  uint64_t cold_capacity;   ///< steps per env on disk, 1 to kMaxColdCapacity
  uint64_t format_version;  ///< kColdFormatVersion
  uint64_t record_bytes;    ///< bytes of one record: the step's bytes (every field plain)
  uint64_t dir_bytes;       ///< the directory's length, below kColdDirBytes
  uint64_t reserved[4];     ///< zero
  uint8_t dir[kColdDirBytes];  ///< CreateOptions::cold_dir, NUL-padded
};

/// One env's cold seqlock, one cache line, written by the env's writer only (the seal: Writer::claim, before the
/// claim that reclaims the hot slot of the step it seals).
struct alignas(kCacheLineBytes) ColdEnv {
  std::atomic<uint64_t> claimed;  ///< cold steps whose copy into their record has begun: t + 1 while step t is
                                  ///< copied; head <= claimed <= head + 1
  std::atomic<uint64_t> head;     ///< cold steps sealed since creation: steps below it were copied whole into their
                                  ///< records (those of [claimed - cold_capacity, head) are still there)
  uint64_t pad[6];
};

/// The first bytes of a cold file (zero-padded to kColdRecordsOffset): what open checks before it maps the records.
struct ColdFileHeader {
  uint64_t magic;             ///< kColdMagic
  uint64_t format_version;    ///< kColdFormatVersion
  uint64_t env;               ///< the env whose steps it holds
  uint64_t cold_capacity;     ///< records
  uint64_t record_bytes;      ///< bytes per record
  uint64_t records_offset;    ///< kColdRecordsOffset
  uint64_t creation_time_ns;  ///< the segment's SegmentHeader::creation_time_ns: a file of another segment of the
                              ///< same name (a stale directory) is refused
  uint64_t creator_pid;       ///< the segment's SegmentHeader::creator_pid (the same purpose)
};

/// Where env e's ColdEnv lies, from the section's start.
constexpr uint64_t cold_envs_at() noexcept { return sizeof(ColdControl); }
/// The section's bytes for `num_envs` envs.
constexpr uint64_t cold_section_bytes(uint64_t num_envs) noexcept {
  return sizeof(ColdControl) + num_envs * sizeof(ColdEnv);
}

static_assert(sizeof(ColdControl) == 512 && offsetof(ColdControl, dir) == 64,
              "ColdControl is a line of words and the directory's 448 bytes");
static_assert(sizeof(ColdEnv) == kCacheLineBytes && offsetof(ColdEnv, head) == 8,
              "an env's cold seqlock is one cache line of its own");
static_assert(sizeof(ColdFileHeader) == 64 && sizeof(ColdFileHeader) <= kColdRecordsOffset,
              "a cold file's header is one line, in the page before its records");
static_assert(kSectionCold == 14 && kSectionCold < kSectionsUsed, "the cold section is section 14 of layout 1.11");

}  // namespace shmreplay::layout
