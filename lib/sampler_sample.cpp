// lib/sampler_sample.cpp: a sample call, top to bottom. sample and sample_mixed check their arguments
// (sampler_checks.cpp), wait for the rate limiter and reserve their rows (sampler_rate_limit.cpp), then draw each
// view's rows in rounds: each round snapshots the views, has the planner (chosen by
// detail/sampling/planner_table.hpp) draw the rows still pending, chunk by chunk, and copies and validates each
// chunk (the gather stage, sampler_gather.hpp); rows that failed validation wait for the next round. Last, a
// prioritized batch's N * P become importance weights, and the call is counted in the learner slot.
//
// Who calls it: the learner (C++ and the Python module), one thread per Sampler at a time. The hot path: no
// allocation once warmed up, no virtual call per row (sample_with and draw_round are templates over the planner's
// type), no branch on the call's options in the per-row loop (every planner fills its draw's relative_probability).
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/sampling/planner.hpp"
#include "detail/sampling/planner_table.hpp"
#include "detail/sampling/ring_mod.hpp"
#include "sampler_gather.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

using layout::GlobalControl;
using sampler_parts::count_call;
using sampler_parts::Reservation;


// ---------------------------------------------------------------------------------------------------------------
// The calls

void Sampler::sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                     Rng& rng, SampleBatch& out) {
  sample(view, batch_size, sequence_length, distribution_power, rng, out, SampleOptions{});
}

void Sampler::sample(View view, std::size_t batch_size, std::size_t sequence_length, double distribution_power,
                     Rng& rng, SampleBatch& out, const SampleOptions& options) {
  if (options.consume != Consume::off) {  // a consuming queue's call (sampler_consume.cpp)
    sample_consume(view, batch_size, sequence_length, distribution_power, rng, out, options);
    return;
  }
  if (!options.mixture.empty()) {  // blocks of several selectors (sampler_mixture.cpp)
    sample_mixture(view, batch_size, sequence_length, distribution_power, rng, out, options);
    return;
  }
  check_args("sample", batch_size, sequence_length, distribution_power, options);
  begin_window(options, "sample");
  Reservation reserved(segment_of(*buffer_).global_control(),
                       wait_for_rate_limit("sample", batch_size, options.rate_limit_timeout_ms) ? batch_size : 0);
  out.prepare(buffer_->schema(), batch_size, sequence_length, loads_seen());
  out.episode_fields_ = buffer_->episode_fields();
  sample_rows(view, 0, batch_size, sequence_length, distribution_power, options, rng, out);
  if (options.prioritized) finish_weights(out, options.importance_exponent, 0, batch_size);
  out.selector_rows_ = {};
  out.selector_rows_[static_cast<std::size_t>(selector_of(view, options))] = batch_size;
  finish_versions(out, batch_size);
  count_call(segment_of(*buffer_), scratch_->slot, {scratch_->rounds.ages.data(), batch_size}, /*sample=*/true,
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
  begin_window(options, "sample (mixed)");
  Reservation reserved(segment_of(*buffer_).global_control(),
                       wait_for_rate_limit("sample (mixed)", rows, options.rate_limit_timeout_ms) ? rows : 0);
  out.prepare(buffer_->schema(), rows, sequence_length, loads_seen());
  out.episode_fields_ = buffer_->episode_fields();
  if (replay_batch > 0) {
    sample_rows(View::replay, 0, replay_batch, sequence_length, distribution_power, options, rng, out);
  }
  if (online_batch > 0) {
    sample_rows(View::online, replay_batch, online_batch, sequence_length, distribution_power, options, rng, out);
  }
  if (options.prioritized) finish_weights(out, options.importance_exponent, 0, rows);
  out.selector_rows_ = {};
  out.selector_rows_[static_cast<std::size_t>(selector_of(View::replay, options))] = replay_batch;
  out.selector_rows_[static_cast<std::size_t>(selector_of(View::online, options))] += online_batch;
  finish_versions(out, rows);
  count_call(segment_of(*buffer_), scratch_->slot, {scratch_->rounds.ages.data(), rows}, /*sample=*/true,
             rows - reserved.keep());
}

// ---------------------------------------------------------------------------------------------------------------
// One view's rows

uint64_t sampler_parts::published_steps(const Segment& seg, const detail::LearnerSlotWords& me, View view) noexcept {
  uint64_t total = 0;
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    if (seg.cold_capacity() != 0) {  // (1.11) both tiers
      const detail::EnvView v = snapshot_view(seg, me, e, view);
      total += v.hi - v.lo;
      continue;
    }
    const detail::StepRange r = detail::published_range(seg.env_control(e), view, seg.capacity(), me.online_start(e));
    total += r.hi - r.lo;
  }
  return total;
}

