// shmreplay/vocabulary.hpp: the words every layer shares: views, episode boundaries and records, the options of
// a sample call, the random engine.
//
// Who includes it: the roles' headers (buffer.hpp, sampler.hpp, writer.hpp, inspector.hpp re-export it) and the
// private layers under lib/detail (the protocols and the planners), which must not include a role's header for a
// type (docs/design/source_layout.md, "The include rule"). Plain values only: nothing here touches a segment.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace shmreplay {

/// The directory that holds segment files: $SHMREPLAY_SHM_DIR when set and non-empty, else "/dev/shm".
std::string shm_directory();

// -- Views and sample options (the learner's calls: shmreplay/sampler.hpp) --

/// Which steps a sample draws from (shmreplay/sampler.hpp, "Views").
enum class View : uint8_t {
  replay,  ///< every stored step
  online,  ///< the steps published since the last reset_online_queue()
};
/// "replay" or "online" (the Python and CLI spelling of the view).
std::string_view to_string(View view) noexcept;

/// How sampled sequences treat episode boundaries (see the top of this file).
enum class Episodes : uint8_t {
  cross,   ///< ignore them (the default; any buffer)
  stop,    ///< end each row at its episode's last step; needs a buffer with episode fields
  within,  ///< only starts whose whole sequence lies in one episode; needs a buffer with episode fields
};
/// "cross", "stop" or "within".
std::string_view to_string(Episodes episodes) noexcept;

/// The ways a batch's rows were drawn (SampleBatch::selector_rows), in the order their blocks lie in a batch.
enum class Selector : uint8_t {
  uniform,      ///< min(r, L)^power over the call's view (every call without the options below)
  prioritized,  ///< priority^alpha (SampleOptions::prioritized)
  recency,      ///< min(r, L)^power 2^(-age / half_life) (SampleOptions::recency_half_life)
  online,       ///< min(r, L)^power over the online view (View::online; sample_mixed's online rows)
  reanalysed,   ///< 1 for each freshly reanalysed start (SampleOptions::reanalysed; a buffer with a reanalyse walk)
};
/// The number of Selector values (the size of SampleBatch::selector_rows()).
inline constexpr std::size_t kSelectors = 5;
/// "uniform", "prioritized", "recency", "online" or "reanalysed" (the Python names, also of Mixture's keys).
std::string_view to_string(Selector selector) noexcept;

/// A per-batch mixture of selectors with fixed fractions (SampleOptions::mixture; DreamerV3's replay mixes uniform,
/// prioritized and recency selectors so). Each fraction is finite and >= 0, their sum positive; they are normalized
/// by it. A batch of B rows holds rows(B)[s] rows of selector s, in one contiguous block per selector, in Selector
/// order (uniform first, online last), each drawn as a call of that selector alone would draw it: uniform from the
/// call's view with its power; prioritized by priority^alpha (the power ignored; a buffer with priorities);
/// recency with SampleOptions::recency_half_life (> 0) and the power; online from the online view with the power;
/// reanalysed uniformly from the freshly reanalysed starts (SampleOptions::reanalysed: MuZero Unplugged's reanalyse
/// fraction).
/// The other options (episodes, period, min_steps, beta, the rate limiter's timeout) apply to every selector.
struct Mixture {
  double uniform = 0.0;      ///< fraction of uniform rows
  double prioritized = 0.0;  ///< fraction of prioritized rows
  double recency = 0.0;      ///< fraction of recency rows
  double online = 0.0;       ///< fraction of online rows
  double reanalysed = 0.0;   ///< fraction of freshly reanalysed rows

  /// Whether every fraction is 0 (no mixture: the call's own selector draws every row).
  bool empty() const noexcept {
    return uniform == 0.0 && prioritized == 0.0 && recency == 0.0 && online == 0.0 && reanalysed == 0.0;
  }
  /// The fraction of selector `s`.
  double fraction(Selector s) const noexcept {
    const double f[kSelectors] = {uniform, prioritized, recency, online, reanalysed};
    return f[static_cast<std::size_t>(s)];
  }
  /// The rows of each selector (Selector order) in a batch of `batch` rows, by the largest-remainder rule: each
  /// selector gets floor(q) of its quota q = fraction / sum * batch, then the rows left go one each to the
  /// selectors with the largest remainders q - floor(q), ties to the earlier selector. Deterministic (no random
  /// draw), sums to `batch`, and within one row of round(q) for each. Precondition: the fractions are valid.
  std::array<std::size_t, kSelectors> rows(std::size_t batch) const noexcept;
};

