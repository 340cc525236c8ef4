// detail/segment/section_table.hpp: the segment's sections as data. One row per entry of the header's section table
// (layout.hpp's SectionIndex) holds what create's placement rule (placement.cpp) and open's acceptance rule
// (acceptance.cpp) both iterate: the section's name for messages, the layout minor that added it, its size for a
// segment's counts, the alignment open demands, where create starts it, and how create constructs its words.
//
// A new section is its struct and index in layout.hpp, one row in section_table.cpp, and its accessor in
// shmreplay/internal/segment.hpp (docs/design/segment.md, "Adding a section").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "shmreplay/internal/layout.hpp"

namespace shmreplay::detail {

/// The counts every section's size follows from: what create was asked for, or what open read from the header
/// (once, checked by accept_counts before any section is).
struct SectionCounts {
  uint64_t num_envs = 0;
  uint64_t capacity = 0;        ///< steps per env
  uint64_t num_fields = 0;
  uint64_t queue_capacity = 0;  ///< records per env's episode queue; 0 without episode fields
  uint64_t max_learners = 1;
  bool priorities = false;
  uint64_t max_times_sampled = 0;  ///< the sample cap (1.11); 0 without (no sample-caps section)
  bool consuming_queue = false;    ///< a consuming queue (1.11; the queue section; max_times_sampled is 1)
  /// SegmentHeader::initial_priority_bits (1.11): with layout::kInitialPriorityFirst, the priority section holds a
  /// second tree per env (the fresh-step trees)
  uint64_t initial_priority_bits = 0;
  /// SegmentHeader::sequence_priority_length (1.11): with L > 0, two window trees per env follow.
  uint64_t sequence_priority_length = 0;
  /// SegmentHeader::reanalyse_chunk (1.11): steps per chunk of the reanalyse walk; 0 without (no walk section).
  uint64_t reanalyse_chunk = 0;
  /// A cold tier (1.11; internal/cold_layout.hpp): then the cold section is there. No header word says so: open
  /// reads it from the section table entry's bytes, which the row then checks.
  bool cold = false;
  /// The sum trees per env in the priority section: 0 without priorities; else 1, plus 1 with fresh-step trees,
  /// plus 2 with sequence priorities.
  uint64_t priority_trees() const noexcept {
    if (!priorities) return 0;
    return uint64_t{1} + (initial_priority_bits == layout::kInitialPriorityFirst ? 1u : 0u) +
           (sequence_priority_length > 0 ? 2u : 0u);
  }
};

/// How open checks a section's size against SectionRow::bytes.
enum class SectionSize : uint8_t {
  exact,            ///< exactly bytes(counts); a section of 0 bytes is absent (offset ignored, written as 0)
  at_least,         ///< at least bytes(counts): a newer minor version may grow it
  placed_by_kinds,  ///< the data section: its fields' storage kinds place it, and open checks each field's range
};

/// One section of the segment.
struct SectionRow {
  layout::SectionIndex id;
  const char* name;      ///< for messages: "the env table"
  uint32_t since_minor;  ///< the layout 1.x that added it (CHANGELOG.md, "Segment layout history")
  SectionSize size;
  uint64_t align;        ///< what open demands of its offset
  uint64_t place_align;  ///< where create starts it (a multiple of align)
  /// Its size for `c`; nullopt when the size overflows 64 bits. Unused for SectionSize::placed_by_kinds.
  std::optional<uint64_t> (*bytes)(const SectionCounts& c);
  /// How that size follows from the counts, for messages ("5 envs x 192 bytes").
  std::string (*explain)(const SectionCounts& c);
  /// Constructs the section's words in place in a fresh, zero-filled segment (create only); nullptr for none.
  void (*construct)(std::byte* start, const SectionCounts& c);
};

/// Every section, in the order create places them (which is not the index order: the data section comes after the
/// control blocks and before the sections of 1.2 and later).
std::span<const SectionRow> section_rows() noexcept;

/// Where the learner section's online starts begin, from the section's start: after LearnerSlot[max_learners - 1],
/// rounded up to a cache line (layout 1.7); 0 with one learner.
uint64_t learner_online_starts_at(uint64_t max_learners) noexcept;

}  // namespace shmreplay::detail
