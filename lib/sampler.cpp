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

#include "detail/env_state.hpp"
#include "detail/futex.hpp"
#include "detail/lease.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {
namespace {

using layout::EnvControl;
using layout::GlobalControl;
using layout::kUpdateLockBit;

detail::LeaseWords learner_lease(GlobalControl& g) noexcept {
  return {g.learner_lease, g.learner_start_ticks, g.learner_since_ns, g.learner_takeovers};
}

// A double in [0, 1) from the top 53 bits of one engine output: the same on every platform.
inline double uniform01(Rng& rng) noexcept { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

std::string_view to_string(View view) noexcept { return view == View::replay ? "replay" : "online"; }

// ---------------------------------------------------------------------------------------------------------------
// SampleBatch

SampleBatch SampleBatch::borrow(std::vector<MutableFieldBytes> fields, std::span<uint8_t> mask,
                                std::span<uint64_t> env_ids, std::span<uint64_t> start_steps) {
  SampleBatch b;
  b.borrowed_ = true;
  b.borrowed_fields_ = std::move(fields);
  b.borrowed_mask_ = mask;
  b.borrowed_env_ids_ = env_ids;
  b.borrowed_starts_ = start_steps;
  return b;
}

void SampleBatch::prepare(const Schema& schema, std::size_t rows, std::size_t length) {
  const std::size_t nf = schema.size();
  const std::size_t cells = rows * length;
  if (borrowed_) {
    auto too_small = [&](const std::string& what, std::size_t have, std::size_t need) {
      throw Error(Errc::size_mismatch,
                  fmt::format("the output array for {} has {} bytes, a batch of {} rows x {} steps needs {}", what,
                              have, rows, length, need));
    };
    if (borrowed_fields_.size() != nf) {
      throw Error(Errc::size_mismatch, fmt::format("the output has {} field arrays, the schema has {} ({})",
                                                   borrowed_fields_.size(), nf, schema.to_string()));
    }
    for (std::size_t f = 0; f < nf; ++f) {
      const std::size_t need = cells * static_cast<std::size_t>(schema[f].bytes());
      if (borrowed_fields_[f].bytes < need || (borrowed_fields_[f].data == nullptr && need != 0)) {
        too_small(fmt::format("field '{}'", schema[f].name), borrowed_fields_[f].bytes, need);
      }
    }
    if (borrowed_mask_.size() < cells) too_small("the mask", borrowed_mask_.size(), cells);
    if (borrowed_env_ids_.size() < rows) too_small("the env ids", borrowed_env_ids_.size_bytes(), rows * 8);
    if (borrowed_starts_.size() < rows) too_small("the start steps", borrowed_starts_.size_bytes(), rows * 8);
    field_ptr_.resize(nf);
    for (std::size_t f = 0; f < nf; ++f) field_ptr_[f] = static_cast<std::byte*>(borrowed_fields_[f].data);
    mask_ = borrowed_mask_.data();
    env_ids_ = borrowed_env_ids_.data();
    starts_ = borrowed_starts_.data();
  } else {
    // Grow only: a warmed-up batch keeps its storage and never allocates.
    own_fields_.resize(nf);
    field_ptr_.resize(nf);
    for (std::size_t f = 0; f < nf; ++f) {
      const std::size_t need = cells * static_cast<std::size_t>(schema[f].bytes());
      if (own_fields_[f].size() < need) own_fields_[f].resize(need);
      field_ptr_[f] = own_fields_[f].data();
    }
    if (own_mask_.size() < cells) own_mask_.resize(cells);
    if (own_env_ids_.size() < rows) own_env_ids_.resize(rows);
    if (own_starts_.size() < rows) own_starts_.resize(rows);
    mask_ = own_mask_.data();
    env_ids_ = own_env_ids_.data();
    starts_ = own_starts_.data();
  }
  field_step_bytes_.resize(nf);
  for (std::size_t f = 0; f < nf; ++f) field_step_bytes_[f] = static_cast<std::size_t>(schema[f].bytes());
  rows_ = rows;
  length_ = length;
}

std::span<const std::byte> SampleBatch::field(std::size_t index) const noexcept {
  assert(index < field_ptr_.size());
  return {field_ptr_[index], rows_ * length_ * field_step_bytes_[index]};
}

const std::byte* SampleBatch::step(std::size_t index, std::size_t row, std::size_t t) const noexcept {
  assert(index < field_ptr_.size() && row < rows_ && t < length_);
  return field_ptr_[index] + (row * length_ + t) * field_step_bytes_[index];
}

// ---------------------------------------------------------------------------------------------------------------
// Sampler: construction and the learner lease

Sampler::Sampler(Buffer& buffer, const SamplerOptions& options) : buffer_(&buffer), options_(options) {
  if (buffer.read_only()) {
    throw Error(Errc::read_only,
                fmt::format("cannot attach a learner to '{}': the buffer is mapped read-only", buffer.name()));
  }
  lease_word_ = detail::self_lease_word();
  GlobalControl& g = buffer.global_control();
  const detail::LeaseResult r = detail::try_take_lease(learner_lease(g), lease_word_);
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
    g.waiters.store(0, std::memory_order_relaxed);
  }
  const std::size_t num_envs = static_cast<std::size_t>(buffer.num_envs());
  lo_.resize(num_envs);
  hi_.resize(num_envs);
  cumulative_.resize(num_envs);
}

Sampler::Sampler(Sampler&& other) noexcept
    : buffer_(std::exchange(other.buffer_, nullptr)),
      options_(other.options_),
      lease_word_(other.lease_word_),
      retries_(other.retries_),
      lo_(std::move(other.lo_)),
      hi_(std::move(other.hi_)),
      cumulative_(std::move(other.cumulative_)),
      tail_prefix_(std::move(other.tail_prefix_)),
      table_length_(other.table_length_),
      table_power_(other.table_power_),
      table_rmax_(other.table_rmax_),
      failed_(std::move(other.failed_)),
      redraw_(std::move(other.redraw_)) {}

Sampler::~Sampler() {
  if (buffer_ != nullptr) detail::release_lease(learner_lease(buffer_->global_control()), lease_word_);
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
  if (env_id >= buffer_->num_envs()) {
    throw Error(Errc::env_out_of_range, fmt::format("cannot size env {} of '{}': env ids run from 0 to {}", env_id,
                                                    buffer_->name(), buffer_->num_envs() - 1));
  }
  const EnvControl& c = buffer_->env_control(env_id);
  const detail::StepRange replay = view_range(c, View::replay, buffer_->capacity());
  const detail::StepRange online = view_range(c, View::online, buffer_->capacity());
  return {replay.hi, replay.hi - replay.lo, online.hi - online.lo};
}

bool Sampler::wait(View view, uint64_t min_steps, uint64_t timeout_ms) {
  const uint64_t most = buffer_->num_envs() * buffer_->capacity();
  if (min_steps > most) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot wait for {} steps in the {} view of '{}': it holds at most {} ({} envs x {} "
                            "steps)",
                            min_steps, to_string(view), buffer_->name(), most, buffer_->num_envs(),
                            buffer_->capacity()));
  }
  if (size(view) >= min_steps) return true;
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  GlobalControl& g = buffer_->global_control();
  // seq_cst: pairs with the writers' seq_cst fence between their head stores and their load of `waiters`.
  g.waiters.fetch_add(1, std::memory_order_seq_cst);
  bool ready = false;
  for (;;) {
    // seq_cst: read the wake word before re-checking the heads, so a wake after the check changes the word and
    // FUTEX_WAIT returns at once.
    const auto seq = static_cast<uint32_t>(g.wake_seq.load(std::memory_order_seq_cst));
    if (size(view) >= min_steps) {
      ready = true;
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
    detail::futex_wait(g.wake_seq, seq, std::min<uint64_t>(static_cast<uint64_t>(left), 50'000'000ull));
  }
  g.waiters.fetch_sub(1, std::memory_order_relaxed);
  return ready;
}

