// detail/segment/section_table.cpp: the rows of the section table (section_table.hpp), in the order create places
// them. Placement (placement.cpp) and acceptance (acceptance.cpp) iterate these rows; neither names a section.
#include "detail/segment/section_table.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <new>

#include <fmt/format.h>

#include "detail/os/file.hpp"
#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/cold_layout.hpp"
#include "shmreplay/internal/journal_layout.hpp"
#include "shmreplay/internal/policy_layout.hpp"
#include "shmreplay/internal/queue_layout.hpp"
#include "shmreplay/internal/walk_layout.hpp"

namespace shmreplay::detail {
namespace {

using namespace layout;

std::optional<uint64_t> mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<uint64_t> mul(std::optional<uint64_t> a, uint64_t b) { return a ? mul(*a, b) : std::nullopt; }

// `n` words, each constructed as a zero atomic.
void zero_atomics(std::byte* start, uint64_t n) {
  auto* words = reinterpret_cast<std::atomic<uint64_t>*>(start);
  for (uint64_t i = 0; i < n; ++i) new (words + i) std::atomic<uint64_t>(0);
}

template <typename Block>
void construct_blocks(std::byte* start, uint64_t n) {
  auto* blocks = reinterpret_cast<Block*>(start);
  for (uint64_t i = 0; i < n; ++i) new (blocks + i) Block{};
}

// -- the field table and the env table (1.0) --

std::optional<uint64_t> field_table_bytes(const SectionCounts& c) { return mul(c.num_fields, sizeof(FieldDesc)); }
std::string field_table_explain(const SectionCounts& c) {
  return fmt::format("{} fields x {} bytes", c.num_fields, sizeof(FieldDesc));
}

std::optional<uint64_t> env_table_bytes(const SectionCounts& c) { return mul(c.num_envs, sizeof(EnvControl)); }
std::string env_table_explain(const SectionCounts& c) {
  return fmt::format("{} envs x {} bytes", c.num_envs, sizeof(EnvControl));
}
void env_table_construct(std::byte* start, const SectionCounts& c) { construct_blocks<EnvControl>(start, c.num_envs); }

// -- the global section (1.1): at least this version's GlobalControl; a newer minor may grow it --

std::optional<uint64_t> global_bytes(const SectionCounts&) { return sizeof(GlobalControl); }
std::string global_explain(const SectionCounts&) { return fmt::format("one GlobalControl of {} bytes", sizeof(GlobalControl)); }
void global_construct(std::byte* start, const SectionCounts&) { new (start) GlobalControl{}; }

// -- the learner sections: slots 1.. and their online starts (1.7; absent with one learner), every slot's
//    statistics (1.8) --

std::optional<uint64_t> learner_bytes(const SectionCounts& c) {
  if (c.max_learners <= 1) return 0;
  const std::optional<uint64_t> online = mul(mul(c.max_learners - 1, c.num_envs), sizeof(uint64_t));
  if (!online) return std::nullopt;
  return learner_online_starts_at(c.max_learners) + *online;  // bounded by kMaxLearners x kMaxEnvs: no overflow
}
std::string learner_explain(const SectionCounts& c) {
  return fmt::format("{} learner slots and {} envs", c.max_learners, c.num_envs);
}
void learner_construct(std::byte* start, const SectionCounts& c) {
  construct_blocks<LearnerSlot>(start, c.max_learners - 1);
  zero_atomics(start + learner_online_starts_at(c.max_learners), (c.max_learners - 1) * c.num_envs);
}

std::optional<uint64_t> stats_bytes(const SectionCounts& c) { return mul(c.max_learners, sizeof(LearnerStats)); }
std::string stats_explain(const SectionCounts& c) {
  return fmt::format("{} learner slots x {} bytes", c.max_learners, sizeof(LearnerStats));
}
void stats_construct(std::byte* start, const SectionCounts& c) {
  construct_blocks<LearnerStats>(start, c.max_learners);
}

// -- the episode sections (1.2): absent without episode fields --

std::optional<uint64_t> episodes_bytes(const SectionCounts& c) {
  return c.queue_capacity == 0 ? 0 : mul(c.num_envs, sizeof(EpisodeControl));
}
std::string episodes_explain(const SectionCounts& c) {
  return fmt::format("{} envs x {} bytes with episode fields, 0 without (episode queue capacity {})", c.num_envs,
                     sizeof(EpisodeControl), c.queue_capacity);
}
void episodes_construct(std::byte* start, const SectionCounts& c) {
  // Journal slot 0 holds the state for head 0 (episode 0 starts at step 0, nothing completed); slot 1 holds
  // nothing yet (detail/protocol/episodes.cpp).
  construct_blocks<EpisodeControl>(start, c.num_envs);
  auto* blocks = reinterpret_cast<EpisodeControl*>(start);
  for (uint64_t e = 0; e < c.num_envs; ++e) blocks[e].journal[1].for_head.store(kJournalWriting, std::memory_order_relaxed);
}

std::optional<uint64_t> meta_bytes(const SectionCounts& c) {
  return c.queue_capacity == 0 ? 0 : mul(mul(c.num_envs, c.capacity), sizeof(uint64_t));
}
std::string meta_explain(const SectionCounts& c) {
  return fmt::format("{} envs x {} steps x 8 bytes with episode fields, 0 without", c.num_envs, c.capacity);
}
void meta_construct(std::byte* start, const SectionCounts& c) { zero_atomics(start, c.num_envs * c.capacity); }

std::optional<uint64_t> queues_bytes(const SectionCounts& c) {
  return mul(mul(c.num_envs, c.queue_capacity), sizeof(EpisodeRecordSlot));
}
std::string queues_explain(const SectionCounts& c) {
  return fmt::format("{} envs x {} records x {} bytes", c.num_envs, c.queue_capacity, sizeof(EpisodeRecordSlot));
}
void queues_construct(std::byte* start, const SectionCounts& c) {
  construct_blocks<EpisodeRecordSlot>(start, c.num_envs * c.queue_capacity);
}

// -- the priority trees (1.3): one sum tree of 2 x bit_ceil(capacity) words per env, then (1.11, initial priority
//    infinity) one fresh-step tree per env; absent without priorities --

std::optional<uint64_t> priorities_bytes(const SectionCounts& c) {
  if (!c.priorities) return 0;
  if (c.capacity > kMaxCapacity) return std::nullopt;  // bit_ceil would overflow
  return mul(mul(mul(c.num_envs, c.priority_trees()), 2 * std::bit_ceil(c.capacity)), sizeof(uint64_t));
}
std::string priorities_explain(const SectionCounts& c) {
  return fmt::format("{} envs x {} steps {}", c.num_envs, c.capacity,
                     !c.priorities ? "without priorities"
                                   : fmt::format("with priorities, {} trees per env", c.priority_trees()));
}
void priorities_construct(std::byte* start, const SectionCounts& c) {
  zero_atomics(start, c.num_envs * c.priority_trees() * 2 * std::bit_ceil(c.capacity));
}

// -- the policy section (1.11): every buffer --

std::optional<uint64_t> policy_bytes(const SectionCounts& c) {
  const std::optional<uint64_t> envs = mul(c.num_envs, sizeof(PolicyEnv));
  if (!envs) return std::nullopt;
  return policy_envs_at(c.max_learners) + *envs;  // bounded by kMaxLearners and kMaxEnvs: no overflow
}
std::string policy_explain(const SectionCounts& c) {
  return fmt::format("{} bytes, {} learner slots x {} bytes and {} envs x {} bytes", sizeof(PolicyControl),
                     c.max_learners, sizeof(PolicyLearner), c.num_envs, sizeof(PolicyEnv));
}
void policy_construct(std::byte* start, const SectionCounts& c) {
  auto* control = new (start) PolicyControl{};
  control->max_staleness.store(kNoPolicyWindow, std::memory_order_relaxed);
  construct_blocks<PolicyLearner>(start + policy_learners_at(), c.max_learners);
  construct_blocks<PolicyEnv>(start + policy_envs_at(c.max_learners), c.num_envs);
  auto* envs = reinterpret_cast<PolicyEnv*>(start + policy_envs_at(c.max_learners));
  for (uint64_t e = 0; e < c.num_envs; ++e) envs[e].newest.store(kNoPolicyVersion, std::memory_order_relaxed);
}

// -- the sample-caps section (1.11): only with a cap --

std::optional<uint64_t> caps_bytes(const SectionCounts& c) {
  if (c.max_times_sampled == 0) return 0;
  const std::optional<uint64_t> slots = mul(c.num_envs, c.capacity);
  if (!slots || *slots > UINT64_MAX / 8 - cap_words_at(c.max_learners)) return std::nullopt;
  return cap_words_at(c.max_learners) + *slots * 8;
}
std::string caps_explain(const SectionCounts& c) {
  if (c.max_times_sampled == 0) return "none without a sample cap";
  return fmt::format("{} learner slots x {} bytes and {} envs x {} steps x 8 bytes", c.max_learners,
                     sizeof(CapLearner), c.num_envs, c.capacity);
}
void caps_construct(std::byte* start, const SectionCounts& c) {
  construct_blocks<CapLearner>(start, c.max_learners);
  zero_atomics(start + cap_words_at(c.max_learners), c.num_envs * c.capacity);  // step 0's word: cap_word(0, 0)
}

// -- the consuming-queue section (1.11): only in a consuming queue --

std::optional<uint64_t> queue_section_bytes(const SectionCounts& c) {
  if (!c.consuming_queue) return 0;
  const std::optional<uint64_t> slots = mul(c.num_envs, c.capacity);
  const uint64_t head = queue_tickets_at(c.max_learners, c.num_envs);  // bounded by kMaxLearners and kMaxEnvs
  if (!slots || *slots > (UINT64_MAX - head) / 8) return std::nullopt;
  return head + *slots * 8;
}
std::string queue_section_explain(const SectionCounts& c) {
  if (!c.consuming_queue) return "none without a consuming queue";
  return fmt::format("{} bytes, {} learner slots x {} bytes, {} envs x {} bytes and {} envs x {} steps x 8 bytes",
                     sizeof(QueueControl), c.max_learners, sizeof(QueueLearner), c.num_envs, sizeof(QueueEnv),
                     c.num_envs, c.capacity);
}
void queue_section_construct(std::byte* start, const SectionCounts& c) {
  construct_blocks<QueueControl>(start, 1);
  construct_blocks<QueueLearner>(start + queue_learners_at(), c.max_learners);
  construct_blocks<QueueEnv>(start + queue_envs_at(c.max_learners), c.num_envs);
  zero_atomics(start + queue_tickets_at(c.max_learners, c.num_envs), c.num_envs * c.capacity);
}

// -- the reanalyse-walk section (1.11): only with a walk --

std::optional<uint64_t> walk_section_bytes(const SectionCounts& c) {
  if (c.reanalyse_chunk == 0) return 0;
  const std::optional<uint64_t> chunks = mul(c.num_envs, walk_slots_per_env(c.capacity, c.reanalyse_chunk));
  const uint64_t head = walk_chunks_at(c.num_envs);  // bounded by kMaxEnvs
  if (!chunks || *chunks > (UINT64_MAX - head) / sizeof(WalkChunk)) return std::nullopt;
  return head + *chunks * sizeof(WalkChunk);
}
std::string walk_section_explain(const SectionCounts& c) {
  if (c.reanalyse_chunk == 0) return "none without a reanalyse walk";
  return fmt::format("{} bytes, {} worker slots x {} bytes, {} envs x {} bytes and {} envs x {} chunk slots x {} "
                     "bytes",
                     sizeof(WalkControl), kMaxWalkers, sizeof(WalkWorker), c.num_envs, sizeof(WalkEnv), c.num_envs,
                     walk_slots_per_env(c.capacity, c.reanalyse_chunk), sizeof(WalkChunk));
}
void walk_section_construct(std::byte* start, const SectionCounts& c) {
  construct_blocks<WalkControl>(start, 1);
  reinterpret_cast<WalkControl*>(start)->pass.store(1, std::memory_order_relaxed);  // published by create's "ready"
  construct_blocks<WalkWorker>(start + walk_workers_at(), kMaxWalkers);
  construct_blocks<WalkEnv>(start + walk_envs_at(), c.num_envs);
  construct_blocks<WalkChunk>(start + walk_chunks_at(c.num_envs),
                              c.num_envs * walk_slots_per_env(c.capacity, c.reanalyse_chunk));
}

// -- the cold-tier section (1.11): only with a cold tier --

std::optional<uint64_t> cold_section_bytes(const SectionCounts& c) {
  return c.cold ? layout::cold_section_bytes(c.num_envs) : 0;  // bounded by kMaxEnvs
}
std::string cold_section_explain(const SectionCounts& c) {
  if (!c.cold) return "none without a cold tier";
  return fmt::format("{} bytes and {} envs x {} bytes", sizeof(ColdControl), c.num_envs, sizeof(ColdEnv));
}
void cold_section_construct(std::byte* start, const SectionCounts& c) {
  construct_blocks<ColdControl>(start, 1);  // its words are filled by create (cold_files.cpp) before the name
  construct_blocks<ColdEnv>(start + cold_envs_at(), c.num_envs);
}

// -- the journal section (1.11): in every buffer --

std::optional<uint64_t> journal_section_bytes(const SectionCounts& c) {
  return journal_heads_at() + c.num_envs * 8;  // num_envs is bounded by kMaxEnvs
}
std::string journal_section_explain(const SectionCounts& c) {
  return fmt::format("{} bytes and {} envs x 8 bytes", sizeof(JournalControl), c.num_envs);
}
void journal_section_construct(std::byte* start, const SectionCounts& c) {
  construct_blocks<JournalControl>(start, 1);
  zero_atomics(start + journal_heads_at(), c.num_envs);
}

constexpr SectionSize kExact = SectionSize::exact;

// Placement order. Rows: id, name, since, size rule, open's alignment, create's alignment, bytes, explain, construct.
constexpr std::array<SectionRow, kSectionsUsed> kRows = {{
    {kSectionFields, "the field table", 0, kExact, alignof(FieldDesc), kCacheLineBytes, field_table_bytes,
     field_table_explain, nullptr},  // written field by field by write_segment
    {kSectionEnvs, "the env table", 0, kExact, kCacheLineBytes, kCacheLineBytes, env_table_bytes, env_table_explain,
     env_table_construct},
    {kSectionGlobal, "the global section", 1, SectionSize::at_least, kCacheLineBytes, kCacheLineBytes, global_bytes,
     global_explain, global_construct},
    {kSectionLearners, "the learner section", 7, kExact, kCacheLineBytes, kCacheLineBytes, learner_bytes,
     learner_explain, learner_construct},
    {kSectionLearnerStats, "the learner statistics section", 8, kExact, alignof(LearnerStats), kCacheLineBytes,
     stats_bytes, stats_explain, stats_construct},
    {kSectionData, "the data section", 0, SectionSize::placed_by_kinds, kDataAlignBytes, kPageBytes, nullptr,
     nullptr, nullptr},
    {kSectionEpisodes, "the episode control section", 2, kExact, kCacheLineBytes, kCacheLineBytes, episodes_bytes,
     episodes_explain, episodes_construct},
    {kSectionStepMeta, "the step meta section", 2, kExact, kCacheLineBytes, kCacheLineBytes, meta_bytes,
     meta_explain, meta_construct},
    {kSectionEpisodeQueues, "the episode queue section", 2, kExact, kCacheLineBytes, kCacheLineBytes, queues_bytes,
     queues_explain, queues_construct},
    {kSectionPriorities, "the priority section", 3, kExact, kCacheLineBytes, kCacheLineBytes, priorities_bytes,
     priorities_explain, priorities_construct},
    {kSectionPolicy, "the policy section", 11, kExact, kCacheLineBytes, kCacheLineBytes, policy_bytes, policy_explain,
     policy_construct},
    {kSectionSampleCaps, "the sample-caps section", 11, kExact, kCacheLineBytes, kCacheLineBytes, caps_bytes,
     caps_explain, caps_construct},
    {kSectionQueue, "the consuming-queue section", 11, kExact, kCacheLineBytes, kCacheLineBytes, queue_section_bytes,
     queue_section_explain, queue_section_construct},
    {kSectionWalk, "the reanalyse-walk section", 11, kExact, kCacheLineBytes, kCacheLineBytes, walk_section_bytes,
     walk_section_explain, walk_section_construct},
    {kSectionCold, "the cold-tier section", 11, kExact, kCacheLineBytes, kCacheLineBytes, cold_section_bytes,
     cold_section_explain, cold_section_construct},
    {kSectionJournal, "the journal section", 11, kExact, kCacheLineBytes, kCacheLineBytes, journal_section_bytes,
     journal_section_explain, journal_section_construct},
}};

// Every index of this minor version has exactly one row.
constexpr bool every_section_once() {
  for (uint32_t id = 0; id < kSectionsUsed; ++id) {
    int rows = 0;
    for (const SectionRow& r : kRows) rows += r.id == id ? 1 : 0;
    if (rows != 1) return false;
  }
  return true;
}
static_assert(every_section_once(), "one row per SectionIndex below kSectionsUsed");

}  // namespace

std::span<const SectionRow> section_rows() noexcept { return kRows; }

uint64_t learner_online_starts_at(uint64_t max_learners) noexcept {
  return max_learners <= 1 ? 0 : round_up((max_learners - 1) * sizeof(LearnerSlot), kCacheLineBytes);
}

}  // namespace shmreplay::detail
