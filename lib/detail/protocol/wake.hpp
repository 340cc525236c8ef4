// detail/protocol/wake.hpp: the learner's blocking wait and the writers' wake-up, both halves of one handshake on
// layout::GlobalControl's line 2 (`waiters`, and `wake_seq`, whose low 32 bits are a process-shared futex word).
// docs/design.md, "Blocking waits", has the argument that no wake-up is lost.
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

#include "detail/os/futex.hpp"
#include "shmreplay/layout.hpp"

namespace shmreplay::detail {

/// Writer side: wakes the learner if it is waiting. Call after the release stores of head that the learner's
/// condition reads.
inline void notify_waiters(layout::GlobalControl& g) noexcept {
  // seq_cst fence: orders the head stores before the load of `waiters`; pairs with the learner's seq_cst
  // increment of `waiters` in wait_until before it re-reads the heads. Either we see its increment and wake it,
  // or it sees our heads: no lost wake-up.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g.waiters.load(std::memory_order_relaxed) != 0) {
    // release: pairs with the waiter's seq_cst load of wake_seq before it sleeps (FUTEX_WAIT compares it).
    g.wake_seq.fetch_add(1, std::memory_order_release);
    futex_wake_all(g.wake_seq);
  }
}

/// Learner side: blocks until ready() holds or `deadline` passes, and returns whether ready() held. ready() reads
/// the heads (acquire); it is called at least every 50 ms, so a writer that stops or dies cannot hold the learner
/// past its deadline.
template <class Ready>
bool wait_until(layout::GlobalControl& g, std::chrono::steady_clock::time_point deadline, Ready&& ready) {
  using Clock = std::chrono::steady_clock;
  // seq_cst: pairs with the writers' seq_cst fence in notify_waiters between their head stores and their load of
  // `waiters`.
  g.waiters.fetch_add(1, std::memory_order_seq_cst);
  bool ok = false;
  for (;;) {
    // seq_cst: pairs with the writers' release increment of wake_seq in notify_waiters; read before re-checking
    // the heads, so a wake after the check changes the word and FUTEX_WAIT returns at once.
    const auto seq = static_cast<uint32_t>(g.wake_seq.load(std::memory_order_seq_cst));
    if (ready()) {
      ok = true;
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
    futex_wait(g.wake_seq, seq, std::min<uint64_t>(static_cast<uint64_t>(left), 50'000'000ull));
  }
  g.waiters.fetch_sub(1, std::memory_order_relaxed);
  return ok;
}

/// Resets the waiter count left raised by a learner that died while waiting. Precondition: the caller has just
/// taken over the learner lease from a dead holder (only the learner waits).
inline void forget_waiters(layout::GlobalControl& g) noexcept { g.waiters.store(0, std::memory_order_relaxed); }

}  // namespace shmreplay::detail
