// detail/storage/field_storage.hpp: the seam between where a field's bytes live (its storage kind) and the roles
// that move them. A storage kind is one class derived from FieldStorage, in its own file, plus one row of the kind
// table (storage_kinds.cpp): the plain ring (plain_ring.hpp: a step's bytes in ring slot step % capacity, the
// default) and the frame ring (frame_ring.hpp: a stacked field's stacks as frames, layout 1.6).
//
//   side        what it does                                        who calls it
//   reader      copy_steps: steps of one env into records           copy_records (Inspector::read_steps behind
//                                                                   `dump`, save_checkpoint), through StorageSet
//               gather: a chunk of sampled rows into a batch        the Sampler (sample, sample_mixed, peek)
//   direct      direct_bytes: where a step's bytes sit, for a kind  StepSlot::field (a reserved step is filled in
//               that keeps each step's bytes apart (plain ring)     place) and Sampler::try_update
//   writer      KindWriter::store: a claimed step's bytes in        the Writer's push and commit paths, and a
//                                                                   checkpoint load (KindWriterMode::load)
//
// A reader's bytes are valid only when the step seqlock's validation of the copy passes
// (detail/protocol/seqlock.hpp: copy_records, BatchedReader); the kinds never validate and never block. A kind may
// lose old steps before their slots are reclaimed (the frame ring does, when its frames are overwritten): it raises
// EnvControl::stacks_intact_from, the views' lower bound, before it overwrites them, and the validation reads it.
//
// Thread safety: a FieldStorage is immutable after it is made and may be shared by threads; it holds no pointer
// into a mapping (every call takes the Segment), so it survives a moved Buffer. A KindWriter belongs to one Writer
// (or one load) and to the envs it leases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "detail/protocol/seqlock.hpp"
#include "detail/storage/gather.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// A reader's fault in a kind whose bytes it checks (the compressed kind: a record that fails its checksum or does
/// not decode): which field, env, step and frame, and why. A fault in a copy that the step seqlock then rejects is a
/// torn read (copy again); in a copy it accepts, the segment's bytes are corrupt, and the caller throws
/// Error(corrupt) instead of returning them (check_storage_fault).
struct StorageFault {
  std::size_t field = 0;
  uint64_t env = 0;
  uint64_t step = 0;
  uint64_t frame = 0;
  const char* why = nullptr;  ///< nullptr: no fault
};

/// This thread's faults since the last clear_storage_faults(): the first kMax of them, and whether there were more.
struct StorageFaults {
  static constexpr std::size_t kMax = 16;
  StorageFault list[kMax];
  std::size_t size = 0;
  bool overflow = false;  ///< more faults than the list holds (the caller copies every row again)
  StorageFault newest;    ///< of every fault, the one with the largest step (a record copy's check)
};
inline StorageFaults& thread_storage_faults() noexcept {
  thread_local StorageFaults faults;
  return faults;
}
/// Notes a fault for this thread's caller (a reader of a kind that checks its bytes).
inline void note_storage_fault(const StorageFault& f) noexcept {
  StorageFaults& t = thread_storage_faults();
  if (t.newest.why == nullptr || f.step > t.newest.step) t.newest = f;
  if (t.size < StorageFaults::kMax) {
    t.list[t.size++] = f;
  } else {
    t.overflow = true;
  }
}
/// Forgets this thread's faults: before a copy that will be validated.
inline void clear_storage_faults() noexcept {
  StorageFaults& t = thread_storage_faults();
  t.size = 0;
  t.overflow = false;
  t.newest = {};
}
/// After a copy that validated with steps from `intact_from` on intact: throws Error(corrupt) when a noted fault
/// lies in one of those steps (a fault in an older step is a torn read of a step the copy drops); forgets the faults.
void check_storage_faults(const Segment& seg, uint64_t intact_from);
/// [[noreturn]] Error(corrupt): a validated copy of segment `name` met fault `f` (schema field names from `schema`).
[[noreturn]] void throw_storage_fault(const std::string& name, const Schema& schema, const StorageFault& f);

