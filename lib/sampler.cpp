#include "shmreplay/sampler.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/wake.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {
namespace {

using layout::EnvControl;
using layout::GlobalControl;

// A double in [0, 1) from the top 53 bits of one engine output: the same on every platform.
inline double uniform01(Rng& rng) noexcept { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// An integer in [0, n) from one engine output (the high half of a 64 x 64-bit product; bias below n / 2^64).
inline uint64_t uniform_below(Rng& rng, uint64_t n) noexcept {
  __extension__ using U128 = unsigned __int128;
  return static_cast<uint64_t>((static_cast<U128>(rng()) * n) >> 64);
}

// Stop/within sampling proposes at most this many starts for one row before the call switches to the exact
// method (which enumerates episodes).
constexpr uint32_t kMaxTries = 64;

// The first point >= x of the grid anchor, anchor + period, ... (x >= anchor).
inline uint64_t grid_ceil(uint64_t anchor, uint64_t period, uint64_t x) noexcept {
  return anchor + (x - anchor + period - 1) / period * period;
}

// Grid points p with p + L <= hi, from `first` on (the starts that have L steps left): their count.
inline uint64_t full_starts(uint64_t first, uint64_t hi, uint64_t length, uint64_t period) noexcept {
  return hi >= first + length ? (hi - length - first) / period + 1 : 0;
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
// Sampler: construction and the learner lease

Sampler::Sampler(Buffer& buffer, const SamplerOptions& options) : buffer_(&buffer), options_(options) {
  if (buffer.read_only()) {
    throw Error(Errc::read_only,
                fmt::format("cannot attach a learner to '{}': the buffer is mapped read-only", buffer.name()));
  }
  const uint64_t lease_word = detail::self_lease_word();
  GlobalControl& g = buffer.global_control();
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
    for (uint64_t e = 0; e < buffer.num_envs(); ++e) detail::release_dead_update_lock(buffer.env_control(e));
    detail::forget_waiters(g);
  }
  lease_ = LearnerLease(&buffer, lease_word);
  const std::size_t num_envs = static_cast<std::size_t>(buffer.num_envs());
  lo_.resize(num_envs);
  hi_.resize(num_envs);
  cumulative_.resize(num_envs);
  grid_cumulative_.resize(num_envs);
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
    detail::release_lease(detail::learner_lease_words(buffer_->global_control()), word_);
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
    const detail::StepRange r = view_range(buffer_->env_control(e), view, cap);
    total += r.hi - r.lo;
  }
  return total;
}

EnvSizes Sampler::sizes(uint64_t env_id) const {
  detail::check_env_id(*buffer_, env_id, "size");
  const EnvControl& c = buffer_->env_control(env_id);
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  return detail::wait_until(buffer_->global_control(), deadline, [&] { return size(view) >= min_steps; });
}

void Sampler::reset_online_queue() {
  lease_.check_process("reset the online queue of");
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) detail::reset_online_start(buffer_->env_control(e));
  buffer_->global_control().online_resets.fetch_add(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------------------------
// Sampling

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
  if (rows == 0) {
    throw Error(Errc::invalid_argument, fmt::format("cannot {} '{}': the batch size is 0", op, buffer_->name()));
  }
  if (length == 0 || length > buffer_->capacity()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}': sequence_length is {}, expected 1 to the capacity, {}", op,
                            buffer_->name(), length, buffer_->capacity()));
  }
  if (!std::isfinite(power) || power < 0.0) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}': distribution_power is {}, expected a finite number >= 0", op,
                            buffer_->name(), power));
  }
}

