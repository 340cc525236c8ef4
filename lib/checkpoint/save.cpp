// lib/checkpoint/save.cpp: save_checkpoint, the file around the envs' windows: the temporary file (created with
// its final mode, locked, renamed over the path when complete), the meta block, one section per env (copied by
// save_env, save_env.cpp), the trailer, and the header written last. Who calls it: the CLI's `save`, programs
// that checkpoint their buffer (include/shmreplay/checkpoint.hpp has the format and the guarantees).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <optional>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/seqlock.hpp"
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

// What the checkpoint of `source` says of its source (everything but the envs, the sizes and the time).
CheckpointInfo source_info(const Buffer& source, const std::string& path) {
  CheckpointInfo info;
  info.path = path;
  info.format_major = checkpoint_format::kFormatMajor;
  info.format_minor = checkpoint_format::kFormatMinor;
  info.source_name = source.name();
  info.source_layout_major = source.segment().header().layout_major;
  info.source_layout_minor = source.segment().header().layout_minor;
  info.source_creation_time_ns = source.segment().header().creation_time_ns;
  info.num_envs = source.num_envs();
  info.capacity = source.capacity();
  info.schema = source.schema();
  info.episode_fields = source.episode_fields();
  info.episode_queue_capacity = source.episode_queue_capacity();
  return info;
}

// The bytes of the records of every env's view now: the save's progress total (the copies follow the writers).
uint64_t estimate_bytes(const Buffer& source) {
  uint64_t estimate = 0;
  for (uint64_t e = 0; e < source.num_envs(); ++e) {
    const detail::StepRange r = detail::view_range(source.segment().env_control(e), View::replay, source.capacity());
    estimate += (r.hi - r.lo) * source.schema().step_bytes();
  }
  return estimate;
}

// Writes every env's section (its header, then its window's records) from `offset` on; returns where they end.
uint64_t write_env_sections(const Buffer& source, detail::OutFile& out, uint64_t offset, CheckpointInfo& info,
                            detail::Progress& progress, uint32_t max_rounds) {
  const Schema& schema = source.schema();
  const uint64_t sb = schema.step_bytes();
  const uint64_t cap = source.capacity();
  const std::vector<uint64_t> offsets = detail::record_field_offsets(schema);
  std::vector<std::byte> staging(static_cast<std::size_t>(detail::block_steps(sb, cap) * sb));
  for (uint64_t e = 0; e < source.num_envs(); ++e) {
    const detail::SavedEnv saved =
        detail::save_env(source, e, out, offset + sizeof(EnvSection), staging, offsets, progress, max_rounds);
    EnvSection s{};
    s.magic = checkpoint_format::kEnvMagic;
    s.env = e;
    s.first_step = saved.first_step;
    s.steps = saved.steps;
    s.head = saved.first_step + saved.steps;
    s.claimed = saved.claimed;
    s.online_start = saved.online_start;
    s.last_push_ns = saved.last_push_ns;
    s.data_crc = saved.crc;
    s.header_crc = struct_crc(s, &EnvSection::header_crc);
    out.write_at(offset, &s, sizeof s);
    info.envs.push_back(
        {e, s.first_step, s.steps, s.head, s.claimed, s.online_start, s.last_push_ns, offset, s.data_crc});
    offset += sizeof s + saved.steps * sb;
    info.total_steps += saved.steps;
  }
  return offset;
}

// The header of the finished file `info` (file_bytes, total_steps and the envs filled), whose meta block is `meta`.
CheckpointHeader make_header(const CheckpointInfo& info, const std::string& meta) {
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
  h.total_steps = info.total_steps;
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
  h.meta_crc = detail::crc32(0, meta.data(), meta.size());
  h.header_crc = struct_crc(h, &CheckpointHeader::header_crc);
  return h;
}

}  // namespace

CheckpointInfo save_checkpoint(const Buffer& source, const std::string& path, const SaveOptions& options) {
  detail::check_replaceable(path, options.force);
  detail::remove_stale_temporaries(path);
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format("{}.tmp-{}-{}", path, ::getpid(), counter.fetch_add(1));
  const mode_t mode = checkpoint_mode(source);
  detail::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
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
  const std::string meta = info.source_name + info.schema.to_string();
  out.write_at(sizeof(CheckpointHeader), meta.data(), meta.size());
  detail::Progress progress(options.progress, "saving", estimate_bytes(source));
  uint64_t offset =
      write_env_sections(source, out, sizeof(CheckpointHeader) + meta.size(), info, progress, options.max_rounds);
  CheckpointTrailer tr{};
  tr.magic = checkpoint_format::kTrailerMagic;
  tr.total_steps = info.total_steps;
  tr.record_bytes = info.total_steps * info.schema.step_bytes();
  tr.trailer_crc = struct_crc(tr, &CheckpointTrailer::trailer_crc);
  out.write_at(offset, &tr, sizeof tr);
  offset += sizeof tr;

  info.file_bytes = offset;
  info.saved_time_ns = detail::realtime_ns();
  const CheckpointHeader h = make_header(info, meta);
  out.write_at(0, &h, sizeof h);
  out.finish(offset);
  detail::check_replaceable(path, options.force);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    throw_errno(errno, fmt::format("cannot rename checkpoint file '{}' to '{}'", tmp, path));
  }
  guard.commit();
  progress.finish();
  return info;
}

}  // namespace shmreplay
