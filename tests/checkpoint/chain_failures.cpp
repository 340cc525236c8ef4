// Checkpoint chains that fail (include/shmreplay/checkpoint.hpp, "Chains"): saves killed at any moment or failing
// for a full disk, one saver per directory, damaged links skipped. Part of test_checkpoint (tests/CMakeLists.txt);
// its helpers are in checkpoint_helpers.hpp and chain_helpers.hpp.
#include "checkpoint/chain_helpers.hpp"

TEST_CASE("save_link killed at random moments while writer processes push: the directory always restores its "
          "newest link, whose steps are ones their writers published, and the next save removes the temporary") {
  SegmentGuard source(unique_name("chain-kill"));
  DirGuard dir(temp_dir("chain-kill"));
  constexpr uint64_t kCap = 256;
  Buffer::create(source.name(), 4, kCap, kPayloadSchema);
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  std::vector<pid_t> writers = {payload_writer(source.name(), {0, 1}), payload_writer(source.name(), {2, 3})};
  for (uint64_t e = 0; e < 4; ++e) {
    while (segment_of(reader).env_control(e).head.load() < 2 * kCap) ::usleep(1000);
  }
  ChainOptions options;
  options.keep = 2;  // so that kills land in pruning too
  REQUIRE(save_link(reader, dir.path(), options).info.link_seq == 1);

  const uint64_t seed = std::random_device{}();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  uint64_t newest = 1;
  uint64_t temporaries_seen = 0;
  constexpr int kKills = 40;
  for (int kill = 0; kill < kKills; ++kill) {
    CAPTURE(kill);
    const pid_t saver = test::spawn([&] {
      try {
        for (;;) save_link(reader, dir.path(), options);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "saver process: %s\n", e.what());
        ::_exit(3);
      }
    });
    ::usleep(static_cast<useconds_t>(rng() % 25000));
    REQUIRE(test::kill_and_reap(saver));  // false: a save failed (the child said why on stderr)

    const std::vector<std::string> temporaries = test::entries_containing(dir.path(), ".tmp-");
    CHECK(temporaries.size() <= 1);  // the killed save's own; the save before removed its predecessor's
    temporaries_seen += temporaries.size();
    std::vector<std::string> notes;
    const CheckpointInfo info = verify_chain(dir.path(), &notes);
    CHECK(notes.empty());  // every link that has its name is complete
    CHECK(info.link_seq == link_seqs(dir.path()).back());
    CHECK(info.link_seq >= newest);
    newest = info.link_seq;

    SegmentGuard copy(unique_name("chain-kill-copy"));
    const LoadResult r = load_chain(dir.path(), copy.name());
    CHECK(r.info.link_seq == info.link_seq);
    const Buffer loaded = Buffer::open(copy.name(), {.read_only = true});
    CHECK(payload_violation(loaded) == "");
    for (uint64_t e = 0; e < 4; ++e) {
      CHECK(segment_of(loaded).env_control(e).head.load() == info.envs[e].head);
      CHECK(info.envs[e].head <= segment_of(reader).env_control(e).head.load());
      CHECK(info.envs[e].head - info.envs[e].first_step >= kCap - 1);  // a full window (127: a write in progress)
    }
  }
  for (const pid_t pid : writers) CHECK(test::kill_and_reap(pid));
  const LinkResult last = save_link(reader, dir.path(), options);
  CHECK(last.info.link_seq > newest);
  CHECK(test::entries_containing(dir.path(), ".tmp-").empty());
  CHECK(link_seqs(dir.path()).front() > 1);  // pruned between the kills (the writers lapped link 1's windows)
  MESSAGE(fmt::format("{} kills: the newest complete link went from 1 to {}; {} killed saves left a temporary file "
                      "(each removed by the next save)",
                      kKills, newest, temporaries_seen));
}

