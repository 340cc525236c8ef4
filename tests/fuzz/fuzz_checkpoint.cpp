// Fuzz target: a checkpoint file of arbitrary bytes, loaded twice: as it is, and with its checksums, sizes and
// totals repaired (so that mutations reach the loader's own checks, the segment it builds, and a learner over
// that segment, instead of stopping at the first CRC). Each time: verify_checkpoint, load_checkpoint into a new
// segment, save that segment and check the new file holds the same steps, read it as the inspector and the
// learner do, then load the file again into that existing segment. shmreplay::Error is the expected refusal of
// the input; anything else (or an Error from saving what was loaded) is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
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

// Rewrites what a writer computes from the rest of the file: file_bytes, the meta CRC, each env section's data and
// header CRC (walking the sections as the loader does, as far as they fit), the totals, the trailer's and the
// header's CRC.
void repair(std::vector<uint8_t>& f) {
  if (f.size() < sizeof(CheckpointHeader) + sizeof(CheckpointTrailer)) return;
  CheckpointHeader h;
  std::memcpy(&h, f.data(), sizeof h);
  const uint64_t size = f.size();
  h.file_bytes = size;
  const uint64_t trailer_at = size - sizeof(CheckpointTrailer);
  uint64_t total_steps = 0;
  if (h.header_bytes >= sizeof h && h.header_bytes <= trailer_at && h.meta_bytes <= trailer_at - h.header_bytes) {
    h.meta_crc = detail::crc32(0, f.data() + h.header_bytes, h.meta_bytes);
    uint64_t at = h.header_bytes + h.meta_bytes;
    for (uint64_t k = 0; k < std::min<uint64_t>(h.num_envs, 1u << 16) && at + sizeof(EnvSection) <= trailer_at; ++k) {
      EnvSection e;
      std::memcpy(&e, f.data() + at, sizeof e);
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(e.steps, h.step_bytes, &bytes) || bytes > trailer_at - at - sizeof e) break;
      e.data_crc = detail::crc32(0, f.data() + at + sizeof e, bytes);
      e.header_crc = struct_crc(e, &EnvSection::header_crc);
      std::memcpy(f.data() + at, &e, sizeof e);
      at += sizeof e + bytes;
      total_steps += e.steps;
    }
  }
  CheckpointTrailer tr;
  std::memcpy(&tr, f.data() + trailer_at, sizeof tr);
  h.total_steps = total_steps;
  tr.total_steps = total_steps;
  tr.record_bytes = total_steps * h.step_bytes;
  tr.trailer_crc = struct_crc(tr, &CheckpointTrailer::trailer_crc);
  std::memcpy(f.data() + trailer_at, &tr, sizeof tr);
  h.header_crc = struct_crc(h, &CheckpointHeader::header_crc);
  std::memcpy(f.data(), &h, sizeof h);
}

// A segment this large is not built: the fuzzer looks for mistakes, not for the size of /dev/shm.
constexpr uint64_t kMaxSegmentBytes = 32ull << 20;

bool small_enough(const CheckpointInfo& info) {
  const uint64_t steps = info.num_envs * info.capacity;  // both bounded by verify (2^20 x 2^40 fits)
  if (info.num_envs > 4096 || steps > (1u << 22)) return false;
  const uint64_t bytes = steps * (info.schema.step_bytes() + 8) + info.num_envs * info.episode_queue_capacity * 32;
  return info.schema.step_bytes() <= kMaxSegmentBytes && bytes <= kMaxSegmentBytes;
}

// What a load made of a checkpoint must save back to: the same envs, each with the same steps (first step, head,
// records) and online start. (claimed may differ: a partly filled env whose writer was mid-write saves as
// claimed = head, the same steps.) Any Error here is a finding too: the state came from a verified file.
void check_round_trip(const std::string& name, const CheckpointInfo& loaded) {
  const std::string again = fuzz::private_dir() + "/again.ckpt";
  const Buffer b = Buffer::open(name, {.read_only = true});
  const CheckpointInfo saved = save_checkpoint(b, again);
  const CheckpointInfo verified = verify_checkpoint(again);
  if (saved.envs.size() != loaded.envs.size() || verified.total_steps != loaded.total_steps ||
      !(verified.schema == loaded.schema) || !(verified.episode_fields == loaded.episode_fields)) {
    std::abort();
  }
  for (std::size_t k = 0; k < loaded.envs.size(); ++k) {
    const CheckpointEnv& a = loaded.envs[k];
    const CheckpointEnv& c = verified.envs[k];
    if (a.env != c.env || a.first_step != c.first_step || a.steps != c.steps || a.head != c.head ||
        a.online_start != c.online_start || a.data_crc != c.data_crc) {
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
