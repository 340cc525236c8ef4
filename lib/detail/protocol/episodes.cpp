#include "detail/protocol/episodes.hpp"

#include <algorithm>
#include <cstring>

#include "detail/protocol/seqlock.hpp"

namespace shmreplay::detail {

using layout::EpisodeControl;
using layout::EpisodeJournal;
using layout::kJournalWriting;

namespace {

// The one place that turns a step's flags into episode state, for the push (stage_step) and for rebuild_env after a
// load: stores the step's meta word (the first step of its episode, and whether and how it ends it) and moves `s`
// past the step. `count` adds an ended episode to episodes_completed: a push does; a rebuild keeps the count of
// records already accounted for, since a load queues none. Returns whether the step ends its episode.
bool advance(Segment& seg, uint64_t env, uint64_t step, const StepFlags& f, JournalState& s, bool count) noexcept {
  const bool ends = f.end != EpisodeEnd::none;
  const uint64_t meta = s.episode_start | (ends ? layout::kMetaEndsEpisode : 0) |
                        (f.end == EpisodeEnd::truncated ? layout::kMetaTruncated : 0);
  // Covered by the step seqlock like the step's bytes: stored after the claim's release fence, before head.
  seg.step_meta(env)[step % seg.capacity()].store(meta, std::memory_order_relaxed);
  s.running_return += f.reward;
  if (ends) {
    s.last_first_step = s.episode_start;
    s.last_length = step + 1 - s.episode_start;
    s.last_return = s.running_return;
    s.last_end = f.end;
    if (count) ++s.episodes_completed;
    s.episode_start = step + 1;
    s.running_return = 0.0;
  }
  return ends;
}

// The state a journal slot holds, copied out with relaxed loads (the caller ordered them).
JournalState load_slot(const EpisodeJournal& j) noexcept {
  JournalState s;
  s.for_head = j.for_head.load(std::memory_order_relaxed);
  s.episode_start = j.episode_start.load(std::memory_order_relaxed);
  s.running_return = f64_of(j.running_return.load(std::memory_order_relaxed));
  s.episodes_completed = j.episodes_completed.load(std::memory_order_relaxed);
  s.last_first_step = j.last_first_step.load(std::memory_order_relaxed);
  s.last_length = j.last_length.load(std::memory_order_relaxed);
  s.last_return = f64_of(j.last_return.load(std::memory_order_relaxed));
  s.last_end = static_cast<EpisodeEnd>(j.last_end.load(std::memory_order_relaxed) & 3);
  return s;
}

// Writes `s` into `j` as the state for head s.for_head, seqlock style, so a reader (the Inspector) never takes a
// half-written slot for a whole one, and a writer killed midway leaves for_head = kJournalWriting (never trusted).
void store_slot(EpisodeJournal& j, const JournalState& s) noexcept {
  j.for_head.store(kJournalWriting, std::memory_order_relaxed);
  // release fence: orders the marker before the field stores; pairs with read_journal's acquire fence.
  std::atomic_thread_fence(std::memory_order_release);
  j.episode_start.store(s.episode_start, std::memory_order_relaxed);
  j.running_return.store(bits_of(s.running_return), std::memory_order_relaxed);
  j.episodes_completed.store(s.episodes_completed, std::memory_order_relaxed);
  j.last_first_step.store(s.last_first_step, std::memory_order_relaxed);
  j.last_length.store(s.last_length, std::memory_order_relaxed);
  j.last_return.store(bits_of(s.last_return), std::memory_order_relaxed);
  j.last_end.store(static_cast<uint64_t>(s.last_end), std::memory_order_relaxed);
  // release: pairs with read_journal's acquire load of for_head (the fields above are complete).
  j.for_head.store(s.for_head, std::memory_order_release);
}

// The state for head `head` when the journal has none for it (only after a tool rewrote the env's counters, or a
// corrupted segment): the episode start follows from the meta word of step head - 1; the running return and the
// counters restart from what the queue shows.
JournalState derive_state(const Segment& seg, uint64_t env, uint64_t head) noexcept {
  JournalState s;
  s.for_head = head;
  if (head > 0) {
    const uint64_t m = load_meta(seg.step_meta(env), seg.capacity(), head - 1);
    s.episode_start = (m & layout::kMetaEndsEpisode) != 0 ? head : std::min(meta_start(m), head - 1);
  }
  const EpisodeControl& c = seg.episode_control(env);
  s.episodes_completed =
      c.queue_tail.load(std::memory_order_relaxed) + c.records_dropped.load(std::memory_order_relaxed);
  return s;
}

}  // namespace

EpisodeRoles::EpisodeRoles(const Segment& seg) {
  const EpisodeFieldIndices& f = seg.episode_fields();
  enabled = f.any_flag();
  if (!enabled) return;
  const Schema& schema = seg.schema();
  auto index = [](const std::optional<std::size_t>& i) { return i ? static_cast<int>(*i) : -1; };
  done = index(f.done);
  terminated = index(f.terminated);
  truncated = index(f.truncated);
  reward = index(f.reward);
  if (f.done) flag_bytes[0] = static_cast<std::size_t>(schema[*f.done].bytes());
  if (f.terminated) flag_bytes[1] = static_cast<std::size_t>(schema[*f.terminated].bytes());
  if (f.truncated) flag_bytes[2] = static_cast<std::size_t>(schema[*f.truncated].bytes());
  if (f.reward) reward_dtype = schema[*f.reward].dtype;
}

bool stage_step(Segment& seg, uint64_t env, uint64_t step, const StepFlags& flags) noexcept {
  EpisodeControl& c = seg.episode_control(env);
  const EpisodeJournal& cur = c.journal[step % 2];
  // The state for head = step. Relaxed: this writer wrote it, or recover_env checked it after an acquire load of
  // head when the lease was taken.
  JournalState s = cur.for_head.load(std::memory_order_relaxed) == step ? load_slot(cur) : derive_state(seg, env, step);
  const bool ends = advance(seg, env, step, flags, s, /*count=*/true);
  s.for_head = step + 1;
  store_slot(c.journal[(step + 1) % 2], s);
  return ends;
}

void emit_record(Segment& seg, uint64_t env, uint64_t head) noexcept {
  EpisodeControl& c = seg.episode_control(env);
  const JournalState s = load_slot(c.journal[head % 2]);  // written by this writer before its head store
  const uint64_t tail = c.queue_tail.load(std::memory_order_relaxed);  // only the env's writer stores it
  // acquire: pairs with the learner's release CAS of queue_head in take_records after it copied records out, so
  // its reads of a slot happen-before our overwrite of that slot.
  const uint64_t consumed = c.queue_head.load(std::memory_order_acquire);
  const uint64_t capacity = seg.episode_queue_capacity();
  if (tail - consumed >= capacity) {
    // Full: the writer never waits for the learner. One store, so a kill leaves it counted or not at all.
    c.records_dropped.store(c.records_dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return;
  }
  layout::EpisodeRecordSlot& slot = seg.episode_queue(env)[tail % capacity];
  slot.first_step.store(s.last_first_step, std::memory_order_relaxed);
  slot.length.store(s.last_length, std::memory_order_relaxed);
  slot.episode_return.store(bits_of(s.last_return), std::memory_order_relaxed);
  slot.end.store(static_cast<uint64_t>(s.last_end), std::memory_order_relaxed);
  // release: pairs with the learner's acquire load of queue_tail in take_records; the slot is complete.
  c.queue_tail.store(tail + 1, std::memory_order_release);
}

void recover_env(Segment& seg, uint64_t env) noexcept {
  // load_head's acquire pairs with the previous writer's release store of head (publish_step); its journal, meta and
  // queue stores that precede that store are visible here.
  const uint64_t head = load_head(seg.env_control(env));
  EpisodeControl& c = seg.episode_control(env);
  EpisodeJournal& j = c.journal[head % 2];
  if (j.for_head.load(std::memory_order_relaxed) != head) {
    store_slot(j, derive_state(seg, env, head));
    return;
  }
  const uint64_t completed = j.episodes_completed.load(std::memory_order_relaxed);
  const uint64_t accounted =
      c.queue_tail.load(std::memory_order_relaxed) + c.records_dropped.load(std::memory_order_relaxed);
  // The previous writer published an episode's last step and died before pushing its record: push it now.
  if (completed == accounted + 1) emit_record(seg, env, head);
}

void rebuild_env(Segment& seg, uint64_t env) noexcept {
  const EpisodeRoles roles(seg);
  if (!roles.enabled) return;
  const uint64_t cap = seg.capacity();
  const StepRange stored = view_range(seg.env_control(env), View::replay, cap);  // the steps to rebuild from
  const uint64_t first = stored.lo;
  const uint64_t head = stored.hi;
  const Schema& schema = seg.schema();
  EpisodeControl& c = seg.episode_control(env);
  JournalState s;
  s.episode_start = first;
  s.episodes_completed =
      c.queue_tail.load(std::memory_order_relaxed) + c.records_dropped.load(std::memory_order_relaxed);
  for (uint64_t step = first; step < head; ++step) {
    const uint64_t slot = env * cap + step % cap;
    const StepFlags f = read_step_flags(
        roles, [&](std::size_t field) { return seg.field_data(field) + slot * schema[field].bytes(); });
    advance(seg, env, step, f, s, /*count=*/false);
  }
  s.for_head = head;
  store_slot(c.journal[head % 2], s);
  JournalState other;
  other.for_head = kJournalWriting;
  store_slot(c.journal[(head + 1) % 2], other);
}

bool read_journal(const Segment& seg, uint64_t env, JournalState& out) noexcept {
  const EpisodeControl& c = seg.episode_control(env);
  for (int attempt = 0; attempt < 64; ++attempt) {
    const uint64_t head = load_head(seg.env_control(env));
    const EpisodeJournal& j = c.journal[head % 2];
    // acquire: pairs with store_slot's release store of for_head; the fields it covers are complete.
    const uint64_t f0 = j.for_head.load(std::memory_order_acquire);
    out = load_slot(j);
    // acquire fence: pairs with store_slot's release fence after the marker; a field read from a rewrite shows
    // in the re-read of for_head.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (f0 == head && j.for_head.load(std::memory_order_relaxed) == f0) {
      out.for_head = f0;
      return true;
    }
  }
  return false;
}

}  // namespace shmreplay::detail
