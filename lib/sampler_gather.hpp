// lib/sampler_gather.hpp: the Sampler's gather stage: a chunk of drawn rows copied into the batch and validated
// together. A chunk's rows are added first (the sample rounds' draws, or peek's newest steps), then copied field by
// field with the rows ahead prefetched (StorageSet::gather, detail/storage/gather.hpp), then validated seqlock-style
// by the batched reader (detail/protocol/seqlock.hpp, BatchedReader): one read_begin per env before the chunk's
// copies and one read_end per env after them (docs/design/seqlock.md, "The batched gather"). Also the repair of the
// rows that keep failing (a learner killed holding an env's update lock), which both callers run.
//
// Who calls it: the sample rounds (lib/sampler_sample.cpp) and peek (lib/sampler_gather.cpp), on the Sampler's
// thread. The hot path of a sample: add is inlined into the rounds' per-row loop; nothing allocates once warmed up.
// Private to lib/sampler*.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "detail/always_inline.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/storage/cold_gather.hpp"
#include "detail/storage/field_storage.hpp"
#include "detail/storage/gather.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay::sampler_parts {

// A gather chunk: the rows drawn before they are copied and validated together. Up to kGatherRows rows, and no
// more rows once kGatherBytes are drawn: a chunk is the window of its rows' validation, so it stays short (a row
// whose slot a writer reclaims during the chunk is redrawn, even if it was copied before that).
inline constexpr std::size_t kGatherRows = 256;
inline constexpr uint64_t kGatherBytes = uint64_t{64} << 10;

// The gather stage's state and its three steps: begin, add (per row), run (copy and validate).
class ChunkGather {
  // Env e's control words, for the batched reader (called at an env's first row in a chunk, and by validate).
  struct ControlOf {
    const Segment* seg;
    SHMREPLAY_ALWAYS_INLINE const layout::EnvControl& operator()(uint64_t e) const noexcept {
      return seg->env_control(e);
    }
  };

 public:
  // `storages` (the segment's fields' storage kinds) must outlive it.
  ChunkGather(const Segment& seg, const detail::StorageSet& storages)
      : seg_(&seg), storages_(&storages), capacity_(seg.capacity()), chunk_(kGatherRows), read_(seg.num_envs()) {
    if (seg.cold_capacity() != 0) cold_.resize(kGatherRows);
    for (const Field& f : seg.schema().fields()) field_bytes_.push_back(f.bytes());
  }

  // Forgets the last chunk; its rows will have `length` steps at most.
  void begin(std::size_t length) noexcept {
    size_ = 0;
    cold_size_ = 0;
    whole_ = true;
    read_.begin_chunk();
    length_ = length;
  }

  // Room for `rows` rows in one chunk (peek's); grows only.
  void reserve(std::size_t rows) {
    if (chunk_.size() < rows) chunk_.resize(rows);
  }

  // Adds a row of a tiered buffer that begins below its env's hot ring (`split`, the snapshot's hi - capacity):
  // copied and validated on its own by run (detail/storage/cold_gather.hpp). A chunk holds at most kGatherRows.
  void add_cold(uint64_t env, uint64_t start, uint64_t steps, uint64_t split, uint32_t row) noexcept {
    cold_[cold_size_++] = detail::ColdRow{env, start, steps, split, row, 0, false};
  }

  // Adds steps [start, start + steps) of `env`, whose first step is in ring slot `slot`, as batch row `row`. (No
  // prefetch here: prefetching each row as it is drawn measured no faster than the gather's own prefetching a few
  // rows ahead of each copy, and slower at 10^7 stored steps, where the early prefetches compete for the TLB.)
  SHMREPLAY_ALWAYS_INLINE void add(uint64_t env, uint64_t start, uint64_t slot, uint64_t steps,
                                   uint32_t row) noexcept {
    // The row is built in a local and stored once, so that the stores into chunk_ (uint64_t words) do not make the
    // compiler reload the members read after them.
    const detail::GatherRow r{start, env, env * capacity_ + slot, slot, steps, row};
    whole_ = whole_ & detail::whole_run(r, length_, capacity_);
    chunk_[size_++] = r;
    read_.add(ControlOf{seg_}, env, start, steps);  // the env's read_begin, at its first row in the chunk
  }

  // The chunk's rows, as added (the sample caps' claim walks them after run).
  std::span<const detail::GatherRow> rows() const noexcept { return {chunk_.data(), size_}; }