/// The order a consuming queue (CreateOptions::consuming_queue) delivers its steps in (SampleOptions::consume).
enum class Consume : uint8_t {
  off,     ///< not a consuming call (the default; every sample call on a buffer that is not a consuming queue)
  fifo,    ///< insertion order: the undelivered steps of the oldest push calls first (ties: the lower env first)
  random,  ///< uniformly at random among the undelivered steps, without replacement within a call
};
/// "off", "fifo" or "random" (the Python spelling, None for off).
std::string_view to_string(Consume consume) noexcept;

/// The order a reanalyse walk (CreateOptions::reanalyse_chunk) hands its due chunks out in (Reanalyser::try_next;
/// docs/design/reanalyse.md). Whatever the order, a chunk is handed once per pass of the walk.
enum class ReanalyseOrder : uint8_t {
  oldest_version,  ///< never-reanalysed chunks first, then the lowest target version recorded at complete
  sweep,           ///< the oldest stored chunk first (the lowest chunk index; ties: the lower env)
  largest_return,  ///< the largest sum of the reward field over the chunk's stored steps first (episode fields)
};
/// "oldest_version", "sweep" or "largest_return" (the Python and CLI spelling).
std::string_view to_string(ReanalyseOrder order) noexcept;

/// Options of one sample call. The defaults are the behaviour of the calls without options, row for row.
struct SampleOptions {
  /// How rows treat episode boundaries (Episodes); stop and within need a buffer with episode fields.
  Episodes episodes = Episodes::cross;
  /// Start positions every `period` steps, counted from each env's oldest step in the view; at least 1.
  uint64_t period = 1;
  /// The view must hold at least this many steps (all envs together), else Errc::empty_view.
  uint64_t min_steps = 0;
  /// Prioritized sampling (a buffer created with a priority exponent alpha): a start is drawn with probability
  /// proportional to its priority^alpha (the priority of the row's first step), and the batch's weights() hold the
  /// importance weights (N * P)^-beta over their maximum. distribution_power must be 0 (invalid_argument
  /// otherwise: the weight is the priority's alone). Works with episodes = cross and stop (rows still end at their
  /// episode's end), with period 1; within and a period above 1 are refused (invalid_argument): both restrict the
  /// starts to a set the priority trees do not index. A view whose every stored step has priority 0 throws
  /// empty_view; a priority tree holding a weight that is not finite (a damaged segment) throws corrupt.
  bool prioritized = false;
  /// beta, the importance-sampling exponent of a prioritized sample (finite, >= 0; 0 gives weights of 1). Any
  /// such beta gives weights in [0, 1]: they are computed as (smallest N * P / N * P)^beta.
  double importance_exponent = 0.4;
  /// Zero-on-sample (DreamerV3's prioritized selector): each row a prioritized draw returns has its start step's
  /// priority set to 0 once its copy is validated, so that step is not drawn by priority again until its priority
  /// is raised (update_priorities). Exact under several learner ranks: the 0 is set by a compare-and-swap from the
  /// positive weight the draw found, so of two ranks that draw one step at once, exactly one returns it; the other's
  /// row is drawn again from the steps still positive. A batch is so a draw without replacement (each row by
  /// priority among the steps no row has taken). A call that throws gives its steps their weights back. Needs
  /// prioritized (or a mixture with prioritized rows, whose block it applies to; invalid_argument otherwise). A view
  /// whose every step was taken throws empty_view (every stored step has priority 0).
  bool zero_on_sample = false;
  /// Sequence priorities (a buffer created with CreateOptions::sequence_priority_length L; R2D2): a prioritized
  /// draw of sequence_length L weighs a start by eta * max + (1 - eta) * mean of the step weights priority^alpha of
  /// its sequence's stored steps, eta this value (in [0, 1]; invalid_argument otherwise). Other calls ignore it.
  double sequence_priority_eta = 0.9;
  /// Recency sampling, in steps (0: off, the default): a start p of an env whose view ends at head h is drawn with
  /// weight min(r, L)^distribution_power * 2^(-age / recency_half_life), where age = h - 1 - p (the env's newest
  /// step has age 0; each env's age counts its own steps) and r the steps left (as without it): a start half a
  /// half-life older weighs 2^-0.5 as much. Exact (closed form per env, O(num_envs) per call and O(log) per row).
  /// Finite and >= 0 (invalid_argument otherwise). Works with episodes = cross and period 1 (stop and within only
  /// with sequence_length 1, where they are cross); a period above 1, stop or within with longer sequences, and
  /// prioritized are refused (invalid_argument): the closed form is over every step of a view, and a prioritized
  /// draw's weight is the priority's alone. weights() stay 1 (the decay is the distribution asked for).
  double recency_half_life = 0.0;
  /// Draw from the freshly reanalysed steps only (a buffer with a reanalyse walk, CreateOptions::reanalyse_chunk;
  /// docs/design/reanalyse.md, "The learner's mix"): a start is drawn uniformly among the stored steps of the
  /// full chunks whose last completion recorded the walk's newest target version, every such step with
  /// probability 1 / their number (distribution_power does not apply; rows run on from the start as in the view,
  /// up to sequence_length steps). Exact over one snapshot of the walk's words. Episodes cross, period 1, and not
  /// with prioritized or recency (invalid_argument); no fresh step in the view throws empty_view. In a Mixture, the
  /// reanalysed rows.
  bool reanalysed = false;
  /// A per-batch mixture of selectors (Mixture; all fractions 0, the default: none). Sampler::sample and
  /// sample_transitions only (sample_mixed and total_weight refuse it: invalid_argument); `prioritized` must then
  /// be false (the mixture names its prioritized rows). The batch says which rows each selector drew
  /// (SampleBatch::selector_rows), and its weights() hold, in the prioritized block, that block's importance
  /// weights (as a prioritized call of that many rows computes them), 1 in the other blocks.
  Mixture mixture;
  /// With a mixture: every row's importance weight from the mixture's own probability, (N P)^-beta over the batch's
  /// largest with P = sum over selectors s of (rows_s / B) P_s(row), each P_s from a snapshot of s's view taken after
  /// the draws (so the whole batch is corrected toward uniform), instead of the prioritized block's weights alone
  /// (false, the default). Needs each selector's weight of any start in closed form: period 1, and episodes = cross
  /// or sequence_length 1 (invalid_argument otherwise, and without a mixture).
  bool mixture_importance = false;
  /// In a buffer with a rate limiter (shmreplay/rate_limit.hpp): how long the call waits while the limiter holds
  /// it back (too few steps stored, or the learner ahead of the writers), woken by writers across processes, before
  /// it throws Error(rate_limited) naming the reason. 0: never wait, throw at once ("not now"). The whole batch
  /// is admitted at once or not at all. Ignored without a limiter.
  uint64_t rate_limit_timeout_ms = 10'000;
  /// Policy versions (a buffer with a policy-version field, CreateOptions::policy_version; docs/design/policy.md):
  /// draw only steps whose version is at least V - max_staleness, V the version the learners published
  /// (Sampler::publish_policy). The draw is exact over the steps inside the window: an env's versions never
  /// decrease, so its window is a suffix of its view, found by a binary search over the stored versions (O(log
  /// capacity) per env per round), and every planner draws from it as from the view. nullopt (the default): the
  /// window the learners published, if any (none: every step). A view with steps but none inside the window throws
  /// empty_view. invalid_argument on a buffer without a policy-version field.
  std::optional<uint64_t> max_staleness;
  /// A consuming call (a buffer created with CreateOptions::consuming_queue, which takes no other sample call;
  /// docs/design/consuming_queue.md): each row starts at a step no call delivered before, claimed for this call and
  /// delivered when it returns, in insertion order (Consume::fifo) or uniformly at random (Consume::random); a step
  /// is delivered once in total, over every learner, whatever their races and deaths. Rows are sequences as
  /// without it (the steps after the start are context and may be delivered as starts of other rows). Only with
  /// View::replay, distribution_power 0 and the default episodes, period, prioritized, recency, mixture and
  /// window (invalid_argument otherwise). While fewer undelivered starts than rows are free, the call returns those
  /// it found (at least one) when a writer waits on the queue (a partial batch: SampleBatch::rows() says how many;
  /// the writer may be waiting for one of them); otherwise it waits for writers up to consume_timeout_ms, then
  /// throws empty_view having delivered nothing.
  Consume consume = Consume::off;
  /// With consume: how long the call waits for enough undelivered steps (0: throw at once; kWaitForever: no
  /// timeout). Ctrl-C in Python interrupts it within 50 ms.
  uint64_t consume_timeout_ms = 10'000;
};

