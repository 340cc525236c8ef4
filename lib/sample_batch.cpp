#include "shmreplay/sample_batch.hpp"

#include <cassert>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "shmreplay/error.hpp"

namespace shmreplay {


SampleBatch SampleBatch::borrow(std::vector<MutableFieldBytes> fields, std::span<uint8_t> mask,
                                std::span<uint64_t> env_ids, std::span<uint64_t> start_steps) {
  SampleBatch b;
  b.borrowed_ = true;
  b.borrowed_fields_ = std::move(fields);
  b.borrowed_mask_ = mask;
  b.borrowed_env_ids_ = env_ids;
  b.borrowed_starts_ = start_steps;
  return b;
}

void SampleBatch::prepare(const Schema& schema, std::size_t rows, std::size_t length, uint64_t load_generation) {
  load_generation_ = load_generation;
  weights_.assign(rows, 1.0f);  // grows only: assign keeps the capacity
  selector_rows_ = {};          // the sample call sets its blocks; a peek has none
  const std::size_t nf = schema.size();
  const std::size_t cells = rows * length;
  if (borrowed_) {
    auto too_small = [&](const std::string& what, std::size_t have, std::size_t need) {
      throw Error(Errc::size_mismatch,
                  fmt::format("the output array for {} has {} bytes, a batch of {} rows x {} steps needs {}", what,
                              have, rows, length, need));
    };
    if (borrowed_fields_.size() != nf) {
      throw Error(Errc::size_mismatch, fmt::format("the output has {} field arrays, the schema has {} ({})",
                                                   borrowed_fields_.size(), nf, schema.to_string()));
    }
    for (std::size_t f = 0; f < nf; ++f) {
      const std::size_t need = cells * static_cast<std::size_t>(schema[f].bytes());
      if (borrowed_fields_[f].bytes < need || (borrowed_fields_[f].data == nullptr && need != 0)) {
        too_small(fmt::format("field '{}'", schema[f].name), borrowed_fields_[f].bytes, need);
      }
    }
    if (borrowed_mask_.size() < cells) too_small("the mask", borrowed_mask_.size(), cells);
    if (borrowed_env_ids_.size() < rows) too_small("the env ids", borrowed_env_ids_.size_bytes(), rows * 8);
    if (borrowed_starts_.size() < rows) too_small("the start steps", borrowed_starts_.size_bytes(), rows * 8);
    field_ptr_.resize(nf);
    for (std::size_t f = 0; f < nf; ++f) field_ptr_[f] = static_cast<std::byte*>(borrowed_fields_[f].data);
    mask_ = borrowed_mask_.data();
    env_ids_ = borrowed_env_ids_.data();
    starts_ = borrowed_starts_.data();
  } else {
    // Grow only: a warmed-up batch keeps its storage and never allocates.
    own_fields_.resize(nf);
    field_ptr_.resize(nf);
    for (std::size_t f = 0; f < nf; ++f) {
      const std::size_t need = cells * static_cast<std::size_t>(schema[f].bytes());
      if (own_fields_[f].size() < need) own_fields_[f].resize(need);
      field_ptr_[f] = own_fields_[f].data();
    }
    if (own_mask_.size() < cells) own_mask_.resize(cells);
    if (own_env_ids_.size() < rows) own_env_ids_.resize(rows);
    if (own_starts_.size() < rows) own_starts_.resize(rows);
    mask_ = own_mask_.data();
    env_ids_ = own_env_ids_.data();
    starts_ = own_starts_.data();
  }
  field_step_bytes_.resize(nf);
  field_dtype_.resize(nf);
  for (std::size_t f = 0; f < nf; ++f) {
    field_step_bytes_[f] = static_cast<std::size_t>(schema[f].bytes());
    field_dtype_[f] = schema[f].dtype;
  }
  rows_ = rows;
  length_ = length;
}

std::span<const std::byte> SampleBatch::field(std::size_t index) const noexcept {
  assert(index < field_ptr_.size());
  return {field_ptr_[index], rows_ * length_ * field_step_bytes_[index]};
}

const std::byte* SampleBatch::step(std::size_t index, std::size_t row, std::size_t t) const noexcept {
  assert(index < field_ptr_.size() && row < rows_ && t < length_);
  return field_ptr_[index] + (row * length_ + t) * field_step_bytes_[index];
}

}  // namespace shmreplay
