// lib/checkpoint/packed_records.cpp: compressed fields saved as their records (format 2.3): the save's copy, the
// verify's check and the load's rebuild (packed_records.hpp).
#include "checkpoint/packed_records.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "detail/os/codec.hpp"
#include "detail/os/crc32c.hpp"
#include "detail/protocol/packed_frames.hpp"
#include "detail/storage/packed_ring.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay::detail {
namespace {

using checkpoint_format::kFrameKey;
using checkpoint_format::kFrameRaw;
using checkpoint_format::PackedBlockHeader;
using checkpoint_format::PackedFrameBytes;

constexpr uint64_t pad8(uint64_t n) noexcept { return (n + 7) / 8 * 8; }

uint64_t read_word(const std::byte* at) noexcept {
  uint64_t v = 0;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// The schema indices of the compressed fields, in schema order (Segment::packed() order).
std::vector<std::size_t> compressed_fields(const Schema& schema) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < schema.size(); ++i) {
    if (schema[i].compressed()) out.push_back(i);
  }
  return out;
}

}  // namespace

RecordLayout record_layout(const Schema& schema, bool packed) {
  RecordLayout r;
  r.packed = packed;
  for (std::size_t i = 0; i < schema.size(); ++i) {
    r.offsets.push_back(r.bytes);
    r.bytes += packed && schema[i].compressed() ? sizeof(uint64_t) : schema[i].bytes();
  }
  return r;
}

// -- the save's copy ----------------------------------------------------------------------------------------------

PackedSaveCopy::PackedSaveCopy(const Segment& seg, const StorageSet& storages, const RecordLayout& layout,
                               std::byte* dst)
    : seg_(seg), storages_(storages), layout_(layout), dst_(dst), fields_(compressed_fields(seg.schema())),
      logs_(fields_.size()) {}

void PackedSaveCopy::copy(uint64_t env, uint64_t first, uint64_t count) const noexcept {
  std::byte* outs[kMaxFields];
  for (std::size_t k = 0; k < storages_.kinds().size(); ++k) {
    if (storages_.kind_id(k) == layout::kStorageCompressed) continue;
    const FieldStorage& kind = *storages_.kinds()[k];
    for (std::size_t i = 0; i < kind.fields().size(); ++i) outs[i] = dst_ + layout_.offsets[kind.fields()[i]];
    kind.copy_steps(seg_, env, first, count, outs, layout_.bytes);
  }
  for (std::size_t p = 0; p < fields_.size(); ++p) copy_frames(p, env, first, count);
}

