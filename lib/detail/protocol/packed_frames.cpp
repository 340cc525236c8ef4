// detail/protocol/packed_frames.cpp: both halves of the compressed fields' protocol (packed_frames.hpp).
#include "detail/protocol/packed_frames.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "detail/os/crc32c.hpp"
#include "detail/protocol/stacks.hpp"

namespace shmreplay::detail {
namespace {

using layout::PackedFrameDesc;

// A frame is `outer` runs of inner_bytes; a stack interleaves K frames as [outer][K][inner_bytes] (stacks.hpp). For
// outer == 1 (the stacked axis first, or an unstacked field) frame k is one run at k * frame_bytes.

// Copies frame `frame` ([outer][inner]) into stack position k of `stack`.
void put_frame(const StackGeometry& st, std::byte* stack, uint64_t k, const std::byte* frame) noexcept {
  for (uint64_t o = 0; o < st.outer; ++o) {
    std::memcpy(stack + (o * st.depth + k) * st.inner_bytes, frame + o * st.inner_bytes, st.inner_bytes);
  }
}

// Copies stack position k of `stack` into `frame` ([outer][inner]).
void get_frame(const StackGeometry& st, const std::byte* stack, uint64_t k, std::byte* frame) noexcept {
  for (uint64_t o = 0; o < st.outer; ++o) {
    std::memcpy(frame + o * st.inner_bytes, stack + (o * st.depth + k) * st.inner_bytes, st.inner_bytes);
  }
}

// Copies position `from` of stack `src` into position `to` of stack `dst`.
void move_frame(const StackGeometry& st, std::byte* dst, uint64_t to, const std::byte* src, uint64_t from) noexcept {
  for (uint64_t o = 0; o < st.outer; ++o) {
    std::memcpy(dst + (o * st.depth + to) * st.inner_bytes, src + (o * st.depth + from) * st.inner_bytes,
                st.inner_bytes);
  }
}

// Whether position k of `stack` equals `frame` ([outer][inner]).
bool frame_equals(const StackGeometry& st, const std::byte* stack, uint64_t k, const std::byte* frame) noexcept {
  for (uint64_t o = 0; o < st.outer; ++o) {
    if (std::memcmp(stack + (o * st.depth + k) * st.inner_bytes, frame + o * st.inner_bytes, st.inner_bytes) != 0) {
      return false;
    }
  }
  return true;
}

// Frame `frame` of one env's ring into `dst` (frame_bytes), checked: the descriptor is the frame's, the record lies
// inside the ring and is at most a frame, its CRC-32 matches, it decodes to exactly a frame. `dict`: the frame before
// it, decoded (nullptr when the caller has none: then a frame coded against it is a fault).
FrameFault read_frame(const PackedGeometry& g, const PackedFrameDesc* descs, const std::byte* ring, uint64_t frame,
                      const std::byte* dict, std::byte* dst) noexcept {
  const PackedFrameDesc& d = descs[frame % g.stack.frames];
  if (d.frame.load(std::memory_order_relaxed) != frame) return FrameFault::stale;
  const uint64_t pos = d.pos.load(std::memory_order_relaxed);
  const uint64_t meta = d.meta.load(std::memory_order_relaxed);
  const auto crc = static_cast<uint32_t>(d.crc.load(std::memory_order_relaxed));
  const uint64_t len = meta & 0xffffffffu;
  const bool raw = (meta & layout::kPackedRaw) != 0;
  const bool key = (meta & layout::kPackedKey) != 0;
  const uint64_t at = pos % g.ring_bytes;
  if (len == 0 || len > g.stack.frame_bytes || at + len > g.ring_bytes || (raw && (len != g.stack.frame_bytes || !key)) ||
      (meta >> 34) != 0 || (!key && dict == nullptr)) {
    return FrameFault::stale;
  }
  const std::byte* src = ring + at;
  if (crc32c(0, src, len) != crc) return FrameFault::checksum;
  if (raw) {
    std::memcpy(dst, src, len);
    return FrameFault::none;
  }
  return decode_frame(g.codec, src, len, key ? nullptr : dict, dst, g.stack.frame_bytes) ? FrameFault::none
                                                                                         : FrameFault::decode;
}

// The newest frame a copy has decoded whole (its bytes contiguous): the frame after it decodes against it.
struct Decoded {
  uint64_t frame = UINT64_MAX;
  const std::byte* bytes = nullptr;
};

// This thread's frame buffers: two for the frames of an interleaved stack (frame n in buffer n % 2), two for the
// frames a random read decodes before the one it wants (frame n in buffer 2 + n % 2). Grown once, to the largest
// frame.
std::byte* thread_frames(uint64_t frame_bytes) {
  thread_local std::vector<std::byte> buffer;
  if (buffer.size() < 4 * frame_bytes) buffer.resize(4 * frame_bytes);
  return buffer.data();
}

// Frame `frame` into `dst` (contiguous), with the frames it is coded against decoded first unless `last` is the
// frame before it; `last` becomes it. A chain longer than kPackedKeyEvery frames is a fault (torn or corrupt).
FrameFault decode_in_chain(const PackedGeometry& g, const PackedFrameDesc* descs, const std::byte* ring,
                           uint64_t frame, std::byte* dst, Decoded& last, std::byte* chain) noexcept {
  uint64_t from = frame;  // the first frame to decode: a key frame, or the one after `last`
  for (uint64_t n = 0; last.frame == UINT64_MAX || from != last.frame + 1; ++n) {
    const PackedFrameDesc& d = descs[from % g.stack.frames];
    if (d.frame.load(std::memory_order_relaxed) != from) return FrameFault::stale;
    if ((d.meta.load(std::memory_order_relaxed) & layout::kPackedKey) != 0) break;
    if (n + 1 >= kPackedKeyEvery || from == 0) return FrameFault::stale;
    --from;
  }
  const std::byte* dict = last.frame != UINT64_MAX && from == last.frame + 1 ? last.bytes : nullptr;
  for (uint64_t x = from; x < frame; ++x) {
    std::byte* into = chain + (x % 2) * g.stack.frame_bytes;
    if (const FrameFault f = read_frame(g, descs, ring, x, dict, into); f != FrameFault::none) return f;
    dict = into;
  }
  const FrameFault f = read_frame(g, descs, ring, frame, dict, dst);
  last = {frame, dst};
  return f;
}

}  // namespace

const char* frame_fault_text(FrameFault fault) noexcept {
  switch (fault) {
    case FrameFault::none: return "no fault";
    case FrameFault::stale: return "its descriptor names another frame or a record outside the ring";
    case FrameFault::checksum: return "its record's bytes do not match their CRC-32";
    case FrameFault::decode: return "its record does not decode to exactly one frame";
  }
  return "?";
}

PackedFault copy_packed_steps(const Segment& seg, std::size_t p, uint64_t env, uint64_t first, uint64_t count,
                              std::byte* out, uint64_t stride, const std::byte* before) noexcept {
  const PackedGeometry& g = seg.packed()[p];
  const StackGeometry& st = g.stack;
  const uint64_t depth = st.depth;
  const PackedFrameDesc* descs = seg.packed_descs(p, env);
  const std::byte* ring = seg.packed_ring(p, env);
  const std::atomic<uint64_t>* index = seg.packed_index(p, env);
  const uint64_t cap = seg.capacity();
  std::byte* frames = thread_frames(st.frame_bytes);  // [0, 2): an interleaved stack's; [2, 4): a chain's
  std::byte* chain = frames + 2 * st.frame_bytes;
  PackedFault fault;
  const auto note = [&](FrameFault f, uint64_t step, uint64_t frame) {
    if (fault.fault == FrameFault::none) fault = {f, step, frame};
  };
  Decoded last;
  const std::byte* prev = nullptr;  // the previous step's bytes, and its stack's oldest frame
  uint64_t prev_oldest = 0;
  if (before != nullptr && first > 0) {  // step first - 1, rebuilt by the caller: its frames need no decode
    const uint64_t newest = index[(first - 1) % cap].load(std::memory_order_relaxed);
    if (newest + 1 >= depth) {
      prev = before;
      prev_oldest = newest + 1 - depth;
      if (st.outer == 1) last = {newest, before + (depth - 1) * st.frame_bytes};
    }
  }
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t step = first + i;
    std::byte* dst = out + i * stride;
    const uint64_t newest = index[(step % cap)].load(std::memory_order_relaxed);
    if (newest + 1 < depth) {  // no stack ends there: a torn or corrupt word
      note(FrameFault::stale, step, newest);
      prev = nullptr;
      continue;
    }
    const uint64_t oldest = newest + 1 - depth;
    for (uint64_t k = 0; k < depth; ++k) {
      const uint64_t frame = oldest + k;
      if (prev != nullptr && frame >= prev_oldest && frame < prev_oldest + depth) {  // decoded for the step before
        move_frame(st, dst, k, prev, frame - prev_oldest);
        if (st.outer == 1) last = {frame, dst + k * st.frame_bytes};
        continue;
      }
      std::byte* into = st.outer == 1 ? dst + k * st.frame_bytes : frames + (frame % 2) * st.frame_bytes;
      if (const FrameFault f = decode_in_chain(g, descs, ring, frame, into, last, chain); f != FrameFault::none) {
        note(f, step, frame);
        last = {};
      }
      if (st.outer != 1) put_frame(st, dst, k, into);
    }
    prev = dst;
    prev_oldest = oldest;
  }
  return fault;
}

