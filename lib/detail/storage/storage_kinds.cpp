#include "detail/storage/storage_kinds.hpp"

#include <cassert>

#include "detail/storage/frame_ring.hpp"
#include "detail/storage/plain_ring.hpp"

namespace shmreplay::detail {
namespace {

template <class Kind>
std::unique_ptr<FieldStorage> make(const Segment& seg, std::vector<std::size_t> fields) {
  return std::make_unique<Kind>(seg, std::move(fields));
}

constexpr StorageKindRow kKinds[] = {
    {"frame_ring", [](const Field& f) { return f.stacked(); }, make<FrameRing>},
    {"plain_ring", [](const Field&) { return true; }, make<PlainRing>},  // last: every field the others leave
};

}  // namespace

std::span<const StorageKindRow> storage_kinds() noexcept { return kKinds; }

StorageSet::StorageSet(const Segment& seg) {
  const Schema& schema = seg.schema();
  kind_index_.assign(schema.size(), 0);
  index_in_kind_.assign(schema.size(), 0);
  const auto rows = storage_kinds();
  std::vector<std::vector<std::size_t>> taken(rows.size());
  std::vector<std::size_t> row_of(schema.size());
  for (std::size_t f = 0; f < schema.size(); ++f) {
    std::size_t r = 0;
    while (!rows[r].claims(schema[f])) ++r;  // the last row claims every field
    row_of[f] = r;
    index_in_kind_[f] = taken[r].size();
    taken[r].push_back(f);
  }
  std::vector<std::size_t> kind_of_row(rows.size(), SIZE_MAX);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (taken[r].empty()) continue;
    kind_of_row[r] = kinds_.size();
    kinds_.push_back(rows[r].make(seg, std::move(taken[r])));
  }
  for (std::size_t f = 0; f < schema.size(); ++f) kind_index_[f] = kind_of_row[row_of[f]];
  all_plain_ = kinds_.size() == 1 && dynamic_cast<const PlainRing*>(kinds_[0].get()) != nullptr;
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

}  // namespace shmreplay::detail
