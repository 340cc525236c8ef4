// lib/writer_policy.cpp: the writer's half of policy versions (detail/protocol/policy.hpp): each pushed step's
// version read once and checked (not negative, not below its env's newest), a push whose version the learners'
// window has left behind held back until the window admits it (or Error(rate_limited) at the writer's
// policy_timeout_ms, with nothing written), counted per env as starvation, and the envs' newest versions stored
// before their steps are published. The learner's half is Sampler::publish_policy (lib/sampler_policy.cpp).
//
// Who calls it: push_impl and StepSlot::commit (writer_push.cpp), before they write or publish anything.
#include <atomic>
#include <chrono>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/policy.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay {

void Writer::admit_policy(std::span<const FieldBytes> fields, std::size_t n, const char* op) {
  const std::size_t f = *policy_field_;
  const Field& field = buffer_->schema()[f];
  const uint64_t bytes = field_bytes_[f];
  versions_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t l = locals_[i];
    const uint64_t env = envs_[l];
    const std::byte* at = fields.empty() ? field_base_[f] + (env * capacity_ + next_slot_[l]) * bytes
                                         : static_cast<const std::byte*>(fields[f].data) + i * bytes;
    const std::optional<uint64_t> v = detail::read_policy_version(at, field.dtype);
    if (!v) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot {} env {} of '{}': its step's policy version (field '{}') is negative, expected "
                              "a version >= 0",
                              op, env, buffer_->name(), field.name));
    }
    // relaxed: only this env's writer stores it (note_newest), and this Writer holds the env's lease.
    const uint64_t newest = seg_->policy_env(env).newest.load(std::memory_order_relaxed);
    if (newest != layout::kNoPolicyVersion && *v < newest) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot {} env {} of '{}': its step has policy version {} (field '{}'), below the env's "
                              "newest version {}; an env's versions never decrease (a sample's window is a suffix "
                              "of each env's steps)",
                              op, env, buffer_->name(), *v, field.name, newest));
    }
    versions_[i] = *v;
  }
  const detail::PolicyWindow window = detail::load_policy_window(seg_->policy_control());
  for (std::size_t i = 0; i < n; ++i) {
    if (!window.admits(versions_[i])) {
      wait_for_policy(i, op);
      break;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t env = envs_[locals_[i]];
    if (seg_->policy_env(env).newest.load(std::memory_order_relaxed) != versions_[i]) {
      detail::note_newest(*seg_, env, versions_[i]);
    }
  }
}

void Writer::wait_for_policy(std::size_t blocked, const char* op) {
  layout::PolicyControl& p = seg_->policy_control();
  const uint64_t env = envs_[locals_[blocked]];
  layout::PolicyEnv& pe = seg_->policy_env(env);
  p.writers_held.fetch_add(1, std::memory_order_relaxed);
  pe.held_pushes.fetch_add(1, std::memory_order_relaxed);
  pe.held_since_ns.store(detail::realtime_ns(), std::memory_order_relaxed);
  const auto start = std::chrono::steady_clock::now();
  detail::PolicyWindow window;
  auto admitted = [&] {
    window = detail::load_policy_window(p);
    for (std::size_t i = 0; i < versions_.size(); ++i) {
      if (!window.admits(versions_[i])) return false;
    }
    return true;
  };
  bool ok = false;
  {
    struct Done {  // the hold ends however the wait does (an interrupt throws out of it)
      layout::PolicyEnv& pe;
      std::chrono::steady_clock::time_point start;
      ~Done() {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
        pe.held_ns.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
        pe.held_since_ns.store(0, std::memory_order_relaxed);
      }
    } done{pe, start};
    ok = detail::sleep_until(detail::policy_writer_wake(p), deadline_after_ms(options_.policy_timeout_ms), admitted);
  }
  if (ok) return;
  p.writer_timeouts.fetch_add(1, std::memory_order_relaxed);
  pe.timeouts.fetch_add(1, std::memory_order_relaxed);
  std::size_t oldest = 0;
  for (std::size_t i = 1; i < versions_.size(); ++i) oldest = versions_[i] < versions_[oldest] ? i : oldest;
  throw Error(Errc::rate_limited,
              fmt::format("cannot {} env {} of '{}': its step has policy version {}, outside the window the learners "
                          "published (version {}, max_staleness {}: versions >= {}); held back {} ms, nothing written. "
                          "Load a newer policy, or widen the window (Sampler::publish_policy)",
                          op, envs_[locals_[oldest]], buffer_->name(), versions_[oldest], window.version,
                          window.max_staleness, window.floor(), options_.policy_timeout_ms));
}

}  // namespace shmreplay
