// shmreplay/sampler.hpp: the learner's view of a buffer: sample sequences, the online queue, peek, update.
//
// Who calls it: the learner processes, one Sampler each. A buffer admits CreateOptions::max_learners learners at
// once (1 unless created with more; layout 1.7), one per learner slot: constructing a Sampler takes a slot's lease
// (pid plus start time, like an env lease), the one SamplerOptions::rank names or the first free one; a slot held
// by a live learner gets Errc::lease_held naming it, a dead learner's slot is taken over (and what it left half
// done is repaired). Each learner has its own online queue (reset_online_queue), its own counters, and its own
// random stream (rank_rng); rows, updates, priorities and the rate limiter are shared: every learner's
// samples count against one limiter, try_update and update_priorities may come from any learner (the update lock
// excludes two learners' updates of one env; of two priority updates of one step the later wins), and each
// completed-episode record reaches exactly one learner (docs/design/learners.md).
//
// Views, per env e with `head` steps published and `capacity` slots (steps are numbered from 0 since creation):
//   replay: steps [max(0, claimed - capacity), head)   -- every stored step (claimed = head outside a write)
//   online: steps [max(online_start, replay start), head) -- published since the last reset_online_queue()
//           (after a reset with OnlineReset::sampled: since the snapshot of the last draw from the view)
// The two views share the head, as in the Muesli seed's UniformBuffer.
//
// Sampling (the seed's _sample_sequence, without its O(stored steps) scan): a row starts at a step p of some
// env; its remaining length is r = min(head - p, sequence_length); start positions are drawn with replacement,
// each with weight r ^ distribution_power (power 0: uniform over starts). The row holds steps p .. p+r-1 and
// the mask marks them; the rest of the row is zero-filled and masked out. A row never crosses the head and
// never wraps into older data. Choosing positions costs O(num_envs + rows * log(num_envs * sequence_length)).
//
// Episodes (a buffer created with episode fields, CreateOptions::episodes), chosen per call with SampleOptions:
//   cross:  the above; rows run on across episode ends (the seed's behaviour; any buffer).
//   stop:   a row ends at its episode's last step: the mask stops there, the rest is zero-filled. The remaining
//           length r counts steps up to the episode's end (or the head), so the weight is min(r, L)^power with r
//           inside the episode.
//   within: only starts whose whole sequence (L steps, below the head) lies in one episode; each such start has
//           the same weight (flashbax's strict sequence length). Fewer valid starts than rows is fine (draws are
//           with replacement); none at all is Errc::empty_view.
// Selectors: SampleOptions::recency_half_life weighs starts by 2^(-age / half_life) besides min(r, L)^power (age:
// steps behind the env's head), exactly; SampleOptions::mixture fills a batch from several selectors (uniform,
// prioritized, recency, online) in fixed fractions, one block of rows each (docs/design/sampling.md).
// period: starts are the steps lo, lo + period, lo + 2 period, ... of each env's view [lo, hi) (counted from the
// view's oldest step, as flashbax does since its pull request 50). min_steps: a view holding fewer steps (all envs
// together) is refused with Errc::empty_view, so a learner can ask for "at least N steps" on every call; wait()
// blocks until then.
// Cost: cross with period 1 is the O(1)-per-env closed form above; cross with a period, the same closed form over
// the period's grid. stop and within propose a start uniformly from the grid of all envs (O(log num_envs)), locate
// its episode from the step meta the writers record (within: one load; stop: one load, plus a binary search over
// at most L steps when the episode ends inside the row) and accept it with probability weight / L^power (exact
// rejection sampling); the expected number of proposals per row is L^power over the mean weight, which depends on
// the episode lengths relative to L, not on how many steps are stored. A row that is refused 64 times in a row
// switches the rest of the call to an exact method that enumerates the episodes in the views (one meta load per
// episode): O(num_envs + stored episodes) once, then O(log) per row. stats() counts this work.
//
// Consuming queue (a buffer created with CreateOptions::consuming_queue): sample calls with SampleOptions::consume
// deliver each step once in total, over every learner, in insertion order or at random; a killed learner's claims
// are given back or delivered, never both (docs/design/consuming_queue.md). A queue takes no other sample call. A
// consuming call may return fewer rows than asked (batch.rows()): those free while a writer waits on the queue.
//
// Completed-episode records: when a writer publishes the last step of an episode it queues a record (env, first
// step, length, return, how it ended) in the segment; pop_episodes() takes them, per env in order. A full queue
// drops records (counted in Inspector's episode_records_dropped); records reach the learners at most once, and those
// a learner killed inside pop_episodes had taken are counted (episode_records_lost): exactly once from writers.
//
// Consistency while writers run: each row is validated after its copy (seqlock: the env's `claimed` counter
// must show that no writer reclaimed the row's oldest slot meanwhile, and no update ran); a row that fails is
// redrawn from a fresh snapshot and counted in retries(). No row a caller receives was torn.
//
// Determinism: for a given Rng state and buffer state (no concurrent writes), the rows are the same on every
// machine (std::mt19937_64's sequence is fixed by the standard; conversions to [0, 1) are our own).
//
// Thread safety: a Sampler is used by one thread at a time. Outputs go into a SampleBatch that is reused:
// after the first call with a given shape no call allocates.
//
//   shmreplay::Sampler learner(buf);
//   shmreplay::Rng rng(42);
//   shmreplay::SampleBatch batch;
//   learner.sample_mixed(/*replay=*/48, /*online=*/16, /*sequence_length=*/10, /*power=*/1.0, rng, batch);
//   auto obs = batch.field_as<float>(0);   // [64][10][obs shape]
//   learner.reset_online_queue(shmreplay::OnlineReset::sampled);  // steps pushed since the sample stay
//
//   // A buffer with episode fields: rows that stop at episode ends, starts every 4 steps, at least 1000 steps.
//   shmreplay::SampleOptions opts{.episodes = shmreplay::Episodes::stop, .period = 4, .min_steps = 1000};
//   learner.sample(shmreplay::View::replay, 32, 16, 1.0, rng, batch, opts);
//   shmreplay::NStep g = shmreplay::nstep(batch, /*row=*/0, /*t=*/0, /*n=*/5, /*discount=*/0.99);
//   std::vector<shmreplay::EpisodeRecord> done(256);
//   done.resize(learner.pop_episodes(done));   // env, first_step, length, episode_return, end
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/vocabulary.hpp"  // IWYU pragma: export (View, Episodes, SampleOptions, EpisodeRecord, Rng: were declared here)
#include "shmreplay/policy.hpp"  // IWYU pragma: export (PolicyPublish, PolicyState: were declared here)
#include "shmreplay/rate_limit.hpp"
#include "shmreplay/nstep.hpp"         // IWYU pragma: export (NStep, nstep: were declared here)
#include "shmreplay/sample_batch.hpp"  // IWYU pragma: export (SampleBatch, MutableFieldBytes: were declared here)
#include "shmreplay/schema.hpp"