void Sampler::reset_online_queue() noexcept {
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    EnvControl& c = buffer_->env_control(e);
    // Only the learner writes online_start, and only the learner's own sampling reads it: relaxed.
    c.online_start.store(c.head.load(std::memory_order_acquire), std::memory_order_relaxed);
  }
  buffer_->global_control().online_resets.fetch_add(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------------------------
// Sampling

void Sampler::check_args(const char* op, std::size_t rows, std::size_t length, double power) const {
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
  // acquire: pairs with the release store that ended the last update, so its bytes are seen by the copy.
  const uint64_t useq = c.update_seq.load(std::memory_order_acquire);
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
  // acquire fence: pairs with the writer's release fence after raising `claimed` (and the learner's after
  // making update_seq odd): if the copy read any byte written after those, the loads below see them.
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t claimed = c.claimed.load(std::memory_order_relaxed) & ~kUpdateLockBit;
  const uint64_t useq_after = c.update_seq.load(std::memory_order_relaxed);
  // Step `start` is intact while no writer has claimed step start + cap (which reuses its slot).
  return (useq & 1) == 0 && useq == useq_after && claimed <= start + cap;
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
    const EnvControl& c = buffer_->env_control(e);
    const uint64_t base = view == View::online ? c.online_start.load(std::memory_order_relaxed) : 0;
    if (c.head.load(std::memory_order_acquire) > base) return true;
  }
  return false;
}