// Draws rows [first_row, first_row + count) of `view` with the planner the options call for.
void Sampler::sample_rows(View view, std::size_t first_row, std::size_t count, std::size_t length, double power,
                          const SampleOptions& o, Rng& rng, SampleBatch& out) {
  Scratch& z = *scratch_;
  if (o.min_steps > 0) {
    const uint64_t have = sampler_parts::published_steps(segment_of(*buffer_), z.slot, view);
    if (have < o.min_steps) {
      throw Error(Errc::empty_view,
                  fmt::format("cannot sample the {} view of '{}': it holds {} steps, fewer than min_steps = {}{}",
                              to_string(view), buffer_->name(), have, o.min_steps,
                              view == View::online ? " (counted since the last reset_online_queue())" : ""));
    }
  }
  // The planner the table chooses (detail/sampling/planner_table.hpp), as its own type: sample_with is a template
  // over it, so that the per-row draw is a direct call.
  if (first_row == 0) {
    z.caps.forget_claims();
    z.zeroing.forget_takes();
  }
  try {
    z.planning.planners.with(o, length, [&](auto& planner) {
      sample_with(planner, view, first_row, count, length, power, o, rng, out);
    });
  } catch (...) {
    if (z.caps.on()) z.caps.release();  // a call that throws returns no row: its claimed deliveries go back
    z.zeroing.release(z.slot.priority_walk);  // and the weights it took (zero-on-sample)
    throw;
  }
  if (view == View::online) {  // sample_with's last round: its snapshot's heads are the latest it drew under
    const std::vector<detail::EnvView>& views = z.snapshot.views;
    sampler_parts::OnlineMarks& marks = z.online;
    for (std::size_t e = 0; e < views.size(); ++e) marks.seen[e] = views[e].hi;
    if (marks.heads_reserved) {  // but no later than the heads before the call's reservation (sampler_parts.hpp)
      for (std::size_t e = 0; e < views.size(); ++e) marks.seen[e] = std::min(marks.seen[e], marks.reserved_heads[e]);
    }
  }
}

namespace {

// Bytes a round copies from one snapshot before the remaining rows are drawn from a fresh one (see sample_with).
constexpr uint64_t kResnapshotBytes = uint64_t{1} << 20;

// Whether any env has published a step at or after the view's base (0, or online_start). False means the view
// is really empty; true with an empty snapshot means a slot was being rewritten at that instant (a ring of
// capacity 1), which a redraw gets past.
bool view_has_published(const Segment& seg, const detail::LearnerSlotWords& me, View view) noexcept {
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    if (detail::has_published(seg.env_control(e), view, me.online_start(e))) return true;
  }
  return false;
}

// Whether any env's writer is between its claim and its head store (the view is one step short meanwhile).
bool writes_in_flight(const Segment& seg) noexcept {
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    if (detail::write_in_flight(seg.env_control(e))) return true;
  }
  return false;
}

// What a round found when its snapshot gave the planner nothing to draw from (`planner` prepared it, or a draw
// returned nullopt): throws when the view cannot give a row; otherwise yields (that may be a write in progress:
// the view is a step short while a slot is reclaimed), and the round is retried from a fresh snapshot.
// `shortfall_known`: check_shortfall's answer would only repeat itself, so it is not asked again.
void nothing_to_draw(detail::Planner& planner, const Buffer& buffer, const detail::LearnerSlotWords& me, View view,
                     const SampleOptions& o, std::size_t length, bool& shortfall_known) {
  const Segment& seg = segment_of(buffer);
  if (!view_has_published(seg, me, view)) {
    throw Error(Errc::empty_view, fmt::format("cannot sample the {} view of '{}': it holds no steps{}",
                                              to_string(view), buffer.name(),
                                              view == View::online ? " (nothing was pushed since the last "
                                                                     "reset_online_queue())"
                                                                   : ""));
  }
  if (!shortfall_known) {  // e.g. all priorities 0, or a damaged tree (Planner::shortfall)
    shortfall_known = sampler_parts::check_shortfall(planner, planner.shortfall(/*scan=*/true), seg, "sample", view);
  }
  // A write in progress hides the oldest step of its env; that can hide the only within start for good unless the
  // sequence needs the whole ring (L = capacity), where the next step brings one back.
  if (o.episodes == Episodes::within && (length < buffer.capacity() || !writes_in_flight(seg))) {
    throw Error(Errc::empty_view,
                fmt::format("cannot sample the {} view of '{}' with episodes = within: no start position (every "
                            "{} steps) has {} steps of one episode before the head",
                            to_string(view), buffer.name(), o.period, length));
  }
  ::sched_yield();
}

