// Pins the segment layout to its version constant. If a check here fails, the bytes of the segment changed:
// bump layout::kLayoutMajor (incompatible change) or kLayoutMinor (appended sections/fields only), then update
// the expected values below and the diagram in include/shmreplay/internal/layout.hpp and docs/design/segment.md.
#include <doctest/doctest.h>

#include <bit>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "shmreplay/internal/segment.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/layout.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::layout;

#pragma GCC diagnostic ignored "-Winvalid-offsetof"

TEST_CASE("the layout version is 1.11 and its magic spells SHMRPLAY") {
  CHECK(kLayoutMajor == 1);
  CHECK(kLayoutMinor == 11);
  const char expected[] = "SHMRPLAY";
  for (int i = 0; i < 8; ++i) CHECK(static_cast<char>((kMagic >> (8 * i)) & 0xff) == expected[i]);
}

TEST_CASE("layout 1.10: SegmentHeader sizes and offsets are pinned") {
  CHECK(sizeof(SegmentHeader) == 448);  // 1.7: 320, for the ninth section and max_learners; 1.10: 16 sections
  CHECK(offsetof(SegmentHeader, magic) == 0);
  CHECK(offsetof(SegmentHeader, layout_major) == 8);
  CHECK(offsetof(SegmentHeader, layout_minor) == 12);
  CHECK(offsetof(SegmentHeader, header_bytes) == 16);
  CHECK(offsetof(SegmentHeader, total_bytes) == 24);
  CHECK(offsetof(SegmentHeader, state) == 32);
  CHECK(offsetof(SegmentHeader, num_envs) == 40);
  CHECK(offsetof(SegmentHeader, capacity) == 48);
  CHECK(offsetof(SegmentHeader, num_fields) == 56);
  CHECK(offsetof(SegmentHeader, step_bytes) == 64);
  CHECK(offsetof(SegmentHeader, creator_pid) == 72);
  CHECK(offsetof(SegmentHeader, creator_start_ticks) == 80);
  CHECK(offsetof(SegmentHeader, creation_time_ns) == 88);
  CHECK(offsetof(SegmentHeader, num_sections) == 96);
  CHECK(offsetof(SegmentHeader, episode_queue_capacity) == 104);
  CHECK(offsetof(SegmentHeader, priority_exponent_bits) == 112);
  CHECK(offsetof(SegmentHeader, stack_continuity) == 120);  // 1.6: was reserved0
  CHECK(offsetof(SegmentHeader, sections) == 128);
  CHECK(offsetof(SegmentHeader, max_learners) == 384);  // 1.7: 272; 1.8: 288; 1.10: after the sixteenth entry
  CHECK(offsetof(SegmentHeader, max_times_sampled) == 392);  // 1.11: a reserved word
  CHECK(offsetof(SegmentHeader, consuming_queue) == 400);  // 1.11: a reserved word
  CHECK(offsetof(SegmentHeader, initial_priority_bits) == 408);  // 1.11: a reserved word
  CHECK(offsetof(SegmentHeader, sequence_priority_length) == 416);  // 1.11: a reserved word
  CHECK(offsetof(SegmentHeader, reanalyse_chunk) == 424);  // 1.11: a reserved word
  CHECK(offsetof(SegmentHeader, reserved) == 432);
  CHECK(sizeof(SegmentHeader::reserved) == 2 * 8);
  CHECK(sizeof(SectionDesc) == 16);
  CHECK(kMaxSections == 16);
  CHECK(kSectionFields == 0);
  CHECK(kSectionEnvs == 1);
  CHECK(kSectionData == 2);
  CHECK(kSectionGlobal == 3);
  CHECK(kSectionEpisodes == 4);
  CHECK(kSectionStepMeta == 5);
  CHECK(kSectionEpisodeQueues == 6);
  CHECK(kSectionsUsed == 16);
  CHECK(kSectionPriorities == 7);
  CHECK(kSectionLearners == 8);      // 1.7
  CHECK(kSectionLearnerStats == 9);  // 1.8
  CHECK(kSectionPolicy == 10);       // 1.11
  CHECK(kSectionSampleCaps == 11);   // 1.11
  CHECK(kSectionQueue == 12);        // 1.11
  CHECK(kSectionWalk == 13);         // 1.11
  CHECK(kSectionJournal == 15);      // 1.11 (14: the cold tier's)
}

