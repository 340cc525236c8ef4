// Inspector: read-only snapshots and the listing of segments.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "shmreplay/internal/segment.hpp"
#include "detail/os/process.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/internal/layout.hpp"
#include "support.hpp"

using namespace shmreplay;
using test::SegmentGuard;
using test::unique_name;

namespace {
const Schema kSchema = Schema::parse("obs:f32[4] action:i32 reward:f32 done:bool");
}

TEST_CASE("a snapshot of a fresh segment shows its shape and empty envs") {
  const std::string name = unique_name("insp");
  SegmentGuard guard(name);
  const Buffer created = Buffer::create(name, 3, 10, kSchema);
  const SegmentInfo s = Inspector(name).snapshot();
  CHECK(s.name == name);
  CHECK(s.num_envs == 3);
  CHECK(s.capacity == 10);
  CHECK(s.schema == kSchema);
  CHECK(s.step_bytes == 25);
  CHECK(s.data_bytes == 3 * 10 * 25);
  CHECK(s.total_bytes == created.total_bytes());
  CHECK(s.creator_pid == static_cast<uint64_t>(::getpid()));
  CHECK(s.creator_alive);
  CHECK(s.layout_major == layout::kLayoutMajor);
  REQUIRE(s.envs.size() == 3);
  for (const EnvInfo& e : s.envs) {
    CHECK(e.head == 0);
    CHECK(e.length == 0);
    CHECK(e.owner == OwnerState::none);
    CHECK(e.last_push_ns == 0);
  }
  CHECK(s.total_pushed == 0);
  CHECK(s.live_writers == 0);
}

TEST_CASE("a snapshot derives lengths from the counters and judges owners by pid and start time") {
  const std::string name = unique_name("insp2");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 3, 10, kSchema);
  // env 0: 4 steps, online queue reset after step 1. env 1: wrapped (25 steps into a ring of 10), online
  // queue reset long ago. env 2: owned by a process that has exited.
  segment_of(b).env_control(0).head.store(4);
  segment_of(b).env_control(0).claimed.store(4);
  segment_of(b).env_control(0).online_start.store(1);
  segment_of(b).env_control(1).head.store(25);
  segment_of(b).env_control(1).claimed.store(26);
  segment_of(b).env_control(1).online_start.store(3);
  const uint64_t me = static_cast<uint64_t>(::getpid());
  const uint64_t my_start = detail::self_start_ticks();
  segment_of(b).env_control(0).owner_start_ticks.store(my_start);
  segment_of(b).env_control(0).lease.store(layout::pack_owner(me, my_start));
  segment_of(b).env_control(1).lease.store(layout::pack_owner(me, my_start));
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  const uint64_t child_start = detail::process_start_ticks(child);  // a zombie or gone: 0 either way
  ::waitpid(child, nullptr, 0);
  segment_of(b).env_control(2).lease.store(layout::pack_owner(static_cast<uint64_t>(child), child_start + 1));
  // The same pid with a different start time is another process: dead for this lease.
  const SegmentInfo s = Inspector(name).snapshot();
  REQUIRE(s.envs.size() == 3);
  CHECK(s.envs[0].length == 4);
  CHECK(s.envs[0].online_length == 3);
  CHECK(s.envs[0].owner == OwnerState::alive);
  CHECK(s.envs[0].owner_pid == me);
  CHECK(s.envs[0].owner_start_ticks == my_start);
  // A write is in progress on env 1 (claimed = head + 1): its oldest slot is being reclaimed, so the views hold
  // 9 steps, as the Sampler sees them.
  CHECK(s.envs[1].length == 9);
  CHECK(s.envs[1].online_length == 9);
  CHECK(s.envs[1].claimed == 26);
  CHECK(s.envs[2].owner == OwnerState::dead);
  CHECK(s.total_pushed == 29);
  CHECK(s.replay_steps == 13);
  CHECK(s.online_steps == 12);
  CHECK(s.learner.state == OwnerState::none);
  CHECK(s.live_writers == 1);

  // The learner and its counters.
  {
    Sampler learner(b);
    learner.reset_online_queue();
    const SegmentInfo with = Inspector(name).snapshot();
    CHECK(with.learner.state == OwnerState::alive);
    CHECK(with.learner.pid == me);
    CHECK(with.learner.online_resets == 1);
    CHECK(with.envs[0].online_length == 0);
  }
  CHECK(Inspector(name).snapshot().learner.state == OwnerState::none);

  // A pid that is alive but started at another time (pid reuse) is dead for the lease.
  segment_of(b).env_control(0).lease.store(layout::pack_owner(me, my_start + 1));
  CHECK(Inspector(name).snapshot().envs[0].owner == OwnerState::dead);
}