PackedCursor resume_packed(const Segment& seg, std::size_t p, uint64_t env, uint64_t head) noexcept {
  const PackedGeometry& g = seg.packed()[p];
  PackedCursor c;
  c.intact_from = seg.env_control(env).stacks_intact_from.load(std::memory_order_relaxed);
  if (head == 0) return c;
  const uint64_t newest = seg.packed_index(p, env)[(head - 1) % seg.capacity()].load(std::memory_order_relaxed);
  const PackedFrameDesc& d = seg.packed_descs(p, env)[newest % g.stack.frames];
  c.next_frame = newest + 1;
  c.byte_end = d.pos.load(std::memory_order_relaxed) + (d.meta.load(std::memory_order_relaxed) & 0xffffffffu);
  c.oldest_frame = c.next_frame > g.stack.frames ? c.next_frame - g.stack.frames : 0;
  return c;
}

PackedWriterEnv make_packed_env(const Segment& seg, uint64_t env, uint64_t head) {
  PackedWriterEnv w;
  for (std::size_t p = 0; p < seg.packed().size(); ++p) {
    const StackGeometry& st = seg.packed()[p].stack;
    PackedCursor c = resume_packed(seg, p, env, head);
    std::vector<std::byte> raw(st.depth * st.frame_bytes);
    // The newest published step's frames, decoded into the raw copy, so that the next step may continue its stack
    // (a new Writer then stores one frame, as its predecessor would have). The env is this writer's (it holds the
    // lease): nobody rewrites them meanwhile; a step that does not decode (lost to the budget, or a corrupt record)
    // leaves the copy empty, and the first step stores all K frames.
    if (head > 0 && head - 1 >= c.intact_from) {
      std::vector<std::byte> stack(st.depth * st.frame_bytes);
      if (copy_packed_steps(seg, p, env, head - 1, 1, stack.data(), stack.size()).fault == FrameFault::none) {
        for (uint64_t k = 0; k < st.depth; ++k) {
          get_frame(st, stack.data(), k, raw.data() + ((c.next_frame - st.depth + k) % st.depth) * st.frame_bytes);
        }
        c.raw_valid = true;
      }
    }
    w.cursors.push_back(c);
    w.raw.push_back(std::move(raw));
  }
  return w;
}

