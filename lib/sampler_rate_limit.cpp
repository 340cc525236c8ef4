// The learner's half of the rate limiter (detail/protocol/rate_limit.hpp): a sample call waits until the limiter
// admits its whole batch and reserves its rows in the same step (one CAS on the sample count, so that several
// learners never pass on one margin); after it drew them, count_call (lib/sampler.cpp) wakes the writers waiting
// for them, and a call that failed gives its rows back. The writer's half is
// Writer::wait_for_rate_limit (lib/writer_rate_limit.cpp).
#include <atomic>
#include <chrono>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/protocol/wake.hpp"
#include "detail/test_hooks.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/wait.hpp"
#include "sampler_parts.hpp"

namespace shmreplay {

namespace {

// Why the limiter holds a batch back, in words.
std::string held_back_text(const detail::RateLimitVerdict& v, const RateLimit& limit, std::size_t rows,
                           const detail::InsertCounts& counts) {
  if (v.reason == RateLimitReason::min_size) {
    return fmt::format("{} steps are stored, fewer than min_size_to_sample {}", counts.stored,
                       limit.min_size_to_sample);
  }
  std::string text = fmt::format("the error (inserts x samples_per_insert - samples) is {:g}, and {} rows would take "
                                 "it below min_diff {:g}: the writers have not inserted enough steps for that many "
                                 "samples ({})",
                                 v.error, rows, limit.min_diff, limit.to_string());
  if (static_cast<double>(rows) > limit.max_diff - limit.min_diff) {
    text += fmt::format("; a batch of {} rows can only pass while writers run ahead by more than the error buffer "
                        "(writers that wait for the limiter never do): use batches of at most {:g} rows or a larger "
                        "error buffer",
                        rows, limit.max_diff - limit.min_diff);
  }
  return text;
}

}  // namespace

RateLimitReason Sampler::rate_limit_verdict(std::size_t rows) const noexcept {
  const layout::GlobalControl& g = segment_of(*buffer_).global_control();
  const auto settings = detail::load_rate_limit(g);
  if (!settings) return RateLimitReason::none;
  const detail::InsertCounts counts = detail::count_inserts(segment_of(*buffer_));
  return detail::sample_verdict(*settings, counts.inserts, counts.stored, g.samples.load(std::memory_order_relaxed),
                                rows)
      .reason;
}

bool Sampler::wait_for_rate_limit(const char* op, std::size_t rows, uint64_t timeout_ms) {
  scratch_->heads_reserved = false;
  layout::GlobalControl& g = segment_of(*buffer_).global_control();
  auto settings = detail::load_rate_limit(g);
  if (!settings) return false;
  detail::InsertCounts counts;
  detail::RateLimitVerdict verdict;
  bool reserved = false;
  // Admitted means reserved: the verdict and the count are one CAS (try_reserve_samples), so another learner's
  // reservation between them is seen; inserts only grow meanwhile.
  const auto admitted = [&] {
    settings = detail::load_rate_limit(g);
    if (!settings) return true;  // the limiter was removed meanwhile: nothing reserved, count_call adds the rows
    verdict = detail::try_reserve_samples(segment_of(*buffer_), *settings, rows, counts, scratch_->reserved_heads.data());
    reserved = verdict.allowed();
    scratch_->heads_reserved = reserved;
    return reserved;
  };
  if (admitted()) {
    if (reserved) detail::test_hooks::call(detail::test_hooks::after_reservation);
    return reserved;
  }
  g.learner_limited.fetch_add(1, std::memory_order_relaxed);
  bool ok = false;
  if (timeout_ms > 0) {
    const detail::LearnerSlotWords& me = scratch_->slot;
    me.waiting_since_ns.store(detail::realtime_ns(), std::memory_order_relaxed);
    me.waiting_rows.store(rows, std::memory_order_relaxed);
    // Cleared however the wait ends, an interrupt (an exception from InterruptCheck) included.
    struct Clear {
      std::atomic<uint64_t>& rows;
      ~Clear() { rows.store(0, std::memory_order_relaxed); }
    } clear{me.waiting_rows};
    // Writers wake the learners after each push (notify_waiters), the CLI after a change of the settings.
    ok = detail::sleep_until(detail::learner_wake(g, me.waiters), deadline_after_ms(timeout_ms), admitted);
  }
  if (ok) {
    if (reserved) detail::test_hooks::call(detail::test_hooks::after_reservation);
    return reserved;
  }
  // The call gives up at its timeout (at once with a timeout of 0): the slot's own count (layout 1.8), as
  // GlobalControl::writer_timeouts counts the writers'.
  scratch_->slot.stats.limiter_timeouts.fetch_add(1, std::memory_order_relaxed);
  const uint64_t writers = timeout_ms == 0 ? 0 : detail::count_waiting_writers(segment_of(*buffer_)).count;
  throw Error(Errc::rate_limited,
              timeout_ms == 0
                  ? fmt::format("cannot {} {} rows from '{}' now: the rate limiter holds the call back: {}", op, rows,
                                buffer_->name(), held_back_text(verdict, settings->limit, rows, counts))
                  : fmt::format("cannot {} {} rows from '{}': the rate limiter held the call back for {} ms (its "
                                "timeout): {}; {} writer{} waiting for it",
                                op, rows, buffer_->name(), timeout_ms,
                                held_back_text(verdict, settings->limit, rows, counts),
                                writers, writers == 1 ? " is" : "s are"));
}

}  // namespace shmreplay