void PackedSaveCopy::copy_frames(std::size_t p, uint64_t env, uint64_t first, uint64_t count) const noexcept {
  const PackedGeometry& g = seg_.packed()[p];
  const StackGeometry& st = g.stack;
  const layout::PackedFrameDesc* descs = seg_.packed_descs(p, env);
  const std::byte* ring = seg_.packed_ring(p, env);
  const std::atomic<uint64_t>* index = seg_.packed_index(p, env);
  const uint64_t cap = seg_.capacity();
  const std::size_t field = fields_[p];
  for (uint64_t i = 0; i < count; ++i) {  // the records' words: each step's newest frame
    const uint64_t newest = index[(first + i) % cap].load(std::memory_order_relaxed);
    std::memcpy(dst_ + i * layout_.bytes + layout_.offsets[field], &newest, sizeof newest);
  }
  FrameLog& log = logs_[p];
  const uint64_t newest = index[(first + count - 1) % cap].load(std::memory_order_relaxed);
  const uint64_t oldest = index[first % cap].load(std::memory_order_relaxed) + 1 - st.depth;
  const auto fault = [&](uint64_t frame, FrameFault why) {
    note_storage_fault({field, env, first, frame, frame_fault_text(why)});
  };
  uint64_t from = log.next();
  if (log.heads.empty()) {  // the run's first frames: back to the key frame the oldest is coded against
    from = oldest;
    for (uint64_t n = 0;; ++n) {
      const layout::PackedFrameDesc& d = descs[from % st.frames];
      if (d.frame.load(std::memory_order_relaxed) == from &&
          (d.meta.load(std::memory_order_relaxed) & layout::kPackedKey) != 0) {
        break;
      }
      if (n + 1 >= kPackedKeyEvery || from == 0) return fault(from, FrameFault::stale);
      --from;
    }
    log.first = from;
  }
  // Torn index words can say anything: a copy takes at most the frames `count` steps can add.
  if (newest + 1 < from || newest + 1 - from > (count + 1) * st.depth + kPackedKeyEvery) {
    return fault(newest, FrameFault::stale);
  }
  for (uint64_t x = from; x <= newest; ++x) {
    const layout::PackedFrameDesc& d = descs[x % st.frames];
    const uint64_t pos = d.pos.load(std::memory_order_relaxed);
    const uint64_t meta = d.meta.load(std::memory_order_relaxed);
    const auto crc = static_cast<uint32_t>(d.crc.load(std::memory_order_relaxed));
    const uint64_t len = meta & 0xffffffffu;
    const uint64_t at = pos % g.ring_bytes;
    if (d.frame.load(std::memory_order_relaxed) != x || len == 0 || len > st.frame_bytes ||
        at + len > g.ring_bytes || (meta >> 34) != 0) {
      return fault(x, FrameFault::stale);
    }
    const std::size_t off = log.bytes.size();
    log.bytes.resize(off + len);  // within the capacity reserve() made: no allocation
    std::memcpy(log.bytes.data() + off, ring + at, len);
    // Checked on the copy (what the file gets): a torn record fails here and its copy does not validate; a record
    // that fails in a copy that validates is corrupt in the segment, and the save refuses it.
    if (crc32c(0, log.bytes.data() + off, len) != crc) fault(x, FrameFault::checksum);
    const uint32_t flags = ((meta & layout::kPackedRaw) != 0 ? kFrameRaw : 0) |
                           ((meta & layout::kPackedKey) != 0 ? kFrameKey : 0);
    log.heads.push_back({static_cast<uint32_t>(len), flags, crc, 0});
    log.at.push_back(off);
  }
}

void PackedSaveCopy::reserve(uint64_t count) {
  for (std::size_t p = 0; p < fields_.size(); ++p) {
    const StackGeometry& st = seg_.packed()[p].stack;
    const uint64_t frames = (count + 1) * st.depth + kPackedKeyEvery + 1;
    FrameLog& log = logs_[p];
    // Geometric growth: reserve() takes exactly what it is asked, and a run grows a chunk at a time.
    const auto grow = [](auto& v, std::size_t more) {
      if (v.size() + more > v.capacity()) v.reserve(std::max(v.size() + more, 2 * v.capacity()));
    };
    grow(log.bytes, frames * st.frame_bytes);
    grow(log.heads, frames);
    grow(log.at, frames);
  }
}

std::vector<std::size_t> PackedSaveCopy::mark() const {
  std::vector<std::size_t> m;
  for (const FrameLog& log : logs_) m.push_back(log.heads.size());
  return m;
}

void PackedSaveCopy::rollback(const std::vector<std::size_t>& mark) {
  for (std::size_t p = 0; p < logs_.size(); ++p) {
    FrameLog& log = logs_[p];
    if (mark[p] >= log.heads.size()) continue;
    log.bytes.resize(mark[p] == 0 ? 0 : log.at[mark[p] - 1] + log.heads[mark[p] - 1].length);
    log.heads.resize(mark[p]);
    log.at.resize(mark[p]);
  }
}

void PackedSaveCopy::clear() {
  for (FrameLog& log : logs_) {
    log.heads.clear();
    log.at.clear();
    log.bytes.clear();
  }
}