TEST_CASE("save_link that runs out of file size or disk space fails with Errc::no_space, naming the limit, and "
          "leaves the directory's links as they were") {
  SegmentGuard source(unique_name("chain-full"));
  Buffer b = Buffer::create(source.name(), 2, 1024, kPayloadSchema);
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  Writer w(b, {0, 1});
  push_steps(w, {0, 1}, 20);

  // Saves `reader` into `dir` in a child process after `limit` (setrlimit and the like); returns what it threw:
  // its Errc and message ("0\t" when it did not throw).
  const auto save_in_child = [&](const std::string& dir, const std::function<void()>& limit) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const int status = test::run_in_child([&] {
      limit();
      std::string message;
      const int errc = test::error_of([&] { save_link(reader, dir); }, &message);
      const std::string out = fmt::format("{}\t{}", errc, message);
      return ::write(fds[1], out.data(), out.size()) == static_cast<ssize_t>(out.size());
    });
    ::close(fds[1]);
    std::string out(4096, '\0');
    const ssize_t got = ::read(fds[0], out.data(), out.size());
    ::close(fds[0]);
    CHECK(status == 0);
    out.resize(static_cast<std::size_t>(std::max<ssize_t>(got, 0)));
    return out;
  };
  const auto check_untouched = [&](const std::string& dir, const std::map<std::string, std::string>& before) {
    CHECK(directory_bytes(dir) == before);
    CHECK(test::entries_containing(dir, ".tmp-").empty());
    SegmentGuard copy(unique_name("chain-full-copy"));
    const LoadResult r = load_chain(dir, copy.name());
    CHECK(r.info.link_seq == 1);
    const Buffer loaded = Buffer::open(copy.name(), {.read_only = true});
    CHECK(segment_of(loaded).env_control(0).head.load() == 20);
    CHECK(payload_violation(loaded) == "");
  };

  SUBCASE("a file size limit (RLIMIT_FSIZE, ulimit -f): EFBIG") {
    DirGuard dir(temp_dir("chain-fsize"));
    REQUIRE(save_link(reader, dir.path()).info.link_seq == 1);
    push_steps(w, {0, 1}, 1000);
    const std::map<std::string, std::string> before = directory_bytes(dir.path());
    const std::string thrown = save_in_child(dir.path(), [] {
      ::signal(SIGXFSZ, SIG_IGN);
      const rlimit small{8192, 8192};
      ::setrlimit(RLIMIT_FSIZE, &small);
    });
    CAPTURE(thrown);
    CHECK(thrown.starts_with(fmt::format("{}\t", test::code(Errc::no_space))));
    CHECK(test::contains(thrown, "cannot write checkpoint file"));
    CHECK(test::contains(thrown, "link-0000000002.shmrckpt.tmp-"));
    CHECK(test::contains(thrown, "file size limit"));
    CHECK(test::contains(thrown, "8192 bytes"));
    check_untouched(dir.path(), before);
    CHECK(save_link(reader, dir.path()).info.link_seq == 2);  // without the limit, the same save succeeds
  }
  SUBCASE("a full file system (a tmpfs of 64 KiB): ENOSPC") {
    SmallTmpfs fs(64 * 1024);
    if (!fs.mounted()) {
      MESSAGE("skipped: this process may not mount a tmpfs (it needs root with CAP_SYS_ADMIN)");
      return;
    }
    const std::string dir = fs.path() + "/chain";
    REQUIRE(save_link(reader, dir).info.link_seq == 1);
    push_steps(w, {0, 1}, 1000);  // a link of 226 KB: more than the file system holds
    const std::map<std::string, std::string> before = directory_bytes(dir);
    const std::string thrown = save_in_child(dir, [] {});
    CAPTURE(thrown);
    CHECK(thrown.starts_with(fmt::format("{}\t", test::code(Errc::no_space))));
    CHECK(test::contains(thrown, "cannot write checkpoint file"));
    CHECK(test::contains(thrown, "No space left on device"));
    CHECK(test::contains(thrown, "bytes free"));
    check_untouched(dir, before);
  }
}

