// shmreplay/sample_age.hpp: the buckets of the age of sampled rows (layout 1.8's LearnerStats, in layout.hpp): which
// bucket an age falls in, and each bucket's upper bound. The one definition that the sampler (a bucket index per
// row), the tests and every reader (the Inspector, the exporter's `le` bounds) use.
//
// The age of a sampled row is how far behind its env's head the row ended, in steps. Bucket 0 holds age 0, bucket k
// (1 to kAgeBuckets - 1) the ages in (4^(k-2), 4^(k-1)]: upper bounds 0, 1, 4, 16, ..., 4^11 = 4,194,304 steps; an
// age above the last is in no bucket (Prometheus's +Inf). Constant expressions only; safe anywhere.
#pragma once

#include <cstdint>

namespace shmreplay::layout {

inline constexpr uint32_t kAgeBuckets = 13;  ///< LearnerStats::age_buckets entries (1.8)

/// The sampler's bucket index of a row of age `age` steps, before the bounds are applied: 1 + ceil(log4(age)) for
/// 1 <= age <= 2^62 (1 to 32), and kAgeRawZero for age 0. Four instructions and no branch (the sampler runs it once per
/// row, into kAgeRawBuckets counters, then folds them: age_bucket). Precondition: age <= 2^62 (ages are below 2^56,
/// as heads are).
constexpr uint64_t age_bucket_raw(uint64_t age) noexcept {
  // ceil(log2(age)) = bit_width(age - 1) for age >= 1, the highest set bit of 2 age - 1 (odd: never 0), and
  // ceil(log4(age)) = ceil(ceil(log2(age)) / 2), so the index is (that bit + 3) / 2. For age 0, 2 age - 1 wraps to
  // all ones: bit 63, index 33, which no age from 1 to 2^62 reaches.
  return ((static_cast<uint64_t>(static_cast<uint32_t>(__builtin_clzll(2 * age - 1))) ^ 63) + 3) / 2;
}
inline constexpr uint32_t kAgeRawBuckets = 34;  ///< age_bucket_raw's values: 1 to 33 (0 unused)
inline constexpr uint32_t kAgeRawZero = 33;     ///< age_bucket_raw(0)

/// The bucket of a row of age `age` steps: 0 for 0, 1 + ceil(log4(age)) otherwise, kAgeBuckets past the last bound
/// (counted in age_rows only). Precondition: age <= 2^62.
constexpr uint32_t age_bucket(uint64_t age) noexcept {
  const auto k = static_cast<uint32_t>(age_bucket_raw(age));
  return k == kAgeRawZero ? 0 : k < kAgeBuckets ? k : kAgeBuckets;
}

/// The largest age of bucket `k` (its Prometheus `le` bound): 0 for bucket 0, 4^(k-1) for k = 1 to kAgeBuckets - 1.
constexpr uint64_t age_bucket_le(uint32_t k) noexcept { return k == 0 ? 0 : uint64_t{1} << (2 * (k - 1)); }

static_assert(age_bucket(0) == 0 && age_bucket(1) == 1 && age_bucket(2) == 2 && age_bucket(4) == 2 &&
                  age_bucket(5) == 3 && age_bucket(age_bucket_le(kAgeBuckets - 1)) == kAgeBuckets - 1 &&
                  age_bucket(age_bucket_le(kAgeBuckets - 1) + 1) == kAgeBuckets &&
                  age_bucket_raw(uint64_t{1} << 62) == kAgeRawZero - 1 && age_bucket_raw(0) == kAgeRawZero,
              "bucket k holds the ages in (age_bucket_le(k - 1), age_bucket_le(k)]; past the last, kAgeBuckets");

}  // namespace shmreplay::layout