// Fills lo_/hi_/cumulative_ for `view` and returns whether any start position exists. The weight of env e
// with n = hi - lo steps: its first max(0, n - L + 1) starts have remaining length L (weight L^p); the last
// min(n, L - 1) have remaining lengths min(n, L-1), ..., 2, 1, whose weights sum to tail_prefix_[min(n, L-1)].
// Weights are scaled by 1 / r_max^p, where r_max is the longest remaining length in the view, so that the
// largest weight is 1: a large power cannot overflow to infinity (tiny weights rounding to 0 is the right limit).
bool Sampler::take_snapshot(View view, std::size_t length, double power) noexcept {
  const uint64_t cap = buffer_->capacity();
  const uint64_t L = length;
  uint64_t longest = 0;
  for (std::size_t e = 0; e < lo_.size(); ++e) {
    const detail::StepRange r = view_range(buffer_->env_control(e), view, cap);
    lo_[e] = r.lo;
    hi_[e] = r.hi;
    longest = std::max(longest, r.hi - r.lo);
  }
  const uint64_t r_max = std::min(longest, L);
  if (r_max == 0) return false;
  if (length != table_length_ || power != table_power_ || r_max != table_rmax_) {
    // O(L) when (L, power, r_max) changes; r_max is L as soon as one env holds L steps.
    tail_prefix_.resize(length + 1);
    tail_prefix_[0] = 0.0;
    const double scale = static_cast<double>(r_max);
    for (std::size_t r = 1; r <= length; ++r) {
      tail_prefix_[r] = tail_prefix_[r - 1] + std::pow(static_cast<double>(r) / scale, power);
    }
    table_length_ = length;
    table_power_ = power;
    table_rmax_ = r_max;
  }
  double total = 0.0;
  for (std::size_t e = 0; e < lo_.size(); ++e) {
    const uint64_t n = hi_[e] - lo_[e];
    const uint64_t full = n >= L ? n - L + 1 : 0;
    const uint64_t tail = std::min<uint64_t>(n, L - 1);
    // A full-length start weighs (L / r_max)^p = 1: when r_max < L no env has one.
    total += static_cast<double>(full) + tail_prefix_[tail];
    cumulative_[e] = total;
  }
  return total > 0.0;
}

// Draws one start position from the snapshot into row `row` of `out`.
void Sampler::draw(Rng& rng, std::size_t row, std::size_t length, SampleBatch& out) const noexcept {
  const double total = cumulative_.back();
  const double u = uniform01(rng) * total;
  // The env: the first whose cumulative weight exceeds u (envs of weight 0 are never chosen).
  auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
  if (it == cumulative_.end()) --it;  // u rounded up to the total
  while (it != cumulative_.begin() && *it == *(it - 1)) --it;
  const auto e = static_cast<std::size_t>(it - cumulative_.begin());
  const double before = e == 0 ? 0.0 : cumulative_[e - 1];
  const uint64_t L = length;
  const uint64_t lo = lo_[e];
  const uint64_t hi = hi_[e];
  const uint64_t n = hi - lo;
  const uint64_t full = n >= L ? n - L + 1 : 0;
  const uint64_t tail = std::min<uint64_t>(n, L - 1);
  double v = std::max(0.0, u - before);
  uint64_t start = 0;
  if (v < static_cast<double>(full)) {  // each full-length start weighs 1
    const auto idx = static_cast<uint64_t>(v);
    start = lo + std::min(idx, full - 1);
  } else if (tail > 0) {
    v -= static_cast<double>(full);
    // The remaining length r in 1..tail whose weight interval holds v; that start is hi - r.
    const double* first = tail_prefix_.data() + 1;
    const double* found = std::upper_bound(first, first + tail, v);
    const uint64_t r = std::min<uint64_t>(static_cast<uint64_t>(found - first) + 1, tail);
    start = hi - r;
  } else {
    start = lo + full - 1;  // v rounded up past the last full start
  }
  out.env_ids_[row] = e;
  out.starts_[row] = start;
}

