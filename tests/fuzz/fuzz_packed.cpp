// Fuzz target: the compressed fields' decoding path (docs/design/compression.md, "Reading"). The first byte picks
// what the rest is:
//   - a record through decode_frame (lz4 or zstd, an output size from the input, with or without a dictionary):
//     it must never write past the output (an exactly sized vector under AddressSanitizer), allocate by the
//     input's size or crash;
//   - bytes written over a compressed buffer's byte ring and records' lengths (a corrupt or truncated segment):
//     read_steps and a sample must then either refuse the copy with shmreplay::Error or return exactly the steps
//     pushed, never bytes that did not pass the record checks.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "detail/os/codec.hpp"
#include "fuzz_support.hpp"

namespace {

using namespace shmreplay;

constexpr uint64_t kSide = 16;
constexpr uint64_t kFrame = kSide * kSide;
constexpr uint64_t kEnvs = 2;
constexpr uint64_t kSteps = 24;

// Byte i of frame `id` (0: the zero frame): flat with a stripe that moves, so the codecs shrink it.
uint8_t frame_byte(uint64_t id, uint64_t i) {
  if (id == 0) return 0;
  return (i / kSide + id) % 7 == 0 ? static_cast<uint8_t>(id * 13) : static_cast<uint8_t>(40 + id % 3);
}

// Step s of env e: frames s-2 .. s+1 (0 before the first), then the step number.
std::vector<uint8_t> step_bytes(uint64_t e, uint64_t s) {
  std::vector<uint8_t> out(4 * kFrame + 8);
  for (uint64_t k = 0; k < 4; ++k) {
    const uint64_t id = s + k + 1 >= 4 ? (s + k + 1 - 3) * 10 + e : 0;
    for (uint64_t i = 0; i < kFrame; ++i) out[k * kFrame + i] = frame_byte(id, i);
  }
  std::memcpy(out.data() + 4 * kFrame, &s, 8);
  return out;
}

void decode_record(const uint8_t* data, std::size_t size) {
  if (size < 3) return;
  const Codec codec = data[0] % 2 == 0 ? Codec::lz4 : Codec::zstd;
  const std::size_t n = 1 + (static_cast<std::size_t>(data[1]) << 8 | data[2]);  // at most 64 KiB
  std::vector<std::byte> out(n);
  // Against a dictionary of n bytes (a frame coded against its predecessor) when the first byte says so.
  std::vector<std::byte> dict(data[0] & 2 ? n : 0, std::byte{7});
  (void)detail::decode_frame(codec, reinterpret_cast<const std::byte*>(data + 3), size - 3,
                             dict.empty() ? nullptr : dict.data(), out.data(), n);
}

// Every step read_steps returned must be the pushed one (abort: a finding).
void check_steps(const StepRecords& r) {
  for (uint64_t i = 0; i < r.count; ++i) {
    const std::vector<uint8_t> want = step_bytes(r.env, r.first_step + i);
    if (std::memcmp(r.bytes.data() + i * r.record_bytes, want.data(), want.size()) != 0) std::abort();
  }
}

void corrupt_ring(const uint8_t* data, std::size_t size) {
  const std::string name = "packed";
  if (Buffer::exists(name)) Buffer::remove(name);
  Buffer b = Buffer::create(name, kEnvs, 16, Schema::parse(data[0] % 2 ? "obs:u8[4,16,16]:stack=0:zstd=1 n:u64"
                                                                       : "obs:u8[4,16,16]:stack=0:lz4 n:u64"));
  {
    Writer w(b, {0, 1});
    for (uint64_t s = 0; s < kSteps; ++s) {
      for (uint64_t e = 0; e < kEnvs; ++e) {
        const std::vector<uint8_t> v = step_bytes(e, s);
        w.push_one(e, {{v.data(), 4 * kFrame}, {v.data() + 4 * kFrame, 8}});
      }
    }
  }
  Segment& seg = segment_of(b);
  const PackedGeometry& g = seg.packed()[0];
  // Input after the first byte: (offset, value) pairs over env 0's ring, and a record length to cut.
  for (std::size_t i = 1; i + 2 < size; i += 3) {
    const uint64_t at = (static_cast<uint64_t>(data[i]) << 8 | data[i + 1]) % g.ring_bytes;
    seg.packed_ring(0, 0)[at] = static_cast<std::byte>(data[i + 2]);
  }
  if (size % 5 == 0) {  // a truncated record: its length shortened, its bytes and CRC left
    layout::PackedFrameDesc& d = seg.packed_descs(0, 0)[data[size - 1] % g.stack.frames];
    const uint64_t meta = d.meta.load();
    d.meta.store((meta & ~uint64_t{0xffffffff}) | ((meta & 0xffffffff) * data[0] / 256));
  }
  for (uint64_t e = 0; e < kEnvs; ++e) {
    try {
      check_steps(read_steps(b, e, 0, kSteps));
    } catch (const Error&) {  // refused: the expected outcome
    }
  }
  try {
    Sampler s(b);
    Rng rng(size);
    SampleBatch batch;
    s.sample(View::replay, 8, 4, 1.0, rng, batch);
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      for (std::size_t t = 0; t < batch.sequence_length(); ++t) {
        if (!batch.valid(row, t)) continue;
        const std::vector<uint8_t> want = step_bytes(batch.env_ids()[row], batch.start_steps()[row] + t);
        if (std::memcmp(batch.step(0, row, t), want.data(), 4 * kFrame) != 0) std::abort();
      }
    }
  } catch (const Error&) {
  }
  Buffer::remove(name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  (void)shmreplay::fuzz::private_dir();
  if (size < 2) return 0;
  if (data[0] < 128) {
    decode_record(data + 1, size - 1);
  } else {
    corrupt_ring(data + 1, size - 1);
  }
  return 0;
}
