// lib/sampler_rounds.cpp: the sample rounds, and peek: how a Sampler reads rows out of the rings. A sample call's
// rows of one view are drawn in rounds: each round snapshots the views, has the planner (chosen by
// detail/sampling/planner_table.hpp) draw the rows still pending, chunk by chunk, and copies and validates each
// chunk (the gather: gather.hpp's copy loops, and the step seqlock's batched reader, BatchedReader in
// detail/protocol/seqlock.hpp); rows that failed validation wait for the next round. Peek is one such gather of
// each listed env's newest step.
//
// Who calls it: the sample calls (sample_rows: sampler.cpp) and the learner (peek). The hot path of a sample:
// no allocation once warmed up, no virtual call per row (sample_with is a template over the planner's type).
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <utility>

#include <fmt/format.h>

#include "detail/always_inline.hpp"
#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/stacks.hpp"
#include "detail/storage/gather.hpp"
#include "detail/sampling/planner.hpp"
#include "detail/sampling/planner_table.hpp"
#include "detail/sampling/ring_mod.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

using layout::EnvControl;
using sampler_parts::check_shortfall;
using sampler_parts::count_call;
using sampler_parts::kGatherBytes;
using sampler_parts::kGatherRows;
using sampler_parts::published_steps;
using sampler_parts::snapshot_view;

namespace {

// Env e's control words, for the batched reader (BatchedReader::add and validate). It holds the Sampler, not its
// Buffer, so that the buffer is loaded only when an env's words are (add: at the env's first row in a chunk).
SHMREPLAY_ALWAYS_INLINE auto control_of(const Sampler* s) noexcept {
  return [s](uint64_t e) -> const EnvControl& { return segment_of(s->buffer()).env_control(e); };
}

// Bytes a round copies from one snapshot before the remaining rows are drawn from a fresh one (see sample_with).
constexpr uint64_t kResnapshotBytes = uint64_t{1} << 20;

// Whether any env has published a step at or after the view's base (0, or online_start). False means the view
// is really empty; true with an empty snapshot means a slot was being rewritten at that instant (a ring of
// capacity 1), which a redraw gets past.
bool view_has_published(const Segment& b, const detail::LearnerSlotWords& me, View view) noexcept {
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    if (detail::has_published(b.env_control(e), view, me.online_start(e))) return true;
  }
  return false;
}

// Whether any env's writer is between its claim and its head store (the view is one step short meanwhile).
bool writes_in_flight(const Segment& b) noexcept {
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    if (detail::write_in_flight(b.env_control(e))) return true;
  }
  return false;
}

// Rows that fail validation round after round may lie in an env whose update lock a learner killed inside
// try_update still holds: its section stays open and every copy of the env fails, with or without a writer. The
// waiting reader repairs it (detail::repair_dead_updater: under the dead slot's lease, its torn step leaves the view),
// so a learner killed holding a lock never holds up another learner. Checked from the kRepairAfterRounds-th failed
// round on, once per env per round (a liveness check is a /proc read); `envs` is scratch.
constexpr uint32_t kRepairAfterRounds = 2;
void repair_dead_updaters(Segment& seg, std::span<const uint32_t> rows, const uint64_t* env_ids,
                          std::vector<uint64_t>& envs) {
  envs.clear();
  for (const uint32_t row : rows) {
    const uint64_t e = env_ids[row];
    if ((seg.env_control(e).update_seq.load(std::memory_order_relaxed) & 1) != 0) envs.push_back(e);
  }
  std::sort(envs.begin(), envs.end());
  envs.erase(std::unique(envs.begin(), envs.end()), envs.end());
  for (const uint64_t e : envs) (void)detail::repair_dead_updater(seg, seg.env_control(e));
}

