#include "detail/storage/staged_kinds.hpp"

#include <algorithm>


namespace shmreplay::detail {

StagedKinds::StagedKinds(Segment& seg, std::span<const uint64_t> envs, KindWriterMode mode, bool all_kinds)
    : storages_(seg), staging_of_field_(seg.schema().size(), kNotStaged), staging_(envs.size()) {
  std::size_t most = 0;
  for (std::size_t k = 0; k < storages_.kinds().size(); ++k) {
    const auto& kind = storages_.kinds()[k];
    if (!all_kinds && storages_.kind_id(k) == layout::kStoragePlainRing) continue;  // the Writer stores it inline
    for (const std::size_t f : kind->fields()) {
      staging_of_field_[f] = staging_bytes_;
      staging_bytes_ += seg.schema()[f].bytes();
    }
    most = std::max(most, kind->fields().size());
    kinds_.push_back({kind.get(), kind->writer(seg, envs, mode)});
  }
  sources_.resize(most);
}

uint64_t StagedKinds::flagless_restarts() const noexcept {
  uint64_t n = 0;
  for (const Kind& k : kinds_) n += k.writer->flagless_restarts();
  return n;
}

}  // namespace shmreplay::detail
