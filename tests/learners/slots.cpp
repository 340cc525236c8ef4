// Learner slots (layout 1.7): taking them, their own counters, online views and repairs, and the rate limiter's
// reservation by several learners (docs/design/learners.md).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <chrono>
#include <thread>
#include <vector>

#include "detail/protocol/learner_slots.hpp"
#include "learners/learners_helpers.hpp"
#include "shmreplay/inspector.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

// A buffer of `envs` envs x `capacity` payload steps with `slots` learner slots, and a writer of every env.
struct SlotsRig {
  SegmentGuard guard;
  Buffer buf;
  std::vector<int32_t> all;
  Writer writer;
  PayloadPusher pusher;

  SlotsRig(const std::string& tag, uint64_t envs, uint64_t capacity, uint64_t slots, CreateOptions options = {})
      : guard(unique_name(tag)),
        buf(create(guard.name(), envs, capacity, slots, options)),
        all(ids(envs)),
        writer(buf, std::vector<uint64_t>(all.begin(), all.end())) {}
  static std::vector<int32_t> ids(uint64_t envs) {
    std::vector<int32_t> out;
    for (uint64_t e = 0; e < envs; ++e) out.push_back(static_cast<int32_t>(e));
    return out;
  }
  static Buffer create(const std::string& name, uint64_t envs, uint64_t capacity, uint64_t slots,
                       CreateOptions options) {
    options.max_learners = slots;
    return Buffer::create(name, envs, capacity, kPayloadSchema, options);
  }
  void push(std::size_t rounds) {
    for (std::size_t i = 0; i < rounds; ++i) pusher.push(writer, all);
  }
  detail::LearnerSlotWords slot(uint64_t r) { return detail::learner_slot(segment_of(buf), r); }
  // A child process takes learner slot `rank` and exits without releasing it (its Sampler's destructor never runs):
  // the slot is left held by a dead learner. Returns the child's pid, reaped.
  pid_t die_holding(uint64_t rank) {
    std::fflush(nullptr);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      Buffer mine = Buffer::open(guard.name());
      Sampler s(mine, {.rank = rank});
      ::_exit(s.rank() == rank ? 0 : 1);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    return child;
  }
};

}  // namespace

TEST_CASE("a buffer admits max_learners Samplers at once, each on its rank's slot or the first free one") {
  SlotsRig rig("slots-take", 2, 16, 3);
  Sampler first(rig.buf);  // the first free slot
  CHECK(first.rank() == 0);
  Sampler third(rig.buf, {.rank = 2});
  CHECK(third.rank() == 2);
  {
    Sampler second(rig.buf);  // slot 0 is this process's: skipped; slot 1 is free
    CHECK(second.rank() == 1);
    std::string msg;
    CHECK(error_of([&] { Sampler more(rig.buf); }, &msg) == code(Errc::lease_held));
    CHECK(contains(msg, "all 3 learner slots are held"));
    CHECK(error_of([&] { Sampler again(rig.buf, {.rank = 2}); }, &msg) == code(Errc::lease_held));
    CHECK(contains(msg, "this process already holds learner slot 2"));
    CHECK(error_of([&] { Sampler past(rig.buf, {.rank = 3}); }, &msg) == code(Errc::invalid_argument));
    CHECK(contains(msg, "rank 3"));
    CHECK(contains(msg, "3 learner slots (ranks 0 to 2)"));
  }
  // Slot 1 is free again, and is the one the next Sampler takes; its lease word is this process's.
  Sampler next(rig.buf);
  CHECK(next.rank() == 1);
  CHECK(rig.slot(1).lease.lease.load() == detail::self_lease_word());
  const SegmentInfo info = Inspector(Buffer::open(rig.guard.name(), OpenOptions{.expected_schema = std::nullopt, .read_only = true})).snapshot();
  REQUIRE(info.learners.size() == 3);
  CHECK(info.live_learners == 3);
  for (uint64_t r = 0; r < 3; ++r) {
    CHECK(info.learners[r].slot == r);
    CHECK(info.learners[r].state == OwnerState::alive);
    CHECK(info.learners[r].pid == static_cast<uint64_t>(::getpid()));
  }
}

