// detail/segment/placement.cpp: create's placement rule: where every section of a segment of a given shape goes
// (plan_segment), and the first write of its header and control blocks (write_segment), which publishes "ready"
// last. Open's acceptance rule, beside it in acceptance.cpp, checks a header against the same rules.
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include <unistd.h>

#include <fmt/format.h>

#include "detail/os/file.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/segment/rules.hpp"
#include "detail/storage/frame_ring.hpp"
#include "detail/storage/storage_kinds.hpp"

namespace shmreplay::detail {
namespace {

using namespace layout;

uint64_t checked_mul(uint64_t a, uint64_t b, uint64_t num_envs, uint64_t capacity, const std::string& what) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw_too_large(num_envs, capacity, what);
  return r;
}

uint64_t checked_add(uint64_t a, uint64_t b, uint64_t num_envs, uint64_t capacity, const std::string& what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > UINT64_MAX - kPageBytes) throw_too_large(num_envs, capacity, what);
  return r;
}

}  // namespace

SegmentPlan plan_segment(uint64_t num_envs, uint64_t capacity, const Schema& schema, uint64_t queue_capacity,
                         bool priorities, uint64_t stack_restarts, uint64_t max_learners) {
  if (stack_restarts == 0) stack_restarts = default_stack_restarts(capacity);
  SegmentPlan p;
  p.max_learners = max_learners;
  uint64_t at = sizeof(SegmentHeader);
  p.sections[kSectionFields] = {at, schema.size() * sizeof(FieldDesc)};
  at = round_up(at + p.sections[kSectionFields].bytes, kCacheLineBytes);
  p.sections[kSectionEnvs] = {at, num_envs * sizeof(EnvControl)};
  at = round_up(at + p.sections[kSectionEnvs].bytes, kCacheLineBytes);
  p.sections[kSectionGlobal] = {at, sizeof(GlobalControl)};
  at = round_up(at + p.sections[kSectionGlobal].bytes, kCacheLineBytes);
  // Layout 1.7: slots 1 to max_learners - 1 and their online starts, between the global section and the data
  // (a few KiB: max_learners and num_envs are bounded); empty (offset 0) with one learner.
  if (max_learners > 1) {
    const uint64_t slots = max_learners - 1;
    const uint64_t online = round_up(slots * sizeof(LearnerSlot), kCacheLineBytes);
    const uint64_t bytes = online + slots * num_envs * sizeof(uint64_t);
    p.sections[kSectionLearners] = {at, bytes};
    p.learner_online_offset = at + online;
    at = round_up(at + bytes, kCacheLineBytes);
  }
  // Layout 1.8: every slot's statistics, slot 0's included (at most 64 x 128 bytes), still before the data.
  p.sections[kSectionLearnerStats] = {at, max_learners * sizeof(LearnerStats)};
  at = round_up(at + p.sections[kSectionLearnerStats].bytes, kCacheLineBytes);
  at = round_up(at, kPageBytes);
  const uint64_t data_start = at;
  const uint64_t steps = checked_mul(num_envs, capacity, num_envs, capacity, "the number of steps");
  // Each field's storage, as its kind places it (lib/detail/storage/storage_kinds.cpp).
  FieldPlacer placer(num_envs, capacity, stack_restarts, at);
  for (std::size_t i = 0; i < schema.size(); ++i) p.fields.push_back(storage_kind_for(schema[i]).place(schema[i], i, placer));
  at = placer.at();
  p.sections[kSectionData] = {data_start, at - data_start};
  // Layout 1.2: the episode sections follow the data (so everything before is placed as in 1.1); all three are
  // empty in a buffer without episode fields.
  const bool episodes = queue_capacity != 0;
  at = round_up(at, kCacheLineBytes);
  p.sections[kSectionEpisodes] = {at, episodes ? num_envs * sizeof(EpisodeControl) : 0};
  at = checked_add(at, p.sections[kSectionEpisodes].bytes, num_envs, capacity, "the segment's size");
  const uint64_t meta_bytes = episodes ? checked_mul(steps, sizeof(uint64_t), num_envs, capacity, "the step meta") : 0;
  p.sections[kSectionStepMeta] = {at, meta_bytes};
  at = round_up(checked_add(at, meta_bytes, num_envs, capacity, "the segment's size"), kCacheLineBytes);
  const uint64_t queue_bytes =
      checked_mul(checked_mul(num_envs, queue_capacity, num_envs, capacity, "the episode queues"),
                  sizeof(EpisodeRecordSlot), num_envs, capacity, "the episode queues");
  p.sections[kSectionEpisodeQueues] = {at, queue_bytes};
  at = checked_add(at, queue_bytes, num_envs, capacity, "the segment's size");
  // Layout 1.3: the priority trees, empty without priorities.
  at = round_up(at, kCacheLineBytes);
  const uint64_t tree_bytes =
      priorities ? checked_mul(checked_mul(num_envs, 2 * std::bit_ceil(capacity), num_envs, capacity,
                                           "the priority trees"),
                               sizeof(uint64_t), num_envs, capacity, "the priority trees")
                 : 0;
  p.sections[kSectionPriorities] = {at, tree_bytes};
  at = checked_add(at, tree_bytes, num_envs, capacity, "the segment's size");
  p.total_bytes = round_up(at, kPageBytes);
  if (p.total_bytes > static_cast<uint64_t>(SIZE_MAX / 2)) throw_too_large(num_envs, capacity, "the segment's size");
  return p;
}