/// The work counters every sampling layer adds to (Sampler::stats()).
/// Work done by a Sampler since it was made (no time is measured): what the claims "sampling cost does not grow
/// with the number of stored steps" and "rows are copied by the batched gather, validated with a few loads of the
/// control words per env" are checked with.
struct SamplerStats {
  uint64_t rows = 0;                 ///< rows drawn by stop/within sampling (redrawn rows count again)
  uint64_t tries = 0;                ///< candidate starts proposed for them
  uint64_t meta_loads = 0;           ///< step meta words read to place candidates in their episodes
  uint64_t exact_fallbacks = 0;      ///< times a call switched to enumerating episodes
  uint64_t segments_enumerated = 0;  ///< episode pieces visited by those (one meta load each)
  uint64_t rows_gathered = 0;        ///< rows copied by the batched gather (every sampled or peeked row; again
                                     ///< when redrawn)
  uint64_t gather_chunks = 0;        ///< chunks of rows the gather copied and validated together
  uint64_t control_loads = 0;        ///< loads of env control words by the gather's validation (update_seq
                                     ///< before; claimed and update_seq after): at most 3 per env per chunk
};

// -- Episodes (buffers created with episode fields: CreateOptions::episodes) --

/// Which fields (by name) carry episode bookkeeping; an empty name means none. Either `done` alone, or
/// `terminated` and/or `truncated` (done excludes both). Flags must be scalar bool or integer fields (nonzero means
/// set); `reward` a scalar numeric field, and it needs a flag. A step whose flag is set is the last step of its
/// episode; the next step of the env starts a new one (auto-reset streams, as envpool and Gymnasium produce).
struct EpisodeFields {
  std::string done;        ///< the flag field that ends an episode (termination and truncation not told apart)
  std::string terminated;  ///< the flag field that ends an episode by termination
  std::string truncated;   ///< the flag field that ends an episode by truncation (a time limit)
  std::string reward;      ///< the reward field, summed into each completed episode's return

