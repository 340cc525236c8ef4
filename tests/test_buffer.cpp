// Buffer: create, open, remove, and every kind of bad input, across real processes.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/layout.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::layout;
using test::error_of;
using test::run_in_child;
using test::SegmentGuard;
using test::unique_name;

namespace {

const Schema kSchema = Schema::parse("obs:f32[4] action:i32 reward:f32 done:bool");

constexpr int code(Errc e) { return static_cast<int>(e); }

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::vector<char>& bytes) {
  test::write_file(path, std::string_view(bytes.data(), bytes.size()));
}

// A copy of a freshly created segment's bytes, for tests that corrupt it.
std::vector<char> real_segment_bytes() {
  const std::string name = unique_name("src");
  SegmentGuard guard(name);
  (void)Buffer::create(name, 3, 16, kSchema);
  return read_file(guard.path());
}

template <class T>
void poke(std::vector<char>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

// Opens a file holding `bytes` and returns the error code (0 when it opens), with the message in *message.
int open_bytes(const std::vector<char>& bytes, std::string* message, const OpenOptions& options = {}) {
  const std::string name = unique_name("bad");
  SegmentGuard guard(name);
  write_file(guard.path(), bytes);
  return error_of([&] { (void)Buffer::open(name, options); }, message);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}


// The resident bytes (Rss) of this process's mapping that starts at `base`, from /proc/self/smaps; -1 if none.
int64_t mapping_rss_bytes(const void* base) {
  std::ifstream smaps("/proc/self/smaps");
  const auto want = reinterpret_cast<uintptr_t>(base);
  bool in_it = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long start = 0;
    unsigned long end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2 && line.find(':') > line.find(' ')) {
      in_it = start == want;
      continue;
    }
    long long kib = 0;
    if (in_it && std::sscanf(line.c_str(), "Rss: %lld kB", &kib) == 1) return kib * 1024;
  }
  return -1;
}

}  // namespace

TEST_CASE("a created segment opens with the same schema, sizes and a zeroed control block") {
  const std::string name = unique_name("roundtrip");
  SegmentGuard guard(name);
  const auto before = std::chrono::system_clock::now();
  const Buffer created = Buffer::create(name, 4, 100, kSchema);
  CHECK(created.name() == name);
  CHECK(created.path() == shm_directory() + "/" + name);
  CHECK(Buffer::exists(name));

  const Buffer b = Buffer::open(name, {.expected_schema = kSchema});
  CHECK(b.schema() == kSchema);
  CHECK(b.num_envs() == 4);
  CHECK(b.capacity() == 100);
  CHECK(b.total_bytes() == created.total_bytes());
  CHECK(b.segment().field_offsets() == created.segment().field_offsets());
  const SegmentHeader& h = b.segment().header();
  CHECK(h.state.load() == kStateReady);
  CHECK(h.creator_pid == static_cast<uint64_t>(::getpid()));
  CHECK(h.creator_start_ticks > 0);
  const auto created_ns = static_cast<int64_t>(h.creation_time_ns);
  const auto before_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(before.time_since_epoch()).count();
  CHECK(created_ns >= before_ns);
  CHECK(created_ns < before_ns + 60'000'000'000LL);
  for (uint64_t e = 0; e < 4; ++e) {
    const EnvControl& c = b.segment().env_control(e);
    CHECK(c.head.load() == 0);
    CHECK(c.claimed.load() == 0);
    CHECK(c.online_start.load() == 0);
    CHECK(c.lease.load() == 0);
  }
  // Both mappings see the same bytes.
  Buffer& writable = const_cast<Buffer&>(created);
  std::memset(writable.segment().field_data(2), 0x5a, 4);
  CHECK(std::to_integer<int>(b.segment().field_data(2)[3]) == 0x5a);
  // A leading '/' (shm_open style) names the same segment.
  CHECK_NOTHROW((void)Buffer::open("/" + name));
}

TEST_CASE("a segment created in one process is opened and read in another, and outlives its creator") {
  const std::string name = unique_name("fork");
  SegmentGuard guard(name);
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema);
    b.segment().env_control(1).head.store(42);
    auto* obs = reinterpret_cast<float*>(b.segment().field_data(0));
    obs[(1 * 8 + 3) * 4 + 2] = 3.5f;  // env 1, slot 3, element 2
  }
  const int status = run_in_child([&] {
    Buffer b = Buffer::open(name, {.expected_schema = kSchema});
    const auto* obs = reinterpret_cast<const float*>(b.segment().field_data(0));
    if (b.segment().env_control(1).head.load() != 42 || obs[(1 * 8 + 3) * 4 + 2] != 3.5f) return false;
    b.segment().env_control(0).head.store(7);  // a write the parent must see
    return true;
  });
  CHECK(status == 0);
  CHECK(Buffer::open(name).segment().env_control(0).head.load() == 7);

  // The other way round: a child creates, fills and exits; the parent opens what it left.
  const std::string name2 = unique_name("fork2");
  SegmentGuard guard2(name2);
  CHECK(run_in_child([&] {
          Buffer b = Buffer::create(name2, 3, 5, kSchema);
          b.segment().env_control(2).head.store(5);
          return true;
        }) == 0);
  const Buffer b2 = Buffer::open(name2, {.expected_schema = kSchema});
  CHECK(b2.segment().env_control(2).head.load() == 5);
  CHECK(b2.segment().header().creator_pid != static_cast<uint64_t>(::getpid()));
}