TEST_CASE("layout 1.2: FieldDesc sizes and offsets are pinned") {
  CHECK(sizeof(FieldDesc) == 192);
  CHECK(offsetof(FieldDesc, name) == 0);
  CHECK(offsetof(FieldDesc, dtype) == 64);
  CHECK(offsetof(FieldDesc, ndim) == 68);
  CHECK(offsetof(FieldDesc, dims) == 72);
  CHECK(offsetof(FieldDesc, step_bytes) == 136);
  CHECK(offsetof(FieldDesc, data_offset) == 144);
  CHECK(offsetof(FieldDesc, data_bytes) == 152);
  CHECK(offsetof(FieldDesc, role) == 160);
  CHECK(offsetof(FieldDesc, stack) == 164);               // 1.6: was reserved1
  CHECK(offsetof(FieldDesc, stack_frames) == 168);        // 1.6: was reserved0[0]
  CHECK(offsetof(FieldDesc, stack_index_offset) == 176);  // 1.6: was reserved0[1]
  CHECK(offsetof(FieldDesc, storage_kind) == 184);  // 1.10: was half of reserved0
  CHECK(offsetof(FieldDesc, codec) == 188);  // 1.10: was the other half of reserved0
  CHECK(kFieldDerived == 0x10000u);  // 1.11: FieldDesc::codec's flag bits are stored in segments
  CHECK(kStoragePlainRing == 0);  // FieldDesc::storage_kind codes are stored in segments
  CHECK(kStorageFrameRing == 1);
  // The episode role codes are stored in the field table.
  CHECK(kRoleNone == 0);
  CHECK(kRoleDone == 1);
  CHECK(kRoleTerminated == 2);
  CHECK(kRoleTruncated == 3);
  CHECK(kRoleReward == 4);
  CHECK(kRolePolicyVersion == 5);  // 1.11
  CHECK(kRoleCount == 6);
  CHECK(kMaxDims == 8);
  CHECK(kMaxNameBytes == 63);
  // The dtype codes are stored in the field table.
  CHECK(static_cast<uint32_t>(DType::u8) == 1);
  CHECK(static_cast<uint32_t>(DType::bf16) == 10);
  CHECK(static_cast<uint32_t>(DType::boolean) == 13);
}

TEST_CASE("layout 1.2: EnvControl puts each writing role on its own cache line") {
  CHECK(sizeof(EnvControl) == 192);
  CHECK(alignof(EnvControl) == 64);
  CHECK(offsetof(EnvControl, claimed) == 0);
  CHECK(offsetof(EnvControl, head) == 8);
  CHECK(offsetof(EnvControl, last_push_ns) == 16);
  CHECK(offsetof(EnvControl, limiter_reserved) == 24);  // 1.4
  CHECK(offsetof(EnvControl, limiter_waiting_since_ns) == 32);  // 1.5
  CHECK(offsetof(EnvControl, stacks_intact_from) == 40);  // 1.6
  CHECK(offsetof(EnvControl, stack_flagless_restarts) == 48);  // 1.9
  CHECK(offsetof(EnvControl, online_start) == 64);
  CHECK(offsetof(EnvControl, update_seq) == 72);
  CHECK(offsetof(EnvControl, update_step) == 80);                 // 1.9
  CHECK(offsetof(EnvControl, steps_lost_to_dead_updates) == 88);  // 1.9
  CHECK(offsetof(EnvControl, lease) == 128);
  CHECK(offsetof(EnvControl, owner_start_ticks) == 136);
  CHECK(offsetof(EnvControl, lease_since_ns) == 144);
  CHECK(offsetof(EnvControl, lease_takeovers) == 152);
}

