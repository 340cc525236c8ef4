// A learner rank killed inside try_update() (issue 43, items 2, 3, 5 and 6; docs/design/seqlock.md, "A learner killed
// while it rewrites"): the test hook in_update_section SIGKILLs a child learner after the first of two fields of the
// step is rewritten, so the step is half new. The other learners, writers, a save and the Inspector must then never
// return that step (the repair takes it and every older step out of the view, and counts them), never be held up by
// the dead rank's lock, with or without a writer, and a second repairer must never end a live learner's section.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "detail/protocol/learner_slots.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/test_hooks.hpp"
#include "learners_helpers.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

constexpr uint64_t kCap = 64;
constexpr std::size_t kFieldBytes = 4096;
const Schema kTwoFields = Schema::parse("x:u8[4096] y:u8[4096]");

// The byte every position of field f of env e's step s holds as pushed; a rewrite stores its complement.
uint8_t stamp(uint64_t e, uint64_t s, std::size_t f) { return static_cast<uint8_t>(e * 31 + s * 7 + f * 3 + 1); }

void fill(Buffer& b, uint64_t envs, uint64_t steps) {
  Writer w = Writer::range(b, 0, envs);
  std::vector<uint8_t> x(kFieldBytes), y(kFieldBytes);
  for (uint64_t s = 0; s < steps; ++s) {
    for (uint64_t e = 0; e < envs; ++e) {
      std::memset(x.data(), stamp(e, s, 0), kFieldBytes);
      std::memset(y.data(), stamp(e, s, 1), kFieldBytes);
      w.push_one(e, {FieldBytes{x.data(), kFieldBytes}, FieldBytes{y.data(), kFieldBytes}});
    }
  }
}

void die_here() { ::kill(::getpid(), SIGKILL); }

// A child learner of slot `rank` that rewrites env `env`'s step `step` and is SIGKILLed after its first field.
void kill_inside_update(Buffer& b, uint64_t rank, uint64_t env, uint64_t step) {
  const int status = run_in_child([&] {
    Sampler s(b, {.rank = rank});
    detail::test_hooks::in_update_section.store(&die_here);
    std::vector<uint8_t> x(kFieldBytes, static_cast<uint8_t>(~stamp(env, step, 0)));
    std::vector<uint8_t> y(kFieldBytes, static_cast<uint8_t>(~stamp(env, step, 1)));
    (void)s.try_update(env, step, {FieldBytes{x.data(), kFieldBytes}, FieldBytes{y.data(), kFieldBytes}});
    return true;  // not reached
  });
  REQUIRE(status == 128 + SIGKILL);
}

// A full one-env buffer with 3 learner slots whose slot 1 was SIGKILLed rewriting step `step`: its lock held, its
// section open (update_seq odd).
Buffer with_dead_updater(const std::string& name, uint64_t step) {
  Buffer b = Buffer::create(name, 1, kCap, kTwoFields, {.max_learners = 3});
  fill(b, 1, kCap);
  kill_inside_update(b, 1, 0, step);
  REQUIRE((segment_of(b).env_control(0).update_seq.load() & 1) == 1);
  return b;
}

// Every byte of every step of `batch` as pushed (no step half rewritten), and no row starting at or below `torn` of
// env `torn_env` (a row that contains the torn step starts there or below).
void check_rows(const SampleBatch& batch, uint64_t torn_env, uint64_t torn) {
  for (std::size_t r = 0; r < batch.rows(); ++r) {
    const uint64_t e = batch.env_ids()[r], start = batch.start_steps()[r];
    if (e == torn_env) REQUIRE(start > torn);
    for (std::size_t t = 0; t < batch.sequence_length() && batch.valid(r, t); ++t) {
      for (std::size_t f = 0; f < 2; ++f) {
        const auto* p = reinterpret_cast<const uint8_t*>(batch.step(f, r, t));
        for (std::size_t i = 0; i < kFieldBytes; i += 511) REQUIRE(p[i] == stamp(e, start + t, f));
        REQUIRE(p[kFieldBytes - 1] == stamp(e, start + t, f));
      }
    }
  }
}

}  // namespace

