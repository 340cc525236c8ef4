// shmreplay/internal/caps_layout.hpp: the sample-caps section (layout 1.11): per learner slot its counters, then one
// count word per ring slot, [num_envs][capacity]. docs/design/sample_caps.md has the protocol; lib/sampler_caps.cpp
// the learner's half, Writer::finish_step the writer's (one store per step).
//
// Present only in a buffer created with CreateOptions::max_times_sampled (SegmentHeader::max_times_sampled != 0);
// its size follows from num_envs, capacity and max_learners. Segment-resident: fixed-width atomics only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmreplay/internal/layout.hpp"

namespace shmreplay::layout {

/// The largest sample cap: a count word keeps the count in its low 8 bits.
inline constexpr uint64_t kMaxTimesSampled = 255;
/// Bits of a count word below the step tag.
inline constexpr unsigned kCapCountBits = 8;
/// The step tags a count word holds: the low 56 bits of the step number (2^56 steps per env before a tag repeats).
inline constexpr uint64_t kCapTagMask = (uint64_t{1} << (64 - kCapCountBits)) - 1;

/// The count word of ring slot `step % capacity` for `step` with `count` deliveries: (step << 8) | count. The writer
/// stores cap_word(step, 0) before the step's head store; a learner claims a delivery by CAS from cap_word(p, c) to
/// cap_word(p, c + 1) while c < the cap.
constexpr uint64_t cap_word(uint64_t step, uint64_t count) noexcept { return (step << kCapCountBits) | count; }
/// The step a count word counts for (its low 56 bits) and its count.
constexpr uint64_t cap_word_tag(uint64_t word) noexcept { return word >> kCapCountBits; }
constexpr uint64_t cap_word_count(uint64_t word) noexcept { return word & ((uint64_t{1} << kCapCountBits) - 1); }
/// Whether `word` counts for step `step`.
constexpr bool cap_word_for(uint64_t word, uint64_t step) noexcept {
  return cap_word_tag(word) == (step & kCapTagMask);
}

/// One learner slot's counters, one cache line, written by the slot's learner only (relaxed; informational).
struct alignas(kCacheLineBytes) CapLearner {
  std::atomic<uint64_t> rejected;  ///< rows drawn and refused because their start was capped (or overwritten
                                   ///< before its delivery was claimed), redrawn
  std::atomic<uint64_t> retired;   ///< starts whose last delivery this slot claimed (count reached the cap)
  std::atomic<uint64_t> claimed;   ///< deliveries this slot claimed (rows returned by sample calls)
  uint64_t pad[5];
};

/// Where the count words start, from the section's start.
constexpr uint64_t cap_words_at(uint64_t max_learners) noexcept { return max_learners * sizeof(CapLearner); }

static_assert(sizeof(CapLearner) == kCacheLineBytes, "a slot's cap counters are one cache line");
static_assert(cap_word_count(cap_word(5, 255)) == 255 && cap_word_tag(cap_word(5, 255)) == 5,
              "a count word holds the step above 8 bits of count");

}  // namespace shmreplay::layout