// Copies steps [start, start + count) of `env` into row `row` (zero-filling and masking the rest of the row),
// then validates the copy seqlock-style. Returns false when a writer reclaimed a copied slot or the learner
// updated the env during the copy; the row must then be redrawn.
bool Sampler::copy_steps(uint64_t env, uint64_t start, uint64_t count, std::size_t row,
                         SampleBatch& out) const noexcept {
  const EnvControl& c = buffer_->env_control(env);
  const uint64_t cap = buffer_->capacity();
  const std::size_t L = out.length_;
  const uint64_t useq = detail::read_begin(c);  // before the copy
  const uint64_t slot0 = start % cap;
  const uint64_t first = std::min(count, cap - slot0);  // steps before the ring wraps
  for (std::size_t f = 0; f < out.field_ptr_.size(); ++f) {
    const std::size_t b = out.field_step_bytes_[f];
    std::byte* dst = out.field_ptr_[f] + row * L * b;
    const std::byte* ring = buffer_->field_data(f) + env * cap * b;
    std::memcpy(dst, ring + slot0 * b, first * b);
    if (count > first) std::memcpy(dst + first * b, ring, (count - first) * b);
    if (count < L) std::memset(dst + count * b, 0, (L - count) * b);
  }
  uint8_t* mask = out.mask_ + row * L;
  std::memset(mask, 1, count);
  std::memset(mask + count, 0, L - count);
  // Step `start` (and so every later one) is intact while no writer has claimed step start + cap.
  return detail::copy_intact(useq, detail::read_end(c), start, cap);
}

void Sampler::count_call(std::size_t rows) noexcept {
  GlobalControl& g = buffer_->global_control();
  g.rows_sampled.fetch_add(rows, std::memory_order_relaxed);
  g.sample_calls.fetch_add(1, std::memory_order_relaxed);
}

// Whether any env has published a step at or after the view's base (0, or online_start). False means the view
// is really empty; true with an empty snapshot means a slot was being rewritten at that instant (a ring of
// capacity 1), which a redraw gets past.
bool Sampler::view_has_published(View view) const noexcept {
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    if (detail::has_published(buffer_->env_control(e), view)) return true;
  }
  return false;
}

// Steps published and not yet overwritten by a completed write, over all envs (a write in progress does not
// count against the view here): what SampleOptions::min_steps is checked against, once per call.
uint64_t Sampler::published_steps(View view) const noexcept {
  const uint64_t cap = buffer_->capacity();
  uint64_t total = 0;
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    const detail::StepRange r = detail::published_range(buffer_->env_control(e), view, cap);
    total += r.hi - r.lo;
  }
  return total;
}

// Whether any env's writer is between its claim and its head store (the view is one step short meanwhile).
bool Sampler::writes_in_flight() const noexcept {
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    if (detail::write_in_flight(buffer_->env_control(e))) return true;
  }
  return false;
}

// S[r] = (r / scale)^power + S[r - period] (0 below 1), for r <= length: the total weight of the starts whose
// remaining lengths are r, r - period, r - 2 period, ... > 0, i.e. of the grid points from a start with r steps
// left up to the end of its segment. For period 1 it is tail_prefix_ (scaled by `scale`).
void Sampler::ensure_period_table(std::size_t length, double power, uint64_t period, uint64_t scale) {
  if (length == period_table_length_ && power == period_table_power_ && period == period_table_period_ &&
      scale == period_table_scale_) {
    return;
  }
  period_table_.resize(length + 1);
  period_table_[0] = 0.0;
  const double s = static_cast<double>(scale);
  for (std::size_t r = 1; r <= length; ++r) {
    const double w = std::pow(static_cast<double>(r) / s, power);
    period_table_[r] = w + (r > period ? period_table_[r - period] : 0.0);
  }
  period_table_length_ = length;
  period_table_power_ = power;
  period_table_period_ = period;
  period_table_scale_ = scale;
}

namespace {

// Among the grid points of a segment's tail, whose remaining lengths are r0, r0 - period, ..., c (c in
// [1, period]) with cumulative weights table[c], table[c + period], ..., table[r0] from the end: the remaining
// length of the one whose weight interval holds v (0 <= v < table[r0]).
uint64_t pick_tail(const std::vector<double>& table, uint64_t r0, uint64_t period, double v) noexcept {
  const uint64_t c = (r0 - 1) % period + 1;
  uint64_t lo = 0;
  uint64_t hi = (r0 - c) / period;  // the answer is in [lo, hi]
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (table[static_cast<std::size_t>(c + mid * period)] > v) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return c + lo * period;
}

}  // namespace

