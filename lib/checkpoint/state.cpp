// lib/checkpoint/state.cpp: everything a checkpoint holds besides the records (format 2.0), both halves next to
// each other: per env the priority weights of its window and the episode records waiting in its queue
// (save_env_extras, load_env_extras), and for the buffer alpha, the running maximum priority, the rate limiter's
// settings, offset and counts, the learner's counters (the counter table's rows that name their place in a
// checkpoint, counters.hpp) and the stack settings (read_source_state, load_global_state), with the checks that
// refuse a target whose settings would change what they mean (state_mismatches). Who calls it: save.cpp (the save
// half), load.cpp (the load half). The top of include/shmreplay/checkpoint.hpp has the table of what a load does
// with each part.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "counters.hpp"
#include "detail/protocol/packed_frames.hpp"
#include "detail/protocol/episode_queue.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/protocol/walk.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay::detail {
namespace {

using checkpoint_format::EnvSection;
using checkpoint_format::EpisodeRecordBytes;

// The weight a step without a known priority gets in `seg`: the running maximum's, as a pushed step's.
double running_max_weight(const Segment& seg) noexcept {
  return priority_weight(max_priority(seg.global_control().max_priority), seg.priority_exponent());
}

// The waiting records of env's queue that describe episodes ended before `head`: [queue_head, queue_tail) read
// while the writer may push and the learner pop. A copy is kept when the learner popped nothing meanwhile (so
// no slot of it was reused); after a few tries the records still waiting at the end are kept.
struct QueueCopy {
  uint64_t queue_head = 0;
  uint64_t records_dropped = 0;
  std::vector<EpisodeRecordBytes> records;
};

QueueCopy copy_queue(const Segment& seg, uint64_t env, uint64_t head) {
  const layout::EpisodeControl& c = seg.episode_control(env);
  const layout::EpisodeRecordSlot* slots = seg.episode_queue(env);
  const uint64_t cap = seg.episode_queue_capacity();
  QueueCopy q;
  for (int attempt = 0;; ++attempt) {
    // acquire: pairs with take_records' release CAS of queue_head (the slots before it are free again).
    const uint64_t qh = c.queue_head.load(std::memory_order_acquire);
    // acquire: pairs with emit_record's release store of queue_tail: the slots before it are complete.
    const uint64_t qt = c.queue_tail.load(std::memory_order_acquire);
    q.records_dropped = c.records_dropped.load(std::memory_order_relaxed);
    q.queue_head = qh;
    q.records.clear();
    for (uint64_t i = qh; i < qt && qt - qh <= cap; ++i) {
      const layout::EpisodeRecordSlot& s = slots[i % cap];
      q.records.push_back({s.first_step.load(std::memory_order_relaxed), s.length.load(std::memory_order_relaxed),
                           s.episode_return.load(std::memory_order_relaxed), s.end.load(std::memory_order_relaxed)});
    }
    // acquire fence: keeps the slot loads above before the re-read of queue_head (load order only).
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t qh2 = c.queue_head.load(std::memory_order_relaxed);
    if (qh2 == qh || attempt >= 16) {
      if (qh2 > qh) {  // popped meanwhile: those are the learner's now; the rest was not reused (qt - qh2 < cap)
        const uint64_t gone = std::min<uint64_t>(qh2 - qh, q.records.size());
        q.records.erase(q.records.begin(), q.records.begin() + static_cast<std::ptrdiff_t>(gone));
        q.queue_head = qh + gone;
      }
      break;
    }
  }
  // Records are queued in the order their episodes end: keep those that ended at a step below the window's head.
  while (!q.records.empty() && q.records.back().first_step + q.records.back().length > head) q.records.pop_back();
  return q;
}

std::optional<double> exponent_of(const Buffer& b) {
  return b.has_priorities() ? std::optional<double>(b.priority_exponent()) : std::nullopt;
}

std::string alpha_text(const std::optional<double>& alpha) {
  return alpha ? fmt::format("alpha {}", *alpha) : std::string("no priorities");
}

std::string limit_text(const std::optional<RateLimit>& limit) {
  return limit ? limit->to_string() : std::string("no rate limiter");
}

}  // namespace

