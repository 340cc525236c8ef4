// tests/cli/interrupts.cpp: `shmreplay load` and `shmreplay save` killed or interrupted at any moment: no segment
// and no temporary file left behind.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

namespace {

// A quiet segment of `envs` x `capacity` steps of about 4 KiB, full, with step s of env e holding id = e << 32 | s
// in its first field: a checkpoint of it is large enough that loading and saving take a while.
const Schema kBigSchema = Schema::parse("id:u64 blob:u8[4088]");

void fill_big(const std::string& name, uint64_t envs, uint64_t capacity) {
  Buffer b = Buffer::create(name, envs, capacity, kBigSchema);
  Writer w = Writer::range(b, 0, envs);
  std::vector<std::byte> blob(4088);
  for (uint64_t s = 0; s < capacity; ++s) {
    for (uint64_t e = 0; e < envs; ++e) {
      const uint64_t id = e << 32 | s;
      std::memset(blob.data(), static_cast<int>(id & 0xff), blob.size());
      w.push_one(e, {FieldBytes{&id, sizeof id}, FieldBytes{blob.data(), blob.size()}});
    }
  }
}

}  // namespace

TEST_CASE("load into a new name killed or interrupted at any moment leaves no segment and no temporary file") {
  const std::string source = unique_name("cli-kload-src");
  SegmentGuard source_guard(source);
  FileGuard file{temp_file("cli-kload")};
  fill_big(source, 8, 1024);  // 32 MiB of steps
  {
    const Buffer b = Buffer::open(source, {.read_only = true});
    (void)save_checkpoint(b, file.path);
  }
  const std::string target = unique_name("cli-kload-dst");
  SegmentGuard target_guard(target);

  // Kill after the n-th progress line (the verify pass prints about 11, the load pass 11 more), and after fixed
  // delays; SIGKILL, SIGINT (Ctrl-C) and SIGTERM in turn.
  const int signals[] = {SIGKILL, SIGINT, SIGTERM};
  int runs = 0, killed_loading = 0, killed_verifying = 0, completed = 0;
  const auto check_nothing_left = [&](const std::string& when) {
    CAPTURE(when);
    CHECK_FALSE(Buffer::exists(target));
    CHECK(test::entries_containing(shm_directory(), target).empty());
  };
  const auto check_complete = [&] {  // the kill came after the load finished: the segment must be whole
    const Buffer b = Buffer::open(target, {.read_only = true});
    for (uint64_t e = 0; e < 8; ++e) {
      CHECK(segment_of(b).env_control(e).head.load() == 1024);
      CHECK(segment_of(b).env_control(e).lease.load() == 0);
    }
    CHECK(segment_of(b).global_control().learner_lease.load() == 0);
    Buffer::remove(target);
  };
  for (int after_lines = 1; after_lines <= 24; ++after_lines) {
    const int sig = signals[runs++ % 3];
    RunningCli cli({"load", file.path, target, "--progress"});
    std::string last;
    for (int n = 0; n < after_lines; ++n) {
      const auto line = cli.next_line();
      if (!line) break;
      last = *line;
    }
    const int code = cli.finish(sig);
    if (code == 0) {
      ++completed;
      check_complete();
      continue;
    }
    CHECK(code == 128 + sig);
    if (Buffer::exists(target)) {  // the signal came between naming the finished segment and exiting
      ++completed;
      check_complete();
      check_nothing_left(fmt::format("signal {} after naming the segment", sig));
      continue;
    }
    (last.starts_with("loading") ? killed_loading : killed_verifying)++;
    check_nothing_left(fmt::format("signal {} after {} lines, the last '{}'", sig, after_lines, last));
  }
  for (const int delay_us : {0, 200, 1000, 3000, 10000, 30000, 60000, 100000}) {
    const int sig = signals[runs++ % 3];
    RunningCli cli({"load", file.path, target});
    ::usleep(static_cast<useconds_t>(delay_us));
    const int code = cli.finish(sig);
    if (code == 0) {
      ++completed;
      check_complete();
      continue;
    }
    CHECK(code == 128 + sig);
    if (Buffer::exists(target)) {  // named just before the signal: it must be whole
      ++completed;
      check_complete();
    }
    check_nothing_left(fmt::format("signal {} after {} us", sig, delay_us));
  }
  MESSAGE(fmt::format("{} loads signalled: {} while verifying, {} while loading; {} had finished", runs,
                      killed_verifying, killed_loading, completed));
  CHECK(killed_loading >= 5);  // the moments that used to leave an empty, leased segment behind
  // And a load that is left alone still creates the segment, whole.
  REQUIRE(run_cli({"load", file.path, target}).exit_code == 0);
  check_complete();
}

TEST_CASE("save interrupted by SIGINT, SIGTERM or SIGHUP removes its temporary file and dies of the signal") {
  const std::string source = unique_name("cli-ksave");
  SegmentGuard source_guard(source);
  fill_big(source, 8, 1024);  // 32 MiB of steps
  FileGuard file{temp_file("cli-ksave")};
  const std::string dir = file.path.substr(0, file.path.rfind('/'));
  const std::string temp_prefix = file.path.substr(dir.size() + 1) + ".tmp-";
  const int signals[] = {SIGINT, SIGTERM, SIGHUP};
  int interrupted = 0, finished = 0;
  for (int after_lines = 1; after_lines <= 9; ++after_lines) {
    const int sig = signals[after_lines % 3];
    CAPTURE(sig);
    CAPTURE(after_lines);
    RunningCli cli({"save", source, file.path, "--progress"});
    for (int n = 0; n < after_lines; ++n) {  // the first line comes once the temporary file exists
      if (!cli.next_line()) break;
    }
    const int code = cli.finish(sig);
    if (code == 0) {  // it finished before the signal: a whole checkpoint
      ++finished;
      CHECK(verify_checkpoint(file.path).total_steps == 8 * 1024);
      std::remove(file.path.c_str());
    } else {
      ++interrupted;
      CHECK(code == 128 + sig);
      CHECK_FALSE(std::ifstream(file.path).good());
    }
    CHECK(test::entries_containing(dir, temp_prefix).empty());
  }
  MESSAGE(fmt::format("{} saves interrupted, {} had finished", interrupted, finished));
  CHECK(interrupted >= 3);

  // SIGKILL leaves no chance to clean up: the temporary file stays until the next save to the same file.
  {
    RunningCli cli({"save", source, file.path, "--progress"});
    for (int n = 0; n < 2; ++n) REQUIRE(cli.next_line());
    REQUIRE(cli.finish(SIGKILL) == 128 + SIGKILL);
  }
  CHECK(test::entries_containing(dir, temp_prefix).size() == 1);
  REQUIRE(run_cli({"save", source, file.path}).exit_code == 0);
  CHECK(test::entries_containing(dir, temp_prefix).empty());
  CHECK(verify_checkpoint(file.path).total_steps == 8 * 1024);
}