PackedScratch::PackedScratch(const Segment& seg) {
  for (const PackedGeometry& g : seg.packed()) {
    encoders.push_back(std::make_unique<FrameEncoder>(g.codec, g.level));
    encoded.emplace_back(g.stack.depth * g.stack.frame_bytes);
    frame.emplace_back(2 * g.stack.frame_bytes);
    records.emplace_back(g.stack.depth);
  }
  first_new.resize(seg.packed().size());
  lost.resize(seg.packed().size());
}

namespace {

// Encodes frames [first_new, K) of the pushed stack `stack` of field `p` into the scratch's records, each placed
// after the cursor's newest record (never across the ring's end: a record that would be is placed at the ring's
// next start), each coded against the frame before it but every kPackedKeyEvery-th, and any whose predecessor the
// writer has not got (its first frame in the env: `prev_raw` nullptr). Returns the cursor's byte_end after them.
uint64_t encode_new_frames(const PackedGeometry& g, std::size_t p, const std::byte* stack, const PackedCursor& cur,
                           const std::byte* prev_raw, PackedScratch& s) noexcept {
  const StackGeometry& st = g.stack;
  uint64_t byte_end = cur.byte_end;
  const std::byte* dict = prev_raw;  // the frame before the next one, whole
  for (uint64_t k = s.first_new[p]; k < st.depth; ++k) {
    const uint64_t number = cur.next_frame + (k - s.first_new[p]);
    const std::byte* frame = stack + k * st.frame_bytes;
    if (st.outer != 1) {
      std::byte* whole = s.frame[p].data() + (number % 2) * st.frame_bytes;
      get_frame(st, stack, k, whole);
      frame = whole;
    }
    std::byte* rec = s.encoded[p].data() + k * st.frame_bytes;
    PackedRecord& r = s.records[p][k];
    r.key = dict == nullptr || number % kPackedKeyEvery == 0;
    r.len = s.encoders[p]->encode(frame, st.frame_bytes, r.key ? nullptr : dict, rec, st.frame_bytes - 1);
    r.raw = r.len == 0;
    if (r.raw) {
      std::memcpy(rec, frame, st.frame_bytes);
      r.len = st.frame_bytes;
      r.key = true;
    }
    r.crc = crc32c(0, rec, r.len);
    uint64_t pos = (byte_end + 7) / 8 * 8;
    if (pos % g.ring_bytes + r.len > g.ring_bytes) pos += g.ring_bytes - pos % g.ring_bytes;
    r.pos = pos;
    byte_end = pos + r.len;
    dict = frame;
  }
  return byte_end;
}

}  // namespace