/// How a KindWriter goes on in each env: as a Writer that took the env's lease (after the newest published step,
/// from the segment's words), or as a checkpoint load that rewrites the env from a first step (restart()).
enum class KindWriterMode { writer, load };

/// One storage kind's writer side, for the envs one Writer leases (or one load rewrites); indices `local` are
/// positions in the envs it was made for.
class KindWriter {
 public:
  virtual ~KindWriter() = default;
  /// Stores step `step` of env `env` (the `local`-th env), which the caller claimed (claim_step) and publishes
  /// after: `sources[i]` holds the step's bytes of the kind's field i (FieldStorage::fields() order).
  /// `ends_episode`: the step's own flags end its episode. Precondition: the caller holds the env's lease (or
  /// loads an unnamed segment). Never throws, never allocates.
  virtual void store(std::size_t local, uint64_t env, uint64_t step, const std::byte* const* sources,
                     bool ends_episode) noexcept = 0;
  /// (KindWriterMode::load) The env's next stored step is `first_step`, with nothing stored before it.
  virtual void restart(std::size_t /*local*/, uint64_t /*first_step*/) noexcept {}
  /// Stacks found by the spot checks of StackContinuity::episodes not to continue (Writer::stack_flagless_restarts);
  /// 0 for a kind without such checks.
  virtual uint64_t flagless_restarts() const noexcept { return 0; }
};

/// One storage kind's fields of one segment (see the top of this file). Made by StorageSet from the kind table.
class FieldStorage {
 public:
  explicit FieldStorage(std::vector<std::size_t> fields) : fields_(std::move(fields)) {}
  virtual ~FieldStorage() = default;
  FieldStorage(const FieldStorage&) = delete;
  FieldStorage& operator=(const FieldStorage&) = delete;

  /// The schema indices of the fields of this kind, in schema order.
  const std::vector<std::size_t>& fields() const noexcept { return fields_; }
  /// The kind's name (its row of the kind table).
  virtual const char* kind() const noexcept = 0;

  /// Reader side: steps [first, first + count) of env `env`, the kind's field i of each into outs[i], one step
  /// every `stride` bytes. Preconditions: count >= 1; first + count <= a head of the env loaded with acquire.
  virtual void copy_steps(const Segment& seg, uint64_t env, uint64_t first, uint64_t count, std::byte* const* outs,
                          uint64_t stride) const noexcept = 0;
  /// Reader side: the Sampler's chunk of `count` rows (gather.hpp), the kind's field i into outs[i]
  /// ([rows][length][bytes]): each row's steps, then zeros up to `length` steps. `all_whole`: every row is a
  /// whole_run.
  virtual void gather(const Segment& seg, std::byte* const* outs, std::size_t length, const GatherRow* rows,
                      std::size_t count, bool all_whole) const noexcept = 0;

  /// The bytes steps [lo, hi) of env `env` occupy in the kind's storage (its fields together): what `info` and the
  /// metrics show as stored_bytes. From words a writer may be changing: exact when the env is quiet. Never blocks.
  virtual uint64_t stored_bytes(const Segment& seg, uint64_t env, uint64_t lo, uint64_t hi) const noexcept = 0;

  /// Where the bytes of the kind's field i of step `step` of env `env` sit in the segment, for a kind that keeps
  /// each step's bytes apart; nullptr for one that does not (then a reserved step's field is staged and stored at
  /// commit, and an in-place update of it is refused with why_not_direct()).
  virtual std::byte* direct_bytes(Segment& /*seg*/, std::size_t /*i*/, uint64_t /*env*/,
                                  uint64_t /*step*/) const noexcept {
    return nullptr;
  }
  /// Whether direct_bytes gives the bytes (true for the plain ring only today).
  virtual bool direct() const noexcept { return false; }
  /// Why the kind's field i cannot be rewritten in place (for a kind whose direct_bytes is nullptr).
  virtual std::string why_not_direct(const Schema& /*schema*/, std::size_t /*i*/) const { return {}; }