void PackedSaveCopy::trim_for(const std::byte* record) {
  for (std::size_t p = 0; p < logs_.size(); ++p) {
    FrameLog& log = logs_[p];
    const uint64_t oldest = read_word(record + layout_.offsets[fields_[p]]) + 1 - seg_.packed()[p].stack.depth;
    if (log.heads.empty() || oldest <= log.first || oldest >= log.next()) continue;
    uint64_t from = oldest;  // back to the key frame it is coded against
    while (from > log.first && (log.heads[from - log.first].flags & kFrameKey) == 0) --from;
    const std::size_t drop = from - log.first;
    const uint64_t bytes = log.at[drop];
    log.bytes.erase(log.bytes.begin(), log.bytes.begin() + static_cast<std::ptrdiff_t>(bytes));
    log.heads.erase(log.heads.begin(), log.heads.begin() + static_cast<std::ptrdiff_t>(drop));
    log.at.erase(log.at.begin(), log.at.begin() + static_cast<std::ptrdiff_t>(drop));
    for (uint64_t& a : log.at) a -= bytes;
    log.first = from;
  }
}

uint64_t PackedSaveCopy::write(OutFile& out, uint64_t at, uint32_t& crc) const {
  crc = 0;
  uint64_t written = 0;
  std::vector<std::byte> buf;
  const auto put = [&](const void* data, uint64_t n) {
    const auto* b = static_cast<const std::byte*>(data);
    buf.insert(buf.end(), b, b + n);
  };
  const auto flush = [&] {
    out.write_at(at + written, buf.data(), buf.size());
    crc = crc32(crc, buf.data(), buf.size());
    written += buf.size();
    buf.clear();
  };
  static constexpr std::byte kZeros[8] = {};
  for (std::size_t p = 0; p < logs_.size(); ++p) {
    const FrameLog& log = logs_[p];
    PackedBlockHeader h{fields_[p], log.first, log.heads.size(), 0};
    for (const PackedFrameBytes& f : log.heads) h.bytes += sizeof f + pad8(f.length);
    put(&h, sizeof h);
    for (std::size_t k = 0; k < log.heads.size(); ++k) {
      put(&log.heads[k], sizeof log.heads[k]);
      put(log.bytes.data() + log.at[k], log.heads[k].length);
      put(kZeros, pad8(log.heads[k].length) - log.heads[k].length);
      if (buf.size() >= kIoBlockBytes) flush();
    }
  }
  flush();
  return written;
}

// -- the frame block, read back -----------------------------------------------------------------------------------

namespace {

// One compressed field's part of a frame block: its header and each record's header and bytes.
struct ParsedField {
  PackedBlockHeader head{};
  std::vector<const PackedFrameBytes*> heads;
  std::vector<const std::byte*> records;
};

// Parses and checks the block `b` of env `e` (structure, lengths, flags, CRC-32C of every record); throws corrupt.
std::vector<ParsedField> parse_block(const CheckpointInfo& info, const CheckpointEnv& e,
                                     const std::vector<std::byte>& b) {
  const auto bad = [&](const std::string& what) {
    corrupt(info.path, fmt::format("env {}'s compressed frames (bytes {}-{}): {}", e.env,
                                   e.records_offset + e.steps * info.record_bytes,
                                   e.records_offset + e.steps * info.record_bytes + e.frame_bytes - 1, what));
  };
  std::vector<ParsedField> out;
  uint64_t at = 0;
  for (const std::size_t index : compressed_fields(info.schema)) {
    const uint64_t frame_bytes = packed_shape(info.schema[index], index).frame_bytes;
    ParsedField f;
    if (b.size() - at < sizeof f.head) bad(fmt::format("the block ends before field '{}'", info.schema[index].name));
    std::memcpy(&f.head, b.data() + at, sizeof f.head);
    at += sizeof f.head;
    if (f.head.field != index || f.head.bytes > b.size() - at ||
        f.head.frames > f.head.bytes / sizeof(PackedFrameBytes)) {
      bad(fmt::format("the header of field '{}' says field {}, {} frames in {} bytes ({} bytes left)",
                      info.schema[index].name, f.head.field, f.head.frames, f.head.bytes, b.size() - at));
    }
    const uint64_t end = at + f.head.bytes;
    for (uint64_t k = 0; k < f.head.frames; ++k) {
      const uint64_t frame = f.head.first_frame + k;
      if (end - at < sizeof(PackedFrameBytes)) {
        bad(fmt::format("frame {} of field '{}' is cut off", frame, info.schema[index].name));
      }
      const auto* h = reinterpret_cast<const PackedFrameBytes*>(b.data() + at);  // 8-aligned in the block
      at += sizeof *h;
      const bool raw = (h->flags & kFrameRaw) != 0;
      if (h->length == 0 || h->length > frame_bytes || pad8(h->length) > end - at || (h->flags & ~3u) != 0 ||
          h->reserved != 0 || (raw && (h->length != frame_bytes || (h->flags & kFrameKey) == 0)) ||
          (k == 0 && (h->flags & kFrameKey) == 0)) {
        bad(fmt::format("frame {} of field '{}' has length {} and flags {:#x} (a frame is {} bytes; the first must "
                        "be a key frame)", frame, info.schema[index].name, h->length, h->flags, frame_bytes));
      }
      const uint32_t crc = crc32c(0, b.data() + at, h->length);
      if (crc != h->crc32c) {
        bad(fmt::format("frame {} of field '{}' fails its CRC-32C: stored {:#010x}, computed {:#010x}; it is never "
                        "decoded", frame, info.schema[index].name, h->crc32c, crc));
      }
      f.heads.push_back(h);
      f.records.push_back(b.data() + at);
      at += pad8(h->length);
    }
    if (at != end) bad(fmt::format("field '{}' has {} bytes after its frames", info.schema[index].name, end - at));
    out.push_back(std::move(f));
  }
  if (at != b.size()) bad(fmt::format("{} bytes follow the last field's frames", b.size() - at));
  return out;
}

std::vector<std::byte> read_block(const InFile& in, const CheckpointInfo& info, const CheckpointEnv& e) {
  std::vector<std::byte> b(static_cast<std::size_t>(e.frame_bytes));
  in.read_at(e.records_offset + e.steps * info.record_bytes, b.data(), b.size());
  return b;
}

}  // namespace

