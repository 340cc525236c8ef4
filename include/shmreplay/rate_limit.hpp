// shmreplay/rate_limit.hpp: a rate limiter stored in the segment, with the meaning of Reverb's RateLimiter.
//
// Why: with actors and a learner in separate processes, how often each step is replayed depends on the machine's
// speed. A limiter fixes the ratio of samples (rows returned by sample calls) to inserts (published steps), counted
// across every process, within an error buffer:
//
//   error = inserts * samples_per_insert - samples
//   - a sample call of B rows is held back while fewer than min_size_to_sample steps are stored, or while
//     error - B < min_diff (the learner is ahead);
//   - a push of k steps by a Writer that waits for the limiter (WriterOptions::wait_for_rate_limit) is held back
//     unless inserts + k <= min_size_to_sample (filling up is always allowed) or
//     (inserts + k) * samples_per_insert - samples <= max_diff (the writers are ahead otherwise).
//   RateLimit::ratio gives Reverb's SampleToInsertRatio (min_diff/max_diff = min_size_to_sample *
//   samples_per_insert -/+ error_buffer), RateLimit::min_size Reverb's MinSize (no ratio at all).
//
// At the edge a call is all or nothing: a batch of 256 rows waits until all 256 are allowed, and a push of 16
// envs until all 16 steps are, because a partial batch would hand the learner a batch of another shape (and a
// split push would publish some envs' steps of one envpool recv and not others'). So a batch of B rows and a push
// of k steps can only both make progress when B + k * samples_per_insert <= max_diff - min_diff (2 * error_buffer);
// a call that can never pass fails at its timeout with a message that says so.
//
// Who waits: the learner's sample calls wait up to SampleOptions::rate_limit_timeout_ms (0: they refuse at once
// with Errc::rate_limited, "not now"). Writers never wait unless made with WriterOptions::wait_for_rate_limit; by
// default the limiter only counts their steps, and only the learner is held back. The counts and waits are in
// docs/design/rate_limiter.md, "Rate limiting", with the argument that no wake-up is lost and the bounds hold.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace shmreplay {

/// The limiter's settings (Reverb's RateLimiter: min_size_to_sample, samples_per_insert, min_diff, max_diff).
struct RateLimit {
  uint64_t min_size_to_sample = 1;  ///< no sample before this many steps are stored (all envs together)
  double samples_per_insert = 1.0;  ///< the target number of sampled rows per published step (finite, > 0)
  double min_diff = -std::numeric_limits<double>::max();  ///< samples may not take `error` below this
  double max_diff = std::numeric_limits<double>::max();   ///< waiting writers may not take `error` above this

  /// Reverb's SampleToInsertRatio: samples_per_insert rows per step, within +/- error_buffer of the ratio, after
  /// min_size_to_sample steps (error_buffer >= 2 * max(1, samples_per_insert), so that one step and one row fit).
  static RateLimit ratio(double samples_per_insert, uint64_t min_size_to_sample, double error_buffer) noexcept;
  /// Reverb's MinSize: no sample before `min_size_to_sample` steps are stored, and no ratio.
  static RateLimit min_size(uint64_t min_size_to_sample) noexcept;

  /// Whether min_diff and max_diff bound the ratio (a ratio limiter) or not (min_size alone).
  bool has_ratio() const noexcept;
  /// (max_diff - min_diff) / 2 for a ratio limiter.
  double error_buffer() const noexcept { return (max_diff - min_diff) / 2; }
  /// "samples_per_insert 4, min_size_to_sample 1000, error buffer 256 (error 3744 .. 4256)", or "min size 1000".
  std::string to_string() const;

  /// Equal when every setting is.
  friend bool operator==(const RateLimit&, const RateLimit&) = default;
};

/// Why the limiter holds a call back (or none).
enum class RateLimitReason : uint8_t {
  none,           ///< the call may go ahead
  min_size,       ///< fewer than min_size_to_sample steps are stored (samples only)
  learner_ahead,  ///< the sample would take error below min_diff
  writers_ahead,  ///< the insert would take error above max_diff
};

/// The limiter's counts and waits, as read from the segment (Buffer::rate_limit_state, the Inspector, the CLI).
struct RateLimitState {
  std::optional<RateLimit> limit;   ///< nullopt: the buffer has no limiter (the rest is 0)
  uint64_t inserts = 0;             ///< published steps since creation, all envs (the sum of heads)
  uint64_t samples = 0;             ///< rows admitted to sample calls since creation
  uint64_t stored = 0;              ///< steps stored now (the replay view)
  double error = 0;                 ///< inserts * samples_per_insert - samples (+ an offset after a change of the
                                    ///< settings, which restarts it at the middle of the new bounds); 0 without
  uint64_t learner_waiting_rows = 0;      ///< rows of the sample calls waiting now, every learner's; 0 when none
  uint64_t learner_waiting_since_ns = 0;  ///< CLOCK_REALTIME when the earliest of them began
  uint64_t learners_waiting = 0;          ///< learners whose sample call waits now (layout 1.7: one per slot)
  uint64_t writer_waiters = 0;            ///< writers waiting now (a writer that died while it waited is not counted)
  uint64_t writer_waiting_since_ns = 0;   ///< CLOCK_REALTIME when the first of them began (when writer_waiters > 0)
  uint64_t last_sample_ns = 0;      ///< CLOCK_REALTIME of the last admitted sample call; 0: never
  uint64_t learner_limited = 0;     ///< sample calls held back (waited or refused) since creation
  uint64_t learner_timeouts = 0;    ///< ... that gave up at their timeout (refused, with a timeout of 0), every
                                    ///< learner slot's (layout 1.8; since creation or the last checkpoint load)
  uint64_t writers_limited = 0;     ///< push calls held back since creation
  uint64_t writer_timeouts = 0;     ///< ... that gave up at their timeout
  uint64_t changes = 0;             ///< times the settings were changed after creation
};

}  // namespace shmreplay