namespace shmreplay {


/// Where reset_online_queue restarts each env's online view.
enum class OnlineReset : uint8_t {
  now,      ///< at the env's head now: every step published so far leaves the view
  sampled,  ///< at the head this Sampler's last draw from the online view saw: steps published since stay
};



/// What Sampler::update_priorities did.
struct PriorityUpdateResult {
  uint64_t applied = 0;  ///< priorities set
  uint64_t dropped = 0;  ///< refused because a writer had overwritten (or was overwriting) the step since
};

/// What Sampler::write_back did.
struct WriteBackResult {
  uint64_t applied = 0;  ///< rows whose step was rewritten
  uint64_t refused = 0;  ///< rows refused because a writer had overwritten the step (or it left the view) since,
                         ///< or a checkpoint was loaded into the buffer since (every row of such a call)
};

/// How a Sampler retries: given to its constructor.
struct SamplerOptions {
  /// How many times a sample call redraws rows that writers overwrote during the copy before it gives up with
  /// Errc::contended (only reachable when writers lap a tiny ring continuously); also how many snapshots in a row
  /// may have no start to draw from (a write in progress; docs/design/priorities.md, "Prioritized sampling", for the
  /// other
  /// cause), with a message that says so.
  uint32_t max_retry_rounds = 10000;
  /// The learner slot to take (layout 1.7), 0 to max_learners - 1: a GPU rank's own slot. nullopt takes the first
  /// slot that is free or whose holder died, skipping slots this process holds through another Sampler.
  std::optional<uint64_t> rank;
};

/// Sizes of one env's views.
struct EnvSizes {
  uint64_t head = 0;    ///< steps published since creation
  uint64_t replay = 0;  ///< steps in the replay view
  uint64_t online = 0;  ///< steps in the online view
};

/// A learner's role: holds one learner slot of the buffer (its lease) and samples, peeks, updates and
/// reprioritizes its steps. Used by one thread at a time; the top of this file has the guarantees.
class Sampler {
 public:
  /// Takes a learner slot of `buffer` (see the top of this file): options.rank's, or the first free one. Throws
  /// Error(lease_held) when that slot (every slot, without a rank) is held by another live process or another
  /// Sampler of this process, invalid_argument for a rank past the buffer's max_learners, read_only for a
  /// read-only Buffer. After taking over a dead learner's slot it repairs what that learner may have left: its
  /// update locks, its waiter count and waiting mark, a priority tree walk.
  explicit Sampler(Buffer& buffer, const SamplerOptions& options = {});
  /// Takes over `other`'s lease and state; the moved-from Sampler holds nothing and must not sample.
  Sampler(Sampler&& other) noexcept;
  Sampler& operator=(Sampler&&) = delete;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;
  /// Releases the learner lease.
  ~Sampler();

