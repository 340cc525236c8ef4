// detail/protocol/learner_takeover.cpp: see learner_takeover.hpp.
#include "detail/protocol/learner_takeover.hpp"

#include <unistd.h>

#include <atomic>

#include <fmt/format.h>

#include "detail/protocol/consume.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/sequence_priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/wake.hpp"
#include "detail/test_hooks.hpp"

namespace shmreplay::detail {

std::string learner_lease_problem(const LeaseResult& r, uint64_t slot, uint64_t slots) {
  const std::string which = slots == 1 ? std::string("its learner") : fmt::format("learner slot {}", slot);
  const std::string rule = slots == 1 ? std::string("a buffer has one learner at a time")
                                      : fmt::format("a slot has one learner at a time ({} slots)", slots);
  if (r.outcome == LeaseOutcome::held_by_us) {
    return fmt::format("this process already holds {} through another Sampler; {}", which, rule);
  }
  if (r.outcome == LeaseOutcome::held_alive) {
    return fmt::format("{} is {}, which is alive; {}", which, holder_text(r.holder_lease, r.holder_start_ticks), rule);
  }
  return {};
}

namespace {
constexpr int kRepairWaitMs = 50;  // a repair holds a slot for O(num_envs) work: far less
}  // namespace

SlotTaken take_learner_slot(Segment& seg, std::optional<uint64_t> rank, uint64_t me) noexcept {
  const uint64_t slots = seg.max_learners();
  if (rank) {
    // A live holder may be a repairer of the slot's dead learner (repair_dead_updater), which holds the lease for
    // the moment of its repair: asked again for up to kRepairWaitMs before the slot counts as held.
    LeaseResult r = try_take_lease(learner_slot(seg, *rank).lease, me);
    for (int waited_ms = 0; r.outcome == LeaseOutcome::held_alive && waited_ms < kRepairWaitMs; ++waited_ms) {
      ::usleep(1000);
      r = try_take_lease(learner_slot(seg, *rank).lease, me);
    }
    return {*rank, r.outcome, learner_lease_problem(r, *rank, slots)};
  }
  std::string held;  // who holds the slots, for the message when all are held
  for (uint64_t s = 0; s < slots; ++s) {
    const LeaseResult r = try_take_lease(learner_slot(seg, s).lease, me);
    if (r.outcome == LeaseOutcome::taken || r.outcome == LeaseOutcome::taken_over) return {s, r.outcome, {}};
    if (slots == 1) return {s, r.outcome, learner_lease_problem(r, s, slots)};
    if (s < 4) {
      held += fmt::format("{}slot {}: {}", s == 0 ? "" : "; ", s,
                          r.outcome == LeaseOutcome::held_by_us ? std::string("this process")
                                                                : holder_text(r.holder_lease, r.holder_start_ticks));
    }
  }
  return {0, LeaseOutcome::held_alive,
          fmt::format("all {} learner slots are held by live learners ({}{}); create the buffer with more "
                      "(max_learners) or stop one",
                      slots, held, slots > 4 ? "; ..." : "")};
}

void repair_dead_learner(Segment& seg, uint64_t slot) noexcept {
  layout::GlobalControl& g = seg.global_control();
  const auto me = learner_slot(seg, slot);
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    release_dead_update_lock(seg.env_control(e), slot, seg.capacity());
  }
  forget_waiters(g, me.waiters);
  me.waiting_rows.store(0, std::memory_order_relaxed);
  if (seg.consuming_queue()) repair_dead_claims(seg, slot);  // its last call's claims: delivered or given back
  if (seg.has_priorities()) {
    finish_dead_walk(me.priority_walk, seg.num_envs(), seg.capacity(), [&](uint64_t e, uint64_t ring_slot) {
      walk(priority_tree_of(seg, e), ring_slot);
      if (seg.fresh_trees()) walk(fresh_tree_of(seg, e), ring_slot);
      // Sequence priorities: the dead learner may have been refreshing any run of windows of the env.
      if (seg.sequence_priority_length() != 0) {
        refresh_all_windows(sequence_trees_of(seg, e), 0, seg.env_control(e).head.load(std::memory_order_acquire));
      }
    });
  }
}

}  // namespace shmreplay::detail

namespace shmreplay::detail {

UpdateLockHolder update_lock_holder(const Segment& seg, const layout::EnvControl& c) noexcept {
  const uint64_t word = c.claimed.load(std::memory_order_relaxed);
  if ((word & kUpdateLockBit) == 0) return {};
  const uint64_t slot = layout::update_lock_owner(word);
  // The slot, checked against the segment's count: the word is shared memory. A damaged word names no slot whose
  // successor could clear it: shown as held, not dead (no repair can be made).
  if (slot >= seg.max_learners()) return {true, slot, false};
  const uint64_t lease = learner_slot(seg, slot).lease.lease.load(std::memory_order_relaxed);
  return {true, slot, lease == 0 || !lease_holder_alive(lease)};
}

uint64_t dead_section_bound(const Segment& seg, const layout::EnvControl& c, uint64_t seq) noexcept {
  if ((seq & 1) == 0) return 0;
  const UpdateLockHolder h = update_lock_holder(seg, c);
  if (!h.held || !h.dead) return 0;
  // The odd value was loaded with acquire (pairs with UpdateSection's release store of it): the step is its own.
  return c.update_step.load(std::memory_order_relaxed) + 1;
}

bool repair_dead_updater(Segment& seg, const layout::EnvControl& c) noexcept {
  const UpdateLockHolder h = update_lock_holder(seg, c);
  if (!h.held || !h.dead) return false;
  const uint64_t me = self_lease_word();
  const auto slot = learner_slot(seg, h.slot);
  test_hooks::call(test_hooks::before_repair_lease);  // a test's pause: another repairer may take the slot here
  const LeaseResult r = try_take_lease(slot.lease, me);
  if (r.outcome != LeaseOutcome::taken && r.outcome != LeaseOutcome::taken_over) return false;
  repair_dead_learner(seg, h.slot);
  release_lease(slot.lease, me);
  return true;
}

}  // namespace shmreplay::detail
