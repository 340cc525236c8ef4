// shmreplay/nstep.hpp: n-step returns of sampled rows (cpprb's Nstep, TorchRL's MultiStep), computed from a
// SampleBatch's reward field and episode flags.
//
// Who calls it: the learner, after a sample call. It reads only the batch (process memory, never the segment):
// safe from any thread while no sample call rewrites that batch; no allocation.
#pragma once

#include <cstddef>
#include <optional>

#include "shmreplay/sample_batch.hpp"

namespace shmreplay {

/// The n-step return of one position of a sampled row (nstep()).
struct NStep {
  double reward_sum = 0.0;  ///< sum over k < steps of discount^k * reward(t + k)
  std::size_t steps = 0;    ///< rewards summed: 1 to n (0 when position t is masked out)
  /// Position in the row of the state to bootstrap from (t + steps), when the sum stopped without an episode end
  /// and that position is valid; nullopt after an episode end, or when the row's mask ends first.
  std::optional<std::size_t> bootstrap;
  /// discount^steps, the factor of the bootstrap value; 0 when the episode terminated (or ended by `done`).
  double bootstrap_discount = 0.0;
  bool terminated = false;  ///< the last summed step ended its episode by termination, or by `done`
  /// The last summed step ended its episode by truncation. Its true next state is not stored: in an auto-reset
  /// stream the next step of the env is the first of the next episode. bootstrap is nullopt and
  /// bootstrap_discount is discount^steps, for a caller who keeps final observations elsewhere.
  bool truncated = false;
};

/// The discounted n-step return at position t of row `row` (cpprb's Nstep, TorchRL's MultiStep), with each step's
/// reward and flags read as the outcome of its action: sums reward(t), ..., reward(t + k) for up to n steps,
/// stopping after a step whose done, terminated or truncated flag is set and at the end of the row's mask. Uses the
/// buffer's reward field, or `reward_field` (any scalar numeric field, schema order) in the second form; without
/// episode flags it stops at the mask only. Throws invalid_argument when row, t or the field is out of range, n is
/// 0, discount is not finite, or the buffer has no reward field and none is given. O(n); no allocation.
NStep nstep(const SampleBatch& batch, std::size_t row, std::size_t t, std::size_t n, double discount);
/// The same, with the reward read from the field at index `reward_field` (schema order).
NStep nstep(const SampleBatch& batch, std::size_t row, std::size_t t, std::size_t n, double discount,
            std::size_t reward_field);

}  // namespace shmreplay
