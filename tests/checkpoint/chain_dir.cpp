// Chain directories and whose files they take (include/shmreplay/checkpoint.hpp, "Chains"; lib/checkpoint/
// chain_dir.cpp): another user's directory, lock and links refused unless allow_other_owner, no symbolic link
// followed, only the directory's own chains restored (chain.ids), link numbers that read back. Part of
// test_checkpoint (tests/CMakeLists.txt); its helpers are in checkpoint_helpers.hpp. The cases that give a file to
// another user (uid 65534) need root and say so when skipped.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "shmreplay/checkpoint.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"
#include "checkpoint/checkpoint_helpers.hpp"

namespace {

using test::DirGuard;

constexpr uint32_t kNobody = 65534;

std::string scratch_dir(const std::string& tag) { return fmt::format("/tmp/{}.chain", unique_name(tag)); }

std::string link_named(const std::string& dir, uint64_t seq) { return fmt::format("{}/link-{:010}.shmrckpt", dir, seq); }

bool any_note_contains(const std::vector<std::string>& notes, const std::string& part) {
  for (const std::string& n : notes) {
    if (test::contains(n, part)) return true;
  }
  return false;
}

// A buffer of 2 envs and its read-only view, with 10 steps per env pushed.
struct Source {
  explicit Source(const std::string& tag)
      : guard(unique_name(tag)),
        buffer(Buffer::create(guard.name(), 2, 64, kPayloadSchema)),
        reader(Buffer::open(guard.name(), {.read_only = true})),
        writer(buffer, {0, 1}) {
    push_steps(writer, {0, 1}, 10);
  }
  SegmentGuard guard;
  Buffer buffer;
  Buffer reader;
  Writer writer;
};

// Gives `path` (not following a link) to uid 65534; false where this process may not (not root).
bool give_away(const std::string& path) { return ::lchown(path.c_str(), kNobody, static_cast<gid_t>(-1)) == 0; }

}  // namespace

TEST_CASE("save_link refuses a chain directory of another user, naming both users, unless allow_other_owner") {
  Source source("chaindir-owner");
  DirGuard dir(scratch_dir("chaindir-owner"));
  REQUIRE(::mkdir(dir.path().c_str(), 0777) == 0);
  if (!give_away(dir.path())) {
    MESSAGE("skipped: chown needs root");
    return;
  }
  std::string message;
  CHECK(test::error_of([&] { save_link(source.reader, dir.path()); }, &message) ==
        test::code(Errc::permission_denied));
  CHECK(test::contains(message, dir.path()));
  CHECK(test::contains(message, "uid 65534"));
  CHECK(test::contains(message, fmt::format("uid {}", ::geteuid())));
  CHECK(test::contains(message, "allow_other_owner"));
  CHECK(test::entries_containing(dir.path(), "").empty());  // not even a lock
  CHECK(test::error_of([&] { list_links(dir.path()); }) == test::code(Errc::permission_denied));
  CHECK(test::error_of([&] { verify_chain(dir.path()); }) == test::code(Errc::permission_denied));

  ChainOptions options;
  options.allow_other_owner = true;
  CHECK(save_link(source.reader, dir.path(), options).info.link_seq == 1);
  CHECK(verify_chain(dir.path(), nullptr, {}, /*allow_other_owner=*/true).link_seq == 1);
  SegmentGuard restored(unique_name("chaindir-owner-restored"));
  CHECK(test::error_of([&] { load_chain(dir.path(), restored.name()); }) == test::code(Errc::permission_denied));
  CHECK(load_chain(dir.path(), restored.name(), {.allow_other_owner = true}).info.link_seq == 1);
}

TEST_CASE("save_link never opens a chain.lock that is a symbolic link: it refuses, and creates nothing where the "
          "link points") {
  Source source("chaindir-lock");
  DirGuard dir(scratch_dir("chaindir-lock"));
  FileGuard target{temp_path("chaindir-lock-target")};
  REQUIRE(::mkdir(dir.path().c_str(), 0700) == 0);
  REQUIRE(::symlink(target.path().c_str(), (dir.path() + "/chain.lock").c_str()) == 0);
  std::string message;
  CHECK(test::error_of([&] { save_link(source.reader, dir.path()); }, &message) ==
        test::code(Errc::permission_denied));
  CHECK(test::contains(message, dir.path() + "/chain.lock"));
  CHECK(test::contains(message, "symbolic link"));
  CHECK(::access(target.path().c_str(), F_OK) != 0);
  CHECK(list_links(dir.path()).empty());
}

