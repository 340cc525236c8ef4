#include "shmreplay/sampler.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/wake.hpp"
#include "detail/sampling/cross_planners.hpp"
#include "detail/sampling/episode_planners.hpp"
#include "detail/sampling/gather.hpp"
#include "detail/sampling/priority_planner.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay {

using layout::EnvControl;
using layout::GlobalControl;

namespace {

// Bytes a round copies from one snapshot before the remaining rows are drawn from a fresh one (see sample_with).
constexpr uint64_t kResnapshotBytes = uint64_t{1} << 20;

// A gather chunk: the rows drawn before they are copied and validated together (sample_with). Up to kGatherRows
// rows, and no more rows once kGatherBytes are drawn: a chunk is the window of its rows' validation, so it stays
// short (a row whose slot a writer reclaims during the chunk is redrawn, even if it was copied before that).
constexpr std::size_t kGatherRows = 256;
constexpr uint64_t kGatherBytes = uint64_t{64} << 10;

// Episode boundaries for the stop/within planners, read from the segment's step meta words (one relaxed load
// each; a row whose meta a writer was overwriting fails the validation of its copy, which covers the meta).
class SegmentEpisodeStarts final : public detail::EpisodeStarts {
 public:
  explicit SegmentEpisodeStarts(const Buffer& buffer) : capacity_(buffer.capacity()) {
    if (!buffer.has_episodes()) return;  // then no planner asks (stop and within need episode fields)
    for (uint64_t e = 0; e < buffer.num_envs(); ++e) meta_.push_back(buffer.segment().step_meta(e));
  }
  uint64_t episode_start(std::size_t env, uint64_t step) const noexcept override {
    return detail::meta_start(detail::load_meta(meta_[env], capacity_, step));
  }

 private:
  uint64_t capacity_;
  std::vector<const std::atomic<uint64_t>*> meta_;  // per env, its step meta words in the mapping
};

// The envs' priority trees in the mapping, for the priority planner.
class SegmentPriorityTrees final : public detail::PriorityTrees {
 public:
  explicit SegmentPriorityTrees(const Buffer& buffer) : buffer_(&buffer) {}
  detail::PriorityTree tree(std::size_t env) const noexcept override {
    return {buffer_->segment().priority_tree(env), buffer_->priority_leaves(), buffer_->capacity()};
  }

 private:
  const Buffer* buffer_;
};

// Whether any env has published a step at or after the view's base (0, or online_start). False means the view
// is really empty; true with an empty snapshot means a slot was being rewritten at that instant (a ring of
// capacity 1), which a redraw gets past.
bool view_has_published(const Segment& b, View view) noexcept {
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    if (detail::has_published(b.env_control(e), view)) return true;
  }
  return false;
}

// Steps published and not yet overwritten by a completed write, over all envs (a write in progress does not
// count against the view here): what SampleOptions::min_steps is checked against, once per call.
uint64_t published_steps(const Segment& b, View view) noexcept {
  uint64_t total = 0;
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    const detail::StepRange r = detail::published_range(b.env_control(e), view, b.capacity());
    total += r.hi - r.lo;
  }
  return total;
}

// Env `e`'s view in a snapshot: view_range, bounded to the ring. A no-op in a consistent segment (claimed >=
// head); a segment whose counters were damaged (claimed far below head) gives a longer view, which the Inspector
// reports as corrupt, and which neither the draws (their slot computation) nor total_weight may see: both take
// their views from here, so total_weight weighs the view that sample draws from.
detail::EnvView snapshot_view(const Segment& b, uint64_t e, View view) noexcept {
  const uint64_t cap = b.capacity();
  const detail::StepRange r = detail::view_range(b.env_control(e), view, cap);
  return {std::max(r.lo, r.hi > cap ? r.hi - cap : 0), r.hi};
}

// Throws the error of a prioritized snapshot with nothing to draw from, when it is not a write in progress:
// every step of the views has priority 0 (empty_view), or a weight that is not finite (corrupt: every priority
// is checked as it enters, so the segment is damaged). Returns when a fresh snapshot may do: whether the views
// hold a positive weight (then a scan in a later round of the call would only repeat this one).
bool check_priority_leaves(const detail::PriorityPlanner& planner, const Segment& b, const char* op, View view) {
  switch (planner.scan_leaves()) {
    case detail::PriorityPlanner::Leaves::empty: return false;
    case detail::PriorityPlanner::Leaves::positive: return true;
    case detail::PriorityPlanner::Leaves::all_zero:
      throw Error(Errc::empty_view,
                  fmt::format("cannot {} the {} view of '{}' by priority: every stored step in it has priority 0 "
                              "(sampling weight 0), so none can be drawn; give steps a positive priority "
                              "(update_priorities, or push with priorities)",
                              op, to_string(view), b.name()));
    case detail::PriorityPlanner::Leaves::not_finite: break;
  }
  throw Error(Errc::corrupt,
              fmt::format("cannot {} the {} view of '{}' by priority: a sampling weight in its priority trees is "
                          "not a finite number >= 0 (the view's total is {}); every priority is checked as it "
                          "enters, so the segment is damaged",
                          op, to_string(view), b.name(), planner.total()));
}

// Whether any env's writer is between its claim and its head store (the view is one step short meanwhile).
bool writes_in_flight(const Segment& b) noexcept {
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    if (detail::write_in_flight(b.env_control(e))) return true;
  }
  return false;
}

// Which planner a call's options use; one place, so that sample and total_weight cannot choose differently.
enum class PlanKind : uint8_t { priority, closed_form, period, episodes };

