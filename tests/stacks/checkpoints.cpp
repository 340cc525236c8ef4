// tests/stacks/checkpoints.cpp: checkpoints of stacked buffers whose envs lose steps to overwritten frames
// (docs/design/stacks.md, "Checkpoints, dump, and in-place updates"). A save or a chain link during which the env's
// writer raises stacks_intact_from into the steps it is copying saves the steps still intact at once, instead of
// waiting for a full window that never comes (the pushes are made from the save's progress callback, between two
// chunks of its copy, so the test is deterministic). A load into a buffer whose restart reserve is smaller than the
// checkpoint's is refused unless allow_mismatch; with it, the load says what it kept and what did not fit.
// Part of test_stacks (tests/CMakeLists.txt); its helpers are in stacks_helpers.hpp.
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "shmreplay/checkpoint.hpp"
#include "stacks_helpers.hpp"

namespace {

// A path under the temporary directory, removed with whatever is there at the start and at the end.
struct PathGuard {
  std::string path;
  explicit PathGuard(const std::string& tag)
      : path(fmt::format("{}/{}", std::filesystem::temp_directory_path().string(), unique_name(tag))) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  PathGuard(const PathGuard&) = delete;
  PathGuard& operator=(const PathGuard&) = delete;
  ~PathGuard() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// One env of 32 steps whose every step is a jump (K new frames): a ring of 32 + 3 x 2 frames holds the stacks of
// 9 steps, and each push takes the oldest stored step's frames.
struct JumpRig : StackRig {
  JumpRig() : StackRig("stk-ckpt-bound", {"obs:u8[4,3,5]:stack=0"}, 1, 32, {.stack_restarts = 1}, false) {}
  void jump(int n) {
    for (int i = 0; i < n; ++i) push_steps(w, m, {0}, {m.next(0, Move::jump, false)}, PushPath::one);
  }
};

// Save options whose progress callback pushes `steps` jumps once, after the first chunk of records is copied; a copy
// that waits for a full window after that fails fast (max_rounds).
SaveOptions pushing_save(JumpRig& rig, int steps, bool& pushed) {
  SaveOptions o;
  o.max_rounds = 2000;
  o.progress = [&rig, steps, &pushed](const CheckpointProgress& p) {
    if (pushed || p.done_bytes == 0) return;
    pushed = true;
    rig.jump(steps);
  };
  return o;
}

// The model of the buffer `name` after a load of env 0's window [first, head) of `m`: its frames start over at first.
Model loaded_from(const Model& m, uint64_t first, uint64_t restarts) {
  Model l(m.sch, m.num_envs(), m.capacity, restarts);
  l.start_at(0, first);
  for (uint64_t s = first; s < m.head(0); ++s) l.record(0, m.envs[0].steps[s]);
  return l;
}

}  // namespace

TEST_CASE("a save during which the writer raises stacks_intact_from into the copied steps saves the steps still "
          "intact, without waiting for a full window") {
  JumpRig rig;
  rig.jump(40);
  const uint64_t lo_before = rig.m.lo(0);
  REQUIRE(lo_before > rig.m.head(0) - 32);  // the view is bounded by the frames, not by the slots
  PathGuard file("stk-ckpt-bound");
  bool pushed = false;
  const CheckpointInfo info = save_checkpoint(rig.buf, file.path, pushing_save(rig, 3, pushed));
  REQUIRE(pushed);
  REQUIRE(rig.m.lo(0) == lo_before + 3);  // the bound passed 3 of the steps the copy had taken
  CHECK(info.envs[0].first_step == rig.m.lo(0));
  CHECK(info.envs[0].head == rig.m.head(0));
  CHECK(info.envs[0].steps == rig.m.head(0) - rig.m.lo(0));
  const CheckpointInfo verified = verify_checkpoint(file.path);  // the records' checksum is the moved records'
  CHECK(verified.envs[0].data_crc == info.envs[0].data_crc);
  SegmentGuard fresh(unique_name("stk-ckpt-bound-load"));
  const LoadResult r = load_checkpoint(file.path, fresh.name());
  CHECK(r.notes.empty());
  CHECK(r.steps_restored == info.envs[0].steps);
  const Model l = loaded_from(rig.m, info.envs[0].first_step, 1);
  CHECK(l.lo(0) == info.envs[0].first_step);
  CHECK(check_read_steps(Buffer::open(fresh.name()), l, 0) == "");
}

TEST_CASE("a chain link during which the writer raises stacks_intact_from past the previous link's head saves the "
          "steps still intact, and the chain loads them exactly") {
  JumpRig rig;
  rig.jump(40);
  PathGuard dir("stk-ckpt-chain");
  const LinkResult first = save_link(rig.buf, dir.path);
  REQUIRE(first.info.envs[0].head == 40);
  rig.jump(2);
  bool pushed = false;
  ChainOptions o;
  o.save = pushing_save(rig, 9, pushed);  // 9 jumps: the bound passes the first link's head and the copied steps
  const LinkResult second = save_link(rig.buf, dir.path, o);
  REQUIRE(pushed);
  REQUIRE(rig.m.lo(0) >= 42);  // past the first link's head and the 2 steps the copy had taken before it
  CHECK(second.info.envs[0].first_step == rig.m.lo(0));
  CHECK(second.info.envs[0].head == rig.m.head(0));
  SegmentGuard fresh(unique_name("stk-ckpt-chain-load"));
  const LoadResult r = load_chain(dir.path, fresh.name());
  CHECK(r.steps_restored == rig.m.head(0) - rig.m.lo(0));
  CHECK(check_read_steps(Buffer::open(fresh.name()), loaded_from(rig.m, rig.m.lo(0), 1), 0) == "");
}

TEST_CASE("a stacked checkpoint is refused by a buffer with a smaller restart reserve unless allow_mismatch, and "
          "then the load notes the steps that did not fit and counts only those it kept") {
  // The source holds 16 jumps with a reserve of 15 (every stored step a restart); the target's default reserve of 1
  // holds the stacks of 5.
  StackRig src("stk-ckpt-rsv", {"obs:u8[4,3,5]:stack=0"}, 1, 16, {.stack_restarts = 15}, false);
  for (int i = 0; i < 16; ++i) push_steps(src.w, src.m, {0}, {src.m.next(0, Move::jump, false)}, PushPath::one);
  REQUIRE(src.m.lo(0) == 0);
  PathGuard file("stk-ckpt-rsv");
  const CheckpointInfo saved = save_checkpoint(src.buf, file.path);
  REQUIRE(saved.stack_restarts == 15);
  REQUIRE(saved.total_steps == 16);

  SegmentGuard target(unique_name("stk-ckpt-rsv-dst"));
  const StackSchema sch = stack_schema({"obs:u8[4,3,5]:stack=0"});
  Buffer dst = Buffer::create(target.name(), 1, 16, sch.schema);
  std::string message;
  CHECK(test::error_of([&] { load_checkpoint(file.path, target.name()); }, &message) ==
        static_cast<int>(Errc::schema_mismatch));
  CHECK_MESSAGE(contains(message, "stack restart reserve: the segment holds 1 restart per env, the checkpoint 15"),
                message);
  CHECK(segment_of(dst).env_control(0).head.load() == 0);  // untouched

  const LoadResult r = load_checkpoint(file.path, target.name(), {.allow_mismatch = true});
  CHECK(r.steps_restored == 5);
  const uint64_t kept_from = segment_of(dst).env_control(0).stacks_intact_from.load();
  CHECK(kept_from == 11);
  std::string notes;
  for (const std::string& n : r.notes) notes += n + "\n";
  CHECK_MESSAGE(contains(notes, "11 of the checkpoint's 16 steps were left out"), notes);
  CHECK_MESSAGE(contains(notes, "env 0 keeps steps 11 .. 15 of 0 .. 15"), notes);
  const Model l = loaded_from(src.m, 0, 1);
  CHECK(l.lo(0) == 11);
  CHECK(check_read_steps(dst, l, 0) == "");

  // A reserve at least the checkpoint's keeps every step, with no note.
  SegmentGuard big(unique_name("stk-ckpt-rsv-big"));
  Buffer larger = Buffer::create(big.name(), 1, 16, sch.schema, {.stack_restarts = 15});
  std::vector<std::string> none;
  load_checkpoint_into(larger, file.path, {}, &none);
  CHECK(none.empty());
  CHECK(segment_of(larger).env_control(0).stacks_intact_from.load() == 0);
}