// The snapshot for sampling with options (a period, or stop/within). cross: per env the exact total weight over
// the period's grid, as take_snapshot does for period 1 (full starts weigh 1 after scaling by r_max^p; the tail's
// weights come from the period table). stop/within: per env the number of grid points that can start a row (the
// proposal of draw_by_rejection). Returns whether any start exists.
bool Sampler::take_general_snapshot(View view, std::size_t length, double power, const SampleOptions& o) {
  const uint64_t cap = buffer_->capacity();
  const uint64_t L = length;
  const uint64_t P = std::min(o.period, cap);  // a period of cap or more keeps only each view's first step
  uint64_t longest = 0;
  for (std::size_t e = 0; e < lo_.size(); ++e) {
    const detail::StepRange r = view_range(buffer_->env_control(e), view, cap);
    lo_[e] = r.lo;
    hi_[e] = r.hi;
    longest = std::max(longest, r.hi - r.lo);
  }
  if (o.episodes == Episodes::cross) {
    const uint64_t r_max = std::min(longest, L);  // the first grid point of the longest env has r_max left
    if (r_max == 0) return false;
    ensure_period_table(length, power, P, r_max);
    double total = 0.0;
    for (std::size_t e = 0; e < lo_.size(); ++e) {
      const uint64_t full = full_starts(lo_[e], hi_[e], L, P);
      const uint64_t tail_first = lo_[e] + full * P;
      total += static_cast<double>(full) +
               (tail_first < hi_[e] ? period_table_[static_cast<std::size_t>(hi_[e] - tail_first)] : 0.0);
      cumulative_[e] = total;
    }
    return total > 0.0;
  }
  uint64_t total = 0;
  for (std::size_t e = 0; e < lo_.size(); ++e) {
    const uint64_t n = hi_[e] - lo_[e];
    total += o.episodes == Episodes::within ? full_starts(lo_[e], hi_[e], L, P) : (n == 0 ? 0 : (n - 1) / P + 1);
    grid_cumulative_[e] = total;
  }
  return total > 0;
}

// Draws one start for cross sampling with a period from the snapshot, as draw() does for period 1.
void Sampler::draw_cross_period(Rng& rng, std::size_t row, std::size_t length, uint64_t period,
                                SampleBatch& out) noexcept {
  const double total = cumulative_.back();
  const double u = uniform01(rng) * total;
  auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
  if (it == cumulative_.end()) --it;
  while (it != cumulative_.begin() && *it == *(it - 1)) --it;
  const auto e = static_cast<std::size_t>(it - cumulative_.begin());
  const double v = std::max(0.0, u - (e == 0 ? 0.0 : cumulative_[e - 1]));
  const uint64_t L = length;
  const uint64_t lo = lo_[e];
  const uint64_t hi = hi_[e];
  const uint64_t full = full_starts(lo, hi, L, period);
  const uint64_t tail_first = lo + full * period;
  uint64_t start = 0;
  if (v < static_cast<double>(full) || tail_first >= hi) {
    start = lo + std::min(static_cast<uint64_t>(v), full == 0 ? 0 : full - 1) * period;
  } else {
    start = hi - pick_tail(period_table_, hi - tail_first, period, v - static_cast<double>(full));
  }
  out.env_ids_[row] = e;
  out.starts_[row] = start;
  row_steps_[row] = std::min<uint64_t>(L, hi - start);
}

