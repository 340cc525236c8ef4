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
#include "detail/segment/section_table.hpp"
#include "detail/storage/frame_ring.hpp"
#include "detail/storage/storage_kinds.hpp"

namespace shmreplay::detail {
namespace {

using namespace layout;

uint64_t checked_add(uint64_t a, uint64_t b, uint64_t num_envs, uint64_t capacity, const std::string& what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > UINT64_MAX - kPageBytes) throw_too_large(num_envs, capacity, what);
  return r;
}

}  // namespace

SegmentPlan plan_segment(uint64_t num_envs, uint64_t capacity, const Schema& schema, uint64_t queue_capacity,
                         bool priorities, uint64_t stack_restarts, uint64_t max_learners, CompressionBudget budget,
                         uint64_t max_times_sampled, bool consuming_queue, uint64_t initial_priority_bits,
                         uint64_t sequence_priority_length, uint64_t reanalyse_chunk, bool cold) {
  if (stack_restarts == 0) stack_restarts = default_stack_restarts(capacity);
  SegmentPlan p;
  p.counts = {num_envs,          capacity,        schema.size(),         queue_capacity,
              max_learners,      priorities,      max_times_sampled,     consuming_queue,
              initial_priority_bits, sequence_priority_length, reanalyse_chunk, cold};
  uint64_t at = sizeof(SegmentHeader);
  // Every section, as its row sizes and aligns it (section_table.cpp); a section of 0 bytes is absent ({0, 0}).
  for (const SectionRow& row : section_rows()) {
    at = round_up(at, row.place_align);  // no overflow: checked_add keeps `at` a page below UINT64_MAX
    if (row.size == SectionSize::placed_by_kinds) {
      // Each field's storage, as its kind places it (lib/detail/storage/storage_kinds.cpp).
      FieldPlacer placer(num_envs, capacity, stack_restarts, at, schema, budget);
      for (std::size_t i = 0; i < schema.size(); ++i) {
        p.fields.push_back(storage_kind_for(schema[i]).place(schema[i], i, placer));
      }
      p.sections[row.id] = {at, placer.at() - at};
      at = placer.at();
      continue;
    }
    const std::optional<uint64_t> bytes = row.bytes(p.counts);
    if (!bytes) throw_too_large(num_envs, capacity, fmt::format("the size of {}", row.name));
    if (*bytes == 0) continue;
    p.sections[row.id] = {at, *bytes};
    at = checked_add(at, *bytes, num_envs, capacity, "the segment's size");
  }
  if (max_learners > 1) p.learner_online_offset = p.sections[kSectionLearners].offset + learner_online_starts_at(max_learners);
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
  h->max_learners = p.counts.max_learners;
  h->max_times_sampled = p.counts.max_times_sampled;
  h->consuming_queue = p.counts.consuming_queue ? 1 : 0;
  h->initial_priority_bits = p.counts.initial_priority_bits;
  h->sequence_priority_length = p.counts.sequence_priority_length;
  h->reanalyse_chunk = p.counts.reanalyse_chunk;

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
    d->codec = static_cast<uint32_t>(f.codec) | (static_cast<uint32_t>(static_cast<uint8_t>(f.codec_level)) << 8) |
               (f.derived ? kFieldDerived : 0);  // (1.10; the flags 1.11)
    d->storage_kind = p.fields[i].kind;               // (1.10)
    storage_kind(p.fields[i].kind)->write(p.fields[i], *d, base, num_envs, capacity);
  }
  // Every section's words, constructed in place by its row (section_table.cpp); absent sections have none.
  for (const SectionRow& row : section_rows()) {
    if (row.construct != nullptr && p.sections[row.id].bytes != 0) row.construct(base + p.sections[row.id].offset, p.counts);
  }
  auto* global = std::launder(reinterpret_cast<GlobalControl*>(base + p.sections[kSectionGlobal].offset));
  // Nobody else can see the segment yet: the rewriter lease is free.
  if (rate_limit) store_rate_limit(*global, rate_limit, /*inserts=*/std::nullopt, self_lease_word(), 0);
  if (priority_exponent) global->max_priority.store(std::bit_cast<uint64_t>(1.0), std::memory_order_relaxed);

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
  std::copy(std::begin(plan.sections), std::end(plan.sections), g.sections.begin());
  g.max_learners = plan.counts.max_learners;
  g.max_times_sampled = plan.counts.max_times_sampled;
  g.consuming_queue = plan.counts.consuming_queue;
  g.initial_priority_bits = plan.counts.initial_priority_bits;
  g.sequence_priority_length = plan.counts.sequence_priority_length;
  g.reanalyse_chunk = plan.counts.reanalyse_chunk;
  g.learner_online_offset = plan.learner_online_offset;
  for (const PlacedField& f : plan.fields) {
    g.field_offsets.push_back(f.data_offset);
    g.field_kinds.push_back(f.kind);
    if (f.stack) g.stacks.push_back(*f.stack);
    if (f.packed) g.packed.push_back(*f.packed);
  }
  g.stack_continuity = stack_continuity;
  g.episode_fields = roles.indices;
  g.episode_queue_capacity = roles.queue_capacity;
  g.priority_leaves = priority_exponent ? std::bit_ceil(capacity) : 0;
  g.priority_exponent = priority_exponent.value_or(0.0);
  return g;
}

}  // namespace shmreplay::detail