PlanKind plan_kind(const SampleOptions& o, std::size_t length) noexcept {
  if (o.prioritized) return PlanKind::priority;
  // A single step never crosses an episode end: with period 1 every mode is the uniform closed form.
  if (o.period == 1 && (o.episodes == Episodes::cross || length == 1)) return PlanKind::closed_form;
  return o.episodes == Episodes::cross ? PlanKind::period : PlanKind::episodes;
}

// The learner's counters after a call; a sample call's rows (not a peek's) also count for the rate limiter
// (detail/protocol/rate_limit.hpp), which wakes writers waiting for them.
void count_call(Segment& b, std::size_t rows, bool sample) noexcept {
  GlobalControl& g = b.global_control();
  g.rows_sampled.fetch_add(rows, std::memory_order_relaxed);
  g.sample_calls.fetch_add(1, std::memory_order_relaxed);
  if (sample) detail::count_samples(g, rows, detail::coarse_realtime_ns(), detail::coarse_monotonic_ns());
}

}  // namespace

std::string_view to_string(View view) noexcept { return view == View::replay ? "replay" : "online"; }

std::string_view to_string(Episodes episodes) noexcept {
  switch (episodes) {
    case Episodes::cross: return "cross";
    case Episodes::stop: return "stop";
    case Episodes::within: return "within";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------------------------
// The drawing state

// What the Sampler decides with: the snapshot's views, one planner per way of drawing (detail/sampling), the rows
// still to draw in this call, and the planners' work counters. On the heap, so that sampler.hpp does not carry
// it; a moved Sampler takes it along (the planners point into it, never into the Sampler).
struct Sampler::Scratch {
  explicit Scratch(const Buffer& buffer)
      : starts(buffer),
        trees(buffer),
        rejection(stats, starts),
        priority(trees, starts),
        views(static_cast<std::size_t>(buffer.num_envs())),
        hi_base(views.size()),
        begin_mark(views.size(), 0),
        begin_seq(views.size()),
        min_start(views.size()),
        end(views.size()),
        online_seen(views.size(), 0) {
    chunk.resize(kGatherRows);
    chunk_envs.reserve(views.size());
    capacity = buffer.capacity();
    for (std::size_t f = 0; f < buffer.schema().size(); ++f) {
      field_base.push_back(buffer.segment().field_data(f));  // the mapping outlives the Sampler, also when a Buffer moves
      field_bytes.push_back(static_cast<std::size_t>(buffer.schema()[f].bytes()));
    }
  }

  SamplerStats stats;
  SegmentEpisodeStarts starts;
  SegmentPriorityTrees trees;
  detail::ClosedFormPlanner closed_form;  // cross, period 1; and any mode with L = 1, period 1
  detail::PeriodPlanner period;           // cross, period > 1
  detail::RejectionPlanner rejection;     // stop and within (with its exact fallback)
  detail::PriorityPlanner priority;       // prioritized
  std::vector<detail::EnvView> views;     // per env, the view [lo, hi) of the current round's snapshot
  std::vector<uint32_t> failed;           // rows to draw in the next round
  std::vector<uint32_t> redraw;           // rows of the current round
  // The gather (detail/sampling/gather.hpp): the rows of the current chunk, and per env what its validation read.
  std::vector<detail::GatherRow> chunk;   // its first chunk_size entries (never shrinks: no reallocation)
  std::size_t chunk_size = 0;
  bool chunk_whole = true;                // every row of the chunk is a whole_run (gather.hpp)
  std::vector<uint64_t> hi_base;          // per env, views[e].hi - views[e].hi % capacity: the step in slot 0
  uint64_t chunk_mark = 0;                // the current chunk's number
  std::vector<uint32_t> chunk_envs;       // the envs with a row in the current chunk, in order of their first row
  std::vector<uint64_t> begin_mark;       // per env, the chunk whose begin_seq and min_start are the env's
  std::vector<uint64_t> begin_seq;        // per env, update_seq before the chunk's copies (read_begin)
  std::vector<uint64_t> min_start;        // per env, the oldest first step of its rows with steps in the chunk
  std::vector<detail::ReadEnd> end;       // per env, claimed and update_seq after the chunk's copies
  std::vector<const std::byte*> field_base;  // per field, its array in the mapping
  std::vector<std::size_t> field_bytes;      // per field, bytes per step
  uint64_t capacity = 0;
  std::size_t length = 1;                    // the sequence length of the rows being added
  // update_priorities' copy of the caller's arrays, checked and then used (grows to the largest update only)
  std::vector<uint64_t> update_envs;
  std::vector<uint64_t> update_steps;
  std::vector<float> update_priorities;
  // Per env, the head of the last round's snapshot of the last draw from the online view: every step below it was
  // one that draw could take (reset_online_queue(OnlineReset::sampled) restarts the view there).
  std::vector<uint64_t> online_seen;
};

// ---------------------------------------------------------------------------------------------------------------
// Sampler: construction and the learner lease

Sampler::Sampler(Buffer& buffer, const SamplerOptions& options) : buffer_(&buffer), options_(options) {
  if (buffer.read_only()) {
    throw Error(Errc::read_only,
                fmt::format("cannot attach a learner to '{}': the buffer is mapped read-only", buffer.name()));
  }
  const uint64_t lease_word = detail::self_lease_word();
  GlobalControl& g = buffer.segment().global_control();
  const detail::LeaseResult r = detail::try_take_lease(detail::learner_lease_words(g), lease_word);
  if (r.outcome == detail::LeaseOutcome::held_by_us) {
    throw Error(Errc::lease_held,
                fmt::format("cannot attach a learner to '{}': this process already has a Sampler on it; a buffer "
                            "has one learner at a time",
                            buffer.name()));
  }
  if (r.outcome == detail::LeaseOutcome::held_alive) {
    throw Error(Errc::lease_held,
                fmt::format("cannot attach a learner to '{}': its learner is {}, which is alive; a buffer has one "
                            "learner at a time",
                            buffer.name(), detail::holder_text(r.holder_lease, r.holder_start_ticks)));
  }
  if (r.outcome == detail::LeaseOutcome::taken_over) {
    // The dead learner may have died inside try_update(); only the learner waits, so its waiter count goes too
    // (it would make every push issue a futex wake).
    for (uint64_t e = 0; e < buffer.num_envs(); ++e) detail::release_dead_update_lock(buffer.segment().env_control(e));
    detail::forget_waiters(g);
    g.learner_waiting_rows.store(0, std::memory_order_relaxed);  // it may have died waiting for the rate limiter
    // ... or inside update_priorities' walk of a tree: redo it (priorities.hpp).
    if (buffer.has_priorities()) {
      detail::finish_dead_walk(g.priority_walk, buffer.num_envs(), buffer.capacity(), [&](uint64_t e) {
        return detail::PriorityTree{buffer.segment().priority_tree(e), buffer.priority_leaves(), buffer.capacity()};
      });
    }
  }
  lease_ = LearnerLease(&buffer, lease_word);
  scratch_ = std::make_unique<Scratch>(buffer);
}

Sampler::Sampler(Sampler&& other) noexcept = default;
Sampler::~Sampler() = default;

const SamplerStats& Sampler::stats() const noexcept {
  static const SamplerStats kNone{};  // a moved-from Sampler has done no work
  return scratch_ != nullptr ? scratch_->stats : kNone;
}

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

// ---------------------------------------------------------------------------------------------------------------
// Views and sizes

using detail::view_range;

uint64_t Sampler::size(View view) const noexcept {
  uint64_t total = 0;
  const uint64_t cap = buffer_->capacity();
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    const detail::StepRange r = view_range(buffer_->segment().env_control(e), view, cap);
    total += r.hi - r.lo;
  }
  return total;
}

EnvSizes Sampler::sizes(uint64_t env_id) const {
  detail::check_env_id(buffer_->segment(), env_id, "size");
  const EnvControl& c = buffer_->segment().env_control(env_id);
  const detail::StepRange replay = view_range(c, View::replay, buffer_->capacity());
  const detail::StepRange online = view_range(c, View::online, buffer_->capacity());
  return {replay.hi, replay.hi - replay.lo, online.hi - online.lo};
}

bool Sampler::wait(View view, uint64_t min_steps, uint64_t timeout_ms) {
  lease_.check_process("wait on");
  const uint64_t most = buffer_->num_envs() * buffer_->capacity();
  if (min_steps > most) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot wait for {} steps in the {} view of '{}': it holds at most {} ({} envs x {} "
                            "steps)",
                            min_steps, to_string(view), buffer_->name(), most, buffer_->num_envs(),
                            buffer_->capacity()));
  }
  if (size(view) >= min_steps) return true;
  return detail::wait_until(buffer_->segment().global_control(), deadline_after_ms(timeout_ms),
                            [&] { return size(view) >= min_steps; });
}

