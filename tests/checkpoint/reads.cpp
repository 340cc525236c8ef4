// Consistent reads from outside the learner (Inspector::read_steps, and saves): only whole, consecutive, published
// steps, while writers push and while the learner rewrites steps in place.
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

TEST_CASE("read_steps copies the stored steps of a range, clamped to the replay view") {
  SegmentGuard guard(unique_name("ckpt-read"));
  Buffer b = Buffer::create(guard.name(), 2, 8, kPayloadSchema);
  {
    Writer w(b, {0, 1});
    push_steps(w, {0}, 20);
    push_steps(w, {1}, 3);
  }
  const Inspector insp(guard.name());
  const StepRecords all = insp.read_steps(0, 0, 1000);
  CHECK(all.env == 0);
  CHECK(all.first_step == 12);
  CHECK(all.count == 8);
  CHECK(all.record_bytes == kPayloadSchema.step_bytes());
  REQUIRE(all.bytes.size() == 8 * all.record_bytes);
  for (uint64_t i = 0; i < all.count; ++i) {
    CHECK(std::string(reinterpret_cast<const char*>(all.bytes.data() + i * all.record_bytes), all.record_bytes) ==
          payload_bytes(0, 12 + i));
  }
  uint64_t step_field = 0;
  std::memcpy(&step_field, all.field(3, 0).data() + 8, 8);  // hdr[1] of record 3
  CHECK(step_field == 15);
  CHECK(all.field(3, 2).size() == test::kTail);

  const StepRecords middle = insp.read_steps(0, 14, 3);
  CHECK(middle.first_step == 14);
  CHECK(middle.count == 3);
  const StepRecords beyond = insp.read_steps(1, 10, 5);
  CHECK(beyond.count == 0);
  const StepRecords gone = insp.read_steps(0, 0, 5);  // overwritten long ago
  CHECK(gone.count == 0);
  CHECK(test::error_of([&] { (void)insp.read_steps(2, 0, 1); }) == static_cast<int>(Errc::env_out_of_range));
}

TEST_CASE("read_steps while writers push returns only whole, consecutive steps of the env") {
  SegmentGuard guard(unique_name("ckpt-read-live"));
  Buffer b = Buffer::create(guard.name(), 2, 16, kPayloadSchema);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    Writer w(b, {0, 1});
    test::PayloadPusher pusher;
    while (!stop.load(std::memory_order_relaxed)) pusher.push(w, {0, 1});
  });
  while (segment_of(b).env_control(1).head.load() < 16) std::this_thread::yield();
  const Inspector insp(guard.name());
  uint64_t steps_seen = 0;
  std::string violation;
  for (int i = 0; i < 2000 && violation.empty(); ++i) {
    const uint64_t env = static_cast<uint64_t>(i % 2);
    const StepRecords r = insp.read_steps(env, 0, UINT64_MAX);
    for (uint64_t k = 0; k < r.count; ++k) {
      const std::string got(reinterpret_cast<const char*>(r.bytes.data() + k * r.record_bytes), r.record_bytes);
      if (got != payload_bytes(env, r.first_step + k)) {
        violation = fmt::format("env {} step {}", env, r.first_step + k);
        break;
      }
    }
    steps_seen += r.count;
  }
  stop = true;
  writer.join();
  CHECK(violation == "");
  CHECK(steps_seen > 0);
}

namespace {

// A step of the in-place update test: every 64-bit word of it is (step << 32) | version, so a step that is part
// one version and part another (a copy that overlapped a rewrite) shows as words that differ.
const Schema kWordsSchema = Schema::parse("words:u64[8192]");  // 64 KiB steps: a rewrite takes a while
constexpr uint64_t kWords = 8192;

uint64_t version_word(uint64_t step, uint64_t version) { return step << 32 | version; }

// "" when `record` (kWords words) is one whole version of step `step`, else what is wrong with it.
std::string check_words(const std::byte* record, uint64_t step) {
  const auto word = [&](uint64_t i) {
    uint64_t w = 0;
    std::memcpy(&w, record + i * 8, 8);
    return w;
  };
  const uint64_t first = word(0);
  if (first >> 32 != step) return fmt::format("step {} holds a word of step {}", step, first >> 32);
  for (uint64_t i = 1; i < kWords; ++i) {
    if (word(i) != first) {
      return fmt::format("step {} is a mix: word 0 is of version {}, word {} of version {}", step, first & 0xffffffff,
                         i, word(i) & 0xffffffff);
    }
  }
  return "";
}

// Pins the calling thread to `cpu`; false when it cannot (no doctest assertion: it runs on the test's threads).
bool pin_to(std::size_t cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0;
}

std::size_t first_usable_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  for (std::size_t cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  FAIL("no usable CPU");
  return 0;
}

// A save of `b` (one env of the words schema) loaded into a new buffer: the first step whose words are not all of one
// version of it, as text ("" when every step is whole).
std::string saved_violation(const Buffer& b) {
  FileGuard file(temp_path("ckpt-update"));
  SegmentGuard copy(unique_name("ckpt-update-copy"));
  save_checkpoint(b, file.path());
  load_checkpoint(file.path(), copy.name());
  const Buffer loaded = Buffer::open(copy.name(), {.read_only = true});
  for (uint64_t s = 0; s < loaded.capacity(); ++s) {
    const std::string got = stored_step(loaded, 0, s);
    const std::string violation = check_words(reinterpret_cast<const std::byte*>(got.data()), s);
    if (!violation.empty()) return "saved: " + violation;
  }
  return "";
}

// The same of env 0's steps as read_steps reads them.
std::string dumped_violation(const Inspector& insp) {
  const StepRecords r = insp.read_steps(0, 0, insp.buffer().capacity());
  for (uint64_t k = 0; k < r.count; ++k) {
    const std::string violation = check_words(r.bytes.data() + k * r.record_bytes, r.first_step + k);
    if (!violation.empty()) return "dumped: " + violation;
  }
  return "";
}

}  // namespace

