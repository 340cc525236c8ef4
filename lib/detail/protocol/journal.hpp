// detail/protocol/journal.hpp: the journal section (layout 1.11; internal/journal_layout.hpp), every side of it.
//
//   lease     take_journal_lease: the journal lease (detail/protocol/lease.hpp's words at the top of
//             JournalControl), refused while a live process holds it, taken over from a dead one; the holder then
//             stores its bound. release_journal_lease lets it go (a CAS: a lease taken over meanwhile stays).
//   publish   publish_durable_link: after a link is synced and named, the holder stores each env's durable head
//             (relaxed), then the link's times, then its number with release.
//   read      read_journal: a reader (the Inspector) loads the number with acquire first, then the rest: a reader
//             that sees link N sees N's times and heads, or a newer link's.
// Who calls what: the Journal (lib/journal.cpp) the lease and publish; the Inspector read. Safe across processes:
// only the lease holder stores to the section.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shmreplay/internal/journal_layout.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// Takes the journal lease of `seg` (a writable mapping) for this process, clears the newest link and the durable
/// heads (a predecessor's may be of another directory) and stores `bound_ns`. Returns "" when
/// taken, else why not (a live holder, named; or this process already holds it), as the message of Errc::lease_held
/// for the segment `name`.
std::string take_journal_lease(Segment& seg, const std::string& name, uint64_t bound_ns);

/// Releases it if this process still holds it.
void release_journal_lease(Segment& seg) noexcept;

/// A synced link as the journal publishes it.
struct DurableLink {
  uint64_t link_seq = 0;
  uint64_t durable_ns = 0;  ///< CLOCK_REALTIME when its save began
  uint64_t done_ns = 0;     ///< CLOCK_REALTIME when it was synced and named
  uint64_t link_ns = 0;     ///< its save's duration
  uint64_t lag_ns = 0;      ///< the lag it ended (done - the previous durable instant)
  bool late = false;        ///< lag past the bound
  std::vector<uint64_t> heads;  ///< per env, the head the link holds (its window's end)
};

/// Publishes `link` (the lease holder only).
void publish_durable_link(Segment& seg, const DurableLink& link) noexcept;

/// Counts a failed link (the lease holder only).
void count_journal_failure(Segment& seg) noexcept;

/// What a reader sees of the section.
struct JournalReading {
  uint64_t lease = 0;         ///< the lease word (0: none)
  uint64_t start_ticks = 0;
  uint64_t since_ns = 0;
  uint64_t takeovers = 0;
  uint64_t bound_ns = 0;
  uint64_t links = 0;
  uint64_t failures = 0;
  uint64_t bound_misses = 0;
  uint64_t link_seq = 0;      ///< 0: no link yet
  uint64_t durable_ns = 0;
  uint64_t done_ns = 0;
  uint64_t link_ns = 0;
  uint64_t max_lag_ns = 0;
};

/// Reads the section's control words (link_seq with acquire first). O(1).
JournalReading read_journal(const Segment& seg) noexcept;

/// Env `env`'s durable head (relaxed; after read_journal, at least the heads of the link it read).
uint64_t journal_durable_head(const Segment& seg, uint64_t env) noexcept;

}  // namespace shmreplay::detail
