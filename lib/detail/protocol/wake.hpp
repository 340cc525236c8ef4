// detail/protocol/wake.hpp: blocking waits across processes, both halves of one handshake (notify and
// sleep_until) on a WakeWord: a sequence word whose low 32 bits are a process-shared futex word, and a waiter
// count. docs/design.md, "Blocking waits", has the argument that no wake-up is lost. Two wake words exist: the
// learner's (GlobalControl line 2) and the rate-limited writers' (lines 5-6; detail/protocol/rate_limit.hpp).
//
// Who calls what, and what is safe across processes:
//   notify_waiters   every Writer, after the head stores of a push call (push, push_one, commit); any number of
//                    writer processes at once. One seq_cst fence, and a system call only while someone waits.
//   wait_until       the learner (Sampler::wait); one learner per segment (the learner lease).
//   forget_waiters   a learner that took over a dead learner's lease, whose waiter count would otherwise stay
//                    raised (and make every push issue a futex wake).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

#include "detail/os/futex.hpp"
#include "shmreplay/layout.hpp"

namespace shmreplay::detail {

/// One sleeping place in the segment: a sequence word whose low 32 bits are a process-shared futex word, and the
/// count of processes sleeping on it. Two exist: GlobalControl's wake_seq/waiters (the learner sleeps, writers
/// wake it after publishing) and writer_wake_seq/writer_waiters (writers held back by the rate limiter sleep, the
/// learner wakes them after its samples let them in; detail/protocol/rate_limit.hpp).
struct WakeWord {
  std::atomic<uint64_t>& seq;
  std::atomic<uint64_t>& waiters;
};

/// Waker side: wakes whoever sleeps on `w`. Call after the stores that the sleepers' condition reads.
inline void notify(WakeWord w) noexcept {
  // seq_cst fence: orders the waker's stores (heads; the sample count) before the load of `waiters`; pairs with
  // the sleeper's seq_cst increment of `waiters` in sleep_until before it re-reads its condition. Either we see
  // its increment and wake it, or it sees our stores: no lost wake-up.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (w.waiters.load(std::memory_order_relaxed) != 0) {
    // release: pairs with the sleeper's seq_cst load of seq before it sleeps (FUTEX_WAIT compares it).
    w.seq.fetch_add(1, std::memory_order_release);
    futex_wake_all(w.seq);
  }
}

/// Sleeper side: blocks until ready() holds or `deadline` passes, and returns whether ready() held. ready() is
/// called at least every 50 ms, so a waker that stops or dies cannot hold the sleeper past its deadline; between
/// checks, `idle()` runs (nothing by default: liveness checks, progress reports).
template <class Ready, class Idle>
bool sleep_until(WakeWord w, std::chrono::steady_clock::time_point deadline, Ready&& ready, Idle&& idle) {
  using Clock = std::chrono::steady_clock;
  // seq_cst: pairs with the waker's seq_cst fence in notify between its stores and its load of `waiters`.
  w.waiters.fetch_add(1, std::memory_order_seq_cst);
  bool ok = false;
  for (;;) {
    // seq_cst: pairs with the waker's release increment of seq in notify; read before re-checking the condition,
    // so a wake after the check changes the word and FUTEX_WAIT returns at once.
    const auto seq = static_cast<uint32_t>(w.seq.load(std::memory_order_seq_cst));
    if (ready()) {
      ok = true;
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    idle();
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
    futex_wait(w.seq, seq, std::min<uint64_t>(static_cast<uint64_t>(left), 50'000'000ull));
  }
  w.waiters.fetch_sub(1, std::memory_order_relaxed);
  return ok;
}

inline WakeWord learner_wake(layout::GlobalControl& g) noexcept { return {g.wake_seq, g.waiters}; }

/// Writer side: wakes the learner if it is waiting. Call after the release stores of head that the learner's
/// condition reads.
inline void notify_waiters(layout::GlobalControl& g) noexcept { notify(learner_wake(g)); }

/// Learner side: blocks until ready() holds or `deadline` passes, and returns whether ready() held. ready() reads
/// the heads (acquire).
template <class Ready>
bool wait_until(layout::GlobalControl& g, std::chrono::steady_clock::time_point deadline, Ready&& ready) {
  return sleep_until(learner_wake(g), deadline, std::forward<Ready>(ready), [] {});
}

/// Resets the waiter count left raised by a learner that died while waiting. Precondition: the caller has just
/// taken over the learner lease from a dead holder (only the learner waits).
inline void forget_waiters(layout::GlobalControl& g) noexcept { g.waiters.store(0, std::memory_order_relaxed); }

}  // namespace shmreplay::detail
