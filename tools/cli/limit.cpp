// `shmreplay limit`: show, set or remove a running segment's rate limiter; and the limiter's texts for `create`,
// `info` and `watch`.
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "text.hpp"

namespace shmreplay::cli {

std::optional<RateLimit> RateLimitArgs::limit() const {
  if (samples_per_insert && !error_buffer) {
    throw Error(Errc::invalid_argument,
                "--samples-per-insert needs --error-buffer: how far samples may run ahead of or behind the ratio");
  }
  if (error_buffer && !samples_per_insert) {
    throw Error(Errc::invalid_argument, "--error-buffer needs --samples-per-insert: the ratio it is a margin of");
  }
  if (samples_per_insert) return RateLimit::ratio(*samples_per_insert, min_size_to_sample.value_or(1), *error_buffer);
  if (min_size_to_sample) return RateLimit::min_size(*min_size_to_sample);
  return std::nullopt;
}

std::optional<RateLimit> RateLimitArgs::merged(const std::optional<RateLimit>& current) const {
  if (!any()) return std::nullopt;
  RateLimitArgs full = *this;
  if (current) {
    if (!full.min_size_to_sample) full.min_size_to_sample = current->min_size_to_sample;
    if (current->has_ratio()) {
      if (!full.samples_per_insert) full.samples_per_insert = current->samples_per_insert;
      if (!full.error_buffer) full.error_buffer = current->error_buffer();
    }
  }
  return full.limit();
}

std::string rate_limit_text(const RateLimitState& s) {
  if (!s.limit) return "none";
  const RateLimit& r = *s.limit;
  std::string text = r.to_string();
  text += fmt::format("; {} inserts, {} samples", s.inserts, s.samples);
  if (s.inserts > 0) text += fmt::format(" ({:.3g} per insert)", static_cast<double>(s.samples) / static_cast<double>(s.inserts));
  if (r.has_ratio()) text += fmt::format(", error {:g}", s.error);
  if (s.learner_waiting_rows != 0) {
    text += fmt::format("; the learner waits for {} rows since {} ago", s.learner_waiting_rows,
                        human_age(age_ns(s.learner_waiting_since_ns)));
  }
  if (s.writer_waiters != 0) {
    text += fmt::format("; {} writer{} wait{} since {} ago", s.writer_waiters, s.writer_waiters == 1 ? "" : "s",
                        s.writer_waiters == 1 ? "s" : "", human_age(age_ns(s.writer_waiting_since_ns)));
  }
  text += fmt::format("; held back: {} sample calls ({} timed out), {} pushes ({} timed out)", s.learner_limited,
                      s.learner_timeouts, s.writers_limited, s.writer_timeouts);
  return text;
}

int run_limit(const LimitArgs& args) {
  if (args.off && args.rate_limit.any()) {
    throw Error(Errc::invalid_argument, "--off removes the rate limiter; it takes no other rate-limit option");
  }
  const bool change = args.off || args.rate_limit.any();
  // Showing the limiter of another user's segment is display (as `info`); changing it needs the opt-in.
  Buffer b = Buffer::open(args.name, {.read_only = !change, .allow_other_owner = args.allow_other_owner || !change});
  // Options not given keep their current values (read now; a concurrent `limit` may still win the write).
  if (change) b.set_rate_limit(args.off ? std::nullopt : args.rate_limit.merged(b.rate_limit()));
  const RateLimitState s = b.rate_limit_state();
  if (args.json) {
    nlohmann::ordered_json j;
    j["name"] = b.name();
    j["rate_limit"] = s.limit ? nlohmann::ordered_json{{"text", s.limit->to_string()},
                                                       {"min_size_to_sample", s.limit->min_size_to_sample},
                                                       {"samples_per_insert", s.limit->samples_per_insert},
                                                       {"has_ratio", s.limit->has_ratio()},
                                                       {"error_buffer", s.limit->error_buffer()},
                                                       {"inserts", s.inserts},
                                                       {"samples", s.samples},
                                                       {"error", s.error}}
                              : nlohmann::ordered_json(nullptr);
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  if (args.off) {
    fmt::print("'{}': rate limiter removed\n", b.name());
  } else {
    fmt::print("'{}': {}rate limit {}\n", b.name(), change ? "new " : "", rate_limit_text(s));
  }
  return kExitOk;
}

}  // namespace shmreplay::cli