// The part of a "contended" message that names a live learner holding the update lock of an env whose rows kept
// failing (its rewrites, not a writer, spoilt the copies), or "".
std::string updater_note(const Segment& seg, std::span<const uint32_t> rows, const uint64_t* env_ids) {
  for (const uint32_t row : rows) {
    const detail::UpdateLockHolder h = detail::update_lock_holder(seg, seg.env_control(env_ids[row]));
    if (h.held) {
      return fmt::format(" (or env {}'s update lock is held by learner slot {}, {}, which keeps rewriting it)",
                         env_ids[row], h.slot, h.dead ? "a dead learner this process could not repair" : "alive");
    }
  }
  return {};
}

}  // namespace

uint64_t sampler_parts::published_steps(const Segment& b, const detail::LearnerSlotWords& me, View view) noexcept {
  uint64_t total = 0;
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    const detail::StepRange r = detail::published_range(b.env_control(e), view, b.capacity(), me.online_start(e));
    total += r.hi - r.lo;
  }
  return total;
}

// The gather: a chunk's rows are added (drawn) first, then copied field by field with the rows ahead prefetched
// (gather.hpp), then validated seqlock-style by the batched reader (detail/protocol/seqlock.hpp, BatchedReader):
// one read_begin per env before the chunk's copies and one read_end per env after them (docs/design/seqlock.md,
// "Concurrency protocol", "The batched gather").

void Sampler::begin_chunk(std::size_t length) noexcept {
  Scratch& z = *scratch_;
  z.chunk_size = 0;
  z.chunk_whole = true;
  z.read.begin_chunk();
  z.length = length;
}

// Adds steps [start, start + steps) of `env`, whose first step is in ring slot `slot`, as batch row `row`. (No
// prefetch here: prefetching each row as it is drawn measured no faster than the gather's own prefetching a few
// rows ahead of each copy, and slower at 10^7 stored steps, where the early prefetches compete for the TLB.)
SHMREPLAY_ALWAYS_INLINE void Sampler::add_row(uint64_t env, uint64_t start, uint64_t slot, uint64_t steps,
                                               uint32_t row) noexcept {
  Scratch& z = *scratch_;
  // The row is built in a local and stored once, so that the stores into chunk (uint64_t words) do not make the
  // compiler reload the Scratch fields read after them.
  const detail::GatherRow r{start, env, env * z.capacity + slot, slot, steps, row};
  z.chunk_whole = z.chunk_whole & detail::whole_run(r, z.length, z.capacity);
  z.chunk[z.chunk_size++] = r;
  z.read.add(control_of(this), env, start, steps);  // the env's read_begin, at its first row in the chunk
}

// Copies the chunk's rows into `out` (each row's steps, zeros and mask 0 up to `length`), then validates them;
// the rows that fail (a writer reclaimed a copied slot, or the learner updated the env during the chunk) are
// appended to scratch's `failed`, in row order, and counted in the return value. The validation is per env
// (BatchedReader::validate); only a chunk with an env that fails looks at its rows one by one.
std::size_t Sampler::gather(std::size_t length, SampleBatch& out) noexcept {
  Scratch& z = *scratch_;
  const std::size_t n = z.chunk_size;
  if (n == 0) return 0;
  const uint64_t cap = buffer_->capacity();
  const detail::GatherRow* rows = z.chunk.data();
  const Segment& seg = segment_of(*buffer_);
  z.storages.gather(seg, out.field_ptr_.data(), length, rows, n, z.chunk_whole);
  detail::gather_mask(out.mask_, length, rows, n);
  const bool intact = z.read.validate(control_of(this), cap);
  z.stats.control_loads += 3 * z.read.chunk_envs();  // read_begin (add_row); claimed and update_seq (validate)
  std::size_t failed = 0;
  if (!intact) [[unlikely]] {
    for (std::size_t k = 0; k < n; ++k) {
      const detail::GatherRow& r = rows[k];
      if (r.steps > 0 && !z.read.row_intact(r.env, r.start, cap)) {
        z.failed.push_back(static_cast<uint32_t>(r.row));
        ++failed;
      }
    }
  }
  z.stats.rows_gathered += n;
  ++z.stats.gather_chunks;
  return failed;
}