// Stop/within by rejection: propose a grid point uniformly over all envs, place it in its episode from the step
// meta, accept it with probability (its weight) / L^power. Exact for the target weights, since every weight is at
// most L^power. Returns false when kMaxTries proposals were refused (the caller then switches to build_exact).
// Meta words are read without validation here: a start whose meta a writer was overwriting is itself being
// overwritten, and the row's copy (which validates every step >= its start, meta included) rejects it.
bool Sampler::draw_by_rejection(Rng& rng, std::size_t row, std::size_t length, double power,
                                const SampleOptions& o, SampleBatch& out) noexcept {
  const uint64_t cap = buffer_->capacity();
  const uint64_t L = length;
  const uint64_t P = std::min(o.period, cap);
  const bool within = o.episodes == Episodes::within;
  const uint64_t total = grid_cumulative_.back();
  for (uint32_t attempt = 0; attempt < kMaxTries; ++attempt) {
    ++stats_.tries;
    const uint64_t g = uniform_below(rng, total);
    const auto e = static_cast<std::size_t>(
        std::upper_bound(grid_cumulative_.begin(), grid_cumulative_.end(), g) - grid_cumulative_.begin());
    const uint64_t p = lo_[e] + (g - (e == 0 ? 0 : grid_cumulative_[e - 1])) * P;
    const std::atomic<uint64_t>* meta = buffer_->step_meta(e);
    // The last step the row could hold; its episode started at or before p iff no episode starts in (p, q].
    const uint64_t q = std::min(p + L, hi_[e]) - 1;
    const uint64_t s = detail::meta_start(detail::load_meta(meta, cap, q));
    ++stats_.meta_loads;
    if (s > q) continue;  // a torn read (the slot is being reused): this start is going away
    uint64_t steps = q - p + 1;
    if (s > p) {
      if (within) continue;  // an episode ends inside the sequence
      // stop: the row ends where the next episode starts: the first x in (p, q] with start(x) > p.
      uint64_t a = p + 1;
      uint64_t b = q;
      while (a < b) {
        const uint64_t mid = a + (b - a) / 2;
        ++stats_.meta_loads;
        if (detail::meta_start(detail::load_meta(meta, cap, mid)) > p) {
          b = mid;
        } else {
          a = mid + 1;
        }
      }
      steps = a - p;
    }
    if (!within && steps < L && power != 0.0) {
      const double w = std::pow(static_cast<double>(steps) / static_cast<double>(L), power);
      if (!(uniform01(rng) < w)) continue;
    }
    out.env_ids_[row] = e;
    out.starts_[row] = p;
    row_steps_[row] = steps;
    return true;
  }
  return false;
}

// The exact method for stop/within: walk each env's view from its newest step down, one meta load per episode
// piece (a step's meta holds its episode's first step), and give each piece its exact total weight: its full
// starts (L steps left in the episode) weigh 1 each; for stop its tail (fewer than L left) weighs
// period_table_[first tail start's remaining length], scaled by the longest remaining length found. Returns
// whether any start has a positive weight. O(num_envs + pieces); allocates scratch the first time.
bool Sampler::build_exact(std::size_t length, double power, const SampleOptions& o) {
  ++stats_.exact_fallbacks;
  segments_.clear();
  const uint64_t cap = buffer_->capacity();
  const uint64_t L = length;
  const uint64_t P = std::min(o.period, cap);
  const bool within = o.episodes == Episodes::within;
  uint64_t r_max = 0;
  for (std::size_t e = 0; e < lo_.size(); ++e) {
    const uint64_t lo = lo_[e];
    const std::atomic<uint64_t>* meta = buffer_->step_meta(e);
    for (uint64_t b = hi_[e]; b > lo;) {
      const uint64_t q = b - 1;
      const uint64_t s = detail::meta_start(detail::load_meta(meta, cap, q));
      ++stats_.segments_enumerated;
      ++stats_.meta_loads;
      if (s > q) break;  // a torn read: the env's steps from here down are being overwritten
      const uint64_t a = std::max(s, lo);
      const uint64_t first = grid_ceil(lo, P, a);
      if (first < b) {
        const uint64_t full = full_starts(first, b, L, P);
        if (!within || full > 0) {
          segments_.push_back({e, first, b, full, 0.0});
          r_max = std::max(r_max, std::min(L, b - first));
        }
      }
      b = a;
    }
  }
  if (segments_.empty()) return false;
  if (!within) ensure_period_table(length, power, P, r_max);
  double total = 0.0;
  for (Segment& seg : segments_) {
    // A full start weighs (L / r_max)^p = 1: there are full starts only when r_max = L.
    total += static_cast<double>(seg.full);
    const uint64_t tail_first = seg.first_grid + seg.full * P;
    if (!within && tail_first < seg.end) total += period_table_[static_cast<std::size_t>(seg.end - tail_first)];
    seg.cumulative = total;
  }
  return total > 0.0;
}

