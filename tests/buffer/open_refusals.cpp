// tests/buffer/open_refusals.cpp: what open refuses, and how it says so: missing names, random bytes, FIFOs,
// directories and symlinks, another user's segment, truncated copies, other versions, segments not ready, corrupt
// headers and field tables, and an expected schema that differs.
// Part of test_buffer (tests/CMakeLists.txt); its helpers are in buffer_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "buffer_helpers.hpp"

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
  poke<uint32_t>(minor, offsetof(SegmentHeader, layout_minor), kLayoutMinor + 1);
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
  // Layout 1.7 lacks the learners' statistics (1.8).
  poke<uint32_t>(minor, offsetof(SegmentHeader, layout_minor), 7);
  CHECK(open_bytes(minor, &m) == code(Errc::version_mismatch));
  CHECK(contains(m, fmt::format("segment layout 1.7, library 1.{}", kLayoutMinor)));
  CHECK(contains(m, "sample ages"));
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
  // Layout 1.8: the learners' statistics, one LearnerStats per slot, in range, aligned, apart from the rest.
  const std::size_t stats_off = offsetof(SegmentHeader, sections) + kSectionLearnerStats * sizeof(SectionDesc);
  corrupt([&](auto& b) { poke<uint64_t>(b, stats_off + 8, 64); },
          "the learner statistics section is 64 bytes, expected 128: 1 learner slots x 128 bytes");
  corrupt([&](auto& b) { poke<uint64_t>(b, stats_off, h.sections[kSectionGlobal].offset); }, "overlaps");
  corrupt([&](auto& b) { poke<uint64_t>(b, stats_off, h.sections[kSectionLearnerStats].offset + 8); }, "not aligned");
  corrupt([&](auto& b) { poke<uint64_t>(b, stats_off, uint64_t{1} << 40); }, "ends beyond the file");

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
        volatile std::byte sink = segment_of(b).field_data(i)[n - 1];
        (void)sink;
      }
      (void)segment_of(b).env_control(b.num_envs() - 1).head.load();
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