// -- the save's half --------------------------------------------------------------------------------------------

uint64_t save_env_extras(const Buffer& b, uint64_t env, const SavedEnv& saved, OutFile& out, uint64_t at,
                         EnvSection& section) {
  const Segment& seg = segment_of(b);
  uint32_t crc = 0;
  uint64_t bytes = 0;
  section.weights = 0;
  if (seg.has_priorities()) {
    // Each step's weight while its slot's leaf is tagged with it; a step whose slot a writer has since given to a
    // newer step (the window describes an earlier instant) gets the running maximum's, as a pushed step does.
    const PriorityTreeView tree = priority_tree_of(seg, env);
    const layout::EnvControl& c = seg.env_control(env);
    const double fallback = running_max_weight(seg);
    std::vector<float> weights;
    weights.reserve(static_cast<std::size_t>(saved.head() - saved.first_step));
    for (uint64_t step = saved.first_step; step < saved.head(); ++step) {
      const double w = step_weight(tree, c, step);
      weights.push_back(static_cast<float>(w < 0 ? fallback : w));
    }
    const uint64_t n = weights.size() * sizeof(float);
    out.write_at(at, weights.data(), n);
    crc = crc32(crc, weights.data(), n);
    bytes += n;
    section.weights = weights.size();
  }
  section.queue_head = section.queue_tail = section.records_dropped = section.queued = 0;
  if (seg.has_episodes()) {
    const QueueCopy q = copy_queue(seg, env, saved.head());
    const uint64_t n = q.records.size() * sizeof(EpisodeRecordBytes);
    out.write_at(at + bytes, q.records.data(), n);
    crc = crc32(crc, q.records.data(), n);
    bytes += n;
    section.queue_head = q.queue_head;
    section.queue_tail = q.queue_head + q.records.size();
    section.records_dropped = q.records_dropped;
    section.queued = q.records.size();
  }
  section.cap_counts = 0;
  if (seg.max_times_sampled() > 0) {
    const std::vector<uint8_t> counts = save_cap_counts(b, env, saved.first_step, saved.head());
    out.write_at(at + bytes, counts.data(), counts.size());
    crc = crc32(crc, counts.data(), counts.size());
    bytes += counts.size();
    section.cap_counts = counts.size();
  }
  bytes += save_sampling_extras(b, env, saved.first_step, saved.head(), out, at + bytes, crc, section);
  bytes += save_walk_extras(b, env, saved.first_step, saved.head(), out, at + bytes, crc, section);
  section.extra_crc = crc;
  return bytes;
}

uint64_t stack_restarts_of(const Segment& seg) noexcept {
  // frames = capacity + (depth - 1) x (1 + restarts), maybe one more; a compressed field's kPackedKeyEvery - 1 more
  // (detail/storage/packed_ring.cpp, packed_frames)
  if (seg.has_stacks() && seg.stacks()[0].depth >= 2) {
    const StackGeometry& s = seg.stacks()[0];
    return (s.frames - seg.capacity()) / (s.depth - 1) - 1;
  }
  for (const PackedGeometry& p : seg.packed()) {
    if (p.stack.depth < 2) continue;
    return (p.stack.frames - (kPackedKeyEvery - 1) - seg.capacity()) / (p.stack.depth - 1) - 1;
  }
  return 0;
}

// A ratio that gives each compressed field of `seg` at least its byte ring when a load creates a segment with it
// (packed_ring.cpp: a ring is max(least, frames' bytes / ratio) rounded down to 64 bytes): the smallest of the
// fields' ratios, a hair less, and at least 1. 0 without compressed fields.
double expected_compression_of(const Segment& seg) noexcept {
  double ratio = 0;
  for (const PackedGeometry& p : seg.packed()) {
    const double r = static_cast<double>(p.stack.frames * p.stack.frame_bytes) / static_cast<double>(p.ring_bytes);
    ratio = ratio == 0 ? r : std::min(ratio, r);
  }
  return ratio == 0 ? 0 : std::clamp(ratio * (1 - 1e-9), 1.0, 1e6);
}