// Draws rows [first_row, first_row + count) of `view` with the planner the options call for.
void Sampler::sample_rows(View view, std::size_t first_row, std::size_t count, std::size_t length, double power,
                          const SampleOptions& o, Rng& rng, SampleBatch& out) {
  if (o.min_steps > 0) {
    const uint64_t have = published_steps(segment_of(*buffer_), scratch_->slot, view);
    if (have < o.min_steps) {
      throw Error(Errc::empty_view,
                  fmt::format("cannot sample the {} view of '{}': it holds {} steps, fewer than min_steps = {}{}",
                              to_string(view), buffer_->name(), have, o.min_steps,
                              view == View::online ? " (counted since the last reset_online_queue())" : ""));
    }
  }
  Scratch& z = *scratch_;
  // The planner the table chooses (detail/sampling/planner_table.hpp), as its own type: sample_with is a template
  // over it, so that the per-row draw is a direct call.
  z.planners.with(o, length, [&](auto& planner) {
    sample_with(planner, view, first_row, count, length, power, o, rng, out);
  });
  if (view == View::online) {  // sample_with's last round: its snapshot's heads are the latest it drew under
    for (std::size_t e = 0; e < z.views.size(); ++e) z.online_seen[e] = z.views[e].hi;
    if (z.heads_reserved) {  // but no later than the heads before the call's reservation (sampler_parts.hpp)
      for (std::size_t e = 0; e < z.views.size(); ++e) {
        z.online_seen[e] = std::min(z.online_seen[e], z.reserved_heads[e]);
      }
    }
  }
}