void Sampler::reset_online_queue(OnlineReset to) {
  lease_.check_process("reset the online queue of");
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    EnvControl& c = buffer_->segment().env_control(e);
    if (to == OnlineReset::now) {
      detail::reset_online_start(c);
    } else {
      detail::advance_online_start(c, scratch_->online_seen[static_cast<std::size_t>(e)]);
    }
  }
  buffer_->segment().global_control().online_resets.fetch_add(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------------------------
// Sampling

void Sampler::check_batch_shape(const Buffer& buffer, const char* op, std::size_t rows, std::size_t length) {
  if (rows == 0) {
    throw Error(Errc::invalid_argument, fmt::format("cannot {} '{}': the batch size is 0", op, buffer.name()));
  }
  if (length == 0 || length > buffer.capacity()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}': sequence_length is {}, expected 1 to the capacity, {}", op,
                            buffer.name(), length, buffer.capacity()));
  }
  // The batch holds rows x length steps, each of step_bytes plus a mask byte: a size past what a process can
  // address would wrap in the products that size the batch, so it is refused here, before anything is allocated.
  const uint64_t cell_bytes = buffer.schema().step_bytes() + 1;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(uint64_t{rows}, uint64_t{length}, &bytes) ||
      __builtin_mul_overflow(bytes, cell_bytes, &bytes) || bytes > static_cast<uint64_t>(PTRDIFF_MAX)) {
    const uint64_t max_rows = static_cast<uint64_t>(PTRDIFF_MAX) / length / cell_bytes;
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}': the batch size is {}, expected at most {} (a batch of {} x {} steps of "
                            "{} bytes would not fit in the address space)",
                            op, buffer.name(), rows, max_rows, rows, length, cell_bytes - 1));
  }
}

