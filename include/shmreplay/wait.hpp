// shmreplay/wait.hpp: what the library's blocking calls do with a timeout, and how a caller interrupts one.
//
// The blocking calls: a push, push_one or reserve of a Writer made with WriterOptions::wait_for_rate_limit (up to
// rate_limit_timeout_ms), a sample call that the rate limiter holds back (SampleOptions::rate_limit_timeout_ms),
// Sampler::wait (timeout_ms) and Buffer::open's wait for a creator that has not finished (ready_timeout_ms).
// docs/design/waits.md, "Blocking waits", has the protocol.
//
// Timeouts: every timeout is a whole number of milliseconds, and any value is a wait of that length: the deadline
// is now + timeout clamped at the steady clock's last instant (deadline_after_ms), about 292 years after boot, so a
// large timeout never wraps into the past. kWaitForever, the largest, is the way to say "no timeout".
//
// Interrupts: a wait sleeps in slices of at most its re-check period (50 ms), and between two slices it calls the
// calling thread's InterruptCheck, if one is installed. A check that throws ends the wait with that exception; the
// call has then written nothing (a push is whole or nothing) and left no waiter counted. The Python module
// installs one that raises KeyboardInterrupt on Ctrl-C.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>

namespace shmreplay {

/// A timeout (in milliseconds) that never runs out: the largest value, whose deadline is the clock's last instant.
inline constexpr uint64_t kWaitForever = std::numeric_limits<uint64_t>::max();

/// The deadline of a wait that starts at `now` and lasts `timeout_ms`: now + timeout_ms, saturated at
/// steady_clock::time_point::max() (so kWaitForever, or 10^10 s, is that instant, never a time in the past).
/// Every blocking call of the library computes its deadline here.
inline std::chrono::steady_clock::time_point deadline_after_ms(
    uint64_t timeout_ms, std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) noexcept {
  using Clock = std::chrono::steady_clock;
  using Ticks = Clock::duration;
  // Ticks left until the clock's last instant; steady_clock counts from boot, so now is not negative.
  const auto room = static_cast<uint64_t>((Clock::time_point::max() - now).count());
  constexpr auto ticks_per_ms = static_cast<uint64_t>(std::chrono::duration_cast<Ticks>(std::chrono::milliseconds(1)).count());
  if (timeout_ms >= room / ticks_per_ms) return Clock::time_point::max();
  return now + Ticks(static_cast<Ticks::rep>(timeout_ms * ticks_per_ms));
}

/// Installs a check that the blocking waits of this thread call between their slices (at most every re-check
/// period, 50 ms), for as long as the object lives: `check(context)` returns to go on waiting, or throws to end
/// the wait with its exception. The innermost live InterruptCheck of a thread is the one called; each restores the
/// one before it when destroyed. A check runs on the waiting thread, holding whatever the waiting call holds (for
/// a Writer, nothing that another thread's push needs). Not copyable; destroy it on the thread that made it.
class InterruptCheck {
 public:
  /// A check: returns to let the wait go on, or throws to end it.
  using Function = void (*)(void* context);
  /// Installs `check`, called with `context`, as this thread's innermost check until this object is destroyed.
  InterruptCheck(Function check, void* context) noexcept;
  ~InterruptCheck();
  InterruptCheck(const InterruptCheck&) = delete;
  InterruptCheck& operator=(const InterruptCheck&) = delete;

  /// Calls this thread's innermost check, if any (may throw what it throws). Called by the waits between slices.
  static void run();

 private:
  Function check_;
  void* context_;
  InterruptCheck* outer_;
};

}  // namespace shmreplay