void write_segment(std::byte* base, uint64_t num_envs, uint64_t capacity, const Schema& schema, const SegmentPlan& p,
                   const FieldRoles& roles, std::optional<double> priority_exponent,
                   const std::optional<RateLimit>& rate_limit, StackContinuity stack_continuity) {
  // The file came from fallocate, so every byte is already zero; construct the atomics in place.
  auto* h = new (base) SegmentHeader{};
  h->magic = kMagic;
  h->layout_major = kLayoutMajor;
  h->layout_minor = kLayoutMinor;
  h->header_bytes = sizeof(SegmentHeader);
  h->total_bytes = p.total_bytes;
  h->state.store(kStateInitializing, std::memory_order_relaxed);
  h->num_envs = num_envs;
  h->capacity = capacity;
  h->num_fields = schema.size();
  h->step_bytes = schema.step_bytes();
  h->creator_pid = static_cast<uint64_t>(::getpid());
  h->creator_start_ticks = self_start_ticks();
  h->creation_time_ns = realtime_ns();
  h->num_sections = kSectionsUsed;
  h->episode_queue_capacity = roles.queue_capacity;
  // alpha = 0 is stored as -0.0, so that 0 bits always mean "no priorities".
  h->priority_exponent_bits = priority_exponent ? std::bit_cast<uint64_t>(*priority_exponent == 0 ? -0.0
                                                                                               : *priority_exponent)
                                                : 0;
  h->stack_continuity = static_cast<uint64_t>(stack_continuity);
  for (uint32_t s = 0; s < kSectionsUsed; ++s) h->sections[s] = p.sections[s];
  h->max_learners = p.max_learners;

  auto* table = reinterpret_cast<FieldDesc*>(base + p.sections[kSectionFields].offset);
  for (std::size_t i = 0; i < schema.size(); ++i) {
    const Field& f = schema[i];
    auto* d = new (table + i) FieldDesc{};
    std::memcpy(d->name, f.name.data(), f.name.size());
    d->dtype = static_cast<uint32_t>(f.dtype);
    d->ndim = static_cast<uint32_t>(f.shape.size());
    std::copy(f.shape.begin(), f.shape.end(), d->dims);
    d->step_bytes = f.bytes();
    d->data_offset = p.fields[i].data_offset;
    d->data_bytes = p.fields[i].data_bytes;
    d->role = roles.of_field[i];
    d->stack = f.stack_axis ? *f.stack_axis + 1 : 0;  // (1.6) the field's stacked axis + 1
    d->storage_kind = p.fields[i].kind;               // (1.10)
    storage_kind(p.fields[i].kind)->write(p.fields[i], *d, base, num_envs, capacity);
  }
  auto* envs = reinterpret_cast<EnvControl*>(base + p.sections[kSectionEnvs].offset);
  for (uint64_t e = 0; e < num_envs; ++e) new (envs + e) EnvControl{};
  auto* global = new (base + p.sections[kSectionGlobal].offset) GlobalControl{};
  if (p.max_learners > 1) {  // layout 1.7: the learner slots past slot 0 and their online starts
    auto* slots = reinterpret_cast<LearnerSlot*>(base + p.sections[kSectionLearners].offset);
    for (uint64_t r = 0; r + 1 < p.max_learners; ++r) new (slots + r) LearnerSlot{};
    auto* online = reinterpret_cast<std::atomic<uint64_t>*>(base + p.learner_online_offset);
    for (uint64_t i = 0; i < (p.max_learners - 1) * num_envs; ++i) new (online + i) std::atomic<uint64_t>(0);
  }
  auto* stats = reinterpret_cast<LearnerStats*>(base + p.sections[kSectionLearnerStats].offset);  // layout 1.8
  for (uint64_t r = 0; r < p.max_learners; ++r) new (stats + r) LearnerStats{};
  // Nobody else can see the segment yet: the rewriter lease is free.
  if (rate_limit) store_rate_limit(*global, rate_limit, /*inserts=*/std::nullopt, self_lease_word(), 0);
  if (priority_exponent) {
    global->max_priority.store(std::bit_cast<uint64_t>(1.0), std::memory_order_relaxed);
    auto* words = reinterpret_cast<std::atomic<uint64_t>*>(base + p.sections[kSectionPriorities].offset);
    for (uint64_t i = 0; i < p.sections[kSectionPriorities].bytes / sizeof(uint64_t); ++i) {
      new (words + i) std::atomic<uint64_t>(0);
    }
  }
  if (roles.queue_capacity != 0) {
    // Journal slot 0 holds the state for head 0 (episode 0 starts at step 0, nothing completed); slot 1 holds
    // nothing yet. Meta words and record slots start as zeros.
    auto* eps = reinterpret_cast<EpisodeControl*>(base + p.sections[kSectionEpisodes].offset);
    for (uint64_t e = 0; e < num_envs; ++e) {
      auto* c = new (eps + e) EpisodeControl{};
      c->journal[1].for_head.store(kJournalWriting, std::memory_order_relaxed);
    }
    auto* meta = reinterpret_cast<std::atomic<uint64_t>*>(base + p.sections[kSectionStepMeta].offset);
    for (uint64_t i = 0; i < num_envs * capacity; ++i) new (meta + i) std::atomic<uint64_t>(0);
    auto* slots = reinterpret_cast<EpisodeRecordSlot*>(base + p.sections[kSectionEpisodeQueues].offset);
    for (uint64_t i = 0; i < num_envs * roles.queue_capacity; ++i) new (slots + i) EpisodeRecordSlot{};
  }

  // release: pairs with the attacher's acquire load of `state` in open(); everything above happens-before it.
  h->state.store(kStateReady, std::memory_order_release);
}

