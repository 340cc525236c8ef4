#include "detail/protocol/rate_limit.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "detail/protocol/lease.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/wake.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay::detail {

using layout::EnvControl;
using layout::GlobalControl;

namespace {

uint64_t bits(double v) noexcept { return std::bit_cast<uint64_t>(v); }
double value(uint64_t b) noexcept { return std::bit_cast<double>(b); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Settings: two slots and an index. A rewriter fills the slot not in force, then flips the index (release); readers
// read the slot in force and check that the index did not move meanwhile. Readers never wait for a rewriter, and
// a rewriter killed at any instruction leaves the slot in force whole (its half-filled slot is not in force).
// Rewriters (the creator, `shmreplay limit`) are serialized by limiter_writer, a lease word: one whose holder died
// is taken over.

std::optional<LimiterSettings> load_rate_limit(const GlobalControl& g) noexcept {
  for (;;) {
    // acquire: pairs with store_rate_limit's release store of the index: the slot it names was filled before it.
    const uint64_t index = g.limiter_index.load(std::memory_order_acquire);
    const layout::LimiterSlot& slot = g.limiter_slots[index & 1];
    std::optional<LimiterSettings> out;
    if (slot.enabled.load(std::memory_order_relaxed) != 0) {
      out = LimiterSettings{RateLimit{slot.min_size_to_sample.load(std::memory_order_relaxed),
                                      value(slot.samples_per_insert.load(std::memory_order_relaxed)),
                                      value(slot.min_diff.load(std::memory_order_relaxed)),
                                      value(slot.max_diff.load(std::memory_order_relaxed))},
                            value(slot.error_offset.load(std::memory_order_relaxed))};
    }
    // acquire fence: if a load above read a word of a later rewrite of this slot, that rewriter's release fence
    // (made after it saw this index flipped away) synchronizes with it, so the re-read sees the index moved.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (g.limiter_index.load(std::memory_order_relaxed) == index) return out;
  }
}

namespace {

// Both stores' body: takes the rewriter lease, fills the slot not in force with `limit` and the offset
// `offset_of(r)` returns (called while the lease is held), flips the index, wakes both sides.
template <class OffsetOf>
bool rewrite_rate_limit(GlobalControl& g, const std::optional<RateLimit>& limit, uint64_t writer, uint64_t timeout_ms,
                        OffsetOf offset_of) noexcept {
  // Take the rewriter lease (detail/protocol/lease.hpp): free, or held by a dead process. Its acquire pairs with
  // the previous rewriter's release, so that rewriter's index store is visible here. Another thread of this
  // process rewriting (held_by_us) is waited for like any live holder.
  const auto deadline = deadline_after_ms(timeout_ms);
  for (;;) {
    const LeaseOutcome taken = try_take_lease_word(g.limiter_writer, writer).outcome;
    if (taken == LeaseOutcome::taken || taken == LeaseOutcome::taken_over) break;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const uint64_t index = g.limiter_index.load(std::memory_order_relaxed);  // only lease holders store it
  layout::LimiterSlot& slot = g.limiter_slots[(index & 1) ^ 1];
  // release fence: pairs with load_rate_limit's acquire fence: a reader that reads one of the words below sees
  // the index as it is now (flipped away from this slot), and retries.
  std::atomic_thread_fence(std::memory_order_release);
  const RateLimit r = limit.value_or(RateLimit{0, 0, 0, 0});
  const double offset = offset_of(r);
  slot.enabled.store(limit ? 1 : 0, std::memory_order_relaxed);
  slot.min_size_to_sample.store(r.min_size_to_sample, std::memory_order_relaxed);
  slot.samples_per_insert.store(bits(r.samples_per_insert), std::memory_order_relaxed);
  slot.min_diff.store(bits(r.min_diff), std::memory_order_relaxed);
  slot.max_diff.store(bits(r.max_diff), std::memory_order_relaxed);
  slot.error_offset.store(bits(offset), std::memory_order_relaxed);
  // release: pairs with load_rate_limit's acquire load of the index: the slot is filled before it is in force.
  g.limiter_index.store((((index >> 1) + 1) << 1) | ((index & 1) ^ 1), std::memory_order_release);
  release_lease_word(g.limiter_writer, writer);  // release: pairs with the next rewriter's acquire
  notify(learner_wake(g));
  wake_all(writer_wake(g));
  return true;
}

}  // namespace

bool store_rate_limit(GlobalControl& g, const std::optional<RateLimit>& limit, std::optional<uint64_t> inserts,
                      uint64_t writer, uint64_t timeout_ms) noexcept {
  return rewrite_rate_limit(g, limit, writer, timeout_ms, [&](const RateLimit& r) {
    if (!inserts) return 0.0;
    g.limiter_changes.fetch_add(1, std::memory_order_relaxed);
    if (!limit || !limit->has_ratio()) return 0.0;
    const double middle = limit->min_diff / 2 + limit->max_diff / 2;
    return middle - limiter_error({r, 0}, *inserts, g.samples.load(std::memory_order_relaxed));
  });
}

bool restore_rate_limit(GlobalControl& g, const std::optional<LimiterSettings>& settings, uint64_t writer,
                        uint64_t timeout_ms) noexcept {
  const std::optional<RateLimit> limit = settings ? std::optional<RateLimit>(settings->limit) : std::nullopt;
  return rewrite_rate_limit(g, limit, writer, timeout_ms,
                            [&](const RateLimit&) { return settings ? settings->error_offset : 0.0; });
}

void check_rate_limit(const RateLimit& limit, uint64_t most_steps, const std::string& where) {
  auto fail = [&](const std::string& what) {
    throw Error(Errc::invalid_argument, fmt::format("{}: {}", where, what));
  };
  if (!(std::isfinite(limit.samples_per_insert) && limit.samples_per_insert > 0)) {
    fail(fmt::format("samples_per_insert is {}, expected a finite number > 0", limit.samples_per_insert));
  }
  if (std::isnan(limit.min_diff) || std::isnan(limit.max_diff) || limit.min_diff > limit.max_diff) {
    fail(fmt::format("the bounds are min_diff {} and max_diff {}, expected min_diff <= max_diff", limit.min_diff,
                     limit.max_diff));
  }
  if (limit.min_size_to_sample > most_steps) {
    fail(fmt::format("min_size_to_sample is {}, but the buffer stores at most {} steps (num_envs x capacity): "
                     "the learner could never sample",
                     limit.min_size_to_sample, most_steps));
  }
  const double need = 2 * std::max(1.0, limit.samples_per_insert);
  if (limit.has_ratio() && limit.max_diff - limit.min_diff < need) {
    fail(fmt::format("the error buffer is {} (min_diff {}, max_diff {}), expected at least {} = max(1, "
                     "samples_per_insert): one step and one sampled row must fit between the bounds",
                     limit.error_buffer(), limit.min_diff, limit.max_diff, need / 2));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Verdicts, Reverb's conditions (rate_limiter.cc: CanSample, CanInsert) with inserts as published steps.

double limiter_error(const LimiterSettings& s, uint64_t inserts, uint64_t samples) noexcept {
  return static_cast<double>(inserts) * s.limit.samples_per_insert - static_cast<double>(samples) + s.error_offset;
}

RateLimitVerdict sample_verdict(const LimiterSettings& s, uint64_t inserts, uint64_t stored, uint64_t samples,
                                uint64_t rows) noexcept {
  const RateLimit& limit = s.limit;
  const double error = limiter_error(s, inserts, samples);
  if (stored < limit.min_size_to_sample) {
    return {RateLimitReason::min_size, error, static_cast<double>(limit.min_size_to_sample)};
  }
  if (error - static_cast<double>(rows) < limit.min_diff) return {RateLimitReason::learner_ahead, error, limit.min_diff};
  return {RateLimitReason::none, error, limit.min_diff};
}

RateLimitVerdict insert_verdict(const LimiterSettings& s, uint64_t admitted, uint64_t samples,
                                uint64_t steps) noexcept {
  const RateLimit& limit = s.limit;
  const double error = limiter_error(s, admitted, samples);
  if (admitted + steps <= limit.min_size_to_sample) return {RateLimitReason::none, error, limit.max_diff};
  const double after = limiter_error(s, admitted + steps, samples);
  if (after > limit.max_diff) return {RateLimitReason::writers_ahead, error, limit.max_diff};
  return {RateLimitReason::none, error, limit.max_diff};
}

// ---------------------------------------------------------------------------------------------------------------
// Counts

InsertCounts count_inserts(const Segment& seg, uint64_t* heads) noexcept {
  InsertCounts out;
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    const EnvControl& c = seg.env_control(e);
    const StepRange r = published_range(c, View::replay, seg.capacity(), c.online_start);
    out.inserts += r.hi;
    out.stored += r.hi - r.lo;
    if (heads != nullptr) heads[e] = r.hi;
  }
  return out;
}

WaitingWriters count_waiting_writers(const Segment& seg) noexcept {
  WaitingWriters out;
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    const EnvControl& c = seg.env_control(e);
    const uint64_t since = c.limiter_waiting_since_ns.load(std::memory_order_relaxed);
    if (since == 0) continue;
    const uint64_t lease = c.lease.load(std::memory_order_relaxed);
    if (lease == 0 || !lease_holder_alive(lease)) continue;  // died while it waited
    ++out.count;
    out.since_ns = out.since_ns == 0 ? since : std::min(out.since_ns, since);
  }
  return out;
}

uint64_t count_admitted(const Segment& seg) noexcept {
  uint64_t total = 0;
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    const EnvControl& c = seg.env_control(e);
    total += std::max(c.head.load(std::memory_order_relaxed), c.limiter_reserved.load(std::memory_order_relaxed));
  }
  return total;
}

// ---------------------------------------------------------------------------------------------------------------
// The learner's half: count after sampling, wake the writers it lets in.

RateLimitVerdict try_reserve_samples(Segment& seg, const LimiterSettings& s, uint64_t rows,
                                     InsertCounts& counts, uint64_t* heads) noexcept {
  GlobalControl& g = seg.global_control();
  uint64_t samples = g.samples.load(std::memory_order_relaxed);
  for (;;) {
    // after the load of samples: heads only grow, so the verdict can only be stricter
    counts = count_inserts(seg, heads);
    const RateLimitVerdict v = sample_verdict(s, counts.inserts, counts.stored, samples, rows);
    if (!v.allowed()) return v;
    // relaxed: the reservation orders nothing by itself; the wake-up of writers after the draw (count_samples,
    // notify's seq_cst fence) publishes it to them. A failed CAS reloads `samples` (another learner reserved).
    if (g.samples.compare_exchange_weak(samples, samples + rows, std::memory_order_relaxed)) return v;
  }
}

void return_samples(GlobalControl& g, uint64_t rows) noexcept {
  g.samples.fetch_sub(rows, std::memory_order_relaxed);  // as the reservation; waiting writers re-check by promise
}

void count_samples(GlobalControl& g, uint64_t unreserved, uint64_t realtime_ns, uint64_t monotonic_ns) noexcept {
  // relaxed: ordered before the writers' re-count by notify's fence below
  if (unreserved != 0) g.samples.fetch_add(unreserved, std::memory_order_relaxed);
  g.last_sample_ns.store(realtime_ns, std::memory_order_relaxed);
  // notify's seq_cst fence orders the count before the load of writer_recheck_by_ns; pairs with the waiting
  // writer's seq_cst CAS of its promise before it re-counts (wake.hpp, promise_recheck).
  notify(writer_wake(g), monotonic_ns);
}

// ---------------------------------------------------------------------------------------------------------------
// The waiting writer's half: admission by reservation, serialized by one CAS on admit_seq.
//
// Claim: the steps admitted and not yet withdrawn never take error above max_diff. An admission that succeeds
// with admit_seq going v -> v + 1 counted after its acquire load of v. Every admission that succeeded before it
// stored its reservations before its CAS (release), and that CAS wrote a value <= v, so our acquire load of v
// (or a later value) makes those reservations visible to our count; no admission succeeded between our load and
// our CAS (it would have moved admit_seq). So our count includes every earlier admitted step, and heads only
// replace reservations (head <= reservation until published, then equal). A reservation of a writer that has not
// yet CASed (or lost, or died before its CAS) may be counted too: that only makes us stricter.

RateLimitVerdict try_admit(Segment& seg, const LimiterSettings& limit, std::span<EnvControl* const> envs) noexcept {
  GlobalControl& g = seg.global_control();
  for (;;) {
    // acquire: pairs with the release (seq_cst) CAS of the admission that wrote this value, so its reservations
    // are visible to count_admitted.
    uint64_t v = g.admit_seq.load(std::memory_order_acquire);
    // acquire: the learner's count only grows; reading it stale is stricter, never looser.
    const uint64_t samples = g.samples.load(std::memory_order_acquire);
    const RateLimitVerdict verdict = insert_verdict(limit, count_admitted(seg), samples, envs.size());
    if (!verdict.allowed()) return verdict;
    for (EnvControl* c : envs) {
      c->limiter_reserved.store(c->head.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    // seq_cst (release half): publishes the reservations above to the next admitter's acquire load of admit_seq.
    if (g.admit_seq.compare_exchange_strong(v, v + 1, std::memory_order_seq_cst)) return verdict;
    withdraw(envs);  // another writer was admitted since our count: count again
  }
}

void withdraw(std::span<EnvControl* const> envs) noexcept {
  for (EnvControl* c : envs) {
    c->limiter_reserved.store(c->head.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
}

void forget_dead_waiting(std::span<EnvControl* const> envs) noexcept {
  for (EnvControl* c : envs) c->limiter_waiting_since_ns.store(0, std::memory_order_relaxed);
}

}  // namespace shmreplay::detail