  /// The writer side for `envs` (Writer: the envs it leases; load: every env). May allocate; throws bad_alloc.
  virtual std::unique_ptr<KindWriter> writer(Segment& seg, std::span<const uint64_t> envs,
                                             KindWriterMode mode) const = 0;

 private:
  std::vector<std::size_t> fields_;
};

/// Every field's storage of one segment: one FieldStorage per kind the schema uses, chosen by the kind table
/// (storage_kinds.cpp; the first row that claims a field takes it), and the record copies over all of them.
class StorageSet {
 public:
  explicit StorageSet(const Segment& seg);

  /// The kinds the schema uses, in the table's order.
  const std::vector<std::unique_ptr<FieldStorage>>& kinds() const noexcept { return kinds_; }
  /// The code of kinds()[k] (layout::kStoragePlainRing, ...: its row of the kind table).
  uint32_t kind_id(std::size_t k) const noexcept { return kind_ids_[k]; }
  /// The kind that stores field `field`, and the field's index among that kind's fields.
  const FieldStorage& kind_of(std::size_t field) const noexcept { return *kinds_[kind_index_[field]]; }
  std::size_t index_in_kind(std::size_t field) const noexcept { return index_in_kind_[field]; }
  /// Whether every field is of the kind of field 0's and that kind is the plain ring (the Sampler's common case).
  bool all_plain() const noexcept { return all_plain_; }

  /// Steps [first, first + count) of env `env` as records: field f of step first + k at
  /// dst + k * record_bytes + record_offsets[f]. Reader side (FieldStorage::copy_steps); no allocation.
  void copy_records(const Segment& seg, uint64_t env, uint64_t first, uint64_t count,
                    const std::vector<uint64_t>& record_offsets, uint64_t record_bytes, std::byte* dst) const noexcept;
  /// The bytes steps [lo, hi) of env `env` occupy, every kind's share (FieldStorage::stored_bytes).
  uint64_t stored_bytes(const Segment& seg, uint64_t env, uint64_t lo, uint64_t hi) const noexcept {
    uint64_t bytes = 0;
    for (const auto& kind : kinds_) bytes += kind->stored_bytes(seg, env, lo, hi);
    return bytes;
  }
  /// The Sampler's gather of a chunk into the batch's arrays `outs` (one per schema field). No allocation.
  void gather(const Segment& seg, std::byte* const* outs, std::size_t length, const GatherRow* rows,
              std::size_t count, bool all_whole) const noexcept;

 private:
  std::vector<std::unique_ptr<FieldStorage>> kinds_;
  std::vector<uint32_t> kind_ids_;          // kinds_[k]'s code
  std::vector<std::size_t> kind_index_;     // per schema field: its kind's index in kinds_
  std::vector<std::size_t> index_in_kind_;  // per schema field: its index among its kind's fields
  bool all_plain_ = false;
};

/// copy_records' copy into records ([steps][record_bytes], field f at record_offsets[f]) through a StorageSet:
/// what Inspector::read_steps and save_checkpoint validate with the step seqlock (seqlock.hpp, copy_records).
class RecordCopy final : public StepCopier {
 public:
  RecordCopy(const Segment& seg, const StorageSet& storages, const std::vector<uint64_t>& record_offsets,
             std::byte* dst) noexcept
      : seg_(seg), storages_(storages), offsets_(record_offsets), record_bytes_(seg.schema().step_bytes()), dst_(dst) {}
  void copy(uint64_t env, uint64_t first, uint64_t count) const noexcept override {
    storages_.copy_records(seg_, env, first, count, offsets_, record_bytes_, dst_);
  }

 private:
  const Segment& seg_;
  const StorageSet& storages_;
  const std::vector<uint64_t>& offsets_;
  uint64_t record_bytes_;
  std::byte* dst_;
};

}  // namespace shmreplay::detail
