// lib/counters.cpp: the counter table's rows (shmreplay/counters.hpp, counters.hpp). A row's order is the order of
// its family in `shmreplay metrics` and of its key in `info --json`; help texts are the families' HELP lines.
#include "counters.hpp"

#include "detail/protocol/journal.hpp"
#include "detail/protocol/walk.hpp"

#include <algorithm>
#include <vector>

namespace shmreplay::detail {
namespace {

using Type = CounterType;
constexpr auto kEpisodes = CounterPresence::episodes;
constexpr auto kCompressed = CounterPresence::compressed;
constexpr auto kPolicy = CounterPresence::policy;
constexpr auto kCaps = CounterPresence::caps;
constexpr auto kQueue = CounterPresence::queue;
constexpr auto kWalk = CounterPresence::walk;
constexpr auto kJournal = CounterPresence::journal;
constexpr auto kSince = CounterForm::since_ns;
constexpr auto kEnv = CounterScope::env;
constexpr auto kLearner = CounterScope::learner;

uint64_t relaxed(const std::atomic<uint64_t>& word) noexcept { return word.load(std::memory_order_relaxed); }

/// An EnvControl word, loaded as is.
template <std::atomic<uint64_t> layout::EnvControl::*Word>
uint64_t env_word(const EnvReading& r) noexcept {
  return relaxed(r.control.*Word);
}

/// An EpisodeControl word (0 in a buffer without episode fields).
template <std::atomic<uint64_t> layout::EpisodeControl::*Word>
uint64_t episode_word(const EnvReading& r) noexcept {
  return r.seg.has_episodes() ? relaxed(r.seg.episode_control(r.env).*Word) : 0;
}

/// A PackedEnvControl word summed over the compressed fields (0 without).
template <std::atomic<uint64_t> layout::PackedEnvControl::*Word>
uint64_t packed_sum(const EnvReading& r) noexcept {
  uint64_t v = 0;
  for (std::size_t p = 0; p < r.seg.packed().size(); ++p) v += relaxed(r.seg.packed_control(p, r.env).*Word);
  return v;
}

/// The compressed fields' frames as pushed, in bytes: each field's frames times its frame's bytes.
uint64_t packed_frame_bytes(const EnvReading& r) noexcept {
  uint64_t v = 0;
  for (std::size_t p = 0; p < r.seg.packed().size(); ++p) {
    v += relaxed(r.seg.packed_control(p, r.env).frames) * r.seg.packed()[p].stack.frame_bytes;
  }
  return v;
}

/// Steps the byte budget made leave the view: the field that lost most (each field counts the steps its own
/// records' overwrites took; a step two fields lost is one step).
uint64_t packed_budget_lost(const EnvReading& r) noexcept {
  uint64_t v = 0;
  for (std::size_t p = 0; p < r.seg.packed().size(); ++p) {
    v = std::max(v, relaxed(r.seg.packed_control(p, r.env).budget_lost));
  }
  return v;
}

/// A PolicyEnv word (layout 1.11; every buffer has the section).
template <std::atomic<uint64_t> layout::PolicyEnv::*Word>
uint64_t policy_word(const EnvReading& r) noexcept {
  return relaxed(r.seg.policy_env(r.env).*Word);
}

/// The env's newest policy version, 0 before its first versioned step.
uint64_t policy_newest(const EnvReading& r) noexcept {
  const uint64_t v = relaxed(r.seg.policy_env(r.env).newest);
  return v == layout::kNoPolicyVersion ? 0 : v;
}

/// A QueueEnv word (0 in a buffer that is not a consuming queue).
template <std::atomic<uint64_t> layout::QueueEnv::*Word>
uint64_t queue_word(const EnvReading& r) noexcept {
  return r.seg.consuming_queue() ? relaxed(r.seg.queue_env(r.env).*Word) : 0;
}

/// A WalkEnv word (0 in a buffer without a reanalyse walk).
template <std::atomic<uint64_t> layout::WalkEnv::*Word>
uint64_t walk_word(const EnvReading& r) noexcept {
  return r.seg.reanalyse_chunk() != 0 ? relaxed(r.seg.walk_env(r.env).*Word) : 0;
}

/// The env's stored full chunks' steps in target-version age bucket `Bucket` (walk_age_steps; 0 without a walk).
template <std::size_t Bucket>
uint64_t walk_age(const EnvReading& r) noexcept {
  return r.seg.reanalyse_chunk() != 0 ? walk_age_steps(r.seg, r.env)[Bucket] : 0;
}

/// A PolicyLearner word of the slot.
template <std::atomic<uint64_t> layout::PolicyLearner::*Word>
const std::atomic<uint64_t>& policy_learner_word(const LearnerSlotReadWords& w) noexcept {
  return w.policy.*Word;
}

/// A LearnerStats word of the slot.
template <std::atomic<uint64_t> layout::LearnerStats::*Word>
const std::atomic<uint64_t>& stats_word(const LearnerSlotReadWords& w) noexcept {
  return w.stats.*Word;
}

uint64_t flag(bool b) noexcept { return b ? 1 : 0; }

/// Steps the env published that the journal's newest durable link lacks.
uint64_t journal_pending(const EnvReading& r) noexcept {
  const uint64_t durable = journal_durable_head(r.seg, r.env);
  return r.replay.hi > durable ? r.replay.hi - durable : 0;
}

// clang-format off
const EnvCounterRow kEnvRows[] = {
    {{"head", "shmreplay_steps_published_total", Type::counter, "steps",
      "Steps the env's writers published since creation"},
     [](const EnvReading& r) noexcept { return r.replay.hi; }, &EnvInfo::head, &SegmentInfo::total_pushed},
    {{"claimed", "", Type::gauge, "steps", "Steps whose write has begun (head + 1 while a write is in progress)"},
     [](const EnvReading& r) noexcept { return relaxed(r.control.claimed) & layout::kClaimMask; }, &EnvInfo::claimed},
    {{"online_start", "", Type::gauge, "steps", "Head at learner slot 0's last reset of the online queue"},
     env_word<&layout::EnvControl::online_start>, &EnvInfo::online_start},
    {{"length", "shmreplay_steps_stored", Type::gauge, "steps", "Steps of the env in the replay view (sampleable now)"},
     [](const EnvReading& r) noexcept { return r.replay.hi - r.replay.lo; }, &EnvInfo::length,
     &SegmentInfo::replay_steps},
    {{"online_length", "shmreplay_online_steps", Type::gauge, "steps", "Steps of the env in the online view"},
     [](const EnvReading& r) noexcept { return r.online.hi - r.online.lo; }, &EnvInfo::online_length,
     &SegmentInfo::online_steps},
    {{"stacks_intact_from", "", Type::gauge, "steps", "The oldest step whose stacked fields' frames are intact"},
     env_word<&layout::EnvControl::stacks_intact_from>, &EnvInfo::stacks_intact_from},
    {{"episodes_completed", "shmreplay_episodes_completed_total", Type::counter, "episodes",
      "Episodes of the env whose last step was published (buffers with episode fields)", kEnv, kEpisodes},
     [](const EnvReading& r) noexcept { return r.journal.episodes_completed; }, &EnvInfo::episodes_completed,
     &SegmentInfo::episodes_completed},
    {{"episode_records_dropped", "shmreplay_episode_records_dropped_total", Type::counter, "records",
      "Completed-episode records lost because the env's queue was full (buffers with episode fields)", kEnv,
      kEpisodes},
     episode_word<&layout::EpisodeControl::records_dropped>, &EnvInfo::episode_records_dropped,
     &SegmentInfo::episode_records_dropped},
    {{"episode_records_lost", "shmreplay_episode_records_lost_total", Type::counter, "records",
      "Completed-episode records a learner took from the env's queue and never handed to its caller: it was killed "
      "inside pop_episodes (buffers with episode fields)", kEnv, kEpisodes},
     [](const EnvReading& r) noexcept { return r.queue.lost; }, &EnvInfo::episode_records_lost,
     &SegmentInfo::episode_records_lost},
    {{"episode_queue_depth", "shmreplay_episode_queue_depth", Type::gauge, "records",
      "Completed-episode records waiting for the learner", kEnv, kEpisodes},
     [](const EnvReading& r) noexcept { return r.queue.depth; }, &EnvInfo::episode_queue_depth,
     &SegmentInfo::episode_queue_depth},
    {{"episode_start", "", Type::gauge, "steps", "First step of the episode in progress"},
     [](const EnvReading& r) noexcept { return r.journal.episode_start; }, &EnvInfo::episode_start},
    {{"lease_held", "shmreplay_env_lease_held", Type::gauge, "0 or 1",
      "1 while a writer holds the env's lease (alive or dead), 0 when none does", kEnv, {}, {}, false},
     [](const EnvReading& r) noexcept { return flag(r.info.owner != OwnerState::none); }},
    {{"writer_alive", "shmreplay_env_writer_alive", Type::gauge, "0 or 1",
      "1 when the env's lease holder runs, 0 when it died or none", kEnv, {}, {}, false},
     [](const EnvReading& r) noexcept { return flag(r.info.owner == OwnerState::alive); }},
    {{"lease_since_ns", "shmreplay_env_lease_age_seconds", Type::gauge, "ns",
      "Seconds since the env's lease holder took it (held only)", kEnv, {}, kSince},
     [](const EnvReading& r) noexcept { return r.lease == 0 ? 0 : relaxed(r.control.lease_since_ns); },
     &EnvInfo::lease_since_ns},
    {{"lease_takeovers", "shmreplay_env_lease_takeovers_total", Type::counter, "leases",
      "Dead writers' leases of the env taken over"},
     env_word<&layout::EnvControl::lease_takeovers>, &EnvInfo::lease_takeovers},
    {{"update_lock_dead", "shmreplay_env_update_lock_dead", Type::gauge, "0 or 1",
      "1 when the env's update lock names a learner that died holding it (repaired at the next touch)", kEnv, {}, {},
      false},
     [](const EnvReading& r) noexcept { return flag(r.info.update_lock == OwnerState::dead); }},
    {{"steps_lost_to_dead_updates", "shmreplay_env_steps_lost_to_dead_updates_total", Type::counter, "steps",
      "Steps that left the env's view because a learner died rewriting one of them"},
     env_word<&layout::EnvControl::steps_lost_to_dead_updates>, &EnvInfo::steps_lost_to_dead_updates},
    {{"stack_flagless_restarts", "shmreplay_env_stack_flagless_restarts_total", Type::counter, "steps",
      "Steps whose stack the episodes rule's spot check found restarted without a flag"},
     env_word<&layout::EnvControl::stack_flagless_restarts>, &EnvInfo::stack_flagless_restarts},
    {{"last_push_ns", "shmreplay_env_last_push_age_seconds", Type::gauge, "ns",
      "Seconds since the env's last push (pushed envs only)", kEnv, {}, kSince},
     env_word<&layout::EnvControl::last_push_ns>, &EnvInfo::last_push_ns},
    {{"stored_bytes", "shmreplay_env_stored_bytes", Type::gauge, "bytes",
      "Bytes the env's replay view occupies in the segment's step storage, each storage kind's share", kEnv, {}, {},
      true, "STORED"},
     [](const EnvReading& r) noexcept { return r.storages.stored_bytes(r.seg, r.env, r.replay.lo, r.replay.hi); },
     nullptr, &SegmentInfo::stored_bytes},
    // Compressed fields (layout 1.10; docs/design/compression.md): the writers' counters, summed over the fields.
    {{"compressed_frames", "shmreplay_env_compressed_frames_total", Type::counter, "frames",
      "Frames the env's writers stored in its compressed fields since creation (a continuing stack adds one a step)",
      kEnv, kCompressed},
     packed_sum<&layout::PackedEnvControl::frames>},
    {{"compressed_frame_bytes", "shmreplay_env_compressed_frame_bytes_total", Type::counter, "bytes",
      "Bytes of those frames as pushed", kEnv, kCompressed},
     packed_frame_bytes},
    {{"compressed_record_bytes", "shmreplay_env_compressed_record_bytes_total", Type::counter, "bytes",
      "Bytes of their records: compressed, or as pushed where the codec did not shrink a frame", kEnv, kCompressed},
     packed_sum<&layout::PackedEnvControl::record_bytes>},
    {{"compressed_raw_frames", "shmreplay_env_compressed_raw_frames_total", Type::counter, "frames",
      "Frames stored as pushed because the codec did not shrink them", kEnv, kCompressed},
     packed_sum<&layout::PackedEnvControl::raw_frames>},
    {{"steps_lost_to_budget", "shmreplay_env_steps_lost_to_budget_total", Type::counter, "steps",
      "Steps that left the env's view because its compressed frames outgrew their byte budget before the steps' "
      "slots were reclaimed", kEnv, kCompressed, {}, true, "LOST TO BUDGET"},
     packed_budget_lost, &EnvInfo::steps_lost_to_budget, &SegmentInfo::steps_lost_to_budget},
    {{"policy_version", "shmreplay_env_policy_version", Type::gauge, "version",
      "The policy version of the env's newest step (0 before any)", kEnv, kPolicy, {}, true, "VERSION"},
     policy_newest},
    {{"policy_held_pushes", "shmreplay_env_policy_held_pushes_total", Type::counter, "calls",
      "Push calls of the env that the policy window held back (its writer's version was too old)", kEnv, kPolicy, {},
      true, "HELD"},
     policy_word<&layout::PolicyEnv::held_pushes>},
    {{"policy_held_ns", "", Type::counter, "ns", "Nanoseconds those pushes waited, in total", kEnv, kPolicy},
     policy_word<&layout::PolicyEnv::held_ns>},
    {{"policy_held_since_ns", "", Type::gauge, "ns",
      "CLOCK_REALTIME when the env's writer began to be held back by the policy window (0: not held)", kEnv, kPolicy,
      kSince},
     policy_word<&layout::PolicyEnv::held_since_ns>},
    {{"policy_timeouts", "shmreplay_env_policy_timeouts_total", Type::counter, "calls",
      "Held push calls of the env that gave up at their timeout", kEnv, kPolicy},
     policy_word<&layout::PolicyEnv::timeouts>},
    {{"queue_frontier", "", Type::gauge, "steps",
      "Every step of the env below it was delivered by the consuming queue (a lower bound)", kEnv, kQueue},
     queue_word<&layout::QueueEnv::frontier>},
    {{"queue_blocked_pushes", "shmreplay_env_queue_blocked_pushes_total", Type::counter, "calls",
      "Push calls of the env that waited for a step not yet delivered to leave its ring slot (the queue was full)",
      kEnv, kQueue, {}, true, "BLOCKED"},
     queue_word<&layout::QueueEnv::blocked_pushes>},
    {{"queue_blocked_ns", "", Type::counter, "ns", "Nanoseconds those pushes waited, in total", kEnv, kQueue},
     queue_word<&layout::QueueEnv::blocked_ns>},
    {{"queue_blocked_since_ns", "", Type::gauge, "ns",
      "CLOCK_REALTIME when the env's writer began to wait for the queue (0: not waiting)", kEnv, kQueue, kSince},
     queue_word<&layout::QueueEnv::blocked_since_ns>},
    {{"queue_timeouts", "shmreplay_env_queue_timeouts_total", Type::counter, "calls",
      "Blocked push calls of the env that gave up at their timeout", kEnv, kQueue},
     queue_word<&layout::QueueEnv::timeouts>},
    // The reanalyse walk (layout 1.11; docs/design/reanalyse.md).
    {{"walk_handed", "shmreplay_env_walk_handed_total", Type::counter, "chunks",
      "Hand-outs of the env's chunks to a worker (a chunk given back and handed again counts again): completed + "
      "stale + given back + rehanded + held now",
      kEnv, kWalk, {}, true, "HANDED"},
     walk_word<&layout::WalkEnv::handed>},
    {{"walk_completed", "shmreplay_env_walk_completed_total", Type::counter, "chunks",
      "Chunks of the env a worker completed (their target version recorded)", kEnv, kWalk, {}, true, "REANALYSED"},
     walk_word<&layout::WalkEnv::completed>},
    {{"walk_rehanded", "shmreplay_env_walk_rehanded_total", Type::counter, "chunks",
      "Chunks of the env whose worker died holding them, given back to be handed again", kEnv, kWalk},
     walk_word<&layout::WalkEnv::rehanded>},
    {{"walk_stale", "shmreplay_env_walk_stale_total", Type::counter, "chunks",
      "Completions refused because writers had overwritten every step of the chunk", kEnv, kWalk},
     walk_word<&layout::WalkEnv::stale>},
    {{"walk_given_back", "shmreplay_env_walk_given_back_total", Type::counter, "chunks",
      "Hand-outs of the env's chunks a live worker let go unrecorded (give_back, or its Reanalyser closed)", kEnv,
      kWalk},
     walk_word<&layout::WalkEnv::given_back>},
    {{"walk_steps_never", "shmreplay_env_walk_steps_never", Type::gauge, "steps",
      "Steps of the env's stored full chunks never reanalysed", kEnv, kWalk},
     walk_age<0>},
    {{"walk_steps_age_0", "shmreplay_env_walk_steps_age_0", Type::gauge, "steps",
      "Steps of the env's stored full chunks whose target version is the newest completed one", kEnv, kWalk},
     walk_age<1>},
    {{"walk_steps_age_1", "shmreplay_env_walk_steps_age_1", Type::gauge, "steps",
      "Steps of the env's stored full chunks one target version behind the newest", kEnv, kWalk},
     walk_age<2>},
    {{"walk_steps_age_2_3", "shmreplay_env_walk_steps_age_2_3", Type::gauge, "steps",
      "Steps of the env's stored full chunks 2 to 3 target versions behind the newest", kEnv, kWalk},
     walk_age<3>},
    {{"walk_steps_age_4_7", "shmreplay_env_walk_steps_age_4_7", Type::gauge, "steps",
      "Steps of the env's stored full chunks 4 to 7 target versions behind the newest", kEnv, kWalk},
     walk_age<4>},
    {{"walk_steps_age_8_up", "shmreplay_env_walk_steps_age_8_up", Type::gauge, "steps",
      "Steps of the env's stored full chunks 8 or more target versions behind the newest", kEnv, kWalk},
     walk_age<5>},
    // The journal (layout 1.11; docs/design/journal.md): how far the env is durable.
    {{"journal_durable_head", "shmreplay_env_journal_durable_steps", Type::gauge, "steps",
      "Steps of the env in the journal's newest durable link: every step below it survives a crash", kEnv, kJournal},
     [](const EnvReading& r) noexcept { return journal_durable_head(r.seg, r.env); }},
    {{"journal_pending_steps", "shmreplay_env_journal_pending_steps", Type::gauge, "steps",
      "Steps the env published that no durable link of the journal holds yet", kEnv, kJournal, {}, true,
      "NOT DURABLE"},
     journal_pending},
};

const LearnerCounterRow kLearnerRows[] = {
    {{"rows_sampled", "shmreplay_learner_rows_sampled_total", Type::counter, "rows",
      "Rows returned by the learner slot's sample calls", kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.rows_sampled; }, nullptr,
     &LearnerInfo::rows_sampled, LearnerTotal::sum, &CheckpointLearner::rows_sampled},
    {{"sample_calls", "shmreplay_learner_sample_calls_total", Type::counter, "calls",
      "Sample calls and peeks of the learner slot", kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.sample_calls; }, nullptr,
     &LearnerInfo::sample_calls, LearnerTotal::sum, &CheckpointLearner::sample_calls},
    {{"retries", "shmreplay_learner_sample_retries_total", Type::counter, "rows",
      "Rows the learner slot redrew because a writer overwrote them during the copy (torn reads)", kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.retries; }, nullptr,
     &LearnerInfo::retries, LearnerTotal::sum, &CheckpointLearner::retries},
    {{"online_resets", "shmreplay_learner_online_resets_total", Type::counter, "calls",
      "Online-queue resets by the learner slot", kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.online_resets; }, nullptr,
     &LearnerInfo::online_resets, LearnerTotal::sum, &CheckpointLearner::online_resets},
    {{"steps_updated", "shmreplay_learner_steps_updated_total", Type::counter, "steps",
      "Steps rewritten by the learner slot", kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.steps_updated; }, nullptr,
     &LearnerInfo::steps_updated, LearnerTotal::sum, &CheckpointLearner::steps_updated},
    {{"write_backs_applied", "shmreplay_learner_write_backs_applied_total", Type::counter, "rows",
      "Rows the learner slot's write_back calls rewrote (derived fields of the steps their handles name)", kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.write_backs_applied; },
     nullptr, nullptr, LearnerTotal::sum, &CheckpointLearner::write_backs_applied},
    {{"write_backs_refused", "shmreplay_learner_write_backs_refused_total", Type::counter, "rows",
      "Rows the learner slot's write_back calls refused: their step was overwritten (or left the view) since, or a "
      "checkpoint was loaded into the buffer since",
      kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.write_backs_refused; },
     nullptr, nullptr, LearnerTotal::sum, &CheckpointLearner::write_backs_refused},
    {{"takeovers", "shmreplay_learner_takeovers_total", Type::counter, "leases", "Dead learners of the slot replaced",
      kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.lease.takeovers; }, nullptr,
     &LearnerInfo::takeovers},
    {{"lease_held", "shmreplay_learner_lease_held", Type::gauge, "0 or 1",
      "1 while a learner holds the slot (alive or dead), 0 when none", kLearner, {}, {}, false},
     nullptr, [](const LearnerReading& r) noexcept { return flag(r.info.state != OwnerState::none); }, nullptr,
     LearnerTotal::named_slot},
    {{"alive", "shmreplay_learner_alive", Type::gauge, "0 or 1",
      "1 when the slot's learner runs, 0 when it died or none", kLearner, {}, {}, false},
     nullptr, [](const LearnerReading& r) noexcept { return flag(r.info.state == OwnerState::alive); }, nullptr,
     LearnerTotal::named_slot},
    {{"since_ns", "shmreplay_learner_lease_age_seconds", Type::gauge, "ns",
      "Seconds since the slot's learner attached (held only)", kLearner, {}, kSince},
     nullptr, [](const LearnerReading& r) noexcept { return r.lease == 0 ? 0 : relaxed(r.words.lease.since_ns); },
     &LearnerInfo::since_ns, LearnerTotal::named_slot},
    {{"waiters", "shmreplay_learner_waiting", Type::gauge, "learners",
      "Learners of the slot blocked now in wait() or on the rate limiter", kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.waiters; }, nullptr,
     &LearnerInfo::waiters},
    {{"waiting_rows", "shmreplay_learner_waiting_rows", Type::gauge, "rows",
      "Rows of the slot's sample call waiting for the rate limiter", kLearner},
     [](const LearnerSlotReadWords& w) noexcept -> const std::atomic<uint64_t>& { return w.waiting_rows; }, nullptr,
     &LearnerInfo::waiting_rows},
    {{"limiter_timeouts", "", Type::counter, "calls",
      "Sample calls the rate limiter held back that gave up at their timeout", kLearner},
     stats_word<&layout::LearnerStats::limiter_timeouts>, nullptr, &LearnerInfo::limiter_timeouts},
    // The histogram's count, at least its buckets' sum (read before the rows), so that a read is always whole.
    {{"age_rows", "", Type::counter, "rows", "Rows whose age was counted (the age histogram's count)", kLearner},
     nullptr,
     [](const LearnerReading& r) noexcept {
       uint64_t bucketed = 0;
       for (const uint64_t n : r.info.age_buckets) bucketed += n;
       return std::max(relaxed(r.words.stats.age_rows), bucketed);
     },
     &LearnerInfo::age_rows},
    {{"age_sum_steps", "", Type::counter, "steps", "The sum of the counted rows' ages", kLearner},
     stats_word<&layout::LearnerStats::age_sum_steps>, nullptr, &LearnerInfo::age_sum_steps},
    {{"version_age_rows", "shmreplay_learner_version_age_rows_total", Type::counter, "rows",
      "Rows sampled with a policy window whose version age was counted", kLearner, kPolicy},
     policy_learner_word<&layout::PolicyLearner::rows>, nullptr},
    {{"version_age_sum", "shmreplay_learner_version_age_sum_total", Type::counter, "versions",
      "The sum of those rows' version ages (current version - the row's first step's version)", kLearner, kPolicy},
     policy_learner_word<&layout::PolicyLearner::age_sum>, nullptr},
    {{"cap_claimed", "shmreplay_learner_cap_claimed_total", Type::counter, "rows",
      "Deliveries the slot claimed against the sample cap (rows returned, each start's count raised once)", kLearner,
      kCaps},
     nullptr, [](const LearnerReading& r) noexcept { return r.info.cap_claimed; }, &LearnerInfo::cap_claimed},
    {{"cap_rejected", "shmreplay_learner_cap_rejected_total", Type::counter, "rows",
      "Rows the slot drew again because their start had been sampled max_times_sampled times (or overwritten)",
      kLearner, kCaps},
     nullptr, [](const LearnerReading& r) noexcept { return r.info.cap_rejected; }, &LearnerInfo::cap_rejected},
    {{"cap_retired", "shmreplay_learner_cap_retired_total", Type::counter, "steps",
      "Steps whose last allowed delivery the slot claimed (they left the views)", kLearner, kCaps},
     nullptr, [](const LearnerReading& r) noexcept { return r.info.cap_retired; }, &LearnerInfo::cap_retired},
    {{"queue_delivered", "shmreplay_learner_queue_delivered_total", Type::counter, "rows",
      "Rows the slot's consuming calls delivered (each step of a consuming queue once, over every slot)", kLearner,
      kQueue},
     nullptr, [](const LearnerReading& r) noexcept { return r.info.queue_delivered; }, &LearnerInfo::queue_delivered},
    {{"queue_refused", "shmreplay_learner_queue_refused_total", Type::counter, "rows",
      "Claims the slot's consuming calls lost to another learner's claim of the same step", kLearner, kQueue},
     nullptr, [](const LearnerReading& r) noexcept { return r.info.queue_refused; }, &LearnerInfo::queue_refused},
    {{"queue_waits", "shmreplay_learner_queue_waits_total", Type::counter, "calls",
      "Consuming calls that waited because fewer steps were free than their rows", kLearner, kQueue},
     nullptr, [](const LearnerReading& r) noexcept { return r.info.queue_waits; }, &LearnerInfo::queue_waits},
    {{"queue_returned", "shmreplay_learner_queue_returned_total", Type::counter, "rows",
      "Claims given back undelivered: calls that could not fill their batch, and the calls of the slot's learners "
      "killed before their commit", kLearner, kQueue},
     nullptr, [](const LearnerReading& r) noexcept { return r.info.queue_returned; }, &LearnerInfo::queue_returned},
};
// clang-format on

template <class Rows>
std::vector<Counter> described(const Rows& rows) {
  std::vector<Counter> out;
  for (const auto& r : rows) out.push_back(r.row);
  return out;
}

}  // namespace

std::span<const EnvCounterRow> env_counter_rows() noexcept { return kEnvRows; }
std::span<const LearnerCounterRow> learner_counter_rows() noexcept { return kLearnerRows; }

void fill_env_counters(const EnvReading& r, EnvInfo& info, SegmentInfo& totals) {
  info.counters.clear();
  info.counters.reserve(std::size(kEnvRows));
  for (const EnvCounterRow& row : kEnvRows) {
    const uint64_t v = row.read(r);
    info.counters.push_back(v);
    if (row.field != nullptr) info.*row.field = v;
    if (row.total != nullptr) totals.*row.total += v;
  }
}

void fill_learner_counters(const LearnerReading& r, LearnerInfo& info) {
  info.counters.clear();
  info.counters.reserve(std::size(kLearnerRows));
  for (const LearnerCounterRow& row : kLearnerRows) {
    const uint64_t v = row.word != nullptr ? relaxed(row.word(r.words)) : row.derive(r);
    info.counters.push_back(v);
    if (row.field != nullptr) info.*row.field = v;
  }
}

void sum_learner_counters(std::span<const LearnerInfo> slots, LearnerInfo& all) {
  all.counters.resize(std::size(kLearnerRows), 0);  // a LearnerInfo{} when no slot is held
  for (std::size_t k = 0; k < std::size(kLearnerRows); ++k) {
    const LearnerCounterRow& row = kLearnerRows[k];
    if (row.total != LearnerTotal::sum) continue;  // the named slot's, which `all` copies
    uint64_t v = 0;
    for (const LearnerInfo& l : slots) v += l.counters[k];
    all.counters[k] = v;
    if (row.field != nullptr) all.*row.field = v;
  }
}

void save_learner_counters(const LearnerSlotReadWords& words, CheckpointLearner& out) noexcept {
  for (const LearnerCounterRow& row : kLearnerRows) {
    if (row.saved != nullptr) out.*row.saved = relaxed(row.word(words));
  }
}

void load_learner_counters(const CheckpointLearner& saved, const LearnerSlotWords& words) noexcept {
  const LearnerSlotReadWords read = words.read();
  for (const LearnerCounterRow& row : kLearnerRows) {
    // The row names the word read-only; `words` is the writable view of the same slot (a writable mapping, the
    // load holds the slot's lease), so the word may be stored to.
    if (row.saved != nullptr) {
      const_cast<std::atomic<uint64_t>&>(row.word(read)).store(saved.*row.saved, std::memory_order_relaxed);
    }
  }
}

}  // namespace shmreplay::detail

namespace shmreplay {

std::span<const Counter> counters(CounterScope scope) {
  static const std::vector<Counter> env = detail::described(detail::kEnvRows);
  static const std::vector<Counter> learner = detail::described(detail::kLearnerRows);
  switch (scope) {
    case CounterScope::env: return env;
    case CounterScope::learner: return learner;
    default: return {};
  }
}

std::optional<std::size_t> counter_index(CounterScope scope, std::string_view name) {
  const std::span<const Counter> rows = counters(scope);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (rows[k].name == name) return k;
  }
  return std::nullopt;
}

}  // namespace shmreplay