TEST_CASE("layout 1.2: GlobalControl puts the learner lease, its counters and the wake word on their own lines") {
  CHECK(sizeof(GlobalControl) == 576);
  CHECK(alignof(GlobalControl) == 64);
  CHECK(offsetof(GlobalControl, learner_lease) == 0);
  CHECK(offsetof(GlobalControl, learner_start_ticks) == 8);
  CHECK(offsetof(GlobalControl, learner_since_ns) == 16);
  CHECK(offsetof(GlobalControl, learner_takeovers) == 24);
  CHECK(offsetof(GlobalControl, rows_sampled) == 64);
  CHECK(offsetof(GlobalControl, sample_calls) == 72);
  CHECK(offsetof(GlobalControl, retries) == 80);
  CHECK(offsetof(GlobalControl, online_resets) == 88);
  CHECK(offsetof(GlobalControl, steps_updated) == 96);
  CHECK(offsetof(GlobalControl, write_backs_applied) == 104);  // 1.11: was pad1[0]
  CHECK(offsetof(GlobalControl, write_backs_refused) == 112);  // 1.11: was pad1[1]
  CHECK(offsetof(GlobalControl, wake_seq) == 128);
  CHECK(offsetof(GlobalControl, waiters) == 136);
  CHECK(offsetof(GlobalControl, slot0_waiters) == 144);  // 1.7: was pad2[0]
  CHECK(offsetof(GlobalControl, max_priority) == 192);
  CHECK(offsetof(GlobalControl, priority_walk) == 200);
  CHECK(offsetof(GlobalControl, priority_updates) == 208);
  CHECK(offsetof(GlobalControl, priority_updates_dropped) == 216);
  CHECK(offsetof(GlobalControl, load_generation) == 224);  // 1.11: was reserved[0]
  // 1.4: the rate limiter's settings, its learner side and its writer side.
  CHECK(offsetof(GlobalControl, limiter_index) == 256);
  CHECK(offsetof(GlobalControl, limiter_writer) == 264);
  CHECK(offsetof(GlobalControl, limiter_changes) == 272);
  CHECK(offsetof(GlobalControl, samples) == 320);
  CHECK(offsetof(GlobalControl, last_sample_ns) == 328);
  CHECK(offsetof(GlobalControl, writer_wake_seq) == 336);
  CHECK(offsetof(GlobalControl, learner_waiting_rows) == 344);
  CHECK(offsetof(GlobalControl, learner_waiting_since_ns) == 352);
  CHECK(offsetof(GlobalControl, learner_limited) == 360);
  CHECK(offsetof(GlobalControl, admit_seq) == 384);
  CHECK(offsetof(GlobalControl, writer_recheck_by_ns) == 392);  // 1.5: was writer_waiters
  CHECK(offsetof(GlobalControl, reserved6a) == 400);            // 1.5: was writer_waiting_since_ns
  CHECK(offsetof(GlobalControl, writers_limited) == 408);
  CHECK(offsetof(GlobalControl, writer_timeouts) == 416);
  CHECK(offsetof(GlobalControl, limiter_slots) == 448);
  CHECK(sizeof(LimiterSlot) == 64);
  CHECK(offsetof(LimiterSlot, enabled) == 0);
  CHECK(offsetof(LimiterSlot, min_size_to_sample) == 8);
  CHECK(offsetof(LimiterSlot, samples_per_insert) == 16);
  CHECK(offsetof(LimiterSlot, min_diff) == 24);
  CHECK(offsetof(LimiterSlot, max_diff) == 32);
  CHECK(offsetof(LimiterSlot, error_offset) == 40);
  CHECK(kUpdateLockBit == (1ull << 63));
}

