// shmreplay/writer.hpp: the env worker's view of a buffer: lease env ids, push steps, reserve/commit in place.
//
// Who calls it: an env worker process (envpool-style), one Writer per set of envs it steps. Each env has one
// writer at a time, enforced by a lease in the segment that records the owner's pid and process start time;
// a second Writer asking for a leased env gets Errc::lease_held naming the owner, and the lease of a dead
// process is taken over (death is judged by pid plus start time, so a reused pid is never mistaken for the
// owner). Leases are released by the destructor; a process that dies keeps them until someone takes them over.
//
// Publishing: a step becomes visible to samplers only when all of its fields are written. Per env, the writer
// raises `claimed` (the seqlock counter) before it touches the ring slot and stores `head` with release after,
// so a sampler that acquires `head` sees every byte of every step below it, and a sampler that copied a slot
// the writer was reclaiming finds out by re-reading `claimed` (docs/design/seqlock.md, "Concurrency protocol").
// Writers never wait for the learner, except while the learner's try_update() holds the same env's update lock
// for the duration of one step's copy, and, only when made with WriterOptions::wait_for_rate_limit in a buffer
// with a rate limiter (shmreplay/rate_limit.hpp), while the limiter holds their inserts back.
//
// Episodes: in a buffer created with episode fields (CreateOptions::episodes), every publish also records the
// step's episode, read from the step's own flag and reward bytes as stored in its slot (never from the caller's
// arrays a second time): one meta word per step (its episode's first step) stored before the head store, so a
// sampler that sees the step sees its boundary; and when the step ends an episode, a completed-episode record
// (env, first step, length, return) pushed right after the head store onto the env's queue for the learner
// (Sampler::pop_episodes), or counted as dropped when the queue is full (a writer never waits for the learner).
// The running episode start and return live in the segment, so a writer that takes over a dead writer's env
// continues the episode, and pushes the record of an episode whose last step the dead writer published without
// pushing its record (docs/design/episodes.md, "Episodes"). Cost: O(1) per step, a few stores to the writer's own
// lines. After publishing, a push wakes a learner blocked in Sampler::wait()
// (a shared futex in the segment; a system call only when someone is waiting).
//
// Thread safety: a Writer is used by one thread at a time. Several Writers (in one process or many) on
// disjoint env sets run fully in parallel. The Buffer must outlive the Writer.
//
//   shmreplay::Writer w(buf, std::vector<uint64_t>{0, 1, 2, 3});
//   std::vector<int32_t> ids = {2, 0};                   // whichever envs finished, any order
//   std::vector<float> obs(2 * 4); std::vector<int32_t> act(2); ...
//   w.push(ids, {shmreplay::field_bytes(obs), shmreplay::field_bytes(act), ...});  // fields in schema order
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay {

namespace layout {
struct EnvControl;     // shmreplay/internal/layout.hpp
struct GlobalControl;  // idem
struct WalkControl;    // shmreplay/internal/walk_layout.hpp
}  // namespace layout

namespace detail {
struct EpisodeRoles;
class StagedKinds;
}

class Writer;

/// How a Writer's pushes meet the buffer's rate limiter; given to the constructor, changeable by set_options().
struct WriterOptions {
  /// In a buffer with a rate limiter: before each push (push, push_one, reserve), wait while the limiter holds
  /// the inserts back (the writers are ahead of the learner by more than the error buffer), for at most
  /// rate_limit_timeout_ms, then throw Error(rate_limited) with the reason (the error and its bound, and the
  /// learner's state: none, dead, idle since when, or waiting itself), having written nothing. A push is admitted
  /// whole or not at all. Waiting costs O(num_envs) loads per push call (the admitted steps of every env are
  /// counted). False (the default): never wait; the limiter only counts this writer's steps, at no cost.
  /// Ignored in a buffer without a limiter.
  bool wait_for_rate_limit = false;
  /// With wait_for_rate_limit: how long one push may wait, in milliseconds (kWaitForever: no timeout).
  uint64_t rate_limit_timeout_ms = 10'000;
  /// In a buffer with a policy-version field (CreateOptions::policy_version) whose learners published a window
  /// (Sampler::publish_policy): how long a push of steps whose version the window has left behind waits for the
  /// window to admit them (a wider window), in milliseconds, before it throws Error(rate_limited) saying which
  /// version the window needs, having written nothing. 0: throw at once.
  uint64_t policy_timeout_ms = 10'000;
  /// In a consuming queue (CreateOptions::consuming_queue): how long a push waits, in milliseconds, while the ring
  /// slot an env's next step needs holds a step not yet delivered (the queue is full for that env), before it
  /// throws Error(rate_limited) naming the env and the step, having written nothing. 0: throw at once;
  /// kWaitForever: no timeout.
  uint64_t queue_timeout_ms = 10'000;
};

/// A step reserved in place by Writer::reserve(): fill each field's bytes in the segment, then commit(). Until
/// commit() nothing is visible to samplers; destroying the slot without commit() abandons the step (the env's
/// head does not move and the next push reuses the slot). Move-only; used by the thread that reserved it.
class StepSlot {
 public:
  /// Takes over `other`'s reservation; `other` is left committed (empty).
  StepSlot(StepSlot&& other) noexcept;
  StepSlot& operator=(StepSlot&&) = delete;
  StepSlot(const StepSlot&) = delete;
  StepSlot& operator=(const StepSlot&) = delete;
  ~StepSlot();

  /// The env whose step this is.
  uint64_t env() const noexcept { return env_; }
  /// The global index of the step being written (the env's head before commit).
  uint64_t step() const noexcept { return step_; }
  /// The bytes of field `index` (schema order) in this step's ring slot. Precondition: not committed.
  std::span<std::byte> field(std::size_t index) const noexcept;
  /// field(index) viewed as elements of T; sizeof(T) must divide the field's bytes.
  template <class T>
  std::span<T> as(std::size_t index) const noexcept {
    const auto bytes = field(index);
    return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
  /// Publishes the step (release store of the env's head); in a buffer with episode fields, its flags and reward
  /// are read from the slot as filled. Throws Error(invalid_argument) when called twice.
  void commit();
  /// Whether commit() has run (or the slot was moved from).
  bool committed() const noexcept { return writer_ == nullptr; }
  /// In a buffer with priorities: the step's priority (a finite float >= 0 whose priority^alpha is a finite float
  /// too, checked as given; Error(invalid_argument) otherwise), set when commit() publishes it. Without a call, the
  /// step enters at the buffer's running maximum priority. Ignored in a buffer without priorities.
  void set_priority(double priority);

 private:
  friend class Writer;
  StepSlot(Writer* writer, uint64_t env, uint64_t step, uint32_t local) noexcept
      : writer_(writer), env_(env), step_(step), local_(local) {}
  Writer* writer_;  // null once committed or abandoned
  uint64_t env_;
  uint64_t step_;
  uint32_t local_;
  double priority_ = -1;  // negative: the running maximum
};

/// An env worker's role: leases a set of envs and pushes their steps. Used by one thread at a time; the top of
/// this file has the guarantees.
class Writer {
 public:
  /// Leases `env_ids` (all of them or none) for this process and this Writer. For each env: a free lease is
  /// taken; a lease whose holder is dead is taken over (counted in takeovers()); a lease held by a live process
  /// throws Error(lease_held) naming the env and the owner's pid and start time, and one held by this process
  /// (another Writer) throws lease_held too. Also throws env_out_of_range, invalid_argument (a repeated env
  /// id, an empty list) and read_only (a read-only Buffer). O(num_envs) memory for the env lookup table. In a
  /// buffer with episode fields it then brings each env's episode state in line with its head (pushing the record
  /// a dead predecessor owed, if any).
  /// `options` choose whether pushes wait for the buffer's rate limiter (WriterOptions).
  Writer(Buffer& buffer, std::span<const uint64_t> env_ids, const WriterOptions& options = {});
  /// The same, with the env ids as a braced list.
  Writer(Buffer& buffer, std::initializer_list<uint64_t> env_ids, const WriterOptions& options = {})
      : Writer(buffer, std::span<const uint64_t>(env_ids.begin(), env_ids.size()), options) {}
  /// Leases envs [first, first + count).
  static Writer range(Buffer& buffer, uint64_t first, uint64_t count, const WriterOptions& options = {});

  /// Takes over `other`'s leases; `other` then holds none.
  Writer(Writer&& other) noexcept;
  Writer& operator=(Writer&&) = delete;
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  /// Releases every lease still held (a lease already taken over by another process is left alone).
  ~Writer();

  /// Pushes one step for each listed env, in list order: `fields` holds one array per schema field, in schema
  /// order, each [env_ids.size()][field shape] (what envpool's recv returns). Any subset of this Writer's envs,
  /// any order, but each env at most once per call.
  ///
  /// Everything is validated before anything is written; on error nothing is pushed and Error is thrown:
  /// env_out_of_range, not_leased (an env this Writer does not lease), invalid_argument (an env listed twice,
  /// an env with a reserved but uncommitted step), size_mismatch (a field count or byte size that differs from
  /// the schema; the message names the field and gives expected versus actual bytes).
  /// Each env id and priority is read once, then checked, and the checked value is the one used: another thread
  /// that changes the caller's arrays during the call (while it waits for the rate limiter, say) cannot make it
  /// write to another env or store a priority it did not check (the field bytes are copied as they are then).
  /// Cost: O(len(env_ids) * num_fields) copies; no allocation; never blocks (see the header comment), except in a
  /// Writer made with WriterOptions::wait_for_rate_limit, which waits for the buffer's rate limiter (then
  /// Error(rate_limited) at its timeout, with nothing written).
  void push(std::span<const int32_t> env_ids, std::span<const FieldBytes> fields);
  /// The same, with 64-bit env ids.
  void push(std::span<const uint64_t> env_ids, std::span<const FieldBytes> fields);
  /// The same with each step's priority (a buffer with priorities: one finite priority >= 0 per listed env whose
  /// sampling weight priority^alpha is at most the largest float, 3.4e38, which the priority trees hold; else
  /// Error(size_mismatch) or Error(invalid_argument), before anything is written). Steps pushed without priorities
  /// enter at the running maximum (the largest priority ever given, 1 at first), as in prioritized experience
  /// replay. A buffer without priorities refuses priorities (invalid_argument).
  void push(std::span<const int32_t> env_ids, std::span<const FieldBytes> fields, std::span<const float> priorities);
  /// The same, with 64-bit env ids.
  void push(std::span<const uint64_t> env_ids, std::span<const FieldBytes> fields, std::span<const float> priorities);
  /// The same, with the fields as a braced list.
  void push(std::span<const int32_t> env_ids, std::initializer_list<FieldBytes> fields) {
    push(env_ids, std::span<const FieldBytes>(fields.begin(), fields.size()));
  }
  /// The same, with 64-bit env ids and the fields as a braced list.
  void push(std::span<const uint64_t> env_ids, std::initializer_list<FieldBytes> fields) {
    push(env_ids, std::span<const FieldBytes>(fields.begin(), fields.size()));
  }

  /// Pushes one step of one env: `fields` holds one value of each field, in schema order. Errors as push().
  void push_one(uint64_t env_id, std::span<const FieldBytes> fields);
  /// The same, with the fields as a braced list.
  void push_one(uint64_t env_id, std::initializer_list<FieldBytes> fields) {
    push_one(env_id, std::span<const FieldBytes>(fields.begin(), fields.size()));
  }

  /// Zero-copy push: claims the env's next ring slot and returns it for filling in place; StepSlot::commit()
  /// publishes it. One reservation per env at a time (a second one, or a push to the env, throws
  /// invalid_argument until the first is committed or destroyed). Errors as push() for the env id.
  StepSlot reserve(uint64_t env_id);

  /// The envs this Writer leases, in the order given to the constructor.
  const std::vector<uint64_t>& env_ids() const noexcept { return envs_; }
  /// Steps published so far for `env_id` (its head). Precondition: env_id is leased by this Writer.
  uint64_t head(uint64_t env_id) const noexcept;
  /// How many of this Writer's leases were taken over from dead processes.
  uint64_t takeovers() const noexcept { return takeovers_; }
  /// Under StackContinuity::episodes: the steps this Writer pushed that no flag marked as a restart (inside an
  /// episode), whose stack the rule's spot check (one step in 256, compared as the compare rule does) found not to
  /// continue the previous step's. Each of those was stored exactly, but the steps between the checks are trusted:
  /// a count above 0 says that the env restarts its stacks without a flag, and that about 255 times as many such
  /// stacks were stored as continuations, wrong (docs/design/stacks.md). 0 under the compare rule.
  uint64_t stack_flagless_restarts() const noexcept;
  /// Whether pushes wait for the rate limiter, and how long; changeable between pushes (a writer that timed out
  /// can go on without waiting).
  const WriterOptions& options() const noexcept { return options_; }
  /// Replaces the options; takes effect at the next push.
  void set_options(const WriterOptions& options) noexcept { options_ = options; }
  /// The buffer this Writer pushes to.
  const Buffer& buffer() const noexcept { return *buffer_; }

 private:
  friend class StepSlot;
  template <class Id>
  void push_impl(std::span<const Id> env_ids, std::span<const FieldBytes> fields, const float* priorities);
  void check_priorities(std::size_t count, std::span<const float> priorities) const;
  const float* copy_priorities(std::size_t count, std::span<const float> priorities);
  void set_priority(uint64_t env, uint64_t step, double priority) noexcept;
  uint32_t local_of(uint64_t env_id, const char* op) const;
  [[noreturn]] void throw_not_leased(uint64_t env_id, const char* op) const;
  void check_process(const char* op) const;
  uint64_t claim(uint32_t local) noexcept;
  void seal_cold(uint32_t local) noexcept;  // (1.11) the step whose slot the next claim reclaims, into the cold tier
  void publish(uint32_t local, uint64_t step, uint64_t now_ns) noexcept;
  void write_step(uint32_t local, uint64_t env, std::span<const FieldBytes> fields, std::size_t row, double priority,
                  uint64_t now_ns) noexcept;
  // The publish sequence of a claimed step whose fields are stored: episode bookkeeping, priority, head, record.
  void finish_step(uint32_t local, uint64_t env, uint64_t step, double priority, uint64_t now_ns) noexcept;
  // Episode bookkeeping of step `step` of `env` before its head store, its flags read from the ring slot as written
  // (never from the caller's arrays a second time). Returns whether a record is due after the head store.
  bool stage_episode(uint64_t env, uint64_t step) noexcept;
  // Whether step `step` of `env`'s own flags end its episode, read from the ring slot as written (the frame ring's
  // episodes rule asks; false without episode fields or under another rule).
  bool step_ends_episode(uint64_t env, uint64_t step) const noexcept;
  // Wakes the learners (always) and the sleeping reanalyse workers (when one of the call's envs, locals[0..n),
  // filled a chunk of the walk) after a push call's head stores.
  void notify(const uint32_t* locals, std::size_t n) noexcept;
  void wake_walkers(const uint32_t* locals, std::size_t n) noexcept;
  void release_all() noexcept;
  // With options_.wait_for_rate_limit: waits until the limiter admits one step of each env in admit_envs_ (or
  // throws rate_limited, having reserved nothing).
  void wait_for_rate_limit(const char* op);
  // In a buffer with a policy-version field (lib/writer_policy.cpp): reads the version of each step of the call
  // (rows of `fields`, or the reserved slot's when `fields` is empty) into versions_, checks that none is negative or
  // below its env's newest, waits while the window leaves one behind, then stores the envs' newest versions.
  void admit_policy(std::span<const FieldBytes> fields, std::size_t n, const char* op);
  void wait_for_policy(std::size_t blocked, const char* op);
  // In a consuming queue (lib/writer_queue.cpp): waits until the next step of each env of the call (locals_[0..n))
  // may overwrite its ring slot (the step there was delivered), or throws rate_limited; then takes the call's
  // insertion ticket into ticket_.
  void admit_queue(std::size_t n, const char* op);
  void wait_for_queue(std::size_t n, std::size_t blocked, const char* op);

  Buffer* buffer_ = nullptr;
  // The push path's copies of the buffer's mapping and shape (Buffer's getters are out of line: the Segment is not
  // part of the API). A Buffer's Segment does not move (it is on the heap), so the pointer survives a moved Buffer.
  Segment* seg_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t cold_capacity_ = 0;  // steps per env on disk (layout 1.11); 0 without a cold tier (no seal)
  bool has_priorities_ = false;
  std::atomic<uint64_t>* cap_words_ = nullptr;  // the sample caps' count words, [num_envs][capacity] (null without)
  std::atomic<uint64_t>* queue_tickets_ = nullptr;  // a consuming queue's insertion tickets (null without)
  uint64_t ticket_ = 0;                             // the current push call's insertion ticket
  std::vector<uint64_t> envs_;         // leased env ids
  std::vector<uint32_t> local_;        // env id -> index in envs_ + 1; 0 when not leased
  std::vector<uint64_t> seen_;         // per leased env: the push call that last listed it (duplicate check)
  std::vector<uint8_t> reserved_;      // per leased env: a StepSlot is outstanding
  std::vector<layout::EnvControl*> control_;  // per leased env: its control block in the mapping
  std::vector<uint64_t> next_slot_;    // per leased env: head % capacity, the ring slot of its next step
  std::vector<std::byte*> field_base_; // start of each plain-ring field's storage (null for a staged field)
  std::vector<uint64_t> field_bytes_;  // bytes per step of each field
  std::vector<uint32_t> plain_fields_;  // the plain-ring fields, stored inline (plain_ring.hpp), in schema order
  layout::GlobalControl* global_ = nullptr;  // the buffer's, in the mapping
  layout::WalkControl* walk_ = nullptr;      // the reanalyse walk's control line (null without a walk)
  uint64_t walk_chunk_ = 0;                  // its steps per chunk
  std::vector<uint32_t> locals_;       // per position of the current push call: its env's index in envs_
  std::vector<float> priorities_;      // the current push call's priorities, copied once and checked
  uint64_t calls_ = 0;
  uint64_t lease_word_ = 0;            // pack_owner(pid, start) of this process
  uint64_t fork_generation_ = 0;       // detail::fork_generation() when the leases were taken
  bool light_notify_ = false;          // this process registered for the learner's heavy fence: no fence per push
  uint64_t takeovers_ = 0;
  std::unique_ptr<detail::EpisodeRoles> roles_;  // the buffer's episode fields; null without any
  // The fields of the storage kinds other than the plain ring (stacked fields' frame rings: their cursors and
  // staging; detail/storage/staged_kinds.hpp); null without any.
  std::unique_ptr<detail::StagedKinds> staged_;
  WriterOptions options_;
  std::vector<layout::EnvControl*> admit_envs_;  // the envs of the push being admitted by the rate limiter
  std::optional<std::size_t> policy_field_;  // the policy-version field, if the buffer has one
  std::vector<uint64_t> versions_;           // per position of the current push call: its step's version
};

}  // namespace shmreplay
