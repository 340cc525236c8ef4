// sampler_episodes.cpp: Sampler::pop_episodes, the learner's side of the completed-episode record queues
// (detail/protocol/episode_queue.hpp has the protocol; docs/design/episodes.md its argument).
#include <cstdint>
#include <span>

#include "detail/protocol/episode_queue.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

namespace {

// Hands over the records of `taken` (each env's a run, as take_records filled them), releasing each env's lock.
void hand_over(Segment& segment, std::span<const EpisodeRecord> taken, uint64_t me, bool delivered) noexcept {
  for (std::size_t i = 0; i < taken.size(); ++i) {
    if (i + 1 == taken.size() || taken[i + 1].env != taken[i].env) {
      detail::hand_over_records(segment, taken[i].env, me, delivered);
    }
  }
}

}  // namespace

std::size_t Sampler::pop_episodes(std::span<EpisodeRecord> out) { return pop_episodes(out, {}); }

std::size_t Sampler::pop_episodes(std::span<EpisodeRecord> out,
                                  const std::function<void(std::span<const EpisodeRecord>)>& deliver) {
  lease_.check_process("pop episodes of");
  if (!buffer_->has_episodes() || out.empty()) return 0;
  Segment& segment = segment_of(*buffer_);
  const uint64_t me = lease_.word();
  const uint64_t num_envs = buffer_->num_envs();
  std::size_t n = 0;
  // Every env's records taken stay in hand (its taker lock held) until the caller has them all: a kill anywhere
  // before the hand-over is counted, env by env, by whoever takes the lock next (or shown by the Inspector).
  for (uint64_t k = 0; k < num_envs && n < out.size(); ++k) {
    n += detail::take_records(segment, (pop_cursor_ + k) % num_envs, out.subspan(n), me);
  }
  pop_cursor_ = static_cast<std::size_t>((pop_cursor_ + 1) % num_envs);
  const std::span<const EpisodeRecord> taken = out.first(n);
  if (deliver && n > 0) {
    try {
      deliver(taken);
    } catch (...) {
      hand_over(segment, taken, me, /*delivered=*/false);
      throw;
    }
  }
  hand_over(segment, taken, me, /*delivered=*/true);
  return n;
}

}  // namespace shmreplay