TEST_CASE("a one-learner buffer keeps its single learner's words and messages") {
  SlotsRig rig("slots-one", 2, 16, 1);
  Sampler s(rig.buf);
  CHECK(s.rank() == 0);
  CHECK(rig.buf.max_learners() == 1);
  CHECK(segment_of(rig.buf).global_control().learner_lease.load() == detail::self_lease_word());
  std::string msg;
  CHECK(error_of([&] { Sampler t(rig.buf); }, &msg) == code(Errc::lease_held));
  CHECK(contains(msg, "a buffer has one learner at a time"));
}

TEST_CASE("each learner keeps its own counters and its own online view") {
  SlotsRig rig("slots-own", 3, 32, 2);
  rig.push(10);
  Sampler a(rig.buf, {.rank = 0});
  Sampler b(rig.buf, {.rank = 1});
  Rng ra = rank_rng(7, 0);
  Rng rb = rank_rng(7, 1);
  SampleBatch out;
  a.sample(View::replay, 16, 2, 0.0, ra, out);
  b.sample(View::replay, 5, 1, 0.0, rb, out);
  b.sample(View::replay, 5, 1, 0.0, rb, out);
  // a empties its online view; b's keeps every step.
  a.reset_online_queue();
  CHECK(a.size(View::online) == 0);
  CHECK(b.size(View::online) == 30);
  rig.push(2);
  CHECK(a.size(View::online) == 6);
  CHECK(b.size(View::online) == 36);
  CHECK(a.sizes(1).online == 2);
  CHECK(b.sizes(1).online == 12);
  // Each learner's online rows come from its own view only.
  a.sample(View::online, 64, 1, 0.0, ra, out);
  for (std::size_t row = 0; row < 64; ++row) CHECK(out.start_steps()[row] >= 10);
  CHECK(rig.slot(0).rows_sampled.load() == 16 + 64);
  CHECK(rig.slot(0).sample_calls.load() == 2);
  CHECK(rig.slot(0).online_resets.load() == 1);
  CHECK(rig.slot(1).rows_sampled.load() == 10);
  CHECK(rig.slot(1).sample_calls.load() == 2);
  CHECK(rig.slot(1).online_resets.load() == 0);
  // The Inspector's learner line sums the slots; its per-slot lines are each slot's own.
  const SegmentInfo info = Inspector(Buffer::open(rig.guard.name(), OpenOptions{.expected_schema = std::nullopt, .read_only = true})).snapshot();
  CHECK(info.learner.rows_sampled == 16 + 64 + 10);
  CHECK(info.learner.sample_calls == 4);
  CHECK(info.learners[0].rows_sampled == 80);
  CHECK(info.learners[1].rows_sampled == 10);
  // Every learner's samples count once for the rate limiter's total.
  CHECK(segment_of(rig.buf).global_control().samples.load() == 16 + 64 + 10);
}