TEST_CASE("creating a name that exists fails and leaves the existing segment untouched unless replacing") {
  const std::string name = unique_name("exists");
  SegmentGuard guard(name);
  Buffer first = Buffer::create(name, 2, 8, kSchema);
  first.segment().env_control(0).head.store(11);
  std::string message;
  CHECK(error_of([&] { (void)Buffer::create(name, 5, 5, Schema::parse("x:u8")); }, &message) ==
        code(Errc::already_exists));
  CHECK(contains(message, name));
  CHECK(contains(message, "already exists"));
  {
    const Buffer still = Buffer::open(name);
    CHECK(still.schema() == kSchema);
    CHECK(still.segment().env_control(0).head.load() == 11);
  }
  // A file that is not a segment also blocks the name.
  const std::string foreign = unique_name("foreign");
  SegmentGuard fguard(foreign);
  write_file(fguard.path(), {'h', 'i'});
  CHECK(error_of([&] { (void)Buffer::create(foreign, 1, 1, kSchema); }) == code(Errc::already_exists));
  CHECK(read_file(fguard.path()) == std::vector<char>{'h', 'i'});

  // With replace, the name moves to a new segment; the old mapping keeps its own data.
  const Schema other = Schema::parse("x:u8[3]");
  const Buffer replaced = Buffer::create(name, 5, 5, other, {.replace = true});
  CHECK(Buffer::open(name).schema() == other);
  CHECK(first.segment().env_control(0).head.load() == 11);
  CHECK(first.schema() == kSchema);
}

TEST_CASE("an unnamed segment is usable but invisible until published, vanishes unpublished, and never takes a name "
          "that appeared meanwhile") {
  const std::string name = unique_name("unnamed");
  SegmentGuard guard(name);
  {
    Buffer hidden = Buffer::create_unnamed(name, 2, 8, kSchema);
    CHECK_FALSE(hidden.published());
    CHECK(hidden.name() == name);
    CHECK(hidden.path() == guard.path());
    hidden.segment().env_control(1).head.store(5);
    CHECK_FALSE(Buffer::exists(name));
    CHECK(test::entries_containing(shm_directory(), name).empty());  // not even a hidden temporary name
    CHECK(error_of([&] { (void)Buffer::open(name); }) == code(Errc::not_found));
  }
  CHECK(test::entries_containing(shm_directory(), name).empty());  // destroyed unpublished: gone

  // Published: the name appears with everything written before, and a second publish is refused.
  Buffer made = Buffer::create_unnamed(name, 2, 8, kSchema);
  made.segment().env_control(1).head.store(7);
  made.publish();
  CHECK(made.published());
  CHECK(Buffer::open(name).segment().env_control(1).head.load() == 7);
  std::string m;
  CHECK(error_of([&] { made.publish(); }, &m) == code(Errc::invalid_argument));
  CHECK(contains(m, "already has its name"));

  // A name that appears between create_unnamed and publish is not replaced (unless asked): linkat's EEXIST.
  const std::string raced = unique_name("unnamed-race");
  SegmentGuard raced_guard(raced);
  Buffer late = Buffer::create_unnamed(raced, 1, 4, kSchema);
  {
    Buffer first = Buffer::create(raced, 3, 3, Schema::parse("x:u8"));
    first.segment().env_control(2).head.store(9);
  }
  CHECK(error_of([&] { late.publish(); }, &m) == code(Errc::already_exists));
  CHECK(contains(m, raced));
  CHECK_FALSE(late.published());
  CHECK(Buffer::open(raced).segment().env_control(2).head.load() == 9);
  Buffer replacing = Buffer::create_unnamed(raced, 1, 4, kSchema, {.replace = true});
  replacing.publish();
  CHECK(Buffer::open(raced).schema() == kSchema);
  CHECK(test::entries_containing(shm_directory(), raced) == std::vector<std::string>{raced});
}

TEST_CASE("concurrent creates of one name: exactly one process wins") {
  const std::string name = unique_name("race");
  SegmentGuard guard(name);
  constexpr int kProcs = 4;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 3;
      try {
        (void)Buffer::create(name, 2, 64, kSchema);
        rc = 0;
      } catch (const Error& e) {
        rc = e.errc() == Errc::already_exists ? 1 : 2;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  int winners = 0, losers = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(WIFEXITED(status));
    winners += WEXITSTATUS(status) == 0;
    losers += WEXITSTATUS(status) == 1;
  }
  CHECK(winners == 1);
  CHECK(losers == kProcs - 1);
  CHECK_NOTHROW((void)Buffer::open(name, {.expected_schema = kSchema}));
}

