// shmreplay/internal/journal_layout.hpp: the journal section (layout 1.11): the one journal's lease, its bound and
// the newest durable link, then one durable head per env, [num_envs] u64. docs/design/journal.md has the protocol;
// lib/journal.cpp is the only writer (the journal process, holding the lease), the Inspector the readers.
//
// In every buffer, and small (JournalControl's two cache lines plus 8 bytes per env): a journal attaches to any
// running buffer, as a save does, so its words cannot depend on how the buffer was created. Segment-resident:
// fixed-width atomics only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmreplay/internal/layout.hpp"

namespace shmreplay::layout {

/// The journal's words, two cache lines. Line 0 is the lease (detail/protocol/lease.hpp's LeaseWords order) and the
/// journal's settings and counters; line 1 the newest durable link. Only the lease holder stores to them.
struct alignas(kCacheLineBytes) JournalControl {
  // -- line 0: the lease, the bound, counters (relaxed, informational) --
  std::atomic<uint64_t> lease;         ///< pack_owner(pid, start ticks) of the journal, 0 when none
  std::atomic<uint64_t> start_ticks;   ///< its full start ticks
  std::atomic<uint64_t> since_ns;      ///< CLOCK_REALTIME when it took the lease
  std::atomic<uint64_t> takeovers;     ///< dead journals whose lease was taken over
  std::atomic<uint64_t> bound_ns;      ///< the holder's bound: published steps are durable within it
  std::atomic<uint64_t> links;         ///< links the journals of this buffer wrote
  std::atomic<uint64_t> failures;      ///< links that failed (the chain stayed as it was)
  std::atomic<uint64_t> bound_misses;  ///< links that made steps durable later than the bound
  // -- line 1: the newest durable link; its heads are stored before `durable_ns`, which is stored before `link_seq`
  //    (release; a reader loads link_seq with acquire first) --
  std::atomic<uint64_t> link_seq;      ///< its number in the chain directory; 0 before any
  std::atomic<uint64_t> durable_ns;    ///< CLOCK_REALTIME when its save began: every step published before is durable
  std::atomic<uint64_t> done_ns;       ///< CLOCK_REALTIME when it was synced and named
  std::atomic<uint64_t> link_ns;       ///< how long its save took, in ns
  std::atomic<uint64_t> max_lag_ns;    ///< the largest lag a link ended: its done_ns - the previous link's durable_ns
  uint64_t pad[3];
};

/// Where the durable heads start, from the section's start: env e's word is e words further. A durable head is the
/// step below which the env is in the newest durable link (its saved head; 0 before any link).
constexpr uint64_t journal_heads_at() noexcept { return sizeof(JournalControl); }

static_assert(sizeof(JournalControl) == 2 * kCacheLineBytes, "the journal's control is two cache lines");
static_assert(offsetof(JournalControl, link_seq) == kCacheLineBytes, "the newest link's words start line 1");

}  // namespace shmreplay::layout
