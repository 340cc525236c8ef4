// lib/checkpoint/packed_records.hpp: compressed fields saved as they are (format 2.3; docs/design/checkpoints.md,
// "Compressed fields"). A save copies each compressed field's records out of the segment's byte ring without
// decoding them (PackedSaveCopy, a StepCopier that copy_records validates with the step seqlock, as any copy); a
// record in the file then holds the field's newest frame number in place of its bytes, and the env's frame block,
// after its records, the frame records themselves with their CRC-32C. A verify checks the block (check_frame_block);
// a load decodes the frames (PackedFrameReader), checked before the codec sees them, and stores the steps through
// the target's storage kinds as a writer would, which codes them again for the target's budget.
//
// Who calls it: save_env.cpp (the copy), verify.cpp (the check), load.cpp (the rebuild). Nothing here is shared
// across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/internal.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/storage/field_storage.hpp"

namespace shmreplay::detail {

/// Where each field sits in a file's record: whole steps (`packed` false), or with each compressed field as its u64
/// newest frame number (format 2.3's packed records).
struct RecordLayout {
  std::vector<uint64_t> offsets;  ///< per schema field
  uint64_t bytes = 0;             ///< of one record
  bool packed = false;
};
RecordLayout record_layout(const Schema& schema, bool packed);

/// One compressed field's frames copied by a save, oldest first: [first, first + size()).
struct FrameLog {
  uint64_t first = 0;
  std::vector<checkpoint_format::PackedFrameBytes> heads;  ///< per frame
  std::vector<uint64_t> at;                                ///< per frame: its bytes' offset in `bytes`
  std::vector<std::byte> bytes;
  uint64_t next() const noexcept { return first + heads.size(); }
};

/// The save's copy of one env's steps with its compressed fields as records (see the top of this file): the other
/// kinds' fields into the records as RecordCopy does, each compressed field's newest frame number into its record
/// word, and the frames the steps need that the log lacks into the field's FrameLog (back to a key frame for the
/// log's first). A record whose descriptor names another frame, lies outside the ring or fails its CRC-32C is a
/// storage fault (check_storage_faults throws for one in a validated copy).
class PackedSaveCopy final : public StepCopier {
 public:
  PackedSaveCopy(const Segment& seg, const StorageSet& storages, const RecordLayout& layout, std::byte* dst);
  void copy(uint64_t env, uint64_t first, uint64_t count) const noexcept override;

  /// Room for `count` more steps' frames (before a copy, which never allocates).
  void reserve(uint64_t count);
  /// The logs' sizes, to roll a spoilt copy back to.
  std::vector<std::size_t> mark() const;
  void rollback(const std::vector<std::size_t>& mark);
  void clear();
  /// Drops the frames older than those the step whose record is `record` needs (its stack back to a key frame).
  void trim_for(const std::byte* record);
  /// Writes the frame block at `at`; returns its bytes and sets `crc` to its CRC-32.
  uint64_t write(OutFile& out, uint64_t at, uint32_t& crc) const;

 private:
  void copy_frames(std::size_t p, uint64_t env, uint64_t first, uint64_t count) const noexcept;

  const Segment& seg_;
  const StorageSet& storages_;
  const RecordLayout& layout_;
  std::byte* dst_;
  std::vector<std::size_t> fields_;  // per compressed field: its schema index
  mutable std::vector<FrameLog> logs_;
};

/// A load's rebuild of one file's env: the frame block read and checked (its CRC-32), then each packed record into
/// the whole step, each frame decoded once, in order. Throws Errc::corrupt naming the file, env, field, step and
/// frame for a record that fails its CRC-32C or does not decode, or a frame number the block lacks.
class PackedFrameReader {
 public:
  PackedFrameReader(const InFile& in, const CheckpointInfo& info, const CheckpointEnv& e);
  /// The whole record of `step` (schema offsets `full`) from its packed record `packed` (layout `layout`).
  void rebuild(uint64_t step, const std::byte* packed, const RecordLayout& layout, const std::vector<uint64_t>& full,
               std::byte* out);

 private:
  struct Field {
    std::size_t index = 0;  // schema index
    uint64_t depth = 1, frame_bytes = 0, outer = 1, inner_bytes = 0;
    Codec codec = Codec::none;
    uint64_t first = 0;
    std::vector<const checkpoint_format::PackedFrameBytes*> heads;
    std::vector<const std::byte*> records;
    uint64_t decoded = UINT64_MAX;        // the newest frame decoded
    std::vector<std::byte> ring;          // the newest depth + 1 decoded frames, frame n at n % (depth + 1)
  };
  const std::byte* frame(Field& f, uint64_t step, uint64_t n);
  [[noreturn]] void fail(const Field& f, uint64_t step, uint64_t n, const std::string& why) const;

  const CheckpointInfo& info_;
  const CheckpointEnv& e_;
  std::vector<std::byte> block_;
  std::vector<Field> fields_;
};

/// verify's check of env `e`'s frame block: its CRC-32, its structure (a header per compressed field, lengths,
/// padding, a key frame first), every record's CRC-32C, and each record's frame numbers inside the block. Throws
/// Errc::corrupt.
void check_frame_block(const InFile& in, const CheckpointInfo& info, const CheckpointEnv& e);

}  // namespace shmreplay::detail
