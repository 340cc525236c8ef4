// lib/checkpoint/save.cpp: save_checkpoint, the file around the envs' windows: the temporary file (created with
// its final mode, locked, renamed over the path when complete, the directory synced), the meta block, one section
// per env (its records copied by save_env, save_env.cpp; its weights and queued episode records by
// save_env_extras, state.cpp), the trailer, and the header written last with the buffer-wide state. A chain's
// link (chain.cpp) is the same file with a LinkPlan. Who calls it: the CLI's `save`, programs
// that checkpoint their buffer (include/shmreplay/checkpoint.hpp has the format and the guarantees).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <bit>
#include <optional>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "checkpoint/packed_records.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/storage/cold_files.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {
namespace {

using checkpoint_format::CheckpointHeader;
using checkpoint_format::CheckpointTrailer;
using checkpoint_format::EnvSection;
using detail::struct_crc;

// The permission bits of a checkpoint of `b`: the segment's read/write bits for group and others, so that saving
// a private buffer gives a private file, and read/write for the owner, who must be able to load it back. Never
// execute, set-id or sticky bits, whatever the segment has.
mode_t checkpoint_mode(const Buffer& b) noexcept { return static_cast<mode_t>((b.mode() & 0066u) | 0600u); }

// Syncs the directory of `path`, so that the rename that put the file there survives a crash of the machine.
void sync_directory_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  detail::UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw_errno(errno, fmt::format("cannot open directory '{}' to sync checkpoint '{}'", dir, path));
  if (::fsync(fd.get()) != 0) throw_errno(errno, fmt::format("cannot sync directory '{}'", dir));
}

// What the checkpoint of `source` says of its source (everything but the envs, the sizes and the time).
CheckpointInfo source_info(const Buffer& source, const std::string& path) {
  CheckpointInfo info;
  info.path = path;
  info.save_started_ns = detail::realtime_ns();
  info.format_major = checkpoint_format::kFormatMajor;
  info.format_minor = checkpoint_format::kFormatMinor;
  info.source_name = source.name();
  info.source_layout_major = segment_of(source).header().layout_major;
  info.source_layout_minor = segment_of(source).header().layout_minor;
  info.source_creation_time_ns = segment_of(source).header().creation_time_ns;
  info.num_envs = source.num_envs();
  info.capacity = source.capacity();
  info.schema = source.schema();
  info.episode_fields = source.episode_fields();
  info.episode_queue_capacity = source.episode_queue_capacity();
  return info;
}

// The bytes of the records of every env's view now, less what a link skips: the save's progress total (the copies
// follow the writers).
uint64_t estimate_bytes(const Buffer& source, const detail::LinkPlan& link) {
  uint64_t estimate = 0;
  for (uint64_t e = 0; e < source.num_envs(); ++e) {
    const detail::StepRange r = detail::view_range(segment_of(source).env_control(e), View::replay, source.capacity());
    const uint64_t from = std::max(r.lo, e < link.envs.size() ? std::min(link.envs[e].skip_below, r.hi) : 0);
    estimate += (r.hi - from) * source.schema().step_bytes();
  }
  return estimate;
}

