// detail/protocol/lease.hpp: leases in the segment, every side of them: one word per leased thing (an env, the
// learner role) holding pack_owner(pid, start ticks), taken with a compare-and-swap (try_take_lease), released with
// one (release_lease); a dead holder's lease is taken over. See docs/design/leases.md, "Leases".
// Who calls it: the Writer (env leases), the Sampler (the learner lease), a checkpoint load (both, directly:
// lib/checkpoint/load_leases.cpp; the learner lease through learner_takeover.hpp), the Inspector and a writer
// waiting on the update lock (lease_holder_alive only). Safe across processes and threads: every change of a lease
// word is a CAS, and liveness is judged from /proc.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "shmreplay/internal/layout.hpp"

namespace shmreplay::detail {

/// The four lease words, in the order both EnvControl (line 2) and GlobalControl (line 0) declare them.
/// A lease's four words, writable (`Word` = std::atomic<uint64_t>: LeaseWords) or read-only (const: the Inspector).
template <class Word>
struct LeaseWordsOf {
  Word& lease;
  Word& start_ticks;
  Word& since_ns;
  Word& takeovers;
};
using LeaseWords = LeaseWordsOf<std::atomic<uint64_t>>;
using LeaseReadWords = LeaseWordsOf<const std::atomic<uint64_t>>;

/// An env's lease words (EnvControl line 2): taken by its Writer, judged by the Inspector.
inline LeaseWords env_lease_words(layout::EnvControl& c) noexcept {
  return {c.lease, c.owner_start_ticks, c.lease_since_ns, c.lease_takeovers};
}

/// The learner lease words (GlobalControl line 0): taken by the Sampler, and by a checkpoint load.
inline LeaseWords learner_lease_words(layout::GlobalControl& g) noexcept {
  return {g.learner_lease, g.learner_start_ticks, g.learner_since_ns, g.learner_takeovers};
}

enum class LeaseOutcome {
  taken,        ///< the lease was free and is now ours
  taken_over,   ///< its holder was dead; the lease is now ours
  held_alive,   ///< another live process holds it (holder_lease tells who)
  held_by_us,   ///< this process already holds it
};

struct LeaseResult {
  LeaseOutcome outcome;
  uint64_t holder_lease = 0;        ///< the word found, for held_* outcomes
  uint64_t holder_start_ticks = 0;  ///< the holder's full start ticks, as recorded
};

/// Whether the process named by a (nonzero) lease word is running: its pid with the same start time.
bool lease_holder_alive(uint64_t lease) noexcept;

/// This process's lease word: pack_owner(getpid(), start ticks).
uint64_t self_lease_word() noexcept;

/// The core of try_take_lease on the owner word alone (a lease with no bookkeeping words, such as the rate
/// limiter's rewriter lease): takes `word` for `me` if it is free or its holder is dead. holder_start_ticks is 0.
LeaseResult try_take_lease_word(std::atomic<uint64_t>& word, uint64_t me) noexcept;

/// Tries to take `words` for `me`. Never blocks; judges a holder's liveness by pid plus start time.
LeaseResult try_take_lease(const LeaseWords& words, uint64_t me) noexcept;

/// Releases the lease word if `me` still holds it (a CAS, so a lease taken over meanwhile is left alone).
void release_lease_word(std::atomic<uint64_t>& word, uint64_t me) noexcept;
inline void release_lease(const LeaseWords& words, uint64_t me) noexcept { release_lease_word(words.lease, me); }

/// "pid 1234 (started at tick 5678)" for messages.
std::string holder_text(uint64_t lease, uint64_t start_ticks);

/// Why `r` (try_take_lease of env `env`'s lease in segment `name`) leaves the caller without it, as the message
/// ("cannot lease env E of 'name': ..."), or "" when the caller holds it now. The Writer and a checkpoint load say
/// the same (learner_takeover.hpp has the learner lease's).
std::string env_lease_problem(const std::string& name, uint64_t env, const LeaseResult& r);

}  // namespace shmreplay::detail
