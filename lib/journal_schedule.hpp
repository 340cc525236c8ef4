// lib/journal_schedule.hpp: when the journal starts its next link (docs/design/journal.md, "The schedule").
//
// A step published at p is durable once a link that began after p is synced. If the journal last saw nothing
// pending at `clean_since` (the start of the previous link, or a later look that found every env's head durable),
// every pending step was published after it, so a link that begins by clean_since + bound - t makes them durable
// within the bound, t being the link's time. t is estimated from the recent links: the longest of the last
// kWindow and of the latest whole link (the chain writes one whenever it compacts, so the next link may be whole
// whatever the recent ones were), times kMargin, plus one poll (before the first link, a quarter of the bound). Pure arithmetic on seconds of a monotonic clock: no clock,
// no I/O; tests drive it directly. Who calls it: lib/journal.cpp, one thread.
#pragma once

#include <array>
#include <cstddef>

namespace shmreplay::detail {

class JournalSchedule {
 public:
  static constexpr std::size_t kWindow = 8;     ///< links the estimate looks back at
  static constexpr double kMargin = 1.5;        ///< the estimate's factor over the longest of them
  static constexpr double kMinGap = 0.25;       ///< the least time from clean_since to a link, times the bound

  /// A schedule for `bound_s`, begun at `now` (steps pending then count from then).
  JournalSchedule(double bound_s, double now);

  /// The poll: how often the journal looks at the heads (bound / 20, from 1 ms to 50 ms).
  double poll_s() const noexcept { return poll_s_; }
  /// The estimate of one link's time, from the links so far (a quarter of the bound before any).
  double estimate_s() const noexcept;
  /// The latest instant the next link may begin and still keep the bound, and no earlier than clean_since plus a
  /// quarter of the bound (a link that takes more than the rest cannot keep the bound anyway).
  double deadline() const noexcept;

  /// The journal looked at `now` and every env's head was durable.
  void nothing_pending(double now) noexcept;
  /// A link began at `started` and took `seconds` (`whole`: it held every env's window); returns the lag it ended
  /// (its end minus clean_since before it).
  double link_done(double started, double seconds, bool whole = false) noexcept;

 private:
  double bound_s_;
  double poll_s_;
  double clean_since_;
  std::array<double, kWindow> recent_{};
  double whole_s_ = 0.0;  ///< the latest whole link's time
  std::size_t links_ = 0;
};

}  // namespace shmreplay::detail