TEST_CASE("a learner killed inside update() on an env nobody pushes to neither hides that env from the other "
          "learners nor lets them read its half-rewritten step") {
  const std::string name = unique_name("dead-updater");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 4, kCap, kTwoFields, {.max_learners = 3});
  fill(b, 4, kCap);
  kill_inside_update(b, 1, 2, 40);
  {
    const SegmentInfo info = Inspector(name).snapshot();
    CHECK(info.envs[2].update_lock == OwnerState::dead);  // `info` and the metrics show it (item 6)
    CHECK(info.envs[2].update_lock_slot == 1);
  }
  Sampler learner(b, {.rank = 0});
  Rng rng(11);
  SampleBatch batch;
  std::array<uint64_t, 4> per_env{};
  for (int call = 0; call < 40; ++call) {
    learner.sample(View::replay, 64, 1, 0.0, rng, batch);
    check_rows(batch, 2, 40);
    for (const uint64_t e : batch.env_ids()) ++per_env[e];
  }
  // Env 2 keeps steps 41..63 (23 of the 64 that each other env holds): its share is 23/215 of the rows.
  const double n = 40 * 64;
  CHECK(static_cast<double>(per_env[2]) > 0.5 * n * 23 / 215);
  for (const uint64_t e : {0u, 1u, 3u}) CHECK(static_cast<double>(per_env[e]) > 0.5 * n * 64 / 215);
  const SegmentInfo after = Inspector(name).snapshot();
  CHECK(after.envs[2].update_lock == OwnerState::none);
  CHECK(after.envs[2].steps_lost_to_dead_updates == 41);
  CHECK(after.envs[2].length == kCap - 41);
  CHECK(learner.sizes(2).replay == kCap - 41);
}

TEST_CASE("with one env, a sample call after a learner was killed inside update() returns instead of reporting a "
          "contended ring") {
  const std::string name = unique_name("dead-updater-one");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 1, kCap, kTwoFields, {.max_learners = 2});
  fill(b, 1, kCap);
  kill_inside_update(b, 1, 0, 10);
  Sampler learner(b, {.rank = 0});
  Rng rng(3);
  SampleBatch batch;
  learner.sample(View::replay, 32, 4, 1.0, rng, batch);
  check_rows(batch, 0, 10);
  CHECK(learner.sizes(0).replay == kCap - 11);
}

TEST_CASE("a save, dump and read_steps of a buffer whose learner died inside update() succeed without the torn "
          "step, before anyone repairs it") {
  const std::string name = unique_name("dead-updater-save");
  SegmentGuard guard(name);
  {
    Buffer b = Buffer::create(name, 2, kCap, kTwoFields, {.max_learners = 2});
    fill(b, 2, kCap);
    kill_inside_update(b, 1, 1, 20);
  }
  const Inspector inspector(name);
  const StepRecords records = inspector.read_steps(1, 0, kCap);
  CHECK(records.first_step == 21);
  CHECK(records.count == kCap - 21);
  for (std::size_t i = 0; i < records.count; ++i) {
    for (std::size_t f = 0; f < 2; ++f) CHECK(records.field(i, f)[0] == std::byte{stamp(1, 21 + i, f)});
  }
  const std::string path = (std::filesystem::temp_directory_path() / (name + ".shmrckpt")).string();
  struct Remove {
    std::string p;
    ~Remove() { std::filesystem::remove(p); }
  } remove{path};
  {
    const Buffer source = Buffer::open(name, {.read_only = true});
    const CheckpointInfo saved = save_checkpoint(source, path);
    CHECK(saved.envs[1].first_step == 21);
    CHECK(saved.envs[1].steps == kCap - 21);
    CHECK(saved.envs[0].steps == kCap);
  }
  CHECK(Inspector(name).snapshot().envs[1].update_lock == OwnerState::dead);  // the save wrote nothing
  const std::string copy = unique_name("dead-updater-load");
  SegmentGuard copy_guard(copy);
  (void)load_checkpoint(path, copy);
  const StepRecords loaded = Inspector(copy).read_steps(1, 0, kCap);
  CHECK(loaded.first_step == 21);
  CHECK(loaded.count == kCap - 21);
}

