// Fuzz target: a checkpoint file of arbitrary bytes (format 2.x or 1.0: the seeds hold both, and 2.3's compressed
// records), loaded twice: as it
// is, and with its checksums, sizes and totals repaired for the format it claims (so that mutations reach the
// loader's own checks, the segment it builds, and a learner over that segment, instead of stopping at the first
// CRC). Each time: verify_checkpoint, load_checkpoint into a new segment, save that segment and check the new file
// holds the same steps and state, read it as the inspector and the learner do, then load the file again into that
// existing segment. shmreplay::Error is the expected refusal of the input; anything else (or an Error from saving
// what was loaded) is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "detail/os/crc32.hpp"
#include "fuzz_support.hpp"

namespace {

using namespace shmreplay;
using checkpoint_format::CheckpointHeader;
using checkpoint_format::CheckpointTrailer;
using checkpoint_format::EnvSection;

template <class T>
uint32_t struct_crc(T copy, uint32_t T::*field) {
  copy.*field = 0;
  return detail::crc32(0, &copy, sizeof copy);
}

// Rewrites what a writer computes from the rest of a file of format 2.0 (Header, Section as in
// shmreplay/internal/checkpoint_format.hpp) or 1.0 (checkpoint_format::v1): file_bytes, the meta CRC, each env section's CRCs
// (walking the sections as the loader does, as far as they fit: records, then in 2.0 weights and queued episode
// records), the totals, the trailer's and the header's CRC.
template <class Header, class Section>
void repair_as(std::vector<uint8_t>& f) {
  constexpr bool v2 = std::is_same_v<Section, EnvSection>;
  if (f.size() < sizeof(Header) + sizeof(CheckpointTrailer)) return;
  Header h;
  std::memcpy(&h, f.data(), sizeof h);
  const uint64_t size = f.size();
  h.file_bytes = size;
  const uint64_t trailer_at = size - sizeof(CheckpointTrailer);
  uint64_t total_records = 0;
  uint64_t total_extra = 0;
  if (h.header_bytes >= sizeof h && h.header_bytes <= trailer_at && h.meta_bytes <= trailer_at - h.header_bytes) {
    h.meta_crc = detail::crc32(0, f.data() + h.header_bytes, h.meta_bytes);
    uint64_t at = h.header_bytes + h.meta_bytes;
    for (uint64_t k = 0; k < std::min<uint64_t>(h.num_envs, 1u << 16) && at + sizeof(Section) <= trailer_at; ++k) {
      Section e;
      std::memcpy(&e, f.data() + at, sizeof e);
      uint64_t records = 0;
      if constexpr (v2) {
        records = e.records;
      } else {
        records = e.steps;
      }
      uint64_t record_bytes = h.step_bytes;
      if constexpr (v2) {
        if (h.record_bytes != 0) record_bytes = h.record_bytes;  // 2.3: compressed fields as their records
      }
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(records, record_bytes, &bytes) || bytes > trailer_at - at - sizeof e) break;
      e.data_crc = detail::crc32(0, f.data() + at + sizeof e, bytes);
      uint64_t extra = 0;
      if constexpr (v2) {  // 2.3's frame block after the records, then the extras with the cap counts
        if (e.frame_bytes > trailer_at - at - sizeof e - bytes) break;
        e.frame_crc = detail::crc32(0, f.data() + at + sizeof e + bytes, e.frame_bytes);
        bytes += e.frame_bytes;
        uint64_t weights = 0;
        uint64_t queued = 0;
        if (__builtin_mul_overflow(e.weights, sizeof(float), &weights) ||
            __builtin_mul_overflow(e.queued, sizeof(checkpoint_format::EpisodeRecordBytes), &queued) ||
            __builtin_add_overflow(weights, queued, &extra) || __builtin_add_overflow(extra, e.cap_counts, &extra) ||
            extra > trailer_at - at - sizeof e - bytes) {
          break;
        }
        e.extra_crc = detail::crc32(0, f.data() + at + sizeof e + bytes, extra);
      }
      e.header_crc = struct_crc(e, &Section::header_crc);
      std::memcpy(f.data() + at, &e, sizeof e);
      at += sizeof e + bytes + extra;
      total_records += records;
      total_extra += extra;
    }
  }
  CheckpointTrailer tr;
  std::memcpy(&tr, f.data() + trailer_at, sizeof tr);
  if constexpr (v2) {
    h.total_records = total_records;
    h.extra_bytes = total_extra;
  } else {
    h.total_steps = total_records;
  }
  tr.total_steps = total_records;
  tr.record_bytes = total_records * h.step_bytes;
  if constexpr (v2) {
    if (h.record_bytes != 0) tr.record_bytes = total_records * h.record_bytes;
  }
  tr.trailer_crc = struct_crc(tr, &CheckpointTrailer::trailer_crc);
  std::memcpy(f.data() + trailer_at, &tr, sizeof tr);
  h.header_crc = struct_crc(h, &Header::header_crc);
  std::memcpy(f.data(), &h, sizeof h);
}

