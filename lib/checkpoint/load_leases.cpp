// lib/checkpoint/load_leases.cpp: the leases a checkpoint load holds on its target, taken directly with
// detail/protocol/lease.hpp: every learner slot's lease (so no learner updates, samples or pops while the envs are
// rewritten, and the load may write update_seq) and every env's lease (so no writer pushes), all or none, in that
// order, released when the load ends (on success and on error alike; a new segment's are released before it is
// named). Who calls it: load.cpp (load_checkpoint, load_checkpoint_into).
//
// A load builds no Sampler and no Writer: their constructors repair what a dead predecessor left, and most of it
// is in words the load rewrites anyway. What a load does beyond the lease words, and why nothing else is needed:
// - A learner lease taken over from a dead learner: the repair Sampler::Sampler does on a takeover (sampler_lease.cpp),
//   all of it: the update locks the dead learner held (release_dead_update_lock), its waiter count (every push
//   would issue a futex wake), learner_waiting_rows, and a priority walk it left half done. The waiter count and
//   waiting rows are words a load never writes, and the lease is free after the load, so no later learner takes
//   it over and repairs them; the locks and the walk would stay broken if the load fails before rewriting them.
// - Every env's lease: the rate limiter's new-owner steps every Writer does (withdraw: a dead writer's admission
//   of a step it never published goes; forget_dead_waiting: its mark of a wait goes, which would count while a
//   live process, the load, holds the lease). limiter_reserved and limiter_waiting_since_ns are not rewritten by
//   a load.
// Not done, because the load rewrites the same words, or the env's next Writer does it in any case:
// - detail::recover_env, which would push the record of an episode a dead writer ended without pushing its
//   record: the load overwrites that episode's steps, so the record would describe steps that are gone; and the
//   journal it repairs is rebuilt (rebuild_env).
// - the priority walk of the slot a dead writer was writing: the load rebuilds every env's tree from its leaves.
// - the Writers' and the Sampler's own state (cursors, scratch, the fork checks): a load is one call.
// If the load fails after taking the leases, an env it did not rewrite is as its dead writer left it, with a free
// lease: its next Writer runs recover_env and the walk on construction (every Writer does, however it got the
// lease), exactly as before the load.
#include <vector>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay::detail {

LoadLeases::LoadLeases(Buffer& target, const std::string& path)
    : target_(target), path_(path), me_(self_lease_word()) {
  try {
    take_learner();
    take_envs();
  } catch (...) {
    release();  // all or nothing
    throw;
  }
}

LoadLeases::~LoadLeases() { release(); }

void LoadLeases::refuse(const std::string& why) const {
  throw Error(Errc::lease_held,
              fmt::format("cannot load '{}' into '{}': a load rewrites every env and the learners' state, so it takes "
                          "the lease of every env and of every learner slot, and no writer or learner may use the "
                          "buffer meanwhile; {}",
                          path_, target_.name(), why));
}

namespace {

// Why the lease `r` (of `what`: "learner slot 2 (of 3)", "env 5", held by a `role`, "learner" or "writer", through
// an `object`, "Sampler" or "Writer") stops the load, or "" when it does not.
std::string lease_in_the_way(const LeaseResult& r, const std::string& what, const char* role, const char* object) {
  if (r.outcome == LeaseOutcome::held_by_us) {
    return fmt::format("this process holds {} through a {} of its own: close it first", what, object);
  }
  if (r.outcome == LeaseOutcome::held_alive) {
    return fmt::format("{} is held by {}, which is alive: stop that {} first", what,
                       holder_text(r.holder_lease, r.holder_start_ticks), role);
  }
  return {};
}

}  // namespace

void LoadLeases::take_learner() {
  Segment& segment = segment_of(target_);
  const uint64_t slots = segment.max_learners();
  for (uint64_t s = 0; s < slots; ++s) {
    const LeaseResult r = try_take_lease(learner_slot(segment, s).lease, me_);
    const std::string what = slots == 1 ? std::string("the learner slot") : fmt::format("learner slot {} (of {})", s, slots);
    if (const std::string problem = lease_in_the_way(r, what, "learner", "Sampler"); !problem.empty()) refuse(problem);
    learners_held_ = s + 1;
    // The dead learner's repair, the one Sampler::Sampler does (the top of this file says why all of it).
    if (r.outcome == LeaseOutcome::taken_over) repair_dead_learner(segment, s);
  }
}

void LoadLeases::take_envs() {
  for (uint64_t e = 0; e < target_.num_envs(); ++e) {
    const LeaseResult r = try_take_lease(env_lease_words(segment_of(target_).env_control(e)), me_);
    if (const std::string problem = lease_in_the_way(r, fmt::format("env {}", e), "writer", "Writer"); !problem.empty()) {
      refuse(problem);
    }
    envs_held_ = e + 1;
  }
  // The rate limiter's new-owner steps, as every Writer does them (the top of this file says why).
  std::vector<layout::EnvControl*> control;
  for (uint64_t e = 0; e < target_.num_envs(); ++e) control.push_back(&segment_of(target_).env_control(e));
  withdraw(control);
  forget_dead_waiting(control);
}

void LoadLeases::release() noexcept {
  // The envs first, then the learner: the order a Writer's and then a Sampler's destruction released them.
  for (uint64_t e = 0; e < envs_held_; ++e) release_lease(env_lease_words(segment_of(target_).env_control(e)), me_);
  envs_held_ = 0;
  for (uint64_t s = 0; s < learners_held_; ++s) release_lease(learner_slot(segment_of(target_), s).lease, me_);
  learners_held_ = 0;
}

}  // namespace shmreplay::detail
