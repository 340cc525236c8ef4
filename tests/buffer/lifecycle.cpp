// tests/buffer/lifecycle.cpp: create, open and remove across processes: an existing name, unnamed segments,
// concurrent creates, half-made segments, modes, bad names, counts and sizes.
// Part of test_buffer (tests/CMakeLists.txt); its helpers are in buffer_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "buffer_helpers.hpp"

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
  CHECK(segment_of(b).field_offsets() == segment_of(created).field_offsets());
  const SegmentHeader& h = segment_of(b).header();
  CHECK(h.state.load() == kStateReady);
  CHECK(h.creator_pid == static_cast<uint64_t>(::getpid()));
  CHECK(h.creator_start_ticks > 0);
  const auto created_ns = static_cast<int64_t>(h.creation_time_ns);
  const auto before_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(before.time_since_epoch()).count();
  CHECK(created_ns >= before_ns);
  CHECK(created_ns < before_ns + 60'000'000'000LL);
  for (uint64_t e = 0; e < 4; ++e) {
    const EnvControl& c = segment_of(b).env_control(e);
    CHECK(c.head.load() == 0);
    CHECK(c.claimed.load() == 0);
    CHECK(c.online_start.load() == 0);
    CHECK(c.lease.load() == 0);
  }
  // Both mappings see the same bytes.
  Buffer& writable = const_cast<Buffer&>(created);
  std::memset(segment_of(writable).field_data(2), 0x5a, 4);
  CHECK(std::to_integer<int>(segment_of(b).field_data(2)[3]) == 0x5a);
  // A leading '/' (shm_open style) names the same segment.
  CHECK_NOTHROW((void)Buffer::open("/" + name));
}

TEST_CASE("a segment created in one process is opened and read in another, and outlives its creator") {
  const std::string name = unique_name("fork");
  SegmentGuard guard(name);
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema);
    segment_of(b).env_control(1).head.store(42);
    auto* obs = reinterpret_cast<float*>(segment_of(b).field_data(0));
    obs[(1 * 8 + 3) * 4 + 2] = 3.5f;  // env 1, slot 3, element 2
  }
  const int status = run_in_child([&] {
    Buffer b = Buffer::open(name, {.expected_schema = kSchema});
    const auto* obs = reinterpret_cast<const float*>(segment_of(b).field_data(0));
    if (segment_of(b).env_control(1).head.load() != 42 || obs[(1 * 8 + 3) * 4 + 2] != 3.5f) return false;
    segment_of(b).env_control(0).head.store(7);  // a write the parent must see
    return true;
  });
  CHECK(status == 0);
  CHECK(segment_of(Buffer::open(name)).env_control(0).head.load() == 7);

  // The other way round: a child creates, fills and exits; the parent opens what it left.
  const std::string name2 = unique_name("fork2");
  SegmentGuard guard2(name2);
  CHECK(run_in_child([&] {
          Buffer b = Buffer::create(name2, 3, 5, kSchema);
          segment_of(b).env_control(2).head.store(5);
          return true;
        }) == 0);
  const Buffer b2 = Buffer::open(name2, {.expected_schema = kSchema});
  CHECK(segment_of(b2).env_control(2).head.load() == 5);
  CHECK(segment_of(b2).header().creator_pid != static_cast<uint64_t>(::getpid()));
}

TEST_CASE("creating a name that exists fails and leaves the existing segment untouched unless replacing") {
  const std::string name = unique_name("exists");
  SegmentGuard guard(name);
  Buffer first = Buffer::create(name, 2, 8, kSchema);
  segment_of(first).env_control(0).head.store(11);
  std::string message;
  CHECK(error_of([&] { (void)Buffer::create(name, 5, 5, Schema::parse("x:u8")); }, &message) ==
        code(Errc::already_exists));
  CHECK(contains(message, name));
  CHECK(contains(message, "already exists"));
  {
    const Buffer still = Buffer::open(name);
    CHECK(still.schema() == kSchema);
    CHECK(segment_of(still).env_control(0).head.load() == 11);
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
  CHECK(segment_of(first).env_control(0).head.load() == 11);
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
    segment_of(hidden).env_control(1).head.store(5);
    CHECK_FALSE(Buffer::exists(name));
    CHECK(test::entries_containing(shm_directory(), name).empty());  // not even a hidden temporary name
    CHECK(error_of([&] { (void)Buffer::open(name); }) == code(Errc::not_found));
  }
  CHECK(test::entries_containing(shm_directory(), name).empty());  // destroyed unpublished: gone

  // Published: the name appears with everything written before, and a second publish is refused.
  Buffer made = Buffer::create_unnamed(name, 2, 8, kSchema);
  segment_of(made).env_control(1).head.store(7);
  made.publish();
  CHECK(made.published());
  CHECK(segment_of(Buffer::open(name)).env_control(1).head.load() == 7);
  std::string m;
  CHECK(error_of([&] { made.publish(); }, &m) == code(Errc::invalid_argument));
  CHECK(contains(m, "already has its name"));

  // A name that appears between create_unnamed and publish is not replaced (unless asked): linkat's EEXIST.
  const std::string raced = unique_name("unnamed-race");
  SegmentGuard raced_guard(raced);
  Buffer late = Buffer::create_unnamed(raced, 1, 4, kSchema);
  {
    Buffer first = Buffer::create(raced, 3, 3, Schema::parse("x:u8"));
    segment_of(first).env_control(2).head.store(9);
  }
  CHECK(error_of([&] { late.publish(); }, &m) == code(Errc::already_exists));
  CHECK(contains(m, raced));
  CHECK_FALSE(late.published());
  CHECK(segment_of(Buffer::open(raced)).env_control(2).head.load() == 9);
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

TEST_CASE("remove deletes the name; attached processes keep working and new opens fail") {
  const std::string name = unique_name("remove");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 2, 4, kSchema);
  const pid_t child = ::fork();
  if (child == 0) {
    // Attached before the removal; keeps writing after it.
    Buffer mine = Buffer::open(name);
    ::raise(SIGSTOP);
    segment_of(mine).env_control(1).head.store(99);
    std::memset(segment_of(mine).field_data(0), 0x11, 16);
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
  CHECK(segment_of(b).env_control(1).head.load() == 99);
  CHECK(std::to_integer<int>(segment_of(b).field_data(0)[15]) == 0x11);
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
