// detail/segment/learner_acceptance.cpp: open's acceptance rule for the learner sections: max_learners, the learner
// section of slots 1.. and their online starts (layout 1.7), and every slot's statistics (layout 1.8). Create's
// placement of both is in placement.cpp; the rest of the acceptance rule in acceptance.cpp.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "detail/segment/rules.hpp"

namespace shmreplay::detail {

using namespace layout;

LearnerSections accept_learner_sections(const SegmentHeader& h, uint64_t num_envs, uint64_t header_bytes,
                                        const OpenCheck& v, std::vector<std::pair<SectionDesc, std::string>>& placed) {
  LearnerSections s;
  const uint64_t max_learners = s.max_learners = h.max_learners;  // read once
  if (max_learners < 1 || max_learners > kMaxLearners) {
    v.fail(Errc::corrupt, fmt::format("max_learners is {}, expected 1 to {}", max_learners, kMaxLearners));
  }
  // Layout 1.7: slots 1.. and their online starts, empty (0 bytes, offset ignored) with one learner.
  const SectionDesc sec = h.sections[kSectionLearners];
  const uint64_t slots = max_learners - 1;
  const uint64_t online = slots == 0 ? 0 : (slots * sizeof(LearnerSlot) + kCacheLineBytes - 1) / kCacheLineBytes *
                                                kCacheLineBytes;
  const uint64_t expect = slots == 0 ? 0 : online + slots * num_envs * sizeof(uint64_t);  // bounded: no overflow
  if (sec.bytes != expect) {
    v.fail(Errc::corrupt, fmt::format("the learner section is {} bytes, expected {} for {} learner slots and {} envs",
                                      sec.bytes, expect, max_learners, num_envs));
  }
  if (slots != 0) {
    v.check_range("the learner section", sec.offset, sec.bytes, header_bytes, kCacheLineBytes);
    placed.emplace_back(sec, "the learner section");
    s.slots = sec;
    s.online_offset = sec.offset + online;
  }
  // Layout 1.8: one LearnerStats per slot, slot 0's included, in every segment.
  const SectionDesc stats = h.sections[kSectionLearnerStats];
  if (stats.bytes != max_learners * sizeof(LearnerStats)) {
    v.fail(Errc::corrupt, fmt::format("the learner statistics section is {} bytes, expected {} learner slots x {} "
                                      "bytes",
                                      stats.bytes, max_learners, sizeof(LearnerStats)));
  }
  v.check_range("the learner statistics section", stats.offset, stats.bytes, header_bytes, alignof(LearnerStats));
  placed.emplace_back(stats, "the learner statistics section");
  s.stats = stats;
  return s;
}

}  // namespace shmreplay::detail