// Draws rows [first_row, first_row + count): each round snapshots the view, draws and copies the rows still
// pending, and keeps the ones that failed validation for the next round (counted as retries).
void Sampler::sample_rows(View view, std::size_t first_row, std::size_t count, std::size_t length, double power,
                          Rng& rng, SampleBatch& out) {
  failed_.reserve(count);  // no-op once warmed up
  redraw_.reserve(count);
  failed_.clear();
  for (std::size_t i = 0; i < count; ++i) failed_.push_back(static_cast<uint32_t>(first_row + i));
  for (uint32_t round = 0; !failed_.empty(); ++round) {
    if (round > options_.max_retry_rounds) {
      throw Error(Errc::contended,
                  fmt::format("cannot sample the {} view of '{}': {} row(s) were overwritten by writers during "
                              "the copy {} times in a row; the ring ({} steps per env) is too small for the "
                              "write rate",
                              to_string(view), buffer_->name(), failed_.size(), options_.max_retry_rounds,
                              buffer_->capacity()));
    }
    if (round > 0) {
      retries_ += failed_.size();
      buffer_->global_control().retries.fetch_add(failed_.size(), std::memory_order_relaxed);
    }
    if (!take_snapshot(view, length, power)) {
      if (!view_has_published(view)) {
        throw Error(Errc::empty_view, fmt::format("cannot sample the {} view of '{}': it holds no steps{}",
                                                  to_string(view), buffer_->name(),
                                                  view == View::online ? " (nothing was pushed since the last "
                                                                         "reset_online_queue())"
                                                                       : ""));
      }
      ::sched_yield();
      continue;
    }
    std::swap(failed_, redraw_);
    failed_.clear();
    for (const uint32_t row : redraw_) {
      draw(rng, row, length, out);
      const uint64_t e = out.env_ids_[row];
      const uint64_t steps = std::min<uint64_t>(length, hi_[e] - out.starts_[row]);
      if (!copy_steps(e, out.starts_[row], steps, row, out)) failed_.push_back(row);
    }
  }
}

void Sampler::sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                     Rng& rng, SampleBatch& out) {
  check_args("sample", batch_size, sequence_length, distribution_power);
  out.prepare(buffer_->schema(), batch_size, sequence_length);
  sample_rows(view, 0, batch_size, sequence_length, distribution_power, rng, out);
  count_call(batch_size);
}

void Sampler::sample_mixed(std::size_t replay_batch, std::size_t online_batch, std::size_t sequence_length,
                           double distribution_power, Rng& rng, SampleBatch& out) {
  check_args("sample (mixed)", replay_batch + online_batch, sequence_length, distribution_power);
  const std::size_t rows = replay_batch + online_batch;
  out.prepare(buffer_->schema(), rows, sequence_length);
  if (replay_batch > 0) sample_rows(View::replay, 0, replay_batch, sequence_length, distribution_power, rng, out);
  if (online_batch > 0) {
    sample_rows(View::online, replay_batch, online_batch, sequence_length, distribution_power, rng, out);
  }
  count_call(rows);
}

