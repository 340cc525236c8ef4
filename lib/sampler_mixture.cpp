// lib/sampler_mixture.cpp: a sample call with a mixture of selectors (SampleOptions::mixture), top to bottom: the
// fractions checked and turned into rows per selector (Mixture::rows), each selector's options checked as its own
// call's would be, one rate-limiter reservation for the batch, then each selector's block drawn by sample_rows
// (sampler_sample.cpp) as its own call would draw it, under one policy window (sampler_policy.cpp), the prioritized
// block's importance weights, the batch's versions, and the call counted once.
//
// Who calls it: Sampler::sample (and so sample_transitions) when options.mixture is not empty; one thread per
// Sampler at a time.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

Selector Sampler::selector_of(View view, const SampleOptions& o) noexcept {
  if (o.reanalysed) return Selector::reanalysed;
  if (o.prioritized) return Selector::prioritized;
  if (o.recency_half_life > 0.0) return Selector::recency;
  return view == View::online ? Selector::online : Selector::uniform;
}

namespace {

constexpr const char* kMixtureOp = "sample (mixture)";

// The options and power of one selector's block: the call's, with the selector's own and no mixture.
std::pair<SampleOptions, double> selector_call(Selector s, const SampleOptions& o, double power) {
  SampleOptions one = o;
  one.mixture = {};
  one.prioritized = s == Selector::prioritized;
  one.reanalysed = s == Selector::reanalysed;
  one.zero_on_sample = o.zero_on_sample && s == Selector::prioritized;  // the prioritized block's rows only
  one.mixture_importance = false;
  if (s != Selector::recency) one.recency_half_life = 0.0;
  return {one, s == Selector::prioritized || s == Selector::reanalysed ? 0.0 : power};
}

void check_fractions(const Buffer& buffer, const SampleOptions& o) {
  double sum = 0.0;
  for (std::size_t i = 0; i < kSelectors; ++i) {
    const auto s = static_cast<Selector>(i);
    const double f = o.mixture.fraction(s);
    if (!std::isfinite(f) || f < 0.0) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot {} '{}': the mixture's {} fraction is {}, expected a finite number >= 0",
                              kMixtureOp, buffer.name(), to_string(s), f));
    }
    sum += f;
  }
  if (!(sum > 0.0) || !std::isfinite(sum)) {
    throw Error(Errc::invalid_argument, fmt::format("cannot {} '{}': the mixture's fractions sum to {}, expected a "
                                                    "positive finite sum",
                                                    kMixtureOp, buffer.name(), sum));
  }
  if (o.prioritized || o.reanalysed) {
    const char* which = o.prioritized ? "prioritized" : "reanalysed";
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with {} = true: a mixture names its {} rows (Mixture::{}) and draws its "
                            "other blocks by their own selectors",
                            kMixtureOp, buffer.name(), which, which, which));
  }
  if (o.zero_on_sample && o.mixture.prioritized == 0.0) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with zero_on_sample = true: the mixture has no prioritized rows, the "
                            "only rows zero-on-sample applies to",
                            kMixtureOp, buffer.name()));
  }
  if (o.mixture.recency > 0.0 && !(o.recency_half_life > 0.0)) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}': the mixture has recency rows (fraction {}) but recency_half_life is {}, "
                            "expected the recency selector's half-life in steps (> 0)",
                            kMixtureOp, buffer.name(), o.mixture.recency, o.recency_half_life));
  }
}

}  // namespace