TEST_CASE("a second save_link into a directory while one runs is refused with Errc::lease_held") {
  SegmentGuard source(unique_name("chain-two"));
  DirGuard dir(temp_dir("chain-two"));
  Buffer b = Buffer::create(source.name(), 2, 64, kPayloadSchema);
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  Writer w(b, {0, 1});
  push_steps(w, {0, 1}, 30);

  // The second save starts from the first one's progress report: the first is then between its lock and its rename.
  int second = -1;
  std::string message;
  ChainOptions options;
  options.save.progress = [&](const CheckpointProgress&) {
    if (second == -1) second = test::error_of([&] { save_link(reader, dir.path()); }, &message);
  };
  const LinkResult first = save_link(reader, dir.path(), options);
  CHECK(first.info.link_seq == 1);
  CHECK(second == test::code(Errc::lease_held));
  CHECK(test::contains(message, "another save into that directory is running"));
  CHECK(test::contains(message, dir.path() + "/chain.lock"));
  CHECK(link_seqs(dir.path()) == std::vector<uint64_t>{1});
  CHECK(test::entries_containing(dir.path(), ".tmp-").empty());
  CHECK(save_link(reader, dir.path()).info.link_seq == 2);  // once the first is done, the next one runs
}

TEST_CASE("verify_chain and load_chain skip a damaged newest link with a note and restore the link before it; the "
          "next save_link builds on that link, not on the damaged one") {
  SegmentGuard source(unique_name("chain-bad"));
  DirGuard dir(temp_dir("chain-bad"));
  Buffer b = Buffer::create(source.name(), 2, 64, kPayloadSchema);
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  Writer w(b, {0, 1});
  ChainOptions options;
  options.keep = 2;
  for (int k = 0; k < 3; ++k) {
    push_steps(w, {0, 1}, 10);
    save_link(reader, dir.path(), options);
  }
  const std::string newest = link_file(dir.path(), 3);
  const CheckpointInfo good = verify_checkpoint(link_file(dir.path(), 2));
  const CheckpointInfo bad = verify_checkpoint(newest);
  std::string bytes = slurp(newest);
  bool header = false;
  SUBCASE("a byte of its records") {
    const uint64_t at = bad.envs[1].records_offset + 5;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
  }
  SUBCASE("a byte of its header") {
    bytes[40] = static_cast<char>(bytes[40] ^ 0x10);
    header = true;
  }
  spit(newest, bytes);

  std::vector<std::string> notes;
  const CheckpointInfo verified = verify_chain(dir.path(), &notes);
  CHECK(verified.link_seq == 2);
  REQUIRE(notes.size() == 1);
  CHECK(test::contains(notes[0], "skipped link 3"));
  CHECK(test::contains(notes[0], "corrupt"));
  SegmentGuard restored(unique_name("chain-bad-restored"));
  const LoadResult r = load_chain(dir.path(), restored.name());
  CHECK(r.info.link_seq == 2);
  CHECK(r.notes == notes);
  {
    const Buffer a = Buffer::open(restored.name(), {.read_only = true});
    for (uint64_t e = 0; e < 2; ++e) CHECK(segment_of(a).env_control(e).head.load() == good.envs[e].head);
    CHECK(payload_violation(a) == "");
  }

  // The next link holds the steps since link 2 (the newest that verifies), so it restores, and the links it needs
  // stay. Link 3 is no restore point: with its records damaged no kept link needs it, so this save removes it; with
  // its header damaged it is no link a save can read, and saves never remove those.
  push_steps(w, {0, 1}, 10);
  const LinkResult next = save_link(reader, dir.path(), options);
  CHECK(next.info.link_seq == 4);
  CHECK_FALSE(next.whole);
  for (uint64_t e = 0; e < 2; ++e) CHECK(next.info.envs[e].data_from == good.envs[e].head);
  CHECK(verify_chain(dir.path()).link_seq == 4);
  CHECK(next.removed == (header ? std::vector<std::string>{} : link_files({3}, dir.path())));
  CHECK(link_seqs(dir.path()) == (header ? std::vector<uint64_t>{1, 2, 3, 4} : std::vector<uint64_t>{1, 2, 4}));
  Buffer::remove(restored.name());
  // A link that is no link a save can read is named in every load's notes, older than the restored one or not.
  const std::vector<std::string> after = load_chain(dir.path(), restored.name()).notes;
  CHECK(after.size() == (header ? 1u : 0u));
  if (header && after.size() == 1) CHECK(test::contains(after[0], "skipped link 3 ('" + newest + "')"));
  CHECK(state_difference(Buffer::open(restored.name(), {.read_only = true}), reader) == "");
}
