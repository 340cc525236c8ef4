// lib/sampler_lease.cpp: a Sampler's construction and its learner lease: taking the lease (one learner per
// segment; a dead learner's is taken over, and what it may have left half done is repaired: an update lock, its
// waiter count, a priority tree walk), handing it over on a move, releasing it, and refusing a Sampler copied into
// a forked child (check_process, which every call runs first).
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
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/lease.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {

using layout::GlobalControl;

Sampler::Sampler(Buffer& buffer, const SamplerOptions& options) : buffer_(&buffer), options_(options) {
  if (buffer.read_only()) {
    throw Error(Errc::read_only,
                fmt::format("cannot attach a learner to '{}': the buffer is mapped read-only", buffer.name()));
  }
  const uint64_t lease_word = detail::self_lease_word();
  GlobalControl& g = buffer.segment().global_control();
  const detail::LeaseResult r = detail::try_take_lease(detail::learner_lease_words(g), lease_word);
  if (const std::string problem = detail::learner_lease_problem(buffer.name(), r); !problem.empty()) {
    throw Error(Errc::lease_held, problem);
  }
  if (r.outcome == detail::LeaseOutcome::taken_over) detail::repair_dead_learner(buffer.segment());
  lease_ = LearnerLease(&buffer, lease_word);
  scratch_ = std::make_unique<Scratch>(buffer);
}

Sampler::Sampler(Sampler&& other) noexcept = default;
Sampler::~Sampler() = default;

Sampler::LearnerLease::LearnerLease(Buffer* buffer, uint64_t word) noexcept
    : buffer_(buffer), word_(word), fork_generation_(detail::fork_generation()) {}

Sampler::LearnerLease& Sampler::LearnerLease::operator=(LearnerLease&& other) noexcept {
  if (this != &other) {
    release();
    buffer_ = std::exchange(other.buffer_, nullptr);
    word_ = other.word_;
    fork_generation_ = other.fork_generation_;
  }
  return *this;
}

void Sampler::LearnerLease::release() noexcept {
  // A copy in a forked child leaves the lease alone: it is the parent's.
  if (buffer_ != nullptr && fork_generation_ == detail::fork_generation()) {
    detail::release_lease(detail::learner_lease_words(buffer_->segment().global_control()), word_);
  }
  buffer_ = nullptr;
}

void Sampler::LearnerLease::check_process(const char* op) const {
  if (buffer_ != nullptr && fork_generation_ != detail::fork_generation()) {
    detail::throw_forked("Sampler", op, buffer_->name(), layout::owner_pid(word_));
  }
}

}  // namespace shmreplay
