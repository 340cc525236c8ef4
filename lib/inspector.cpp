#include "shmreplay/inspector.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "counters.hpp"
#include "detail/protocol/policy.hpp"
#include "detail/os/file.hpp"
#include "detail/os/owner.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/episode_queue.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/journal.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/cold_seal.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/storage/field_storage.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {

std::string_view to_string(OwnerState state) noexcept {
  switch (state) {
    case OwnerState::none: return "none";
    case OwnerState::alive: return "alive";
    case OwnerState::dead: return "dead";
  }
  return "?";
}

namespace {

OpenOptions read_only(OpenOptions options) {
  options.read_only = true;
  return options;
}

// Env `e`'s state and counters; `alive` caches lease holders' liveness (each owner's /proc entry is read once).
EnvInfo env_info(const Buffer& b, uint64_t e, std::map<uint64_t, bool>& alive, SegmentInfo& s,
                 const detail::StorageSet& storages) {
  const Segment& seg = segment_of(b);
  const layout::EnvControl& c = seg.env_control(e);
  EnvInfo i;
  i.env = e;
  // The same views as the Sampler's (each read is its own snapshot, which is fine for display).
  detail::EnvReading r{seg, e, c, detail::view_range(c, View::replay, b.capacity()),
                       detail::view_range(c, View::online, b.capacity()), 0, {}, {}, i, storages};
  const detail::UpdateLockHolder lock = detail::update_lock_holder(seg, c);
  i.update_lock = !lock.held ? OwnerState::none : lock.dead ? OwnerState::dead : OwnerState::alive;
  i.update_lock_slot = lock.slot;
  const auto holder_alive = [&](uint64_t lease) {
    auto [it, fresh] = alive.try_emplace(lease, false);
    if (fresh) it->second = detail::lease_holder_alive(lease);
    return it->second;
  };
  // Acquire pairs with the release of the compare-and-swap that took the lease: the lease's details are set.
  r.lease = c.lease.load(std::memory_order_acquire);
  if (r.lease != 0) {
    i.owner_pid = layout::owner_pid(r.lease);
    i.owner_start_ticks = c.owner_start_ticks.load(std::memory_order_relaxed);
    i.owner = holder_alive(r.lease) ? OwnerState::alive : OwnerState::dead;
  }
  if (b.has_episodes()) {  // one consistent read of the writer's journal, one look at the record queue
    detail::JournalState j;
    if (detail::read_journal(seg, e, j)) r.journal = j;
    r.queue = detail::queue_accounts(seg, e, holder_alive);
    i.last_episode_length = r.journal.last_length;
    i.last_episode_return = r.journal.last_return;
    i.last_episode_end = r.journal.last_end;
  }
  detail::fill_env_counters(r, i, s);  // the counter table's env rows
  if (b.has_priorities()) {
    i.priority_total = detail::range_weight(detail::priority_tree_of(seg, e), r.replay.lo, r.replay.hi);
    s.priority_total += i.priority_total;
  }
  return i;
}

// Learner slot `slot`'s state and counters (layout 1.7).
LearnerInfo learner_info(const Segment& seg, uint64_t slot) {
  const detail::LearnerSlotReadWords me = detail::learner_slot(seg, slot);
  LearnerInfo l;
  l.slot = slot;
  // Acquire pairs with the release of the compare-and-swap that took the slot's lease.
  const uint64_t lease = me.lease.lease.load(std::memory_order_acquire);
  if (lease != 0) {
    l.pid = layout::owner_pid(lease);
    l.start_ticks = me.lease.start_ticks.load(std::memory_order_relaxed);
    l.state = detail::lease_holder_alive(lease) ? OwnerState::alive : OwnerState::dead;
  }
  // Layout 1.8: the buckets first, loaded one by one while the learner may add to them; the age_rows row raises the
  // count to their sum so that the histogram read is always whole (cumulative buckets never pass the count).
  for (uint32_t k = 0; k < layout::kAgeBuckets; ++k) {
    l.age_buckets[k] = me.stats.age_buckets[k].load(std::memory_order_relaxed);
  }
  if (seg.max_times_sampled() != 0) {  // layout 1.11's sample caps: the slot's counters
    const layout::CapLearner& caps = seg.cap_learner(slot);
    l.cap_claimed = caps.claimed.load(std::memory_order_relaxed);
    l.cap_rejected = caps.rejected.load(std::memory_order_relaxed);
    l.cap_retired = caps.retired.load(std::memory_order_relaxed);
  }
  if (seg.consuming_queue()) {  // layout 1.11's consuming queue: the slot's counters
    const layout::QueueLearner& q = seg.queue_learner(slot);
    l.queue_delivered = q.delivered.load(std::memory_order_relaxed);
    l.queue_refused = q.refused.load(std::memory_order_relaxed);
    l.queue_waits = q.waits.load(std::memory_order_relaxed);
    l.queue_returned = q.returned.load(std::memory_order_relaxed);
  }
  detail::fill_learner_counters({me, lease, l}, l);  // the counter table's learner rows
  return l;
}

// Every learner together (SegmentInfo::learner): the first slot held by a live learner (else the first held slot,
// else none), with the counters summed over the slots.
LearnerInfo every_learner(const std::vector<LearnerInfo>& slots, const layout::GlobalControl& g) {
  const auto named = std::find_if(slots.begin(), slots.end(),
                                  [](const LearnerInfo& l) { return l.state == OwnerState::alive; });
  const auto held = std::find_if(slots.begin(), slots.end(),
                                 [](const LearnerInfo& l) { return l.state != OwnerState::none; });
  LearnerInfo all = named != slots.end() ? *named : held != slots.end() ? *held : LearnerInfo{};
  detail::sum_learner_counters(slots, all);
  all.age_buckets = {};
  for (const LearnerInfo& l : slots) {
    for (uint32_t k = 0; k < layout::kAgeBuckets; ++k) all.age_buckets[k] += l.age_buckets[k];
  }
  all.waiters = g.waiters.load(std::memory_order_relaxed);  // every slot's sleepers, in one word
  if (const auto k = counter_index(CounterScope::learner, "waiters")) all.counters[*k] = all.waiters;
  return all;
}

// The compressed fields (layout 1.10): geometry, and their writers' counters summed over the envs.
WalkInfo walk_info(const Segment& seg) {
  WalkInfo w;
  w.chunk_steps = seg.reanalyse_chunk();
  if (w.chunk_steps == 0) return w;
  const layout::WalkControl& c = seg.walk_control();
  w.pass = c.pass.load(std::memory_order_relaxed);
  const uint64_t newest = c.newest_version.load(std::memory_order_relaxed);
  if (newest != 0) w.newest_version = newest - 1;
  w.repairs = c.repairs.load(std::memory_order_relaxed);
  for (uint64_t s = 0; s < layout::kMaxWalkers; ++s) {
    const uint64_t lease = seg.walk_worker(s).lease.load(std::memory_order_relaxed);
    if (lease != 0 && detail::lease_holder_alive(lease)) ++w.workers;
  }
  return w;
}

// The journal section (layout 1.11): the lease's state and the newest link; pending_steps is summed by snapshot().
JournalInfo journal_info(const Segment& seg) {
  const detail::JournalReading r = detail::read_journal(seg);
  JournalInfo j;
  if (r.lease != 0) {
    j.state = detail::lease_holder_alive(r.lease) ? OwnerState::alive : OwnerState::dead;
    j.pid = layout::owner_pid(r.lease);
    j.since_ns = r.since_ns;
  }
  j.bound_s = static_cast<double>(r.bound_ns) * 1e-9;
  j.link_seq = r.link_seq;
  j.durable_ns = r.durable_ns;
  j.done_ns = r.done_ns;
  j.link_ns = r.link_ns;
  j.max_lag_ns = r.max_lag_ns;
  j.links = r.links;
  j.failures = r.failures;
  j.late_links = r.bound_misses;
  j.takeovers = r.takeovers;
  return j;
}

std::vector<CompressedFieldInfo> compressed_fields(const Segment& seg) {
  std::vector<CompressedFieldInfo> out;
  for (std::size_t p = 0; p < seg.packed().size(); ++p) {
    const PackedGeometry& g = seg.packed()[p];
    CompressedFieldInfo f{g.stack.field, g.codec, g.level, g.stack.depth, g.stack.frame_bytes, g.ring_bytes};
    for (uint64_t e = 0; e < seg.num_envs(); ++e) {
      const layout::PackedEnvControl& c = seg.packed_control(p, e);
      f.frames += c.frames.load(std::memory_order_relaxed);  // relaxed: informational counters
      f.record_bytes += c.record_bytes.load(std::memory_order_relaxed);
      f.raw_frames += c.raw_frames.load(std::memory_order_relaxed);
      f.budget_lost += c.budget_lost.load(std::memory_order_relaxed);
    }
    out.push_back(f);
  }
  return out;
}

}  // namespace