TEST_CASE("a takeover of a dead learner's slot repairs that slot only: its locks, its sleepers, its waiting mark") {
  SlotsRig rig("slots-repair", 3, 16, 3);
  rig.push(4);
  Sampler live(rig.buf, {.rank = 0});
  const pid_t child = rig.die_holding(1);
  const detail::LearnerSlotWords dead = rig.slot(1);
  REQUIRE(layout::owner_pid(dead.lease.lease.load()) == static_cast<uint64_t>(child));
  // What it left, as if it died inside try_update of env 0, asleep on the wake word and waiting for the limiter;
  // and what the live learner holds at the same time: the lock of env 1 (mid-update) and one sleeper.
  layout::EnvControl& e0 = segment_of(rig.buf).env_control(0);
  layout::EnvControl& e1 = segment_of(rig.buf).env_control(1);
  const uint64_t claimed0 = e0.claimed.load();
  const uint64_t claimed1 = e1.claimed.load();
  e0.claimed.store(claimed0 | layout::update_lock_bits(1));
  e0.update_seq.store(e0.update_seq.load() + 1);  // odd: its section never ended
  e1.claimed.store(claimed1 | layout::update_lock_bits(0));
  e1.update_seq.store(e1.update_seq.load() + 1);  // the live learner's section, in progress
  layout::GlobalControl& g = segment_of(rig.buf).global_control();
  g.waiters.store(3);  // the dead learner slept twice over (counted in its slot), the live one once
  dead.waiters.store(2);
  rig.slot(0).waiters.store(1);
  dead.waiting_rows.store(8);
  rig.slot(0).waiting_rows.store(4);
  const uint64_t takeovers = dead.lease.takeovers.load();

  Sampler successor(rig.buf);  // the first slot that is free or dead: 1
  CHECK(successor.rank() == 1);
  CHECK(dead.lease.takeovers.load() == takeovers + 1);
  CHECK(e0.claimed.load() == claimed0);  // slot 1's lock released, its section ended
  CHECK(e0.update_seq.load() % 2 == 0);
  CHECK(e1.claimed.load() == (claimed1 | layout::update_lock_bits(0)));  // slot 0's lock and section untouched
  CHECK(e1.update_seq.load() % 2 == 1);
  CHECK(g.waiters.load() == 1);  // the live learner's sleeper stays counted
  CHECK(dead.waiters.load() == 0);
  CHECK(rig.slot(0).waiters.load() == 1);
  CHECK(dead.waiting_rows.load() == 0);
  CHECK(rig.slot(0).waiting_rows.load() == 4);
  CHECK(rig.slot(2).lease.takeovers.load() == 0);
  // Put the live learner's words back as it would leave them.
  e1.update_seq.store(e1.update_seq.load() + 1);
  e1.claimed.store(claimed1);
  g.waiters.store(0);
  rig.slot(0).waiters.store(0);
  rig.slot(0).waiting_rows.store(0);
}

