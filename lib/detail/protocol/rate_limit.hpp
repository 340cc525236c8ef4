// detail/protocol/rate_limit.hpp: the rate limiter's protocol, every side of it (docs/design/rate_limiter.md, "Rate
// limiting").
//
//   word                          written by                                 read by
//   GlobalControl lines 4, 7-8    create(), Buffer::set_rate_limit (the CLI) everyone (load_rate_limit)
//     (two settings slots; limiter_index names the one in force; limiter_writer serializes rewriters)
//   EnvControl::head              the env's writer (publish_step)             the learner and waiting writers
//   EnvControl::limiter_reserved  the env's waiting writer (try_admit,        waiting writers (count_admitted)
//                                 withdraw), a new owner (withdraw)
//   GlobalControl::samples        the learners (try_reserve_samples: a CAS    waiting writers, the Inspector
//                                 per admitted call; return_samples;
//                                 count_samples without a limiter)
//   GlobalControl::admit_seq      waiting writers (try_admit: one CAS per     waiting writers (try_admit)
//                                 admission)
//   writer_wake_seq,              the learner wakes (count_samples), writers  (detail/protocol/wake.hpp)
//     writer_recheck_by_ns        sleep and promise to re-check
//   EnvControl::                  the waiting writer, on the first env of     count_waiting_writers (info,
//     limiter_waiting_since_ns    its push (WaitingMark); a new owner         messages): only while the lease
//                                 (forget_dead_waiting)                       holder lives
//
// Inserts are the published steps, the sum of the envs' heads: nothing new is written per push, a step counts from
// its head store, and a writer killed at any instruction leaves the count exact (a claimed but unpublished step
// never counted). Samples are the rows the learners admitted: with a limiter, a sample call reserves its rows
// before it draws them, by one CAS that checks the verdict against the count it replaces (so two learners can
// never both pass on one margin), and gives back what it did not draw; without one, it adds them after.
//
// Who calls what:
//   try_reserve_samples, return_samples, the learners (Sampler::sample, sample_mixed): reserve (check and count
//   count_samples                        in one CAS), sample, give back what was not drawn, wake writers.
//   try_admit, withdraw                  a Writer made with WriterOptions::wait_for_rate_limit, before it claims;
//                                        withdraw also by every Writer that takes a lease (a dead owner's
//                                        reservation goes) and for an abandoned reservation.
//   WaitingMark                          that Writer, while it sleeps; forget_dead_waiting every Writer that
//                                        takes a lease (a dead owner's mark goes).
//   count_waiting_writers                Buffer::rate_limit_state (info, watch), the learner's timeout message.
//   load_rate_limit, store_rate_limit    everyone; the creator and `shmreplay limit`.
//   restore_rate_limit                   a checkpoint load (settings and offset as saved).
// Non-waiting writers touch none of it: the limiter costs them nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>

#include "shmreplay/internal/segment.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/rate_limit.hpp"

