// shmreplay/shmreplay.hpp: the umbrella include: the public API (the headers under shmreplay/internal/ are the
// segment's bytes, for shmreplay's own tools and tests; they are not part of it).
#pragma once

#include "shmreplay/buffer.hpp"     // IWYU pragma: export
#include "shmreplay/checkpoint.hpp"  // IWYU pragma: export
#include "shmreplay/counters.hpp"  // IWYU pragma: export
#include "shmreplay/error.hpp"      // IWYU pragma: export
#include "shmreplay/inspector.hpp"  // IWYU pragma: export
#include "shmreplay/journal.hpp"    // IWYU pragma: export
#include "shmreplay/nstep.hpp"      // IWYU pragma: export
#include "shmreplay/policy.hpp"     // IWYU pragma: export
#include "shmreplay/rate_limit.hpp"  // IWYU pragma: export
#include "shmreplay/reanalyse.hpp"  // IWYU pragma: export
#include "shmreplay/sample_age.hpp"  // IWYU pragma: export
#include "shmreplay/sample_batch.hpp"  // IWYU pragma: export
#include "shmreplay/sampler.hpp"    // IWYU pragma: export
#include "shmreplay/schema.hpp"     // IWYU pragma: export
#include "shmreplay/version.hpp"    // IWYU pragma: export
#include "shmreplay/vocabulary.hpp"  // IWYU pragma: export
#include "shmreplay/wait.hpp"       // IWYU pragma: export
#include "shmreplay/writer.hpp"     // IWYU pragma: export