void Sampler::draw_exact(Rng& rng, std::size_t row, std::size_t length, const SampleOptions& o,
                         SampleBatch& out) noexcept {
  const uint64_t P = std::min(o.period, buffer_->capacity());
  const uint64_t L = length;
  const double u = uniform01(rng) * segments_.back().cumulative;
  auto it = std::upper_bound(segments_.begin(), segments_.end(), u,
                             [](double x, const Segment& s) { return x < s.cumulative; });
  if (it == segments_.end()) --it;
  while (it != segments_.begin() && it->cumulative == (it - 1)->cumulative) --it;
  const double v = std::max(0.0, u - (it == segments_.begin() ? 0.0 : (it - 1)->cumulative));
  const Segment& seg = *it;
  const uint64_t tail_first = seg.first_grid + seg.full * P;
  uint64_t start = 0;
  uint64_t steps = L;
  if (v < static_cast<double>(seg.full) || o.episodes == Episodes::within || tail_first >= seg.end) {
    start = seg.first_grid + std::min(static_cast<uint64_t>(v), seg.full == 0 ? 0 : seg.full - 1) * P;
    steps = std::min(L, seg.end - start);
  } else {
    steps = pick_tail(period_table_, seg.end - tail_first, P, v - static_cast<double>(seg.full));
    start = seg.end - steps;
  }
  out.env_ids_[row] = seg.env;
  out.starts_[row] = start;
  row_steps_[row] = steps;
}

// Draws rows [first_row, first_row + count): each round snapshots the view, draws and copies the rows still
// pending, and keeps the ones that failed validation for the next round (counted as retries). Cross sampling
// with period 1 (the default) is the closed form of take_snapshot/draw, unchanged; anything else goes through
// take_general_snapshot and the draws above.
// Bytes a round copies from one snapshot before the remaining rows are drawn from a fresh one (see sample_rows).
constexpr uint64_t kResnapshotBytes = uint64_t{1} << 20;