TEST_CASE("an attacher never sees a half-made segment while another process creates and removes it") {
  const std::string name = unique_name("visible");
  SegmentGuard guard(name);
  const pid_t creator = ::fork();
  if (creator == 0) {
    for (int i = 0; i < 300; ++i) {
      try {
        (void)Buffer::create(name, 16, 512, kSchema, {.replace = true});
        Buffer::remove(name);
      } catch (...) {
      }
    }
    ::_exit(0);
  }
  int opened = 0, missing = 0, other = 0;
  std::string last_error;
  while (true) {
    int status = 0;
    const bool done = ::waitpid(creator, &status, WNOHANG) == creator;
    try {
      const Buffer b = Buffer::open(name, {.expected_schema = kSchema});
      opened += b.num_envs() == 16 && b.capacity() == 512;
    } catch (const Error& e) {
      if (e.errc() == Errc::not_found) {
        ++missing;
      } else {
        ++other;
        last_error = e.what();
      }
    }
    if (done) break;
  }
  CAPTURE(last_error);
  CHECK(other == 0);
  MESSAGE("opened ", opened, " times, found no segment ", missing, " times");
}

TEST_CASE("segments are created with mode 0600 by default, and the requested mode whatever the umask") {
  const std::string name = unique_name("mode");
  SegmentGuard guard(name);
  const mode_t old_umask = ::umask(0077);
  (void)Buffer::create(name, 1, 1, kSchema);
  struct stat st {};
  REQUIRE(::stat(guard.path().c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(S_ISREG(st.st_mode));

  const std::string name2 = unique_name("mode2");
  SegmentGuard guard2(name2);
  (void)Buffer::create(name2, 1, 1, kSchema, {.mode = 0644});
  REQUIRE(::stat(guard2.path().c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
  ::umask(old_umask);
  CHECK(error_of([&] { (void)Buffer::create(unique_name("mode3"), 1, 1, kSchema, {.mode = 010000}); }) ==
        code(Errc::invalid_argument));
}

TEST_CASE("a mode with execute, set-uid, set-gid or sticky bits is refused naming the mode; read/write bits are kept") {
  const struct {
    uint32_t mode;
    const char* bits;
  } refused[] = {{04777, "set-uid and execute bits (4111)"},
                 {0700, "execute bits (0100)"},
                 {0755, "execute bits (0111)"},
                 {02660, "set-gid bits (2000)"},
                 {01666, "sticky bits (1000)"},
                 {06600, "set-uid and set-gid bits (6000)"},
                 {010600, "non-permission bits (10000)"}};
  for (const auto& r : refused) {
    CAPTURE(fmt::format("{:o}", r.mode));
    const std::string name = unique_name("badmode");
    SegmentGuard guard(name);
    std::string m;
    CHECK(error_of([&] { (void)Buffer::create(name, 1, 1, kSchema, {.mode = r.mode}); }, &m) ==
          code(Errc::invalid_argument));
    CHECK(contains(m, fmt::format("'{}'", name)));
    CHECK(contains(m, fmt::format("mode {:04o} is not allowed", r.mode)));
    CHECK(contains(m, "expected a subset of 0666"));
    CHECK(contains(m, r.bits));
    CHECK_FALSE(Buffer::exists(name));
  }
  // Read/write bits only are allowed, world-writable included (the CLI warns about that one).
  for (const uint32_t mode : {0u, 0400u, 0600u, 0660u, 0644u, 0666u}) {
    CAPTURE(fmt::format("{:o}", mode));
    const std::string name = unique_name("okmode");
    SegmentGuard guard(name);
    const Buffer b = Buffer::create(name, 1, 1, kSchema, {.mode = mode});
    CHECK(b.mode() == mode);
    struct stat st {};
    REQUIRE(::stat(guard.path().c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == mode);
  }
}

TEST_CASE("bad names, counts and sizes are rejected before any file is made") {
  std::string m;
  CHECK(error_of([&] { (void)Buffer::create("", 1, 1, kSchema); }, &m) == code(Errc::invalid_argument));
  CHECK(contains(m, "empty"));
  CHECK(error_of([&] { (void)Buffer::create("a/b", 1, 1, kSchema); }, &m) == code(Errc::invalid_argument));
  CHECK(contains(m, "'/'"));
  CHECK(error_of([&] { (void)Buffer::create(".hidden", 1, 1, kSchema); }, &m) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)Buffer::create(std::string(201, 'n'), 1, 1, kSchema); }) ==
        code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)Buffer::open("../etc/passwd"); }) == code(Errc::invalid_argument));

  const std::string name = unique_name("counts");
  SegmentGuard guard(name);
  CHECK(error_of([&] { (void)Buffer::create(name, 0, 8, kSchema); }, &m) == code(Errc::invalid_argument));
  CHECK(contains(m, "num_envs is 0, expected 1 to"));
  CHECK(error_of([&] { (void)Buffer::create(name, kMaxEnvs + 1, 8, kSchema); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)Buffer::create(name, 1, 0, kSchema); }, &m) == code(Errc::invalid_argument));
  CHECK(contains(m, "capacity is 0 steps"));
  CHECK(error_of([&] { (void)Buffer::create(name, 1, 8, Schema{}); }) == code(Errc::invalid_schema));
  // 2^20 envs x 2^40 steps overflows before any field is considered; a big field overflows the storage.
  CHECK(error_of([&] { (void)Buffer::create(name, kMaxEnvs, kMaxCapacity, kSchema); }, &m) ==
        code(Errc::invalid_argument));
  CHECK(contains(m, "overflows"));
  CHECK(error_of([&] { (void)Buffer::create(name, 1024, kMaxCapacity, Schema::parse("img:u8[4096,4096]")); },
                 &m) == code(Errc::invalid_argument));
  CHECK(contains(m, "field 'img'"));
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("open of a missing name says it does not exist") {
  std::string m;
  const std::string name = unique_name("missing");
  CHECK(error_of([&] { (void)Buffer::open(name); }, &m) == code(Errc::not_found));
  CHECK(contains(m, name));
  CHECK(contains(m, "does not exist"));
}

