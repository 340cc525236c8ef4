// detail/protocol/wake.hpp: blocking waits across processes, both halves of each handshake (the waker's notify, the
// sleeper's sleep_until) on a sequence word whose low 32 bits are a process-shared futex word. docs/design/waits.md,
// "Blocking waits", has the argument that no wake-up is lost. The sleeping places (besides the policy
// window's, detail/protocol/policy.hpp, a WakeWord too):
// - the learners' (GlobalControl line 2: wake_seq and `waiters`, a count; layout 1.7: and each learner slot's own
//   count): the learners sleep, writers wake them after publishing. A learner killed while it sleeps leaves both
//   counts raised; the next learner of its slot subtracts the slot's count from the global one when it takes the
//   slot over (forget_waiters), which leaves the other slots' sleepers counted.
// - the rate-limited writers' (GlobalControl lines 5-6: writer_wake_seq and writer_recheck_by_ns, a promise):
//   any number of writer processes sleep, the learner wakes them after its samples (detail/protocol/rate_limit).
//   A count could not be repaired here (a writer killed while it sleeps is not replaced as the learner is), so
//   each sleeper promises instead to re-check by a time, and the learner wakes only while a promise is pending:
//   a dead sleeper's promise runs out by itself, two re-check periods after its last.
// - the reanalyse workers' (WalkControl: wake_seq and waiters, and each worker slot's own count; detail/protocol/
//   walk.hpp's walk_wake): a count like the learners', repaired when a dead worker's slot is (walk_repair_slot).
//
// Who calls what, and what is safe across processes:
//   notify_waiters      every Writer, after the head stores of a push call; any number of writer processes at
//                       once. One load, a seq_cst fence only in a process the kernel would not register for
//                       membarrier's expedited barriers (detail/os/membarrier.hpp), and a system call only while
//                       a learner waits.
//   sleep_until         a learner (Sampler::wait, a sample call held back by the limiter), any number at once,
//   (learner_wake)      each counted in its slot's word too; one membarrier system call per wait (heavy_fence).
//   forget_waiters      a learner that took over a dead learner's slot; a reanalyse worker (or a scan) that
//                       repairs a dead worker's slot (detail/protocol/walk: the walk's sleeping place is a
//                       WakeWord of the same kind, walk_wake).
//   notify_writers      the learner, after counting its samples (count_samples): one fence and one load, and a
//                       system call only while a waiting writer's promise is pending.
//   wake_all_writers    a change of the rate limiter's settings (store_rate_limit).
//   sleep_until         a writer waiting for the limiter (on writer_wake(g)), and both learner waits (above).
// Waits sleep in slices of at most recheck_period(), re-check their condition between slices, and run the calling
// thread's shmreplay::InterruptCheck there (the Python module's Ctrl-C check); an exception from it or from
// `ready` ends the wait and takes its registration back.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "detail/os/futex.hpp"
#include "detail/os/membarrier.hpp"
#include "detail/os/process.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay::detail {

using SteadyClock = std::chrono::steady_clock;

/// A learner's re-check period where the kernel refuses the heavy fence (sleep_until): the longest a wake-up that a
/// registered waker left out can be late.
inline constexpr uint64_t kFallbackSliceNs = 1'000'000;

/// The longest a wait sleeps before it re-checks its condition by itself: 50 ms, or SHMREPLAY_RECHECK_MS
/// (1 to 3,600,000) where the environment sets it. Read at the start of each wait. The variable is for tests and
/// diagnosis: with a long period, a wake-up that does not come shows (a 50 ms re-check hides it).
inline uint64_t recheck_period_ns() noexcept {
  constexpr uint64_t kDefaultNs = 50'000'000;
  const char* text = std::getenv("SHMREPLAY_RECHECK_MS");
  if (text == nullptr || *text == '\0') return kDefaultNs;
  char* end = nullptr;
  const unsigned long long ms = std::strtoull(text, &end, 10);
  if (*end != '\0' || ms < 1 || ms > 3'600'000) return kDefaultNs;
  return static_cast<uint64_t>(ms) * 1'000'000;
}