void read_source_state(const Buffer& b, CheckpointInfo& info) {
  const Segment& seg = segment_of(b);
  const layout::GlobalControl& g = seg.global_control();
  info.stack_continuity = seg.stack_continuity();
  info.stack_restarts = stack_restarts_of(seg);
  info.expected_compression = expected_compression_of(seg);
  info.priority_exponent = exponent_of(b);
  info.max_priority = seg.has_priorities() ? max_priority(g.max_priority) : 1.0;
  const std::optional<LimiterSettings> settings = load_rate_limit(g);
  info.limiter.limit = settings ? std::optional<RateLimit>(settings->limit) : std::nullopt;
  info.limiter.error_offset = settings ? settings->error_offset : 0.0;
  info.limiter.samples = g.samples.load(std::memory_order_relaxed);
  info.limiter.changes = g.limiter_changes.load(std::memory_order_relaxed);
  info.limiter.last_sample_ns = g.last_sample_ns.load(std::memory_order_relaxed);
  info.limiter.learner_limited = g.learner_limited.load(std::memory_order_relaxed);
  info.limiter.writers_limited = g.writers_limited.load(std::memory_order_relaxed);
  info.limiter.writer_timeouts = g.writer_timeouts.load(std::memory_order_relaxed);
  save_learner_counters(learner_slot(seg, 0), info.learner);  // the counter table's rows a checkpoint holds
  info.learner.priority_updates = g.priority_updates.load(std::memory_order_relaxed);
  info.learner.priority_updates_dropped = g.priority_updates_dropped.load(std::memory_order_relaxed);
  // Layout 1.7: slots 1.. (slot 0's are the words above), each online start at most its env's saved head (a learner
  // may have reset its view past the instant an env's section describes).
  read_policy_state(b, info);
  read_sampling_state(b, info);
  info.max_learners = seg.max_learners();
  info.learner_slots.clear();
  for (uint64_t r = 1; r < seg.max_learners(); ++r) {
    const auto me = learner_slot(seg, r);
    CheckpointLearnerSlot slot;
    save_learner_counters(me, slot.counters);
    for (const CheckpointEnv& e : info.envs) {
      slot.online_starts.push_back(std::min(me.online_start(e.env).load(std::memory_order_relaxed), e.head));
    }
    info.learner_slots.push_back(std::move(slot));
  }
}

// -- the load's half --------------------------------------------------------------------------------------------

CreateOptions create_options_of(const CheckpointInfo& info, uint32_t mode) {
  CreateOptions create;
  create.mode = mode;
  create.max_learners = info.max_learners;
  create.max_times_sampled = info.max_times_sampled;
  create.consuming_queue = info.consuming_queue;
  create.initial_priority = info.initial_priority;
  create.sequence_priority_length = info.sequence_priority_length;
  create.reanalyse_chunk = info.reanalyse_chunk.value_or(0);
  if (info.episode_fields.any_flag()) {
    const auto name = [&](const std::optional<std::size_t>& i) { return i ? info.schema[*i].name : std::string(); };
    create.episodes = {name(info.episode_fields.done), name(info.episode_fields.terminated),
                       name(info.episode_fields.truncated), name(info.episode_fields.reward)};
    create.episode_queue_capacity = info.episode_queue_capacity;
  }
  if (info.episode_fields.policy_version) create.policy_version = info.schema[*info.episode_fields.policy_version].name;
  if (info.holds_state()) {
    create.priority_exponent = info.priority_exponent;
    create.rate_limit = info.limiter.limit;
    const bool stacked = std::any_of(info.schema.fields().begin(), info.schema.fields().end(),
                                     [](const Field& f) { return f.stacked(); });
    if (stacked) {
      create.stack_restarts = info.stack_restarts;
      create.stack_continuity = info.stack_continuity;
    }
    create.expected_compression = info.expected_compression;  // each field's ring at least the source's
  }
  return create;
}

