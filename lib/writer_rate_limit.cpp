// lib/writer_rate_limit.cpp: the writer's half of the rate limiter (detail/protocol/rate_limit.hpp): a push or
// reserve of a Writer made with wait_for_rate_limit waits until the limiter admits its steps, woken by the learner
// across processes, and gives up after the writer's timeout with Error(rate_limited) saying why (the limiter's
// error, and what the learner is doing). The learner's half is Sampler::wait_for_rate_limit
// (lib/sampler_rate_limit.cpp).
//
// Who calls it: the push paths (writer_push.cpp), before they claim anything.
#include <atomic>
#include <string>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/protocol/wake.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay {

namespace {

// What the learners are doing, for the message of a writer that gave up: the first live learner's state, or why
// there is none (layout 1.7: any slot's).
std::string learner_state_text(const Segment& segment) {
  const layout::GlobalControl& g = segment.global_control();
  uint64_t lease = 0;
  uint64_t waiting_rows = 0;
  uint64_t dead = 0;  // a dead holder's lease word
  uint64_t live = 0;
  for (uint64_t slot = 0; slot < segment.max_learners(); ++slot) {
    const auto me = detail::learner_slot(segment, slot);
    const uint64_t l = me.lease.lease.load(std::memory_order_relaxed);
    if (l == 0) continue;
    if (!detail::lease_holder_alive(l)) {
      if (dead == 0) dead = l;
      continue;
    }
    if (live++ == 0) {
      lease = l;
      waiting_rows = me.waiting_rows.load(std::memory_order_relaxed);
    }
  }
  if (lease == 0) {
    return dead != 0 ? fmt::format("the learner (pid {}) is dead", layout::owner_pid(dead)) : "no learner is attached";
  }
  const std::string who = live == 1 ? fmt::format("the learner (pid {})", layout::owner_pid(lease))
                                    : fmt::format("{} learners (pid {}, ...)", live, layout::owner_pid(lease));
  const uint64_t last = g.last_sample_ns.load(std::memory_order_relaxed);
  const uint64_t now = detail::realtime_ns();
  const char* are = live == 1 ? "is" : "are";
  std::string text = last == 0 ? fmt::format("{} {} alive and {} not sampled yet", who, are, live == 1 ? "has" : "have")
                               : fmt::format("{} {} alive and last sampled {:.1f} s ago", who, are,
                                             static_cast<double>(now > last ? now - last : 0) / 1e9);
  if (waiting_rows != 0) {
    text += fmt::format(", and {} itself waiting for the limiter to admit {} rows", live == 1 ? "is" : "one is",
                        waiting_rows);
  }
  return text;
}

}  // namespace

void Writer::wait_for_rate_limit(const char* op) {
  if (admit_envs_.empty()) return;  // a push of no steps inserts nothing
  layout::GlobalControl& g = segment_of(*buffer_).global_control();
  auto settings = detail::load_rate_limit(g);
  if (!settings) return;
  detail::RateLimitVerdict verdict = detail::try_admit(segment_of(*buffer_), *settings, admit_envs_);
  if (verdict.allowed()) return;
  g.writers_limited.fetch_add(1, std::memory_order_relaxed);
  const auto deadline = deadline_after_ms(options_.rate_limit_timeout_ms);
  bool admitted = false;
  {
    // Counted as waiting (info, the learner's messages) while this call sleeps, through the first env of the push.
    // An interrupt (InterruptCheck, between slices) leaves by exception with nothing admitted: try_admit returns
    // only "admitted" (then ready() is true and no check follows) or "held back" (nothing reserved).
    const detail::WaitingMark mark(*admit_envs_.front(), detail::realtime_ns());
    admitted = detail::sleep_until(
        detail::writer_wake(g), deadline,
        [&] {
          settings = detail::load_rate_limit(g);
          if (!settings) return true;  // the limiter was removed meanwhile
          verdict = detail::try_admit(segment_of(*buffer_), *settings, admit_envs_);
          return verdict.allowed();
        });
  }
  if (admitted) return;
  g.writer_timeouts.fetch_add(1, std::memory_order_relaxed);
  const RateLimit& limit = settings->limit;
  const uint64_t k = admit_envs_.size();
  std::string why = fmt::format(
      "the error (inserts x samples_per_insert - samples) is {:g}, and {} more step{} would take it above max_diff "
      "{:g} ({})",
      verdict.error, k, k == 1 ? "" : "s", limit.max_diff, limit.to_string());
  const uint64_t waiting_rows = g.learner_waiting_rows.load(std::memory_order_relaxed);
  if (waiting_rows != 0 && static_cast<double>(waiting_rows) + static_cast<double>(k) * limit.samples_per_insert >
                               limit.max_diff - limit.min_diff) {
    why += fmt::format("; a batch of {} rows and a push of {} steps can never both pass: the error buffer must be at "
                       "least {:g}",
                       waiting_rows, k,
                       (static_cast<double>(waiting_rows) + static_cast<double>(k) * limit.samples_per_insert) / 2);
  }
  throw Error(Errc::rate_limited,
              fmt::format("cannot {} '{}': the rate limiter held this push of {} step{} back for {} ms (the writer's "
                          "timeout): {}; {}. Nothing was written. To go on without waiting, set the writer's "
                          "wait_for_rate_limit to false",
                          op, buffer_->name(), k, k == 1 ? "" : "s", options_.rate_limit_timeout_ms, why,
                          learner_state_text(segment_of(*buffer_))));
}

}  // namespace shmreplay
