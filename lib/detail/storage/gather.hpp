// detail/storage/gather.hpp: the copy of a sample's rows out of the rings, many rows at a time.
//
// A random gather of small rows is bound by memory latency: each row touches a cache line (or two) per field in
// a random place, and a loop that copies row by row keeps only as many misses in flight as the core finds on its
// own. The Sampler therefore draws a chunk of rows first (lib/sampler_rounds.cpp, sample_with) and then copies them
// here, field by field, prefetching the rows a few places ahead of the one being copied, so that many misses
// overlap. A small row's copy is two loads and two stores of a fixed width chosen once per field (one loop per
// width), not a call to memcpy with a run-time size.
//
// Who calls it: the Sampler only (sample, sample_mixed, peek). Nothing here touches the segment's control words:
// the seqlock validation around the copy is the step seqlock's batched reader (detail/protocol/seqlock.hpp,
// BatchedReader). Plain loads of ring bytes that a writer may be storing concurrently are what the seqlock
// protocol allows (a torn copy is rejected by the validation after it), exactly as with the memcpy this replaces.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "detail/always_inline.hpp"
#include "detail/copy_bytes.hpp"

namespace shmreplay::detail {

/// One row of a gather: steps [start, start + steps) of env `env`, whose first step sits in ring slot `slot`
/// (start % capacity); `index` = env * capacity + slot, that slot's index in every field's array
/// ([num_envs][capacity]). `row` is the batch row it goes to. steps is 0 for a peek at an env with no step yet
/// (the row is zero-filled).
struct GatherRow {
  uint64_t start = 0;
  uint64_t env = 0;
  uint64_t index = 0;
  uint64_t slot = 0;
  uint64_t steps = 0;
  uint64_t row = 0;
};

inline constexpr std::size_t kCacheLine = 64;

/// Prefetches the cache lines of [p, p + n), at most `max_lines` of them (the hardware prefetcher takes over on
/// longer runs).
inline void prefetch_bytes(const std::byte* p, std::size_t n, std::size_t max_lines) noexcept {
  if (n == 0) return;
  const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kCacheLine - 1};
  const auto last = (reinterpret_cast<uintptr_t>(p) + n - 1) & ~uintptr_t{kCacheLine - 1};
  const uintptr_t stop = std::min(last, first + (max_lines - 1) * kCacheLine);
  for (uintptr_t a = first; a <= stop; a += kCacheLine) __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 3);
}

/// Rows of at most this many bytes per field are "small": the gather copies them with fixed-width moves and
/// prefetches both their lines (the first and the last byte's) kSmallAhead rows ahead of their copy (measured on
/// a 2-core EPYC VM, 10^6 stored 97-byte steps: 1.5x to 2x the rows/s of prefetching each row only as it is drawn;
/// 8 to 16 rows ahead did about the same, 32 worse).
inline constexpr std::size_t kSmallRowBytes = 2 * kCacheLine;
inline constexpr std::size_t kSmallAhead = 12;

/// How many rows ahead a gather of larger rows prefetches, and how many lines of each row: about 24 lines in
/// flight, at least 2 rows ahead.
struct PrefetchPlan {
  std::size_t ahead;
  std::size_t lines;
};
inline PrefetchPlan prefetch_plan(std::size_t row_bytes) noexcept {
  const std::size_t lines = std::min<std::size_t>((row_bytes + kCacheLine - 1) / kCacheLine + 1, 8);
  return {std::max<std::size_t>(24 / lines, 2), lines};
}

/// A row that is not whole or wraps at the end of the ring: its steps in up to two pieces, then zeros.
inline void copy_row_general(std::byte* dst, const std::byte* ring, std::size_t bytes, std::size_t length,
                             uint64_t capacity, const GatherRow& r) noexcept {
  const std::byte* env_ring = ring + (r.index - r.slot) * bytes;  // the env's slot 0
  const uint64_t first = std::min<uint64_t>(r.steps, capacity - r.slot);  // steps before the ring wraps
  std::memcpy(dst, env_ring + r.slot * bytes, first * bytes);
  if (r.steps > first) std::memcpy(dst + first * bytes, env_ring, (r.steps - first) * bytes);
  if (r.steps < length) std::memset(dst + r.steps * bytes, 0, (length - r.steps) * bytes);
}

/// Prefetches a small row (row_bytes <= kSmallRowBytes, at most two lines) of one field: its first and last byte's
/// lines.
SHMREPLAY_ALWAYS_INLINE void prefetch_small_row(const std::byte* p, std::size_t row_bytes) noexcept {
  __builtin_prefetch(p, 0, 3);
  __builtin_prefetch(p + row_bytes - 1, 0, 3);
}

/// The rows of one field that its gather would copy before its own prefetching reaches them (the first kSmallAhead
/// small rows, or the first plan.ahead larger ones), prefetched: by the gather of the previous field during its
/// last rows, and for the first field before its loop, so that no row of a chunk is copied without a prefetch in
/// flight ahead of it.
inline void prefetch_first_rows(const std::byte* ring, std::size_t bytes, std::size_t length, const GatherRow* rows,
                                std::size_t count) noexcept {
  const std::size_t row_bytes = bytes * length;
  if (row_bytes == 0) return;
  if (row_bytes <= kSmallRowBytes) {
    for (std::size_t k = 0; k < std::min(count, kSmallAhead); ++k) {
      prefetch_small_row(ring + rows[k].index * bytes, row_bytes);
    }
    return;
  }
  const PrefetchPlan plan = prefetch_plan(row_bytes);
  for (std::size_t k = 0; k < std::min(count, plan.ahead); ++k) {
    prefetch_bytes(ring + rows[k].index * bytes, rows[k].steps * bytes, plan.lines);
  }
}