// Writes every env's section (its header, its records, its extras) from `offset` on; returns where they end.
uint64_t write_env_sections(const Buffer& source, detail::OutFile& out, uint64_t offset, CheckpointInfo& info,
                            detail::Progress& progress, const SaveOptions& options, const detail::LinkPlan& link) {
  const Schema& schema = source.schema();
  const uint64_t cap = source.capacity();
  const bool packed = !options.decode_compressed && !segment_of(source).packed().empty();
  const detail::RecordLayout layout = detail::record_layout(schema, packed);
  const uint64_t sb = layout.bytes;
  info.record_bytes = sb;
  // Chunks of about a MiB of steps as pushed (their records are fewer bytes when compressed fields are packed).
  std::vector<std::byte> staging(static_cast<std::size_t>(detail::block_steps(schema.step_bytes(), cap) * sb));
  for (uint64_t e = 0; e < source.num_envs(); ++e) {
    const detail::EnvCopyPlan plan = e < link.envs.size() ? link.envs[e] : detail::EnvCopyPlan{};
    const detail::SavedEnv saved = detail::save_env(source, e, out, offset + sizeof(EnvSection), staging, layout,
                                                    progress, options.max_rounds, plan);
    EnvSection s{};
    s.magic = checkpoint_format::kEnvMagic;
    s.env = e;
    s.first_step = saved.first_step;
    s.data_from = saved.data_from;
    s.records = saved.steps;
    s.head = saved.head();
    s.claimed = saved.claimed;
    s.online_start = saved.online_start;
    s.last_push_ns = saved.last_push_ns;
    s.update_seq = saved.update_seq;
    s.data_crc = saved.crc;
    s.frame_bytes = saved.frame_bytes;
    s.frame_crc = saved.frame_crc;
    const uint64_t extras_at = offset + sizeof s + saved.steps * sb + saved.frame_bytes;
    const uint64_t extra = detail::save_env_extras(source, e, saved, out, extras_at, s);
    s.header_crc = struct_crc(s, &EnvSection::header_crc);
    out.write_at(offset, &s, sizeof s);
    info.envs.push_back(detail::env_of(s, offset));
    offset = extras_at + extra;
    info.total_steps += saved.steps;
  }
  return offset;
}

// Format 2.1: learner slots 1.. (their counters, then their online starts per env) at `offset`; returns its CRC.
uint32_t write_learner_block(const CheckpointInfo& info, detail::OutFile& out, uint64_t offset) {
  std::vector<std::byte> block;
  for (const CheckpointLearnerSlot& slot : info.learner_slots) {
    checkpoint_format::LearnerSlotBytes b{};
    b.rows_sampled = slot.counters.rows_sampled;
    b.sample_calls = slot.counters.sample_calls;
    b.retries = slot.counters.retries;
    b.online_resets = slot.counters.online_resets;
    b.steps_updated = slot.counters.steps_updated;
    b.write_backs_applied = slot.counters.write_backs_applied;
    b.write_backs_refused = slot.counters.write_backs_refused;
    const auto* p = reinterpret_cast<const std::byte*>(&b);
    block.insert(block.end(), p, p + sizeof b);
  }
  for (const CheckpointLearnerSlot& slot : info.learner_slots) {
    const auto* p = reinterpret_cast<const std::byte*>(slot.online_starts.data());
    block.insert(block.end(), p, p + slot.online_starts.size() * sizeof(uint64_t));
  }
  out.write_at(offset, block.data(), block.size());
  return detail::crc32(0, block.data(), block.size());
}

// The sampling policies' words (2.2: policy versions and the sample cap; 2.3: the queue, initial and sequence
// priorities).
void put_sampling_words(const CheckpointInfo& info, CheckpointHeader& h) {
  h.policy_field = info.episode_fields.policy_version ? *info.episode_fields.policy_version + 1 : 0;
  h.policy_version = info.policy_version;
  h.policy_window = info.policy_max_staleness ? *info.policy_max_staleness + 1 : 0;
  h.max_times_sampled = info.max_times_sampled;
  h.consuming_queue = info.consuming_queue ? 1 : 0;
  h.queue_next_ticket = info.queue_next_ticket;
  // 0: the running maximum; a fixed 0 as -0.0, so that 0 bits mean "none" (as the segment's word).
  h.initial_priority_bits =
      info.initial_priority ? std::bit_cast<uint64_t>(*info.initial_priority == 0 ? -0.0 : *info.initial_priority) : 0;
  h.sequence_priority_length = info.sequence_priority_length;
  h.reanalyse_chunk = info.reanalyse_chunk.value_or(0);  // (2.4)
}

