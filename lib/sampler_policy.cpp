// lib/sampler_policy.cpp: the learner's half of policy versions (detail/protocol/policy.hpp): publishing a version
// and a window (with pacing: waiting for the live writers the window would leave behind), each sample call's window
// (the views cut to the suffix of each env whose versions lie inside it), and the version ages of the rows drawn.
// The writer's half is lib/writer_policy.cpp; docs/design/policy.md has the argument.
//
// Who calls it: the learner (publish_policy, policy), and every sample call and total_weight (sampler_sample.cpp,
// sampler_weights.cpp) through begin_window and cut_views_to_window.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/policy.hpp"
#include "detail/protocol/seqlock.hpp"
#include "policy_checks.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay {

namespace {

// Pacing: waits until no live writer's newest version is below `floor`; throws rate_limited at the deadline.
void wait_for_pace(Segment& seg, const Buffer& buffer, uint64_t version, uint64_t max_staleness,
                   const PolicyPublish& options) {
  const uint64_t floor = detail::PolicyWindow{version, options.max_lag.value_or(max_staleness)}.floor();
  layout::PolicyControl& p = seg.policy_control();
  std::optional<uint64_t> behind = detail::pace_blocker(seg, floor);
  if (!behind) return;
  p.learner_paced.fetch_add(1, std::memory_order_relaxed);
  const bool ok = detail::sleep_until(detail::policy_learner_wake(p), deadline_after_ms(options.pace_timeout_ms), [&] {
    behind = detail::pace_blocker(seg, floor);
    return !behind;
  });
  if (ok) return;
  p.learner_pace_timeouts.fetch_add(1, std::memory_order_relaxed);
  const uint64_t lease = seg.env_control(*behind).lease.load(std::memory_order_relaxed);
  throw Error(Errc::rate_limited,
              fmt::format("cannot publish policy version {} of '{}' with max_staleness {} (pace, max_lag {}): env {} "
                          "(writer pid {}) still produces with version {}, below {}, after {} ms; nothing published",
                          version, buffer.name(), max_staleness, options.max_lag.value_or(max_staleness), *behind,
                          layout::owner_pid(lease),
                          seg.policy_env(*behind).newest.load(std::memory_order_relaxed), floor,
                          options.pace_timeout_ms));
}

}  // namespace

PolicyState Sampler::publish_policy(uint64_t version, std::optional<uint64_t> max_staleness,
                                    const PolicyPublish& options) {
  lease_.check_process("publish the policy of");
  Segment& seg = segment_of(*buffer_);
  detail::check_policy_window(*buffer_, max_staleness,
                              fmt::format("cannot publish a policy window for '{}'", buffer_->name()));
  const uint64_t k = max_staleness.value_or(layout::kNoPolicyWindow);
  if (options.pace && options.max_lag && *options.max_lag == 0) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot publish policy version {} of '{}': max_lag is 0, expected at least 1 (no writer can "
                            "produce with a version before it is published)",
                            version, buffer_->name()));
  }
  if (options.pace && max_staleness) {
    const uint64_t current = seg.policy_control().version.load(std::memory_order_relaxed);
    wait_for_pace(seg, *buffer_, std::max(version, current), k, options);
  }
  detail::publish_policy(seg.policy_control(), version, k);
  return detail::policy_state(seg.policy_control());
}

PolicyState Sampler::policy() const { return buffer_->policy(); }

void Sampler::begin_window(const SampleOptions& options, const char* op) {
  sampler_parts::Window& w = scratch_->window;
  const std::optional<std::size_t> field = buffer_->episode_fields().policy_version;
  if (options.max_staleness && !field) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with max_staleness = {}: the buffer has no policy-version field (create "
                            "it with CreateOptions::policy_version)",
                            op, buffer_->name(), *options.max_staleness));
  }
  const detail::PolicyWindow published = detail::load_policy_window(segment_of(*buffer_).policy_control());
  detail::PolicyWindow used = published;
  if (options.max_staleness) used.max_staleness = *options.max_staleness;
  w.on = field.has_value() && used.on();
  w.version = published.version;
  w.floor = w.on ? used.floor() : 0;
  w.field = field.value_or(0);
}

