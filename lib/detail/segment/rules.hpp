// detail/segment/rules.hpp: where everything goes in a segment, and what open accepts. Create's placement rule
// (placement.cpp) and open's acceptance rule (acceptance.cpp) side by side, over the bytes layout.hpp declares,
// with the one check of episode roles both make (field_roles.cpp). Buffer::create and Buffer::open (lib/buffer.cpp,
// lib/buffer_open.cpp) are their only callers; each yields the SegmentGeometry a Segment is made of.
//
// The two rules are not mirror images on purpose: create places sections exactly as this version does; open
// checks the header against the rules (sizes, bounds, alignment, no overlaps), not against this exact plan, so
// that a newer minor version may place extra sections (docs/design/segment.md, "Opening a segment").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "detail/segment/section_table.hpp"
#include "detail/storage/field_geometry.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/rate_limit.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay::detail {

// -- Episode roles (field_roles.cpp) --

/// The episode roles a create asked for, resolved against the schema.
struct FieldRoles {
  std::vector<uint32_t> of_field;  ///< layout::FieldRole code per field, schema order
  EpisodeFieldIndices indices;
  uint64_t queue_capacity = 0;     ///< records per env; 0 without episode fields
};

/// The one check create and open both make of a set of roles; returns "" or what is wrong.
std::string episode_role_problem(const Schema& schema, const EpisodeFieldIndices& roles);

/// Resolves the named episode fields of `fields` (with the queue capacity asked for, 0 for the default) against
/// `schema`. Throws Error(invalid_argument) naming segment `name` when they do not fit.
FieldRoles resolve_field_roles(const std::string& name, const Schema& schema, const EpisodeFields& fields,
                               uint64_t episode_queue_capacity, const std::string& policy_version = {});


// -- Create's placement rule (placement.cpp) --

/// Where everything goes in a segment of the given shape.
struct SegmentPlan {
  layout::SectionDesc sections[layout::kSectionsUsed] = {};
  std::vector<PlacedField> fields;   ///< each field's storage, by its kind (detail/storage/field_geometry.hpp)
  SectionCounts counts;               ///< what the sections' sizes follow from (section_table.hpp)
  uint64_t learner_online_offset = 0;  ///< slots 1.. online starts, inside the learner section (0 with one slot)
  uint64_t total_bytes = 0;
};

/// Places every section; throws Error(invalid_argument) when a size overflows. `stack_restarts`: the reserve of
/// each stacked field's frame rings (CreateOptions::stack_restarts; 0 for default_stack_restarts). `max_learners`:
/// the learner slots (CreateOptions::max_learners, 1 to layout::kMaxLearners; layout 1.7). `budget`: the compressed
/// fields' byte rings (CreateOptions::compressed_bytes, expected_compression; layout 1.10). `max_times_sampled`:
/// the sample cap (CreateOptions::max_times_sampled, 0 for none; layout 1.11). `consuming_queue`: the queue section
/// (CreateOptions::consuming_queue; layout 1.11; the caller passes a cap of 1 with it). `initial_priority_bits`:
/// CreateOptions::initial_priority as SegmentHeader::initial_priority_bits; `sequence_priority_length`:
/// CreateOptions::sequence_priority_length (0 for none); `reanalyse_chunk`: CreateOptions::reanalyse_chunk (0 for
/// none; the walk section). `cold`: a cold tier (CreateOptions::cold_capacity > 0; the cold section).
SegmentPlan plan_segment(uint64_t num_envs, uint64_t capacity, const Schema& schema, uint64_t queue_capacity,
                         bool priorities, uint64_t stack_restarts, uint64_t max_learners = 1,
                         CompressionBudget budget = {}, uint64_t max_times_sampled = 0,
                         bool consuming_queue = false, uint64_t initial_priority_bits = 0,
                         uint64_t sequence_priority_length = 0, uint64_t reanalyse_chunk = 0, bool cold = false);

/// Writes the header, the field table and every control block into `base` (a fresh, zero-filled file of
/// plan.total_bytes), then publishes the state "ready" last (release).
void write_segment(std::byte* base, uint64_t num_envs, uint64_t capacity, const Schema& schema,
                   const SegmentPlan& plan, const FieldRoles& roles, std::optional<double> priority_exponent,
                   const std::optional<RateLimit>& rate_limit, StackContinuity stack_continuity);

/// The geometry of the segment write_segment made.
SegmentGeometry planned_geometry(const std::string& name, uint64_t num_envs, uint64_t capacity, const Schema& schema,
                                 const SegmentPlan& plan, const FieldRoles& roles,
                                 std::optional<double> priority_exponent, StackContinuity stack_continuity);

// -- Open's acceptance rule (acceptance.cpp) --

/// Reports what is wrong with the file being opened: Error(code) with the segment's name and path.
class OpenCheck {
 public:
  OpenCheck(const std::string& name, const std::string& path, uint64_t file_bytes)
      : name_(name), path_(path), file_bytes_(file_bytes) {}

  [[noreturn]] void fail(Errc code, const std::string& what) const;
  /// [offset, offset + bytes) must lie inside the file, after the header, and be aligned.
  void check_range(const std::string& what, uint64_t offset, uint64_t bytes, uint64_t header_bytes,
                   uint64_t align) const;
  /// No two of `ranges` overlap.
  void check_disjoint(std::vector<std::pair<layout::SectionDesc, std::string>> ranges) const;
  uint64_t file_bytes() const noexcept { return file_bytes_; }

 private:
  const std::string& name_;
  const std::string& path_;
  uint64_t file_bytes_;
};

/// The layout version a file says it has.
struct LayoutVersion {
  uint32_t major = 0;
  uint32_t minor = 0;
};

/// What open checks before it maps anything, read with pread from `fd` so that even a tiny file cannot fault:
/// the magic, the layout version (same major, this minor or newer), a file long enough for the header.
LayoutVersion accept_prefix(int fd, const OpenCheck& check);

/// Waits up to `timeout_ms` for a creator that has not yet published the segment as ready, running the thread's
/// InterruptCheck every 50 polls; throws Error(not_ready) naming the creator.
void await_ready(const layout::SegmentHeader& header, uint64_t timeout_ms, const OpenCheck& check);

/// The acceptance rule proper, over a ready segment mapped at `base` (the whole file): the header's sizes and
/// counts, every section's bounds, alignment and size, no overlaps, the field table, the episode roles and, when
/// given, the expected schema. Every value is read once, checked and copied into the result.
SegmentGeometry accept_segment(const std::byte* base, LayoutVersion version, const std::string& name,
                               const OpenCheck& check, const std::optional<Schema>& expected_schema);

}  // namespace shmreplay::detail
