// lib/checkpoint/save_env.cpp: the copy of one env's window into a checkpoint while its writer pushes (save_env),
// the part of a save that reads the live segment's steps. A chain's link copies only the steps at or above the
// previous link's head (EnvCopyPlan), the ones below being in earlier links. Who calls it: save_checkpoint (save.cpp), once per env. It reads
// the segment the way a sampler does (detail::copy_records validates each chunk with the step seqlock) and writes
// nothing into it.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <optional>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "checkpoint/packed_records.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/storage/field_storage.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay::detail {
namespace {

// One env's copy: the run of consecutive steps [s, t) it has copied and validated, and how often it was spoilt.
// A chunk whose oldest steps were reclaimed before the copy reached them breaks the run, which restarts at the
// oldest intact step, and the copy follows the writer until the run is a full window ending at some head the env
// had (see the top of checkpoint.hpp), or (stacked fields) the env's whole view at some instant: a frames' bound
// raised into the run moves its start up instead of spoiling it (raise_start, run_is_view).
class WindowCopy {
 public:
  WindowCopy(const Buffer& b, uint64_t env, OutFile& out, uint64_t data_start, std::vector<std::byte>& staging,
             const RecordLayout& layout, Progress& progress, uint32_t max_rounds, const EnvCopyPlan& plan)
      : b_(b), env_(env), c_(segment_of(b).env_control(env)), cap_(b.capacity()), sb_(layout.bytes),
        chunk_(staging.size() / std::max<uint64_t>(sb_, 1)), out_(out), data_start_(data_start), staging_(staging),
        progress_(progress), max_rounds_(max_rounds), plan_(plan),
        stacked_(segment_of(b).has_stacks()), storages_(segment_of(b)),
        copy_(segment_of(b), storages_, layout.offsets, staging.data()) {
    if (layout.packed) packed_.emplace(segment_of(b), storages_, layout, staging.data());
  }

  SavedEnv run() {
    for (;;) {  // one attempt from a fresh snapshot
      // The counters, none of them from an update or a load in progress.
      const std::optional<EnvCounters> counters = read_counters_stable(segment_of(b_), c_);
      if (counters && attempt(*counters)) break;
      spoil();
    }
    drop_records_below(std::max(s_, skip_));
    if (packed_ && written_ == 0) packed_->clear();
    SavedEnv saved;
    saved.first_step = s_;
    saved.data_from = std::max(s_, skip_);
    saved.steps = t_ - saved.data_from;
    saved.update_seq = update_seq_;
    saved.claimed = claimed_out_;
    saved.online_start = std::min(online_, t_);
    saved.last_push_ns = c_.last_push_ns.load(std::memory_order_relaxed);
    saved.crc = crc_;
    if (packed_) saved.frame_bytes = packed_->write(out_, data_start_ + saved.steps * sb_, saved.frame_crc);
    return saved;
  }

 private:
  enum class Next { more, done, restart };

  // Copies from the snapshot until the run is a window (true), or the env was reset or reloaded (false).
  bool attempt(const EnvCounters& counters) {
    // A chain's link skips the steps below the previous link's head while no update or load touched the env since
    // that link (update_seq the same, the head not below): they are in the earlier links, unchanged. An update
    // after this snapshot leaves each skipped record as it was at the snapshot, as a copied record is as it was
    // when its chunk was validated: each record of a save is the step at some instant of the save.
    skip_ = plan_.skip_below > 0 && plan_.update_seq == counters.update_seq && counters.head >= plan_.skip_below
                ? plan_.skip_below
                : 0;
    update_seq_ = counters.update_seq;
    h_ = counters.head;
    h0_ = h_;
    online_ = counters.online_start;
    // The oldest step of the view: its slot not being reclaimed, and (stacked fields) its frames intact.
    s_ = std::min(std::max(counters.claimed > cap_ ? counters.claimed - cap_ : 0, counters.stacks_intact_from), h_);
    t_ = std::max(s_, std::min(skip_, h_));  // the skipped steps count as copied
    written_ = 0;
    crc_ = 0;
    claimed_out_ = 0;
    if (packed_) packed_->clear();
    for (;;) {
      const Next next = t_ < h_ && t_ - s_ < cap_ ? copy_chunk() : follow_writer();
      if (next != Next::more) return next == Next::done;
    }
  }

  // The run holds a full window, or every step the env had at the snapshot (which was not yet wrapped).
  bool window_complete() const noexcept { return t_ - s_ == cap_ || (s_ == 0 && t_ >= h0_); }