// The error of a call whose last max_retry_rounds rounds made no progress, saying why.
// A failed row whose start is still stored was not overwritten: a learner's update section (update_priorities,
// zero_on_sample, write_back, try_update) rewrote its env during the copy, and the error says so.
[[noreturn]] void throw_no_progress(const detail::Planner& planner, const Buffer& buffer, View view, uint32_t rounds,
                                    bool drew_nothing, std::span<const uint32_t> failed, const uint64_t* env_ids,
                                    const uint64_t* starts) {
  if (drew_nothing) {
    throw Error(Errc::contended,
                fmt::format("cannot sample the {} view of '{}': {} snapshots in a row had no start to draw from ({})",
                            to_string(view), buffer.name(), rounds, planner.no_start_causes()));
  }
  const Segment& seg = segment_of(buffer);
  const bool none_overwritten = std::all_of(failed.begin(), failed.end(), [&](uint32_t row) {
    return starts[row] >= detail::view_range(seg.env_control(env_ids[row]), View::replay, buffer.capacity()).lo;
  });
  if (none_overwritten) {
    throw Error(Errc::contended,
                fmt::format("cannot sample the {} view of '{}': {} row(s) failed their copy {} times in a row while "
                            "learners rewrote their envs (update sections of update_priorities, zero_on_sample, "
                            "write_back or try_update); none was overwritten by a writer{}",
                            to_string(view), buffer.name(), failed.size(), rounds,
                            sampler_parts::updater_note(seg, failed, env_ids)));
  }
  throw Error(Errc::contended,
              fmt::format("cannot sample the {} view of '{}': {} row(s) were overwritten by writers during the copy "
                          "{} times in a row; the ring ({} steps per env) is too small for the write rate{}",
                          to_string(view), buffer.name(), failed.size(), rounds, buffer.capacity(),
                          sampler_parts::updater_note(segment_of(buffer), failed, env_ids)));
}

}  // namespace

// The rounds of one view's rows: each round snapshots the view, has the planner draw the rows still pending, and
// copies and validates them (draw_round), keeping the ones that failed validation for the next round (counted as
// retries). A template over the (final) planner type, so that the per-row draw is a direct call.
template <class Plan>
void Sampler::sample_with(Plan& planner, View view, std::size_t first_row, std::size_t count, std::size_t length,
                          double power, const SampleOptions& o, Rng& rng, SampleBatch& out) {
  Scratch& z = *scratch_;
  sampler_parts::Rounds& r = z.rounds;
  const uint64_t cap = buffer_->capacity();
  const detail::RingMod ring_mod(cap);
  // A period of cap or more: first steps.
  const detail::PlanOptions plan{o.episodes, std::min(o.period, cap), o.recency_half_life, o.sequence_priority_eta};
  r.failed.reserve(count);  // no-op once warmed up
  r.redraw.reserve(count);
  if (r.ages.size() < first_row + count) r.ages.resize(first_row + count);  // grows to the largest batch only
  r.failed.resize(count);
  std::iota(r.failed.begin(), r.failed.end(), static_cast<uint32_t>(first_row));
  planner.begin_call();
  z.caps.begin_call(count, view, first_row);
  z.zeroing.begin_call(o.prioritized, o.zero_on_sample, first_row, count);
  // `round` counts the rounds that made no clean progress (rows overwritten during their copy, or a view that was
  // momentarily unusable); it is what max_retry_rounds limits.
  uint32_t round = 0;
  bool drew_nothing = false;     // the last round without progress had nothing to draw (no row was overwritten)
  bool shortfall_known = false;  // nothing_to_draw's check_shortfall would only repeat itself
  while (!r.failed.empty()) {
    if (round > options_.max_retry_rounds) {
      throw_no_progress(planner, *buffer_, view, options_.max_retry_rounds, drew_nothing, r.failed, out.env_ids_,
                        out.starts_);
    }
    for (std::size_t e = 0; e < z.snapshot.views.size(); ++e) {
      // At most the ring, which the slot computation in draw_round needs; a tiered buffer's reaches below it, into
      // the cold tier, and hot_lo says where the ring's part starts (draw_round sends the rows below it to the cold
      // gather).
      const detail::EnvView v =
          sampler_parts::snapshot_view(segment_of(*buffer_), z.slot, e, view, &z.snapshot.hot_lo[e]);
      z.snapshot.views[e] = v;
      z.snapshot.hi_base[e] = v.hi - ring_mod(v.hi);  // so that a row's slot needs no division (draw_round)
    }
    // A policy window keeps each env's suffix of versions inside it (hi unchanged).
    if (const std::optional<uint64_t> emptied = cut_views_to_window()) throw_empty_window(view, *emptied);
    if (!planner.prepare(z.snapshot.views, length, power, plan)) {
      nothing_to_draw(planner, *buffer_, z.slot, view, o, length, shortfall_known);
      ++round;
      drew_nothing = true;
      continue;
    }
    if constexpr (std::is_same_v<Plan, detail::PriorityPlanner>) z.zeroing.set_round(planner.drawing_fresh());
    std::swap(r.failed, r.redraw);
    r.failed.clear();
    bool stalled = false;
    const std::size_t overwritten = draw_round(planner, length, rng, out, stalled);
    if (stalled) nothing_to_draw(planner, *buffer_, z.slot, view, o, length, shortfall_known);
    if (overwritten > 0) {
      retries_ += overwritten;
      z.slot.retries.fetch_add(overwritten, std::memory_order_relaxed);
    }
    if (overwritten > 0 || stalled) {
      ++round;
      drew_nothing = overwritten == 0;
    }
    if (overwritten > 0 && round >= sampler_parts::kRepairAfterRounds) {
      sampler_parts::repair_dead_updaters(segment_of(*buffer_), r.failed, out.env_ids_, r.repair_envs);
    }
  }
}

