// The rate limiter's settings (RateLimit) and the Buffer's view of them; the protocol is in
// detail/protocol/rate_limit.{hpp,cpp}, the waits in writer_rate_limit.cpp and sampler_rate_limit.cpp.
#include "shmreplay/rate_limit.hpp"

#include <limits>

#include <fmt/format.h>

#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {

RateLimit RateLimit::ratio(double samples_per_insert, uint64_t min_size_to_sample, double error_buffer) noexcept {
  const double offset = samples_per_insert * static_cast<double>(min_size_to_sample);
  return {min_size_to_sample, samples_per_insert, offset - error_buffer, offset + error_buffer};
}

RateLimit RateLimit::min_size(uint64_t min_size_to_sample) noexcept {
  return {min_size_to_sample, 1.0, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max()};
}

bool RateLimit::has_ratio() const noexcept {
  return min_diff > -std::numeric_limits<double>::max() || max_diff < std::numeric_limits<double>::max();
}

std::string RateLimit::to_string() const {
  if (!has_ratio()) return fmt::format("min size {}", min_size_to_sample);
  return fmt::format("samples_per_insert {:g}, min_size_to_sample {}, error buffer {:g} (error {:g} .. {:g})",
                     samples_per_insert, min_size_to_sample, error_buffer(), min_diff, max_diff);
}

std::optional<RateLimit> Buffer::rate_limit() const noexcept {
  const auto settings = detail::load_rate_limit(segment_of(*this).global_control());
  return settings ? std::optional<RateLimit>(settings->limit) : std::nullopt;
}

RateLimitState Buffer::rate_limit_state() const {
  const layout::GlobalControl& g = segment_of(*this).global_control();
  RateLimitState s;
  const auto settings = detail::load_rate_limit(g);
  const detail::InsertCounts counts = detail::count_inserts(segment_of(*this));
  s.inserts = counts.inserts;
  s.stored = counts.stored;
  s.samples = g.samples.load(std::memory_order_relaxed);
  if (settings) {
    s.limit = settings->limit;
    s.error = detail::limiter_error(*settings, s.inserts, s.samples);
  }
  // Every learner slot's waiting call (layout 1.7): the rows together, since the earliest.
  for (uint64_t slot = 0; slot < segment_of(*this).max_learners(); ++slot) {
    const auto me = detail::learner_slot(segment_of(*this), slot);
    s.learner_timeouts += me.stats.limiter_timeouts.load(std::memory_order_relaxed);  // layout 1.8
    const uint64_t rows = me.waiting_rows.load(std::memory_order_relaxed);
    if (rows == 0) continue;
    s.learner_waiting_rows += rows;
    ++s.learners_waiting;
    const uint64_t since = me.waiting_since_ns.load(std::memory_order_relaxed);
    if (s.learner_waiting_since_ns == 0 || since < s.learner_waiting_since_ns) s.learner_waiting_since_ns = since;
  }
  const detail::WaitingWriters waiting = detail::count_waiting_writers(segment_of(*this));
  s.writer_waiters = waiting.count;
  s.writer_waiting_since_ns = waiting.since_ns;
  s.last_sample_ns = g.last_sample_ns.load(std::memory_order_relaxed);
  s.learner_limited = g.learner_limited.load(std::memory_order_relaxed);
  s.writers_limited = g.writers_limited.load(std::memory_order_relaxed);
  s.writer_timeouts = g.writer_timeouts.load(std::memory_order_relaxed);
  s.changes = g.limiter_changes.load(std::memory_order_relaxed);
  return s;
}

void Buffer::set_rate_limit(const std::optional<RateLimit>& limit) {
  if (read_only()) {
    throw Error(Errc::read_only, fmt::format("cannot set the rate limit of '{}': the buffer is mapped read-only", name()));
  }
  if (limit) {
    detail::check_rate_limit(*limit, num_envs() * capacity(),
                             fmt::format("cannot set the rate limit of '{}' to {}", name(), limit->to_string()));
  }
  layout::GlobalControl& g = segment_of(*this).global_control();
  if (!detail::store_rate_limit(g, limit, detail::count_inserts(segment_of(*this)).inserts, detail::self_lease_word(),
                                5000)) {
    throw Error(Errc::timeout,
                fmt::format("cannot set the rate limit of '{}': another process ({}) has been changing it for 5 s",
                            name(), detail::holder_text(g.limiter_writer.load(std::memory_order_relaxed), 0)));
  }
}

}  // namespace shmreplay
