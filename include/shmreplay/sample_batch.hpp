// shmreplay/sample_batch.hpp: the output of every sample call (Sampler::sample, sample_mixed, sample_transitions,
// peek): per field an array [rows][sequence_length][field shape], a mask, and per row its env and start step.
//
// Who calls it: the learner, which hands a SampleBatch to its Sampler and reads the rows back (nstep() reads it
// too); the Python module lends NumPy arrays to one (borrow). Only the Sampler fills it.
//
// Thread safety: a plain object in process memory, nothing shared: one thread at a time fills or reads it. A
// batch owns its storage (default-constructed; grown on demand and reused, so a warmed-up batch never allocates)
// or writes into caller arrays (borrow(), checked for size on every call).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay {

class Sampler;

/// A writable array supplied by the caller: `bytes` bytes at `data`.
struct MutableFieldBytes {
  void* data = nullptr;  ///< the first byte
  std::size_t bytes = 0; ///< the number of bytes at `data`
};

/// The output of a sample call: per field an array [rows][sequence_length][field shape], a mask
/// [rows][sequence_length] (1 where the step exists), and per row the env id and the global step index where
/// the row starts. Either owns its storage (default-constructed; grown on demand and reused, so a warmed-up
/// batch never allocates) or writes into caller arrays (borrow()).
class SampleBatch {
 public:
  /// An empty batch that owns its storage; the first sample call sizes it.
  SampleBatch() = default;

  /// A batch that fills caller-provided arrays (for instance framework tensors): one per field in schema order,
  /// each at least rows x sequence_length x field bytes; `mask` at least rows x sequence_length; `env_ids` and
  /// `start_steps` at least rows. Each sample call checks the sizes and throws Error(size_mismatch) naming the
  /// array that is too small.
  static SampleBatch borrow(std::vector<MutableFieldBytes> fields, std::span<uint8_t> mask,
                            std::span<uint64_t> env_ids, std::span<uint64_t> start_steps);

  /// The rows of the last sample (0 before the first).
  std::size_t rows() const noexcept { return rows_; }
  /// The steps per row of the last sample.
  std::size_t sequence_length() const noexcept { return length_; }
  /// The number of field arrays (the schema's fields).
  std::size_t num_fields() const noexcept { return field_ptr_.size(); }

  /// Field `index` (schema order): rows() x sequence_length() x that field's bytes per step.
  std::span<const std::byte> field(std::size_t index) const noexcept;
  /// field(index) viewed as elements of T (the field's element type); sizeof(T) must divide its bytes.
  template <class T>
  std::span<const T> field_as(std::size_t index) const noexcept {
    const auto b = field(index);
    return {reinterpret_cast<const T*>(b.data()), b.size() / sizeof(T)};
  }
  /// The bytes of field `index` at row `row`, position `t` in the row.
  const std::byte* step(std::size_t index, std::size_t row, std::size_t t) const noexcept;
  /// rows() x sequence_length() bytes, 1 where the step exists (a row cut short by its data or its episode ends in 0s).
  std::span<const uint8_t> mask() const noexcept { return {mask_, rows_ * length_}; }
  /// Whether position `t` of row `row` holds a step (its mask byte is 1).
  bool valid(std::size_t row, std::size_t t) const noexcept { return mask_[row * length_ + t] != 0; }
  /// Per row, the env id it was sampled from.
  std::span<const uint64_t> env_ids() const noexcept { return {env_ids_, rows_}; }
  /// Per row, the global step index of its first step (Python: Batch.starts).
  std::span<const uint64_t> start_steps() const noexcept { return {starts_, rows_}; }
  /// Per row, the importance weight of a prioritized sample, (N * P(row))^-beta over the batch's maximum (so the
  /// largest is 1; N is the number of steps in the row's view, P the probability its start was drawn with); 1 for
  /// every row of a sample that was not prioritized. In a mixture (SampleOptions::mixture), the prioritized block's
  /// rows hold that block's importance weights (over the block's maximum) and the other blocks 1. In [0, 1] for any beta: computed as (smallest N * P / N * P)^beta.
  /// Always owned by the batch, also when it borrows its arrays.
  std::span<const float> weights() const noexcept { return {weights_.data(), rows_}; }
  /// Per selector (Selector order), how many rows of the last sample it drew (SampleOptions::mixture). Each
  /// selector's rows are one block, the blocks in Selector order: selector s's rows start where the blocks before it
  /// end (rows_of). A call without a mixture has one block (sample_mixed: its replay rows' and the online rows');
  /// after a peek, none (all 0).
  const std::array<std::size_t, kSelectors>& selector_rows() const noexcept { return selector_rows_; }
  /// A block of rows: [first, first + count).
  struct RowBlock {
    std::size_t first = 0;  ///< its first row
    std::size_t count = 0;  ///< its rows
  };
  /// The rows that selector `s` drew in the last sample (count 0: none).
  RowBlock rows_of(Selector s) const noexcept {
    std::size_t first = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(s); ++i) first += selector_rows_[i];
    return {first, selector_rows_[static_cast<std::size_t>(s)]};
  }
  /// The episode fields of the buffer the batch was last filled from (schema indices; all empty without).
  const EpisodeFieldIndices& episode_fields() const noexcept { return episode_fields_; }
  /// Policy versions (docs/design/policy.md): the current version the last sample call drew against (what the
  /// learners had published; 0 before any publish). Each row's own version is its steps' policy-version field.
  uint64_t policy_version() const noexcept { return policy_version_; }
  /// The buffer's checkpoint-load generation when the last sample call drew (GlobalControl::load_generation): the
  /// third part of this batch's handles. Pass it to Sampler::write_back, which refuses every row when a checkpoint
  /// was loaded into the buffer since (a load may give the same step indices other content).
  uint64_t load_generation() const noexcept { return load_generation_; }
  /// The oldest policy version the last sample call's window admitted; nullopt when the call had no window.
  std::optional<uint64_t> policy_floor() const noexcept { return policy_floor_; }
  /// The dtype of field `index` of the buffer the batch was last filled from.
  DType field_dtype(std::size_t index) const noexcept { return field_dtype_[index]; }

 private:
  friend class Sampler;  // fills it
  void prepare(const Schema& schema, std::size_t rows, std::size_t length, uint64_t load_generation);
  EpisodeFieldIndices episode_fields_;
  std::vector<DType> field_dtype_;
  uint64_t policy_version_ = 0;
  uint64_t load_generation_ = 0;
  std::optional<uint64_t> policy_floor_;

  bool borrowed_ = false;
  std::vector<MutableFieldBytes> borrowed_fields_;
  std::span<uint8_t> borrowed_mask_;
  std::span<uint64_t> borrowed_env_ids_;
  std::span<uint64_t> borrowed_starts_;
  std::vector<std::vector<std::byte>> own_fields_;
  std::vector<uint8_t> own_mask_;
  std::vector<uint64_t> own_env_ids_;
  std::vector<uint64_t> own_starts_;
  std::vector<float> weights_;

  std::vector<std::byte*> field_ptr_;
  std::vector<std::size_t> field_step_bytes_;
  uint8_t* mask_ = nullptr;
  uint64_t* env_ids_ = nullptr;
  uint64_t* starts_ = nullptr;
  std::size_t rows_ = 0;
  std::size_t length_ = 0;
  std::array<std::size_t, kSelectors> selector_rows_{};
};

}  // namespace shmreplay
