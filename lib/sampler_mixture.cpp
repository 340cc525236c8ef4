// lib/sampler_mixture.cpp: a sample call with a mixture of selectors (SampleOptions::mixture), top to bottom: the
// fractions checked and turned into rows per selector (Mixture::rows), each selector's options checked as its own
// call's would be, one rate-limiter reservation for the batch, then each selector's block drawn by sample_rows
// (sampler_sample.cpp) as its own call would draw it, under one policy window (sampler_policy.cpp), the prioritized
// block's importance weights, the batch's versions, and the call counted once.
//
// Who calls it: Sampler::sample (and so sample_transitions) when options.mixture is not empty; one thread per
// Sampler at a time.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

Selector Sampler::selector_of(View view, const SampleOptions& o) noexcept {
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
  one.zero_on_sample = o.zero_on_sample && s == Selector::prioritized;  // the prioritized block's rows only
  if (s != Selector::recency) one.recency_half_life = 0.0;
  return {one, s == Selector::prioritized ? 0.0 : power};
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
  if (o.prioritized) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with prioritized = true: a mixture names its prioritized rows "
                            "(Mixture::prioritized) and draws its other blocks by their own selectors",
                            kMixtureOp, buffer.name()));
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
  out.prepare(buffer_->schema(), batch_size, sequence_length);
  out.episode_fields_ = buffer_->episode_fields();
  std::size_t first = 0;
  for (std::size_t i = 0; i < kSelectors; ++i) {
    if (rows[i] == 0) continue;
    const auto s = static_cast<Selector>(i);
    const auto [one, power] = selector_call(s, options, distribution_power);
    sample_rows(s == Selector::online ? View::online : view, first, rows[i], sequence_length, power, one, rng, out);
    if (s == Selector::prioritized) finish_weights(out, options.importance_exponent, first, rows[i]);
    first += rows[i];
  }
  out.selector_rows_ = rows;
  finish_versions(out, batch_size);
  sampler_parts::count_call(segment_of(*buffer_), scratch_->slot, {scratch_->rounds.ages.data(), batch_size},
                            /*sample=*/true, batch_size - reserved.keep());
}

}  // namespace shmreplay