TEST_CASE("the inspector maps read-only and works on a segment it may not write") {
  const std::string name = unique_name("ro");
  SegmentGuard guard(name);
  (void)Buffer::create(name, 1, 1, kSchema, {.mode = 0400});
  const Inspector insp(name);
  CHECK(insp.buffer().read_only());
  CHECK(insp.snapshot().num_envs == 1);
}

TEST_CASE("list_segments finds shmreplay segments, reports damaged ones and skips other files") {
  const std::string good = unique_name("lsgood");
  const std::string damaged = unique_name("lsdamaged");
  const std::string foreign = unique_name("lsforeign");
  SegmentGuard g1(good), g2(damaged), g3(foreign);
  (void)Buffer::create(good, 2, 3, kSchema);
  {
    std::ifstream in(g1.path(), std::ios::binary);
    std::string head(100, '\0');
    in.read(head.data(), 100);
    test::write_file(g2.path(), head);
  }
  test::write_file(g3.path(), "not a segment at all");
  bool saw_good = false, saw_damaged = false, saw_foreign = false;
  for (const ListedSegment& s : list_segments()) {
    if (s.name == good) {
      saw_good = true;
      REQUIRE(s.info.has_value());
      CHECK(s.info->num_envs == 2);
      CHECK(s.error.empty());
    }
    if (s.name == damaged) {
      saw_damaged = true;
      CHECK_FALSE(s.info.has_value());
      CHECK(s.error.find("truncated") != std::string::npos);
    }
    saw_foreign |= s.name == foreign;
  }
  CHECK(saw_good);
  CHECK(saw_damaged);
  CHECK_FALSE(saw_foreign);
}

TEST_CASE("read_steps refuses an env whose counters claim more steps than it holds, instead of allocating them") {
  const std::string name = unique_name("insp-dmg");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 1, 8, Schema::parse("x:u8[4096]"));
  segment_of(b).env_control(0).head.store(uint64_t{1} << 40);  // damaged: head far above claimed
  segment_of(b).env_control(0).claimed.store(5);
  const Inspector insp(name);
  std::string message;
  CHECK(test::error_of([&] { (void)insp.read_steps(0, 0, uint64_t{1} << 41); }, &message) ==
        static_cast<int>(Errc::corrupt));
  CHECK(message.find("claim") != std::string::npos);
  CHECK(message.find("at most 8") != std::string::npos);
}

TEST_CASE("an Inspector refuses another user's segment unless allowed; list_segments lists it with its owner") {
  const std::string name = unique_name("insquat");
  SegmentGuard guard(name);
  (void)Buffer::create(name, 2, 3, kSchema);
  CHECK(Inspector(name).snapshot().owner_uid == ::geteuid());
  if (::chown(guard.path().c_str(), 65534, static_cast<gid_t>(-1)) != 0) {
    MESSAGE("skipped: chown needs root");
    return;
  }
  CHECK(test::error_of([&] { (void)Inspector(name); }) == static_cast<int>(Errc::permission_denied));
  const SegmentInfo info = Inspector(name, {.allow_other_owner = true}).snapshot();
  CHECK(info.owner_uid == 65534);
  CHECK(info.num_envs == 2);
  bool listed = false;
  for (const ListedSegment& s : list_segments()) {
    if (s.name != name) continue;
    listed = true;
    REQUIRE(s.info.has_value());
    CHECK(s.info->owner_uid == 65534);
  }
  CHECK(listed);
}
