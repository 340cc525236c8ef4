// detail/storage/storage_kinds.hpp: the table of storage kinds: which kind stores a field, and how to make a kind's
// FieldStorage for a segment (field_storage.hpp). A new kind is its own file (a FieldStorage and its KindWriter) plus
// one row here; StorageSet, and through it the Writer, the Sampler's gather, copy_records (read_steps, dump,
// save) and a checkpoint load, find it by the table.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "detail/storage/field_storage.hpp"

namespace shmreplay::detail {

/// One storage kind: its name, whether it stores a field (the first row that claims a field takes it; the last
/// row claims every field), and how to make its FieldStorage for the fields it took (schema order).
struct StorageKindRow {
  const char* name;
  bool (*claims)(const Field& field);
  std::unique_ptr<FieldStorage> (*make)(const Segment& seg, std::vector<std::size_t> fields);
};

/// The rows, in the order they are asked.
std::span<const StorageKindRow> storage_kinds() noexcept;

}  // namespace shmreplay::detail