double JournalInfo::lag_s(uint64_t now_ns) const noexcept {
  if (pending_steps == 0) return 0.0;
  const uint64_t from = durable_ns != 0 ? durable_ns : since_ns;
  return from == 0 || now_ns <= from ? 0.0 : static_cast<double>(now_ns - from) * 1e-9;
}

double CompressedFieldInfo::ratio() const noexcept {
  return record_bytes == 0 ? 0.0 : static_cast<double>(frames * frame_bytes) / static_cast<double>(record_bytes);
}

PolicyInfo policy_info(const Buffer& b) {
  const layout::PolicyControl& p = segment_of(b).policy_control();
  const detail::PolicyWindow w = detail::load_policy_window(p);
  PolicyInfo out;
  if (const auto f = b.episode_fields().policy_version) out.field = b.schema()[*f].name;
  out.version = w.version;
  if (w.on()) out.max_staleness = w.max_staleness;
  out.publishes = p.publishes.load(std::memory_order_relaxed);
  out.writers_held = p.writers_held.load(std::memory_order_relaxed);
  out.writer_timeouts = p.writer_timeouts.load(std::memory_order_relaxed);
  out.learner_paced = p.learner_paced.load(std::memory_order_relaxed);
  out.learner_pace_timeouts = p.learner_pace_timeouts.load(std::memory_order_relaxed);
  return out;
}

