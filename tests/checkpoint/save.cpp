// Checkpoint saves: a full window of whole published steps per env while writers push, the file's permission bits,
// and the temporary files that killed saves leave.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "detail/os/crc32.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"
#include "checkpoint/checkpoint_helpers.hpp"

TEST_CASE("saves taken while writer threads push hold, per env, a full window of whole published steps") {
  SegmentGuard source(unique_name("ckpt-live"));
  Buffer b = Buffer::create(source.name(), 4, 64, kPayloadSchema);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (uint64_t w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      Writer writer(b, {2 * w, 2 * w + 1});
      test::PayloadPusher pusher;
      const std::vector<int32_t> both{static_cast<int32_t>(2 * w), static_cast<int32_t>(2 * w + 1)};
      const std::vector<int32_t> one{static_cast<int32_t>(2 * w)};
      for (uint64_t n = 0; !stop.load(std::memory_order_relaxed); ++n) {
        pusher.push(writer, n % 3 == 0 ? one : both);
      }
    });
  }
  const auto lapped = [&] {
    for (uint64_t e = 0; e < 4; ++e) {
      if (segment_of(b).env_control(e).head.load() < 200) return false;
    }
    return true;
  };
  while (!lapped()) std::this_thread::yield();
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    FileGuard file(temp_path("ckpt-live"));
    SegmentGuard copy(unique_name("ckpt-copy"));
    const CheckpointInfo saved = save_checkpoint(reader, file.path());
    for (const CheckpointEnv& e : saved.envs) {
      CHECK(e.steps == (e.claimed == e.head ? 64u : 63u));  // every env is past its first lap
      CHECK(e.head <= segment_of(b).env_control(e.env).head.load());
    }
    load_checkpoint(file.path(), copy.name());
    const Buffer loaded = Buffer::open(copy.name(), {.read_only = true});
    for (uint64_t e = 0; e < 4; ++e) {
      CHECK(check_env_payloads(loaded, e) == "");
      CHECK(segment_of(loaded).env_control(e).head.load() == saved.envs[e].head);
    }
  }
  stop = true;
  for (std::thread& t : writers) t.join();
}

TEST_CASE("a checkpoint gets its segment's read/write bits whatever the umask, before a byte is written to it") {
  const UmaskGuard open_umask(0);  // the umask that would make a file created 0666 world-readable
  for (const uint32_t segment_mode : {0600u, 0640u, 0660u, 0644u, 0400u}) {
    CAPTURE(fmt::format("{:04o}", segment_mode));
    SegmentGuard source(unique_name("ckpt-mode"));
    FileGuard file(temp_path("ckpt-mode"));
    {
      Buffer b = Buffer::create(source.name(), 2, 8, kPayloadSchema, {.mode = segment_mode});
      Writer w(b, {0, 1});
      push_steps(w, {0, 1}, 5);
    }
    const Buffer src = Buffer::open(source.name(), {.read_only = true});
    CHECK(src.mode() == segment_mode);
    const mode_t expected = (segment_mode & 0066) | 0600;  // the owner keeps read/write to load it back
    std::string temp;
    mode_t temp_mode = 0;
    off_t temp_size = -1;
    (void)save_checkpoint(src, file.path(), {.temp_file_created = [&](const std::string& path) {
                            struct stat st {};
                            REQUIRE(::stat(path.c_str(), &st) == 0);
                            temp = path;
                            temp_mode = st.st_mode & 07777;
                            temp_size = st.st_size;
                          }});
    CHECK(temp.starts_with(file.path() + ".tmp-"));
    CHECK(temp_mode == expected);
    CHECK(temp_size == 0);
    CHECK(file_mode(file.path()) == expected);
    CHECK_FALSE(std::ifstream(temp).good());  // renamed to the file
  }
}

TEST_CASE("a save removes the temporary files that killed saves to the same file left, and nobody else's") {
  SegmentGuard source(unique_name("ckpt-stale"));
  FileGuard file(temp_path("ckpt-stale"));
  {
    Buffer b = Buffer::create(source.name(), 2, 8, kPayloadSchema);
    Writer w(b, {0, 1});
    push_steps(w, {0, 1}, 5);
  }
  // Two pids that no longer exist: children that exited and were reaped.
  const auto dead_pid = [] {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
    return pid;
  };
  const pid_t dead = dead_pid();
  const pid_t dead_but_locked = dead_pid();
  const std::string p = file.path();
  const std::vector<std::string> stale = {fmt::format("{}.tmp-{}-0", p, dead), fmt::format("{}.tmp-{}-17", p, dead)};
  const std::vector<std::string> kept = {
      fmt::format("{}.tmp-{}-3", p, ::getpid()),         // this process's own (another thread's save)
      fmt::format("{}.tmp-{}-0", p, ::getppid()),        // a live process's
      fmt::format("{}.tmp-{}-0", p, dead_but_locked),    // locked: a save in another pid namespace
      fmt::format("{}.tmp-x-0", p),                      // not <pid>-<n>
      fmt::format("{}.tmp-{}", p, dead),                 // not <pid>-<n>
      fmt::format("{}x.tmp-{}-0", p, dead),              // another file's
  };
  std::vector<std::unique_ptr<FileGuard>> guards;
  for (const std::string& f : stale) guards.push_back(std::make_unique<FileGuard>(f));
  for (const std::string& f : kept) guards.push_back(std::make_unique<FileGuard>(f));
  for (const std::string& f : stale) spit(f, "half a checkpoint");
  for (const std::string& f : kept) spit(f, "someone else's");
  const int locked = ::open(kept[2].c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(locked >= 0);
  REQUIRE(::flock(locked, LOCK_EX) == 0);

  const Buffer src = Buffer::open(source.name(), {.read_only = true});
  (void)save_checkpoint(src, p);
  ::close(locked);
  for (const std::string& f : stale) CHECK_MESSAGE(!std::ifstream(f).good(), f);
  for (const std::string& f : kept) CHECK_MESSAGE(slurp(f) == "someone else's", f);
  CHECK(verify_checkpoint(p).total_steps == 10);
}
