// detail/test_hooks.hpp: instants of a protocol at which a test makes a process act or die (a learner paused
// between its rate-limiter reservation and its draw; a learner killed inside its update section after a field; a
// repairer paused between its judgement of a dead updater and its takeover of the slot).
// Each hook is a function pointer, null outside the tests that set it: where it is called that costs one relaxed
// load and a branch that is never taken. Who sets them: tests only (tests/test_online_reset.cpp,
// tests/learners/dead_updater.cpp), in the process whose protocol they stop; nothing in the library sets one.
#pragma once

#include <atomic>

namespace shmreplay::detail::test_hooks {

using Hook = void (*)();

/// Called by a sample call right after the rate limiter admitted (and reserved) its rows, before it draws them.
extern std::atomic<Hook> after_reservation;
/// Called by try_update inside its update section, after each field's bytes are stored.
extern std::atomic<Hook> in_update_section;
/// Called by repair_dead_updater after it judged the lock's holder dead, before it takes the dead slot's lease.
extern std::atomic<Hook> before_repair_lease;
/// Called by release_dead_update_lock when it found the lock free (a dead load's section), before it takes the lock.
extern std::atomic<Hook> in_dead_load_repair;

/// Calls `hook` if a test set it.
inline void call(const std::atomic<Hook>& hook) noexcept {
  if (const Hook h = hook.load(std::memory_order_relaxed); h != nullptr) [[unlikely]] h();
}

}  // namespace shmreplay::detail::test_hooks