TEST_CASE("a file of random bytes is reported as not a segment, never a crash") {
  std::mt19937_64 rng(12345);
  for (const std::size_t size : {0u, 3u, 8u, 255u, 4096u, 65536u}) {
    CAPTURE(size);
    std::vector<char> bytes(size);
    for (auto& c : bytes) c = static_cast<char>(rng());
    std::string m;
    CHECK(open_bytes(bytes, &m) == code(Errc::not_a_segment));
    CHECK(contains(m, "not a shmreplay segment"));
  }
  std::vector<char> text(100, 'x');
  std::string m;
  CHECK(open_bytes(text, &m) == code(Errc::not_a_segment));
  CHECK(contains(m, "expected 0x59414c50524d4853 ('SHMRPLAY')"));
  CHECK(contains(m, "'xxxxxxxx'"));
}

TEST_CASE("a FIFO, a directory or a symlink under a segment's name is refused, never waited on or followed") {
  const std::string fifo = unique_name("fifo");
  SegmentGuard fguard(fifo);
  REQUIRE(::mkfifo(fguard.path().c_str(), 0600) == 0);
  std::string m;
  CHECK(error_of([&] { (void)Buffer::open(fifo, {.read_only = true}); }, &m) == code(Errc::not_a_segment));
  CHECK(contains(m, "not a regular file"));
  CHECK(error_of([&] { (void)Buffer::open(fifo); }, &m) == code(Errc::not_a_segment));
  CHECK(error_of([&] { Buffer::remove(fifo); }, &m) == code(Errc::not_a_segment));

  const std::string dir = unique_name("dir");
  const std::string dir_path = shm_directory() + "/" + dir;
  REQUIRE(::mkdir(dir_path.c_str(), 0700) == 0);
  CHECK(error_of([&] { (void)Buffer::open(dir, {.read_only = true}); }) != 0);
  CHECK(error_of([&] { (void)Buffer::open(dir); }) != 0);
  ::rmdir(dir_path.c_str());

  // A symlink to a real segment is not followed (O_NOFOLLOW): segments are files, not links to elsewhere.
  const std::string real = unique_name("real");
  SegmentGuard rguard(real);
  (void)Buffer::create(real, 1, 1, kSchema);
  const std::string link = unique_name("link");
  SegmentGuard lguard(link);
  REQUIRE(::symlink(rguard.path().c_str(), lguard.path().c_str()) == 0);
  CHECK(error_of([&] { (void)Buffer::open(link); }, &m) == code(Errc::not_a_segment));
  CHECK(contains(m, "symbolic link"));
}

// Makes the segment file `path` belong to uid 65534 (nobody), as if that user had created it; false when this
// process may not (only root may give a file away).
bool give_to_nobody(const std::string& path) { return ::chown(path.c_str(), 65534, static_cast<gid_t>(-1)) == 0; }

TEST_CASE("open refuses a segment that belongs to another user, naming both uids") {
  const std::string name = unique_name("squat");
  SegmentGuard guard(name);
  (void)Buffer::create(name, 1, 4, kSchema, {.mode = 0666});
  if (!give_to_nobody(guard.path())) {
    MESSAGE("skipped: chown needs root");
    return;
  }
  for (const bool read_only : {false, true}) {
    CAPTURE(read_only);
    std::string m;
    CHECK(error_of([&] { (void)Buffer::open(name, {.read_only = read_only}); }, &m) ==
          code(Errc::permission_denied));
    CHECK(contains(m, fmt::format("cannot open shmreplay segment '{}'", name)));
    CHECK(contains(m, "uid 65534"));
    CHECK(contains(m, fmt::format("uid {}", ::geteuid())));
    CHECK(contains(m, "allow_other_owner"));
    // The caller who trusts that user opts in.
    const Buffer b = Buffer::open(name, {.read_only = read_only, .allow_other_owner = true});
    CHECK(b.owner_uid() == 65534);
    CHECK(b.num_envs() == 1);
  }
  SegmentGuard mine(unique_name("mine"));
  CHECK(Buffer::create(mine.name(), 1, 1, kSchema).owner_uid() == ::geteuid());
  // A create of the squatted name never takes it over, and says whose it is.
  std::string m;
  CHECK(error_of([&] { (void)Buffer::create(name, 1, 4, kSchema); }, &m) == code(Errc::already_exists));
  CHECK(contains(m, "a segment of uid 65534"));
  CHECK(contains(m, fmt::format("this process's user, uid {}", ::geteuid())));
}