TEST_CASE("a writer that finds a dead learner's update lock repairs it, and the torn step leaves the view") {
  const std::string name = unique_name("dead-updater-writer");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 1, kCap, kTwoFields, {.max_learners = 2});
  fill(b, 1, kCap);
  kill_inside_update(b, 1, 0, 50);
  fill(b, 1, 1);  // one more step: its claim waits on the lock, finds the holder dead and repairs
  const SegmentInfo info = Inspector(name).snapshot();
  CHECK(info.envs[0].update_lock == OwnerState::none);
  CHECK(info.envs[0].head == kCap + 1);
  CHECK(info.envs[0].length == kCap + 1 - 51);
  CHECK(info.envs[0].steps_lost_to_dead_updates == 51);  // steps 0..50: at the repair the writer had not claimed step 64
}

TEST_CASE("while one process repairs a dead updater's lock, a second repairer does nothing, so it can never end a "
          "live learner's section") {
  // Issue 43, item 5: the repair is made under the dead slot's lease (repair_dead_updater takes it over), so a
  // second repairer that found the same dead lock finds the slot held by a live process and leaves the lock, the
  // section and the bound alone; only the first one's repair takes effect.
  const std::string name = unique_name("dead-updater-race");
  SegmentGuard guard(name);
  Buffer b = with_dead_updater(name, 30);
  layout::EnvControl& c = segment_of(b).env_control(0);
  const uint64_t seq = c.update_seq.load();
  // This process holds slot 1's lease now, as the first repairer does between its takeover and its repair.
  const detail::LearnerSlotWords slot = detail::learner_slot(segment_of(b), 1);
  const detail::LeaseResult taken = detail::try_take_lease(slot.lease, detail::self_lease_word());
  REQUIRE(taken.outcome == detail::LeaseOutcome::taken_over);
  // A second repairer in another process finds the lock's slot held by a live process: it repairs nothing.
  CHECK(run_in_child([&] { return !detail::repair_dead_updater(segment_of(b), c); }) == 0);
  CHECK(c.update_seq.load() == seq);
  CHECK(c.stacks_intact_from.load() == 0);
  CHECK((c.claimed.load() & layout::kUpdateLockBit) != 0);
  // The first repairer's repair, then its release of the slot.
  detail::repair_dead_learner(segment_of(b), 1);
  detail::release_lease(slot.lease, detail::self_lease_word());
  CHECK(c.update_seq.load() == seq + 1);
  CHECK(c.stacks_intact_from.load() == 31);
  CHECK((c.claimed.load() & layout::kUpdateLockBit) == 0);
  // A new learner of slot 1 takes the lock and opens a section; a stale repair call finds nothing to do.
  Sampler live(b, {.rank = 1});
  CHECK(!detail::repair_dead_updater(segment_of(b), c));
}

namespace {
// The live learner of the next test, which takes the lock and opens its section from inside the repair.
layout::EnvControl* g_env = nullptr;
Segment* g_segment = nullptr;
std::optional<detail::UpdateSection> g_section;
uint64_t g_claim = 0;
void live_learner_takes_the_lock() {
  detail::test_hooks::in_dead_load_repair.store(nullptr);
  g_claim = detail::lock_for_update(*g_env, *g_segment, 0);
  g_section.emplace(*g_env, 5);
}
}  // namespace