bool counter_applies(const Counter& row, const SegmentInfo& info) noexcept {
  switch (row.presence) {
    case CounterPresence::episodes: return info.episode_queue_capacity > 0;
    case CounterPresence::compressed: return !info.compressed.empty();
    case CounterPresence::policy: return !info.policy.field.empty();
    case CounterPresence::caps: return info.max_times_sampled != 0;
    case CounterPresence::queue: return info.consuming_queue;
    case CounterPresence::walk: return info.walk.chunk_steps != 0;
    case CounterPresence::journal: return info.journal.present();
    default: return true;
  }
}

double stored_bytes_per_step(const SegmentInfo& info) noexcept {
  return info.replay_steps == 0 ? 0.0
                                : static_cast<double>(info.stored_bytes) / static_cast<double>(info.replay_steps);
}

Inspector::Inspector(std::string_view name, OpenOptions options)
    : buffer_(Buffer::open(name, read_only(std::move(options)))) {}

namespace {

// The cold tier's steps below each env's ring view (the ring's steps are the env's replay steps), and its files.
ColdInfo cold_info(const Segment& seg) {
  ColdInfo c;
  c.capacity = seg.cold_capacity();
  if (c.capacity == 0) return c;
  const layout::ColdControl& cc = seg.cold_control();
  c.dir.assign(reinterpret_cast<const char*>(cc.dir), std::min<uint64_t>(cc.dir_bytes, layout::kColdDirBytes - 1));
  c.file_bytes = seg.num_envs() * (layout::kColdRecordsOffset + c.capacity * seg.cold_record_bytes());
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    const detail::StepRange ring = detail::view_range(seg.env_control(e), View::replay, seg.capacity());
    const uint64_t lo = detail::cold_intact_from(detail::cold_read_end(seg.cold_env(e)), c.capacity);
    const uint64_t hi = std::min(detail::cold_sealed(seg.cold_env(e)), ring.lo);
    c.steps += hi > lo ? hi - lo : 0;
  }
  return c;
}

}  // namespace