TEST_CASE("load_chain and verify_chain skip a link of another user, naming it, and restore the directory's own "
          "newest link; save_link leaves that file alone") {
  Source source("chaindir-planted");
  DirGuard dir(scratch_dir("chaindir-planted"));
  for (int k = 0; k < 2; ++k) {
    push_steps(source.writer, {0, 1}, 5);
    save_link(source.reader, dir.path());
  }
  // A checkpoint of another buffer, planted as the newest link by another user.
  const std::string planted = link_named(dir.path(), 99);
  {
    Source other("chaindir-planted-other");  // another buffer, saved whole
    push_steps(other.writer, {0, 1}, 20);
    save_checkpoint(other.reader, planted);
  }
  if (!give_away(planted)) {
    MESSAGE("skipped: chown needs root");
    return;
  }
  std::vector<std::string> notes;
  CHECK(verify_chain(dir.path(), &notes).link_seq == 2);
  REQUIRE(notes.size() == 1);
  CHECK(test::contains(notes[0], "skipped link 99"));
  CHECK(test::contains(notes[0], planted));
  CHECK(test::contains(notes[0], "uid 65534"));
  SegmentGuard restored(unique_name("chaindir-planted-restored"));
  const LoadResult r = load_chain(dir.path(), restored.name());
  CHECK(r.info.link_seq == 2);
  CHECK(r.notes == notes);
  const Buffer loaded = Buffer::open(restored.name(), {.read_only = true});  // const: the read-only accessors
  CHECK(segment_of(loaded).env_control(0).head.load() == 20);

  // A save numbers past the planted file, names it, and neither builds on it nor removes it.
  push_steps(source.writer, {0, 1}, 5);
  ChainOptions keep_one;
  keep_one.keep = 1;
  const LinkResult next = save_link(source.reader, dir.path(), keep_one);
  CHECK(next.info.link_seq == 100);
  CHECK_FALSE(next.whole);
  REQUIRE(next.notes.size() == 1);
  CHECK(test::contains(next.notes[0], planted));
  CHECK(::access(planted.c_str(), F_OK) == 0);
  CHECK(verify_chain(dir.path()).link_seq == 100);
}

TEST_CASE("a chain directory restores only its own chains: a link of another directory's chain copied in is "
          "skipped and named") {
  Source source("chaindir-copied");
  DirGuard dir(scratch_dir("chaindir-copied"));
  DirGuard elsewhere(scratch_dir("chaindir-copied-elsewhere"));
  save_link(source.reader, dir.path());
  push_steps(source.writer, {0, 1}, 5);
  save_link(source.reader, dir.path());
  // The same buffer's newer state, saved as a chain of another directory, then copied in as the newest link.
  push_steps(source.writer, {0, 1}, 30);
  const LinkResult foreign = save_link(source.reader, elsewhere.path());
  const std::string copied = link_named(dir.path(), 7);
  spit(copied, slurp(foreign.info.path));

  std::vector<std::string> notes;
  CHECK(verify_chain(dir.path(), &notes).link_seq == 2);
  REQUIRE(notes.size() == 1);
  CHECK(test::contains(notes[0], "skipped link 7"));
  CHECK(test::contains(notes[0], copied));
  CHECK(test::contains(notes[0], fmt::format("{:016x}", foreign.info.chain_id)));
  CHECK(test::contains(notes[0], "not one of this directory's"));
  REQUIRE(list_links(dir.path()).size() == 3);
  CHECK_FALSE(list_links(dir.path())[2].error.empty());
  SegmentGuard restored(unique_name("chaindir-copied-restored"));
  CHECK(load_chain(dir.path(), restored.name()).info.link_seq == 2);
}

TEST_CASE("a chain directory without its list of chains (saved before it existed) restores with a note, and its "
          "next save_link writes the list and builds on its links") {
  Source source("chaindir-legacy");
  DirGuard dir(scratch_dir("chaindir-legacy"));
  save_link(source.reader, dir.path());
  push_steps(source.writer, {0, 1}, 5);
  save_link(source.reader, dir.path());
  REQUIRE(::unlink((dir.path() + "/chain.ids").c_str()) == 0);

  std::vector<std::string> notes;
  CHECK(verify_chain(dir.path(), &notes).link_seq == 2);
  REQUIRE(notes.size() == 1);
  CHECK(test::contains(notes[0], "no list of its chains"));

  push_steps(source.writer, {0, 1}, 5);
  const LinkResult next = save_link(source.reader, dir.path());
  CHECK(next.info.link_seq == 3);
  CHECK_FALSE(next.whole);  // it adopted the chain of links 1 and 2
  CHECK(next.notes.empty());
  CHECK(::access((dir.path() + "/chain.ids").c_str(), F_OK) == 0);
  notes.clear();
  CHECK(verify_chain(dir.path(), &notes).link_seq == 3);
  CHECK(notes.empty());
}

TEST_CASE("a link file numbered kMaxLinkSeq stops save_link, which names it, instead of writing a link no load "
          "reads; a link-like name with a number no link has is named in the notes") {
  Source source("chaindir-seq");
  DirGuard dir(scratch_dir("chaindir-seq"));
  save_link(source.reader, dir.path());
  const std::string twenty_digits = dir.path() + "/link-10000000000000000000.shmrckpt";
  spit(twenty_digits, "");
  push_steps(source.writer, {0, 1}, 5);
  const LinkResult second = save_link(source.reader, dir.path());
  CHECK(second.info.link_seq == 2);
  REQUIRE(second.notes.size() == 1);
  CHECK(test::contains(second.notes[0], twenty_digits));
  CHECK(test::contains(second.notes[0], "no link has that number"));
  std::vector<std::string> notes;
  CHECK(verify_chain(dir.path(), &notes).link_seq == 2);
  CHECK(any_note_contains(notes, twenty_digits));

  const std::string last = link_named(dir.path(), kMaxLinkSeq);
  REQUIRE(last == dir.path() + "/link-9999999999999999999.shmrckpt");
  spit(last, "");
  std::string message;
  CHECK(test::error_of([&] { save_link(source.reader, dir.path()); }, &message) ==
        test::code(Errc::invalid_argument));
  CHECK(test::contains(message, last));
  CHECK(test::contains(message, "10000000000000000000"));
  CHECK(test::entries_containing(dir.path(), "link-").size() == 4);  // links 1 and 2, and the two planted names
  CHECK(verify_chain(dir.path()).link_seq == 2);
}