void Sampler::check_args(const char* op, std::size_t rows, std::size_t length, double power,
                         const SampleOptions& options) const {
  lease_.check_process(op);
  if (options.episodes != Episodes::cross && !buffer_->has_episodes()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with episodes = {}: the buffer has no episode fields (create it with "
                            "CreateOptions::episodes naming its done, or terminated and/or truncated, field)",
                            op, buffer_->name(), to_string(options.episodes)));
  }
  if (options.period == 0) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}': period is 0, expected 1 or more steps between start positions", op,
                            buffer_->name()));
  }
  check_batch_shape(*buffer_, op, rows, length);
  if (!std::isfinite(power) || power < 0.0) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}': distribution_power is {}, expected a finite number >= 0", op,
                            buffer_->name(), power));
  }
  if (options.prioritized) {
    if (!buffer_->has_priorities()) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot {} '{}' by priority: the buffer was created without priorities (create it "
                              "with a priority exponent)",
                              op, buffer_->name()));
    }
    if (options.episodes == Episodes::within || options.period != 1) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot {} '{}' by priority with {}: prioritized sampling draws any stored start by "
                              "its priority (episodes = cross or stop, period 1)",
                              op, buffer_->name(),
                              options.period != 1 ? fmt::format("period = {}", options.period)
                                                  : std::string("episodes = within")));
    }
    if (power != 0.0) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot {} '{}' by priority with distribution_power = {}: a prioritized draw weighs a "
                              "start by its priority^alpha alone, not by the steps left after it (pass 0, the "
                              "default)",
                              op, buffer_->name(), power));
    }
    if (!std::isfinite(options.importance_exponent) || options.importance_exponent < 0.0) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot {} '{}': importance_exponent (beta) is {}, expected a finite number >= 0", op,
                              buffer_->name(), options.importance_exponent));
    }
  }
}

// Turns each row's N * P, which the priority planner left in the weights, into (N * P)^-beta over the batch's
// largest, computed as (smallest N * P / N * P)^beta: a ratio in (0, 1] to the power beta, which neither overflows
// nor, for the least likely row (exactly 1), underflows, whatever beta (as a quotient of two powers, beta = 1e9
// made it inf / inf). A row whose N * P rounded to 0 in the f32 weights is the least likely.
void Sampler::finish_weights(SampleBatch& out, double beta) noexcept {
  float smallest = std::numeric_limits<float>::infinity();
  for (std::size_t r = 0; r < out.rows_; ++r) smallest = std::min(smallest, out.weights_[r]);
  for (std::size_t r = 0; r < out.rows_; ++r) {
    const float np = out.weights_[r];
    out.weights_[r] = np <= smallest ? 1.0f : static_cast<float>(std::pow(static_cast<double>(smallest) / np, beta));
  }
}

// The gather: a chunk's rows are added (drawn) first, then copied field by field with the rows ahead prefetched
// (gather.hpp), then validated seqlock-style with one read_begin per env before the chunk's copies and one
// read_end per env after them (docs/design.md, "Concurrency protocol", "The batched gather").

void Sampler::begin_chunk(std::size_t length) noexcept {
  Scratch& z = *scratch_;
  z.chunk_size = 0;
  z.chunk_whole = true;
  z.chunk_envs.clear();
  ++z.chunk_mark;
  z.length = length;
}

// Adds steps [start, start + steps) of `env`, whose first step is in ring slot `slot`, as batch row `row`. (No
// prefetch here: prefetching each row as it is drawn measured no faster than the gather's own prefetching a few
// rows ahead of each copy, and slower at 10^7 stored steps, where the early prefetches compete for the TLB.)
SHMREPLAY_ALWAYS_INLINE void Sampler::add_row(uint64_t env, uint64_t start, uint64_t slot, uint64_t steps,
                                               uint32_t row) noexcept {
  Scratch& z = *scratch_;
  // The row is built in a local and stored once, so that the stores into chunk (uint64_t words) do not make the
  // compiler reload the Scratch fields read after them.
  const detail::GatherRow r{start, env, env * z.capacity + slot, slot, steps, row};
  z.chunk_whole = z.chunk_whole & detail::whole_run(r, z.length, z.capacity);
  z.chunk[z.chunk_size++] = r;
  if (z.begin_mark[env] != z.chunk_mark) [[unlikely]] {  // the env's first row in this chunk: before its copies
    z.begin_mark[env] = z.chunk_mark;
    z.begin_seq[env] = detail::read_begin(buffer_->segment().env_control(env));
    z.min_start[env] = UINT64_MAX;
    z.chunk_envs.push_back(static_cast<uint32_t>(env));  // no allocation: reserved for every env
    ++z.stats.control_loads;
  }
  // A row without steps (a peek at an empty env) copies nothing and cannot fail.
  z.min_start[env] = std::min(z.min_start[env], steps > 0 ? start : UINT64_MAX);
}

// Copies the chunk's rows into `out` (each row's steps, zeros and mask 0 up to `length`), then validates them;
// the rows that fail (a writer reclaimed a copied slot, or the learner updated the env during the chunk) are
// appended to scratch's `failed`, in row order, and counted in the return value.
//
// The validation is per env, not per row: copy_intact(begin, end, first) depends on the row only through its
// first step, and only as `claimed <= first + capacity`, so every row of an env is intact exactly when the row
// with the env's oldest first step (min_start, kept by add_row) is. Only a chunk with an env that fails looks at
// its rows one by one, to tell the failed ones from the others with that same test.
std::size_t Sampler::gather(std::size_t length, SampleBatch& out) noexcept {
  Scratch& z = *scratch_;
  const std::size_t n = z.chunk_size;
  if (n == 0) return 0;
  const uint64_t cap = buffer_->capacity();
  const detail::GatherRow* rows = z.chunk.data();
  detail::gather_fields(z.field_base.data(), out.field_ptr_.data(), z.field_bytes.data(), z.field_base.size(), length,
                        cap, rows, n, z.chunk_whole);
  detail::gather_mask(out.mask_, length, rows, n);
  detail::end_copies();
  bool intact = true;
  for (const uint32_t e : z.chunk_envs) {
    z.end[e] = detail::read_end_loads(buffer_->segment().env_control(e));
    // Step min_start (and so every later one) is intact while no writer has claimed step min_start + cap.
    intact &= z.min_start[e] == UINT64_MAX || detail::copy_intact(z.begin_seq[e], z.end[e], z.min_start[e], cap);
  }
  z.stats.control_loads += 2 * z.chunk_envs.size();
  std::size_t failed = 0;
  if (!intact) [[unlikely]] {
    for (std::size_t k = 0; k < n; ++k) {
      const detail::GatherRow& r = rows[k];
      if (r.steps > 0 && !detail::copy_intact(z.begin_seq[r.env], z.end[r.env], r.start, cap)) {
        z.failed.push_back(static_cast<uint32_t>(r.row));
        ++failed;
      }
    }
  }
  z.stats.rows_gathered += n;
  ++z.stats.gather_chunks;
  return failed;
}