SegmentInfo Inspector::snapshot() const {
  const Buffer& b = buffer_;
  const auto& h = segment_of(b).header();
  SegmentInfo s;
  s.name = b.name();
  s.path = b.path();
  s.layout_major = h.layout_major;
  s.layout_minor = h.layout_minor;
  s.num_envs = b.num_envs();
  s.capacity = b.capacity();
  s.step_bytes = b.schema().step_bytes();
  s.total_bytes = b.total_bytes();
  s.stacks = segment_of(b).stacks();
  s.stack_continuity = segment_of(b).stack_continuity();
  s.data_bytes = stored_data_bytes(b);
  s.schema = b.schema();
  s.owner_uid = b.owner_uid();
  s.owner_name = detail::user_name(b.owner_uid()).value_or("");
  s.creator_pid = h.creator_pid;
  s.creator_alive = detail::process_alive(h.creator_pid, h.creator_start_ticks);
  s.creation_time_ns = h.creation_time_ns;
  s.episode_fields = b.episode_fields();
  s.episode_queue_capacity = b.episode_queue_capacity();
  s.max_times_sampled = b.max_times_sampled();
  s.consuming_queue = b.consuming_queue();
  s.walk = walk_info(segment_of(b));
  s.cold = cold_info(segment_of(b));
  s.journal = journal_info(segment_of(b));  // before the envs: their journal rows read the heads after the link

  std::map<uint64_t, bool> alive;  // lease word -> liveness, so each owner's /proc entry is read once
  s.envs.reserve(b.num_envs());
  const detail::StorageSet storages(segment_of(b));
  for (uint64_t e = 0; e < b.num_envs(); ++e) s.envs.push_back(env_info(b, e, alive, s, storages));
  s.compressed = compressed_fields(segment_of(b));
  if (const auto k = counter_index(CounterScope::env, "journal_pending_steps")) {
    for (const EnvInfo& e : s.envs) s.journal.pending_steps += e.counters[*k];
  }
  s.live_writers = static_cast<uint64_t>(std::count_if(alive.begin(), alive.end(), [](const auto& kv) { return kv.second; }));

  const layout::GlobalControl& g = segment_of(b).global_control();
  if (b.has_priorities()) {
    s.priority_exponent = b.priority_exponent();
    s.initial_priority = b.initial_priority();
    s.sequence_priority_length = b.sequence_priority_length();
    s.max_priority = detail::max_priority(g.max_priority);
    s.priority_updates = g.priority_updates.load(std::memory_order_relaxed);
    s.priority_updates_dropped = g.priority_updates_dropped.load(std::memory_order_relaxed);
  }
  s.rate_limit = b.rate_limit_state();
  s.policy = policy_info(b);
  for (uint64_t slot = 0; slot < segment_of(b).max_learners(); ++slot) {
    s.learners.push_back(learner_info(segment_of(b), slot));
    s.live_learners += s.learners.back().state == OwnerState::alive ? 1u : 0u;
  }
  s.learner = every_learner(s.learners, g);
  return s;
}

std::span<const std::byte> StepRecords::field(std::size_t index, std::size_t field) const noexcept {
  const uint64_t begin = field_offsets[field];
  const uint64_t end = field + 1 < field_offsets.size() ? field_offsets[field + 1] : record_bytes;
  return {bytes.data() + index * record_bytes + begin, static_cast<std::size_t>(end - begin)};
}