TEST_CASE("layout 1.7: a learner slot and the update lock's owner bits are pinned") {
  CHECK(kMaxLearners == 64);
  CHECK(sizeof(LearnerSlot) == 192);
  CHECK(alignof(LearnerSlot) == 64);
  CHECK(offsetof(LearnerSlot, lease) == 0);
  CHECK(offsetof(LearnerSlot, start_ticks) == 8);
  CHECK(offsetof(LearnerSlot, since_ns) == 16);
  CHECK(offsetof(LearnerSlot, takeovers) == 24);
  CHECK(offsetof(LearnerSlot, rows_sampled) == 64);
  CHECK(offsetof(LearnerSlot, sample_calls) == 72);
  CHECK(offsetof(LearnerSlot, retries) == 80);
  CHECK(offsetof(LearnerSlot, online_resets) == 88);
  CHECK(offsetof(LearnerSlot, steps_updated) == 96);
  CHECK(offsetof(LearnerSlot, write_backs_applied) == 104);  // 1.11: was pad1[0]
  CHECK(offsetof(LearnerSlot, write_backs_refused) == 112);  // 1.11: was pad1[1]
  CHECK(offsetof(LearnerSlot, priority_walk) == 128);
  CHECK(offsetof(LearnerSlot, waiting_rows) == 136);
  CHECK(offsetof(LearnerSlot, waiting_since_ns) == 144);
  CHECK(offsetof(LearnerSlot, waiters) == 152);
  CHECK(kUpdateOwnerShift == 56);
  CHECK(kClaimMask == (1ull << 56) - 1);
  CHECK(update_lock_bits(0) == kUpdateLockBit);
  CHECK(update_lock_bits(63) == (kUpdateLockBit | (63ull << 56)));
  CHECK(update_lock_owner(12345 | update_lock_bits(5)) == 5);
}

TEST_CASE("layout 1.11: the policy section's blocks and their sentinels are pinned") {
  CHECK(sizeof(PolicyControl) == 128);
  CHECK(offsetof(PolicyControl, version) == 0);
  CHECK(offsetof(PolicyControl, max_staleness) == 8);
  CHECK(offsetof(PolicyControl, publishes) == 16);
  CHECK(offsetof(PolicyControl, writer_wake) == 24);
  CHECK(offsetof(PolicyControl, writer_waiters) == 32);
  CHECK(offsetof(PolicyControl, learner_wake) == 40);
  CHECK(offsetof(PolicyControl, learner_waiters) == 48);
  CHECK(offsetof(PolicyControl, writers_held) == 64);
  CHECK(offsetof(PolicyControl, writer_timeouts) == 72);
  CHECK(offsetof(PolicyControl, learner_paced) == 80);
  CHECK(offsetof(PolicyControl, learner_pace_timeouts) == 88);
  CHECK(sizeof(PolicyLearner) == 64);
  CHECK(offsetof(PolicyLearner, rows) == 0);
  CHECK(offsetof(PolicyLearner, age_sum) == 8);
  CHECK(offsetof(PolicyLearner, age_buckets) == 16);
  CHECK(kVersionAgeBuckets == 6);
  CHECK(sizeof(PolicyEnv) == 64);
  CHECK(offsetof(PolicyEnv, newest) == 0);
  CHECK(offsetof(PolicyEnv, held_pushes) == 8);
  CHECK(offsetof(PolicyEnv, held_ns) == 16);
  CHECK(offsetof(PolicyEnv, held_since_ns) == 24);
  CHECK(offsetof(PolicyEnv, timeouts) == 32);
  CHECK(kNoPolicyWindow == ~0ull);
  CHECK(kNoPolicyVersion == ~0ull);
  CHECK(policy_envs_at(3) == 128 + 3 * 64);
}

TEST_CASE("layout 1.8: a learner slot's statistics and the age buckets are pinned") {
  CHECK(sizeof(LearnerStats) == 128);
  CHECK(alignof(LearnerStats) == 64);
  CHECK(offsetof(LearnerStats, age_rows) == 0);
  CHECK(offsetof(LearnerStats, age_sum_steps) == 8);
  CHECK(offsetof(LearnerStats, age_buckets) == 16);
  CHECK(kAgeBuckets == 13);
  CHECK(offsetof(LearnerStats, limiter_timeouts) == 120);
  // Bucket 0 is age 0; bucket k holds (4^(k-2), 4^(k-1)]; past 4^11, kAgeBuckets (counted in age_rows only).
  const uint64_t le[] = {0, 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304};
  for (uint32_t k = 0; k < kAgeBuckets; ++k) {
    CAPTURE(k);
    CHECK(age_bucket_le(k) == le[k]);
    CHECK(age_bucket(le[k]) == k);
    CHECK(age_bucket(le[k] + 1) == k + 1);
  }
  // Every age from 0 to 5000 against a loop over the bounds (what age_bucket computes without one).
  for (uint64_t age = 0; age <= 5000; ++age) {
    uint32_t k = 0;
    while (k < kAgeBuckets && age > le[k]) ++k;
    REQUIRE(age_bucket(age) == k);
  }
  CHECK(age_bucket(uint64_t{1} << 62) == kAgeBuckets);
  CHECK(age_bucket(uint64_t{1} << 56) == kAgeBuckets);
  // The raw index (the sampler's, before the bounds) is 1 + ceil(log4(age)) up to 2^62, and 33 for age 0 only.
  CHECK(age_bucket_raw(0) == kAgeRawZero);
  CHECK(age_bucket_raw(1) == 1);
  for (uint32_t j = 1; j <= 62; ++j) {
    CAPTURE(j);
    const uint64_t p = uint64_t{1} << j;  // 2^j, in bucket 1 + ceil(j / 2)
    CHECK(age_bucket_raw(p) == 1 + (j + 1) / 2);
    if (j < 62) CHECK(age_bucket_raw(p + 1) == 1 + (j + 2) / 2);
    CHECK(age_bucket_raw(p) < kAgeRawZero);
  }
}

