#include "detail/storage/storage_kinds.hpp"

#include <algorithm>
#include <cassert>

#include <fmt/format.h>

#include "detail/storage/frame_ring.hpp"
#include "detail/storage/packed_ring.hpp"
#include "detail/storage/plain_ring.hpp"

namespace shmreplay::detail {
namespace {

template <class Kind>
std::unique_ptr<FieldStorage> make(const Segment& seg, std::vector<std::size_t> fields) {
  return std::make_unique<Kind>(seg, std::move(fields));
}

constexpr StorageKindRow kKinds[] = {
    {layout::kStorageCompressed, "compressed", [](const Field& f) { return f.compressed(); }, place_packed_ring,
     write_packed_ring, accept_packed_ring, make<PackedRing>},
    {layout::kStorageFrameRing, "frame_ring", [](const Field& f) { return f.stacked(); }, place_frame_ring,
     write_frame_ring, accept_frame_ring, make<FrameRing>},
    // Last: every field the others leave.
    {layout::kStoragePlainRing, "plain_ring", [](const Field&) { return true; }, place_plain_ring, write_plain_ring,
     accept_plain_ring, make<PlainRing>},
};

std::vector<StorageKindRow>& test_kinds() {
  static std::vector<StorageKindRow> rows;
  return rows;
}

}  // namespace

std::vector<const StorageKindRow*> storage_kinds() {
  std::vector<const StorageKindRow*> rows;
  for (const StorageKindRow& r : test_kinds()) rows.push_back(&r);
  for (const StorageKindRow& r : kKinds) rows.push_back(&r);
  return rows;
}

const StorageKindRow* storage_kind(uint32_t id) {
  for (const StorageKindRow* r : storage_kinds()) {
    if (r->id == id) return r;
  }
  return nullptr;
}

const StorageKindRow& storage_kind_for(const Field& field) {
  for (const StorageKindRow* r : storage_kinds()) {
    if (r->claims(field)) return *r;
  }
  return kKinds[std::size(kKinds) - 1];  // unreachable: the last row claims every field
}

void add_test_storage_kind(const StorageKindRow& row) {
  if (row.id < layout::kStorageTestKinds || storage_kind(row.id) != nullptr) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot add storage kind '{}': its id {:#x} is {}", row.name, row.id,
                            row.id < layout::kStorageTestKinds ? "below the test kinds' codes" : "taken"));
  }
  test_kinds().push_back(row);
}

StorageSet::StorageSet(const Segment& seg) {
  const Schema& schema = seg.schema();
  kind_index_.assign(schema.size(), 0);
  index_in_kind_.assign(schema.size(), 0);
  // Each field's kind as the segment names it (FieldDesc::storage_kind: create chose it, open accepted it).
  std::vector<const StorageKindRow*> row_of_kind;  // kinds_[k]'s row
  std::vector<std::vector<std::size_t>> taken;      // kinds_[k]'s fields
  for (std::size_t f = 0; f < schema.size(); ++f) {
    const StorageKindRow* row = storage_kind(seg.field_kind(f));
    const auto at = std::find(row_of_kind.begin(), row_of_kind.end(), row);
    const auto k = static_cast<std::size_t>(at - row_of_kind.begin());
    if (at == row_of_kind.end()) {
      row_of_kind.push_back(row);
      taken.emplace_back();
    }
    kind_index_[f] = k;
    index_in_kind_[f] = taken[k].size();
    taken[k].push_back(f);
  }
  for (std::size_t k = 0; k < taken.size(); ++k) {
    kinds_.push_back(row_of_kind[k]->make(seg, std::move(taken[k])));
    kind_ids_.push_back(row_of_kind[k]->id);
  }
  all_plain_ = kinds_.size() == 1 && kind_ids_[0] == layout::kStoragePlainRing;
}

void StorageSet::copy_records(const Segment& seg, uint64_t env, uint64_t first, uint64_t count,
                              const std::vector<uint64_t>& record_offsets, uint64_t record_bytes,
                              std::byte* dst) const noexcept {
  std::byte* outs[kMaxFields];
  for (const auto& kind : kinds_) {
    assert(kind->fields().size() <= kMaxFields);
    for (std::size_t i = 0; i < kind->fields().size(); ++i) outs[i] = dst + record_offsets[kind->fields()[i]];
    kind->copy_steps(seg, env, first, count, outs, record_bytes);
  }
}

void StorageSet::gather(const Segment& seg, std::byte* const* outs, std::size_t length, const GatherRow* rows,
                        std::size_t count, bool all_whole) const noexcept {
  if (all_plain_) [[likely]] {
    kinds_[0]->gather(seg, outs, length, rows, count, all_whole);  // its fields are every field, in order
    return;
  }
  std::byte* kind_outs[kMaxFields];
  for (const auto& kind : kinds_) {
    for (std::size_t i = 0; i < kind->fields().size(); ++i) kind_outs[i] = outs[kind->fields()[i]];
    kind->gather(seg, kind_outs, length, rows, count, all_whole);
  }
}

void check_storage_faults(const Segment& seg, uint64_t intact_from) {
  const StorageFault f = thread_storage_faults().newest;
  clear_storage_faults();
  if (f.why != nullptr && f.step >= intact_from) throw_storage_fault(seg.name(), seg.schema(), f);
}

void throw_storage_fault(const std::string& name, const Schema& schema, const StorageFault& f) {
  throw Error(Errc::corrupt,
              fmt::format("shmreplay segment '{}' is corrupt: field '{}' of env {} step {} (frame {}) cannot be "
                          "read: {}; nothing of it was returned",
                          name, schema[f.field].name, f.env, f.step, f.frame, f.why));
}

}  // namespace shmreplay::detail