TEST_CASE("a truncated copy of a real segment is reported as truncated at every length") {
  const std::vector<char> whole = real_segment_bytes();
  REQUIRE(whole.size() > 4096);
  for (const std::size_t size : {std::size_t{12}, std::size_t{16}, std::size_t{100}, std::size_t{255},
                                 std::size_t{256}, std::size_t{4096}, whole.size() - 4096, whole.size() - 1}) {
    CAPTURE(size);
    std::string m;
    CHECK(open_bytes({whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(size)}, &m) ==
          code(Errc::truncated));
    CHECK(contains(m, "it is truncated: "));
  }
  std::string m;
  CHECK(open_bytes({whole.begin(), whole.begin() + 4}, &m) == code(Errc::not_a_segment));
  CHECK(open_bytes(whole, &m) == 0);  // the untouched copy opens
  // A longer file than the header says is inconsistent too.
  std::vector<char> longer = whole;
  longer.resize(whole.size() + 4096);
  CHECK(open_bytes(longer, &m) == code(Errc::corrupt));
}

TEST_CASE("a segment of another major or an older minor version is refused with both versions; a newer minor "
          "opens") {
  std::vector<char> bytes = real_segment_bytes();
  poke<uint32_t>(bytes, offsetof(SegmentHeader, layout_major), 2);
  poke<uint32_t>(bytes, offsetof(SegmentHeader, layout_minor), 0);
  std::string m;
  CHECK(open_bytes(bytes, &m) == code(Errc::version_mismatch));
  CHECK(contains(m, fmt::format("segment layout 2.0, library 1.{}", kLayoutMinor)));
  poke<uint32_t>(bytes, offsetof(SegmentHeader, layout_major), 0);
  CHECK(open_bytes(bytes, &m) == code(Errc::version_mismatch));

  std::vector<char> minor = real_segment_bytes();
  poke<uint32_t>(minor, offsetof(SegmentHeader, layout_minor), 7);
  CHECK(open_bytes(minor, &m) == 0);

  // Layout 1.0 lacks the global section (learner lease, wake word) this library needs.
  poke<uint32_t>(minor, offsetof(SegmentHeader, layout_minor), 0);
  CHECK(open_bytes(minor, &m) == code(Errc::version_mismatch));
  CHECK(contains(m, fmt::format("segment layout 1.0, library 1.{}", kLayoutMinor)));
  CHECK(contains(m, "recreate"));
  // Layout 1.1 lacks the episode sections and field roles.
  poke<uint32_t>(minor, offsetof(SegmentHeader, layout_minor), 1);
  CHECK(open_bytes(minor, &m) == code(Errc::version_mismatch));
  CHECK(contains(m, fmt::format("segment layout 1.1, library 1.{}", kLayoutMinor)));
  CHECK(contains(m, "episode"));
  CHECK(contains(m, "recreate the segment"));
  // Layout 1.3 lacks the rate limiter.
  poke<uint32_t>(minor, offsetof(SegmentHeader, layout_minor), 3);
  CHECK(open_bytes(minor, &m) == code(Errc::version_mismatch));
  CHECK(contains(m, fmt::format("segment layout 1.3, library 1.{}", kLayoutMinor)));
  CHECK(contains(m, "the rate limiter"));
  // Layout 1.4 lacks the marks of waiting writers.
  poke<uint32_t>(minor, offsetof(SegmentHeader, layout_minor), 4);
  CHECK(open_bytes(minor, &m) == code(Errc::version_mismatch));
  CHECK(contains(m, fmt::format("segment layout 1.4, library 1.{}", kLayoutMinor)));
  CHECK(contains(m, "marks of waiting writers"));
}

TEST_CASE("a segment that is not ready is reported, or waited for within the timeout") {
  std::vector<char> bytes = real_segment_bytes();
  poke<uint64_t>(bytes, offsetof(SegmentHeader, state), kStateInitializing);
  std::string m;
  CHECK(open_bytes(bytes, &m) == code(Errc::not_ready));
  CHECK(contains(m, "not ready"));
  CHECK(contains(m, "creator (pid"));
  CHECK(open_bytes(bytes, &m, {.ready_timeout_ms = 30}) == code(Errc::not_ready));
  CHECK(contains(m, "within 30 ms"));

  // A creator that finishes while open() waits: open() succeeds.
  const std::string name = unique_name("late");
  SegmentGuard guard(name);
  write_file(guard.path(), bytes);
  // Publish "ready" by hand while open() waits.
  std::thread publisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int fd = ::open(guard.path().c_str(), O_RDWR);
    const uint64_t ready = kStateReady;
    (void)::pwrite(fd, &ready, sizeof ready, offsetof(SegmentHeader, state));
    ::close(fd);
  });
  CHECK(error_of([&] { (void)Buffer::open(name, {.ready_timeout_ms = 5000}); }) == 0);
  publisher.join();
}