  /// Whether no field is named (a buffer without episode bookkeeping).
  bool empty() const noexcept { return done.empty() && terminated.empty() && truncated.empty() && reward.empty(); }
};

/// How an episode ended (stored in the segment as these codes: never renumber).
enum class EpisodeEnd : uint8_t {
  none = 0,        ///< it has not (yet)
  done = 1,        ///< its `done` flag was set (termination and truncation are not told apart)
  terminated = 2,  ///< its `terminated` flag was set (it wins when both flags are set)
  truncated = 3,   ///< its `truncated` flag was set
};
/// "none", "done", "terminated" or "truncated".
std::string_view to_string(EpisodeEnd end) noexcept;

/// How writers tell whether a stacked field's pushed stack continues the previous step's (then they store one new
/// frame, else all K; layout 1.6, docs/design/stacks.md). Stored in the segment as these codes: never renumber.
enum class StackContinuity : uint32_t {
  /// Compare the stack's older K - 1 frames with the previous step's newer K - 1, byte for byte: every sampled stack
  /// is the pushed one whatever the env does. Costs reading those frames of the pushed stack and of the ring.
  compare = 0,
  /// Trust the episode flags: a stack continues the previous step's unless that step ended an episode (a done,
  /// terminated or truncated flag). The first step a Writer pushes to an env is still compared (a new process may
  /// have reset its envs without a flag). Needs episode fields; no compare, so a push reads and writes one frame.
  /// An env whose stack does not continue without a flag (a reset without done) gets the previous step's frames
  /// in the older K - 1 places of that step's stack and of the K - 2 after it.
  episodes = 1,
};
/// "compare" or "episodes".
std::string_view to_string(StackContinuity continuity) noexcept;