// Draws rows [first_row, first_row + count) of `view` with the planner the options call for.
void Sampler::sample_rows(View view, std::size_t first_row, std::size_t count, std::size_t length, double power,
                          const SampleOptions& o, Rng& rng, SampleBatch& out) {
  if (o.min_steps > 0) {
    const uint64_t have = published_steps(buffer_->segment(), view);
    if (have < o.min_steps) {
      throw Error(Errc::empty_view,
                  fmt::format("cannot sample the {} view of '{}': it holds {} steps, fewer than min_steps = {}{}",
                              to_string(view), buffer_->name(), have, o.min_steps,
                              view == View::online ? " (counted since the last reset_online_queue())" : ""));
    }
  }
  Scratch& z = *scratch_;
  switch (plan_kind(o, length)) {
    case PlanKind::priority: sample_with(z.priority, view, first_row, count, length, power, o, rng, out); break;
    case PlanKind::closed_form: sample_with(z.closed_form, view, first_row, count, length, power, o, rng, out); break;
    case PlanKind::period: sample_with(z.period, view, first_row, count, length, power, o, rng, out); break;
    case PlanKind::episodes: sample_with(z.rejection, view, first_row, count, length, power, o, rng, out); break;
  }
  if (view == View::online) {  // sample_with's last round: its snapshot's heads are the latest it drew under
    for (std::size_t e = 0; e < z.views.size(); ++e) z.online_seen[e] = z.views[e].hi;
  }
}

double Sampler::total_weight(View view, std::size_t sequence_length, double distribution_power,
                             const SampleOptions& options) {
  check_args("compute the total weight of", 1, sequence_length, distribution_power, options);
  if (options.min_steps > 0 && published_steps(buffer_->segment(), view) < options.min_steps) return 0.0;
  Scratch& z = *scratch_;
  const uint64_t cap = buffer_->capacity();
  for (std::size_t e = 0; e < z.views.size(); ++e) z.views[e] = snapshot_view(buffer_->segment(), e, view);  // as sample_with
  detail::Planner* planner = nullptr;
  switch (plan_kind(options, sequence_length)) {
    case PlanKind::priority: planner = &z.priority; break;
    case PlanKind::closed_form: planner = &z.closed_form; break;
    case PlanKind::period: planner = &z.period; break;
    case PlanKind::episodes: planner = &z.rejection; break;
  }
  planner->begin_call();
  const detail::PlanOptions plan{options.episodes, std::min(options.period, cap)};
  if (planner->prepare(z.views, sequence_length, distribution_power, plan)) return planner->total_weight();
  // Nothing to draw: 0, unless a prioritized total is not finite (a damaged segment).
  if (options.prioritized && !std::isfinite(z.priority.total())) {
    (void)check_priority_leaves(z.priority, buffer_->segment(), "compute the total weight of", view);
  }
  return 0.0;
}