/// The loop both kinds of sleeper run: before each check, `promise(slice_ns)` (the sleeper's seq_cst half of the
/// handshake, when it has one per round), then read the sequence, then ready(); if not ready and the deadline is
/// not past, the thread's InterruptCheck, then FUTEX_WAIT on the sequence read, for at most one slice. Returns
/// whether ready() held.
template <class Promise, class Ready>
bool sleep_loop(std::atomic<uint64_t>& seq, SteadyClock::time_point deadline, Promise&& promise, Ready&& ready,
                uint64_t max_slice_ns = UINT64_MAX) {
  const uint64_t slice_ns = std::min(recheck_period_ns(), max_slice_ns);
  for (;;) {
    promise(slice_ns);
    // seq_cst: pairs with the waker's release increment of seq; read before re-checking the condition, so a wake
    // after the check changes the word and FUTEX_WAIT returns at once.
    const auto s = static_cast<uint32_t>(seq.load(std::memory_order_seq_cst));
    if (ready()) return true;
    const auto now = SteadyClock::now();
    if (now >= deadline) return false;
    InterruptCheck::run();  // may throw: the wait ends with the caller's interrupt
    const auto left =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count());
    futex_wait(seq, s, std::min(left, slice_ns));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The learner's sleeping place: a count of sleepers (there is one learner)

/// A sequence word and the count of processes sleeping on it (GlobalControl's wake_seq and waiters), and where the
/// sleeper counts itself as well (its learner slot's own count; layout 1.7), if anywhere.
struct WakeWord {
  std::atomic<uint64_t>& seq;
  std::atomic<uint64_t>& waiters;
  std::atomic<uint64_t>* own = nullptr;
};

/// Waker side: wakes whoever sleeps on `w`. Call after the stores that the sleepers' condition reads. `fenced`:
/// false only for a waker whose process registered for the sleepers' heavy fence (register_light_fence).
inline void notify(WakeWord w, bool fenced = true) noexcept {
  if (fenced) {
    // seq_cst fence: orders the waker's stores (heads) before the load of `waiters`; pairs with the sleeper's
    // seq_cst increment of `waiters` in sleep_until before it re-reads its condition. Either we see its increment
    // and wake it, or it sees our stores: no lost wake-up.
    std::atomic_thread_fence(std::memory_order_seq_cst);
  } else {
    // Compiler-only fence: the sleeper's heavy_fence in sleep_until, after its increment, makes this thread execute
    // the seq_cst fence above at some instruction boundary; before our load, or after our stores (waits.md).
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  if (w.waiters.load(std::memory_order_relaxed) != 0) {
    // release: pairs with the sleeper's seq_cst load of seq before it sleeps (FUTEX_WAIT compares it).
    w.seq.fetch_add(1, std::memory_order_release);
    futex_wake_all(w.seq);
  }
}

/// Sleeper side: counted in `waiters` while it waits (also when ready() or an interrupt throws), blocks until
/// ready() holds or `deadline` passes, and returns whether ready() held.
template <class Ready>
bool sleep_until(WakeWord w, SteadyClock::time_point deadline, Ready&& ready) {
  // seq_cst: pairs with the waker's seq_cst fence in notify between its stores and its load of `waiters`.
  w.waiters.fetch_add(1, std::memory_order_seq_cst);
  // The slot's own count is raised after the global one and lowered before it, so it never exceeds this sleeper's
  // part of the global count: a successor that subtracts it after this learner died at any instruction takes back
  // at most what was added (at worst one less, which costs a futex wake per push, never a lost wake-up). Relaxed: a
  // count for repair, read only by a successor after its lease CAS.
  if (w.own != nullptr) w.own->fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    WakeWord w;
    ~Leave() {
      if (w.own != nullptr) w.own->fetch_sub(1, std::memory_order_relaxed);
      w.waiters.fetch_sub(1, std::memory_order_relaxed);
    }
  } leave{w};
  // The fence of the wakers that leave theirs out (notify with fenced = false), executed in their threads now: after
  // it, each such waker's later loads of `waiters` see our increment, or its stores are visible to our re-check.
  // Where the kernel refuses, such a waker's wake-up may be missed: re-check every kFallbackSliceNs instead.
  const bool fenced = heavy_fence();
  return sleep_loop(w.seq, deadline, [](uint64_t) {}, std::forward<Ready>(ready),
                    fenced ? UINT64_MAX : kFallbackSliceNs);
}

inline WakeWord learner_wake(layout::GlobalControl& g) noexcept { return {g.wake_seq, g.waiters}; }
/// A learner's sleeping place, counted in its slot's own word `slot_waiters` too (learner_slots.hpp).
inline WakeWord learner_wake(layout::GlobalControl& g, std::atomic<uint64_t>& slot_waiters) noexcept {
  return {g.wake_seq, g.waiters, &slot_waiters};
}

/// Writer side: wakes the learner if it is waiting. Call after the release stores of head that the learner's
/// condition reads.
inline void notify_waiters(layout::GlobalControl& g, bool fenced = true) noexcept { notify(learner_wake(g), fenced); }

/// Takes back the waiter counts left raised by a learner that died while waiting in slot `slot_waiters` (its slot's
/// own count): subtracts them from the global count and zeroes the slot's. The other slots' sleepers stay counted.
/// Precondition: the caller has just taken over the slot from a dead holder (nobody else changes its count).
inline void forget_waiters(std::atomic<uint64_t>& waiters, std::atomic<uint64_t>& slot_waiters) noexcept {
  const uint64_t dead = slot_waiters.exchange(0, std::memory_order_relaxed);
  if (dead != 0) waiters.fetch_sub(dead, std::memory_order_relaxed);
}
inline void forget_waiters(layout::GlobalControl& g, std::atomic<uint64_t>& slot_waiters) noexcept {
  forget_waiters(g.waiters, slot_waiters);
}

// ---------------------------------------------------------------------------------------------------------------
// The waiting writers' sleeping place: a promise to re-check (any number of writers, any of which may die)

/// A sequence word and the latest time (CLOCK_MONOTONIC ns) by which some sleeper on it promised to re-check its
/// condition by itself (GlobalControl's writer_wake_seq and writer_recheck_by_ns). The promise only grows.
struct PromiseWord {
  std::atomic<uint64_t>& seq;
  std::atomic<uint64_t>& recheck_by_ns;
};

inline PromiseWord writer_wake(layout::GlobalControl& g) noexcept {
  return {g.writer_wake_seq, g.writer_recheck_by_ns};
}

/// Sleeper side, once per round, before it reads the sequence and re-checks: raises the promise to at least
/// now + two slices (it will have re-checked by then, unless it stopped or died). Always a read-modify-write,
/// also when the promise is already later.
inline void promise_recheck(PromiseWord w, uint64_t slice_ns) noexcept {
  const uint64_t until = monotonic_ns() + 2 * slice_ns;
  uint64_t seen = w.recheck_by_ns.load(std::memory_order_relaxed);
  // seq_cst: pairs with the waker's seq_cst fence in notify_writers between its stores (the sample count) and its
  // load of the promise. A successful CAS is a read-modify-write even when it stores the value it read, so either
  // the waker reads this promise (or a later one: it only grows) or this sleeper's re-check reads the waker's
  // stores.
  while (!w.recheck_by_ns.compare_exchange_weak(seen, std::max(seen, until), std::memory_order_seq_cst,
                                                std::memory_order_relaxed)) {
  }
}

/// Sleeper side: promises to re-check each round, blocks until ready() holds or `deadline` passes, and returns
/// whether ready() held. Leaves nothing to take back: its promise runs out by itself.
template <class Ready>
bool sleep_until(PromiseWord w, SteadyClock::time_point deadline, Ready&& ready) {
  return sleep_loop(w.seq, deadline, [w](uint64_t slice_ns) { promise_recheck(w, slice_ns); },
                    std::forward<Ready>(ready));
}

/// Waker side: wakes the sleepers on `w` if a promise is pending at `now_ns` (CLOCK_MONOTONIC; a coarse clock
/// does, since it lags). Call after the stores that the sleepers' condition reads. A sleeper whose promise has
/// passed is not asleep, or not running: it re-checks by itself when it runs, so no wake-up is lost, and a dead
/// sleeper costs the waker nothing once its promise has passed.
inline void notify(PromiseWord w, uint64_t now_ns) noexcept {
  // seq_cst fence: pairs with the sleeper's seq_cst CAS in promise_recheck (see there).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (w.recheck_by_ns.load(std::memory_order_relaxed) > now_ns) {
    // release: pairs with the sleeper's seq_cst load of seq before it sleeps (FUTEX_WAIT compares it).
    w.seq.fetch_add(1, std::memory_order_release);
    futex_wake_all(w.seq);
  }
}

/// Wakes every sleeper on `w`, pending promise or not (a change of the settings: rare, and their condition changed).
inline void wake_all(PromiseWord w) noexcept {
  // seq_cst fence: as in notify: orders the settings' stores before the increment that a sleeper reads.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  w.seq.fetch_add(1, std::memory_order_release);  // release: pairs with the sleeper's seq_cst load of seq
  futex_wake_all(w.seq);
}

}  // namespace shmreplay::detail