/// The schema index of each episode field of a buffer; nullopt where the buffer has none.
struct EpisodeFieldIndices {
  std::optional<std::size_t> done;        ///< the `done` flag field's index
  std::optional<std::size_t> terminated;  ///< the `terminated` flag field's index
  std::optional<std::size_t> truncated;   ///< the `truncated` flag field's index
  std::optional<std::size_t> reward;      ///< the reward field's index
  /// The policy-version field's index (layout 1.11; CreateOptions::policy_version): not an episode field, but a
  /// role of the same table.
  std::optional<std::size_t> policy_version;

  /// Whether the buffer records episodes (it has a done, terminated or truncated field).
  bool any_flag() const noexcept { return done || terminated || truncated; }
  /// Equal when every index is.
  friend bool operator==(const EpisodeFieldIndices&, const EpisodeFieldIndices&) = default;
};

/// One completed episode of one env, as its writer recorded it when it published the episode's last step.
struct EpisodeRecord {
  uint64_t env = 0;             ///< the env it ran in
  uint64_t first_step = 0;      ///< global step index of the episode's first step
  uint64_t length = 0;          ///< steps; the last is first_step + length - 1
  double episode_return = 0.0;  ///< the sum of its rewards (0 when the buffer has no reward field)
  EpisodeEnd end = EpisodeEnd::none;  ///< how it ended: done, terminated or truncated
  /// Equal when every member is.
  friend bool operator==(const EpisodeRecord&, const EpisodeRecord&) = default;
};

// -- Randomness --

/// The random engine samplers take. Its output sequence is fixed by the C++ standard, so a seed gives the same
/// rows with any standard library.
using Rng = std::mt19937_64;

/// The random stream of learner `rank` for a run seeded with `seed` (several learners on one buffer, layout 1.7):
/// rank 0's is Rng(seed), what a single learner seeded with `seed` draws; rank r > 0 seeds from
/// std::seed_seq{seed's and r's 32-bit halves}, an unrelated state of the engine's 2^19937 - 1 period, so that two
/// ranks with one seed never draw the same sequence (their overlap has negligible probability). Deterministic on
/// every machine (seed_seq's algorithm is fixed by the standard).
inline Rng rank_rng(uint64_t seed, uint64_t rank) {
  if (rank == 0) return Rng(seed);
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(rank),
                    static_cast<uint32_t>(rank >> 32)};
  return Rng(seq);
}

/// A stacked field's frame rings and frame-index words, and the shape of its stacks (layout 1.6; the field is
/// Field::stacked(); docs/design/stacks.md). Step s of env e has a stack of `depth` frames, frames
/// [index - depth + 1, index] of the env's frame ring, where index is the step's frame-index word; frame f lies in
/// ring slot f % frames.
struct StackGeometry {
  std::size_t field = 0;       ///< the field's schema index
  uint64_t depth = 0;          ///< K, frames per stack (the stacked axis's dimension)
  uint64_t frames = 0;         ///< frames per env ring
  uint64_t frame_bytes = 0;    ///< bytes of one frame (the field's bytes / depth)
  uint64_t outer = 1;          ///< the product of the dimensions before the stacked axis (1 for axis 0)
  uint64_t inner_bytes = 0;    ///< bytes of the dimensions after the stacked axis: a frame is `outer` runs of them,
                               ///< and a stack interleaves them: [outer][depth][inner_bytes]
  uint64_t frames_offset = 0;  ///< the frame rings, [num_envs][frames][frame_bytes]
  uint64_t index_offset = 0;   ///< the frame-index words, [num_envs][capacity] u64
};

}  // namespace shmreplay