// repair_as for the format the file says it has (its major version at byte 8), both readers' paths.
void repair(std::vector<uint8_t>& f) {
  uint32_t major = 0;
  if (f.size() >= 12) std::memcpy(&major, f.data() + 8, sizeof major);
  if (major == checkpoint_format::v1::kFormatMajor) {
    repair_as<checkpoint_format::v1::CheckpointHeader, checkpoint_format::v1::EnvSection>(f);
  } else {
    repair_as<CheckpointHeader, EnvSection>(f);
  }
}

// A segment this large is not built: the fuzzer looks for mistakes, not for the size of /dev/shm.
constexpr uint64_t kMaxSegmentBytes = 32ull << 20;

bool small_enough(const CheckpointInfo& info) {
  const uint64_t steps = info.num_envs * info.capacity;  // both bounded by verify (2^20 x 2^40 fits)
  if (info.num_envs > 4096 || steps > (1u << 22)) return false;
  const uint64_t bytes = steps * (info.schema.step_bytes() + 8) + info.num_envs * info.episode_queue_capacity * 32;
  return info.schema.step_bytes() <= kMaxSegmentBytes && bytes <= kMaxSegmentBytes;
}

// What a load into a new segment made of a checkpoint must save back to: the same envs, each with the same steps
// (first step, head, records) and online start (claimed may differ: a partly filled env whose writer was mid-write
// saves as claimed = head, the same steps; with a stacked or compressed field, a step whose frames the restart
// reserve or the budget does not hold is left out, so the window may start later); and for a format 2.0 file the same state: alpha, running maximum,
// limiter settings, offset and counts, learner counters, stack rule. Any Error here is a finding too: the state came
// from a verified file.
void check_round_trip(const std::string& name, const CheckpointInfo& loaded) {
  const std::string again = fuzz::private_dir() + "/again.ckpt";
  const Buffer b = Buffer::open(name, {.read_only = true});
  const CheckpointInfo saved = save_checkpoint(b, again);
  const CheckpointInfo verified = verify_checkpoint(again);
  // A compressed field's records name frames numbered anew by the load (and its budget may leave steps out): its
  // steps are compared as a stacked field's are.
  const bool stacked = !segment_of(b).stacks().empty() || !segment_of(b).packed().empty();
  if (saved.envs.size() != loaded.envs.size() || (!stacked && verified.total_steps != loaded.total_steps) ||
      !(verified.schema == loaded.schema) || !(verified.episode_fields == loaded.episode_fields)) {
    std::abort();
  }
  for (std::size_t k = 0; k < loaded.envs.size(); ++k) {
    const CheckpointEnv& a = loaded.envs[k];
    const CheckpointEnv& c = verified.envs[k];
    if (a.env != c.env || a.head != c.head || a.online_start != c.online_start) std::abort();
    if (stacked ? c.first_step < a.first_step
                : a.first_step != c.first_step || a.steps != c.steps || a.data_crc != c.data_crc) {
      std::abort();
    }
  }
  if (loaded.holds_state()) {
    const CheckpointLimiter& l = loaded.limiter;
    const CheckpointLimiter& v = verified.limiter;
    if (verified.priority_exponent != loaded.priority_exponent || !(verified.learner == loaded.learner) ||
        v.limit != l.limit || v.samples != l.samples || v.changes != l.changes ||
        v.last_sample_ns != l.last_sample_ns || v.learner_limited != l.learner_limited ||
        v.writers_limited != l.writers_limited || v.writer_timeouts != l.writer_timeouts ||
        (l.limit && v.error_offset != l.error_offset) ||
        (loaded.priority_exponent && verified.max_priority != loaded.max_priority) ||
        (stacked && verified.stack_continuity != loaded.stack_continuity)) {
      std::abort();
    }
  }
  ::unlink(again.c_str());
}

void load_and_read(const std::string& path, fuzz::Choices& choices) {
  const std::string name = "loaded";
  CheckpointInfo info;
  try {
    info = verify_checkpoint(path);
    if (!small_enough(info)) return;
    (void)load_checkpoint(path, name);
  } catch (const Error&) {
    return;
  }
  check_round_trip(name, info);
  fuzz::read_as_inspector(name, choices);
  fuzz::drive_learner(name, choices);
  try {
    (void)load_checkpoint(path, name);  // into the existing segment this time
  } catch (const Error&) {
  }
  fuzz::read_as_inspector(name, choices);
  try {
    Buffer::remove(name);
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = fuzz::private_dir() + "/input.ckpt";
  fuzz::Choices choices(data, size);
  fuzz::write_file(path, data, size);
  load_and_read(path, choices);
  std::vector<uint8_t> repaired(data, data + size);
  repair(repaired);
  fuzz::write_file(path, repaired.data(), repaired.size());
  load_and_read(path, choices);
  return 0;
}