  // Copies the next chunk of [t, h) and appends its intact steps to the run.
  Next copy_chunk() {
    const uint64_t n = std::min({h_ - t_, chunk_, cap_ - (t_ - s_)});
    std::vector<std::size_t> mark;
    if (packed_) {
      packed_->reserve(n);
      mark = packed_->mark();
    }
    clear_storage_faults();
    const CopyResult r = copy_records(segment_of(b_), env_, t_, n, copier());
    if (r.outcome == CopyOutcome::ok) check_storage_faults(segment_of(b_), r.intact_from);  // corrupt: never saved
    if (r.outcome != CopyOutcome::ok && packed_) packed_->rollback(mark);
    if (r.outcome == CopyOutcome::raced) {
      spoil();
      return Next::more;
    }
    if (r.outcome == CopyOutcome::reset) return Next::restart;
    const uint64_t v = r.intact_from;
    uint64_t keep = 0;
    if (v > t_) {  // steps [t, v) were reclaimed before they were copied: the run restarts at v
      spoil();
      written_ = 0;
      crc_ = 0;
      // With compressed records the chunk's frames were copied from step t on (and a record overwritten meanwhile
      // stopped that copy): the run restarts at v with a fresh copy of v's frames, back to their key frame.
      if (v >= t_ + n || packed_) {
        s_ = t_ = v;
        if (packed_) packed_->clear();
        return Next::more;
      }
      keep = v - t_;
      s_ = v;
    }
    append(staging_.data() + keep * sb_, n - keep);
    t_ += n;
    // Loaded after the copy's validation (so at least the bound it checked): a bound inside the run drops its
    // oldest steps rather than waiting for a full window.
    if (stacked_) raise_start(c_.stacks_intact_from.load(std::memory_order_relaxed));
    if (window_complete()) {
      claimed_out_ = t_;  // the env had head = claimed = t, holding exactly [s, t)
      return Next::done;
    }
    if (s_ > 0 && t_ + 1 - s_ == cap_ && v == s_) {
      claimed_out_ = t_ + 1;  // at the validation claimed was t + 1: its writer was writing step t
      return Next::done;
    }
    return Next::more;
  }

  // Every published step up to h is copied: done if the run is a window, else follow the writer.
  Next follow_writer() {
    if (window_complete()) {
      claimed_out_ = t_;
      return Next::done;
    }
    const EnvCounters now = read_counters(c_);
    if (now.head < t_) return Next::restart;  // the env was reloaded
    raise_start(now.stacks_intact_from);
    if (now.head == t_) {
      if (t_ + 1 - s_ == cap_ && now.claimed == t_ + 1) {
        claimed_out_ = t_ + 1;  // its writer is writing step t (or died doing so)
        return Next::done;
      }
      if (run_is_view()) return Next::done;
      spoil();
    }
    h_ = now.head;
    return Next::more;
  }

  // Layout 1.6: an env whose oldest stored steps lost their frames (stacked fields) holds fewer steps than a window,
  // so its run may never be one: it is complete when its end is the env's view at some instant. The claim and the
  // frames' bound are loaded first, then the head; a head still at t says that the env held steps
  // [v, t), v = max(claimed - capacity, stacks_intact_from), when the bound was loaded (the head was t before the
  // copy and moves up only), and that those steps were intact then (a writer raises the bound before it overwrites
  // frames, and claims before it reclaims a slot), so the copies of [v, t) in the run are the env's steps at that
  // instant. A v above s (a writer raised the bound into the run while it was copied) drops the run's steps below v,
  // as a claim that passes the run's start does in copy_chunk: they are no longer part of any view, and a full
  // window never comes while the env loses steps. Without stacked fields this adds nothing to window_complete and
  // the rule above (the bound is 0, and a claim that passes s means t - s = capacity).
  bool run_is_view() {
    const uint64_t claimed = c_.claimed.load(std::memory_order_relaxed) & layout::kClaimMask;
    const uint64_t bound = settled_intact_from(segment_of(b_), c_);  // past a dead updater's torn step too
    // acquire fence: keeps the two loads above before the head's below (load order only; no store pairs with it)
    std::atomic_thread_fence(std::memory_order_acquire);
    if (c_.head.load(std::memory_order_relaxed) != t_) return false;
    const uint64_t v = std::max(claimed > cap_ ? claimed - cap_ : 0, bound);
    if (v < s_ || v > t_) return false;
    s_ = v;
    claimed_out_ = claimed;  // t, or t + 1 while its writer writes step t (the view is the same)
    return true;
  }