StepRecords Inspector::read_steps(uint64_t env, uint64_t first_step, uint64_t count) const {
  return shmreplay::read_steps(buffer_, env, first_step, count);
}

uint64_t stored_data_bytes(const Buffer& b) noexcept {
  uint64_t bytes = 0;
  for (const Field& f : b.schema().fields()) {
    if (!f.stacked() && !f.compressed()) bytes += b.num_envs() * b.capacity() * f.bytes();
  }
  for (const PackedGeometry& g : segment_of(b).packed()) {  // layout 1.10: counters, descriptors, rings, index words
    bytes += b.num_envs() * (sizeof(layout::PackedEnvControl) + g.stack.frames * sizeof(layout::PackedFrameDesc) +
                             g.ring_bytes + b.capacity() * sizeof(uint64_t));
  }
  for (const StackGeometry& st : segment_of(b).stacks()) {  // layout 1.6: the frame rings and the frame-index words
    bytes += b.num_envs() * (st.frames * st.frame_bytes + b.capacity() * sizeof(uint64_t));
  }
  return bytes;
}

namespace {

// A tiered buffer's steps [first_step, end) below `out`'s ring steps (layout 1.11), read from the cold tier under the
// cold seqlock (detail/protocol/cold_seal.hpp) and put before them. The ring's read came first: the steps it lost to
// writers meanwhile were sealed before their slots were reclaimed, so the two runs meet. Returns false when the cold
// tier does not yet hold the steps below the ring's run (a stale look): the caller reads again.
bool prepend_cold_steps(const Segment& seg, uint64_t env, uint64_t first_step, uint64_t end, StepRecords& out) {
  const uint64_t cold_cap = seg.cold_capacity();
  const layout::ColdEnv& ce = seg.cold_env(env);
  const uint64_t hi = std::min(end, out.first_step);
  const uint64_t lo = std::max(first_step, detail::cold_intact_from(detail::cold_read_end(ce), cold_cap));
  if (lo >= hi) return true;
  if (detail::cold_sealed(ce) < hi) return false;
  std::vector<std::byte> cold(static_cast<std::size_t>((hi - lo) * out.record_bytes));
  for (std::size_t f = 0; f < out.field_offsets.size(); ++f) {  // the files are column-major: scatter into records
    const uint64_t bytes = seg.schema()[f].bytes();
    const std::byte* column = seg.cold_column(env, f);
    for (uint64_t t = lo; t < hi; ++t) {
      std::memcpy(cold.data() + (t - lo) * out.record_bytes + out.field_offsets[f], column + (t % cold_cap) * bytes,
                  bytes);
    }
  }
  detail::end_copies();  // the acquire fence before the cold claim is read again
  const uint64_t keep_from = std::clamp(detail::cold_intact_from(detail::cold_read_end(ce), cold_cap), lo, hi);
  cold.erase(cold.begin(), cold.begin() + static_cast<std::ptrdiff_t>((keep_from - lo) * out.record_bytes));
  if (keep_from == hi) return true;  // every cold step was reused meanwhile
  const uint64_t ring_count = hi == out.first_step ? out.count : 0;  // 0: the ring's steps all lie past `end`
  if (ring_count == 0) out.bytes.clear();
  out.bytes.insert(out.bytes.begin(), cold.begin(), cold.end());
  out.count = ring_count + (hi - keep_from);
  out.first_step = keep_from;
  return true;
}

StepRecords read_ring_steps(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t count);

}  // namespace

StepRecords read_steps(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t count) {
  const Segment& seg = segment_of(b);
  for (int round = 0;; ++round) {
    StepRecords out = read_ring_steps(b, env, first_step, count);
    if (seg.cold_capacity() == 0) return out;
    const uint64_t end = count > UINT64_MAX - first_step ? UINT64_MAX : first_step + count;
    if (prepend_cold_steps(seg, env, first_step, end, out) || round >= 10000) return out;
    ::sched_yield();
  }
}

