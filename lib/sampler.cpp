// lib/sampler.cpp: the Sampler's public calls: sample and sample_mixed (their arguments checked, the rate limiter
// waited for, the rows drawn by the sample rounds, the calls counted), the views' sizes, wait, the online reset,
// the completed-episode records. The other files of the Sampler are listed in lib/sampler_parts.hpp.
//
// Who calls it: the learner (C++ and the Python module), one thread per Sampler at a time.
#include "shmreplay/sampler.hpp"

#include <atomic>
#include <cstdint>
#include <span>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/wake.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay {

using layout::EnvControl;
using layout::GlobalControl;

namespace sampler_parts {

namespace {

// The rows' ages into the slot's histogram (layout 1.8): counted here, on the stack, by the raw index (one bit scan a
// row), then folded into the buckets with one relaxed fetch_add per bucket that got rows. Readers (the Inspector) load
// the words one by one and never see them at one instant.
void count_ages(layout::LearnerStats& stats, std::span<const uint64_t> ages) noexcept {
  uint64_t raw[layout::kAgeRawBuckets] = {};
  uint64_t sum = 0;
  for (const uint64_t age : ages) {
    ++raw[layout::age_bucket_raw(age)];
    sum += age;
  }
  raw[0] = raw[layout::kAgeRawZero];  // bucket 0 is age 0; indices kAgeBuckets to 32 lie past the last bound
  for (uint32_t k = 0; k < layout::kAgeBuckets; ++k) {
    if (raw[k] != 0) stats.age_buckets[k].fetch_add(raw[k], std::memory_order_relaxed);
  }
  if (sum != 0) stats.age_sum_steps.fetch_add(sum, std::memory_order_relaxed);
  stats.age_rows.fetch_add(ages.size(), std::memory_order_relaxed);
}

}  // namespace

void count_call(Segment& b, const detail::LearnerSlotWords& me, std::span<const uint64_t> ages, bool sample,
                std::size_t unreserved) noexcept {
  // The slot's own counters: one learner writes them (relaxed read-modify-writes all the same: cheap, and exact
  // if a Python user ever shares a Sampler between threads against its rules).
  me.rows_sampled.fetch_add(ages.size(), std::memory_order_relaxed);
  me.sample_calls.fetch_add(1, std::memory_order_relaxed);
  count_ages(me.stats, ages);
  if (sample) {
    detail::count_samples(b.global_control(), unreserved, detail::coarse_realtime_ns(),
                          detail::coarse_monotonic_ns());
  }
}

}  // namespace sampler_parts

using sampler_parts::count_call;

namespace {

// The rows a sample call reserved with the rate limiter (try_reserve_samples), given back if the call fails
// before keep(): an empty view, a contended ring, an interrupt.
class Reservation {
 public:
  Reservation(GlobalControl& g, std::size_t rows) noexcept : g_(g), rows_(rows) {}
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() {
    if (rows_ != 0) detail::return_samples(g_, rows_);
  }
  /// The rows drawn: they stay counted. Returns how many were reserved.
  std::size_t keep() noexcept { return std::exchange(rows_, 0); }

 private:
  GlobalControl& g_;
  std::size_t rows_;
};

}  // namespace


const SamplerStats& Sampler::stats() const noexcept {
  static const SamplerStats kNone{};  // a moved-from Sampler has done no work
  return scratch_ != nullptr ? scratch_->stats : kNone;
}

// ---------------------------------------------------------------------------------------------------------------
// Views and sizes

using detail::view_range;

uint64_t Sampler::size(View view) const noexcept {
  uint64_t total = 0;
  const uint64_t cap = buffer_->capacity();
  const detail::LearnerSlotWords& me = scratch_->slot;
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    const detail::StepRange r = view_range(segment_of(*buffer_).env_control(e), view, cap, me.online_start(e));
    total += r.hi - r.lo;
  }
  return total;
}

EnvSizes Sampler::sizes(uint64_t env_id) const {
  detail::check_env_id(segment_of(*buffer_), env_id, "size");
  const EnvControl& c = segment_of(*buffer_).env_control(env_id);
  const std::atomic<uint64_t>& start = scratch_->slot.online_start(env_id);
  const detail::StepRange replay = view_range(c, View::replay, buffer_->capacity(), start);
  const detail::StepRange online = view_range(c, View::online, buffer_->capacity(), start);
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
  return detail::sleep_until(detail::learner_wake(segment_of(*buffer_).global_control(), scratch_->slot.waiters),
                             deadline_after_ms(timeout_ms), [&] { return size(view) >= min_steps; });
}

void Sampler::reset_online_queue(OnlineReset to) {
  lease_.check_process("reset the online queue of");
  const detail::LearnerSlotWords& me = scratch_->slot;
  for (uint64_t e = 0; e < buffer_->num_envs(); ++e) {
    const EnvControl& c = segment_of(*buffer_).env_control(e);
    if (to == OnlineReset::now) {
      detail::reset_online_start(c, me.online_start(e));
    } else {
      detail::advance_online_start(c, me.online_start(e), scratch_->online_seen[static_cast<std::size_t>(e)]);
    }
  }
  me.online_resets.fetch_add(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------------------------
// Sampling

void Sampler::sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                     Rng& rng, SampleBatch& out) {
  sample(view, batch_size, sequence_length, distribution_power, rng, out, SampleOptions{});
}

void Sampler::sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                     Rng& rng, SampleBatch& out, const SampleOptions& options) {
  check_args("sample", batch_size, sequence_length, distribution_power, options);
  Reservation reserved(segment_of(*buffer_).global_control(),
                       wait_for_rate_limit("sample", batch_size, options.rate_limit_timeout_ms) ? batch_size : 0);
  out.prepare(buffer_->schema(), batch_size, sequence_length);
  out.episode_fields_ = buffer_->episode_fields();
  sample_rows(view, 0, batch_size, sequence_length, distribution_power, options, rng, out);
  if (options.prioritized) finish_weights(out, options.importance_exponent);
  count_call(segment_of(*buffer_), scratch_->slot, {scratch_->ages.data(), batch_size}, /*sample=*/true,
             batch_size - reserved.keep());
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
  Reservation reserved(segment_of(*buffer_).global_control(),
                       wait_for_rate_limit("sample (mixed)", rows, options.rate_limit_timeout_ms) ? rows : 0);
  out.prepare(buffer_->schema(), rows, sequence_length);
  out.episode_fields_ = buffer_->episode_fields();
  if (replay_batch > 0) {
    sample_rows(View::replay, 0, replay_batch, sequence_length, distribution_power, options, rng, out);
  }
  if (online_batch > 0) {
    sample_rows(View::online, replay_batch, online_batch, sequence_length, distribution_power, options, rng, out);
  }
  if (options.prioritized) finish_weights(out, options.importance_exponent);
  count_call(segment_of(*buffer_), scratch_->slot, {scratch_->ages.data(), rows}, /*sample=*/true,
             rows - reserved.keep());
}

}  // namespace shmreplay
