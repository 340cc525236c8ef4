#include "detail/protocol/lease.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "shmreplay/internal/layout.hpp"

namespace shmreplay::detail {

bool lease_holder_alive(uint64_t lease) noexcept {
  return process_alive(layout::owner_pid(lease), layout::owner_start_low(lease), /*low32_only=*/true);
}

uint64_t self_lease_word() noexcept {
  return layout::pack_owner(static_cast<uint64_t>(::getpid()), self_start_ticks());
}

LeaseResult try_take_lease_word(std::atomic<uint64_t>& word, uint64_t me) noexcept {
  uint64_t cur = word.load(std::memory_order_acquire);  // pairs with the release CAS/store of the holder
  for (;;) {
    if (cur == me) return {LeaseOutcome::held_by_us, cur, 0};
    const bool dead = cur != 0 && !lease_holder_alive(cur);
    if (cur != 0 && !dead) return {LeaseOutcome::held_alive, cur, 0};
    // acq_rel: acquire pairs with the previous holder's release (its last writes happen-before our first);
    // release publishes our claim to the next taker.
    if (word.compare_exchange_strong(cur, me, std::memory_order_acq_rel, std::memory_order_acquire)) {
      return dead ? LeaseResult{LeaseOutcome::taken_over, cur, 0} : LeaseResult{LeaseOutcome::taken, 0, 0};
    }
    // Someone else changed the word between our load and CAS: judge the new value.
  }
}

LeaseResult try_take_lease(const LeaseWords& w, uint64_t me) noexcept {
  LeaseResult r = try_take_lease_word(w.lease, me);
  switch (r.outcome) {
    case LeaseOutcome::held_by_us:
    case LeaseOutcome::held_alive: r.holder_start_ticks = w.start_ticks.load(std::memory_order_relaxed); break;
    case LeaseOutcome::taken_over: w.takeovers.fetch_add(1, std::memory_order_relaxed); [[fallthrough]];
    case LeaseOutcome::taken:
      w.start_ticks.store(self_start_ticks(), std::memory_order_relaxed);
      w.since_ns.store(realtime_ns(), std::memory_order_relaxed);
      break;
  }
  return r;
}

void release_lease_word(std::atomic<uint64_t>& word, uint64_t me) noexcept {
  uint64_t expected = me;
  // release: pairs with the acquire of the next taker's CAS, so our writes happen-before its writes.
  word.compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed);
}

std::string holder_text(uint64_t lease, uint64_t start_ticks) {
  return fmt::format("pid {} (start time {} ticks after boot)", layout::owner_pid(lease),
                     start_ticks != 0 ? start_ticks : layout::owner_start_low(lease));
}

std::string env_lease_problem(const std::string& name, uint64_t env, const LeaseResult& r) {
  if (r.outcome == LeaseOutcome::held_by_us) {
    return fmt::format("cannot lease env {} of '{}': this process ({}) already leases it through another Writer; an "
                       "env has one writer at a time",
                       env, name, holder_text(r.holder_lease, r.holder_start_ticks));
  }
  if (r.outcome == LeaseOutcome::held_alive) {
    return fmt::format("cannot lease env {} of '{}': it is leased by {}, which is alive; an env has one writer at a "
                       "time",
                       env, name, holder_text(r.holder_lease, r.holder_start_ticks));
  }
  return {};
}

}  // namespace shmreplay::detail