std::vector<std::string> state_mismatches(const Buffer& target, const CheckpointInfo& info) {
  std::vector<std::string> out;
  if (!info.holds_state()) return out;  // a 1.0 file holds none of it: the notes say so
  const std::optional<double> alpha = exponent_of(target);
  if (alpha != info.priority_exponent) {
    out.push_back(fmt::format("priorities: the segment has {}, the checkpoint {}", alpha_text(alpha),
                              alpha_text(info.priority_exponent)));
  }
  if (target.rate_limit() != info.limiter.limit) {
    out.push_back(fmt::format("rate limiter: the segment has {}, the checkpoint {}", limit_text(target.rate_limit()),
                              limit_text(info.limiter.limit)));
  }
  if (target.max_times_sampled() != info.max_times_sampled) {
    out.push_back(fmt::format("sample cap: the segment has max_times_sampled {}, the checkpoint {}",
                              target.max_times_sampled(), info.max_times_sampled));
  }
  sampling_mismatches(target, info, out);
  if (target.max_learners() < info.max_learners) {
    out.push_back(fmt::format("learner slots: the segment has {}, the checkpoint {} (the slots past the segment's "
                              "would be lost)",
                              target.max_learners(), info.max_learners));
  }
  if (segment_of(target).has_stacks() && target.stack_continuity() != info.stack_continuity) {
    out.push_back(fmt::format("stack continuity: the segment's rule is {}, the checkpoint's {}",
                              to_string(target.stack_continuity()), to_string(info.stack_continuity)));
  }
  const uint64_t held = stack_restarts_of(segment_of(target));
  if (segment_of(target).has_stacks() && held < info.stack_restarts) {
    out.push_back(fmt::format("stack restart reserve: the segment holds {} restart{} per env, the checkpoint {} (the "
                              "saved steps whose frames do not fit the segment's rings would be left out)",
                              held, held == 1 ? "" : "s", info.stack_restarts));
  }
  return out;
}

namespace {

// Adds `text` to `notes` unless it is there (one note per kind of difference, however many envs show it).
void note_once(std::vector<std::string>& notes, const std::string& text) {
  if (std::find(notes.begin(), notes.end(), text) == notes.end()) notes.push_back(text);
}

// Env e's priority tree from the file's `weights` (converted to the segment's alpha; the running maximum for steps
// without one), or a note that the segment has no priorities for the file's.
void load_env_weights(Segment& seg, const CheckpointInfo& info, const CheckpointEnv& e,
                      const std::vector<float>& weights, std::vector<std::string>& notes) {
  if (seg.has_priorities()) {
    const PriorityTree tree = priority_tree_of(seg, e.env);
    const double alpha = seg.priority_exponent();
    // Steps without a weight from the file enter at the running maximum, as pushed steps do: the larger of the
    // target's and the file's (load_global_state stores the same).
    const double max_p = std::max(max_priority(seg.global_control().max_priority),
                                  info.priority_exponent ? info.max_priority : 0.0);
    const double fallback = priority_weight(max_p, alpha);
    const std::optional<double> file_alpha = info.priority_exponent;
    if (!file_alpha) {
      note_once(notes, info.holds_state()
                           ? "priorities: the checkpoint has none; every loaded step has the running maximum"
                           : "priorities: a format 1.0 checkpoint has none; every loaded step has the running maximum");
    } else if (*file_alpha != alpha) {
      note_once(notes, *file_alpha > 0
                           ? fmt::format("priorities: weights converted from alpha {} to alpha {}", *file_alpha, alpha)
                           : fmt::format("priorities: the checkpoint's alpha is 0 (every weight 1), so its "
                                         "priorities are unknown; every loaded step has the running maximum"));
    }
    for (uint64_t s = 0; s < tree.leaves; ++s) tree.words[tree.leaves + s].store(0);
    for (uint64_t step = e.first_step; step < e.head; ++step) {
      double w = fallback;
      if (file_alpha && step - e.first_step < weights.size()) {
        const double saved = weights[static_cast<std::size_t>(step - e.first_step)];
        if (*file_alpha == alpha) {
          w = saved;
        } else if (*file_alpha > 0) {  // w = p^a_file, so p^a_target = w^(a_target / a_file)
          w = saved == 0 ? 0.0 : std::clamp(std::pow(saved, alpha / *file_alpha), kMinWeight, kMaxWeight);
        }
      }
      tree.words[tree.leaves + step % tree.capacity].store(make_leaf(step, w));
    }
    rebuild(tree);
  } else if (info.priority_exponent) {
    note_once(notes, "priorities: the segment has none; the checkpoint's are left out");
  }
}

}  // namespace

