#include "detail/protocol/env_takeover.hpp"

#include "detail/protocol/episodes.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/sequence_priorities.hpp"
#include "detail/protocol/rate_limit.hpp"

namespace shmreplay::detail {

void repair_env_takeover(Segment& seg, std::span<const uint64_t> envs, EnvTakeover who) noexcept {
  // The limiter's new-owner steps: a dead predecessor's admissions of steps it never published go, and so does its
  // mark of a wait (rate_limit.hpp).
  for (const uint64_t e : envs) {
    layout::EnvControl* c = &seg.env_control(e);
    withdraw(std::span<layout::EnvControl* const>(&c, 1));
    forget_dead_waiting(std::span<layout::EnvControl* const>(&c, 1));
  }
  if (who == EnvTakeover::load) return;
  if (seg.has_episodes()) {
    for (const uint64_t e : envs) recover_env(seg, e);
  }
  if (seg.has_priorities()) {
    // A predecessor killed between its claim and its head store may have died inside the walk of the slot it was
    // writing: redo that walk (priorities.hpp). Outside a write (claimed == head) its last walk was complete.
    for (const uint64_t e : envs) {
      const layout::EnvControl& c = seg.env_control(e);
      const uint64_t head = c.head.load(std::memory_order_acquire);  // pairs with publish_step's release store
      if ((c.claimed.load(std::memory_order_relaxed) & layout::kClaimMask) != head) {
        walk(priority_tree_of(seg, e), head % seg.capacity());
        if (seg.fresh_trees()) walk(fresh_tree_of(seg, e), head % seg.capacity());
        if (seg.sequence_priority_length() != 0) refresh_windows(sequence_trees_of(seg, e), head, head, head);
      }
    }
  }
}

}  // namespace shmreplay::detail
