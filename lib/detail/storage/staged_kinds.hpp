// detail/storage/staged_kinds.hpp: the writer side of the storage kinds whose bytes are not stored as pushed (every
// kind but the plain ring, whose fields the Writer stores inline: plain_ring.hpp): their KindWriters, the staging
// areas a reserved step's fields are filled in until its commit, and the store of one step through all of them.
//
// Who uses it: the Writer (push, push_one, reserve/commit), for the envs it leases, and a checkpoint load (every
// env of the unnamed segment it fills). Not shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "detail/storage/field_storage.hpp"

namespace shmreplay::detail {

/// The staged kinds of one segment for one Writer's envs (or one load's).
class StagedKinds {
 public:
  /// For `envs` (a Writer's leased envs, local index = position; a load: every env). `all_kinds`: stage every kind,
  /// the plain ring included (a load, which stores every field through the seam); otherwise the plain ring is left
  /// to the caller. Throws bad_alloc.
  StagedKinds(Segment& seg, std::span<const uint64_t> envs, KindWriterMode mode, bool all_kinds);

  /// Whether any field is staged.
  bool any() const noexcept { return !kinds_.empty(); }
  /// Whether field `field` is staged (else it is the caller's: a plain-ring field the Writer stores inline).
  bool staged(std::size_t field) const noexcept { return staging_of_field_[field] != kNotStaged; }
  /// Where a reserved step's field `field` is filled for the `local`-th env until its commit. Precondition:
  /// staged(field) and prepare_staging(local) was called.
  std::byte* staging(std::size_t local, std::size_t field) noexcept {
    return staging_[local].data() + staging_of_field_[field];
  }
  /// Makes the `local`-th env's staging area (at a reservation, before its claim). Throws bad_alloc.
  void prepare_staging(std::size_t local) { staging_[local].resize(static_cast<std::size_t>(staging_bytes_)); }

  /// Stores step `step` of env `env` (the `local`-th env) in every staged kind: field f's bytes at source(f).
  /// Precondition as KindWriter::store. No allocation.
  template <class Source>
  void store(std::size_t local, uint64_t env, uint64_t step, bool ends_episode, Source&& source) noexcept {
    for (Kind& k : kinds_) {
      const std::vector<std::size_t>& fields = k.storage->fields();
      for (std::size_t i = 0; i < fields.size(); ++i) sources_[i] = source(fields[i]);
      k.writer->store(local, env, step, sources_.data(), ends_episode);
    }
  }
  /// Stores the `local`-th env's staged step (filled through staging()).
  void store_staged(std::size_t local, uint64_t env, uint64_t step, bool ends_episode) noexcept {
    store(local, env, step, ends_episode, [&](std::size_t f) -> const std::byte* { return staging(local, f); });
  }
  /// (A load) The `local`-th env's next stored step is `first_step`, with nothing stored before it.
  void restart(std::size_t local, uint64_t first_step) noexcept {
    for (Kind& k : kinds_) k.writer->restart(local, first_step);
  }
  /// The kinds' flagless restarts, summed (Writer::stack_flagless_restarts).
  uint64_t flagless_restarts() const noexcept;

 private:
  static constexpr uint64_t kNotStaged = UINT64_MAX;
  struct Kind {
    const FieldStorage* storage;
    std::unique_ptr<KindWriter> writer;
  };
  StorageSet storages_;
  std::vector<Kind> kinds_;
  std::vector<uint64_t> staging_of_field_;      // [schema field]: where it starts in a staging area, or kNotStaged
  uint64_t staging_bytes_ = 0;                  // a staging area's size: every staged field's bytes
  std::vector<std::vector<std::byte>> staging_;  // [env]: a reserved step's staged fields
  std::vector<const std::byte*> sources_;        // the sources of one kind's fields (the largest kind's count)
};

}  // namespace shmreplay::detail