// The header of the finished file `info` (file_bytes, total_steps and the envs filled), whose meta block is `meta`.
CheckpointHeader make_header(const CheckpointInfo& info, const std::string& meta, uint64_t extra_bytes,
                             uint32_t learner_crc) {
  CheckpointHeader h{};
  h.magic = checkpoint_format::kMagic;
  h.format_major = info.format_major;
  h.format_minor = info.format_minor;
  h.header_bytes = sizeof h;
  h.file_bytes = info.file_bytes;
  h.num_envs = info.num_envs;
  h.capacity = info.capacity;
  h.num_fields = info.schema.size();
  h.step_bytes = info.schema.step_bytes();
  h.record_bytes = info.record_bytes == h.step_bytes ? 0 : info.record_bytes;
  h.total_records = info.total_steps;
  h.meta_bytes = meta.size();
  h.name_bytes = info.source_name.size();
  h.schema_bytes = meta.size() - info.source_name.size();
  const auto index = [](const std::optional<std::size_t>& i) {
    return i ? static_cast<uint32_t>(*i) : checkpoint_format::kNoField;
  };
  h.episode_done = index(info.episode_fields.done);
  h.episode_terminated = index(info.episode_fields.terminated);
  h.episode_truncated = index(info.episode_fields.truncated);
  h.episode_reward = index(info.episode_fields.reward);
  h.episode_queue_capacity = info.episode_queue_capacity;
  h.saved_time_ns = info.saved_time_ns;
  h.source_creation_time_ns = info.source_creation_time_ns;
  h.source_layout_major = info.source_layout_major;
  h.source_layout_minor = info.source_layout_minor;
  h.section_bytes = sizeof(EnvSection);
  h.chain_id = info.chain_id;
  h.link_seq = info.link_seq;
  h.save_started_ns = info.save_started_ns;
  h.stack_restarts = info.stack_restarts;
  h.expected_compression_bits = std::bit_cast<uint64_t>(info.expected_compression);
  put_sampling_words(info, h);
  h.stack_continuity = static_cast<uint64_t>(info.stack_continuity);
  // alpha = 0 as -0.0, as the segment stores it, so that 0 bits mean "no priorities".
  h.priority_exponent_bits =
      info.priority_exponent ? std::bit_cast<uint64_t>(*info.priority_exponent == 0 ? -0.0 : *info.priority_exponent) : 0;
  h.max_priority_bits = std::bit_cast<uint64_t>(info.max_priority);
  const CheckpointLimiter& l = info.limiter;
  h.limiter_enabled = l.limit ? 1 : 0;
  const RateLimit r = l.limit.value_or(RateLimit{0, 0, 0, 0});
  h.limiter_min_size = r.min_size_to_sample;
  h.limiter_spi_bits = std::bit_cast<uint64_t>(r.samples_per_insert);
  h.limiter_min_diff_bits = std::bit_cast<uint64_t>(r.min_diff);
  h.limiter_max_diff_bits = std::bit_cast<uint64_t>(r.max_diff);
  h.limiter_offset_bits = std::bit_cast<uint64_t>(l.error_offset);
  h.limiter_samples = l.samples;
  h.limiter_changes = l.changes;
  h.last_sample_ns = l.last_sample_ns;
  h.learner_limited = l.learner_limited;
  h.writers_limited = l.writers_limited;
  h.writer_timeouts = l.writer_timeouts;
  h.rows_sampled = info.learner.rows_sampled;
  h.sample_calls = info.learner.sample_calls;
  h.retries = info.learner.retries;
  h.online_resets = info.learner.online_resets;
  h.steps_updated = info.learner.steps_updated;
  h.write_backs_applied = info.learner.write_backs_applied;  // (2.4)
  h.write_backs_refused = info.learner.write_backs_refused;
  h.priority_updates = info.learner.priority_updates;
  h.priority_updates_dropped = info.learner.priority_updates_dropped;
  h.extra_bytes = extra_bytes;
  if (info.max_learners > 1) {  // format 2.1: the learner block (write_learner_block)
    h.max_learners = info.max_learners;
    h.learner_bytes = checkpoint_format::learner_block_bytes(info.max_learners, info.num_envs);
    h.learner_crc = learner_crc;
  }
  h.meta_crc = detail::crc32(0, meta.data(), meta.size());
  h.header_crc = struct_crc(h, &CheckpointHeader::header_crc);
  return h;
}

}  // namespace

