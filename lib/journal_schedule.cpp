// lib/journal_schedule.cpp: the journal's schedule (journal_schedule.hpp).
#include "journal_schedule.hpp"

#include <algorithm>

namespace shmreplay::detail {

JournalSchedule::JournalSchedule(double bound_s, double now)
    : bound_s_(bound_s), poll_s_(std::clamp(bound_s / 20.0, 0.001, 0.05)), clean_since_(now) {}

double JournalSchedule::estimate_s() const noexcept {
  if (links_ == 0) return bound_s_ / 4;  // the first link writes the chain's start: no measure of it yet
  const std::size_t n = std::min(links_, kWindow);
  const double longest = *std::max_element(recent_.begin(), recent_.begin() + static_cast<std::ptrdiff_t>(n));
  return std::max(longest, whole_s_) * kMargin + poll_s_;
}

double JournalSchedule::deadline() const noexcept {
  // At least a quarter of the bound between links: a link slower than three quarters of it cannot keep the bound
  // whatever the schedule, and links back to back would only add to the load that made it slow.
  return clean_since_ + std::max(bound_s_ * kMinGap, bound_s_ - estimate_s() - poll_s_);
}

void JournalSchedule::nothing_pending(double now) noexcept { clean_since_ = std::max(clean_since_, now); }

double JournalSchedule::link_done(double started, double seconds, bool whole) noexcept {
  const double lag = started + seconds - clean_since_;
  if (whole) whole_s_ = seconds;
  recent_[links_ % kWindow] = seconds;
  ++links_;
  clean_since_ = std::max(clean_since_, started);
  return lag;
}

}  // namespace shmreplay::detail