TEST_CASE("inconsistent headers and field tables are reported as corrupt, naming the part") {
  const std::vector<char> good = real_segment_bytes();
  SegmentHeader h{};
  std::memcpy(static_cast<void*>(&h), good.data(), sizeof h);
  std::string m;
  const auto corrupt = [&](auto mutate, const char* needle) {
    std::vector<char> bytes = good;
    mutate(bytes);
    CAPTURE(needle);
    CHECK(open_bytes(bytes, &m) == code(Errc::corrupt));
    CAPTURE(m);
    CHECK(contains(m, needle));
  };
  corrupt([](auto& b) { poke<uint64_t>(b, offsetof(SegmentHeader, header_bytes), 100); }, "header_bytes is 100");
  corrupt([](auto& b) { poke<uint64_t>(b, offsetof(SegmentHeader, num_envs), 0); }, "num_envs is 0");
  corrupt([](auto& b) { poke<uint64_t>(b, offsetof(SegmentHeader, num_envs), 4); }, "env table");
  corrupt([](auto& b) { poke<uint64_t>(b, offsetof(SegmentHeader, capacity), 0); }, "capacity is 0");
  corrupt([](auto& b) { poke<uint64_t>(b, offsetof(SegmentHeader, num_fields), 0); }, "num_fields is 0");
  corrupt([](auto& b) { poke<uint64_t>(b, offsetof(SegmentHeader, num_sections), 1); }, "num_sections is 1");
  corrupt([](auto& b) { poke<uint64_t>(b, offsetof(SegmentHeader, step_bytes), 1); }, "step_bytes is 1");
  const std::size_t envs_off = offsetof(SegmentHeader, sections) + kSectionEnvs * sizeof(SectionDesc);
  corrupt([&](auto& b) { poke<uint64_t>(b, envs_off, uint64_t{1} << 40); }, "ends beyond the file");
  corrupt([&](auto& b) { poke<uint64_t>(b, envs_off, UINT64_MAX - 8); }, "ends beyond the file");
  corrupt([&](auto& b) { poke<uint64_t>(b, envs_off, 64); }, "overlaps the header");
  corrupt([&](auto& b) { poke<uint64_t>(b, envs_off, h.sections[kSectionFields].offset); }, "overlaps");
  corrupt([&](auto& b) { poke<uint64_t>(b, envs_off, h.sections[kSectionEnvs].offset + 8); }, "not aligned");

  const std::size_t f0 = h.sections[kSectionFields].offset;
  const std::size_t f1 = f0 + sizeof(FieldDesc);
  corrupt([&](auto& b) { poke<uint32_t>(b, f1 + offsetof(FieldDesc, dtype), 99); }, "field 2 'action' has dtype code 99");
  corrupt([&](auto& b) { poke<uint32_t>(b, f0 + offsetof(FieldDesc, ndim), 9); }, "9 dimensions");
  corrupt([&](auto& b) { poke<uint64_t>(b, f0 + offsetof(FieldDesc, dims), 0); }, "dimension 1");
  corrupt([&](auto& b) { std::memset(b.data() + f0, 'a', 64); }, "not NUL-terminated");
  corrupt([&](auto& b) { b[f1] = '!'; }, "not allowed");
  corrupt([&](auto& b) { b[f1] = 'o'; b[f1 + 1] = 'b'; b[f1 + 2] = 's'; b[f1 + 3] = 0; }, "unique");
  corrupt([&](auto& b) { poke<uint64_t>(b, f0 + offsetof(FieldDesc, step_bytes), 3); }, "bytes per step");
  corrupt([&](auto& b) { poke<uint64_t>(b, f0 + offsetof(FieldDesc, data_bytes), 3); }, "bytes of storage");
  corrupt([&](auto& b) { poke<uint64_t>(b, f1 + offsetof(FieldDesc, data_offset), h.sections[kSectionData].offset); },
          "overlaps");
  corrupt([&](auto& b) { poke<uint64_t>(b, f1 + offsetof(FieldDesc, data_offset), uint64_t{1} << 62); },
          "ends beyond the file");
  corrupt([&](auto& b) { poke<uint64_t>(b, f1 + offsetof(FieldDesc, data_offset), 4096 + 8); }, "not aligned");
}

TEST_CASE("random corruption of a real segment's header and field table gives an error or a valid open, never a crash") {
  const std::vector<char> good = real_segment_bytes();
  std::mt19937_64 rng(2026);
  const std::string name = unique_name("fuzz");
  SegmentGuard guard(name);
  int opened = 0, refused = 0;
  for (int round = 0; round < 1500; ++round) {
    std::vector<char> bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const std::size_t at = rng() % 640;  // the header and the first field descriptors: where it matters
      if (rng() % 2) {
        bytes[at] = static_cast<char>(rng());
      } else {  // an extreme 8-byte value at an aligned offset
        const uint64_t extremes[] = {0, 1, UINT64_MAX, UINT64_MAX / 2, uint64_t{1} << 40, good.size(), 64, 4096};
        poke<uint64_t>(bytes, at / 8 * 8, extremes[rng() % 8]);
      }
    }
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    write_file(guard.path(), bytes);
    try {
      const Buffer b = Buffer::open(name);
      // Whatever opened must be usable to its last byte: touch every field's storage and every env.
      for (std::size_t i = 0; i < b.schema().size(); ++i) {
        const uint64_t n = b.num_envs() * b.capacity() * b.schema()[i].bytes();
        volatile std::byte sink = b.segment().field_data(i)[n - 1];
        (void)sink;
      }
      (void)b.segment().env_control(b.num_envs() - 1).head.load();
      ++opened;
    } catch (const Error&) {
      ++refused;
    }
  }
  MESSAGE("opened ", opened, ", refused ", refused);
  CHECK(opened + refused == 1500);
  CHECK(refused > 500);  // most damage is detected (flips in creator pid, time or padding are harmless)
}