// The rounds of one view's rows: each round snapshots the view, has the planner draw the rows still pending, and
// copies and validates them, keeping the ones that failed validation for the next round (counted as retries).
// A template over the (final) planner type, so that the per-row draw is a direct call.
template <class Plan>
void Sampler::sample_with(Plan& planner, View view, std::size_t first_row, std::size_t count, std::size_t length,
                          double power, const SampleOptions& o, Rng& rng, SampleBatch& out) {
  Scratch& z = *scratch_;
  const uint64_t cap = buffer_->capacity();
  const detail::PlanOptions plan{o.episodes, std::min(o.period, cap)};  // a period of cap or more: first steps
  z.failed.reserve(count);  // no-op once warmed up
  z.redraw.reserve(count);
  z.failed.resize(count);
  std::iota(z.failed.begin(), z.failed.end(), static_cast<uint32_t>(first_row));
  planner.begin_call();
  // A round draws rows from one snapshot of the heads. A snapshot goes stale while its rows are copied (writers
  // reclaim the oldest slots), so after kResnapshotBytes of copying the rest of the rows wait for a fresh one:
  // those are deferred, not retried. `round` counts the rounds that made no clean progress (rows overwritten
  // during their copy, or a view that was momentarily unusable); it is what max_retry_rounds limits.
  const uint64_t step_bytes = buffer_->schema().step_bytes();
  uint32_t round = 0;
  bool drew_nothing = false;    // the last round without progress had nothing to draw (no row was overwritten)
  bool leaves_scanned = false;  // check_priority_leaves found a positive weight: no need to scan again
  while (!z.failed.empty()) {
    if (round > options_.max_retry_rounds) {  // give up, saying why the last rounds made no progress
      if (drew_nothing) {
        throw Error(Errc::contended,
                    fmt::format("cannot sample the {} view of '{}': {} snapshots in a row had no start to draw from "
                                "({})",
                                to_string(view), buffer_->name(), options_.max_retry_rounds,
                                o.prioritized ? "a write in progress hid every start, or the view's priority sums "
                                                "read 0 beside weights over 2^53 times larger"
                                              : "a write in progress hid every start"));
      }
      throw Error(Errc::contended,
                  fmt::format("cannot sample the {} view of '{}': {} row(s) were overwritten by writers during "
                              "the copy {} times in a row; the ring ({} steps per env) is too small for the "
                              "write rate",
                              to_string(view), buffer_->name(), z.failed.size(), options_.max_retry_rounds, cap));
    }
    for (std::size_t e = 0; e < z.views.size(); ++e) {
      z.views[e] = snapshot_view(buffer_->segment(), e, view);  // at most the ring, which the slot computation below needs
      z.hi_base[e] = z.views[e].hi - z.views[e].hi % cap;  // so that a row's slot needs no division (below)
    }
    // Whether the round may go ahead; throws when the view cannot give a row, yields when that may be a write
    // in progress (the view is a step short while a slot is reclaimed).
    const auto usable = [&](bool found) {
      if (found) return true;
      if (!view_has_published(buffer_->segment(), view)) {
        throw Error(Errc::empty_view, fmt::format("cannot sample the {} view of '{}': it holds no steps{}",
                                                  to_string(view), buffer_->name(),
                                                  view == View::online ? " (nothing was pushed since the last "
                                                                         "reset_online_queue())"
                                                                       : ""));
      }
      if constexpr (std::is_same_v<Plan, detail::PriorityPlanner>) {  // all priorities 0, or a damaged tree
        if (!leaves_scanned) leaves_scanned = check_priority_leaves(planner, buffer_->segment(), "sample", view);
      }
      // A write in progress hides the oldest step of its env; that can hide the only within start for good
      // unless the sequence needs the whole ring (L = capacity), where the next step brings one back.
      if (o.episodes == Episodes::within && (length < cap || !writes_in_flight(buffer_->segment()))) {
        throw Error(Errc::empty_view,
                    fmt::format("cannot sample the {} view of '{}' with episodes = within: no start position (every "
                                "{} steps) has {} steps of one episode before the head",
                                to_string(view), buffer_->name(), o.period, length));
      }
      ::sched_yield();
      return false;
    };
    if (!usable(planner.prepare(z.views, length, power, plan))) {
      ++round;
      drew_nothing = true;
      continue;
    }
    std::swap(z.failed, z.redraw);
    z.failed.clear();
    std::size_t overwritten = 0;
    uint64_t copied = 0;
    bool stalled = false;
    std::size_t i = 0;
    // Chunks: draw up to kGatherRows rows (kGatherBytes), then copy and validate them together (gather). A row
    // has at most `length` steps, so the chunk's row count keeps it within its bytes (one row at least).
    const uint64_t row_bytes = std::max<uint64_t>(length * step_bytes, 1);
    while (i < z.redraw.size() && copied < kResnapshotBytes && !stalled) {
      begin_chunk(length);
      const uint64_t chunk_budget = std::min(kGatherBytes, kResnapshotBytes - copied);
      const std::size_t chunk_end =
          std::min({z.redraw.size(), i + kGatherRows, i + std::max<std::size_t>(chunk_budget / row_bytes, 1)});
      uint64_t chunk_steps = 0;
      while (i < chunk_end) {
        const std::optional<detail::Draw> d = planner.draw(rng);
        if (!d) {
          // Nothing to draw from in this snapshot (a write in progress): this row and the rest wait for the next
          // round's fresh snapshot (the chunk drawn so far is still copied).
          (void)usable(false);
          stalled = true;
          break;
        }
        const uint32_t row = z.redraw[i++];
        out.env_ids_[row] = d->env;
        out.starts_[row] = d->start;
        if (o.prioritized) out.weights_[row] = static_cast<float>(d->relative_probability);  // finish_weights
        // The start's slot without a division: a start in the view is in [hi - cap, hi) (the snapshot's views are
        // at most the ring), so it is at most one lap before the step in slot 0 of hi's lap.
        const uint64_t base = z.hi_base[d->env];
        const uint64_t slot = d->start >= base ? d->start - base : d->start + cap - base;
        add_row(d->env, d->start, slot, d->steps, row);
        chunk_steps += d->steps;
      }
      copied += chunk_steps * step_bytes;
      overwritten += gather(length, out);
    }
    z.failed.insert(z.failed.end(), z.redraw.begin() + static_cast<std::ptrdiff_t>(i), z.redraw.end());  // deferred
    if (overwritten > 0) {
      retries_ += overwritten;
      buffer_->segment().global_control().retries.fetch_add(overwritten, std::memory_order_relaxed);
    }
    if (overwritten > 0 || stalled) {
      ++round;
      drew_nothing = overwritten == 0;
    }
  }
}

void Sampler::sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                     Rng& rng, SampleBatch& out) {
  sample(view, batch_size, sequence_length, distribution_power, rng, out, SampleOptions{});
}

void Sampler::sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                     Rng& rng, SampleBatch& out, const SampleOptions& options) {
  check_args("sample", batch_size, sequence_length, distribution_power, options);
  wait_for_rate_limit("sample", batch_size, options.rate_limit_timeout_ms);
  out.prepare(buffer_->schema(), batch_size, sequence_length);
  out.episode_fields_ = buffer_->episode_fields();
  sample_rows(view, 0, batch_size, sequence_length, distribution_power, options, rng, out);
  if (options.prioritized) finish_weights(out, options.importance_exponent);
  count_call(buffer_->segment(), batch_size, /*sample=*/true);
}