void Sampler::sample_rows(View view, std::size_t first_row, std::size_t count, std::size_t length, double power,
                          const SampleOptions& o, Rng& rng, SampleBatch& out) {
  // A single step never crosses an episode end: with period 1 every mode is the uniform closed form.
  const bool fast = o.period == 1 && (o.episodes == Episodes::cross || length == 1);
  const bool by_episode = !fast && o.episodes != Episodes::cross;
  if (o.min_steps > 0) {
    const uint64_t have = published_steps(view);
    if (have < o.min_steps) {
      throw Error(Errc::empty_view,
                  fmt::format("cannot sample the {} view of '{}': it holds {} steps, fewer than min_steps = {}{}",
                              to_string(view), buffer_->name(), have, o.min_steps,
                              view == View::online ? " (counted since the last reset_online_queue())" : ""));
    }
  }
  failed_.reserve(count);  // no-op once warmed up
  redraw_.reserve(count);
  failed_.clear();
  for (std::size_t i = 0; i < count; ++i) failed_.push_back(static_cast<uint32_t>(first_row + i));
  exact_ = false;
  // A round draws rows from one snapshot of the heads. A snapshot goes stale while its rows are copied (writers
  // reclaim the oldest slots), so after kResnapshotBytes of copying the rest of the rows wait for a fresh one:
  // those are deferred, not retried. `round` counts the rounds that made no clean progress (rows overwritten
  // during their copy, or a view that was momentarily unusable); it is what max_retry_rounds limits.
  const uint64_t step_bytes = buffer_->schema().step_bytes();
  uint32_t round = 0;
  while (!failed_.empty()) {
    if (round > options_.max_retry_rounds) {
      throw Error(Errc::contended,
                  fmt::format("cannot sample the {} view of '{}': {} row(s) were overwritten by writers during "
                              "the copy {} times in a row; the ring ({} steps per env) is too small for the "
                              "write rate",
                              to_string(view), buffer_->name(), failed_.size(), options_.max_retry_rounds,
                              buffer_->capacity()));
    }
    const bool any = fast ? take_snapshot(view, length, power) : take_general_snapshot(view, length, power, o);
    // Whether the round may go ahead; throws when the view cannot give a row, yields when that may be a write
    // in progress (the view is a step short while a slot is reclaimed).
    const auto usable = [&](bool found) {
      if (found) return true;
      if (!view_has_published(view)) {
        throw Error(Errc::empty_view, fmt::format("cannot sample the {} view of '{}': it holds no steps{}",
                                                  to_string(view), buffer_->name(),
                                                  view == View::online ? " (nothing was pushed since the last "
                                                                         "reset_online_queue())"
                                                                       : ""));
      }
      // A write in progress hides the oldest step of its env; that can hide the only within start for good
      // unless the sequence needs the whole ring (L = capacity), where the next step brings one back.
      if (o.episodes == Episodes::within && (length < buffer_->capacity() || !writes_in_flight())) {
        throw Error(Errc::empty_view,
                    fmt::format("cannot sample the {} view of '{}' with episodes = within: no start position (every "
                                "{} steps) has {} steps of one episode before the head",
                                to_string(view), buffer_->name(), o.period, length));
      }
      ::sched_yield();
      return false;
    };
    if (!usable(any) || (exact_ && !usable(build_exact(length, power, o)))) {
      ++round;
      continue;
    }
    row_steps_.resize(std::max<std::size_t>(row_steps_.size(), first_row + count));
    std::swap(failed_, redraw_);
    failed_.clear();
    std::size_t overwritten = 0;
    uint64_t copied = 0;
    bool stalled = false;
    std::size_t i = 0;
    for (; i < redraw_.size() && copied < kResnapshotBytes; ++i) {
      const uint32_t row = redraw_[i];
      if (fast) {
        draw(rng, row, length, out);
        row_steps_[row] = std::min<uint64_t>(length, hi_[out.env_ids_[row]] - out.starts_[row]);
      } else if (!by_episode) {
        draw_cross_period(rng, row, length, std::min(o.period, buffer_->capacity()), out);
      } else {
        ++stats_.rows;
        if (!exact_ && !draw_by_rejection(rng, row, length, power, o, out)) {
          exact_ = true;
          if (!usable(build_exact(length, power, o))) {
            // Nothing to draw from in this snapshot (a write in progress): this row and the rest wait for the
            // next round's fresh snapshot.
            stalled = true;
            break;
          }
        }
        if (exact_) draw_exact(rng, row, length, o, out);
      }
      if (!copy_steps(out.env_ids_[row], out.starts_[row], row_steps_[row], row, out)) {
        failed_.push_back(row);
        ++overwritten;
      }
      copied += row_steps_[row] * step_bytes;
    }
    failed_.insert(failed_.end(), redraw_.begin() + static_cast<std::ptrdiff_t>(i), redraw_.end());  // deferred
    if (overwritten > 0) {
      retries_ += overwritten;
      buffer_->global_control().retries.fetch_add(overwritten, std::memory_order_relaxed);
    }
    if (overwritten > 0 || stalled) ++round;
  }
}

void Sampler::sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                     Rng& rng, SampleBatch& out) {
  sample(view, batch_size, sequence_length, distribution_power, rng, out, SampleOptions{});
}

