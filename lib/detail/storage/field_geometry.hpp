// detail/storage/field_geometry.hpp: the geometry side of a storage kind: where create puts a field's storage
// (FieldPlacer, PlacedField: the kind row's `place` and `write`) and what open accepts of it (FieldAcceptor: the
// row's `accept`). Create's placement rule (detail/segment/placement.cpp) and open's acceptance rule
// (acceptance.cpp) walk the fields and hand each one to its kind's row (storage_kinds.hpp); the layout of the
// segment's other sections stays theirs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "shmreplay/error.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay::detail {

/// What create was asked of compressed fields' byte rings (CreateOptions::compressed_bytes, expected_compression).
struct CompressionBudget {
  uint64_t bytes = 0;          ///< every compressed field's rings together, all envs; 0: from the ratio
  double expected_ratio = 0;   ///< the frames' bytes as pushed over their records'; 0: kDefaultExpectedCompression
};

/// Create's cursor through the data section: the buffer's shape, and checked arithmetic whose overflow throws
/// Error(invalid_argument) naming the buffer's size.
class FieldPlacer {
 public:
  /// `at`: the first free byte of the data section. Throws when num_envs x capacity overflows.
  FieldPlacer(uint64_t num_envs, uint64_t capacity, uint64_t stack_restarts, uint64_t at, const Schema& schema,
              CompressionBudget budget = {});
  /// The whole schema (a kind that shares a budget among its fields reads the others).
  const Schema& schema() const noexcept { return *schema_; }
  /// The compressed fields' budget as create was asked.
  const CompressionBudget& compression_budget() const noexcept { return budget_; }
  uint64_t num_envs() const noexcept { return num_envs_; }
  uint64_t capacity() const noexcept { return capacity_; }
  uint64_t steps() const noexcept { return steps_; }  ///< num_envs x capacity
  /// A stacked field's frame-ring reserve (CreateOptions::stack_restarts, its default applied).
  uint64_t stack_restarts() const noexcept { return stack_restarts_; }
  /// The first free byte of the data section.
  uint64_t at() const noexcept { return at_; }
  /// a x b, or throws naming `what`.
  uint64_t mul(uint64_t a, uint64_t b, const std::string& what) const;
  /// Takes `bytes` at the next kDataAlignBytes boundary; returns their offset. Throws when the segment's size
  /// overflows.
  uint64_t take(uint64_t bytes);

 private:
  uint64_t num_envs_;
  uint64_t capacity_;
  uint64_t steps_;
  uint64_t stack_restarts_;
  uint64_t at_;
  const Schema* schema_;
  CompressionBudget budget_;
};

/// [[noreturn]] Error(invalid_argument): a buffer of num_envs x capacity is too large, `what` overflows 64 bits.
[[noreturn]] void throw_too_large(uint64_t num_envs, uint64_t capacity, const std::string& what);

/// What placement decided for one field: its kind, its FieldDesc storage words, and a frame ring's geometry.
struct PlacedField {
  uint32_t kind = layout::kStoragePlainRing;  ///< FieldDesc::storage_kind
  uint64_t data_offset = 0;                   ///< FieldDesc::data_offset
  uint64_t data_bytes = 0;                    ///< FieldDesc::data_bytes
  std::optional<StackGeometry> stack;         ///< a frame ring's geometry (layout 1.6)
  std::optional<PackedGeometry> packed;       ///< a compressed field's geometry (layout 1.10)
};

/// Open's checks of one field's storage, as acceptance.cpp hands them to the field's kind.
struct FieldAcceptor {
  uint64_t num_envs = 0;
  uint64_t capacity = 0;
  uint64_t steps = 0;  ///< num_envs x capacity (checked)
  std::string what;    ///< "field 2 'obs'", for messages
  /// Throws Error(code, message naming the segment): never returns.
  std::function<void(Errc, const std::string&)> fail;
  /// [offset, offset + bytes) must be kDataAlignBytes-aligned, inside the data section, apart from every other
  /// field's storage (checked with the others later); `part` names it.
  std::function<void(const std::string&, uint64_t, uint64_t)> place;
};

}  // namespace shmreplay::detail