namespace {

StepRecords read_ring_steps(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t count) {
  detail::check_env_id(segment_of(b), env, "read steps of");
  StepRecords out;
  out.env = env;
  out.record_bytes = b.schema().step_bytes();
  out.field_offsets = detail::record_field_offsets(b.schema());
  const uint64_t end_asked =
      count > std::numeric_limits<uint64_t>::max() - first_step ? std::numeric_limits<uint64_t>::max() : first_step + count;
  const detail::StorageSet storages(segment_of(b));
  constexpr uint32_t kMaxRounds = 10000;
  for (uint32_t round = 0; round < kMaxRounds; ++round) {
    if (round > 0) ::sched_yield();
    const detail::StepRange view = detail::view_range(segment_of(b).env_control(env), View::replay, b.capacity());
    if (view.hi - view.lo > b.capacity()) {  // a writer keeps head <= claimed <= head + 1: damaged counters
      if (round < 100) continue;               // (or a load rewriting the env: look again for a while)
      throw Error(Errc::corrupt, fmt::format("cannot read steps of env {} of '{}': its counters claim {} stored "
                                             "steps (steps {} to {}) but it holds at most {}",
                                             env, b.name(), view.hi - view.lo, view.lo, view.hi, b.capacity()));
    }
    const uint64_t lo = std::max(first_step, view.lo);
    const uint64_t hi = std::min(end_asked, view.hi);
    if (lo >= hi) {
      out.first_step = std::min(std::max(first_step, view.lo), view.hi);
      out.count = 0;
      out.bytes.clear();
      return out;
    }
    out.bytes.resize(static_cast<std::size_t>((hi - lo) * out.record_bytes));
    const detail::RecordCopy copy(segment_of(b), storages, out.field_offsets, out.bytes.data());
    detail::clear_storage_faults();
    const detail::CopyResult r = detail::copy_records(segment_of(b), env, lo, hi - lo, copy);
    if (r.outcome != detail::CopyOutcome::ok) continue;
    detail::check_storage_faults(segment_of(b), r.intact_from);  // a fault in an intact step: the segment is corrupt
    // Steps below intact_from were overwritten during the copy: keep the newer part.
    const uint64_t keep_from = std::clamp(r.intact_from, lo, hi);
    const auto dropped = static_cast<std::ptrdiff_t>((keep_from - lo) * out.record_bytes);
    out.bytes.erase(out.bytes.begin(), out.bytes.begin() + dropped);
    out.first_step = keep_from;
    out.count = hi - keep_from;
    return out;
  }
  throw Error(Errc::contended, fmt::format("cannot read steps of env {} of '{}': the learner rewrote the env during "
                                           "the copy {} times in a row",
                                           env, b.name(), kMaxRounds));
}

}  // namespace

std::vector<ListedSegment> list_segments() {
  std::vector<ListedSegment> out;
  const std::string dir = shm_directory();
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* ent = ::readdir(d)) {
    const std::string name = ent->d_name;
    if (name.empty() || name[0] == '.') continue;
    // Only regular files that start with the magic are ours; everything else is skipped silently.
    detail::UniqueFd fd(::openat(::dirfd(d), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (!fd) continue;
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    uint64_t magic = 0;
    if (::pread(fd.get(), &magic, sizeof magic, 0) != static_cast<ssize_t>(sizeof magic) ||
        magic != layout::kMagic) {
      continue;
    }
    ListedSegment item;
    item.name = name;
    try {
      item.info = Inspector(name, {.allow_other_owner = true}).snapshot();  // listed with its owner
    } catch (const Error& e) {
      if (e.errc() == Errc::not_found) continue;  // removed since readdir saw it
      item.error = e.what();
    }
    out.push_back(std::move(item));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace shmreplay
