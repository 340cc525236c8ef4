// lib/writer_queue.cpp: the writer's half of the consuming queue (detail/protocol/consume.hpp;
// docs/design/consuming_queue.md): before a push writes anything, each env's next step must find its ring slot's
// step delivered; a push that finds one not delivered waits (WriterOptions::queue_timeout_ms) on the blocked
// writers' promise word, woken by the learners' deliveries, counted per env; a claim of a dead learner it waits on
// is repaired (given back or delivered) instead of holding it. Then the call takes its insertion ticket.
//
// Who calls it: push_impl and reserve (writer_push.cpp), before they claim anything.
#include <atomic>
#include <chrono>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/consume.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay {

void Writer::admit_queue(std::size_t n, const char* op) {
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t env = envs_[locals_[i]];
    // relaxed: only this writer stores the env's head.
    const uint64_t step = control_[locals_[i]]->head.load(std::memory_order_relaxed);
    if (!detail::slot_consumed(cap_words_ + env * capacity_, capacity_, step)) {
      wait_for_queue(n, i, op);
      break;
    }
  }
  ticket_ = seg_->queue_control().tickets.fetch_add(1, std::memory_order_relaxed);
}

void Writer::wait_for_queue(std::size_t n, std::size_t blocked, const char* op) {
  layout::QueueControl& q = seg_->queue_control();
  const uint64_t first_env = envs_[locals_[blocked]];
  layout::QueueEnv& qe = seg_->queue_env(first_env);
  qe.blocked_pushes.fetch_add(1, std::memory_order_relaxed);
  qe.blocked_since_ns.store(detail::realtime_ns(), std::memory_order_relaxed);
  // release: pairs with a consuming call's acquire load: a call that sees the count sees the env's mark, and may
  // return fewer rows than it asks for (the steps it waits for may be this writer's oldest); it is woken for that.
  q.writers_blocked.fetch_add(1, std::memory_order_release);
  detail::notify_waiters(seg_->global_control());
  const auto start = std::chrono::steady_clock::now();
  uint64_t next_repair_ns = 0;  // a dead claimer is looked for at most every millisecond (a /proc read)
  std::size_t stuck = blocked;  // the position whose env was not consumed at the last check
  auto consumed = [&] {
    for (std::size_t i = 0; i < n; ++i) {
      const uint64_t env = envs_[locals_[i]];
      const uint64_t step = control_[locals_[i]]->head.load(std::memory_order_relaxed);
      if (detail::slot_consumed(cap_words_ + env * capacity_, capacity_, step)) continue;
      stuck = i;
      const uint64_t w = cap_words_[env * capacity_ + step % capacity_].load(std::memory_order_relaxed);
      const uint64_t now = detail::monotonic_ns();
      if (layout::queue_is_pending(w) && now >= next_repair_ns) {  // a learner killed in its call holds it?
        next_repair_ns = now + 1'000'000;
        if (detail::repair_dead_claimer(*seg_, layout::queue_pending_slot(w)) &&
            detail::slot_consumed(cap_words_ + env * capacity_, capacity_, step)) {
          continue;  // its call had committed: the repair delivered the step
        }
      }
      return false;
    }
    return true;
  };
  bool ok = false;
  {
    struct Done {  // the wait ends however it does (an interrupt throws out of it)
      layout::QueueEnv& qe;
      std::chrono::steady_clock::time_point start;
      ~Done() {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
        qe.blocked_ns.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
        qe.blocked_since_ns.store(0, std::memory_order_relaxed);
      }
    } done{qe, start};
    ok = detail::sleep_until(detail::queue_writer_wake(q), deadline_after_ms(options_.queue_timeout_ms), consumed);
  }
  if (ok) return;
  q.writer_timeouts.fetch_add(1, std::memory_order_relaxed);
  qe.timeouts.fetch_add(1, std::memory_order_relaxed);
  const uint64_t env = envs_[locals_[stuck]];
  const uint64_t step = control_[locals_[stuck]]->head.load(std::memory_order_relaxed);
  const uint64_t w = cap_words_[env * capacity_ + step % capacity_].load(std::memory_order_relaxed);
  const std::string state = layout::queue_is_pending(w)
                                ? fmt::format("claimed by learner slot {}, whose call has not ended",
                                              layout::queue_pending_slot(w))
                                : std::string("not yet delivered to any learner");
  throw Error(Errc::rate_limited,
              fmt::format("cannot {} env {} of '{}': it is a consuming queue, and the ring slot of its next step {} "
                          "holds step {}, {}; waited {} ms, nothing written. Consume faster (sample calls with "
                          "consume), or create the queue with a larger capacity than {} steps per env",
                          op, env, buffer_->name(), step, step - capacity_, state, options_.queue_timeout_ms,
                          capacity_));
}

}  // namespace shmreplay
