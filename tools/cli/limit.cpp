// `shmreplay limit`: show, set or remove a running segment's rate limiter and policy window; and the limiter's
// texts for `create`, `info` and `watch`.
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "info_forms.hpp"
#include "option_checks.hpp"
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

namespace {

nlohmann::ordered_json rate_limit_json(const RateLimitState& s) {
  if (!s.limit) return nullptr;
  return {{"text", s.limit->to_string()},
          {"min_size_to_sample", s.limit->min_size_to_sample},
          {"samples_per_insert", s.limit->samples_per_insert},
          {"has_ratio", s.limit->has_ratio()},
          {"error_buffer", s.limit->error_buffer()},
          {"inserts", s.inserts},
          {"samples", s.samples},
          {"error", s.error}};
}

}  // namespace

int run_limit(const LimitArgs& args) {
  if (args.off && args.rate_limit.any()) {
    throw Error(Errc::invalid_argument, "--off removes the rate limiter; it takes no other rate-limit option");
  }
  const bool change_limit = args.off || args.rate_limit.any();
  const std::optional<WindowArg> window =
      args.max_staleness.empty() ? std::nullopt : parse_window(args.max_staleness);  // checked by the parser
  const bool change = change_limit || window.has_value();
  // Showing the limiter of another user's segment is display (as `info`); changing it needs the opt-in.
  Buffer b = Buffer::open(args.name, {.read_only = !change, .allow_other_owner = args.allow_other_owner || !change});
  // The window first: a window the buffer cannot take (no policy-version field) changes nothing.
  if (window) b.set_policy_window(window->max_staleness);
  // Options not given keep their current values (read now; a concurrent `limit` may still win the write).
  if (change_limit) b.set_rate_limit(args.off ? std::nullopt : args.rate_limit.merged(b.rate_limit()));
  const RateLimitState s = b.rate_limit_state();
  const std::string name = b.name();
  const PolicyInfo policy = Inspector(std::move(b)).snapshot().policy;
  if (args.json) {
    nlohmann::ordered_json j;
    j["name"] = name;
    j["rate_limit"] = rate_limit_json(s);
    j["policy"] = policy_json(policy);
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  if (args.off) {
    fmt::print("'{}': rate limiter removed\n", name);
  } else if (change_limit || !window) {
    fmt::print("'{}': {}rate limit {}\n", name, change_limit ? "new " : "", rate_limit_text(s));
  }
  if (window || !policy.field.empty() || policy.publishes != 0) {
    fmt::print("'{}': {}policy {}\n", name, window ? "new " : "", policy_text(policy));
  }
  return kExitOk;
}

}  // namespace shmreplay::cli