void Sampler::sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                     Rng& rng, SampleBatch& out, const SampleOptions& options) {
  check_args("sample", batch_size, sequence_length, distribution_power, options);
  out.prepare(buffer_->schema(), batch_size, sequence_length);
  out.episode_fields_ = buffer_->episode_fields();
  sample_rows(view, 0, batch_size, sequence_length, distribution_power, options, rng, out);
  count_call(batch_size);
}

void Sampler::sample_mixed(std::size_t replay_batch, std::size_t online_batch, std::size_t sequence_length,
                           double distribution_power, Rng& rng, SampleBatch& out) {
  sample_mixed(replay_batch, online_batch, sequence_length, distribution_power, rng, out, SampleOptions{});
}

void Sampler::sample_mixed(std::size_t replay_batch, std::size_t online_batch, std::size_t sequence_length,
                           double distribution_power, Rng& rng, SampleBatch& out, const SampleOptions& options) {
  check_args("sample (mixed)", replay_batch + online_batch, sequence_length, distribution_power, options);
  const std::size_t rows = replay_batch + online_batch;
  out.prepare(buffer_->schema(), rows, sequence_length);
  out.episode_fields_ = buffer_->episode_fields();
  if (replay_batch > 0) {
    sample_rows(View::replay, 0, replay_batch, sequence_length, distribution_power, options, rng, out);
  }
  if (online_batch > 0) {
    sample_rows(View::online, replay_batch, online_batch, sequence_length, distribution_power, options, rng, out);
  }
  count_call(rows);
}

// ---------------------------------------------------------------------------------------------------------------
// Completed-episode records

std::size_t Sampler::pop_episodes(std::span<EpisodeRecord> out) {
  lease_.check_process("pop episodes of");
  if (!buffer_->has_episodes() || out.empty()) return 0;
  const uint64_t num_envs = buffer_->num_envs();
  std::size_t n = 0;
  for (uint64_t k = 0; k < num_envs && n < out.size(); ++k) {
    n += detail::pop_records(*buffer_, (pop_cursor_ + k) % num_envs, out.subspan(n));
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
  for (const uint64_t e : env_ids) detail::check_env_id(*buffer_, e, "peek at");
  out.prepare(buffer_->schema(), env_ids.size(), 1);
  out.episode_fields_ = buffer_->episode_fields();
  for (std::size_t row = 0; row < env_ids.size(); ++row) {
    const uint64_t e = env_ids[row];
    out.env_ids_[row] = e;
    for (uint32_t round = 0;; ++round) {
      const uint64_t head = detail::load_head(buffer_->env_control(e));
      out.starts_[row] = head == 0 ? 0 : head - 1;
      if (copy_steps(e, out.starts_[row], head == 0 ? 0 : 1, row, out)) break;
      if (round >= options_.max_retry_rounds) {
        throw Error(Errc::contended, fmt::format("cannot peek at env {} of '{}': its newest step was overwritten "
                                                 "during the copy {} times in a row",
                                                 e, buffer_->name(), round + 1));
      }
      ++retries_;
      buffer_->global_control().retries.fetch_add(1, std::memory_order_relaxed);
    }
  }
  count_call(env_ids.size());
}

// ---------------------------------------------------------------------------------------------------------------
// Update

bool Sampler::try_update(uint64_t env_id, uint64_t step, std::span<const FieldBytes> fields) {
  lease_.check_process("update");
  const Schema& schema = buffer_->schema();
  detail::check_env_id(*buffer_, env_id, "update");
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
  EnvControl& c = buffer_->env_control(env_id);
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
        std::memcpy(buffer_->field_data(f) + (env_id * cap + step % cap) * b, fields[f].data, b);
      }
    }
    buffer_->global_control().steps_updated.fetch_add(1, std::memory_order_relaxed);
  }
  detail::unlock_update(c, claimed);
  return stored;
}

}  // namespace shmreplay