TEST_CASE("the repair of a dead checkpoint load's open section takes the lock first, so it never ends the section of a "
          "live learner that took the lock meanwhile") {
  // Issue 43, item 11: this mutant survived (the free-lock branch of release_dead_update_lock ending update_seq
  // without taking the lock). A load that died left update_seq odd with the lock free; the repairer of the load's
  // slot finds the lock free, and right then (the hook in_dead_load_repair) a live learner takes the lock and opens
  // its own section (update_seq odd again): the repair must leave that section and that lock alone.
  const std::string name = unique_name("dead-load-section");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 1, kCap, kTwoFields, {.max_learners = 3});
  fill(b, 1, kCap);
  layout::EnvControl& c = segment_of(b).env_control(0);
  c.update_seq.fetch_add(1);  // the dead load's open section
  const uint64_t dead_seq = c.update_seq.load();
  Sampler live(b, {.rank = 0});
  g_env = &c;
  g_segment = &segment_of(b);
  detail::test_hooks::in_dead_load_repair.store(&live_learner_takes_the_lock);
  const detail::LearnerSlotWords slot = detail::learner_slot(segment_of(b), 2);
  REQUIRE(detail::try_take_lease(slot.lease, detail::self_lease_word()).outcome == detail::LeaseOutcome::taken);
  detail::release_dead_update_lock(c, 2, kCap);  // slot 2's successor repairs what the load left
  detail::release_lease(slot.lease, detail::self_lease_word());
  REQUIRE(g_section.has_value());  // the hook ran: the live learner's section is open
  CHECK(c.update_seq.load() == dead_seq + 2);
  CHECK((c.claimed.load() & layout::kUpdateLockBit) != 0);
  CHECK(layout::update_lock_owner(c.claimed.load()) == 0);
  g_section.reset();
  detail::unlock_update(c, g_claim);
  CHECK(c.update_seq.load() == dead_seq + 3);
}

namespace {
int g_to_parent = -1;    // the paused repairer's pipe to the test, and back
int g_from_parent = -1;
void pause_before_repair_lease() {
  char c = 'p';
  (void)!::write(g_to_parent, &c, 1);
  (void)!::read(g_from_parent, &c, 1);
}
}  // namespace

TEST_CASE("two repairers that both judged a dead updater's slot dead: the one that loses the race for the slot's "
          "lease repairs nothing") {
  // Issue 43, item 5, at its narrowest: repairer B judged slot 1 dead and is paused before it takes the slot's lease;
  // repairer A (this process) takes the lease meanwhile, as the first repairer does. B then finds the lease held by
  // a live process and must leave the lock and the section alone (mutant repair-without-slot-lease).
  const std::string name = unique_name("dead-updater-lease-race");
  SegmentGuard guard(name);
  Buffer b = with_dead_updater(name, 30);
  layout::EnvControl& c = segment_of(b).env_control(0);
  const uint64_t seq = c.update_seq.load();
  int to_parent[2], from_parent[2];
  REQUIRE(::pipe(to_parent) == 0);
  REQUIRE(::pipe(from_parent) == 0);
  const pid_t b_pid = spawn([&] {
    g_to_parent = to_parent[1];
    g_from_parent = from_parent[0];
    detail::test_hooks::before_repair_lease.store(&pause_before_repair_lease);
    ::_exit(detail::repair_dead_updater(segment_of(b), c) ? 1 : 0);
  });
  char ch = 0;
  REQUIRE(::read(to_parent[0], &ch, 1) == 1);  // B judged the slot dead and waits before its lease CAS
  const detail::LearnerSlotWords slot = detail::learner_slot(segment_of(b), 1);
  REQUIRE(detail::try_take_lease(slot.lease, detail::self_lease_word()).outcome == detail::LeaseOutcome::taken_over);
  REQUIRE(::write(from_parent[1], &ch, 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(b_pid, &status, 0) == b_pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // B repaired nothing
  CHECK(c.update_seq.load() == seq);
  CHECK((c.claimed.load() & layout::kUpdateLockBit) != 0);
  detail::repair_dead_learner(segment_of(b), 1);
  detail::release_lease(slot.lease, detail::self_lease_word());
  CHECK(c.update_seq.load() == seq + 1);
  for (const int fd : {to_parent[0], to_parent[1], from_parent[0], from_parent[1]}) ::close(fd);
}