namespace shmreplay::detail {

// ---------------------------------------------------------------------------------------------------------------
// Settings

/// The settings in force: the limit, and the offset added to the error (0 from creation; a change restarts the
/// error at the middle of the new bounds, so that history counted under other settings does not hold either side
/// back).
struct LimiterSettings {
  RateLimit limit;
  double error_offset = 0;
};

/// The settings, or nullopt without a limiter. A consistent copy (retried if a rewrite flipped the slots twice
/// while it read); never waits for a rewriter.
std::optional<LimiterSettings> load_rate_limit(const layout::GlobalControl& g) noexcept;

/// Rewrites the settings (nullopt: no limiter): fills the slot not in force and flips limiter_index, holding the
/// rewriter lease limiter_writer as `writer` (a pack_owner word; a dead holder's lease is taken over), for at most
/// `timeout_ms` while a live process holds it (then returns false, changing nothing). At creation (`inserts`
/// nullopt) the offset is 0; a change of a running buffer (`inserts` = its sum of heads now) sets the offset that
/// puts the error at the middle of the new bounds, and counts the change in limiter_changes. Then wakes every
/// waiter on both sides, whose condition may have changed. Readers never wait for it.
bool store_rate_limit(layout::GlobalControl& g, const std::optional<RateLimit>& limit, std::optional<uint64_t> inserts,
                      uint64_t writer, uint64_t timeout_ms) noexcept;

/// A checkpoint load's rewrite: the settings and error offset exactly as saved (nullopt: no limiter), through the
/// same slots and rewriter lease as store_rate_limit, without counting a change.
bool restore_rate_limit(layout::GlobalControl& g, const std::optional<LimiterSettings>& settings, uint64_t writer,
                        uint64_t timeout_ms) noexcept;

/// Throws Error(invalid_argument) for settings that cannot work in a buffer of `most_steps` steps: a
/// samples_per_insert that is not finite and > 0, NaN or crossed bounds, a min_size_to_sample above most_steps,
/// or a ratio whose bounds are closer than 2 * max(1, samples_per_insert) (one row and one step must fit).
void check_rate_limit(const RateLimit& limit, uint64_t most_steps, const std::string& where);

// ---------------------------------------------------------------------------------------------------------------
// Verdicts: pure functions of the counts (the same arithmetic for the library, the tests and the model).

struct RateLimitVerdict {
  RateLimitReason reason = RateLimitReason::none;
  double error = 0;  ///< inserts * samples_per_insert - samples, before the call
  double bound = 0;  ///< the bound the call would cross (min_diff or max_diff), or min_size_to_sample
  bool allowed() const noexcept { return reason == RateLimitReason::none; }
};

/// error = inserts * samples_per_insert - samples + error_offset.
double limiter_error(const LimiterSettings& s, uint64_t inserts, uint64_t samples) noexcept;
/// May the learner take `rows` rows? `inserts` is the sum of heads, `stored` the replay view's size.
RateLimitVerdict sample_verdict(const LimiterSettings& s, uint64_t inserts, uint64_t stored, uint64_t samples,
                                uint64_t rows) noexcept;
/// May a waiting writer insert `steps` steps? `admitted` is count_admitted: published steps plus admitted ones
/// not yet published.
RateLimitVerdict insert_verdict(const LimiterSettings& s, uint64_t admitted, uint64_t samples,
                                uint64_t steps) noexcept;

// ---------------------------------------------------------------------------------------------------------------
// Counts

struct InsertCounts {
  uint64_t inserts = 0;  ///< sum of heads
  uint64_t stored = 0;   ///< steps in the replay view (published, not overwritten)
};
/// O(num_envs) loads. With `heads`, each env's head as counted (acquire loads) goes to heads[env].
InsertCounts count_inserts(const Segment& b, uint64_t* heads = nullptr) noexcept;

/// The sum over envs of max(head, limiter_reserved). O(num_envs) loads.
uint64_t count_admitted(const Segment& b) noexcept;

struct WaitingWriters {
  uint64_t count = 0;     ///< writers waiting for the limiter now, whose process lives
  uint64_t since_ns = 0;  ///< CLOCK_REALTIME when the first of them began (0 when none)
};
/// The writers waiting now: envs marked by a WaitingMark whose lease holder is alive (a writer killed while it
/// waited is not counted from the moment it died; a new owner of its env clears its mark). O(num_envs) loads and
/// one /proc read per marked env: for info and messages, never on a hot path.
WaitingWriters count_waiting_writers(const Segment& b) noexcept;

// ---------------------------------------------------------------------------------------------------------------
// Learner side

/// One reservation attempt of a sample call of `rows` rows under limiter settings `s`: counts the inserts, and
/// when sample_verdict allows the rows against the sample count it read, raises `samples` by `rows` with a CAS
/// from that count (a lost CAS recounts and decides again). Returns the verdict it decided with: allowed() means
/// the rows are counted now (give back what the call does not draw with return_samples). `counts` receives the
/// counts of the last decision (for messages). Any number of learners at once: the CAS serializes their
/// reservations, and inserts only grow, so an allowed verdict still holds when it is counted.
/// With `heads` (num_envs words), an allowed verdict leaves there each env's head as counted before the CAS that
/// reserved: every step published after it, those of writers that the reservation let through included, lies at or
/// above it (Sampler::reset_online_queue(OnlineReset::sampled) keeps them in the online view).
RateLimitVerdict try_reserve_samples(const Segment& b, const LimiterSettings& s, uint64_t rows,
                                     InsertCounts& counts, uint64_t* heads = nullptr) noexcept;

/// Gives back `rows` rows reserved by try_reserve_samples that the call did not draw (it failed after reserving).
void return_samples(layout::GlobalControl& g, uint64_t rows) noexcept;

/// After a sample call's rows were drawn (every sample call, limiter or not, so that a limiter set later finds
/// the counts): samples += `unreserved` (the rows no reservation counted: all of them without a limiter, 0 after
/// try_reserve_samples), the time of the call (CLOCK_REALTIME `realtime_ns`), and a wake-up for writers that wait
/// for it, if one's promise to re-check lies after `monotonic_ns` (CLOCK_MONOTONIC, coarse will do). Any learner.
void count_samples(layout::GlobalControl& g, uint64_t unreserved, uint64_t realtime_ns, uint64_t monotonic_ns) noexcept;

// ---------------------------------------------------------------------------------------------------------------
// Writer side (a writer that waits for the limiter)

/// One admission attempt for one step of each env in `envs` (the caller's leased envs of one push call, each
/// once): reads admit_seq, counts, and when insert_verdict allows it, raises each env's limiter_reserved to
/// head + 1 and takes admit_seq with a CAS. Returns the verdict it decided with; allowed() means admitted (the
/// reservations stay until the steps' head stores cover them). On a lost CAS it withdraws and tries again, so
/// it returns only "admitted" or "held back".
RateLimitVerdict try_admit(Segment& b, const LimiterSettings& s, std::span<layout::EnvControl* const> envs) noexcept;

/// Lowers each env's reservation to its head: after a push that was not admitted, an abandoned reservation, or
/// when a lease is taken (a dead owner's admitted but unpublished steps never come). Precondition: the caller
/// holds the envs' leases.
void withdraw(std::span<layout::EnvControl* const> envs) noexcept;

/// Marks a writer as waiting for the limiter while it lives (on the first env of its push, whose lease the
/// writer holds): for count_waiting_writers only; the wake-up does not read it (wake.hpp's promise does that).
/// Relaxed stores: an informational word, read with the lease word that says whether it counts.
class WaitingMark {
 public:
  WaitingMark(layout::EnvControl& env, uint64_t now_realtime_ns) noexcept : env_(env) {
    env_.limiter_waiting_since_ns.store(now_realtime_ns == 0 ? 1 : now_realtime_ns, std::memory_order_relaxed);
  }
  ~WaitingMark() { env_.limiter_waiting_since_ns.store(0, std::memory_order_relaxed); }
  WaitingMark(const WaitingMark&) = delete;
  WaitingMark& operator=(const WaitingMark&) = delete;

 private:
  layout::EnvControl& env_;
};

/// Clears the marks a dead owner left on envs whose leases the caller has just taken.
void forget_dead_waiting(std::span<layout::EnvControl* const> envs) noexcept;

}  // namespace shmreplay::detail
