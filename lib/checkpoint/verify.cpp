// lib/checkpoint/verify.cpp: the validation of a whole checkpoint file, every checksum included, before anything
// trusts it: the header (read_header), the meta block with the name, schema and state (read_meta, read_state: values
// a segment can hold), every env's section, records and extras (read_env_section, check_envs: every weight one a
// priority tree holds), the trailer (check_trailer). Format 1.0 files are read into the 2.0 structs (as_v2), so
// everything after the checks of their own bytes sees one format. Who calls it: verify_checkpoint, chain.cpp
// (verify_chain, load_chain, save_link's look at the links there: read_headers, verify_file), and load.cpp through
// verify_file before a load writes a byte. Each error says which part, at which
// offset, and expected versus actual.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "detail/os/file.hpp"
#include "detail/protocol/priorities.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/layout.hpp"

namespace shmreplay {
namespace detail {
namespace {

using checkpoint_format::CheckpointHeader;
using checkpoint_format::CheckpointTrailer;
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

// A 1.0 env section in the 2.0 struct: the records are the whole window; no weights, no queued records.
EnvSection as_v2(const v1::EnvSection& o) noexcept {
  EnvSection e{};
  e.magic = o.magic;
  e.env = o.env;
  e.first_step = o.first_step;
  e.data_from = o.first_step;
  e.records = o.steps;
  e.head = o.head;
  e.claimed = o.claimed;
  e.online_start = o.online_start;
  e.last_push_ns = o.last_push_ns;
  e.data_crc = o.data_crc;
  e.header_crc = o.header_crc;
  return e;
}

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

// The buffer-wide state of a 2.0 header, checked where a value could not have been saved.
void read_state(const std::string& path, const CheckpointHeader& h, CheckpointInfo& info) {
  info.save_started_ns = h.save_started_ns;
  info.chain_id = h.chain_id;
  info.link_seq = h.link_seq;
  info.stack_restarts = h.stack_restarts;
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
  info.learner = {h.rows_sampled,  h.sample_calls,     h.retries, h.online_resets, h.steps_updated,
                  h.priority_updates, h.priority_updates_dropped};
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

// Format 2.1: the learner block at `at` (learner slots 1.., h.learner_bytes), checked against its checksum and
// the envs' heads (info.envs filled), into info.learner_slots.
void read_learner_block(const InFile& in, const CheckpointHeader& h, uint64_t at, CheckpointInfo& info) {
  const std::string& path = in.path();
  if (h.learner_bytes == 0) return;
  std::vector<std::byte> block(static_cast<std::size_t>(h.learner_bytes));
  in.read_at(at, block.data(), block.size());
  const uint32_t crc = crc32(0, block.data(), block.size());
  if (crc != h.learner_crc) {
    corrupt(path, fmt::format("its learner block (bytes {}-{}) fails its checksum: stored {:#010x}, computed {:#010x}",
                              at, at + h.learner_bytes - 1, h.learner_crc, crc));
  }
  const uint64_t slots = info.max_learners - 1;
  const std::byte* starts = block.data() + slots * sizeof(checkpoint_format::LearnerSlotBytes);
  info.learner_slots.assign(static_cast<std::size_t>(slots), {});
  for (uint64_t r = 0; r < slots; ++r) {
    checkpoint_format::LearnerSlotBytes b{};
    std::memcpy(&b, block.data() + r * sizeof b, sizeof b);
    CheckpointLearnerSlot& slot = info.learner_slots[static_cast<std::size_t>(r)];
    slot.counters = {b.rows_sampled, b.sample_calls, b.retries, b.online_resets, b.steps_updated, 0, 0};
    slot.online_starts.resize(static_cast<std::size_t>(h.num_envs));
    std::memcpy(slot.online_starts.data(), starts + r * h.num_envs * sizeof(uint64_t), h.num_envs * sizeof(uint64_t));
    for (uint64_t e = 0; e < h.num_envs; ++e) {
      if (slot.online_starts[e] > info.envs[e].head) {
        corrupt(path, fmt::format("learner slot {}'s online start of env {} is {}, past the env's head {}", r + 1, e,
                                  slot.online_starts[e], info.envs[e].head));
      }
    }
  }
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

// Env k's section header at `offset`, checked: magic, checksum, env, consistent counters, records that end before
// the trailer at `end`. The first saved step may lie above claimed - capacity: the steps below the env's
// stacks_intact_from were out of its view (frames overwritten, layout 1.6; a dead updater's torn step, 1.9).
EnvSection read_env_section(const InFile& in, const CheckpointHeader& h, uint64_t k, uint64_t offset, uint64_t end) {
  const std::string& path = in.path();
  const bool old = h.format_major == v1::kFormatMajor;
  const uint64_t section = h.section_bytes;
  EnvSection e{};
  if (offset > end || end - offset < section) {
    corrupt(path, fmt::format("env {}'s section header at offset {} runs past the trailer at offset {}", k, offset,
                              end));
  }
  const std::string where = fmt::format("env {}'s section header (offset {})", k, offset);
  const auto check_magic = [&](uint64_t magic, uint64_t expected, const char* text) {
    if (magic != expected) {
      corrupt(path, fmt::format("{} starts with {}, expected \"{}\"", where, printable_bytes(&magic, sizeof magic),
                                text));
    }
  };
  if (old) {
    v1::EnvSection o{};
    in.read_at(offset, &o, sizeof o);
    check_magic(o.magic, v1::kEnvMagic, "SHMRENV.");
    const uint32_t crc = struct_crc(o, &v1::EnvSection::header_crc);
    if (crc != o.header_crc) {
      corrupt(path, fmt::format("{} fails its checksum: stored {:#010x}, computed {:#010x}", where, o.header_crc, crc));
    }
    if (o.steps > h.capacity || o.first_step > std::numeric_limits<uint64_t>::max() - o.steps ||
        o.head != o.first_step + o.steps) {
      corrupt(path, fmt::format("{} is inconsistent: steps {} .. {} ({} steps), head {}, capacity {}", where,
                                o.first_step, o.first_step + o.steps, o.steps, o.head, h.capacity));
    }
    e = as_v2(o);
  } else {
    in.read_at(offset, &e, sizeof e);
    check_magic(e.magic, checkpoint_format::kEnvMagic, "SHMRENV2");
    const uint32_t crc = struct_crc(e, &EnvSection::header_crc);
    if (crc != e.header_crc) {
      corrupt(path, fmt::format("{} fails its checksum: stored {:#010x}, computed {:#010x}", where, e.header_crc, crc));
    }
  }
  if (e.env != k) corrupt(path, fmt::format("{} is for env {}, expected env {}", where, e.env, k));
  const uint64_t slots_from = e.claimed > h.capacity ? e.claimed - h.capacity : 0;  // the oldest unreclaimed slot
  if (e.first_step > e.data_from || e.data_from > e.head || e.head - e.first_step > h.capacity ||
      e.records != e.head - e.data_from || e.head > std::numeric_limits<uint64_t>::max() - 1 ||
      (e.claimed != e.head && e.claimed != e.head + 1) ||
      e.first_step < slots_from || e.online_start > e.head) {
    corrupt(path, fmt::format("{} is inconsistent: window {} .. {}, records from {} ({} records), head {}, claimed "
                              "{}, online start {}, capacity {}",
                              where, e.first_step, e.head, e.data_from, e.records, e.head, e.claimed, e.online_start,
                              h.capacity));
  }
  const bool priorities = h.priority_exponent_bits != 0;
  if (e.weights != (priorities ? e.head - e.first_step : 0) || e.queue_head > e.queue_tail ||
      e.queued != e.queue_tail - e.queue_head || e.queued > h.episode_queue_capacity) {
    corrupt(path, fmt::format("{} is inconsistent: {} weights for a window of {} steps {} priorities; queue {} .. {} "
                              "with {} records (queue capacity {})",
                              where, e.weights, e.head - e.first_step, priorities ? "with" : "without", e.queue_head,
                              e.queue_tail, e.queued, h.episode_queue_capacity));
  }
  const uint64_t sb = h.step_bytes;
  const uint64_t data_at = offset + section;
  const uint64_t extra = e.weights * sizeof(float) + e.queued * sizeof(checkpoint_format::EpisodeRecordBytes);
  if ((sb != 0 && e.records > (end - data_at) / sb) || extra > end - data_at - e.records * sb) {
    corrupt(path, fmt::format("env {}'s {} records of {} bytes and {} bytes of weights and episode records at offset "
                              "{} run past the trailer at offset {}",
                              k, e.records, sb, extra, data_at, end));
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
  if (tr.total_steps != total_steps || h.total_records != total_steps ||
      tr.record_bytes != total_steps * h.step_bytes) {
    corrupt(path, fmt::format("its envs hold {} records, its header says {} and its trailer {} ({} record bytes)",
                              total_steps, h.total_records, tr.total_steps, tr.record_bytes));
  }
}

// Checks every env's section, its records and extras (their checksums read block by block, unless `headers_only`)
// and the trailer; fills info.envs and info.total_steps.
void check_envs(const InFile& in, const CheckpointHeader& h, CheckpointInfo& info, const CheckpointProgressFn& progress_fn,
                bool headers_only) {
  const std::string& path = in.path();
  const uint64_t size = in.size();
  const uint64_t sb = h.step_bytes;
  if (size - h.header_bytes - h.meta_bytes < sizeof(CheckpointTrailer)) {  // header_bytes + meta_bytes <= size
    corrupt(path, fmt::format("it has {} bytes, too few for its header, meta block and trailer", size));
  }
  if (size - h.header_bytes - h.meta_bytes - sizeof(CheckpointTrailer) < h.learner_bytes) {
    corrupt(path, fmt::format("it has {} bytes, too few for its header, meta block, learner block and trailer", size));
  }
  // where the env sections must end: the learner block (2.1), then the trailer
  const uint64_t end = size - sizeof(CheckpointTrailer) - h.learner_bytes;
  Progress progress(progress_fn, "verifying", size);
  progress.add(h.header_bytes + h.meta_bytes);
  std::vector<std::byte> block(static_cast<std::size_t>(block_steps(sb, h.capacity) * sb));
  std::vector<float> weights(static_cast<std::size_t>(std::min<uint64_t>(h.capacity, 16384)));
  // The CRC of `bytes` bytes at `at`, read block by block.
  const auto crc_of = [&](uint64_t at, uint64_t bytes, uint32_t crc) {
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min<uint64_t>(block.size(), bytes - done);
      in.read_at(at + done, block.data(), n);
      crc = crc32(crc, block.data(), n);
      done += n;
      progress.add(n);
    }
    return crc;
  };
  uint64_t offset = h.header_bytes + h.meta_bytes;
  uint64_t total_steps = 0;
  info.envs.reserve(static_cast<std::size_t>(h.num_envs));
  for (uint64_t k = 0; k < h.num_envs; ++k) {
    const EnvSection e = read_env_section(in, h, k, offset, end);
    CheckpointEnv env = env_of(e, offset);
    env.records_offset = offset + h.section_bytes;
    offset = env.records_offset;
    const uint64_t data_bytes = e.records * sb;  // records <= 2^40 and sb <= 2^32
    const uint64_t extra_bytes = e.weights * sizeof(float) + e.queued * sizeof(checkpoint_format::EpisodeRecordBytes);
    if (!headers_only) {
      const uint32_t data_crc = crc_of(offset, data_bytes, 0);
      if (data_crc != e.data_crc) {
        corrupt(path, fmt::format("env {}'s records (steps {} .. {}, bytes {}-{}) fail their checksum: stored "
                                  "{:#010x}, computed {:#010x}",
                                  k, e.data_from, e.head - 1, offset, offset + data_bytes - 1, e.data_crc, data_crc));
      }
      // The weights, then the queued records; each weight must be one a priority tree holds (a float from 0 to
      // kMaxWeight): a NaN or negative one would make the loaded tree's sums meaningless. The first that is not is
      // reported once the checksum holds (a damaged file is named as such first).
      const uint64_t weights_at = offset + data_bytes;
      std::optional<std::pair<uint64_t, float>> bad_weight;  // (index, value)
      uint32_t extra_crc = 0;
      for (uint64_t done = 0; done < e.weights;) {
        const uint64_t n = std::min<uint64_t>(weights.size(), e.weights - done);
        in.read_at(weights_at + done * sizeof(float), weights.data(), n * sizeof(float));
        extra_crc = crc32(extra_crc, weights.data(), n * sizeof(float));
        for (uint64_t i = 0; i < n && !bad_weight; ++i) {
          if (!(weights[i] >= 0 && weights[i] <= kMaxWeight)) bad_weight = {{done + i, weights[i]}};
        }
        done += n;
        progress.add(n * sizeof(float));
      }
      const uint64_t weight_bytes = e.weights * sizeof(float);
      extra_crc = crc_of(weights_at + weight_bytes, extra_bytes - weight_bytes, extra_crc);
      if (extra_crc != e.extra_crc) {
        corrupt(path, fmt::format("env {}'s weights and episode records (bytes {}-{}) fail their checksum: stored "
                                  "{:#010x}, computed {:#010x}",
                                  k, offset + data_bytes, offset + data_bytes + extra_bytes - 1, e.extra_crc,
                                  extra_crc));
      }
      if (bad_weight) {
        corrupt(path, fmt::format("env {}'s weight of step {} (offset {}) is {}, expected a number from 0 to {:g}", k,
                                  e.first_step + bad_weight->first, weights_at + bad_weight->first * sizeof(float),
                                  bad_weight->second, kMaxWeight));
      }
    }
    info.envs.push_back(env);
    progress.add(h.section_bytes);
    offset += data_bytes + extra_bytes;
    total_steps += e.records;
  }
  if (offset != end) {
    corrupt(path, fmt::format("its env sections end at offset {}, but its trailer starts at offset {}", offset, end));
  }
  read_learner_block(in, h, end, info);
  check_trailer(in, h, end + h.learner_bytes, total_steps);
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
  check_envs(in, h, info, progress, /*headers_only=*/false);
  return info;
}

CheckpointInfo read_headers(const InFile& in) {
  const CheckpointHeader h = read_header(in);
  CheckpointInfo info = read_meta(in, h);
  check_envs(in, h, info, {}, /*headers_only=*/true);
  return info;
}

}  // namespace detail

CheckpointInfo verify_checkpoint(const std::string& path, const CheckpointProgressFn& progress) {
  const detail::InFile in(path);
  return detail::verify_file(in, progress);
}

bool CheckpointInfo::self_contained() const noexcept {
  return std::all_of(envs.begin(), envs.end(), [](const CheckpointEnv& e) { return e.data_from == e.first_step; });
}

uint64_t CheckpointInfo::window_bytes() const noexcept {
  uint64_t bytes = 0;
  for (const CheckpointEnv& e : envs) bytes += (e.head - e.first_step) * schema.step_bytes();
  return bytes;
}

}  // namespace shmreplay