std::optional<uint64_t> Sampler::cut_views_to_window() {
  Scratch& z = *scratch_;
  sampler_parts::Window& w = z.window;
  if (!w.on || w.floor == 0) return std::nullopt;
  const std::size_t n = z.snapshot.views.size();
  if (w.cached_floor == sampler_parts::Window::kNoFloor || w.floor < w.cached_floor) {
    w.bound.assign(n, 0);  // a lower floor: what was below the old one may be inside
    w.found.assign(n, 0);
  } else if (w.floor > w.cached_floor) {
    std::fill(w.found.begin(), w.found.end(), 0);  // below each bound stays below; search on from it
  }
  w.cached_floor = w.floor;
  const Segment& seg = segment_of(*buffer_);
  uint64_t before = 0;
  uint64_t after = 0;
  bool lapped = false;  // an env's search could not be validated: this round tells nothing of emptiness
  for (std::size_t e = 0; e < n; ++e) {
    detail::EnvView& v = z.snapshot.views[e];
    before += v.hi - v.lo;
    if (w.found[e]) {
      v.lo = std::clamp(w.bound[e], v.lo, v.hi);
    } else {
      const uint64_t from = std::clamp(w.bound[e], v.lo, v.hi);
      const std::optional<uint64_t> lo = sampler_parts::window_lo(seg, w.field, e, {from, v.hi}, w.floor);
      if (lo) {
        w.bound[e] = *lo;
        w.found[e] = *lo < v.hi ? 1 : 0;
      }
      v.lo = lo.value_or(v.hi);
      lapped = lapped || !lo;
    }
    after += v.hi - v.lo;
  }
  if (after == 0 && before != 0 && !lapped) return before;
  return std::nullopt;
}

void Sampler::throw_empty_window(View view, uint64_t steps) const {
  const sampler_parts::Window& w = scratch_->window;
  throw Error(Errc::empty_view,
              fmt::format("cannot sample the {} view of '{}': none of its {} steps lies inside the policy window "
                          "(version {}: versions >= {})",
                          to_string(view), buffer_->name(), steps, w.version, w.floor));
}

std::optional<uint64_t> sampler_parts::window_lo(const Segment& seg, std::size_t field, uint64_t e, detail::EnvView v,
                                                 uint64_t floor) noexcept {
  const layout::EnvControl& c = seg.env_control(e);
  const uint64_t cap = seg.capacity();
  const DType dtype = seg.schema()[field].dtype;
  const uint64_t bytes = seg.schema()[field].bytes();
  const std::byte* base = seg.field_data(field) + e * cap * bytes;
  const auto inside = [&](uint64_t step) {
    const std::optional<uint64_t> ver = detail::read_policy_version(base + (step % cap) * bytes, dtype);
    return ver && *ver >= floor;
  };
  if (v.lo >= v.hi) return v.hi;  // an empty view: nothing to search
  for (int attempt = 0; attempt < 64; ++attempt) {
    const uint64_t begin = detail::read_begin(c);
    uint64_t lo = v.lo;
    uint64_t hi = v.hi;
    if (inside(lo)) {
      hi = lo;  // the oldest step is inside: so is the view (the common case of a wide window)
    }
    while (lo < hi) {  // the first step whose version is >= floor: versions never decrease within an env
      const uint64_t mid = lo + (hi - lo) / 2;
      if (inside(mid)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    const detail::ReadEnd end = detail::read_end(c);
    const uint64_t intact = detail::intact_from(end, cap);
    if ((begin & 1) == 0 && begin == end.update_seq && intact <= v.lo) return lo;
    v.lo = std::max(v.lo, intact);  // search again above the steps reclaimed meanwhile
    // Writers reclaimed every step of the snapshot's view: its steps tell nothing of the window (the env holds newer
    // steps, which may be inside it), so this round draws nothing from the env, as a lapped search (not "none is
    // inside": that would make the call throw empty_view with steps inside the window stored).
    if (v.lo >= v.hi) return std::nullopt;
  }
  return std::nullopt;  // writers lapped the ring through every search: nothing from this env this round
}

void Sampler::finish_versions(SampleBatch& out, std::size_t rows) noexcept {
  const sampler_parts::Window& w = scratch_->window;
  out.policy_version_ = w.version;
  out.policy_floor_ = w.on ? std::optional<uint64_t>(w.floor) : std::nullopt;
  if (!w.on) return;
  layout::PolicyLearner& me = segment_of(*buffer_).policy_learner(rank_);
  uint64_t buckets[layout::kVersionAgeBuckets] = {};
  uint64_t sum = 0;
  const DType dtype = out.field_dtype(w.field);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::optional<uint64_t> v = detail::read_policy_version(out.step(w.field, r, 0), dtype);
    const uint64_t age = v && *v < w.version ? w.version - *v : 0;
    ++buckets[layout::version_age_bucket(age)];
    sum += age;
  }
  for (std::size_t b = 0; b < layout::kVersionAgeBuckets; ++b) {
    if (buckets[b] != 0) me.age_buckets[b].fetch_add(buckets[b], std::memory_order_relaxed);
  }
  me.age_sum.fetch_add(sum, std::memory_order_relaxed);
  me.rows.fetch_add(rows, std::memory_order_relaxed);
}

}  // namespace shmreplay
