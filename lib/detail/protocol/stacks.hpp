// detail/protocol/stacks.hpp: stacked fields (layout 1.6), both halves in one place: the writer's store of a step's
// stack as frames (one frame when the stack continues its predecessor's, all K when it does not) and the readers'
// rebuild of a step's stack from the frames. docs/design/stacks.md has the layout and the argument.
//
//   word                          written by                                read by
//   frame rings                   the env's writer (store_stacks)           readers (copy_stack), the writer's
//                                                                           continuity compare (stack_continues)
//   frame-index words             the env's writer, with the step           readers, for each step they copy
//                                 (slot step % capacity)
//   EnvControl::stacks_intact_from  the env's writer, before it overwrites  readers: the views' lower bound
//                                 frames (store_stacks), and the repair of  (view_range) and the validation
//                                 a dead learner's update: raised by CAS    (read_end_loads, copy_intact)
//                                 to the larger value, never lowered
//
// The validation: a step's stack is frames [index - K + 1, index]; frames only grow with the step, so when the
// oldest step of a copy still has its frames, every later step has them too. The writer raises stacks_intact_from
// to the first step whose oldest frame survives the write, and then issues a release fence before any frame store:
// the same shape as `claimed` before a slot's stores (detail/protocol/seqlock.hpp, claim_step). A reader that finds
// stacks_intact_from <= its first step after its copy (acquire fence, seqlock.hpp end_copies) read intact frames.
//
// Who calls what: the frame ring's face on the storage seam (detail/storage/frame_ring.cpp) calls both sides: the
// writer side (StackCursor, resume_stack, store_stacks) from its KindWriter (a Writer's push paths, a checkpoint
// load), for an env whose lease the caller holds; the reader side (copy_stack, copy_step_stacks, gather_stacks) from
// its copy_steps and gather (the Sampler, copy_records for dump and saves), on any mapping, read-only too.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

// ---------------------------------------------------------------------------------------------------------------
// Reader side: a step's stack out of the frames.

/// Raises the env's stacks_intact_from (the views' lower bound from below) to `step` unless it is already there;
/// returns the value it had. Both raisers use it: the env's writer before it overwrites frames (stacks.hpp) and the
/// repair of a dead updater (release_dead_update_lock), so neither lowers the other's bound.
inline uint64_t raise_intact_from(layout::EnvControl& c, uint64_t step) noexcept {
  uint64_t cur = c.stacks_intact_from.load(std::memory_order_relaxed);
  // relaxed: the callers order it with their own fences or release stores (stacks.hpp, release_dead_update_lock)
  while (cur < step && !c.stacks_intact_from.compare_exchange_weak(cur, step, std::memory_order_relaxed)) {
  }
  return cur;
}

/// Copies the stack whose newest frame is `index` out of one env's frame ring `ring` ([frames][frame_bytes]) into
/// `out` (the field's bytes of one step, [outer][depth][inner_bytes]). Any `index` stays inside the ring (a torn
/// word read during an overwrite gives bytes that the validation rejects, never an access out of bounds).
inline void copy_stack(const StackGeometry& st, const std::byte* ring, uint64_t index, std::byte* out) noexcept {
  const uint64_t slot = (index - (st.depth - 1)) % st.frames;  // the oldest frame's slot
  if (st.outer == 1) {  // the stacked axis is the first: the frames back to back, in at most two runs
    const uint64_t run = std::min(st.depth, st.frames - slot);
    std::memcpy(out, ring + slot * st.frame_bytes, run * st.frame_bytes);
    if (run < st.depth) std::memcpy(out + run * st.frame_bytes, ring, (st.depth - run) * st.frame_bytes);
    return;
  }
  for (uint64_t k = 0; k < st.depth; ++k) {  // interleave: [outer][depth][inner]
    uint64_t s = slot + k;
    if (s >= st.frames) s -= st.frames;
    const std::byte* frame = ring + s * st.frame_bytes;
    for (uint64_t o = 0; o < st.outer; ++o) {
      std::memcpy(out + (o * st.depth + k) * st.inner_bytes, frame + o * st.inner_bytes, st.inner_bytes);
    }
  }
}