// The rounds of one view's rows: each round snapshots the view, has the planner draw the rows still pending, and
// copies and validates them, keeping the ones that failed validation for the next round (counted as retries).
// A template over the (final) planner type, so that the per-row draw is a direct call.
template <class Plan>
void Sampler::sample_with(Plan& planner, View view, std::size_t first_row, std::size_t count, std::size_t length,
                          double power, const SampleOptions& o, Rng& rng, SampleBatch& out) {
  Scratch& z = *scratch_;
  const uint64_t cap = buffer_->capacity();
  const detail::RingMod ring_mod(cap);
  const detail::PlanOptions plan{o.episodes, std::min(o.period, cap)};  // a period of cap or more: first steps
  z.failed.reserve(count);  // no-op once warmed up
  z.redraw.reserve(count);
  if (z.ages.size() < first_row + count) z.ages.resize(first_row + count);  // grows to the largest batch only
  z.failed.resize(count);
  std::iota(z.failed.begin(), z.failed.end(), static_cast<uint32_t>(first_row));
  planner.begin_call();
  // A round draws rows from one snapshot of the heads. A snapshot goes stale while its rows are copied (writers
  // reclaim the oldest slots), so after kResnapshotBytes of copying the rest of the rows wait for a fresh one:
  // those are deferred, not retried. `round` counts the rounds that made no clean progress (rows overwritten
  // during their copy, or a view that was momentarily unusable); it is what max_retry_rounds limits.
  const uint64_t step_bytes = buffer_->schema().step_bytes();
  uint32_t round = 0;
  bool drew_nothing = false;    // the last round without progress had nothing to draw (no row was overwritten)
  bool shortfall_known = false;  // check_shortfall's answer would only repeat itself: no need to ask again
  while (!z.failed.empty()) {
    if (round > options_.max_retry_rounds) {  // give up, saying why the last rounds made no progress
      if (drew_nothing) {
        throw Error(Errc::contended,
                    fmt::format("cannot sample the {} view of '{}': {} snapshots in a row had no start to draw from "
                                "({})",
                                to_string(view), buffer_->name(), options_.max_retry_rounds,
                                o.prioritized ? "a write in progress hid every start, or the view's priority sums "
                                                "read 0 beside weights over 2^53 times larger"
                                              : "a write in progress hid every start"));
      }
      throw Error(Errc::contended,
                  fmt::format("cannot sample the {} view of '{}': {} row(s) were overwritten by writers during "
                              "the copy {} times in a row; the ring ({} steps per env) is too small for the "
                              "write rate{}",
                              to_string(view), buffer_->name(), z.failed.size(), options_.max_retry_rounds, cap,
                              updater_note(segment_of(*buffer_), z.failed, out.env_ids_)));
    }
    for (std::size_t e = 0; e < z.views.size(); ++e) {
      // At most the ring, which the slot computation below needs.
      z.views[e] = snapshot_view(segment_of(*buffer_), z.slot, e, view);
      z.hi_base[e] = z.views[e].hi - ring_mod(z.views[e].hi);  // so that a row's slot needs no division (below)
    }
    // Whether the round may go ahead; throws when the view cannot give a row, yields when that may be a write
    // in progress (the view is a step short while a slot is reclaimed).
    const auto usable = [&](bool found) {
      if (found) return true;
      if (!view_has_published(segment_of(*buffer_), z.slot, view)) {
        throw Error(Errc::empty_view, fmt::format("cannot sample the {} view of '{}': it holds no steps{}",
                                                  to_string(view), buffer_->name(),
                                                  view == View::online ? " (nothing was pushed since the last "
                                                                         "reset_online_queue())"
                                                                       : ""));
      }
      if (!shortfall_known) {  // e.g. all priorities 0, or a damaged tree (Planner::shortfall)
        shortfall_known =
            check_shortfall(planner, planner.shortfall(/*scan=*/true), segment_of(*buffer_), "sample", view);
      }
      // A write in progress hides the oldest step of its env; that can hide the only within start for good
      // unless the sequence needs the whole ring (L = capacity), where the next step brings one back.
      if (o.episodes == Episodes::within && (length < cap || !writes_in_flight(segment_of(*buffer_)))) {
        throw Error(Errc::empty_view,
                    fmt::format("cannot sample the {} view of '{}' with episodes = within: no start position (every "
                                "{} steps) has {} steps of one episode before the head",
                                to_string(view), buffer_->name(), o.period, length));
      }
      ::sched_yield();
      return false;
    };
    if (!usable(planner.prepare(z.views, length, power, plan))) {
      ++round;
      drew_nothing = true;
      continue;
    }
    std::swap(z.failed, z.redraw);
    z.failed.clear();
    std::size_t overwritten = 0;
    uint64_t copied = 0;
    bool stalled = false;
    std::size_t i = 0;
    // Chunks: draw up to kGatherRows rows (kGatherBytes), then copy and validate them together (gather). A row
    // has at most `length` steps, so the chunk's row count keeps it within its bytes (one row at least).
    const uint64_t row_bytes = std::max<uint64_t>(length * step_bytes, 1);
    while (i < z.redraw.size() && copied < kResnapshotBytes && !stalled) {
      begin_chunk(length);
      const uint64_t chunk_budget = std::min(kGatherBytes, kResnapshotBytes - copied);
      const std::size_t chunk_end =
          std::min({z.redraw.size(), i + kGatherRows, i + std::max<std::size_t>(chunk_budget / row_bytes, 1)});
      uint64_t chunk_steps = 0;
      while (i < chunk_end) {
        const std::optional<detail::Draw> d = planner.draw(rng);
        if (!d) {
          // Nothing to draw from in this snapshot (a write in progress): this row and the rest wait for the next
          // round's fresh snapshot (the chunk drawn so far is still copied).
          (void)usable(false);
          stalled = true;
          break;
        }
        const uint32_t row = z.redraw[i++];
        out.env_ids_[row] = d->env;
        out.starts_[row] = d->start;
        // The row's age (layout 1.8's statistics): how far behind this snapshot's head of its env it ends. A draw
        // lies in the view, so the end is at most the head; a redraw of the row overwrites the entry.
        z.ages[row] = z.views[d->env].hi - (d->start + d->steps);
        if (o.prioritized) out.weights_[row] = static_cast<float>(d->relative_probability);  // finish_weights
        // The start's slot without a division: a start in the view is in [hi - cap, hi) (the snapshot's views are
        // at most the ring), so it is at most one lap before the step in slot 0 of hi's lap.
        const uint64_t base = z.hi_base[d->env];
        const uint64_t slot = d->start >= base ? d->start - base : d->start + cap - base;
        add_row(d->env, d->start, slot, d->steps, row);
        chunk_steps += d->steps;
      }
      copied += chunk_steps * step_bytes;
      overwritten += gather(length, out);
    }
    z.failed.insert(z.failed.end(), z.redraw.begin() + static_cast<std::ptrdiff_t>(i), z.redraw.end());  // deferred
    if (overwritten > 0) {
      retries_ += overwritten;
      z.slot.retries.fetch_add(overwritten, std::memory_order_relaxed);
    }
    if (overwritten > 0 || stalled) {
      ++round;
      drew_nothing = overwritten == 0;
    }
    if (overwritten > 0 && round >= kRepairAfterRounds) {
      repair_dead_updaters(segment_of(*buffer_), z.failed, out.env_ids_, z.update_envs);
    }
  }
}