void Sampler::sample_mixed(std::size_t replay_batch, std::size_t online_batch, std::size_t sequence_length,
                           double distribution_power, Rng& rng, SampleBatch& out) {
  sample_mixed(replay_batch, online_batch, sequence_length, distribution_power, rng, out, SampleOptions{});
}

void Sampler::sample_mixed(std::size_t replay_batch, std::size_t online_batch, std::size_t sequence_length,
                           double distribution_power, Rng& rng, SampleBatch& out, const SampleOptions& options) {
  if (online_batch > SIZE_MAX - replay_batch) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot sample (mixed) '{}': replay_batch {} + online_batch {} is past {}, the largest "
                            "batch size",
                            buffer_->name(), replay_batch, online_batch, SIZE_MAX));
  }
  const std::size_t rows = replay_batch + online_batch;
  check_args("sample (mixed)", rows, sequence_length, distribution_power, options);
  wait_for_rate_limit("sample (mixed)", rows, options.rate_limit_timeout_ms);
  out.prepare(buffer_->schema(), rows, sequence_length);
  out.episode_fields_ = buffer_->episode_fields();
  if (replay_batch > 0) {
    sample_rows(View::replay, 0, replay_batch, sequence_length, distribution_power, options, rng, out);
  }
  if (online_batch > 0) {
    sample_rows(View::online, replay_batch, online_batch, sequence_length, distribution_power, options, rng, out);
  }
  if (options.prioritized) finish_weights(out, options.importance_exponent);
  count_call(buffer_->segment(), rows, /*sample=*/true);
}

void Sampler::priority_weights(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                               std::span<double> out) const {
  lease_.check_process("read priorities of");
  if (!buffer_->has_priorities()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot read priorities of '{}': it was created without priorities (create it with a "
                            "priority exponent)",
                            buffer_->name()));
  }
  if (steps.size() != env_ids.size() || out.size() != env_ids.size()) {
    throw Error(Errc::size_mismatch,
                fmt::format("cannot read priorities of '{}': {} env ids, {} steps and room for {} weights; expected "
                            "one of each per step",
                            buffer_->name(), env_ids.size(), steps.size(), out.size()));
  }
  for (std::size_t i = 0; i < env_ids.size(); ++i) {
    // each id and step read once and the id checked as read: another thread may change the caller's arrays
    const uint64_t e = env_ids[i];
    const uint64_t step = steps[i];
    detail::check_env_id(buffer_->segment(), e, "read priorities of");
    const EnvControl& c = buffer_->segment().env_control(e);
    const detail::PriorityTree tree{buffer_->segment().priority_tree(e), buffer_->priority_leaves(), buffer_->capacity()};
    out[i] = step < detail::load_head(c) ? detail::step_weight(tree, c, step) : -1.0;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Completed-episode records

std::size_t Sampler::pop_episodes(std::span<EpisodeRecord> out) {
  lease_.check_process("pop episodes of");
  if (!buffer_->has_episodes() || out.empty()) return 0;
  const uint64_t num_envs = buffer_->num_envs();
  std::size_t n = 0;
  for (uint64_t k = 0; k < num_envs && n < out.size(); ++k) {
    n += detail::pop_records(buffer_->segment(), (pop_cursor_ + k) % num_envs, out.subspan(n));
  }
  pop_cursor_ = static_cast<std::size_t>((pop_cursor_ + 1) % num_envs);
  return n;
}

void Sampler::peek(std::span<const uint64_t> env_ids, SampleBatch& out) {
  lease_.check_process("peek into");
  if (env_ids.empty()) {
    throw Error(Errc::invalid_argument, fmt::format("cannot peek into '{}': the list of env ids is empty",
                                                    buffer_->name()));
  }
  out.prepare(buffer_->schema(), env_ids.size(), 1);
  out.episode_fields_ = buffer_->episode_fields();
  // One gather of every row; the rows whose newest step was overwritten during it are read again.
  Scratch& z = *scratch_;
  const uint64_t cap = buffer_->capacity();
  z.redraw.clear();
  for (std::size_t row = 0; row < env_ids.size(); ++row) {
    // each id read once into the batch, checked as read, and used from there: another thread may change the
    // caller's array meanwhile
    const uint64_t e = env_ids[row];
    detail::check_env_id(buffer_->segment(), e, "peek at");
    out.env_ids_[row] = e;
    z.redraw.push_back(static_cast<uint32_t>(row));
  }
  if (z.chunk.size() < z.redraw.size()) z.chunk.resize(z.redraw.size());  // grows only
  for (uint32_t round = 0;; ++round) {
    begin_chunk(1);
    for (const uint32_t row : z.redraw) {
      const uint64_t e = out.env_ids_[row];
      const uint64_t head = detail::load_head(buffer_->segment().env_control(e));
      const uint64_t start = head == 0 ? 0 : head - 1;
      out.starts_[row] = start;
      add_row(e, start, start % cap, head == 0 ? 0 : 1, row);
    }
    z.failed.clear();
    if (gather(1, out) == 0) break;
    if (round >= options_.max_retry_rounds) {
      throw Error(Errc::contended, fmt::format("cannot peek at env {} of '{}': its newest step was overwritten "
                                               "during the copy {} times in a row",
                                               env_ids[z.failed.front()], buffer_->name(), round + 1));
    }
    retries_ += z.failed.size();
    buffer_->segment().global_control().retries.fetch_add(z.failed.size(), std::memory_order_relaxed);
    std::swap(z.redraw, z.failed);
  }
  count_call(buffer_->segment(), env_ids.size(), /*sample=*/false);
}

// ---------------------------------------------------------------------------------------------------------------
// Update

bool Sampler::try_update(uint64_t env_id, uint64_t step, std::span<const FieldBytes> fields) {
  lease_.check_process("update");
  const Schema& schema = buffer_->schema();
  detail::check_env_id(buffer_->segment(), env_id, "update");
  if (fields.size() != schema.size()) {
    throw Error(Errc::size_mismatch, fmt::format("cannot update '{}': {} field values given, the schema has {} ({})",
                                                 buffer_->name(), fields.size(), schema.size(), schema.to_string()));
  }
  const EpisodeFieldIndices& ef = buffer_->episode_fields();
  for (const auto& flag : {ef.done, ef.terminated, ef.truncated}) {
    if (flag && fields.size() == schema.size() && fields[*flag].data != nullptr) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot update step {} of env {} of '{}': field '{}' is an episode flag field, and "
                              "episode boundaries are fixed when a step is pushed; pass no data for it",
                              step, env_id, buffer_->name(), schema[*flag].name));
    }
  }
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (fields[f].data != nullptr && fields[f].bytes != schema[f].bytes()) {
      throw Error(Errc::size_mismatch, fmt::format("cannot update '{}': field '{}' ({}) has {} bytes, expected {}",
                                                   buffer_->name(), schema[f].name, schema[f].to_string(),
                                                   fields[f].bytes, schema[f].bytes()));
    }
  }
  EnvControl& c = buffer_->segment().env_control(env_id);
  const uint64_t head = detail::load_head(c);
  if (step >= head) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot update step {} of env {} of '{}': it was never published (the env has {} "
                            "steps)",
                            step, env_id, buffer_->name(), head));
  }
  const uint64_t cap = buffer_->capacity();
  // While the update lock is held the writer cannot claim a new slot, and the slot it may be writing right now
  // (claimed - 1) is outside the steps accepted here.
  const uint64_t claimed = detail::lock_for_update(c);
  const bool stored = step + cap >= claimed;  // step's slot has not been claimed for step + cap
  if (stored) {
    {
      const detail::UpdateSection section(c);
      for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].data == nullptr) continue;
        const uint64_t b = schema[f].bytes();
        std::memcpy(buffer_->segment().field_data(f) + (env_id * cap + step % cap) * b, fields[f].data, b);
      }
    }
    buffer_->segment().global_control().steps_updated.fetch_add(1, std::memory_order_relaxed);
  }
  detail::unlock_update(c, claimed);
  return stored;
}