  /// Draws `batch_size` rows of `sequence_length` steps from `view` into `out` (see the top of this file).
  /// Throws Error with invalid_argument (batch_size 0, sequence_length 0 or above capacity, a negative or
  /// non-finite power), empty_view (the view holds no steps), contended (see SamplerOptions), rate_limited (a
  /// buffer with a rate limiter held the call back past SampleOptions::rate_limit_timeout_ms).
  /// O(num_envs + batch_size * (log(num_envs * sequence_length) + sequence_length * step bytes)); no
  /// allocation once `out` is warmed up; never blocks, except while a rate limiter holds the call back.
  void sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power, Rng& rng,
              SampleBatch& out);
  /// The same with episode, period and minimum-size options (see the top of this file). Also throws
  /// invalid_argument for stop or within on a buffer without episode fields and for a period of 0, and
  /// empty_view when the view holds fewer than options.min_steps steps or, for within, no start whose whole
  /// sequence lies in one episode. With default options it returns exactly what the call above returns.
  /// With options.mixture (Mixture), the batch is blocks of rows of each selector, each block drawn as that
  /// selector's call alone would draw it (uniform, prioritized and recency rows from `view`, online rows from the
  /// online view), one after another with the same engine; the rate limiter admits the whole batch at once. Also
  /// throws invalid_argument for a fraction that is negative or not finite, fractions that sum to 0, prioritized
  /// = true beside a mixture, and whatever a selector with rows refuses alone (prioritized rows without
  /// priorities; recency rows without a half-life).
  void sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power, Rng& rng,
              SampleBatch& out, const SampleOptions& options);

  /// The seed's sample_rb_and_oq: `replay_batch` rows from the replay view, then `online_batch` rows from the
  /// online view, in one batch. Either count may be 0 (not both); a view with a nonzero count must not be empty.
  void sample_mixed(std::size_t replay_batch, std::size_t online_batch, std::size_t sequence_length,
                    double distribution_power, Rng& rng, SampleBatch& out);
  /// The same with options, which apply to both views (min_steps to each view that has rows).
  void sample_mixed(std::size_t replay_batch, std::size_t online_batch, std::size_t sequence_length,
                    double distribution_power, Rng& rng, SampleBatch& out, const SampleOptions& options);

  /// Flat transitions, as the functional buffer and dejax sample: `batch_size` single steps drawn uniformly
  /// from every stored step of `view` (sample with sequence_length 1).
  void sample_transitions(View view, std::size_t batch_size, Rng& rng, SampleBatch& out) {
    sample(view, batch_size, 1, 0.0, rng, out);
  }
  /// The same with options (a single step never crosses an episode end, so `episodes` only checks the buffer).
  void sample_transitions(View view, std::size_t batch_size, Rng& rng, SampleBatch& out,
                          const SampleOptions& options) {
    sample(view, batch_size, 1, 0.0, rng, out, options);
  }

  /// Publishes policy version `version` (raised, never lowered: of several learners' publishes the largest stays)
  /// and the staleness window `max_staleness` (nullopt: none) in the segment: sample calls then draw only steps of
  /// versions >= version - max_staleness (SampleOptions::max_staleness), and writers whose steps' versions lie below
  /// it are held back (WriterOptions::policy_timeout_ms) until a wider window admits them. With options.pace, waits
  /// first for the live writers the window would leave behind (PolicyPublish). Returns the state now in force.
  /// Works on any buffer; a window needs a policy-version field (invalid_argument otherwise). O(num_envs) with
  /// pace, O(1) without; wakes held writers when something changed.
  PolicyState publish_policy(uint64_t version, std::optional<uint64_t> max_staleness,
                             const PolicyPublish& options = {});
  /// The policy version and window in force (what any learner published last).
  PolicyState policy() const;

  /// The total weight of `view`'s starts for a sample call with these arguments: the sum, over every start that
  /// call could draw, of the weight it draws it with: min(r, L)^power (cross and stop, r the steps left as the
  /// top of this file counts them), 1 (within), priority^alpha (prioritized; power must be 0). The call draws a
  /// start with probability weight / total, so learners that sample several buffers can split a batch among them
  /// by their totals and keep the global distribution exact (shmreplay.ray does). Computed from one snapshot of
  /// the heads by the planner the call would use (stop and within: the exact method, counted in stats() as a
  /// fallback). 0 when the view holds no start with a positive weight or fewer than options.min_steps steps.
  /// Throws what sample throws for invalid arguments, and corrupt for a prioritized total that is not finite (a
  /// damaged segment: see SampleOptions::prioritized). O(num_envs) (prioritized: O(num_envs log capacity); stop and
  /// within: O(num_envs + episode pieces)); no allocation once warmed up; never blocks. Infinity only where
  /// L^power overflows a double.
  double total_weight(View view, std::size_t sequence_length, double distribution_power,
                      const SampleOptions& options = {});

  /// The sampling weight priority^alpha of stored step steps[i] of env env_ids[i] into out[i], for each i; -1 for a
  /// step that is not stored (never published, or overwritten since, or, with a stacked field, its frames). With
  /// total_weight and size, what a learner that samples several buffers computes exact importance weights
  /// (N P)^-beta from: P = out[i] / (the sum of the buffers' totals), N = the sum of their sizes (shmreplay.ray
  /// does). Throws invalid_argument (a buffer
  /// without priorities), size_mismatch (the three lengths differ), env_out_of_range. O(1) per step; never waits.
  void priority_weights(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                        std::span<double> out) const;

  /// Moves up to out.size() completed-episode records out of the envs' queues into `out` and returns how many:
  /// each env's records in the order its episodes ended; envs are visited round-robin from a start that advances
  /// on every call, so one busy env cannot starve the others. Returns 0 on a buffer without episode fields.
  /// Each record reaches one caller of pop_episodes, of every learner on the buffer, at most once; the records a
  /// learner killed inside this call had taken are counted in Inspector's episode_records_lost, exactly
  /// (docs/design/episodes.md says why at most once). Records another learner is taking at that moment wait for a
  /// later call. O(num_envs + records); no allocation; never blocks.
  std::size_t pop_episodes(std::span<EpisodeRecord> out);

  /// pop_episodes that passes the records to `deliver` (when there are any) before it counts them delivered: if the
  /// process is killed inside `deliver`, they are counted lost. For a caller that copies them on: the Python module
  /// builds its list there. An exception from `deliver` counts them lost and propagates.
  std::size_t pop_episodes(std::span<EpisodeRecord> out,
                           const std::function<void(std::span<const EpisodeRecord>)>& deliver);

  /// Work counters of stop/within sampling (see SamplerStats).
  const SamplerStats& stats() const noexcept;

  /// The newest step of each listed env, one row each (sequence_length 1); an env with no step yet gets mask 0,
  /// zeros and start step 0. Throws env_out_of_range. The online and replay views share this head.
  void peek(std::span<const uint64_t> env_ids, SampleBatch& out);

  /// Blocks until `view` holds at least `min_steps` steps over all envs (flashbax's can_sample, Reverb's
  /// MinSize), or `timeout_ms` passes. Returns whether the condition holds. Woken by writers through a shared
  /// futex in the segment (works across processes), and re-checks at least every 50 ms, so a writer that stops
  /// or dies cannot hold it past the timeout. Throws invalid_argument when min_steps exceeds what the view can
  /// ever hold (num_envs x capacity).
  bool wait(View view, uint64_t min_steps, uint64_t timeout_ms);

  /// Empties the online view of every env. OnlineReset::now: it restarts at each env's current head.
  /// OnlineReset::sampled: it restarts at the head that this Sampler's last draw from the online view (sample of
  /// View::online, the online rows of sample_mixed) saw in its snapshot, so that only the steps that draw could
  /// take leave the view, and the steps published since stay (never before the view's start: without a draw
  /// since the last reset, nothing changes). A learner that waits for fresh online steps before each sample and
  /// shares the buffer with writers that wait for a rate limiter uses `sampled`: the steps published between its
  /// sample and its reset are counted by the limiter, and dropping them can leave it waiting for steps the limiter
  /// holds back (docs/design/rate_limiter.md, "The online queue and the limiter"). O(num_envs); never waits.
  void reset_online_queue(OnlineReset to = OnlineReset::now);

  /// Whether the rate limiter would admit a sample call of `rows` rows now (true without a limiter), and why not.
  /// Never waits. O(num_envs).
  RateLimitReason rate_limit_verdict(std::size_t rows) const noexcept;

  /// Steps in `view` over all envs, and for one env (throws env_out_of_range). O(num_envs) and O(1).
  uint64_t size(View view) const noexcept;
  /// The sizes of env `env_id`'s views (throws env_out_of_range).
  EnvSizes sizes(uint64_t env_id) const;

  /// Rewrites stored step `step` of env `env_id` in place (dejax's update_fn, for one step): each field with
  /// non-null data is replaced by `fields[f]` (exactly the field's bytes; size_mismatch otherwise); fields with
  /// null data are left as they are. Returns false, changing nothing, when the step is no longer stored (a
  /// writer overwrote it, or, with a stacked field, its frames: it cannot be sampled any more). Throws
  /// env_out_of_range, invalid_argument (a step that was never published; data for an episode flag field, whose
  /// boundaries are fixed when the step is pushed; data for a stacked field, whose frames other steps share).
  /// Rewriting the reward field changes what samples read, not the records already queued.
  /// Concurrent samplers never see a half-updated step (they retry); the env's writer waits for the copy of
  /// one step while it needs the same env's claim. Unlike write_back it rewrites any field that is neither an
  /// episode flag, the policy version nor stacked, derived or not.
  bool try_update(uint64_t env_id, uint64_t step, std::span<const FieldBytes> fields);
  /// The same, with the fields as a braced list.
  bool try_update(uint64_t env_id, uint64_t step, std::initializer_list<FieldBytes> fields) {
    return try_update(env_id, step, std::span<const FieldBytes>(fields.begin(), fields.size()));
  }

  /// Writes reanalysed values back into stored steps by handle (docs/design/write_back.md): row i rewrites the
  /// derived fields (Field::derived) of step steps[i] of env env_ids[i] with row i of each fields[f] that has data
  /// ([n][field shape], C-contiguous: exactly n x the field's bytes, size_mismatch otherwise); fields with null data
  /// are left as they are. The handles are what a sample returned: batch.env_ids() and batch.start_steps() (plus
  /// the row's offset for a step inside a sequence). A row whose step a writer overwrote since (or that left the
  /// view) is refused and counted, never applied to the newer step; `refused`, when given (n entries), gets 1 for
  /// such a row and 0 for an applied one. Rows of one env are written under one take of the env's update lock, in
  /// step order, each inside its own update section: a concurrent sampler never returns a half-written row (it
  /// redraws), and a write-back killed mid-row leaves that row out of the view (the lock's repair). Rows of one
  /// step given twice are both written, the later row last. Throws before writing anything: invalid_argument (data
  /// for a field that is not derived: write_back never changes what a writer pushed; a step never published; a
  /// consuming queue), size_mismatch (the lengths differ), env_out_of_range. The env ids and steps are copied once
  /// (storage the Sampler reuses); the field bytes are read while they are written. Any learner rank may call it
  /// (reanalyse workers are learner slots). O(n log n + n x derived bytes); waits only for another learner's update
  /// lock of the same env, and the env's writer waits for the rows of its env.
  WriteBackResult write_back(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                             std::span<const FieldBytes> fields, std::span<uint8_t> refused = {});
  /// The same for handles of generation `load_generation` (SampleBatch::load_generation(), ReanalyseChunk::
  /// load_generation): when a checkpoint was loaded into the buffer since (the buffer's generation differs), every
  /// row is refused and counted, nothing written: a load may give the same step indices other content. Handles
  /// that outlive the Sampler that sampled them (kept across a load, or a reanalyse worker's chunk) need this form;
  /// the one without a generation is for handles this Sampler sampled (no load runs while it exists).
  WriteBackResult write_back(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                             std::span<const FieldBytes> fields, std::span<uint8_t> refused, uint64_t load_generation);
  /// The same, with the fields as a braced list.
  WriteBackResult write_back(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                             std::initializer_list<FieldBytes> fields, std::span<uint8_t> refused = {}) {
    return write_back(env_ids, steps, std::span<const FieldBytes>(fields.begin(), fields.size()), refused);
  }

  /// Sets the priority of stored step steps[i] of env env_ids[i] to priorities[i], for each i (the learner's new
  /// TD errors for the rows it sampled: pass batch.env_ids() and batch.start_steps()). An update for a step that a
  /// writer has overwritten since it was sampled (with a stacked field: or its frames) is dropped and counted
  /// (never applied to the newer step): the result says how many. The largest priority given raises the running
  /// maximum that new steps enter at. Throws before setting anything: invalid_argument (a buffer without
  /// priorities; a priority that is not a finite number >= 0, or whose priority^alpha is past the largest float,
  /// 3.4e38, which the priority trees hold; a step that was never published), size_mismatch (the three lengths
  /// differ), env_out_of_range.
  /// The three arrays are copied once (into storage the Sampler keeps and reuses), and the copy is what is checked
  /// and set: another thread changing the caller's arrays during the call cannot get an unchecked value in.
  /// O(log capacity) per step; never waits for a writer, and writers never wait for it.
  PriorityUpdateResult update_priorities(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                                         std::span<const float> priorities);

  /// Rows redrawn so far by this Sampler because writers overwrote them during the copy.
  uint64_t retries() const noexcept { return retries_; }
  /// The learner slot it holds (layout 1.7; 0 in a one-learner buffer).
  uint64_t rank() const noexcept { return rank_; }
  /// The buffer it samples.
  const Buffer& buffer() const noexcept { return *buffer_; }

  /// Throws Error(invalid_argument) unless `buffer`'s samplers can fill a batch of `rows` x `length` steps: at least
  /// one row, a length from 1 to the capacity, and a size a process can address. Every sample call checks it
  /// first; a caller that allocates the batch itself before sampling (the Python module) calls it before that.
  static void check_batch_shape(const Buffer& buffer, const char* op, std::size_t rows, std::size_t length);

 private:
  // The buffer's checkpoint-load generation (GlobalControl::load_generation), for SampleBatch::prepare. No load runs
  // while this Sampler holds its learner lease, so it is the same for every call.
  uint64_t loads_seen() const noexcept;
  // The state of its calls' stages (defined in lib/sampler_parts.hpp): the snapshot's views, the planners
  // (lib/detail/sampling), the rows still to draw, the gather, the work counters. Behind a pointer, so that this
  // header carries none of it.
  struct Scratch;

  // A sample call's stages (lib/sampler_sample.cpp; the templates are defined and instantiated there only).
  void sample_rows(View view, std::size_t first_row, std::size_t count, std::size_t length, double power,
                   const SampleOptions& options, Rng& rng, SampleBatch& out);
  template <class Plan>
  void sample_with(Plan& planner, View view, std::size_t first_row, std::size_t count, std::size_t length,
                   double power, const SampleOptions& options, Rng& rng, SampleBatch& out);
  template <class Plan>
  std::size_t draw_round(Plan& planner, std::size_t length, Rng& rng, SampleBatch& out, bool& stalled);
  void check_args(const char* op, std::size_t rows, std::size_t length, double power,
                  const SampleOptions& options = {}) const;
  void check_recency(const char* op, std::size_t length, const SampleOptions& options) const;
  void check_priority_selectors(const char* op, std::size_t length, const SampleOptions& options) const;
  void refresh_updated_windows() noexcept;  // sequence priorities, after update_priorities (sampler_update.cpp)
  void mixture_probabilities(View view, std::size_t length, double power,
                             const std::array<std::size_t, kSelectors>& rows, const SampleOptions& options,
                             SampleBatch& out);  // SampleOptions::mixture_importance (sampler_mixture.cpp)
  static void finish_weights(SampleBatch& out, double beta, std::size_t first, std::size_t count) noexcept;
  // A batch of a mixture of selectors (lib/sampler_mixture.cpp), and the selector of a call without one.
  void sample_mixture(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                      Rng& rng, SampleBatch& out, const SampleOptions& options);
  static Selector selector_of(View view, const SampleOptions& options) noexcept;
  // The call's policy window (lib/sampler_policy.cpp): from options.max_staleness or the published one, into the
  // scratch; each round's views are cut to it (sample_with, total_weight): the steps the views held when the window
  // left none of them (a sample call throws that, throw_empty_window), else nullopt. finish_versions: the batch's
  // policy_version and policy_floor, and the rows' version ages in the slot's counters.
  void begin_window(const SampleOptions& options, const char* op);
  std::optional<uint64_t> cut_views_to_window();
  [[noreturn]] void throw_empty_window(View view, uint64_t steps) const;
  void finish_versions(SampleBatch& out, std::size_t rows) noexcept;
  // A consuming call (lib/sampler_consume.cpp): claims the rows' starts (waiting while too few are free), copies
  // them, commits. check_consume throws the error of a call that cannot consume, or of a non-consuming call on a
  // consuming queue (check_args calls it).
  void sample_consume(View view, std::size_t batch_size, std::size_t length, double power, Rng& rng,
                      SampleBatch& out, const SampleOptions& options);
  void claim_consumed(std::size_t rows, std::size_t length, const SampleOptions& options, Rng& rng);
  void copy_consumed(SampleBatch& out, std::size_t length);
  [[noreturn]] void check_consume(const char* op, const SampleOptions& options) const;
  // The learner half of the rate limiter (lib/sampler_rate_limit.cpp). In a buffer with a limiter: waits until it
  // admits `rows` rows and reserves them (or throws rate_limited); returns whether it reserved them (false without
  // a limiter). After the rows were drawn, the call wakes writers (count_samples); a failed call gives them back.
  bool wait_for_rate_limit(const char* op, std::size_t rows, uint64_t timeout_ms);

  // Holds a learner slot's lease: released when destroyed, handed over when moved. So the Sampler's move
  // constructor is the default one, and a constructor that throws after taking the lease still releases it.
  class LearnerLease {
   public:
    LearnerLease() = default;
    LearnerLease(Buffer* buffer, uint64_t slot, uint64_t word) noexcept;
    LearnerLease(LearnerLease&& other) noexcept
        : buffer_(std::exchange(other.buffer_, nullptr)), slot_(other.slot_), word_(other.word_),
          fork_generation_(other.fork_generation_) {}
    /// Throws not_leased when this object reached a forked child: the learner lease is the parent's.
    void check_process(const char* op) const;
    /// The lease word it holds the slot with (pack_owner of this process); 0 when not held.
    uint64_t word() const noexcept { return buffer_ != nullptr ? word_ : 0; }
    LearnerLease& operator=(LearnerLease&& other) noexcept;
    ~LearnerLease() { release(); }

   private:
    void release() noexcept;
    Buffer* buffer_ = nullptr;  // null when not held (or moved from)
    uint64_t slot_ = 0;
    uint64_t word_ = 0;
    uint64_t fork_generation_ = 0;  // detail::fork_generation() when taken
  };

  Buffer* buffer_ = nullptr;
  SamplerOptions options_;
  LearnerLease lease_;
  uint64_t rank_ = 0;
  uint64_t retries_ = 0;
  std::unique_ptr<Scratch> scratch_;     // never null, except in a moved-from Sampler
  std::size_t pop_cursor_ = 0;             // the env pop_episodes starts from
};

}  // namespace shmreplay
