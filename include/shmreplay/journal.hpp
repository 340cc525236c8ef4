// shmreplay/journal.hpp: a journal keeps a live buffer durable in a chain directory within a bound (default 2 s):
// every step a writer publishes is in a synced link of the chain at most `bound` seconds later, so a crash of every
// process, or of the machine, loses at most the last `bound` seconds of each env. `shmreplay load DIR` restores it.
//
// Who calls it: `shmreplay journal NAME DIR`, the Python shmreplay.Journal, programs that embed it. It is a reader
// like a save (checkpoint.hpp): it copies published steps with the seqlock and never makes a writer or a learner
// wait; a link is an incremental link of the chain (save_link): the steps since the previous link, fsynced, renamed
// and the directory synced, older links pruned as the chain's `keep` allows. docs/design/journal.md has the
// schedule and the guarantees.
//
// One journal per buffer: it holds the journal lease of the segment's journal section (layout 1.11), where it also
// publishes its bound, the newest durable link (number, time) and per env the durable head, so that `info`,
// `watch` and `metrics` show its lag. A second journal is refused (Errc::lease_held) while the first lives; a dead
// one's lease is taken over.
//
// Thread safety: one Journal is driven by one thread at a time (start/stop, or run, or write_link); stats() may be
// called from any thread while it runs. Across processes the lease makes it the only one.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "shmreplay/buffer.hpp"
#include "shmreplay/checkpoint.hpp"

namespace shmreplay {

/// The smallest bound a journal takes, in seconds.
inline constexpr double kJournalMinBoundS = 0.05;
/// The largest bound a journal takes, in seconds.
inline constexpr double kJournalMaxBoundS = 86400.0;

/// What one link of the journal did (JournalOptions::on_link).
struct JournalLink {
  uint64_t link_seq = 0;      ///< the link's number (0 when it failed)
  uint64_t steps = 0;         ///< records it holds
  uint64_t file_bytes = 0;    ///< its size
  bool whole = false;         ///< a whole link (a new chain) rather than an incremental one
  double seconds = 0.0;       ///< how long its save took, sync and prune included
  double lag_s = 0.0;         ///< the lag it ended: its end minus the previous durable instant
  bool late = false;          ///< the lag passed the bound
  bool last = false;          ///< the link written as the journal stops
  std::string error;          ///< why it failed ("" when it did not); the chain stayed as it was
};

/// How a journal runs.
struct JournalOptions {
  /// Published steps are durable within this many seconds (kJournalMinBoundS to kJournalMaxBoundS).
  double bound_s = 2.0;
  /// Links kept as restore points (ChainOptions::keep).
  uint32_t keep = 3;
  /// ChainOptions::compact_ratio: a whole link starts a new chain when the links it needs pass this many windows.
  double compact_ratio = 2.0;
  /// Take another user's segment or chain directory (ChainOptions::allow_other_owner, OpenOptions).
  bool allow_other_owner = false;
  /// Called on the journal's thread after each link or failed link; may be empty. It must not throw.
  std::function<void(const JournalLink&)> on_link;
};

/// What a journal did so far (Journal::stats).
struct JournalStats {
  uint64_t links = 0;          ///< links written by this Journal
  uint64_t failures = 0;       ///< links that failed (each retried at the next tick)
  uint64_t late = 0;           ///< links whose lag passed the bound
  uint64_t link_seq = 0;       ///< the newest durable link's number (0 before any)
  double max_lag_s = 0.0;      ///< the largest lag a link ended
  double estimate_s = 0.0;     ///< the schedule's estimate of one link's time
  double max_link_s = 0.0;     ///< the longest link's save
};

/// A buffer's journal (see the top of this file).
class Journal {
 public:
  /// Opens the segment `name` writable (its journal section is written; its steps are only read) and takes its
  /// journal lease: Errc::lease_held while another live journal holds it (the message names it), and for a second
  /// Journal of this process. Errc::invalid_argument for a bound out of range, keep 0 or compact_ratio below 1, and
  /// for a buffer with a cold tier (layout 1.11: checkpoint links do not hold its steps on disk yet).
  /// The chain directory is created at the first link.
  Journal(std::string_view name, std::string dir, JournalOptions options = {});
  /// The same for a mapping this process holds already (it must be writable: Errc::permission_denied if not).
  Journal(Buffer buffer, std::string dir, JournalOptions options = {});
  /// Stops the thread if it runs (writing a last link; errors are dropped) and releases the lease.
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  /// Runs the journal on a thread of its own until stop(). Errc::invalid_argument when it runs already.
  void start();
  /// Ends the thread: the link in progress completes, then a last link holds every step published before this call.
  /// Blocks until then (one link's time). Rethrows the error that ended the thread (a wrong directory: another
  /// user's, another saver's lock), if one did. No effect when not running.
  void stop();
  /// Whether the thread runs.
  bool running() const noexcept;
  /// Runs the journal on the calling thread until `stop_flag` is set (checked every few ms), then writes a last
  /// link and returns. Throws what ends it: an error of the directory that the next link would meet again (another
  /// user's, another saver's lock, a link number past kMaxLinkSeq); a link that fails otherwise (a full disk) is
  /// counted, reported through on_link, and tried again.
  void run(const std::atomic<bool>& stop_flag);
  /// Writes one link now on the calling thread and publishes it (not while the thread runs: invalid_argument).
  JournalLink write_link();

  /// What this Journal did so far; any thread, while it runs too.
  JournalStats stats() const;
  /// The mapping it journals (writable: its section is written).
  const Buffer& buffer() const noexcept;
  /// The chain directory.
  const std::string& dir() const noexcept;
  /// The bound, in seconds.
  double bound_s() const noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace shmreplay