SegmentGeometry planned_geometry(const std::string& name, uint64_t num_envs, uint64_t capacity, const Schema& schema,
                                 const SegmentPlan& plan, const FieldRoles& roles,
                                 std::optional<double> priority_exponent, StackContinuity stack_continuity) {
  SegmentGeometry g;
  g.name = name;
  g.schema = schema;
  g.num_envs = num_envs;
  g.capacity = capacity;
  g.total_bytes = plan.total_bytes;
  g.envs_offset = plan.sections[kSectionEnvs].offset;
  g.global_offset = plan.sections[kSectionGlobal].offset;
  g.max_learners = plan.max_learners;
  g.learner_slots_offset = plan.sections[kSectionLearners].offset;
  g.learner_online_offset = plan.learner_online_offset;
  g.learner_stats_offset = plan.sections[kSectionLearnerStats].offset;
  for (const PlacedField& f : plan.fields) {
    g.field_offsets.push_back(f.data_offset);
    g.field_kinds.push_back(f.kind);
    if (f.stack) g.stacks.push_back(*f.stack);
  }
  g.stack_continuity = stack_continuity;
  g.episode_fields = roles.indices;
  g.episode_queue_capacity = roles.queue_capacity;
  g.episodes_offset = plan.sections[kSectionEpisodes].offset;
  g.step_meta_offset = plan.sections[kSectionStepMeta].offset;
  g.queues_offset = plan.sections[kSectionEpisodeQueues].offset;
  g.priorities_offset = plan.sections[kSectionPriorities].offset;
  g.priority_leaves = priority_exponent ? std::bit_ceil(capacity) : 0;
  g.priority_exponent = priority_exponent.value_or(0.0);
  return g;
}

}  // namespace shmreplay::detail