void load_env_extras(Buffer& target, const InFile& in, const CheckpointInfo& info, const CheckpointEnv& e,
                     std::vector<std::string>& notes) {
  Segment& seg = segment_of(target);
  // The extras follow the records; the second read's checksum catches a file changed since it was verified.
  std::vector<float> weights(static_cast<std::size_t>(e.weights));
  std::vector<EpisodeRecordBytes> queued(static_cast<std::size_t>(e.queued));
  std::vector<uint8_t> counts(static_cast<std::size_t>(e.cap_counts));
  std::vector<uint8_t> fresh(static_cast<std::size_t>(e.fresh));
  std::vector<uint64_t> tickets(static_cast<std::size_t>(e.queue_tickets));
  std::vector<uint64_t> walk(static_cast<std::size_t>(e.walk_versions));
  uint64_t at = e.records_offset + e.steps * info.record_bytes + e.frame_bytes;
  uint32_t crc = 0;
  const auto read = [&](void* data, uint64_t n) {
    in.read_at(at, data, n);
    crc = crc32(crc, data, n);
    at += n;
  };
  read(weights.data(), weights.size() * sizeof(float));
  read(queued.data(), queued.size() * sizeof(EpisodeRecordBytes));
  read(counts.data(), counts.size());
  read(fresh.data(), fresh.size());
  read(tickets.data(), tickets.size() * sizeof(uint64_t));
  read(walk.data(), walk.size() * sizeof(uint64_t));
  if (info.holds_state() && crc != e.extra_crc) {
    throw Error(Errc::corrupt, fmt::format("checkpoint '{}' changed while it was loaded into '{}': env {}'s "
                                           "weights and episode records no longer match their checksum",
                                           info.path, target.name(), e.env));
  }

  load_env_weights(seg, info, e, weights, notes);
  load_cap_words(target, e, counts);
  load_sampling_extras(target, e, fresh, tickets);
  // (2.4) Each loaded full chunk's last target version, into the walk load_into reset (none: never reanalysed);
  // versions of another chunk length (allow_mismatch) would describe other chunks: left out.
  if (seg.reanalyse_chunk() != 0 && info.reanalyse_chunk == seg.reanalyse_chunk()) {
    walk_restore_versions(seg, e.env, e.first_step, e.head, walk);
  }

  if (seg.has_episodes() && info.holds_state()) {
    layout::EpisodeControl& c = seg.episode_control(e.env);
    layout::EpisodeRecordSlot* slots = seg.episode_queue(e.env);
    const uint64_t cap = seg.episode_queue_capacity();
    const uint64_t keep = std::min<uint64_t>(queued.size(), cap);
    if (keep < queued.size()) {
      note_once(notes, fmt::format("episode records: the segment's queues hold {} records, the checkpoint's up to "
                                   "{}; the oldest waiting records are counted as dropped",
                                   cap, info.episode_queue_capacity));
    }
    for (uint64_t k = 0; k < keep; ++k) {
      const EpisodeRecordBytes& r = queued[static_cast<std::size_t>(queued.size() - keep + k)];
      layout::EpisodeRecordSlot& s = slots[(e.queue_tail - keep + k) % cap];
      s.first_step.store(r.first_step, std::memory_order_relaxed);
      s.length.store(r.length, std::memory_order_relaxed);
      s.episode_return.store(r.return_bits, std::memory_order_relaxed);
      s.end.store(r.end, std::memory_order_relaxed);
    }
    // relaxed: the caller's UpdateSection and released leases publish these with the rest of the env.
    c.queue_head.store(e.queue_tail - keep, std::memory_order_relaxed);
    c.queue_tail.store(e.queue_tail, std::memory_order_relaxed);
    c.records_dropped.store(e.records_dropped + (queued.size() - keep), std::memory_order_relaxed);
    detail::reset_queue_accounts(seg, e.env);  // the loaded head: nothing in hand, nothing lost (not in a checkpoint)
  }
}

