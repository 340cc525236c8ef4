// lib/sampler_checks.cpp: what a Sampler refuses before it samples, and why a snapshot gave nothing to draw:
// the batch's shape (check_batch_shape, also called by the Python module before it allocates a batch), the
// arguments and options of a sample call against the buffer (check_args), and the error of a snapshot that the
// planner found nothing to draw from for a reason other than a write in progress (check_shortfall).
//
// Who calls it: every sample call, total_weight (sampler_sample.cpp, sampler_weights.cpp), and the sample rounds
// (sampler_sample.cpp); all throw Error with the call's name in the message.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

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

// SampleOptions::reanalysed (docs/design/reanalyse.md, "The learner's mix"): a buffer with a walk; uniform over the
// fresh starts, so not with the options that weigh starts otherwise or restrict them to a grid or an episode.
static void check_reanalysed(const Buffer& buffer, const char* op, const SampleOptions& o) {
  if (!o.reanalysed) return;
  std::string problem;
  if (buffer.reanalyse_chunk() == 0) {
    problem = "the buffer has no reanalyse walk (create it with reanalyse_chunk)";
  } else if (o.prioritized || o.recency_half_life > 0.0) {
    problem = fmt::format("{} weighs starts otherwise (the reanalysed rows are uniform over the fresh steps)",
                          o.prioritized ? "prioritized" : "recency_half_life");
  } else if (o.period != 1 || o.episodes != Episodes::cross) {
    problem = o.period != 1 ? fmt::format("period = {}: expected 1", o.period)
                            : fmt::format("episodes = {}: expected cross", to_string(o.episodes));
  }
  if (!problem.empty()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' from the freshly reanalysed steps: {}", op, buffer.name(), problem));
  }
}

void Sampler::check_args(const char* op, std::size_t rows, std::size_t length, double power,
                         const SampleOptions& options) const {
  check_reanalysed(*buffer_, op, options);
  lease_.check_process(op);
  if (buffer_->consuming_queue() || options.consume != Consume::off) check_consume(op, options);
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
  if (!options.mixture.empty()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with a mixture of selectors: only sample and sample_transitions draw "
                            "one (a mixture's rows come from several selectors, not from one view's weights)",
                            op, buffer_->name()));
  }
  check_recency(op, length, options);
  check_priority_selectors(op, length, options);
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

// The options of issue 47's prioritized selectors: mixture_importance only in a mixture's call, zero_on_sample only
// with prioritized, and sequence priorities' eta and their refusal of zero_on_sample.
void Sampler::check_priority_selectors(const char* op, std::size_t length, const SampleOptions& options) const {
  if (options.mixture_importance) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with mixture_importance = true and no mixture: it weighs each row by the "
                            "mixture's probability (pass a mixture to sample or sample_transitions)",
                            op, buffer_->name()));
  }
  if (options.zero_on_sample && !options.prioritized) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with zero_on_sample = true and prioritized = false: zero-on-sample sets "
                            "the priority of each step a prioritized draw returns to 0 (pass prioritized = true, or "
                            "a mixture with prioritized rows)",
                            op, buffer_->name()));
  }
  if (options.prioritized && buffer_->sequence_priority_length() == length) {
    const double eta = options.sequence_priority_eta;
    if (!(eta >= 0.0 && eta <= 1.0)) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot {} '{}': sequence_priority_eta is {}, expected a number in [0, 1] (a start "
                              "weighs eta * max + (1 - eta) * mean of its sequence's step weights)",
                              op, buffer_->name(), eta));
    }
    if (options.zero_on_sample) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot {} '{}' with zero_on_sample and sequence priorities (sequence_length {}): a "
                              "sequence's weight comes from every step of it, so zeroing its start would not keep it "
                              "from being drawn again",
                              op, buffer_->name(), length));
    }
  }
}

void Sampler::check_recency(const char* op, std::size_t length, const SampleOptions& options) const {
  const double h = options.recency_half_life;
  if (!std::isfinite(h) || h < 0.0) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}': recency_half_life is {}, expected a finite number of steps >= 0 (0: "
                            "no recency weighting)",
                            op, buffer_->name(), h));
  }
  if (h == 0.0) return;
  const char* why = nullptr;
  std::string what;
  if (options.prioritized) {
    what = "prioritized = true";
    why = "a prioritized draw weighs a start by its priority^alpha alone (mix the two selectors instead)";
  } else if (options.period != 1) {
    what = fmt::format("period = {}", options.period);
    why = "the recency weights are summed in closed form over every step of a view (period 1)";
  } else if (options.episodes != Episodes::cross && length > 1) {
    what = fmt::format("episodes = {} and sequence_length {}", to_string(options.episodes), length);
    why = "the recency weights are summed in closed form over rows that run across episode ends (episodes = cross, "
          "or sequence_length 1)";
  }
  if (why != nullptr) {
    throw Error(Errc::invalid_argument, fmt::format("cannot {} '{}' by recency (recency_half_life = {}) with {}: {}",
                                                    op, buffer_->name(), h, what, why));
  }
}

bool sampler_parts::check_shortfall(detail::Planner& planner, detail::Shortfall found, const Segment& seg,
                                    const char* op, View view) {
  // The texts are the priority planner's: the one planner whose weights are stored, so the only one that tells
  // all_zero or not_finite.
  switch (found) {
    case detail::Shortfall::no_start: return false;
    case detail::Shortfall::unknown:
    case detail::Shortfall::positive: return true;
    case detail::Shortfall::all_zero:
      throw Error(Errc::empty_view,
                  fmt::format("cannot {} the {} view of '{}' by priority: every stored step in it has priority 0 "
                              "(sampling weight 0), so none can be drawn; give steps a positive priority "
                              "(update_priorities, or push with priorities)",
                              op, to_string(view), seg.name()));
    case detail::Shortfall::not_finite: break;
  }
  throw Error(Errc::corrupt,
              fmt::format("cannot {} the {} view of '{}' by priority: a sampling weight in its priority trees is "
                          "not a finite number >= 0 (the view's total is {}); every priority is checked as it "
                          "enters, so the segment is damaged",
                          op, to_string(view), seg.name(), planner.total_weight()));
}

}  // namespace shmreplay
