// lib/buffer_policy.cpp: policy versions seen from a Buffer (docs/design/policy.md): the version and window in
// force, and a window set without a learner slot (`shmreplay limit --max-staleness`), with the refusals every
// publish shares (policy_checks.hpp). A learner's publish, with its pacing, is lib/sampler_policy.cpp.
#include <fmt/format.h>

#include "detail/protocol/policy.hpp"
#include "policy_checks.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay {

namespace detail {

void check_policy_window(const Buffer& buffer, std::optional<uint64_t> max_staleness, const std::string& what) {
  if (!max_staleness) return;
  if (!buffer.episode_fields().policy_version) {
    throw Error(Errc::invalid_argument,
                fmt::format("{}: it has no policy-version field (create it with CreateOptions::policy_version naming "
                            "the field that holds each step's version)",
                            what));
  }
  if (*max_staleness == layout::kNoPolicyWindow) {
    throw Error(Errc::invalid_argument,
                fmt::format("{}: max_staleness {} is reserved for \"no window\"; pass nullopt (Python: None)", what,
                            *max_staleness));
  }
}

PolicyState policy_state(const layout::PolicyControl& p) noexcept {
  const PolicyWindow w = load_policy_window(p);
  PolicyState s;
  s.version = w.version;
  if (w.on()) s.max_staleness = w.max_staleness;
  s.publishes = p.publishes.load(std::memory_order_relaxed);
  return s;
}

}  // namespace detail

PolicyState Buffer::policy() const noexcept { return detail::policy_state(segment_of(*this).policy_control()); }

PolicyState Buffer::set_policy_window(std::optional<uint64_t> max_staleness) {
  const std::string what = fmt::format("cannot set the policy window of '{}'", name());
  if (read_only()) throw Error(Errc::read_only, what + ": the buffer is mapped read-only");
  detail::check_policy_window(*this, max_staleness, what);
  layout::PolicyControl& p = segment_of(*this).policy_control();
  // Version 0 never lowers the published one (publish_policy raises it by CAS): only the window changes.
  detail::publish_policy(p, 0, max_staleness.value_or(layout::kNoPolicyWindow));
  return detail::policy_state(p);
}

}  // namespace shmreplay