// The newest step of each listed env: one gather of every row (its slot from a fresh head per row); the rows whose
// newest step was overwritten during it are read again, up to max_retry_rounds times.
void Sampler::peek(std::span<const uint64_t> env_ids, SampleBatch& out) {
  lease_.check_process("peek into");
  if (env_ids.empty()) {
    throw Error(Errc::invalid_argument, fmt::format("cannot peek into '{}': the list of env ids is empty",
                                                    buffer_->name()));
  }
  out.prepare(buffer_->schema(), env_ids.size(), 1);
  out.episode_fields_ = buffer_->episode_fields();
  // One gather of every row; the rows whose newest step was overwritten during it are read again.
  Scratch& z = *scratch_;
  const uint64_t cap = buffer_->capacity();
  z.redraw.clear();
  for (std::size_t row = 0; row < env_ids.size(); ++row) {
    // each id read once into the batch, checked as read, and used from there: another thread may change the
    // caller's array meanwhile
    const uint64_t e = env_ids[row];
    detail::check_env_id(segment_of(*buffer_), e, "peek at");
    out.env_ids_[row] = e;
    z.redraw.push_back(static_cast<uint32_t>(row));
  }
  if (z.chunk.size() < z.redraw.size()) z.chunk.resize(z.redraw.size());  // grows only
  for (uint32_t round = 0;; ++round) {
    begin_chunk(1);
    for (const uint32_t row : z.redraw) {
      const uint64_t e = out.env_ids_[row];
      const uint64_t head = detail::load_head(segment_of(*buffer_).env_control(e));
      const uint64_t start = head == 0 ? 0 : head - 1;
      out.starts_[row] = start;
      add_row(e, start, start % cap, head == 0 ? 0 : 1, row);
    }
    z.failed.clear();
    if (gather(1, out) == 0) break;
    if (round >= options_.max_retry_rounds) {
      throw Error(Errc::contended, fmt::format("cannot peek at env {} of '{}': its newest step was overwritten "
                                               "during the copy {} times in a row{}",
                                               env_ids[z.failed.front()], buffer_->name(), round + 1,
                                               updater_note(segment_of(*buffer_), z.failed, out.env_ids_)));
    }
    retries_ += z.failed.size();
    z.slot.retries.fetch_add(z.failed.size(), std::memory_order_relaxed);
    if (round + 1 >= kRepairAfterRounds) {
      repair_dead_updaters(segment_of(*buffer_), z.failed, out.env_ids_, z.update_envs);
    }
    std::swap(z.redraw, z.failed);
  }
  z.ages.assign(env_ids.size(), 0);  // each row is its env's newest step: age 0 (grows to the largest call only)
  count_call(segment_of(*buffer_), scratch_->slot, {z.ages.data(), env_ids.size()}, /*sample=*/false);
}

}  // namespace shmreplay