TEST_CASE("a segment with several learner slots places them between the global section and the data") {
  const std::string name = test::unique_name("layout-learners");
  test::SegmentGuard guard(name);
  const Schema schema = Schema::parse("obs:f32[3] done:bool action:i64[2]");
  const Buffer b = Buffer::create(name, 5, 7, schema, {.max_learners = 4});
  const SegmentHeader& h = segment_of(b).header();
  CHECK(h.max_learners == 4);
  CHECK(b.max_learners() == 4);
  // The global section ends at 448 + 3 * 192 + 5 * 192 + 576 = 2560; three slots of 192 bytes, then their online
  // starts, 3 slots x 5 envs x 8 bytes.
  CHECK(h.sections[kSectionLearners].offset == 2560);
  CHECK(h.sections[kSectionLearners].bytes == 3 * 192 + 3 * 5 * 8);
  CHECK(reinterpret_cast<const std::byte*>(segment_of(b).learner_slot(1)) ==
        reinterpret_cast<const std::byte*>(&h) + 2560);
  CHECK(reinterpret_cast<const std::byte*>(segment_of(b).learner_online_starts(2)) ==
        reinterpret_cast<const std::byte*>(&h) + 2560 + 3 * 192 + 5 * 8);
  // Layout 1.8: every slot's statistics after the learner section, 2560 + 696 = 3256 rounded up to 3264; four
  // slots of 128 bytes, slot 0's first.
  CHECK(h.sections[kSectionLearnerStats].offset == 3264);
  CHECK(h.sections[kSectionLearnerStats].bytes == 4 * 128);
  for (uint64_t r = 0; r < 4; ++r) {
    CHECK(reinterpret_cast<const std::byte*>(segment_of(b).learner_stats(r)) ==
          reinterpret_cast<const std::byte*>(&h) + 3264 + r * 128);
  }
  CHECK(h.sections[kSectionData].offset == 4096);  // still the next page
  // One learner: an empty learner section, and slot 0's statistics right after the global section.
  const std::string one = test::unique_name("layout-one-learner");
  test::SegmentGuard guard_one(one);
  const Buffer c = Buffer::create(one, 5, 7, schema);
  const SegmentHeader& ch = segment_of(c).header();
  CHECK(ch.max_learners == 1);
  CHECK(ch.sections[kSectionLearners].bytes == 0);
  CHECK(ch.sections[kSectionLearners].offset == 0);
  CHECK(ch.sections[kSectionLearnerStats].offset == 2560);
  CHECK(ch.sections[kSectionLearnerStats].bytes == 128);
  CHECK(reinterpret_cast<const std::byte*>(segment_of(c).learner_stats(0)) ==
        reinterpret_cast<const std::byte*>(&ch) + 2560);
  CHECK(ch.sections[kSectionData].offset == 4096);
}