void load_global_state(Buffer& target, const CheckpointInfo& info, bool created, std::vector<std::string>& notes) {
  Segment& seg = segment_of(target);
  layout::GlobalControl& g = seg.global_control();
  if (!info.holds_state()) {
    notes.push_back(fmt::format("checkpoint '{}' has format {}.{}, which holds no priorities, rate limiter, learner "
                                "counters, waiting episode records or stack settings: {}",
                                info.path, info.format_major, info.format_minor,
                                created ? "the new segment has none of them"
                                        : "the segment keeps its own counters, limiter and episode records"));
    return;
  }
  if (seg.has_priorities() && info.priority_exponent) {
    const double m = created ? info.max_priority : std::max(info.max_priority, max_priority(g.max_priority));
    g.max_priority.store(bits_of(m), std::memory_order_relaxed);
  }
  load_learner_counters(info.learner, learner_slot(seg, 0));  // the counter table's rows a checkpoint holds
  g.priority_updates.store(info.learner.priority_updates, std::memory_order_relaxed);
  // Layout 1.7: learner slots 1.. as saved (the load holds every slot's lease: nobody reads them meanwhile); slots
  // the file does not have start as a new buffer's; slots the segment does not have are dropped (allowed mismatch).
  for (uint64_t r = 1; r < seg.max_learners(); ++r) {
    const auto me = learner_slot(seg, r);
    const CheckpointLearnerSlot none;
    const CheckpointLearnerSlot& slot = r - 1 < info.learner_slots.size() ? info.learner_slots[r - 1] : none;
    load_learner_counters(slot.counters, me);
    for (const CheckpointEnv& e : info.envs) {
      me.online_start(e.env).store(slot.online_starts.empty() ? 0 : slot.online_starts[e.env],
                                   std::memory_order_relaxed);
    }
  }
  // Layout 1.8: every slot's statistics (sample ages, limiter timeouts) start at zero: a checkpoint does not hold
  // them (format 2.1), and they describe the rows drawn since the data was loaded, as a restarted exporter's counters
  // do (docs/design/checkpoints.md).
  for (uint64_t r = 0; r < seg.max_learners(); ++r) clear_learner_stats(*seg.learner_stats(r));
  if (info.max_learners > seg.max_learners()) {
    notes.push_back(fmt::format("learner slots: the checkpoint has {}, the segment {}: the counters and online views "
                                "of slots {} to {} are not loaded",
                                info.max_learners, seg.max_learners(), seg.max_learners(), info.max_learners - 1));
  }
  g.priority_updates_dropped.store(info.learner.priority_updates_dropped, std::memory_order_relaxed);
  g.samples.store(info.limiter.samples, std::memory_order_relaxed);
  g.limiter_changes.store(info.limiter.changes, std::memory_order_relaxed);
  g.last_sample_ns.store(info.limiter.last_sample_ns, std::memory_order_relaxed);
  g.learner_limited.store(info.limiter.learner_limited, std::memory_order_relaxed);
  g.writers_limited.store(info.limiter.writers_limited, std::memory_order_relaxed);
  g.writer_timeouts.store(info.limiter.writer_timeouts, std::memory_order_relaxed);
  const std::optional<RateLimit> mine = target.rate_limit();
  bool stored = false;
  if (mine == info.limiter.limit) {  // the same settings: the error carries over exactly
    const std::optional<LimiterSettings> settings =
        mine ? std::optional<LimiterSettings>(LimiterSettings{*mine, info.limiter.error_offset}) : std::nullopt;
    stored = restore_rate_limit(g, settings, self_lease_word(), 5000);
  } else {  // allowed mismatch: the target keeps its settings; its error restarts at the middle of its bounds
    stored = store_rate_limit(g, mine, count_inserts(seg).inserts, self_lease_word(), 5000);
    notes.push_back(fmt::format("rate limiter: the segment keeps its settings ({}), not the checkpoint's ({}); the "
                                "checkpoint's counts carry over and the error restarts at the middle of the bounds",
                                limit_text(mine), limit_text(info.limiter.limit)));
  }
  if (!stored) {
    throw Error(Errc::timeout, fmt::format("cannot restore the rate limiter of '{}': another process ({}) has been "
                                           "changing it for 5 s",
                                           target.name(), holder_text(g.limiter_writer.load(), 0)));
  }
}

}  // namespace shmreplay::detail
