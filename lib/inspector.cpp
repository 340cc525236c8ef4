#include "shmreplay/inspector.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "detail/os/file.hpp"
#include "detail/os/owner.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/episode_queue.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/learner_takeover.hpp"
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

// Env `e`'s episode state and record queue (a buffer with episode fields); `alive` caches lease holders' liveness.
void episode_info(const Segment& seg, uint64_t e, std::map<uint64_t, bool>& alive, EnvInfo& i) {
  detail::JournalState j;
  if (detail::read_journal(seg, e, j)) {
    i.episodes_completed = j.episodes_completed;
    i.episode_start = j.episode_start;
    i.last_episode_length = j.last_length;
    i.last_episode_return = j.last_return;
    i.last_episode_end = j.last_end;
  }
  i.episode_records_dropped = seg.episode_control(e).records_dropped.load(std::memory_order_relaxed);
  const detail::QueueAccounts q = detail::queue_accounts(seg, e, [&](uint64_t taker) {
    auto [it, fresh] = alive.try_emplace(taker, false);
    if (fresh) it->second = detail::lease_holder_alive(taker);
    return it->second;
  });
  i.episode_queue_depth = q.depth;
  i.episode_records_lost = q.lost;
}

}  // namespace

Inspector::Inspector(std::string_view name, OpenOptions options)
    : buffer_(Buffer::open(name, read_only(std::move(options)))) {}

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

  std::map<uint64_t, bool> alive;  // lease word -> liveness, so each owner's /proc entry is read once
  s.envs.reserve(b.num_envs());
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    const layout::EnvControl& c = segment_of(b).env_control(e);
    EnvInfo i;
    i.env = e;
    // The same views as the Sampler's (each read is its own snapshot, which is fine for display).
    const detail::StepRange replay = detail::view_range(c, View::replay, b.capacity());
    const detail::StepRange online = detail::view_range(c, View::online, b.capacity());
    i.head = replay.hi;
    i.length = replay.hi - replay.lo;
    i.online_length = online.hi - online.lo;
    i.claimed = c.claimed.load(std::memory_order_relaxed) & layout::kClaimMask;
    i.last_push_ns = c.last_push_ns.load(std::memory_order_relaxed);
    i.online_start = c.online_start.load(std::memory_order_relaxed);
    i.stacks_intact_from = c.stacks_intact_from.load(std::memory_order_relaxed);  // display only
    const detail::UpdateLockHolder lock = detail::update_lock_holder(segment_of(b), c);
    i.update_lock = !lock.held ? OwnerState::none : lock.dead ? OwnerState::dead : OwnerState::alive;
    i.update_lock_slot = lock.slot;
    i.steps_lost_to_dead_updates = c.steps_lost_to_dead_updates.load(std::memory_order_relaxed);
    i.stack_flagless_restarts = c.stack_flagless_restarts.load(std::memory_order_relaxed);
    // Acquire pairs with the release of the compare-and-swap that took the lease: the lease's details are set.
    const uint64_t lease = c.lease.load(std::memory_order_acquire);
    if (lease != 0) {
      i.owner_pid = layout::owner_pid(lease);
      i.owner_start_ticks = c.owner_start_ticks.load(std::memory_order_relaxed);
      i.lease_since_ns = c.lease_since_ns.load(std::memory_order_relaxed);
      auto [it, fresh] = alive.try_emplace(lease, false);
      if (fresh) it->second = detail::lease_holder_alive(lease);
      i.owner = it->second ? OwnerState::alive : OwnerState::dead;
    }
    i.lease_takeovers = c.lease_takeovers.load(std::memory_order_relaxed);
    if (b.has_episodes()) {
      episode_info(segment_of(b), e, alive, i);
      s.episodes_completed += i.episodes_completed;
      s.episode_records_dropped += i.episode_records_dropped;
      s.episode_queue_depth += i.episode_queue_depth;
      s.episode_records_lost += i.episode_records_lost;
    }
    if (b.has_priorities()) {
      i.priority_total = detail::range_weight(detail::priority_tree_of(segment_of(b), e), replay.lo, replay.hi);
      s.priority_total += i.priority_total;
    }
    s.total_pushed += i.head;
    s.replay_steps += i.length;
    s.online_steps += i.online_length;
    s.envs.push_back(i);
  }
  s.live_writers = static_cast<uint64_t>(std::count_if(alive.begin(), alive.end(), [](const auto& kv) { return kv.second; }));

  const layout::GlobalControl& g = segment_of(b).global_control();
  if (b.has_priorities()) {
    s.priority_exponent = b.priority_exponent();
    s.max_priority = detail::max_priority(g.max_priority);
    s.priority_updates = g.priority_updates.load(std::memory_order_relaxed);
    s.priority_updates_dropped = g.priority_updates_dropped.load(std::memory_order_relaxed);
  }
  s.rate_limit = b.rate_limit_state();
  // Each learner slot (layout 1.7), then every learner together.
  for (uint64_t slot = 0; slot < segment_of(b).max_learners(); ++slot) {
    const detail::LearnerSlotWords me = detail::learner_slot(segment_of(b), slot);
    LearnerInfo l;
    l.slot = slot;
    // Acquire pairs with the release of the compare-and-swap that took the slot's lease.
    const uint64_t lease = me.lease.lease.load(std::memory_order_acquire);
    if (lease != 0) {
      l.pid = layout::owner_pid(lease);
      l.start_ticks = me.lease.start_ticks.load(std::memory_order_relaxed);
      l.since_ns = me.lease.since_ns.load(std::memory_order_relaxed);
      l.state = detail::lease_holder_alive(lease) ? OwnerState::alive : OwnerState::dead;
    }
    l.takeovers = me.lease.takeovers.load(std::memory_order_relaxed);
    l.rows_sampled = me.rows_sampled.load(std::memory_order_relaxed);
    l.sample_calls = me.sample_calls.load(std::memory_order_relaxed);
    l.retries = me.retries.load(std::memory_order_relaxed);
    l.online_resets = me.online_resets.load(std::memory_order_relaxed);
    l.steps_updated = me.steps_updated.load(std::memory_order_relaxed);
    l.waiters = me.waiters.load(std::memory_order_relaxed);
    l.waiting_rows = me.waiting_rows.load(std::memory_order_relaxed);
    // Layout 1.8: the slot's statistics, loaded one by one while its learner may add to them: the count is raised
    // to the buckets' sum so that the histogram read is always whole (cumulative buckets never pass the count).
    l.limiter_timeouts = me.stats.limiter_timeouts.load(std::memory_order_relaxed);
    uint64_t bucketed = 0;
    for (uint32_t k = 0; k < layout::kAgeBuckets; ++k) {
      l.age_buckets[k] = me.stats.age_buckets[k].load(std::memory_order_relaxed);
      bucketed += l.age_buckets[k];
    }
    l.age_sum_steps = me.stats.age_sum_steps.load(std::memory_order_relaxed);
    l.age_rows = std::max(me.stats.age_rows.load(std::memory_order_relaxed), bucketed);
    s.live_learners += l.state == OwnerState::alive ? 1 : 0;
    s.learners.push_back(l);
  }
  LearnerInfo& all = s.learner;
  const auto named = std::find_if(s.learners.begin(), s.learners.end(),
                                  [](const LearnerInfo& l) { return l.state == OwnerState::alive; });
  const auto held = std::find_if(s.learners.begin(), s.learners.end(),
                                 [](const LearnerInfo& l) { return l.state != OwnerState::none; });
  all = named != s.learners.end() ? *named : held != s.learners.end() ? *held : LearnerInfo{};
  all.takeovers = all.rows_sampled = all.sample_calls = all.retries = all.online_resets = all.steps_updated =
      all.waiting_rows = all.limiter_timeouts = all.age_rows = all.age_sum_steps = 0;
  all.age_buckets = {};
  for (const LearnerInfo& l : s.learners) {
    all.limiter_timeouts += l.limiter_timeouts;
    all.age_rows += l.age_rows;
    all.age_sum_steps += l.age_sum_steps;
    for (uint32_t k = 0; k < layout::kAgeBuckets; ++k) all.age_buckets[k] += l.age_buckets[k];
    all.takeovers += l.takeovers;
    all.rows_sampled += l.rows_sampled;
    all.sample_calls += l.sample_calls;
    all.retries += l.retries;
    all.online_resets += l.online_resets;
    all.steps_updated += l.steps_updated;
    all.waiting_rows += l.waiting_rows;
  }
  all.waiters = g.waiters.load(std::memory_order_relaxed);  // every slot's sleepers
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
    if (!f.stacked()) bytes += b.num_envs() * b.capacity() * f.bytes();
  }
  for (const StackGeometry& st : segment_of(b).stacks()) {  // layout 1.6: the frame rings and the frame-index words
    bytes += b.num_envs() * (st.frames * st.frame_bytes + b.capacity() * sizeof(uint64_t));
  }
  return bytes;
}

StepRecords read_steps(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t count) {
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
    const detail::CopyResult r = detail::copy_records(segment_of(b), env, lo, hi - lo, copy);
    if (r.outcome != detail::CopyOutcome::ok) continue;
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