TEST_CASE("layout 1.2: the episode sections' structs, meta bits and codes are pinned") {
  CHECK(sizeof(EpisodeJournal) == 64);
  CHECK(alignof(EpisodeJournal) == 64);
  CHECK(offsetof(EpisodeJournal, for_head) == 0);
  CHECK(offsetof(EpisodeJournal, episode_start) == 8);
  CHECK(offsetof(EpisodeJournal, running_return) == 16);
  CHECK(offsetof(EpisodeJournal, episodes_completed) == 24);
  CHECK(offsetof(EpisodeJournal, last_first_step) == 32);
  CHECK(offsetof(EpisodeJournal, last_length) == 40);
  CHECK(offsetof(EpisodeJournal, last_return) == 48);
  CHECK(offsetof(EpisodeJournal, last_end) == 56);
  CHECK(sizeof(EpisodeControl) == 256);
  CHECK(alignof(EpisodeControl) == 64);
  CHECK(offsetof(EpisodeControl, journal) == 0);
  CHECK(offsetof(EpisodeControl, queue_tail) == 128);
  CHECK(offsetof(EpisodeControl, records_dropped) == 136);
  CHECK(offsetof(EpisodeControl, queue_head) == 192);
  CHECK(offsetof(EpisodeControl, queue_taker) == 200);        // 1.9
  CHECK(offsetof(EpisodeControl, records_delivered) == 208);  // 1.9
  CHECK(offsetof(EpisodeControl, records_lost) == 216);       // 1.9
  CHECK(sizeof(EpisodeRecordSlot) == 32);
  CHECK(offsetof(EpisodeRecordSlot, first_step) == 0);
  CHECK(offsetof(EpisodeRecordSlot, length) == 8);
  CHECK(offsetof(EpisodeRecordSlot, episode_return) == 16);
  CHECK(offsetof(EpisodeRecordSlot, end) == 24);
  CHECK(kMetaEndsEpisode == (1ull << 63));
  CHECK(kMetaTruncated == (1ull << 62));
  CHECK(kMetaStartMask == (1ull << 62) - 1);
  CHECK(kJournalWriting == ~0ull);
  CHECK(kDefaultEpisodeQueueCapacity == 128);
  CHECK(kMaxEpisodeQueueCapacity == (1ull << 24));
  CHECK(static_cast<int>(EpisodeEnd::none) == 0);
  CHECK(static_cast<int>(EpisodeEnd::done) == 1);
  CHECK(static_cast<int>(EpisodeEnd::terminated) == 2);
  CHECK(static_cast<int>(EpisodeEnd::truncated) == 3);
}

TEST_CASE("the owner lease packs pid and the low half of the start time into one word") {
  const uint64_t lease = pack_owner(4194303, 0x123456789abull);
  CHECK(owner_pid(lease) == 4194303);
  CHECK(owner_start_low(lease) == 0x456789abull);
  CHECK(pack_owner(1, 0) != 0);  // a held lease is never the "free" value
}

TEST_CASE("a created segment places its sections as the layout says") {
  const std::string name = test::unique_name("layout");
  test::SegmentGuard guard(name);
  const Schema schema = Schema::parse("obs:f32[3] done:bool action:i64[2]");
  const Buffer b = Buffer::create(name, 5, 7, schema);
  const SegmentHeader& h = segment_of(b).header();
  CHECK(h.magic == kMagic);
  CHECK(h.layout_major == kLayoutMajor);
  CHECK(h.layout_minor == kLayoutMinor);
  CHECK(h.header_bytes == sizeof(SegmentHeader));
  CHECK(h.num_sections == kSectionsUsed);
  CHECK(h.step_bytes == 12 + 1 + 16);
  // Field table right after the header; env table and global block on the next cache lines; data on the next
  // page.
  CHECK(h.sections[kSectionFields].offset == 448);
  CHECK(h.sections[kSectionFields].bytes == 3 * 192);
  CHECK(h.sections[kSectionEnvs].offset == 448 + 3 * 192);
  CHECK(h.sections[kSectionEnvs].bytes == 5 * 192);
  CHECK(h.sections[kSectionGlobal].offset == 448 + 3 * 192 + 5 * 192);
  CHECK(h.sections[kSectionGlobal].bytes == 576);
  CHECK(h.sections[kSectionData].offset == 4096);
  // Each field's storage is [5 envs][7 steps][bytes], 64-byte aligned, in schema order.
  const auto& offs = segment_of(b).field_offsets();
  REQUIRE(offs.size() == 3);
  CHECK(offs[0] == 4096);
  CHECK(offs[1] == 4096 + 448);           // 5*7*12 = 420, rounded up to 448
  CHECK(offs[2] == 4096 + 448 + 64);      // 5*7*1 = 35, rounded up to 64
  CHECK(h.sections[kSectionData].bytes == 448 + 64 + 5 * 7 * 16);
  CHECK(h.total_bytes == 8192);
  CHECK(b.total_bytes() == 8192);
  // Without episode fields the 1.2 sections are absent ({0, 0}), and no field has a role.
  CHECK(h.episode_queue_capacity == 0);
  for (const SectionIndex i : {kSectionEpisodes, kSectionStepMeta, kSectionEpisodeQueues}) {
    CHECK(h.sections[i].offset == 0);
    CHECK(h.sections[i].bytes == 0);
  }
  CHECK_FALSE(b.has_episodes());
  for (std::size_t i = kSectionsUsed; i < kMaxSections; ++i) {
    CHECK(h.sections[i].offset == 0);
    CHECK(h.sections[i].bytes == 0);
  }
}