// One round: draws the rows of `redraw` from the prepared snapshot, chunk by chunk: up to kGatherRows rows
// (kGatherBytes), then copies and validates them together (the gather stage). A snapshot goes stale while its rows
// are copied (writers reclaim the oldest slots), so after kResnapshotBytes of copying the rest of the rows wait for
// a fresh one: those are deferred to `failed`, not retried. Returns the rows overwritten during their copy (also
// in `failed`); `stalled`: a draw found nothing (a write in progress), and the rest of the rows wait for the next
// round's fresh snapshot (the chunk drawn so far is still copied).
template <class Plan>
std::size_t Sampler::draw_round(Plan& planner, std::size_t length, Rng& rng, SampleBatch& out, bool& stalled) {
  Scratch& z = *scratch_;
  sampler_parts::Rounds& r = z.rounds;
  sampler_parts::ChunkGather& g = z.gather;
  const uint64_t cap = buffer_->capacity();
  const uint64_t step_bytes = buffer_->schema().step_bytes();
  // A row has at most `length` steps, so the chunk's row count keeps it within its bytes (one row at least).
  const uint64_t row_bytes = std::max<uint64_t>(length * step_bytes, 1);
  const bool tiered = segment_of(*buffer_).cold_capacity() != 0;  // (1.11) rows below the ring are the cold tier's
  sampler_parts::Caps& caps = z.caps;
  std::size_t overwritten = 0;
  uint64_t copied = 0;
  std::size_t i = 0;
  bool resnapshot = false;  // the sample caps found new steps to draw from (note_rejection): defer the rest
  while (i < r.redraw.size() && copied < kResnapshotBytes && !stalled && !resnapshot) {
    g.begin(length);
    const uint64_t chunk_budget = std::min(sampler_parts::kGatherBytes, kResnapshotBytes - copied);
    const std::size_t chunk_end = std::min(
        {r.redraw.size(), i + sampler_parts::kGatherRows, i + std::max<std::size_t>(chunk_budget / row_bytes, 1)});
    uint64_t chunk_steps = 0;
    planner.expect_draws(chunk_end - i);  // (the priority planner draws them in groups)
    while (i < chunk_end) {
      const std::optional<detail::Draw> d = planner.draw(rng);
      if (!d) {
        stalled = true;
        break;
      }
      // The start's slot without a division: a start in the view is in [hi - cap, hi) (the snapshot's views are at
      // most the ring, and a tiered buffer's start below it is the cold tier's), so it is at most one lap before the
      // step in slot 0 of hi's lap.
      const uint64_t base = z.snapshot.hi_base[d->env];
      const uint64_t slot = d->start >= base ? d->start - base : d->start + cap - base;
      if (caps.on()) {  // sample caps (sampler_caps.hpp): a capped start is rejected and drawn again
        if (!caps.checking()) {
          caps.prefetch(d->env * cap + slot);  // for the claim after the copy
        } else if (caps.refused(d->env * cap + slot, d->start)) {
          resnapshot = caps.note_rejections(segment_of(*buffer_), z.snapshot.views, 1);
          if (resnapshot) break;
          continue;
        }
      }
      const uint32_t row = r.redraw[i++];
      out.env_ids_[row] = d->env;
      out.starts_[row] = d->start;
      // The row's age: how far behind this snapshot's head of its env it ends. A draw lies in the view, so the end
      // is at most the head; a redraw of the row overwrites the entry.
      r.ages[row] = z.snapshot.views[d->env].hi - (d->start + d->steps);
      out.weights_[row] = static_cast<float>(d->relative_probability);  // 1, or N * P (finish_weights)
      if (tiered && d->start < z.snapshot.hot_lo[d->env]) [[unlikely]] {  // below the ring: the cold tier's
        g.add_cold(d->env, d->start, d->steps, z.snapshot.hot_lo[d->env], row);
      } else {
        g.add(d->env, d->start, slot, d->steps, row);
      }
      chunk_steps += d->steps;
    }
    copied += chunk_steps * step_bytes;
    const std::size_t failed_before = r.failed.size();
    overwritten += g.run(out.field_ptr_.data(), out.mask_, r.failed, z.stats);
    if (caps.on()) {  // one delivery claimed per row kept; a row refused is redrawn (next round)
      const std::size_t refused = caps.claim(g.rows(), r.failed, failed_before);
      if (refused > 0) resnapshot = caps.note_rejections(segment_of(*buffer_), z.snapshot.views, refused);
    }
    if (z.zeroing.on()) z.zeroing.take(g.rows(), r.failed, failed_before, z.slot.priority_walk);
  }
  caps.flush();
  r.failed.insert(r.failed.end(), r.redraw.begin() + static_cast<std::ptrdiff_t>(i), r.redraw.end());  // deferred
  return overwritten;
}

