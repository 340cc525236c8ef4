// lib/sampler_lease.cpp: a Sampler's construction and its learner slot's lease: taking it (the rank's slot or the
// first free one; a dead learner's is taken over, and what it may have left half done is repaired: its update locks,
// its waiter count, a priority tree walk), handing it over on a move, releasing it, and refusing a Sampler copied
// into a forked child (check_process, which every call runs first).
//
// Who calls it: the learner, when it makes, moves or destroys a Sampler; the lease words are in
// detail/protocol/lease.hpp.
#include "shmreplay/sampler.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/lease.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {

Sampler::Sampler(Buffer& buffer, const SamplerOptions& options) : buffer_(&buffer), options_(options) {
  if (buffer.read_only()) {
    throw Error(Errc::read_only,
                fmt::format("cannot attach a learner to '{}': the buffer is mapped read-only", buffer.name()));
  }
  const uint64_t slots = segment_of(buffer).max_learners();
  if (options.rank && *options.rank >= slots) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot attach a learner to '{}' as rank {}: it has {} learner slot{} (ranks 0 to {}); "
                            "create it with max_learners > {}",
                            buffer.name(), *options.rank, slots, slots == 1 ? "" : "s", slots - 1, *options.rank));
  }
  const uint64_t lease_word = detail::self_lease_word();
  const detail::SlotTaken taken = detail::take_learner_slot(segment_of(buffer), options.rank, lease_word);
  if (!taken.problem.empty()) throw Error(Errc::lease_held, fmt::format("cannot attach a learner to '{}': {}",
                                                                        buffer.name(), taken.problem));
  rank_ = taken.slot;
  lease_ = LearnerLease(&buffer, taken.slot, lease_word);
  if (taken.outcome == detail::LeaseOutcome::taken_over) detail::repair_dead_learner(segment_of(buffer), taken.slot);
  scratch_ = std::make_unique<Scratch>(buffer, taken.slot);
}

Sampler::Sampler(Sampler&& other) noexcept = default;
Sampler::~Sampler() = default;

Sampler::LearnerLease::LearnerLease(Buffer* buffer, uint64_t slot, uint64_t word) noexcept
    : buffer_(buffer), slot_(slot), word_(word), fork_generation_(detail::fork_generation()) {}

Sampler::LearnerLease& Sampler::LearnerLease::operator=(LearnerLease&& other) noexcept {
  if (this != &other) {
    release();
    buffer_ = std::exchange(other.buffer_, nullptr);
    slot_ = other.slot_;
    word_ = other.word_;
    fork_generation_ = other.fork_generation_;
  }
  return *this;
}

void Sampler::LearnerLease::release() noexcept {
  // A copy in a forked child leaves the lease alone: it is the parent's.
  if (buffer_ != nullptr && fork_generation_ == detail::fork_generation()) {
    detail::release_lease(detail::learner_slot(segment_of(*buffer_), slot_).lease, word_);
  }
  buffer_ = nullptr;
}

void Sampler::LearnerLease::check_process(const char* op) const {
  if (buffer_ != nullptr && fork_generation_ != detail::fork_generation()) {
    detail::throw_forked("Sampler", op, buffer_->name(), layout::owner_pid(word_));
  }
}

}  // namespace shmreplay
