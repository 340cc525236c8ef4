// detail/os/membarrier.hpp: the asymmetric fence of Linux's membarrier(2) (MEMBARRIER_CMD_GLOBAL_EXPEDITED, since
// Linux 4.16). The frequent side of a Dekker handshake (a writer's push: store its heads, then load the sleeper
// count) may leave out its StoreLoad fence when its process has registered, because the rare side (a learner about
// to sleep) makes every running thread of every registered process execute that fence for it
// (docs/design/waits.md, "The writer's fence, moved to the sleeper").
//
// Who calls it: the Writer (register_light_fence, at construction), a learner's sleep_until (heavy_fence, once per
// wait). Safe from any thread and process.
#pragma once

namespace shmreplay::detail {

/// Registers this process for the rare side's barriers (MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED; once per process,
/// again in a forked child), then executes one full fence of its own: a sleeper whose barrier went out before the
/// registration counted is covered by it. Returns whether the caller may leave out its fences: false where the
/// kernel lacks the commands or a sandbox refuses them, and always false under ThreadSanitizer, which cannot see
/// these barriers.
bool register_light_fence() noexcept;

/// The rare side: returns once every running thread of every registered process has passed a full memory barrier
/// (MEMBARRIER_CMD_GLOBAL_EXPEDITED). Returns false when the kernel refuses it; the caller then cannot count on
/// those threads' stores and must re-check soon by itself.
bool heavy_fence() noexcept;

}  // namespace shmreplay::detail
