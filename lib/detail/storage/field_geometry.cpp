#include "detail/storage/field_geometry.hpp"

#include <fmt/format.h>

namespace shmreplay::detail {

void throw_too_large(uint64_t num_envs, uint64_t capacity, const std::string& what) {
  throw Error(Errc::invalid_argument,
              fmt::format("a buffer of {} envs x {} steps is too large: {} overflows 64 bits", num_envs, capacity,
                          what));
}

FieldPlacer::FieldPlacer(uint64_t num_envs, uint64_t capacity, uint64_t stack_restarts, uint64_t at,
                         const Schema& schema, CompressionBudget budget)
    : num_envs_(num_envs), capacity_(capacity), steps_(0), stack_restarts_(stack_restarts), at_(at),
      schema_(&schema), budget_(budget) {
  steps_ = mul(num_envs, capacity, "the number of steps");
}

uint64_t FieldPlacer::mul(uint64_t a, uint64_t b, const std::string& what) const {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw_too_large(num_envs_, capacity_, what);
  return r;
}

uint64_t FieldPlacer::take(uint64_t bytes) {
  const uint64_t offset = (at_ + layout::kDataAlignBytes - 1) / layout::kDataAlignBytes * layout::kDataAlignBytes;
  uint64_t end = 0;
  if (offset < at_ || __builtin_add_overflow(offset, bytes, &end) || end > UINT64_MAX - layout::kPageBytes) {
    throw_too_large(num_envs_, capacity_, "the segment's size");
  }
  at_ = end;
  return offset;
}

}  // namespace shmreplay::detail
