// lib/checkpoint/verify.cpp: the validation of a whole checkpoint file, every checksum included, before anything
// trusts it: the header (read_header), the meta block with the name and schema (read_meta), every env's section
// and records (read_env_section, check_envs), the trailer (check_trailer). Who calls it: verify_checkpoint (the
// CLI's `verify`), and load.cpp through verify_file before a load writes a byte. Each error says which part, at
// which offset, and expected versus actual.
#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "detail/os/file.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/layout.hpp"

namespace shmreplay {
namespace detail {
namespace {

using checkpoint_format::CheckpointHeader;
using checkpoint_format::CheckpointTrailer;
using checkpoint_format::EnvSection;

// The header, checked: the magic, the version, its checksum, the file's size, and sizes that fit the file.
CheckpointHeader read_header(const InFile& in) {
  const std::string& path = in.path();
  const uint64_t size = in.size();
  CheckpointHeader h{};
  if (size < sizeof h.magic) {
    throw Error(Errc::truncated, fmt::format("checkpoint '{}' is truncated: it has {} bytes, less than the {}-byte "
                                             "header of a checkpoint",
                                             path, size, sizeof h));
  }
  in.read_at(0, &h, std::min<uint64_t>(size, sizeof h));
  if (h.magic != checkpoint_format::kMagic) {
    if (h.magic == layout::kMagic) {
      throw Error(Errc::not_a_segment, fmt::format("'{}' is not a shmreplay checkpoint: it is a shmreplay segment "
                                                   "file (magic \"SHMRPLAY\"), expected magic \"SHMRCKPT\"",
                                                   path));
    }
    throw Error(Errc::not_a_segment, fmt::format("'{}' is not a shmreplay checkpoint: it starts with {}, expected "
                                                 "\"SHMRCKPT\"",
                                                 path, printable_bytes(&h.magic, sizeof h.magic)));
  }
  if (size < sizeof h) {
    throw Error(Errc::truncated, fmt::format("checkpoint '{}' is truncated: it has {} bytes, less than the {}-byte "
                                             "header",
                                             path, size, sizeof h));
  }
  if (h.format_major != checkpoint_format::kFormatMajor) {
    throw Error(Errc::version_mismatch,
                fmt::format("checkpoint '{}' has format {}.{}, this program reads format {}.x{}", path,
                            h.format_major, h.format_minor, checkpoint_format::kFormatMajor,
                            h.format_major > checkpoint_format::kFormatMajor ? "; upgrade this program" : ""));
  }
  const uint32_t header_crc = struct_crc(h, &CheckpointHeader::header_crc);
  if (header_crc != h.header_crc) {
    corrupt(path, fmt::format("its header (bytes 0-{}) fails its checksum: stored {:#010x}, computed {:#010x}",
                              sizeof h - 1, h.header_crc, header_crc));
  }
  if (h.file_bytes > size) {
    throw Error(Errc::truncated, fmt::format("checkpoint '{}' is truncated: it has {} bytes, its header says {} ({} "
                                             "missing)",
                                             path, size, h.file_bytes, h.file_bytes - size));
  }
  if (h.file_bytes < size) {
    corrupt(path, fmt::format("it has {} bytes, its header says {} ({} extra bytes at the end)", size, h.file_bytes,
                              size - h.file_bytes));
  }
  if (h.header_bytes < sizeof h || h.header_bytes > size) {
    corrupt(path, fmt::format("header_bytes is {}, expected {} to the file size, {}", h.header_bytes, sizeof h, size));
  }
  if (h.num_envs == 0 || h.num_envs > layout::kMaxEnvs) {
    corrupt(path, fmt::format("num_envs is {}, expected 1 to {}", h.num_envs, layout::kMaxEnvs));
  }
  if (h.capacity == 0 || h.capacity > layout::kMaxCapacity) {
    corrupt(path, fmt::format("capacity is {}, expected 1 to {}", h.capacity, layout::kMaxCapacity));
  }
  if (h.meta_bytes > checkpoint_format::kMaxMetaBytes || h.name_bytes > h.meta_bytes ||
      h.schema_bytes != h.meta_bytes - h.name_bytes || h.meta_bytes > size - h.header_bytes) {
    corrupt(path, fmt::format("its meta block ({} bytes: name {}, schema {}) does not fit: at most {} bytes, the "
                              "name and schema filling it, inside the file of {} bytes",
                              h.meta_bytes, h.name_bytes, h.schema_bytes, checkpoint_format::kMaxMetaBytes, size));
  }
  return h;
}

// What the checked header `h` and its meta block (the name and schema, checked here) say: all but the envs.
CheckpointInfo read_meta(const InFile& in, const CheckpointHeader& h) {
  const std::string& path = in.path();
  std::string meta(static_cast<std::size_t>(h.meta_bytes), '\0');
  in.read_at(h.header_bytes, meta.data(), meta.size());
  const uint32_t meta_crc = crc32(0, meta.data(), meta.size());
  if (meta_crc != h.meta_crc) {
    corrupt(path, fmt::format("its meta block (bytes {}-{}: name and schema) fails its checksum: stored {:#010x}, "
                              "computed {:#010x}",
                              h.header_bytes, h.header_bytes + h.meta_bytes - 1, h.meta_crc, meta_crc));
  }
  CheckpointInfo info;
  info.path = path;
  info.format_major = h.format_major;
  info.format_minor = h.format_minor;
  info.source_name = meta.substr(0, static_cast<std::size_t>(h.name_bytes));
  try {
    normalize_name(info.source_name);
  } catch (const Error& e) {
    corrupt(path, fmt::format("its source name is invalid: {}", e.what()));
  }
  try {
    info.schema = Schema::parse(std::string_view(meta).substr(static_cast<std::size_t>(h.name_bytes)));
  } catch (const Error& e) {
    corrupt(path, fmt::format("its schema does not parse: {}", e.what()));
  }
  if (info.schema.size() != h.num_fields || info.schema.step_bytes() != h.step_bytes) {
    corrupt(path, fmt::format("its header says {} fields and {} bytes per step, its schema '{}' has {} and {}",
                              h.num_fields, h.step_bytes, info.schema.to_string(), info.schema.size(),
                              info.schema.step_bytes()));
  }
  const auto episode_field = [&](uint32_t index, const char* role) -> std::optional<std::size_t> {
    if (index == checkpoint_format::kNoField) return std::nullopt;
    if (index >= info.schema.size()) {
      corrupt(path, fmt::format("its episode {} field is field {}, but the schema has {} fields", role, index,
                                info.schema.size()));
    }
    return index;
  };
  info.episode_fields.done = episode_field(h.episode_done, "done");
  info.episode_fields.terminated = episode_field(h.episode_terminated, "terminated");
  info.episode_fields.truncated = episode_field(h.episode_truncated, "truncated");
  info.episode_fields.reward = episode_field(h.episode_reward, "reward");
  info.episode_queue_capacity = h.episode_queue_capacity;
  if (info.episode_fields.any_flag() != (h.episode_queue_capacity != 0)) {
    corrupt(path, fmt::format("its episode queue capacity is {} for a buffer {} episode flag fields",
                              h.episode_queue_capacity, info.episode_fields.any_flag() ? "with" : "without"));
  }
  info.source_layout_major = h.source_layout_major;
  info.source_layout_minor = h.source_layout_minor;
  info.source_creation_time_ns = h.source_creation_time_ns;
  info.saved_time_ns = h.saved_time_ns;
  info.num_envs = h.num_envs;
  info.capacity = h.capacity;
  info.file_bytes = h.file_bytes;
  return info;
}

// Env k's section header at `offset`, checked: magic, checksum, env, consistent counters, records that end before
// the trailer at `end`. `stacked`: the schema has a stacked field (layout 1.6), whose steps below the env's
// stacks_intact_from lost their frames, so the first saved step may lie above claimed - capacity.
EnvSection read_env_section(const InFile& in, const CheckpointHeader& h, uint64_t k, uint64_t offset, uint64_t end,
                            bool stacked) {
  const std::string& path = in.path();
  EnvSection e{};
  if (offset > end || end - offset < sizeof e) {
    corrupt(path, fmt::format("env {}'s section header at offset {} runs past the trailer at offset {}", k, offset,
                              end));
  }
  in.read_at(offset, &e, sizeof e);
  const std::string where = fmt::format("env {}'s section header (offset {})", k, offset);
  if (e.magic != checkpoint_format::kEnvMagic) {
    corrupt(path, fmt::format("{} starts with {}, expected \"SHMRENV.\"", where,
                              printable_bytes(&e.magic, sizeof e.magic)));
  }
  const uint32_t crc = struct_crc(e, &EnvSection::header_crc);
  if (crc != e.header_crc) {
    corrupt(path, fmt::format("{} fails its checksum: stored {:#010x}, computed {:#010x}", where, e.header_crc, crc));
  }
  if (e.env != k) corrupt(path, fmt::format("{} is for env {}, expected env {}", where, e.env, k));
  const uint64_t slots_from = e.claimed > h.capacity ? e.claimed - h.capacity : 0;  // the oldest unreclaimed slot
  if (e.steps > h.capacity || e.first_step > std::numeric_limits<uint64_t>::max() - e.steps || e.head != e.first_step + e.steps ||
      (e.claimed != e.head && e.claimed != e.head + 1) ||
      (stacked ? e.first_step < slots_from : e.first_step != slots_from) || e.online_start > e.head) {
    corrupt(path, fmt::format("{} is inconsistent: steps {} .. {} ({} steps), head {}, claimed {}, online start "
                              "{}, capacity {}",
                              where, e.first_step, e.first_step + e.steps, e.steps, e.head, e.claimed,
                              e.online_start, h.capacity));
  }
  const uint64_t sb = h.step_bytes;
  const uint64_t data_at = offset + sizeof e;
  if (sb != 0 && e.steps > (end - data_at) / sb) {
    corrupt(path, fmt::format("env {}'s {} records of {} bytes at offset {} run past the trailer at offset {}", k,
                              e.steps, sb, data_at, end));
  }
  return e;
}

// The trailer at `end`, checked against the envs' `total_steps` and the header.
void check_trailer(const InFile& in, const CheckpointHeader& h, uint64_t end, uint64_t total_steps) {
  const std::string& path = in.path();
  CheckpointTrailer tr{};
  in.read_at(end, &tr, sizeof tr);
  const uint32_t tr_crc = struct_crc(tr, &CheckpointTrailer::trailer_crc);
  if (tr.magic != checkpoint_format::kTrailerMagic || tr_crc != tr.trailer_crc) {
    corrupt(path, fmt::format("its trailer (offset {}) is damaged: magic {}, checksum stored {:#010x}, computed "
                              "{:#010x}",
                              end, printable_bytes(&tr.magic, sizeof tr.magic), tr.trailer_crc, tr_crc));
  }
  if (tr.total_steps != total_steps || h.total_steps != total_steps || tr.record_bytes != total_steps * h.step_bytes) {
    corrupt(path, fmt::format("its envs hold {} steps, its header says {} and its trailer {} ({} record bytes)",
                              total_steps, h.total_steps, tr.total_steps, tr.record_bytes));
  }
}

// Checks every env's section and records (their checksums read block by block) and the trailer; fills info.envs
// and info.total_steps.
void check_envs(const InFile& in, const CheckpointHeader& h, CheckpointInfo& info, const CheckpointProgressFn& progress_fn) {
  const std::string& path = in.path();
  const uint64_t size = in.size();
  const uint64_t sb = h.step_bytes;
  if (size - h.header_bytes - h.meta_bytes < sizeof(CheckpointTrailer)) {  // header_bytes + meta_bytes <= size
    corrupt(path, fmt::format("it has {} bytes, too few for its header, meta block and trailer", size));
  }
  const uint64_t end = size - sizeof(CheckpointTrailer);  // where the env sections must end
  Progress progress(progress_fn, "verifying", size);
  progress.add(h.header_bytes + h.meta_bytes);
  std::vector<std::byte> block(static_cast<std::size_t>(block_steps(sb, h.capacity) * sb));
  uint64_t offset = h.header_bytes + h.meta_bytes;
  uint64_t total_steps = 0;
  const bool stacked = std::any_of(info.schema.fields().begin(), info.schema.fields().end(),
                                   [](const Field& f) { return f.stacked(); });
  info.envs.reserve(static_cast<std::size_t>(h.num_envs));
  for (uint64_t k = 0; k < h.num_envs; ++k) {
    const EnvSection e = read_env_section(in, h, k, offset, end, stacked);
    offset += sizeof e;
    const uint64_t data_bytes = e.steps * sb;  // steps <= 2^40 and sb <= 2^32: may exceed 2^64 only if both near max
    uint32_t data_crc = 0;
    for (uint64_t at = 0; at < data_bytes;) {
      const uint64_t n = std::min<uint64_t>(block.size(), data_bytes - at);
      in.read_at(offset + at, block.data(), n);
      data_crc = crc32(data_crc, block.data(), n);
      at += n;
      progress.add(n);
    }
    if (data_crc != e.data_crc) {
      corrupt(path, fmt::format("env {}'s records (steps {} .. {}, bytes {}-{}) fail their checksum: stored "
                                "{:#010x}, computed {:#010x}",
                                k, e.first_step, e.head - 1, offset, offset + data_bytes - 1, e.data_crc, data_crc));
    }
    info.envs.push_back({e.env, e.first_step, e.steps, e.head, e.claimed, e.online_start, e.last_push_ns,
                         offset - sizeof e, e.data_crc});
    progress.add(sizeof e);
    offset += data_bytes;
    total_steps += e.steps;
  }
  if (offset != end) {
    corrupt(path, fmt::format("its env sections end at offset {}, but its trailer starts at offset {}", offset, end));
  }
  check_trailer(in, h, end, total_steps);
  info.total_steps = total_steps;
  progress.finish();
}

}  // namespace

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw Error(Errc::corrupt, fmt::format("checkpoint '{}' is corrupt: {}", path, what));
}

CheckpointInfo verify_file(const InFile& in, const CheckpointProgressFn& progress) {
  const CheckpointHeader h = read_header(in);
  CheckpointInfo info = read_meta(in, h);
  check_envs(in, h, info, progress);
  return info;
}

}  // namespace detail

CheckpointInfo verify_checkpoint(const std::string& path, const CheckpointProgressFn& progress) {
  const detail::InFile in(path);
  return detail::verify_file(in, progress);
}

}  // namespace shmreplay