/// The stacks of steps [first, first + count) of env `env` of stacked field `st` into `out`, one step every
/// `stride` bytes (the field's bytes for a batch's array, the record's for a record copy). Reader side: its bytes
/// are valid when the caller's validation of the copy passes.
inline void copy_step_stacks(const Segment& seg, std::size_t stack, uint64_t env, uint64_t first, uint64_t count,
                             std::byte* out, uint64_t stride) noexcept {
  const StackGeometry& st = seg.stacks()[stack];
  const std::byte* ring = seg.frame_data(stack) + env * st.frames * st.frame_bytes;
  const std::atomic<uint64_t>* index = seg.frame_index(stack, env);
  const uint64_t cap = seg.capacity();
  uint64_t slot = first % cap;
  for (uint64_t i = 0; i < count; ++i) {
    copy_stack(st, ring, index[slot].load(std::memory_order_relaxed), out + i * stride);
    if (++slot == cap) slot = 0;
  }
}

/// The gather of a stacked field for a chunk of rows (the Sampler's; detail/storage/gather.hpp has the rows):
/// each row's steps' stacks into `out` ([rows][length][bytes]), then zeros up to `length` steps. The next row's
/// first stack is prefetched while a row is copied.
template <class Row>
inline void gather_stacks(const Segment& seg, std::size_t stack, std::byte* out, uint64_t bytes, std::size_t length,
                          const Row* rows, std::size_t count) noexcept {
  const StackGeometry& st = seg.stacks()[stack];
  const std::byte* rings = seg.frame_data(stack);
  const uint64_t cap = seg.capacity();
  for (std::size_t k = 0; k < count; ++k) {
    const Row& r = rows[k];
    std::byte* dst = out + r.row * length * bytes;
    copy_step_stacks(seg, stack, r.env, r.start, r.steps, dst, bytes);
    if (r.steps < length) std::memset(dst + r.steps * bytes, 0, (length - r.steps) * bytes);
    if (k + 1 < count) {  // the next row's first frames: a few lines of each, ahead of its copy
      const Row& next = rows[k + 1];
      const uint64_t index = seg.frame_index(stack, next.env)[next.start % cap].load(std::memory_order_relaxed);
      const std::byte* first =
          rings + (next.env * st.frames + (index - (st.depth - 1)) % st.frames) * st.frame_bytes;
      for (uint64_t line = 0; line < 8; ++line) __builtin_prefetch(first + line * 64, 0, 3);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Writer side: a step's stack into the frames.

/// The writer's place in one stacked field's frame ring of one env (held by the Writer, not the segment; a new
/// lease holder resumes it from the segment with resume_stack).
struct StackCursor {
  uint64_t next_frame = 0;   ///< the frame the next step's newest frame follows: index of the newest + 1
  uint64_t intact_from = 0;  ///< the oldest step whose frames this field still holds (a lower bound)
};

/// StackContinuity::episodes spot-checks one step in kStackAuditOneIn of those it trusts: it compares it as the
/// compare rule does, and a stack found not to continue is stored exactly and counted (Writer::
/// stack_flagless_restarts). Which steps is a hash of the step number, so that episodes of a fixed length do not
/// always meet the checks at the same place in the episode; it costs a multiply per push.
inline constexpr uint64_t kStackAuditOneIn = 256;
inline bool stack_audit_due(uint64_t step) noexcept {
  static_assert(kStackAuditOneIn == 256, "the top 8 bits of the hash");
  return (step * 0x9e3779b97f4a7c15ull) >> 56 == 0;
}

/// The continuity test for step `step` of env `env` that a Writer passes to store_stacks.
struct ContinuityTest {
  bool may_continue;  ///< the step may continue the previous one's stack
  bool compare;       ///< ... which the bytes decide
  bool audit;         ///< the episodes rule's spot check: a stack found not to continue is a flagless restart
};
/// `pushed_before`: this Writer stored a step of the env. `ends_episode()`: whether the step's own flags end its
/// episode (called under StackContinuity::episodes only). Under episodes, the bytes decide on both sides of a flagged
/// boundary: the step after a flagged one (its reset observation, for Gymnasium's and envpool's autoreset) and the
/// flagged step itself (SB3's VecEnv returns the next episode's reset observation with done=True), one compare each
/// per episode; a step inside an episode is trusted to continue, but for the spot checks.
template <class EndsEpisode>
inline ContinuityTest continuity_test(const Segment& seg, uint64_t env, uint64_t step, bool pushed_before,
                                      EndsEpisode&& ends_episode) noexcept {
  if (step == 0) return {false, false, false};
  if (seg.stack_continuity() != StackContinuity::episodes || !pushed_before) return {true, true, false};
  // The previous step's meta word: stored by this Writer before its head store (detail/protocol/episodes.hpp).
  const uint64_t meta = seg.step_meta(env)[(step - 1) % seg.capacity()].load(std::memory_order_relaxed);
  if ((meta & layout::kMetaEndsEpisode) != 0 || ends_episode()) return {true, true, false};
  const bool audit = stack_audit_due(step);
  return {true, audit, audit};
}

/// Where the writer of env `env` goes on in stacked field `stack` after taking the env's lease at `head`: after
/// the newest published step's frames (frame 0 for an env with no step), and from the env's stacks_intact_from.
inline StackCursor resume_stack(const Segment& seg, std::size_t stack, uint64_t env, uint64_t head) noexcept {
  StackCursor c;
  if (head > 0) {
    c.next_frame = seg.frame_index(stack, env)[(head - 1) % seg.capacity()].load(std::memory_order_relaxed) + 1;
  }
  c.intact_from = seg.env_control(env).stacks_intact_from.load(std::memory_order_relaxed);
  return c;
}

/// Whether the pushed stack `stack` ([outer][depth][inner_bytes]) continues the stack whose newest frame is
/// `prev_index` in `ring`: its frames 0..K-2 equal that stack's frames 1..K-1, byte for byte. Then the step needs
/// one new frame (its frame K-1); otherwise all K. The compare stops at the first difference.
inline bool stack_continues(const StackGeometry& st, const std::byte* ring, uint64_t prev_index,
                            const std::byte* stack) noexcept {
  const uint64_t shared = st.depth - 1;                  // frames the two stacks share when they continue
  const uint64_t slot = (prev_index - shared + 1) % st.frames;  // the previous stack's frame 1
  if (st.outer == 1) {
    const uint64_t run = std::min(shared, st.frames - slot);
    if (std::memcmp(stack, ring + slot * st.frame_bytes, run * st.frame_bytes) != 0) return false;
    return run == shared || std::memcmp(stack + run * st.frame_bytes, ring, (shared - run) * st.frame_bytes) == 0;
  }
  for (uint64_t k = 0; k < shared; ++k) {
    uint64_t s = slot + k;
    if (s >= st.frames) s -= st.frames;
    const std::byte* frame = ring + s * st.frame_bytes;
    for (uint64_t o = 0; o < st.outer; ++o) {
      if (std::memcmp(stack + (o * st.depth + k) * st.inner_bytes, frame + o * st.inner_bytes, st.inner_bytes) != 0) {
        return false;
      }
    }
  }
  return true;
}

/// Stores frames [from_k, depth) of the pushed stack `stack` as frames next, next + 1, ... of `ring`.
inline void store_frames(const StackGeometry& st, std::byte* ring, uint64_t next, const std::byte* stack,
                         uint64_t from_k) noexcept {
  uint64_t s = next % st.frames;
  for (uint64_t k = from_k; k < st.depth; ++k) {
    std::byte* frame = ring + s * st.frame_bytes;
    if (st.outer == 1) {
      std::memcpy(frame, stack + k * st.frame_bytes, st.frame_bytes);
    } else {
      for (uint64_t o = 0; o < st.outer; ++o) {
        std::memcpy(frame + o * st.inner_bytes, stack + (o * st.depth + k) * st.inner_bytes, st.inner_bytes);
      }
    }
    if (++s == st.frames) s = 0;
  }
}

/// Stores the stacked fields of step `step` of env `env`, which the caller claimed (claim_step) and publishes
/// after: `stacks[i]` is the pushed stack of stacked field i (seg.stacks() order), `cursors[i]` the writer's cursor
/// of that field in this env. `may_continue`: whether the step follows a stored step whose frames end at the
/// cursor (false for an env's first step and a checkpoint load's first) and, under StackContinuity::episodes, that
/// step did not end an episode. `compare`: whether to check the continuity byte for byte (StackContinuity::compare,
/// and the first step a Writer pushes to an env); without, a step that may continue does. For each field: the
/// stack's continuity with the previous step's (stack_continues, against the very frames the step's stack will be
/// made of), the frames
/// it needs (1 or K), and the oldest step whose frames survive them; then the env's stacks_intact_from raised to
/// the latest of those, a release fence, and the frames and the step's index word. Precondition: the caller holds
/// the env's lease; `step` is the env's head. Returns whether a field's stack that may continue was compared and
/// found not to. O(frames written + frames compared + steps whose frames are lost).
inline bool store_stacks(Segment& seg, uint64_t env, uint64_t step, const std::byte* const* stacks,
                         StackCursor* cursors, bool may_continue, bool compare) noexcept {
  const uint64_t cap = seg.capacity();
  const uint64_t oldest_slot_step = step + 1 > cap ? step + 1 - cap : 0;  // older steps' slots are reclaimed
  layout::EnvControl& c = seg.env_control(env);
  const uint64_t old_bound = c.stacks_intact_from.load(std::memory_order_relaxed);  // also raised by a repair
  uint64_t bound = old_bound;
  bool restarted = false;
  uint64_t first_new[kMaxFields];  // per stacked field: the first frame of its stack that is new
  const std::size_t n = seg.stacks().size();
  for (std::size_t i = 0; i < n; ++i) {
    const StackGeometry& st = seg.stacks()[i];
    const std::byte* ring = seg.frame_data(i) + env * st.frames * st.frame_bytes;
    const std::atomic<uint64_t>* index = seg.frame_index(i, env);
    // The previous step's newest frame is the cursor's last (its index word holds the same number).
    const bool continues =
        may_continue && (!compare || stack_continues(st, ring, cursors[i].next_frame - 1, stacks[i]));
    restarted |= may_continue && !continues;
    first_new[i] = continues ? st.depth - 1 : 0;
    // After this step's frames, the ring holds frames [end - frames, end): the older steps whose oldest frame
    // (index - K + 1) is below that lose their stacks.
    const uint64_t end = cursors[i].next_frame + (st.depth - first_new[i]);
    const uint64_t lowest = end > st.frames ? end - st.frames : 0;
    uint64_t x = std::max(cursors[i].intact_from, oldest_slot_step);
    while (x < step && index[x % cap].load(std::memory_order_relaxed) + 1 < lowest + st.depth) ++x;
    cursors[i].intact_from = x;
    bound = std::max(bound, x);
  }
  (void)raise_intact_from(c, bound);  // a CAS, and only when it moves: the repair of a dead updater raises it too
  // release fence: orders the raised stacks_intact_from before the frame stores; pairs with the readers' acquire
  // fence in end_copies (seqlock.hpp), between their copy and their load of stacks_intact_from.
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t i = 0; i < n; ++i) {
    const StackGeometry& st = seg.stacks()[i];
    std::byte* ring = seg.frame_data(i) + env * st.frames * st.frame_bytes;
    store_frames(st, ring, cursors[i].next_frame, stacks[i], first_new[i]);
    cursors[i].next_frame += st.depth - first_new[i];
    // Covered by the step seqlock, as the step's other bytes: stored between the claim and the head store.
    seg.frame_index(i, env)[step % cap].store(cursors[i].next_frame - 1, std::memory_order_relaxed);
  }
  return restarted;
}

}  // namespace shmreplay::detail