  // Layout 1.6: the env's stacks_intact_from was `bound` at some instant after the run's steps were copied. Steps
  // below it lost their frames, so no later view holds them: the run starts at the bound (its records below are
  // dropped when the copy is done, drop_records_below). A bound past t leaves the run to copy_chunk, which then
  // finds the steps it copies overwritten and restarts the run.
  void raise_start(uint64_t bound) noexcept {
    if (bound > s_ && bound <= t_) s_ = bound;
  }

  // The file holds the records of steps [t - written, t); drops those below `from`: the others move to the start of
  // the env's records (read back from the file, a chunk at a time, front to back, so that no chunk is overwritten
  // before it is read), and the checksum is taken again over the records that stay.
  void drop_records_below(uint64_t from) {
    const uint64_t file_from = t_ - written_;
    if (from <= file_from) return;
    const uint64_t drop = std::min(from - file_from, written_);
    const uint64_t keep = written_ - drop;
    crc_ = 0;
    for (uint64_t done = 0; done < keep;) {
      const uint64_t n = std::min(chunk_, keep - done);
      out_.read_at(data_start_ + (drop + done) * sb_, staging_.data(), n * sb_);
      if (packed_ && done == 0) packed_->trim_for(staging_.data());  // the frames step `from` needs, and newer
      out_.write_at(data_start_ + done * sb_, staging_.data(), n * sb_);
      crc_ = crc32(crc_, staging_.data(), n * sb_);
      done += n;
    }
    written_ = keep;
  }

  void append(const std::byte* records, uint64_t n) {
    out_.write_at(data_start_ + written_ * sb_, records, n * sb_);
    crc_ = crc32(crc_, records, n * sb_);
    written_ += n;
    progress_.add(n * sb_);
  }

  // The copy into the staging records: whole steps, or (format 2.3) compressed fields as their records.
  const StepCopier& copier() const noexcept {
    if (packed_) return *packed_;
    return copy_;
  }

  void spoil() {
    if (++spoilt_ > max_rounds_) {
      throw Error(Errc::contended,
                  fmt::format("cannot save env {} of '{}': its copy was spoilt {} times (its writer laps the "
                              "ring of {} steps faster than it can be copied, or the learner keeps rewriting it)",
                              env_, b_.name(), max_rounds_, cap_));
    }
    ::sched_yield();
  }

  const Buffer& b_;
  const uint64_t env_;
  const layout::EnvControl& c_;
  const uint64_t cap_;
  const uint64_t sb_;
  const uint64_t chunk_;
  OutFile& out_;
  const uint64_t data_start_;
  std::vector<std::byte>& staging_;
  Progress& progress_;
  const uint32_t max_rounds_;
  const EnvCopyPlan plan_;
  const bool stacked_;        // the buffer has stacked fields: the frames' bound may move the run's start
  const StorageSet storages_;  // where the fields' bytes live (detail/storage/field_storage.hpp)
  const RecordCopy copy_;      // copy_records' copy into the staging records (whole steps)
  std::optional<PackedSaveCopy> packed_;  // ... with compressed fields as their records (format 2.3)
  uint32_t spoilt_ = 0;
  uint64_t skip_ = 0;         // the attempt's steps below this are in earlier links (0: none skipped)
  uint64_t update_seq_ = 0;   // update_seq at the attempt's snapshot
  // The attempt's snapshot and run.
  uint64_t h_ = 0;            // the head the copy follows
  uint64_t h0_ = 0;           // the head at the snapshot
  uint64_t online_ = 0;       // online_start at the snapshot
  uint64_t s_ = 0;            // the run [s, t) (the file may hold records below s: drop_records_below)
  uint64_t t_ = 0;
  uint64_t written_ = 0;      // records of the run in the file
  uint32_t crc_ = 0;          // of those records
  uint64_t claimed_out_ = 0;  // the claim the env had when it held exactly the run
};

}  // namespace

SavedEnv save_env(const Buffer& b, uint64_t env, OutFile& out, uint64_t data_start, std::vector<std::byte>& staging,
                  const RecordLayout& layout, Progress& progress, uint32_t max_rounds, const EnvCopyPlan& plan) {
  return WindowCopy(b, env, out, data_start, staging, layout, progress, max_rounds, plan).run();
}

}  // namespace shmreplay::detail