TEST_CASE("a segment with episode fields places the episode sections after the data and records the roles") {
  const std::string name = test::unique_name("layout-ep");
  test::SegmentGuard guard(name);
  const Schema schema = Schema::parse("obs:f32[3] done:bool action:i64[2] reward:f32");
  const Buffer b = Buffer::create(name, 5, 7, schema, {.episodes = {.done = "done", .reward = "reward"}});
  const SegmentHeader& h = segment_of(b).header();
  CHECK(h.num_sections == 16);
  CHECK(h.episode_queue_capacity == 128);
  // Data: 448 + 64 + 576 (5*7*16 = 560 rounded) + 5*7*4 = 140 -> [4096, 5324); the episode sections follow, each
  // on a cache line.
  CHECK(h.sections[kSectionData].offset == 4096);
  CHECK(h.sections[kSectionData].bytes == 448 + 64 + 576 + 140);
  CHECK(h.sections[kSectionEpisodes].offset == 5376);
  CHECK(h.sections[kSectionEpisodes].bytes == 5 * 256);
  CHECK(h.sections[kSectionStepMeta].offset == 5376 + 1280);
  CHECK(h.sections[kSectionStepMeta].bytes == 5 * 7 * 8);
  CHECK(h.sections[kSectionEpisodeQueues].offset == 6656 + 320);  // 6656 + 280, rounded up to a cache line
  CHECK(h.sections[kSectionEpisodeQueues].bytes == 5 * 128 * 32);
  CHECK(h.total_bytes == 28672);  // 6976 + 20480 = 27456, rounded up to a page
  const auto* table = reinterpret_cast<const FieldDesc*>(reinterpret_cast<const std::byte*>(&h) +
                                                         h.sections[kSectionFields].offset);
  CHECK(table[0].role == kRoleNone);
  CHECK(table[1].role == kRoleDone);
  CHECK(table[2].role == kRoleNone);
  CHECK(table[3].role == kRoleReward);
  CHECK(b.has_episodes());
  CHECK(b.episode_fields().done == std::optional<std::size_t>(1));
  CHECK(b.episode_fields().reward == std::optional<std::size_t>(3));
  CHECK_FALSE(b.episode_fields().terminated);
  // A fresh env: journal slot 0 is the state for head 0, slot 1 holds nothing.
  CHECK(segment_of(b).episode_control(0).journal[0].for_head.load() == 0);
  CHECK(segment_of(b).episode_control(0).journal[1].for_head.load() == kJournalWriting);
}

