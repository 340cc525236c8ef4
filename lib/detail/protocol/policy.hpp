// detail/protocol/policy.hpp: policy versions (layout 1.11; internal/policy_layout.hpp), both halves of each
// handshake. docs/design/policy.md has the argument.
//
//   learners  publish_policy: raise the current version (a CAS that never lowers it: several learner ranks may
//             publish) and store the window, then wake the writers the old window held back.
//             pace_blocker: which env's live writer would fall out of the window a new version would open, so
//             that a learner publishing with pacing waits for it instead of discarding its steps.
//   writers   admits: a step of version v passes the window when there is none or v >= version - max_staleness.
//             note_newest: an env's newest version, stored before the claim of the step that carries it, then
//             the pacing learners woken.
// The window's words are read with acquire and published with release; the two sleeping places are counted wake
// words (detail/protocol/wake.hpp): a sleeper killed in its sleep leaves its count raised, which costs its wakers a
// futex call per move of the version (learners) or of an env's newest version (writers), never a lost wake-up.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>

#include "detail/protocol/wake.hpp"
#include "shmreplay/internal/policy_layout.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// A version as stored in a field of dtype `d` (a scalar integer, as the role's check at create and open requires);
/// nullopt for a negative value. One copy of the bytes: the value checked is the value used.
inline std::optional<uint64_t> read_policy_version(const std::byte* p, DType d) noexcept {
  auto as = [p]<class T>(T) -> std::optional<uint64_t> {
    T v;
    std::memcpy(&v, p, sizeof v);
    if constexpr (static_cast<T>(-1) < 0) {
      if (v < 0) return std::nullopt;
    }
    return static_cast<uint64_t>(v);
  };
  switch (d) {
    case DType::u8: return as(uint8_t{});
    case DType::i8: return as(int8_t{});
    case DType::u16: return as(uint16_t{});
    case DType::i16: return as(int16_t{});
    case DType::u32: return as(uint32_t{});
    case DType::i32: return as(int32_t{});
    case DType::u64: return as(uint64_t{});
    case DType::i64: return as(int64_t{});
    default: return std::nullopt;  // not an integer dtype: refused at create and open
  }
}

/// The published version and window, read once.
struct PolicyWindow {
  uint64_t version = 0;
  uint64_t max_staleness = layout::kNoPolicyWindow;

  bool on() const noexcept { return max_staleness != layout::kNoPolicyWindow; }
  /// The oldest version inside the window (0 when the window reaches back past version 0).
  uint64_t floor() const noexcept { return version > max_staleness ? version - max_staleness : 0; }
  /// Whether a step of version `v` lies inside it (always, without a window).
  bool admits(uint64_t v) const noexcept { return !on() || v >= floor(); }
};

/// The window as published now.
inline PolicyWindow load_policy_window(const layout::PolicyControl& p) noexcept {
  PolicyWindow w;
  // acquire: pairs with publish_policy's release stores, so that a window is read with a version at least as new
  // as the one it was published with.
  w.max_staleness = p.max_staleness.load(std::memory_order_acquire);
  w.version = p.version.load(std::memory_order_acquire);
  return w;
}

/// Learner side: raises the version to `version` (never lowers it) and stores `max_staleness`
/// (layout::kNoPolicyWindow: none), then wakes the held writers. Returns the window now in force.
PolicyWindow publish_policy(layout::PolicyControl& p, uint64_t version, uint64_t max_staleness) noexcept;

/// The first env whose writer holds a live lease and whose newest version is below `floor`, or nullopt. Envs
/// without a live writer, that never pushed a version, or whose writer the window holds back already (it needs a
/// newer policy, which pacing cannot give it) do not hold a learner back.
std::optional<uint64_t> pace_blocker(const Segment& seg, uint64_t floor) noexcept;

/// Writer side: stores env `env`'s newest version `v` (before the claim of its step), then wakes the pacing learners
/// if any sleep. Call only when `v` differs from the stored value.
void note_newest(Segment& seg, uint64_t env, uint64_t v) noexcept;

/// The sleeping places: held writers (woken by publish_policy), pacing learners (woken by note_newest).
inline WakeWord policy_writer_wake(layout::PolicyControl& p) noexcept { return {p.writer_wake, p.writer_waiters}; }
inline WakeWord policy_learner_wake(layout::PolicyControl& p) noexcept { return {p.learner_wake, p.learner_waiters}; }

}  // namespace shmreplay::detail