// ---------------------------------------------------------------------------------------------------------------
// Priorities

PriorityUpdateResult Sampler::update_priorities(std::span<const uint64_t> env_ids, std::span<const uint64_t> steps,
                                                std::span<const float> priorities) {
  lease_.check_process("update priorities of");
  if (!buffer_->has_priorities()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot update priorities of '{}': it was created without priorities (create it with a "
                            "priority exponent)",
                            buffer_->name()));
  }
  if (steps.size() != env_ids.size() || priorities.size() != env_ids.size()) {
    throw Error(Errc::size_mismatch,
                fmt::format("cannot update priorities of '{}': {} env ids, {} steps and {} priorities; expected one "
                            "of each per updated step",
                            buffer_->name(), env_ids.size(), steps.size(), priorities.size()));
  }
  // Everything is copied once, then checked before anything is set, and the checked copy is what is set: another
  // thread may change the caller's arrays meanwhile.
  Scratch& z = *scratch_;
  z.update_envs.assign(env_ids.begin(), env_ids.end());
  z.update_steps.assign(steps.begin(), steps.end());
  z.update_priorities.assign(priorities.begin(), priorities.end());
  env_ids = z.update_envs;
  steps = z.update_steps;
  priorities = z.update_priorities;
  const double alpha = buffer_->priority_exponent();
  float largest = 0;
  for (std::size_t i = 0; i < env_ids.size(); ++i) {
    detail::check_env_id(buffer_->segment(), env_ids[i], "update priorities of");
    if (!detail::priority_fits(priorities[i], alpha)) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot update priorities of '{}': priority {} (position {}, env {} step {}) {}",
                              buffer_->name(), priorities[i], i, env_ids[i], steps[i],
                              detail::priority_misfit(priorities[i], alpha)));
    }
    const uint64_t head = detail::load_head(buffer_->segment().env_control(env_ids[i]));
    if (steps[i] >= head) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot update the priority of step {} of env {} of '{}' (position {}): it was never "
                              "published (the env has {} steps)",
                              steps[i], env_ids[i], buffer_->name(), i, head));
    }
    largest = std::max(largest, priorities[i]);
  }
  GlobalControl& g = buffer_->segment().global_control();
  PriorityUpdateResult result;
  for (std::size_t i = 0; i < env_ids.size(); ++i) {
    const uint64_t e = env_ids[i];
    const detail::PriorityTree tree{buffer_->segment().priority_tree(e), buffer_->priority_leaves(), buffer_->capacity()};
    if (detail::update_priority(tree, buffer_->segment().env_control(e), e, steps[i], detail::priority_weight(priorities[i], alpha),
                                g.priority_walk)) {
      ++result.applied;
    } else {
      ++result.dropped;
    }
  }
  if (env_ids.size() > 0) detail::raise_max_priority(g.max_priority, largest);
  g.priority_updates.fetch_add(result.applied, std::memory_order_relaxed);
  g.priority_updates_dropped.fetch_add(result.dropped, std::memory_order_relaxed);
  return result;
}

}  // namespace shmreplay
