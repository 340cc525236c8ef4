// lib/checkpoint/verify.cpp: the validation of a whole checkpoint file, every checksum included, before anything
// trusts it: the header and meta block (verify_header.cpp: read_header, read_meta), every env's section, records and
// extras (read_env_section, check_envs, EnvBytesCheck: every weight one a priority tree holds), the learner block
// and the trailer (read_learner_block, check_trailer). Format 1.0 sections are read into the 2.0 struct (as_v2), so
// everything after the checks of their own bytes sees one format. Who calls it: verify_checkpoint, chain.cpp
// (verify_chain, load_chain, save_link's look at the links there: read_headers, verify_file), and load.cpp through
// verify_file before a load writes a byte. Each error says which part, at which offset, and expected versus actual.
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
#include "checkpoint/packed_records.hpp"
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
    slot.counters = {b.rows_sampled,  b.sample_calls, b.retries, b.online_resets, b.steps_updated, 0, 0,
                     b.write_backs_applied, b.write_backs_refused};  // zeros before 2.4
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

// (2.3) The per-step extras an env section counts: as many as its window has steps, where the header says the
// source had them (a sample cap, initial priority +inf, a consuming queue), else none; and a frame block only
// with compressed records.
void check_extra_counts(const std::string& path, const std::string& where, const CheckpointHeader& h,
                        const EnvSection& e) {
  const bool counts = h.format_minor >= 3 && h.max_times_sampled > 0;
  const bool fresh = h.format_minor >= 3 && h.initial_priority_bits == layout::kInitialPriorityFirst;
  const bool tickets = h.format_minor >= 3 && h.consuming_queue != 0;
  if (e.fresh != (fresh ? e.head - e.first_step : 0) || e.queue_tickets != (tickets ? e.head - e.first_step : 0)) {
    corrupt(path, fmt::format("{} is inconsistent: {} fresh flags and {} queue tickets for a window of {} steps {} "
                              "initial priority +inf and {} a consuming queue",
                              where, e.fresh, e.queue_tickets, e.head - e.first_step, fresh ? "with" : "without",
                              tickets ? "with" : "without"));
  }
  // (2.4) One version per full chunk with a window step (first_step <= head was checked before).
  const uint64_t c = h.format_minor >= 4 ? h.reanalyse_chunk : 0;
  const uint64_t chunks = c != 0 ? e.head / c - std::min(e.first_step / c, e.head / c) : 0;
  if (e.walk_versions != chunks) {
    corrupt(path, fmt::format("{} is inconsistent: {} reanalyse-walk versions for the window [{}, {}) in chunks of {} "
                              "steps, expected {}",
                              where, e.walk_versions, e.first_step, e.head, c, chunks));
  }
  if (e.cap_counts != (counts ? e.head - e.first_step : 0) || (h.record_bytes == 0 && e.frame_bytes != 0)) {
    corrupt(path, fmt::format("{} is inconsistent: {} sample-cap counts for a window of {} steps {} a cap; a frame "
                              "block of {} bytes {} compressed records",
                              where, e.cap_counts, e.head - e.first_step, counts ? "with" : "without", e.frame_bytes,
                              h.record_bytes == 0 ? "without" : "with"));
  }
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
  check_extra_counts(path, where, h, e);
  const uint64_t sb = h.record_bytes != 0 ? h.record_bytes : h.step_bytes;
  const uint64_t data_at = offset + section;
  // weights, records, counts, flags and tickets: each at most a window (<= 2^40 steps), so the sum cannot overflow
  const uint64_t extra = e.weights * sizeof(float) + e.queued * sizeof(checkpoint_format::EpisodeRecordBytes) +
                         e.fresh + (e.queue_tickets + e.walk_versions) * sizeof(uint64_t);
  if ((sb != 0 && e.records > (end - data_at) / sb) || e.frame_bytes > end - data_at - e.records * sb ||
      extra > end - data_at - e.records * sb - e.frame_bytes ||
      e.cap_counts > end - data_at - e.records * sb - e.frame_bytes - extra) {
    corrupt(path, fmt::format("env {}'s {} records of {} bytes, {} bytes of compressed frames and {} bytes of "
                              "weights, episode records and counts at offset {} run past the trailer at offset {}",
                              k, e.records, sb, e.frame_bytes, extra + e.cap_counts, data_at, end));
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
      tr.record_bytes != total_steps * (h.record_bytes != 0 ? h.record_bytes : h.step_bytes)) {
    corrupt(path, fmt::format("its envs hold {} records, its header says {} and its trailer {} ({} record bytes)",
                              total_steps, h.total_records, tr.total_steps, tr.record_bytes));
  }
}

// The checksums of env sections' records and extras, read block by block, and their weights (each one a priority
// tree holds), for check_envs; its buffers are sized once for the file.
class EnvBytesCheck {
 public:
  EnvBytesCheck(const InFile& in, const CheckpointHeader& h, Progress& progress)
      : in_(in),
        progress_(progress),
        block_(static_cast<std::size_t>(block_steps(h.step_bytes, h.capacity) * h.step_bytes)),  // >= a record
        weights_(static_cast<std::size_t>(std::min<uint64_t>(h.capacity, 16384))) {}