// ---------------------------------------------------------------------------------------------------------------
// After the rounds: the weights, the counters

// Turns each row's N * P, which the priority planner left in the weights, into (N * P)^-beta over the batch's
// largest, computed as (smallest N * P / N * P)^beta: a ratio in (0, 1] to the power beta, which neither overflows
// nor, for the least likely row (exactly 1), underflows, whatever beta (as a quotient of two powers, beta = 1e9
// made it inf / inf). A row whose N * P rounded to 0 in the f32 weights is the least likely.
// Rows [first, first + count) only: a mixture's prioritized block (sampler_mixture.cpp).
void Sampler::finish_weights(SampleBatch& out, double beta, std::size_t first, std::size_t count) noexcept {
  float smallest = std::numeric_limits<float>::infinity();
  for (std::size_t r = first; r < first + count; ++r) smallest = std::min(smallest, out.weights_[r]);
  for (std::size_t r = first; r < first + count; ++r) {
    const float np = out.weights_[r];
    out.weights_[r] = np <= smallest ? 1.0f : static_cast<float>(std::pow(static_cast<double>(smallest) / np, beta));
  }
}

namespace {

// The rows' ages into the slot's histogram: counted here, on the stack, by the raw index (one bit scan a row), then
// folded into the buckets with one relaxed fetch_add per bucket that got rows. Readers (the Inspector) load the
// words one by one and never see them at one instant.
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

void sampler_parts::count_call(Segment& seg, const detail::LearnerSlotWords& me, std::span<const uint64_t> ages,
                               bool sample, std::size_t unreserved) noexcept {
  // The slot's own counters: one learner writes them (relaxed read-modify-writes all the same: cheap, and exact
  // if a Python user ever shares a Sampler between threads against its rules).
  me.rows_sampled.fetch_add(ages.size(), std::memory_order_relaxed);
  me.sample_calls.fetch_add(1, std::memory_order_relaxed);
  count_ages(me.stats, ages);
  if (sample) {
    detail::count_samples(seg.global_control(), unreserved, detail::coarse_realtime_ns(),
                          detail::coarse_monotonic_ns());
  }
}

}  // namespace shmreplay
