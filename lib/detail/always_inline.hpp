// detail/always_inline.hpp: SHMREPLAY_ALWAYS_INLINE, for the small functions of the push and sample paths that
// must be inlined into their loops whatever the optimizer judges (copy_bytes.hpp, storage/gather.hpp, the
// Writer's claim and publish, the Sampler's ChunkGather::add): measured in instructions per pushed step and sampled row
// (docs/benchmarks/small_rows.md, "Push cost", "Sampling cost against the stored size").
#pragma once

#define SHMREPLAY_ALWAYS_INLINE inline __attribute__((always_inline))