void Sampler::peek(std::span<const uint64_t> env_ids, SampleBatch& out) {
  if (env_ids.empty()) {
    throw Error(Errc::invalid_argument, fmt::format("cannot peek into '{}': the list of env ids is empty",
                                                    buffer_->name()));
  }
  for (const uint64_t e : env_ids) {
    if (e >= buffer_->num_envs()) {
      throw Error(Errc::env_out_of_range, fmt::format("cannot peek at env {} of '{}': env ids run from 0 to {}", e,
                                                      buffer_->name(), buffer_->num_envs() - 1));
    }
  }
  out.prepare(buffer_->schema(), env_ids.size(), 1);
  for (std::size_t row = 0; row < env_ids.size(); ++row) {
    const uint64_t e = env_ids[row];
    out.env_ids_[row] = e;
    for (uint32_t round = 0;; ++round) {
      const uint64_t head = buffer_->env_control(e).head.load(std::memory_order_acquire);
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
  const Schema& schema = buffer_->schema();
  if (env_id >= buffer_->num_envs()) {
    throw Error(Errc::env_out_of_range, fmt::format("cannot update env {} of '{}': env ids run from 0 to {}",
                                                    env_id, buffer_->name(), buffer_->num_envs() - 1));
  }
  if (fields.size() != schema.size()) {
    throw Error(Errc::size_mismatch, fmt::format("cannot update '{}': {} field values given, the schema has {} ({})",
                                                 buffer_->name(), fields.size(), schema.size(), schema.to_string()));
  }
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (fields[f].data != nullptr && fields[f].bytes != schema[f].bytes()) {
      throw Error(Errc::size_mismatch, fmt::format("cannot update '{}': field '{}' ({}) has {} bytes, expected {}",
                                                   buffer_->name(), schema[f].name, schema[f].to_string(),
                                                   fields[f].bytes, schema[f].bytes()));
    }
  }
  EnvControl& c = buffer_->env_control(env_id);
  const uint64_t head = c.head.load(std::memory_order_acquire);  // pairs with the writer's release of head
  if (step >= head) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot update step {} of env {} of '{}': it was never published (the env has {} "
                            "steps)",
                            step, env_id, buffer_->name(), head));
  }
  const uint64_t cap = buffer_->capacity();
  // Take the env's update lock: set kUpdateLockBit in `claimed`. While it is set the writer cannot claim a new
  // slot, and the slot it may be writing right now (claimed - 1) is outside the steps we accept below.
  uint64_t cur = c.claimed.load(std::memory_order_relaxed) & ~kUpdateLockBit;
  // acquire: pairs with the writer's claim CAS, so our view of `claimed` is the one the check below relies on.
  while (!c.claimed.compare_exchange_weak(cur, cur | kUpdateLockBit, std::memory_order_acquire,
                                          std::memory_order_relaxed)) {
    cur &= ~kUpdateLockBit;
  }
  bool stored = step + cap >= cur;  // step's slot has not been claimed for step + cap
  if (stored) {
    const uint64_t seq = c.update_seq.load(std::memory_order_relaxed);
    c.update_seq.store(seq + 1, std::memory_order_relaxed);
    // release fence: orders the odd update_seq before the data stores; pairs with samplers' acquire fence.
    std::atomic_thread_fence(std::memory_order_release);
    for (std::size_t f = 0; f < fields.size(); ++f) {
      if (fields[f].data == nullptr) continue;
      const uint64_t b = schema[f].bytes();
      std::memcpy(buffer_->field_data(f) + (env_id * cap + step % cap) * b, fields[f].data, b);
    }
    // release: pairs with samplers' acquire load of update_seq before their copy.
    c.update_seq.store(seq + 2, std::memory_order_release);
    buffer_->global_control().steps_updated.fetch_add(1, std::memory_order_relaxed);
  }
  // release: pairs with the writer's acquire when it next claims, so our bytes precede its bytes.
  c.claimed.store(cur, std::memory_order_release);
  return stored;
}

}  // namespace shmreplay