/// The field whose first rows a gather_field prefetches during its own last rows (ring == nullptr: none).
struct NextField {
  const std::byte* ring = nullptr;
  std::size_t bytes = 0;
};

/// Whether row `r` is whole (`length` steps) and does not wrap at the end of the ring: a single run of bytes.
inline bool whole_run(const GatherRow& r, std::size_t length, uint64_t capacity) noexcept {
  return r.steps == length && r.slot + length <= capacity;
}

/// Copies one field of `rows` from `ring` (the field's array, [num_envs][capacity][bytes]) into `out` (the
/// batch's array for the field, [rows][length][bytes]): each row's steps, wrapping at the end of the ring (of
/// `capacity` slots), then zeros up to `length` steps. `all_whole`: every row is a whole_run (the usual case,
/// which the caller knows from the draws), so that the small rows' loop needs no test per row. When its rows
/// ahead run out, it prefetches the first rows of `next` (prefetch_first_rows). See gather_fields for all of a
/// batch's fields.
inline void gather_field(const std::byte* ring, std::byte* out, std::size_t bytes, std::size_t length,
                         uint64_t capacity, const GatherRow* rows, std::size_t count, bool all_whole,
                         NextField next = {}) noexcept {
  const auto prefetch_next = [&] {
    if (next.ring != nullptr) prefetch_first_rows(next.ring, next.bytes, length, rows, count);
  };
  const std::size_t row_bytes = bytes * length;
  if (row_bytes <= kSmallRowBytes) {
    // One loop per size class, so that the copy of a row is two loads and two stores of a fixed width, and one
    // without a test per row when every row is whole.
    auto small = [&](auto width, auto whole) {
      constexpr std::size_t k = decltype(width)::value;
      auto copy = [&](const GatherRow& r) __attribute__((always_inline)) {
        std::byte* dst = out + r.row * row_bytes;
        if (decltype(whole)::value || whole_run(r, length, capacity)) [[likely]] {
          const std::byte* src = ring + r.index * bytes;
          if constexpr (k == 1) {
            *dst = *src;
          } else {
            copy_ends<k>(dst, src, row_bytes);
          }
        } else {
          copy_row_general(dst, ring, bytes, length, capacity, r);
        }
      };
      // The rows with a row kSmallAhead places later: copy one, prefetch that one; then the last few.
      std::size_t i = 0;
      for (; i + kSmallAhead < count; ++i) {
        prefetch_small_row(ring + rows[i + kSmallAhead].index * bytes, row_bytes);
        copy(rows[i]);
      }
      prefetch_next();
      for (; i < count; ++i) copy(rows[i]);
    };
    auto sized = [&](auto width) {
      if (all_whole) return small(width, std::true_type{});
      return small(width, std::false_type{});
    };
    if (row_bytes == 0) return prefetch_next();  // a field of no bytes
    if (row_bytes == 1) return sized(std::integral_constant<std::size_t, 1>{});
    if (row_bytes < 4) return sized(std::integral_constant<std::size_t, 2>{});
    if (row_bytes < 8) return sized(std::integral_constant<std::size_t, 4>{});
    if (row_bytes <= 16) return sized(std::integral_constant<std::size_t, 8>{});
    if (row_bytes <= 32) return sized(std::integral_constant<std::size_t, 16>{});
    if (row_bytes <= 64) return sized(std::integral_constant<std::size_t, 32>{});
    return sized(std::integral_constant<std::size_t, 64>{});
  }
  const PrefetchPlan plan = prefetch_plan(row_bytes);
  const std::size_t tail = count > plan.ahead ? count - plan.ahead : 0;  // the rows with no row plan.ahead later
  for (std::size_t k = 0; k < count; ++k) {
    if (k < tail) {
      const GatherRow& ahead = rows[k + plan.ahead];
      prefetch_bytes(ring + ahead.index * bytes, ahead.steps * bytes, plan.lines);
    } else if (k == tail) {
      prefetch_next();
    }
    const GatherRow& r = rows[k];
    std::byte* dst = out + r.row * row_bytes;
    if (whole_run(r, length, capacity)) [[likely]] {
      std::memcpy(dst, ring + r.index * bytes, row_bytes);
    } else {
      copy_row_general(dst, ring, bytes, length, capacity, r);
    }
  }
}

/// gather_field for every field of a batch (`rings`, `outs` and `bytes`: per field), the first field's first rows
/// prefetched before its loop and each next field's during the loop before it.
inline void gather_fields(const std::byte* const* rings, std::byte* const* outs, const std::size_t* bytes,
                          std::size_t fields, std::size_t length, uint64_t capacity, const GatherRow* rows,
                          std::size_t count, bool all_whole) noexcept {
  if (fields == 0 || count == 0) return;
  prefetch_first_rows(rings[0], bytes[0], length, rows, count);
  for (std::size_t f = 0; f < fields; ++f) {
    const NextField next = f + 1 < fields ? NextField{rings[f + 1], bytes[f + 1]} : NextField{};
    gather_field(rings[f], outs[f], bytes[f], length, capacity, rows, count, all_whole, next);
  }
}

/// The mask of `rows`: 1 for each of a row's steps, 0 up to `length`.
inline void gather_mask(uint8_t* mask, std::size_t length, const GatherRow* rows, std::size_t count) noexcept {
  for (std::size_t k = 0; k < count; ++k) {
    const GatherRow& r = rows[k];
    uint8_t* m = mask + r.row * length;
    if (length == 1) {
      *m = r.steps != 0 ? 1 : 0;
      continue;
    }
    std::memset(m, 1, r.steps);
    std::memset(m + r.steps, 0, length - r.steps);
  }
}

}  // namespace shmreplay::detail