TEST_CASE("a segment with priorities places one sum tree per env after the episode queues and records alpha") {
  const std::string name = test::unique_name("layout-prio");
  test::SegmentGuard guard(name);
  const Buffer b = Buffer::create(name, 3, 5, Schema::parse("x:u8"), {.priority_exponent = 0.5});
  const SegmentHeader& h = segment_of(b).header();
  CHECK(std::bit_cast<double>(h.priority_exponent_bits) == 0.5);
  CHECK(h.sections[kSectionPriorities].bytes == 3 * 2 * 8 * 8);  // leaves = bit_ceil(5) = 8, 2 x 8 words per env
  CHECK(h.sections[kSectionPriorities].offset % kCacheLineBytes == 0);
  CHECK(h.sections[kSectionPriorities].offset >= h.sections[kSectionData].offset + h.sections[kSectionData].bytes);
  CHECK(b.priority_leaves() == 8);
  CHECK(std::bit_cast<double>(segment_of(b).global_control().max_priority.load()) == 1.0);
  const std::string zero = test::unique_name("layout-prio0");
  test::SegmentGuard zero_guard(zero);
  const Buffer z = Buffer::create(zero, 1, 4, Schema::parse("x:u8"), {.priority_exponent = 0.0});
  CHECK(segment_of(z).header().priority_exponent_bits != 0);  // -0.0: alpha 0 is still "with priorities"
  CHECK(z.has_priorities());
  CHECK(Buffer::open(zero).priority_exponent() == 0.0);
  const std::string none = test::unique_name("layout-noprio");
  test::SegmentGuard none_guard(none);
  const Buffer n = Buffer::create(none, 1, 4, Schema::parse("x:u8"));
  CHECK(segment_of(n).header().priority_exponent_bits == 0);
  CHECK(segment_of(n).header().sections[kSectionPriorities].bytes == 0);
}

TEST_CASE("layout 1.6: a stacked field's frame rings never have the bytes of an unstacked field's storage, so a 1.5 "
          "library refuses the segment; the rings hold capacity + (K - 1)(1 + restarts) frames otherwise") {
  // A 1.5 library accepts a 1.6 segment (a newer minor version) and checks each field's data_bytes against
  // num_envs x capacity x step_bytes. The rings match that exactly when they hold K x capacity frames (restarts =
  // capacity - 1, or capacity 2 with one restart); then create makes one frame more, and the 1.5 check fails.
  struct Case {
    uint64_t capacity, restarts;  // restarts 0: the default, 1 + capacity / 128
    const char* spec;
    uint64_t frames;              // expected frames per env ring
  };
  const Case cases[] = {
      {2, 0, "obs:u8[4,3]:stack=0 r:f32", 2 * 4 + 1},    // default restarts 1: 2 + 3 x 2 = 8 = 4 x 2, one more
      {2, 0, "obs:u8[3,2]:stack=-1", 2 * 2 + 1},         // K = 2: 2 + 1 x 2 = 4 = 2 x 2, one more
      {8, 7, "obs:u16[2,4,5]:stack=1", 8 * 4 + 1},       // restarts = capacity - 1: 8 + 3 x 8 = 32, one more
      {8, 6, "obs:u16[2,4,5]:stack=1", 8 + 3 * 7},       // 29: as the formula says
      {8, 8, "obs:u16[2,4,5]:stack=1", 8 + 3 * 9},       // 35
      {300, 0, "obs:u8[4,2,2]:stack=0", 300 + 3 * 4},    // default restarts 1 + 300 / 128 = 3
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec);
    CAPTURE(c.capacity);
    CAPTURE(c.restarts);
    const std::string name = test::unique_name("layout-stack");
    test::SegmentGuard guard(name);
    const Schema schema = Schema::parse(c.spec);
    const Buffer b = Buffer::create(name, 3, c.capacity, schema, {.stack_restarts = c.restarts});
    const SegmentHeader& h = segment_of(b).header();
    const auto* table = reinterpret_cast<const FieldDesc*>(reinterpret_cast<const std::byte*>(&h) +
                                                           h.sections[kSectionFields].offset);
    const Field& f = schema[0];
    REQUIRE(f.stacked());
    CHECK(table[0].stack == *f.stack_axis + 1);
    CHECK(table[0].stack_frames == c.frames);
    CHECK(table[0].data_bytes == 3 * c.frames * f.frame_bytes());
    CHECK(table[0].data_bytes != 3 * c.capacity * table[0].step_bytes);  // what a 1.5 library requires
    REQUIRE(segment_of(b).stacks().size() == 1);
    CHECK(segment_of(b).stacks()[0].frames == c.frames);
    CHECK(segment_of(Buffer::open(name)).stacks()[0].frames == c.frames);  // and this library accepts it
  }
}