void check_frame_block(const InFile& in, const CheckpointInfo& info, const CheckpointEnv& e) {
  const std::vector<std::byte> b = read_block(in, info, e);
  const uint32_t crc = crc32(0, b.data(), b.size());
  const uint64_t at = e.records_offset + e.steps * info.record_bytes;
  if (crc != e.frame_crc) {
    corrupt(info.path, fmt::format("env {}'s compressed frames (bytes {}-{}) fail their checksum: stored {:#010x}, "
                                   "computed {:#010x}", e.env, at, at + b.size() - 1, e.frame_crc, crc));
  }
  const std::vector<ParsedField> fields = parse_block(info, e, b);
  // Every record's stack lies in the block, and the stacks move forward (the load decodes each frame once, in order).
  const RecordLayout layout = record_layout(info.schema, true);
  std::vector<std::byte> records(static_cast<std::size_t>(block_steps(layout.bytes, e.steps) * layout.bytes));
  std::vector<uint64_t> last(fields.size(), 0);
  for (uint64_t done = 0; done < e.steps;) {
    const uint64_t n = std::min<uint64_t>(records.size() / layout.bytes, e.steps - done);
    in.read_at(e.records_offset + done * layout.bytes, records.data(), n * layout.bytes);
    for (uint64_t i = 0; i < n; ++i) {
      for (std::size_t p = 0; p < fields.size(); ++p) {
        const std::size_t index = fields[p].head.field;
        const uint64_t depth = packed_shape(info.schema[index], index).depth;
        const uint64_t newest = read_word(records.data() + i * layout.bytes + layout.offsets[index]);
        const uint64_t first = fields[p].head.first_frame;
        if (newest + 1 < depth || newest + 1 - depth < first || newest - first >= fields[p].head.frames ||
            newest < last[p]) {
          corrupt(info.path, fmt::format("env {}'s record of step {} names frames {} .. {} of field '{}', but its "
                                         "frame block holds frames {} .. {} (and the step before ended at {})",
                                         e.env, e.data_from + done + i, newest + 1 - depth, newest,
                                         info.schema[index].name, first, first + fields[p].head.frames - 1, last[p]));
        }
        last[p] = newest;
      }
    }
    done += n;
  }
}

// -- the load's rebuild --------------------------------------------------------------------------------------------