TEST_CASE("read_steps and saves taken while the learner rewrites steps in place see each step old or new, never a mix") {
  // The learner's try_update rewrites a step inside an UpdateSection (update_seq odd); the readers outside the
  // learner (read_steps behind `shmreplay dump`, save_checkpoint) must reject a copy that overlapped it. Both
  // threads run on one CPU, so each is preempted wherever the scheduler's tick finds it: the updater inside its
  // copy of a step (the reader then copies a half-rewritten step, which it must see as odd), and the reader inside
  // its copy of the ring (the updater then rewrites steps under it, which it must see as a changed update_seq).
  // On several CPUs the two copies, both forward and at the same speed, would seldom interleave so that a torn
  // copy ends before the section does. Every update writes a new version, so any two parts of a torn copy differ.
  constexpr uint64_t kSteps = 4;
  SegmentGuard guard(unique_name("ckpt-update"));
  Buffer b = Buffer::create(guard.name(), 1, kSteps, kWordsSchema);
  {
    Writer w(b, {0});
    std::vector<uint64_t> words(kWords);
    for (uint64_t s = 0; s < kSteps; ++s) {
      std::fill(words.begin(), words.end(), version_word(s, 0));
      w.push(std::vector<int32_t>{0}, {field_bytes(words)});
    }
  }
  const std::size_t cpu = first_usable_cpu();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> updates{0};
  std::atomic<int> pinned{0};
  std::thread updater([&] {
    pinned += pin_to(cpu) ? 1 : 0;
    Sampler learner(b);
    std::vector<uint64_t> source(kWords);
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      // Filling the new version takes about as long as the copy inside the section: the updater is preempted
      // inside and outside sections alike.
      const uint64_t step = n % kSteps;
      std::fill(source.begin(), source.end(), version_word(step, n / kSteps + 1));
      if (learner.try_update(0, step, {field_bytes(source)})) ++n;
    }
    updates = n;
  });

  uint64_t reads = 0;
  uint64_t saves = 0;
  uint64_t contended = 0;
  std::string violation;
  std::thread reader([&] {
    pinned += pin_to(cpu) ? 1 : 0;
    // Dumps through a read-only mapping of their own (as `shmreplay dump` does), saves through the updater's
    // mapping (ThreadSanitizer pairs accesses by address, so it checks only the saves' side of the race).
    const Inspector insp(guard.name());
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    // At least run_seconds(), one read and one save; at most 60 s (a failure, below).
    for (uint64_t i = 0; violation.empty() && elapsed() < 60; ++i) {
      if (elapsed() >= test::run_seconds(0.5) && reads > 0 && saves > 0) break;
      try {
        if (i % 16 == 15 && saves < 8) {
          violation = saved_violation(b);
          ++saves;
        } else {
          violation = dumped_violation(insp);
          ++reads;
        }
      } catch (const Error& e) {
        if (e.errc() != Errc::contended) throw;
        ++contended;  // the learner rewrote the env during every attempt: allowed, and checks nothing
      }
    }
    stop = true;
  });
  reader.join();
  stop = true;
  updater.join();
  MESSAGE(fmt::format("{} in-place updates; {} reads and {} saves checked, {} gave up (contended)", updates.load(),
                      reads, saves, contended));
  CHECK(pinned.load() == 2);
  CHECK(violation == "");
  CHECK(updates.load() > 0);
  CHECK(reads > 0);
  CHECK(saves > 0);
}
