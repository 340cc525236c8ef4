// shmreplay/reanalyse.hpp: the reanalyse worker's view of a buffer created with a walk (CreateOptions::
// reanalyse_chunk; docs/design/reanalyse.md). A Reanalyser takes one of the walk's worker slots and asks for the
// next chunk of stored steps to reanalyse: an env's aligned steps [k C, (k + 1) C) as stored when handed out. The
// walk hands each chunk to one worker at a time and, whatever the order asked for, once per pass of the walk: a
// pass ends when every stored full chunk was completed in it, and the next begins. A worker recomputes the chunk's
// targets (and writes them back, e.g. with Sampler::update), then calls complete() with the target (network)
// version it used. A worker killed while it holds chunks loses them to the next worker that meets them (or takes
// its slot): they are handed again, in the same pass.
//
// Who calls it: reanalyse worker processes, one Reanalyser per worker (a process may hold several). Not thread-safe:
// one thread per Reanalyser at a time. Safe across processes: the walk's words are claimed by CAS in the segment.
#pragma once

#include <cstdint>
#include <optional>

#include "shmreplay/buffer.hpp"
#include "shmreplay/vocabulary.hpp"

namespace shmreplay {

/// One chunk handed to a worker: env `env`'s steps [first_step, end_step) (global step indices; first_step is
/// above chunk * C when writers had overwritten the chunk's oldest steps), its chunk index and the walk's pass it
/// was handed in. Writers may overwrite the oldest of its steps while the worker holds it; a write-back must refuse
/// those (Sampler::write_back does).
struct ReanalyseChunk {
  uint64_t env = 0;         ///< the env whose steps these are
  uint64_t first_step = 0;  ///< the chunk's first step still stored when it was handed out (a global step index)
  uint64_t end_step = 0;    ///< one past its last step: (k + 1) C
  uint64_t chunk = 0;  ///< the chunk index k: its steps are [k C, (k + 1) C) before the clip to what is stored
  uint64_t pass = 0;   ///< the walk's pass it was handed in (from 1)
  /// The buffer's checkpoint-load generation when it was handed out: pass it to Sampler::write_back with the
  /// chunk's steps, which refuses them when a checkpoint was loaded into the buffer since.
  uint64_t load_generation = 0;
  /// Steps of the chunk, end_step - first_step.
  uint64_t steps() const noexcept { return end_step - first_step; }
};

/// A reanalyse worker: one of the walk's worker slots (at most layout's kMaxWalkers, 64, at once).
class Reanalyser {
 public:
  /// Takes a free worker slot of `buffer`'s walk (or a dead worker's, whose chunks it hands out again first).
  /// Throws Error(invalid_argument) when the buffer has no walk, Error(lease_held) when 64 live workers hold every
  /// slot, and Error(read_only) for a read-only buffer. `buffer` must outlive the Reanalyser.
  explicit Reanalyser(Buffer& buffer);
  /// Takes over `other`'s worker slot and held chunks; `other` then holds nothing.
  Reanalyser(Reanalyser&& other) noexcept;
  /// Gives back what this one holds (as the destructor does), then takes over `other`'s slot and chunks.
  Reanalyser& operator=(Reanalyser&& other) noexcept;
  Reanalyser(const Reanalyser&) = delete;
  Reanalyser& operator=(const Reanalyser&) = delete;
  /// Gives back the chunks it holds (they are due again) and its worker slot.
  ~Reanalyser();

  /// The next due chunk in `order`, held by this worker until complete() or give_back(); nullopt when none is due
  /// now (every stored full chunk was completed in this pass while some are still held, or no chunk is full yet:
  /// the newest, still filling chunk of an env is handed only once all its C steps are published). Never blocks.
  /// O(stored chunks); largest_return O(stored steps). Throws Error(invalid_argument) for largest_return in a
  /// buffer without a reward field (CreateOptions::episodes), and from a forked child of the creating process.
  std::optional<ReanalyseChunk> try_next(ReanalyseOrder order = ReanalyseOrder::oldest_version);
  /// try_next, blocking until a chunk is due or `timeout_ms` passes (< 0: no limit); nullopt at the timeout. Sleeps
  /// on the walk's process-shared futex word, woken by what can make a chunk due: a writer's push call that filled a
  /// chunk, a completion or give-back (which may end a pass), the repair of a dead worker's claims; it also
  /// re-scans by itself every re-check period (50 ms; docs/design/waits.md), which is when it repairs a dead
  /// worker's claims that no one else met. The thread's InterruptCheck runs between slices.
  std::optional<ReanalyseChunk> next(ReanalyseOrder order, int64_t timeout_ms);
  /// Records that `chunk` was reanalysed with targets of version `target_version` and lets it go. Returns false
  /// when nothing was recorded: writers overwrote every step of the chunk meanwhile (counted as stale), or this
  /// worker no longer holds it. O(1).
  bool complete(const ReanalyseChunk& chunk, uint64_t target_version);
  /// Lets `chunk` go without recording it (it is due again, in the same pass). False when not held.
  bool give_back(const ReanalyseChunk& chunk);

  /// The worker slot this Reanalyser holds (0 to 63).
  uint64_t slot() const noexcept { return slot_; }
  /// The walk's pass in progress (from 1).
  uint64_t pass() const noexcept;
  /// The newest target version completed so far (nullopt before any).
  std::optional<uint64_t> newest_version() const noexcept;

 private:
  void check_process(const char* op) const;
  void release() noexcept;

  Buffer* buffer_ = nullptr;
  uint64_t slot_ = 0;
  uint64_t lease_ = 0;  // this process's lease word
  uint64_t pid_ = 0;    // the process that took the slot
};

}  // namespace shmreplay