PackedFrameReader::PackedFrameReader(const InFile& in, const CheckpointInfo& info, const CheckpointEnv& e)
    : info_(info), e_(e), block_(read_block(in, info, e)) {
  if (crc32(0, block_.data(), block_.size()) != e.frame_crc) {
    throw Error(Errc::corrupt, fmt::format("checkpoint '{}' changed while it was loaded: env {}'s compressed frames "
                                           "no longer match their checksum", info.path, e.env));
  }
  for (ParsedField& p : parse_block(info, e, block_)) {
    const std::size_t index = p.head.field;
    const StackGeometry st = packed_shape(info.schema[index], index);
    Field f;
    f.index = index;
    f.depth = st.depth;
    f.frame_bytes = st.frame_bytes;
    f.outer = st.outer;
    f.inner_bytes = st.inner_bytes;
    f.codec = info.schema[index].codec;
    f.first = p.head.first_frame;
    f.heads = std::move(p.heads);
    f.records = std::move(p.records);
    f.ring.resize((st.depth + 1) * st.frame_bytes);
    fields_.push_back(std::move(f));
  }
}

void PackedFrameReader::fail(const Field& f, uint64_t step, uint64_t n, const std::string& why) const {
  throw Error(Errc::corrupt, fmt::format("checkpoint '{}' is corrupt: field '{}' of env {} step {} (frame {}) cannot "
                                         "be loaded: {}; nothing of it was stored",
                                         info_.path, info_.schema[f.index].name, e_.env, step, n, why));
}

const std::byte* PackedFrameReader::frame(Field& f, uint64_t step, uint64_t n) {
  const uint64_t slots = f.depth + 1;
  if (n < f.first || n - f.first >= f.heads.size()) fail(f, step, n, "the frame block lacks it");
  if (f.decoded != UINT64_MAX && n <= f.decoded) {
    if (f.decoded - n >= slots) fail(f, step, n, "the stacks go back in time");
    return f.ring.data() + (n % slots) * f.frame_bytes;
  }
  for (uint64_t x = f.decoded == UINT64_MAX ? f.first : f.decoded + 1; x <= n; ++x) {
    const PackedFrameBytes& h = *f.heads[x - f.first];
    std::byte* dst = f.ring.data() + (x % slots) * f.frame_bytes;
    const std::byte* dict = (h.flags & kFrameKey) != 0 ? nullptr : f.ring.data() + ((x - 1) % slots) * f.frame_bytes;
    if (dict != nullptr && x == f.first) fail(f, step, x, "it is coded against a frame the block lacks");
    if (crc32c(0, f.records[x - f.first], h.length) != h.crc32c) fail(f, step, x, "its record fails its CRC-32C");
    if ((h.flags & kFrameRaw) != 0) {
      std::memcpy(dst, f.records[x - f.first], f.frame_bytes);
    } else if (!decode_frame(f.codec, f.records[x - f.first], h.length, dict, dst, f.frame_bytes)) {
      fail(f, step, x, "its record does not decode to exactly one frame");
    }
    f.decoded = x;
  }
  return f.ring.data() + (n % slots) * f.frame_bytes;
}

void PackedFrameReader::rebuild(uint64_t step, const std::byte* packed, const RecordLayout& layout,
                                const std::vector<uint64_t>& full, std::byte* out) {
  std::size_t p = 0;
  for (std::size_t i = 0; i < info_.schema.size(); ++i) {
    if (!info_.schema[i].compressed()) {
      std::memcpy(out + full[i], packed + layout.offsets[i], info_.schema[i].bytes());
      continue;
    }
    Field& f = fields_[p++];
    const uint64_t newest = read_word(packed + layout.offsets[i]);
    if (newest + 1 < f.depth) fail(f, step, newest, "no stack ends there");
    std::byte* stack = out + full[i];
    for (uint64_t k = 0; k < f.depth; ++k) {
      const std::byte* fr = frame(f, step, newest + 1 - f.depth + k);
      for (uint64_t o = 0; o < f.outer; ++o) {
        std::memcpy(stack + (o * f.depth + k) * f.inner_bytes, fr + o * f.inner_bytes, f.inner_bytes);
      }
    }
  }
}

}  // namespace shmreplay::detail