CheckpointInfo save_checkpoint(const Buffer& source, const std::string& path, const SaveOptions& options) {
  return detail::write_checkpoint(source, path, options, {});
}

namespace detail {

CheckpointInfo write_checkpoint(const Buffer& source, const std::string& path, const SaveOptions& options,
                                const LinkPlan& link) {
  refuse_cold(segment_of(source), "save a checkpoint of", "checkpoints do not hold it yet");  // (1.11) the first slice of the cold tier
  detail::check_replaceable(path, options.force);
  detail::remove_stale_temporaries(path);
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format("{}.tmp-{}-{}", path, ::getpid(), counter.fetch_add(1));
  const mode_t mode = checkpoint_mode(source);
  detail::UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode));  // save_env reads back
  if (!fd) throw_errno(errno, fmt::format("cannot create checkpoint file '{}'", tmp));
  detail::TempFile guard(tmp);
  // Held until this process closes the file or dies: tells remove_stale_temporaries of other processes that the
  // file is in use even where they cannot judge this pid. (A failure only weakens that hint.)
  (void)::flock(fd.get(), LOCK_EX | LOCK_NB);
  // The umask may have narrowed the mode at creation; set it exactly before a byte of the buffer is written.
  if (::fchmod(fd.get(), mode) != 0) {
    throw_errno(errno, fmt::format("cannot set mode {:04o} on checkpoint file '{}'", mode, tmp));
  }
  if (options.temp_file_created) options.temp_file_created(tmp);
  detail::OutFile out(tmp, std::move(fd));

  CheckpointInfo info = source_info(source, path);
  info.chain_id = link.chain_id;
  info.link_seq = link.link_seq;
  const std::string meta = info.source_name + info.schema.to_string();
  out.write_at(sizeof(CheckpointHeader), meta.data(), meta.size());
  detail::Progress progress(options.progress, "saving", estimate_bytes(source, link));
  const uint64_t envs_at = sizeof(CheckpointHeader) + meta.size();
  uint64_t offset = write_env_sections(source, out, envs_at, info, progress, options, link);
  // The buffer-wide state as the save ends: its counts are at least those of every env's instant.
  read_source_state(source, info);
  const uint64_t extra_bytes =
      offset - envs_at - info.envs.size() * sizeof(EnvSection) - info.total_steps * info.record_bytes;
  const uint32_t learner_crc = write_learner_block(info, out, offset);
  offset += checkpoint_format::learner_block_bytes(info.max_learners, info.num_envs);
  CheckpointTrailer tr{};
  tr.magic = checkpoint_format::kTrailerMagic;
  tr.total_steps = info.total_steps;
  tr.record_bytes = info.total_steps * info.record_bytes;
  tr.trailer_crc = struct_crc(tr, &CheckpointTrailer::trailer_crc);
  out.write_at(offset, &tr, sizeof tr);
  offset += sizeof tr;

  info.file_bytes = offset;
  info.saved_time_ns = detail::realtime_ns();
  const CheckpointHeader h = make_header(info, meta, extra_bytes, learner_crc);
  out.write_at(0, &h, sizeof h);
  out.finish(offset);
  detail::check_replaceable(path, options.force);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    throw_errno(errno, fmt::format("cannot rename checkpoint file '{}' to '{}'", tmp, path));
  }
  guard.commit();
  sync_directory_of(path);
  progress.finish();
  return info;
}

}  // namespace detail

}  // namespace shmreplay