TEST_CASE("an expected schema that differs is reported field by field") {
  const std::string name = unique_name("schema");
  SegmentGuard guard(name);
  (void)Buffer::create(name, 1, 4, kSchema);
  std::string m;
  CHECK(error_of([&] { (void)Buffer::open(name, {.expected_schema = Schema::parse("obs:f32[5] action:i64 "
                                                                                   "reward:f32 done:bool")}); },
                 &m) == code(Errc::schema_mismatch));
  CHECK(contains(m, name));
  CHECK(contains(m, "2 places"));
  CHECK(contains(m, "field 'obs': expected shape [5], actual [4]"));
  CHECK(contains(m, "field 'action': expected dtype i64, actual i32"));
  CHECK(error_of([&] { (void)Buffer::open(name, {.expected_schema = kSchema}); }) == 0);
}

TEST_CASE("remove deletes the name; attached processes keep working and new opens fail") {
  const std::string name = unique_name("remove");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 4, kSchema);
  const pid_t child = ::fork();
  if (child == 0) {
    // Attached before the removal; keeps writing after it.
    Buffer mine = Buffer::open(name);
    ::raise(SIGSTOP);
    mine.segment().env_control(1).head.store(99);
    std::memset(mine.segment().field_data(0), 0x11, 16);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, WUNTRACED) == child);
  REQUIRE(WIFSTOPPED(status));
  Buffer::remove(name);
  CHECK_FALSE(Buffer::exists(name));
  ::kill(child, SIGCONT);
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(b.segment().env_control(1).head.load() == 99);
  CHECK(std::to_integer<int>(b.segment().field_data(0)[15]) == 0x11);
  std::string m;
  CHECK(error_of([&] { (void)Buffer::open(name); }, &m) == code(Errc::not_found));
  CHECK(error_of([&] { Buffer::remove(name); }, &m) == code(Errc::not_found));
  CHECK(contains(m, "does not exist"));
}

TEST_CASE("remove refuses a file that is not a shmreplay segment") {
  const std::string name = unique_name("notours");
  SegmentGuard guard(name);
  write_file(guard.path(), std::vector<char>(64, 'z'));
  std::string m;
  CHECK(error_of([&] { Buffer::remove(name); }, &m) == code(Errc::not_a_segment));
  CHECK(contains(m, "refusing"));
  CHECK(Buffer::exists(name));
  // A damaged segment (magic intact) can still be removed.
  const std::vector<char> whole = real_segment_bytes();
  const std::string damaged = unique_name("damaged");
  SegmentGuard dguard(damaged);
  write_file(dguard.path(), {whole.begin(), whole.begin() + 100});
  CHECK_NOTHROW(Buffer::remove(damaged));
  CHECK_FALSE(Buffer::exists(damaged));
}

TEST_CASE("a full /dev/shm fails at create with the bytes needed and free, leaves no file, and never SIGBUSes") {
  // Needs a private mount namespace with a 64 MiB tmpfs over the shm directory (root, as in CI).
  const int status = run_in_child([] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", shm_directory().c_str(), "tmpfs", 0, "size=64m") != 0) {
      std::fprintf(stderr, "cannot mount a private tmpfs: %s\n", std::strerror(errno));
      ::_exit(77);
    }
    const auto fail = [](const char* what) {
      std::fprintf(stderr, "full-shm child: %s\n", what);
      return false;
    };
    const Schema atari = Schema::parse("obs:u8[84,84,4] action:i32 reward:f32 done:bool");  // 28233 B/step
    std::string m;
    // 8 envs x 512 steps x 28233 bytes = 110 MiB: more than the 64 MiB there are.
    if (error_of([&] { (void)Buffer::create("big", 8, 512, atari); }, &m) != code(Errc::no_space)) {
      return fail("a 110 MiB segment did not fail with no_space");
    }
    std::fprintf(stderr, "message: %s\n", m.c_str());
    if (!contains(m, "needs 115") || !contains(m, "has 67108864 bytes") || !contains(m, "64.0 MiB")) {
      return fail("the message lacks the bytes needed and free");
    }
    if (Buffer::exists("big")) return fail("a file was left behind");
    // 40 MiB fits; a second 40 MiB does not; the first stays whole and writable to its last byte.
    Buffer first = Buffer::create("first", 4, 380, atari);
    if (first.total_bytes() < (40u << 20) || first.total_bytes() > (42u << 20)) return fail("unexpected size");
    if (error_of([&] { (void)Buffer::create("second", 4, 380, atari); }, &m) != code(Errc::no_space)) {
      return fail("the second 40 MiB segment did not fail with no_space");
    }
    if (Buffer::exists("second")) return fail("the failed second segment left a file");
    for (std::size_t f = 0; f < atari.size(); ++f) {
      std::memset(first.segment().field_data(f), 0xab, 4 * 380 * atari[f].bytes());  // would SIGBUS without fallocate
    }
    DIR* d = ::opendir(shm_directory().c_str());
    int files = 0;
    while (const dirent* e = ::readdir(d)) files += e->d_name[0] != '.';
    ::closedir(d);
    return files == 1 ? true : fail("expected exactly one file in the private /dev/shm");
  });
  if (status == 77) {
    WARN_MESSAGE(false, "skipped: this process cannot mount a private tmpfs (needs root / CAP_SYS_ADMIN)");
    return;
  }
  CHECK(status == 0);
}