namespace {

// store_packed's first half for field `p`: its continuity, its new records (encoded into the scratch), the oldest
// frame and step still intact after them (into the cursor; the steps lost into s.lost[p]). Returns whether a stack
// that may continue was found not to.
bool plan_packed_field(Segment& seg, std::size_t p, uint64_t env, uint64_t step, const std::byte* pushed,
                       PackedWriterEnv& w, PackedScratch& s, bool may_continue, bool compare) noexcept {
  const PackedGeometry& g = seg.packed()[p];
  const StackGeometry& st = g.stack;
  PackedCursor& cur = w.cursors[p];
  const uint64_t cap = seg.capacity();
  // The previous step's stack is frames [next - K, next - 1]; this one continues it when its frames 0..K-2 are
  // that one's 1..K-1 (the raw copy holds them while it is whole).
  bool continues = st.depth > 1 && may_continue && cur.raw_valid;
  if (continues && compare) {
    for (uint64_t k = 0; k + 1 < st.depth && continues; ++k) {
      const uint64_t frame = cur.next_frame - st.depth + 1 + k;
      continues = frame_equals(st, pushed, k, w.raw[p].data() + (frame % st.depth) * st.frame_bytes);
    }
  }
  s.first_new[p] = continues ? st.depth - 1 : 0;
  // The frame before the step's first new one, whole: the writer's raw copy (none before its first stack).
  const std::byte* prev_raw =
      cur.raw_valid ? w.raw[p].data() + ((cur.next_frame - 1) % st.depth) * st.frame_bytes : nullptr;
  const uint64_t byte_end = encode_new_frames(g, p, pushed, cur, prev_raw, s);
  const uint64_t next = cur.next_frame + (st.depth - s.first_new[p]);
  // After this step's records and descriptors, the intact frames are those at least `lowest`: within the
  // descriptor ring, and whose record starts at most a ring behind the new end.
  uint64_t lowest = std::max(cur.oldest_frame, next > st.frames ? next - st.frames : 0);
  const PackedFrameDesc* descs = seg.packed_descs(p, env);
  while (lowest < cur.next_frame &&
         descs[lowest % st.frames].pos.load(std::memory_order_relaxed) + g.ring_bytes < byte_end) {
    ++lowest;
  }
  cur.oldest_frame = lowest;
  // The older steps that need a frame below `lowest` lose their stacks: a step needs its oldest frame (index - K
  // + 1) and the frames it is coded against, back to a key frame, at the latest the multiple of kPackedKeyEvery at
  // or below it.
  const std::atomic<uint64_t>* index = seg.packed_index(p, env);
  const uint64_t from = std::max(cur.intact_from, step + 1 > cap ? step + 1 - cap : 0);
  uint64_t x = from;
  while (x < step) {
    const uint64_t oldest = index[x % cap].load(std::memory_order_relaxed) + 1 - st.depth;
    if (oldest / kPackedKeyEvery * kPackedKeyEvery >= lowest) break;
    ++x;
  }
  s.lost[p] = x - from;
  cur.intact_from = x;
  return st.depth > 1 && may_continue && cur.raw_valid && !continues;
}

// store_packed's second half for field `p`, after the fence: the records, their descriptors, the raw copy, the
// step's index word and the env's counters.
void write_packed_field(Segment& seg, std::size_t p, uint64_t env, uint64_t step, const std::byte* pushed,
                        PackedWriterEnv& w, const PackedScratch& s) noexcept {
  const PackedGeometry& g = seg.packed()[p];
  const StackGeometry& st = g.stack;
  PackedCursor& cur = w.cursors[p];
  std::byte* ring = seg.packed_ring(p, env);
  PackedFrameDesc* descs = seg.packed_descs(p, env);
  uint64_t bytes = 0;
  uint64_t raws = 0;
  for (uint64_t k = s.first_new[p]; k < st.depth; ++k) {
    const PackedRecord& r = s.records[p][k];
    std::memcpy(ring + r.pos % g.ring_bytes, s.encoded[p].data() + k * st.frame_bytes, r.len);
    // Covered by the step seqlock, as the step's other bytes: stored between the claim and the head store.
    PackedFrameDesc& d = descs[cur.next_frame % st.frames];
    d.pos.store(r.pos, std::memory_order_relaxed);
    d.meta.store(r.len | (r.raw ? layout::kPackedRaw : 0) | (r.key ? layout::kPackedKey : 0),
                 std::memory_order_relaxed);
    d.crc.store(r.crc, std::memory_order_relaxed);
    d.frame.store(cur.next_frame, std::memory_order_relaxed);
    // The raw copy for the next step's compare and dictionary: frame n at slot n % K.
    std::byte* keep = w.raw[p].data() + (cur.next_frame % st.depth) * st.frame_bytes;
    if (st.outer == 1) {
      std::memcpy(keep, pushed + k * st.frame_bytes, st.frame_bytes);
    } else {
      get_frame(st, pushed, k, keep);
    }
    cur.byte_end = r.pos + r.len;
    ++cur.next_frame;
    bytes += r.len;
    raws += r.raw ? 1 : 0;
  }
  cur.raw_valid = true;
  seg.packed_index(p, env)[step % seg.capacity()].store(cur.next_frame - 1, std::memory_order_relaxed);
  layout::PackedEnvControl& pc = seg.packed_control(p, env);
  // relaxed: informational counters, written by the env's writer only
  const auto add = [](std::atomic<uint64_t>& word, uint64_t n) {
    word.store(word.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  };
  add(pc.frames, st.depth - s.first_new[p]);
  add(pc.record_bytes, bytes);
  add(pc.raw_frames, raws);
  add(pc.budget_lost, s.lost[p]);
}

}  // namespace

bool store_packed(Segment& seg, uint64_t env, uint64_t step, const std::byte* const* fields, PackedWriterEnv& w,
                  PackedScratch& s, bool may_continue, bool compare) noexcept {
  layout::EnvControl& c = seg.env_control(env);
  uint64_t bound = c.stacks_intact_from.load(std::memory_order_relaxed);  // also raised by a repair
  bool restarted = false;
  const std::size_t n = seg.packed().size();
  for (std::size_t p = 0; p < n; ++p) {
    restarted |= plan_packed_field(seg, p, env, step, fields[p], w, s, may_continue, compare);
    bound = std::max(bound, w.cursors[p].intact_from);
  }
  (void)raise_intact_from(c, bound);  // a CAS, and only when it moves (stacks.hpp)
  // release fence: orders the raised stacks_intact_from before the record and descriptor stores; pairs with the
  // readers' acquire fence in end_copies (seqlock.hpp), between their copy and their load of stacks_intact_from.
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t p = 0; p < n; ++p) write_packed_field(seg, p, env, step, fields[p], w, s);
  return restarted;
}

}  // namespace shmreplay::detail
