// detail/storage/storage_kinds.hpp: the table of storage kinds: which kind stores a field, and how to make a kind's
// FieldStorage for a segment (field_storage.hpp). A new kind is its own file (a FieldStorage and its KindWriter) plus
// one row here; StorageSet, and through it the Writer, the Sampler's gather, copy_records (read_steps, dump,
// save) and a checkpoint load, find it by the table.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "detail/storage/field_geometry.hpp"
#include "detail/storage/field_storage.hpp"

namespace shmreplay::detail {

/// One storage kind: its code in the segment, its name, which fields it stores (create asks the rows in order and
/// the first that claims a field takes it; the last row claims every field), its geometry (field_geometry.hpp), and
/// how to make its FieldStorage for the fields it took (schema order).
struct StorageKindRow {
  uint32_t id;       ///< FieldDesc::storage_kind (layout 1.10): stored in segments, never renumbered
  const char* name;  ///< for messages and `info`
  bool (*claims)(const Field& field);
  /// Create: places the field's storage (the schema's `index`-th) from the placer's cursor.
  PlacedField (*place)(const Field& field, std::size_t index, FieldPlacer& placer);
  /// Create: the kind's own FieldDesc words and the first state of its storage (the file is zero bytes).
  void (*write)(const PlacedField& placed, layout::FieldDesc& desc, std::byte* base, uint64_t num_envs,
                uint64_t capacity);
  /// Open: checks the kind's FieldDesc words (a copy), and records in `g` what its readers need.
  void (*accept)(const layout::FieldDesc& desc, const Field& field, std::size_t index, const FieldAcceptor& a,
                 SegmentGeometry& g);
  /// Makes the kind's FieldStorage for a segment's fields of the kind.
  std::unique_ptr<FieldStorage> (*make)(const Segment& seg, std::vector<std::size_t> fields);
};

/// The rows create asks, in order: the kinds tests registered (add_test_storage_kind), then the library's own.
std::vector<const StorageKindRow*> storage_kinds();
/// The row of kind code `id`, or nullptr when this process knows no such kind.
const StorageKindRow* storage_kind(uint32_t id);
/// The row that stores `field` (the first that claims it).
const StorageKindRow& storage_kind_for(const Field& field);
/// (Tests only) Adds a kind, asked before the library's own, for this process and the children it forks. Its id
/// must be at least layout::kStorageTestKinds and unused. Not thread-safe: call it before any Buffer exists.
void add_test_storage_kind(const StorageKindRow& row);

}  // namespace shmreplay::detail