  // Copies the chunk's rows into the batch's field arrays `outs` and its `mask` (each row's steps, zeros and mask 0
  // up to the length), then validates them; the rows that fail (a writer reclaimed a copied slot, or a learner
  // updated the env during the chunk) are appended to `failed`, in row order, and counted in the return value. The
  // validation is per env (BatchedReader::validate); only a chunk with an env that fails looks at its rows one by
  // one.
  //
  // A kind that checks its bytes (the compressed kind) notes a fault for a row it could not read
  // (field_storage.hpp, StorageFault): a row that fails validation is copied again as any other; a faulted row that
  // passes it means the segment is corrupt, and run throws Error(corrupt) instead of returning it. Past
  // StorageFaults::kMax faults in one chunk, every row is copied again.
  std::size_t run(std::byte* const* outs, uint8_t* mask, std::vector<uint32_t>& failed, SamplerStats& stats) {
    std::size_t cold_failed = 0;
    for (std::size_t k = 0; k < std::min(cold_size_, detail::kSmallAhead); ++k) prefetch_cold(k);
    for (std::size_t k = 0; k < cold_size_; ++k) {  // a tiered buffer's rows below the ring: copied, then validated
      if (k + detail::kSmallAhead < cold_size_) prefetch_cold(k + detail::kSmallAhead);
      detail::copy_cold_row(*seg_, field_bytes_.data(), outs, mask, length_, cold_[k]);
    }
    if (cold_size_ > 0) detail::end_copies();
    for (std::size_t k = 0; k < cold_size_; ++k) {
      if (!detail::validate_cold_row(*seg_, cold_[k])) {
        failed.push_back(static_cast<uint32_t>(cold_[k].row));
        ++cold_failed;
      }
    }
    stats.rows_gathered += cold_size_;
    const std::size_t n = size_;
    if (n == 0) return cold_failed;
    const detail::GatherRow* rows = chunk_.data();
    storages_->gather(*seg_, outs, length_, rows, n, whole_);
    detail::gather_mask(mask, length_, rows, n);
    const bool intact = read_.validate(ControlOf{seg_}, capacity_);
    stats.control_loads += 3 * read_.chunk_envs();  // read_begin (add); claimed and update_seq (validate)
    const detail::StorageFaults& faults = detail::thread_storage_faults();
    std::size_t count = 0;
    if (!intact || faults.size != 0) [[unlikely]] {
      for (std::size_t k = 0; k < n; ++k) {
        const detail::GatherRow& r = rows[k];
        const bool row_ok = intact || r.steps == 0 || read_.row_intact(r.env, r.start, capacity_);
        if (row_ok && !faults.overflow) {
          check_faults(r);
        } else if (r.steps > 0) {
          failed.push_back(static_cast<uint32_t>(r.row));
          ++count;
        }
      }
      detail::clear_storage_faults();
    }
    stats.rows_gathered += n;
    ++stats.gather_chunks;
    return count + cold_failed;
  }

 private:
  // The first lines of cold row k's run in each field's column, kSmallAhead rows ahead of its copy, so that the rows'
  // misses overlap as the ring rows' do (gather.hpp).
  void prefetch_cold(std::size_t k) const noexcept {
    const detail::ColdRow& r = cold_[k];
    const uint64_t index = r.start % seg_->cold_capacity();
    for (std::size_t f = 0; f < field_bytes_.size(); ++f) {
      detail::prefetch_bytes(seg_->cold_column(r.env, f) + index * field_bytes_[f], field_bytes_[f] * length_, 2);
    }
  }

  // Throws Error(corrupt) when a noted fault lies in row `r`, which passed validation.
  void check_faults(const detail::GatherRow& r) const {
    const detail::StorageFaults& faults = detail::thread_storage_faults();
    for (std::size_t i = 0; i < faults.size; ++i) {
      const detail::StorageFault& f = faults.list[i];
      if (f.env == r.env && f.step >= r.start && f.step < r.start + r.steps) {
        const detail::StorageFault copy = f;
        detail::clear_storage_faults();
        detail::throw_storage_fault(seg_->name(), seg_->schema(), copy);
      }
    }
  }

  const Segment* seg_;
  const detail::StorageSet* storages_;    // where each field's bytes live, and their gather
  uint64_t capacity_;
  std::vector<detail::GatherRow> chunk_;  // its first size_ entries (never shrinks: no reallocation)
  std::size_t size_ = 0;
  std::vector<detail::ColdRow> cold_;     // a tiered buffer's rows below the ring: its first cold_size_ entries
  std::size_t cold_size_ = 0;
  std::vector<uint64_t> field_bytes_;     // each field's bytes per step (the cold gather's)
  std::size_t length_ = 1;                // the sequence length of the rows being added
  bool whole_ = true;                     // every row of the chunk is a whole_run (gather.hpp)
  detail::BatchedReader read_;            // the chunk's seqlock validation
};

// Rows that fail validation round after round may lie in an env whose update lock a learner killed inside
// try_update still holds: its section stays open and every copy of the env fails, with or without a writer. The
// waiting reader repairs it (detail::repair_dead_updater: under the dead slot's lease, its torn step leaves the view),
// so a learner killed holding a lock never holds up another learner. Checked from the kRepairAfterRounds-th failed
// round on, once per env per round (a liveness check is a /proc read); `envs` is scratch (sampler_gather.cpp).
inline constexpr uint32_t kRepairAfterRounds = 2;
void repair_dead_updaters(Segment& seg, std::span<const uint32_t> rows, const uint64_t* env_ids,
                          std::vector<uint64_t>& envs);

// The part of a "contended" message that names a live learner holding the update lock of an env whose rows kept
// failing (its rewrites, not a writer, spoilt the copies), or "" (sampler_gather.cpp).
std::string updater_note(const Segment& seg, std::span<const uint32_t> rows, const uint64_t* env_ids);

}  // namespace shmreplay::sampler_parts