TEST_CASE("a failure while reserving the memory leaves no file behind") {
  // RLIMIT_FSIZE makes posix_fallocate fail (EFBIG) after the free-space check passed.
  const std::string name = unique_name("fsize");
  SegmentGuard guard(name);
  const int status = run_in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string m;
    const int c = error_of([&] { (void)Buffer::create(name, 64, 4096, kSchema); }, &m);  // 6.5 MB
    std::fprintf(stderr, "message: %s\n", m.c_str());
    return c != 0 && contains(m, "cannot reserve") && !Buffer::exists(name);
  });
  CHECK(status == 0);
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("populate always, never and automatic give the same segment; always faults its pages in, never does not") {
  const Schema schema = Schema::parse("obs:u8[1024] action:i32 done:bool");
  const uint64_t envs = 2;
  const uint64_t capacity = 8192;  // about 17 MB: a few 2 MiB pages, should the directory use huge pages
  const std::string never_name = unique_name("pop-never");
  SegmentGuard never_guard(never_name);
  const Buffer never = Buffer::create(never_name, envs, capacity, schema, {.populate = Populate::never});
  // Only the header and control pages that create() writes are resident; the rings are not.
  const int64_t never_rss = mapping_rss_bytes(&never.segment().header());
  REQUIRE(never_rss >= 0);
  CHECK(static_cast<uint64_t>(never_rss) < never.total_bytes() / 2);

  std::vector<std::pair<uint64_t, uint64_t>> calls;
  const std::string always_name = unique_name("pop-always");
  SegmentGuard always_guard(always_name);
  const Buffer always = Buffer::create(
      always_name, envs, capacity, schema,
      {.populate = Populate::always, .populate_progress = [&](uint64_t done, uint64_t total) {
         calls.emplace_back(done, total);
       }});
  const int64_t always_rss = mapping_rss_bytes(&always.segment().header());
  CHECK(static_cast<uint64_t>(always_rss) >= always.total_bytes());
  REQUIRE(!calls.empty());
  CHECK(calls.back().first == always.total_bytes());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].second == always.total_bytes());
    if (i > 0) CHECK(calls[i].first > calls[i - 1].first);
  }

  const std::string auto_name = unique_name("pop-auto");
  SegmentGuard auto_guard(auto_name);
  const Buffer automatic = Buffer::create(auto_name, envs, capacity, schema, {.populate = Populate::automatic});
  CHECK(CreateOptions{}.populate == Populate::never);  // the old behaviour stays the default

  // Same layout and, past the header (which holds the creation time and pid), the same bytes.
  for (const Buffer* b : {&always, &automatic}) {
    CHECK(b->total_bytes() == never.total_bytes());
    CHECK(b->segment().field_offsets() == never.segment().field_offsets());
    const auto* x = reinterpret_cast<const std::byte*>(&b->segment().header());
    const auto* y = reinterpret_cast<const std::byte*>(&never.segment().header());
    CHECK(std::memcmp(x + sizeof(SegmentHeader), y + sizeof(SegmentHeader),
                      never.total_bytes() - sizeof(SegmentHeader)) == 0);
    const Buffer reopened = Buffer::open(b->name(), {.expected_schema = schema});
    CHECK(reopened.total_bytes() == never.total_bytes());
  }
  // A populated segment works: a write through it is seen by another mapping.
  std::memset(const_cast<Buffer&>(always).segment().field_data(0), 0x7f, 16);
  const Buffer reader = Buffer::open(always_name, {.read_only = true});
  CHECK(std::to_integer<int>(reader.segment().field_data(0)[15]) == 0x7f);
}

TEST_CASE("the populate progress callback is not called when nothing is populated, and its exception aborts create "
          "leaving nothing behind") {
  const std::string name = unique_name("pop-throw");
  SegmentGuard guard(name);
  bool called = false;
  (void)Buffer::create(name, 1, 64, kSchema,
                       {.populate = Populate::never, .populate_progress = [&](uint64_t, uint64_t) { called = true; }});
  CHECK(!called);
  Buffer::remove(name);

  struct Cancelled {};
  CHECK_THROWS_AS((void)Buffer::create(name, 1, 64, kSchema,
                                       {.populate = Populate::always,
                                        .populate_progress = [](uint64_t, uint64_t) { throw Cancelled{}; }}),
                  Cancelled);
  CHECK(!Buffer::exists(name));
  CHECK(error_of([&] { (void)Buffer::open(name); }) == code(Errc::not_found));
}
