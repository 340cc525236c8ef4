// lib/checkpoint/verify_header.cpp: the validation of a checkpoint's header and meta block, before anything trusts
// them: the header (read_header: magic, version, checksum, sizes that fit the file), the meta block with the name,
// schema and buffer-wide state (read_meta, read_state: values a segment can hold). Format 1.0 headers are read into
// the 2.0 struct (as_v2). Who calls it: verify.cpp (verify_file, read_headers). Each error says which part, at
// which offset, and expected versus actual.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "checkpoint/packed_records.hpp"
#include "detail/os/file.hpp"
#include "detail/protocol/priorities.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/walk_layout.hpp"

namespace shmreplay::detail {
namespace {

using checkpoint_format::CheckpointHeader;
using checkpoint_format::EnvSection;
namespace v1 = checkpoint_format::v1;

// A 1.0 header in the 2.0 struct: the same fields; none of the state (holds_state() is false for it).
CheckpointHeader as_v2(const v1::CheckpointHeader& o) noexcept {
  CheckpointHeader h{};
  h.magic = o.magic;
  h.format_major = o.format_major;
  h.format_minor = o.format_minor;
  h.header_bytes = o.header_bytes;
  h.file_bytes = o.file_bytes;
  h.num_envs = o.num_envs;
  h.capacity = o.capacity;
  h.num_fields = o.num_fields;
  h.step_bytes = o.step_bytes;
  h.total_records = o.total_steps;
  h.meta_bytes = o.meta_bytes;
  h.name_bytes = o.name_bytes;
  h.schema_bytes = o.schema_bytes;
  h.saved_time_ns = o.saved_time_ns;
  h.source_creation_time_ns = o.source_creation_time_ns;
  h.source_layout_major = o.source_layout_major;
  h.source_layout_minor = o.source_layout_minor;
  h.episode_done = o.episode_done;
  h.episode_terminated = o.episode_terminated;
  h.episode_truncated = o.episode_truncated;
  h.episode_reward = o.episode_reward;
  h.episode_queue_capacity = o.episode_queue_capacity;
  h.section_bytes = sizeof(v1::EnvSection);
  h.meta_crc = o.meta_crc;
  h.header_crc = o.header_crc;
  return h;
}

// (2.3) The sampling policies' words; zeros in older files mean none.
void read_sampling_words(const std::string& path, const CheckpointHeader& h, CheckpointInfo& info) {
  if (h.consuming_queue > 1 || (h.consuming_queue == 1 && h.max_times_sampled != 1)) {
    corrupt(path, fmt::format("its consuming-queue word is {} with sample cap {}, expected 0, or 1 with cap 1",
                              h.consuming_queue, h.max_times_sampled));
  }
  info.consuming_queue = h.consuming_queue == 1;
  info.queue_next_ticket = h.queue_next_ticket;
  if (h.initial_priority_bits != 0) {
    const double p = std::bit_cast<double>(h.initial_priority_bits);
    if (!(p >= 0) || (std::isinf(p) && h.initial_priority_bits != layout::kInitialPriorityFirst)) {
      corrupt(path, fmt::format("its initial priority is {}, expected 0 to FLT_MAX or +infinity", p));
    }
    info.initial_priority = p == 0 ? 0.0 : p;
  }
  if (h.sequence_priority_length > h.capacity) {
    corrupt(path, fmt::format("its sequence-priority length is {}, expected 0 to the capacity {}",
                              h.sequence_priority_length, h.capacity));
  }
  info.sequence_priority_length = h.sequence_priority_length;
  // (2.4) the reanalyse walk's chunk; an older file does not say (nullopt), and its word is zero.
  if (h.format_major == 2 && h.format_minor < 4) return;
  if (h.reanalyse_chunk > std::min(h.capacity, layout::kMaxReanalyseChunk)) {
    corrupt(path, fmt::format("its reanalyse chunk is {} steps, expected 0 (no walk) to the capacity {}",
                              h.reanalyse_chunk, h.capacity));
  }
  info.reanalyse_chunk = h.reanalyse_chunk;
}

// The buffer-wide state of a 2.0 header, checked where a value could not have been saved.
void read_state(const std::string& path, const CheckpointHeader& h, CheckpointInfo& info) {
  info.save_started_ns = h.save_started_ns;
  info.chain_id = h.chain_id;
  info.link_seq = h.link_seq;
  info.stack_restarts = h.stack_restarts;
  info.expected_compression = std::bit_cast<double>(h.expected_compression_bits);
  // (2.2) policy versions; zeros in older files mean none.
  if (h.policy_field > info.schema.size()) {
    corrupt(path, fmt::format("its policy-version field is field {}, but the schema has {} fields", h.policy_field - 1,
                              info.schema.size()));
  }
  if (h.policy_field != 0) info.episode_fields.policy_version = h.policy_field - 1;
  info.policy_version = h.policy_version;
  if (h.policy_window != 0) info.policy_max_staleness = h.policy_window - 1;
  if (h.max_times_sampled > layout::kMaxTimesSampled) {
    corrupt(path, fmt::format("its sample cap max_times_sampled is {}, expected 0 to {}", h.max_times_sampled,
                              layout::kMaxTimesSampled));
  }
  info.max_times_sampled = h.max_times_sampled;
  read_sampling_words(path, h, info);
  if (!(info.expected_compression == 0 || (info.expected_compression >= 1 && info.expected_compression <= 1e6))) {
    info.expected_compression = 0;  // a damaged word: the load falls back to the default budget
  }
  if (h.stack_continuity > static_cast<uint64_t>(StackContinuity::episodes)) {
    corrupt(path, fmt::format("its stack continuity code is {}, expected 0 (compare) or 1 (episodes)",
                              h.stack_continuity));
  }
  info.stack_continuity = static_cast<StackContinuity>(h.stack_continuity);
  const auto f64 = [](uint64_t b) { return std::bit_cast<double>(b); };
  if (h.priority_exponent_bits != 0) {
    const double alpha = f64(h.priority_exponent_bits);
    if (!(std::isfinite(alpha) && alpha >= 0)) corrupt(path, fmt::format("its alpha is {}, expected >= 0", alpha));
    info.priority_exponent = alpha == 0 ? 0.0 : alpha;
  }
  info.max_priority = f64(h.max_priority_bits);
  // A segment's running maximum starts at 1 and only rises, to priorities that fit a float (priority_fits): one
  // outside [1, kMaxWeight] is no segment's, and a load would store it.
  if (!(info.max_priority >= 1 && info.max_priority <= kMaxWeight)) {
    corrupt(path, fmt::format("its running maximum priority is {}, expected a number from 1 to {:g}", info.max_priority,
                              kMaxWeight));
  }
  if (h.limiter_enabled > 1) corrupt(path, fmt::format("limiter_enabled is {}, expected 0 or 1", h.limiter_enabled));
  if (h.limiter_enabled == 1) {
    info.limiter.limit = RateLimit{h.limiter_min_size, f64(h.limiter_spi_bits), f64(h.limiter_min_diff_bits),
                                   f64(h.limiter_max_diff_bits)};
  }
  info.limiter.error_offset = f64(h.limiter_offset_bits);
  if (!std::isfinite(info.limiter.error_offset)) {
    corrupt(path, fmt::format("its rate limiter's error offset is {}, expected a finite number",
                              info.limiter.error_offset));
  }
  info.limiter.samples = h.limiter_samples;
  info.limiter.changes = h.limiter_changes;
  info.limiter.last_sample_ns = h.last_sample_ns;
  info.limiter.learner_limited = h.learner_limited;
  info.limiter.writers_limited = h.writers_limited;
  info.limiter.writer_timeouts = h.writer_timeouts;
  info.learner = {h.rows_sampled,     h.sample_calls,           h.retries,
                  h.online_resets,    h.steps_updated,          h.priority_updates,
                  h.priority_updates_dropped, h.write_backs_applied, h.write_backs_refused};  // zeros before 2.4
  // Format 2.1: learner slots (0 means one); the block's size follows from them (its contents: check_envs).
  info.max_learners = h.max_learners == 0 ? 1 : h.max_learners;
  if (h.max_learners == 1 || info.max_learners > layout::kMaxLearners) {
    corrupt(path, fmt::format("max_learners is {}, expected 0 (one learner) or 2 to {}", h.max_learners,
                              layout::kMaxLearners));
  }
  const uint64_t block = checkpoint_format::learner_block_bytes(info.max_learners, h.num_envs);
  if (h.learner_bytes != block || (block == 0 && h.learner_crc != 0) || h.learner_crc > 0xffffffffu) {
    corrupt(path, fmt::format("its learner block is {} bytes (checksum word {:#x}), expected {} for {} learner slots "
                              "and {} envs",
                              h.learner_bytes, h.learner_crc, block, info.max_learners, h.num_envs));
  }
}

}  // namespace

// The header, checked: the magic, the version, its checksum, the file's size, and sizes that fit the file.
CheckpointHeader read_header(const InFile& in) {
  const std::string& path = in.path();
  const uint64_t size = in.size();
  CheckpointHeader h{};
  if (size < sizeof h.magic) {
    throw Error(Errc::truncated, fmt::format("checkpoint '{}' is truncated: it has {} bytes, less than the {}-byte "
                                             "header of a checkpoint",
                                             path, size, sizeof(v1::CheckpointHeader)));
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
  const bool old = size >= 16 && h.format_major == v1::kFormatMajor;
  const uint64_t header_size = old ? sizeof(v1::CheckpointHeader) : sizeof h;
  if (size < header_size) {
    throw Error(Errc::truncated, fmt::format("checkpoint '{}' is truncated: it has {} bytes, less than the {}-byte "
                                             "header",
                                             path, size, header_size));
  }
  if (h.format_major != checkpoint_format::kFormatMajor && !old) {
    throw Error(Errc::version_mismatch,
                fmt::format("checkpoint '{}' has format {}.{}, this program reads formats 1.x and {}.x{}", path,
                            h.format_major, h.format_minor, checkpoint_format::kFormatMajor,
                            h.format_major > checkpoint_format::kFormatMajor ? "; upgrade this program" : ""));
  }
  if (old) {
    v1::CheckpointHeader o{};
    std::memcpy(&o, &h, sizeof o);
    const uint32_t crc = struct_crc(o, &v1::CheckpointHeader::header_crc);
    if (crc != o.header_crc) {
      corrupt(path, fmt::format("its header (bytes 0-{}, format 1.0) fails its checksum: stored {:#010x}, computed "
                                "{:#010x}",
                                sizeof o - 1, o.header_crc, crc));
    }
    h = as_v2(o);
  } else {
    const uint32_t header_crc = struct_crc(h, &CheckpointHeader::header_crc);
    if (header_crc != h.header_crc) {
      corrupt(path, fmt::format("its header (bytes 0-{}) fails its checksum: stored {:#010x}, computed {:#010x}",
                                sizeof h - 1, h.header_crc, header_crc));
    }
    if (h.section_bytes != sizeof(EnvSection)) {
      corrupt(path, fmt::format("section_bytes is {}, expected {}", h.section_bytes, sizeof(EnvSection)));
    }
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
  if (h.header_bytes < header_size || h.header_bytes > size) {
    corrupt(path, fmt::format("header_bytes is {}, expected {} to the file size, {}", h.header_bytes, header_size,
                              size));
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
  // 2.3: records with compressed fields as their frame numbers, or whole steps (record_bytes 0).
  const uint64_t packed_bytes = record_layout(info.schema, true).bytes;
  if (h.record_bytes != 0 && (h.format_major != 2 || h.format_minor < 3 || h.record_bytes != packed_bytes ||
                              packed_bytes == h.step_bytes)) {
    corrupt(path, fmt::format("its header says {} bytes per record, expected 0 or {} for schema '{}' (format {}.{})",
                              h.record_bytes, packed_bytes == h.step_bytes ? 0 : packed_bytes,
                              info.schema.to_string(), h.format_major, h.format_minor));
  }
  info.record_bytes = h.record_bytes != 0 ? h.record_bytes : h.step_bytes;
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
  if (info.format_major >= 2) read_state(path, h, info);
  info.source_layout_major = h.source_layout_major;
  info.source_layout_minor = h.source_layout_minor;
  info.source_creation_time_ns = h.source_creation_time_ns;
  info.saved_time_ns = h.saved_time_ns;
  info.num_envs = h.num_envs;
  info.capacity = h.capacity;
  info.file_bytes = h.file_bytes;
  return info;
}

}  // namespace shmreplay::detail
