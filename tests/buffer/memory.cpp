// tests/buffer/memory.cpp: the segment's memory: a full /dev/shm, a failure while reserving, and populate always,
// never and automatic with its progress callback.
// Part of test_buffer (tests/CMakeLists.txt); its helpers are in buffer_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "buffer_helpers.hpp"

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
      std::memset(segment_of(first).field_data(f), 0xab, 4 * 380 * atari[f].bytes());  // would SIGBUS without fallocate
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
  const int64_t never_rss = mapping_rss_bytes(&segment_of(never).header());
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
  const int64_t always_rss = mapping_rss_bytes(&segment_of(always).header());
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
    CHECK(segment_of(*b).field_offsets() == segment_of(never).field_offsets());
    const auto* x = reinterpret_cast<const std::byte*>(&segment_of(*b).header());
    const auto* y = reinterpret_cast<const std::byte*>(&segment_of(never).header());
    CHECK(std::memcmp(x + sizeof(SegmentHeader), y + sizeof(SegmentHeader),
                      never.total_bytes() - sizeof(SegmentHeader)) == 0);
    const Buffer reopened = Buffer::open(b->name(), {.expected_schema = schema});
    CHECK(reopened.total_bytes() == never.total_bytes());
  }
  // A populated segment works: a write through it is seen by another mapping.
  std::memset(segment_of(const_cast<Buffer&>(always)).field_data(0), 0x7f, 16);
  const Buffer reader = Buffer::open(always_name, {.read_only = true});
  CHECK(std::to_integer<int>(segment_of(reader).field_data(0)[15]) == 0x7f);
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