  // Checks env k's section `e`: its records at `offset` (`data_bytes`), then its weights and queued records
  // (`extra_bytes`).
  void check(const EnvSection& e, uint64_t k, uint64_t offset, uint64_t data_bytes, uint64_t extra_bytes) {
    const std::string& path = in_.path();
    const uint32_t data_crc = crc_of(offset, data_bytes, 0);
    if (data_crc != e.data_crc) {
      corrupt(path, fmt::format("env {}'s records (steps {} .. {}, bytes {}-{}) fail their checksum: stored "
                                "{:#010x}, computed {:#010x}",
                                k, e.data_from, e.head - 1, offset, offset + data_bytes - 1, e.data_crc, data_crc));
    }
    // The weights, then the queued records; each weight must be one a priority tree holds (a float from 0 to
    // kMaxWeight): a NaN or negative one would make the loaded tree's sums meaningless. The first that is not is
    // reported once the checksum holds (a damaged file is named as such first).
    const uint64_t weights_at = offset + data_bytes + e.frame_bytes;
    std::optional<std::pair<uint64_t, float>> bad_weight;  // (index, value)
    uint32_t extra_crc = 0;
    for (uint64_t done = 0; done < e.weights;) {
      const uint64_t n = std::min<uint64_t>(weights_.size(), e.weights - done);
      in_.read_at(weights_at + done * sizeof(float), weights_.data(), n * sizeof(float));
      extra_crc = crc32(extra_crc, weights_.data(), n * sizeof(float));
      for (uint64_t i = 0; i < n && !bad_weight; ++i) {
        if (!(weights_[i] >= 0 && weights_[i] <= kMaxWeight)) bad_weight = {{done + i, weights_[i]}};
      }
      done += n;
      progress_.add(n * sizeof(float));
    }
    const uint64_t weight_bytes = e.weights * sizeof(float);
    extra_crc = crc_of(weights_at + weight_bytes, extra_bytes - weight_bytes, extra_crc);
    if (extra_crc != e.extra_crc) {
      corrupt(path, fmt::format("env {}'s weights, episode records and counts (bytes {}-{}) fail their checksum: stored "
                                "{:#010x}, computed {:#010x}",
                                k, weights_at, weights_at + extra_bytes - 1, e.extra_crc,
                                extra_crc));
    }
    if (bad_weight) {
      corrupt(path, fmt::format("env {}'s weight of step {} (offset {}) is {}, expected a number from 0 to {:g}", k,
                                e.first_step + bad_weight->first, weights_at + bad_weight->first * sizeof(float),
                                bad_weight->second, kMaxWeight));
    }
  }

 private:
  // The CRC of `bytes` bytes at `at`, read block by block, continuing `crc`.
  uint32_t crc_of(uint64_t at, uint64_t bytes, uint32_t crc) {
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min<uint64_t>(block_.size(), bytes - done);
      in_.read_at(at + done, block_.data(), n);
      crc = crc32(crc, block_.data(), n);
      done += n;
      progress_.add(n);
    }
    return crc;
  }

  const InFile& in_;
  Progress& progress_;
  std::vector<std::byte> block_;
  std::vector<float> weights_;
};

// Checks every env's section, its records and extras (their checksums read block by block, unless `headers_only`)
// and the trailer; fills info.envs and info.total_steps.
void check_envs(const InFile& in, const CheckpointHeader& h, CheckpointInfo& info, const CheckpointProgressFn& progress_fn,
                bool headers_only) {
  const std::string& path = in.path();
  const uint64_t size = in.size();
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
  EnvBytesCheck bytes(in, h, progress);
  uint64_t offset = h.header_bytes + h.meta_bytes;
  uint64_t total_steps = 0;
  info.envs.reserve(static_cast<std::size_t>(h.num_envs));
  for (uint64_t k = 0; k < h.num_envs; ++k) {
    const EnvSection e = read_env_section(in, h, k, offset, end);
    CheckpointEnv env = env_of(e, offset);
    env.records_offset = offset + h.section_bytes;
    offset = env.records_offset;
    const uint64_t data_bytes = e.records * info.record_bytes;  // records <= 2^40 and record_bytes <= 2^32
    const uint64_t extra_bytes = e.weights * sizeof(float) +
                                 e.queued * sizeof(checkpoint_format::EpisodeRecordBytes) + e.cap_counts +
                                 e.fresh + (e.queue_tickets + e.walk_versions) * sizeof(uint64_t);
    if (!headers_only) {
      bytes.check(e, k, offset, data_bytes, extra_bytes);
      if (e.frame_bytes != 0) check_frame_block(in, info, env);
    }
    info.envs.push_back(env);
    progress.add(h.section_bytes);
    offset += data_bytes + e.frame_bytes + extra_bytes;
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
  for (const CheckpointEnv& e : envs) {
    const uint64_t window = e.head - e.first_step;
    bytes += window * (record_bytes != 0 ? record_bytes : schema.step_bytes());
    // Compressed records (2.3): a link holds those of its own steps; the window's, at the same bytes per step.
    if (e.steps > 0) {
      const double per_step = static_cast<double>(e.frame_bytes) / static_cast<double>(e.steps);
      bytes += static_cast<uint64_t>(per_step * static_cast<double>(window));
    }
  }
  return bytes;
}

}  // namespace shmreplay