void Sampler::sample_mixture(View view, std::size_t batch_size, std::size_t sequence_length,
                             double distribution_power, Rng& rng, SampleBatch& out, const SampleOptions& options) {
  lease_.check_process(kMixtureOp);
  check_fractions(*buffer_, options);
  check_batch_shape(*buffer_, kMixtureOp, batch_size, sequence_length);
  if (options.mixture_importance && (options.period != 1 || (options.episodes != Episodes::cross && sequence_length > 1))) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with mixture_importance and {}: the mixture's probability of a row needs "
                            "each selector's weight of any start in closed form (period 1, episodes = cross or "
                            "sequence_length 1)",
                            kMixtureOp, buffer_->name(),
                            options.period != 1 ? fmt::format("period = {}", options.period)
                                                : fmt::format("episodes = {}", to_string(options.episodes))));
  }
  const std::array<std::size_t, kSelectors> rows = options.mixture.rows(batch_size);
  for (std::size_t i = 0; i < kSelectors; ++i) {  // every block's arguments, before anything is drawn
    if (rows[i] == 0) continue;
    const auto [one, power] = selector_call(static_cast<Selector>(i), options, distribution_power);
    check_args(kMixtureOp, rows[i], sequence_length, power, one);
  }
  begin_window(options, kMixtureOp);  // one policy window for every block (sampler_policy.cpp)
  sampler_parts::Reservation reserved(
      segment_of(*buffer_).global_control(),
      wait_for_rate_limit(kMixtureOp, batch_size, options.rate_limit_timeout_ms) ? batch_size : 0);
  out.prepare(buffer_->schema(), batch_size, sequence_length, loads_seen());
  out.episode_fields_ = buffer_->episode_fields();
  std::size_t first = 0;
  for (std::size_t i = 0; i < kSelectors; ++i) {
    if (rows[i] == 0) continue;
    const auto s = static_cast<Selector>(i);
    const auto [one, power] = selector_call(s, options, distribution_power);
    sample_rows(s == Selector::online ? View::online : view, first, rows[i], sequence_length, power, one, rng, out);
    if (s == Selector::prioritized && !options.mixture_importance) {
      finish_weights(out, options.importance_exponent, first, rows[i]);
    }
    first += rows[i];
  }
  if (options.mixture_importance) {
    mixture_probabilities(view, sequence_length, distribution_power, rows, options, out);
    finish_weights(out, options.importance_exponent, 0, batch_size);
  }
  out.selector_rows_ = rows;
  finish_versions(out, batch_size);
  sampler_parts::count_call(segment_of(*buffer_), scratch_->slot, {scratch_->rounds.ages.data(), batch_size},
                            /*sample=*/true, batch_size - reserved.keep());
}

// SampleOptions::mixture_importance: each row's probability under the whole mixture, sum over selectors s of
// (rows_s / B) w_s(row) / W_s, into the batch's weights (finish_weights then makes them importance weights; N, the
// same for every row, cancels there). Each selector's planner is prepared on a fresh snapshot of its view (as
// total_weight does) and asked the weight of every row's start. A row whose start no selector weighs any more (a
// writer overwrote it after its copy) gets the batch's smallest positive probability: weight 1, the largest.
void Sampler::mixture_probabilities(View view, std::size_t length, double power,
                                    const std::array<std::size_t, kSelectors>& rows, const SampleOptions& options,
                                    SampleBatch& out) {
  Scratch& z = *scratch_;
  const std::size_t batch = out.rows();
  std::vector<double>& p = z.rounds.mixture_p;
  p.assign(batch, 0.0);
  const uint64_t cap = buffer_->capacity();
  for (std::size_t i = 0; i < kSelectors; ++i) {
    if (rows[i] == 0) continue;
    const auto s = static_cast<Selector>(i);
    // Not a structured binding: the lambda below captures them, which clang before 16 refuses (the fuzzers' build).
    const std::pair<SampleOptions, double> call = selector_call(s, options, power);
    const SampleOptions& one = call.first;
    const double power_s = call.second;
    const View v = s == Selector::online ? View::online : view;
    for (std::size_t e = 0; e < z.snapshot.views.size(); ++e) {
      z.snapshot.views[e] = sampler_parts::snapshot_view(segment_of(*buffer_), z.slot, e, v);
    }
    if (cut_views_to_window()) continue;  // no step inside the window: this selector weighs no row now
    const double share = static_cast<double>(rows[i]) / static_cast<double>(batch);
    z.planning.planners.with(one, length, [&](detail::Planner& planner) {
      planner.begin_call();
      const detail::PlanOptions plan{one.episodes, std::min(one.period, cap), one.recency_half_life,
                                     one.sequence_priority_eta};
      if (!planner.prepare(z.snapshot.views, length, power_s, plan)) return;
      const double total = planner.total_weight();
      for (std::size_t r = 0; r < batch; ++r) {
        p[r] += share * planner.weight_of(out.env_ids_[r], out.starts_[r]) / total;
      }
    });
  }
  double smallest = 0.0;
  for (const double x : p) smallest = x > 0.0 && (smallest == 0.0 || x < smallest) ? x : smallest;
  for (std::size_t r = 0; r < batch; ++r) out.weights_[r] = static_cast<float>(p[r] > 0.0 ? p[r] : smallest);
}

}  // namespace shmreplay