TEST_CASE("a writer waiting on an update lock frees it when the slot named in the lock is dead, not before") {
  SlotsRig rig("slots-writer-lock", 1, 16, 2);
  rig.push(3);
  rig.die_holding(1);
  layout::EnvControl& c = segment_of(rig.buf).env_control(0);
  Sampler live(rig.buf, {.rank = 0});
  // A live learner's lock (slot 0, this process) holds the writer until it is released.
  const uint64_t claimed = c.claimed.load();
  c.claimed.store(claimed | layout::update_lock_bits(0));
  std::atomic<bool> pushed{false};
  std::thread writer([&] {
    rig.push(1);
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(pushed.load());
  // The lock now names the dead slot 1: the writer finds its holder dead and releases it.
  c.claimed.store(claimed | layout::update_lock_bits(1));
  writer.join();
  CHECK(pushed.load());
  CHECK((c.claimed.load() & ~layout::kClaimMask) == 0);
  CHECK(c.head.load() == 4);
}

TEST_CASE("two learners' in-place updates of one env exclude each other, and each names its slot in the lock") {
  SlotsRig rig("slots-update", 1, 64, 2);
  rig.push(32);
  Sampler a(rig.buf, {.rank = 0});
  Sampler b(rig.buf, {.rank = 1});
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> other{0};
  std::thread watcher([&] {  // reads the lock word: it names one of the two slots, or no one
    layout::EnvControl& c = segment_of(rig.buf).env_control(0);
    while (!stop.load()) {
      const uint64_t w = c.claimed.load();
      if ((w & layout::kUpdateLockBit) != 0 && layout::update_lock_owner(w) > 1) ++other;
    }
  });
  const auto updater = [&](Sampler& s, uint64_t version) {
    for (int i = 0; i < 2000; ++i) {
      const uint64_t step = static_cast<uint64_t>(i) % 32;
      const Payload p = make_payload(0, step, version);
      const bool stored = s.try_update(0, step, {field_bytes(std::span<const uint64_t>(p.hdr, 4)),
                                                 field_bytes(std::span<const float>(p.body, kBody)),
                                                 field_bytes(std::span<const uint8_t>(p.tail, kTail))});
      CHECK(stored);
    }
  };
  std::thread ta([&] { updater(a, 1); });
  std::thread tb([&] { updater(b, 2); });
  ta.join();
  tb.join();
  stop = true;
  watcher.join();
  CHECK(other.load() == 0);
  CHECK((segment_of(rig.buf).env_control(0).claimed.load() & ~layout::kClaimMask) == 0);
  CHECK(segment_of(rig.buf).env_control(0).update_seq.load() % 2 == 0);
  // Every step is one updater's whole payload: its version is 1 or 2, and every byte is that version's.
  for (uint64_t step = 0; step < 32; ++step) {
    CAPTURE(step);
    const std::optional<uint64_t> version = stored_version(rig.buf, 0, step);
    CHECK((version == std::optional<uint64_t>(1) || version == std::optional<uint64_t>(2)));
  }
  CHECK(rig.slot(0).steps_updated.load() == 2000);
  CHECK(rig.slot(1).steps_updated.load() == 2000);
}

TEST_CASE("learners sampling at once under a rate limiter never pass on one margin, and a failed call gives its "
          "rows back") {
  // samples_per_insert 1 with min_diff 0: a call of `rows` rows may pass only while inserts - samples >= rows.
  // Three learners race for the same few steps of margin; each call's check and count are one CAS, so the sum of
  // the rows they drew never passes the inserts (a check-then-count would, whenever two pass on one margin). Many
  // envs, one step each per push: the check counts the inserts over every env (O(envs)), which keeps a racing
  // learner's window open long enough for a check-then-count to be caught.
  constexpr uint64_t kEnvs = 1024;
  SlotsRig rig("slots-limit", kEnvs, 4, 3,
               {.rate_limit = RateLimit{.min_size_to_sample = 1, .samples_per_insert = 1.0, .min_diff = 0.0,
                                        .max_diff = 4096.0}});
  constexpr std::size_t kRows = 2;
  constexpr uint64_t kBurst = 32;
  constexpr uint64_t kPushes = 300 * kBurst;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> drawn{0};
  std::atomic<uint64_t> violations{0};
  std::vector<std::thread> learners;
  for (uint64_t r = 0; r < 3; ++r) {
    learners.emplace_back([&, r] {
      Sampler s(rig.buf, {.rank = r});
      Rng rng = rank_rng(11, r);
      SampleBatch out;
      while (!stop.load()) {
        try {
          s.sample(View::replay, kRows, 1, 0.0, rng, out, {.rate_limit_timeout_ms = 0});
          drawn += kRows;
          // samples before inserts: both only grow, so samples read first can never pass inserts read later
          const uint64_t sampled = segment_of(rig.buf).global_control().samples.load();
          if (sampled > rig.buf.rate_limit_state().inserts) ++violations;
        } catch (const Error& e) {
          if (e.code() != make_error_code(Errc::rate_limited) && e.code() != make_error_code(Errc::empty_view)) {
            if (violations++ == 0) std::fprintf(stderr, "learner %d: %s\n", static_cast<int>(r), e.what());
          }
        }
      }
    });
  }
  // Bursts of steps, each pushed once the learners have taken the last one's margin (fewer than kRows steps left):
  // at the end of every burst the three learners race for its last calls.
  std::vector<int32_t> one(1);
  const std::atomic<uint64_t>& samples = segment_of(rig.buf).global_control().samples;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (uint64_t i = 0; i < kPushes; ++i) {
    one[0] = static_cast<int32_t>(i % kEnvs);
    rig.pusher.push(rig.writer, one);
    if ((i + 1) % kBurst != 0) continue;
    while (samples.load() + kRows <= i + 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  stop = true;
  for (std::thread& t : learners) t.join();
  const RateLimitState st = rig.buf.rate_limit_state();
  CHECK(violations.load() == 0);
  CHECK(st.inserts == kPushes);
  CHECK(st.samples == drawn.load());  // every reservation drawn, none lost, none given back twice
  CHECK(st.samples <= st.inserts);
  CHECK(st.samples + kRows > st.inserts);  // and the learners took nearly all of the margin
  // A call that fails after its reservation (min_steps refuses it) gives its rows back.
  rig.push(1);
  Sampler s(rig.buf);
  Rng rng(1);
  SampleBatch out;
  const uint64_t before = segment_of(rig.buf).global_control().samples.load();
  CHECK(error_of([&] {
          s.sample(View::replay, kRows, 1, 0.0, rng, out, {.min_steps = 1u << 20, .rate_limit_timeout_ms = 0});
        }) == code(Errc::empty_view));
  CHECK(segment_of(rig.buf).global_control().samples.load() == before);
}
