// Checkpoint chains (include/shmreplay/checkpoint.hpp, "Chains"): links that hold only the steps published since
// the previous one, whole windows after a rewrite or a load, pruning and compaction, saves killed at any moment or
// failing for a full disk, one saver per directory, damaged links skipped. Part of test_checkpoint
// (tests/CMakeLists.txt); its helpers are in checkpoint_helpers.hpp.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "detail/protocol/priorities.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"
#include "checkpoint/checkpoint_helpers.hpp"

namespace {

using test::DirGuard;

std::string temp_dir(const std::string& tag) { return fmt::format("/tmp/{}.chain", unique_name(tag)); }

std::string link_file(const std::string& dir, uint64_t seq) { return fmt::format("{}/link-{:010}.shmrckpt", dir, seq); }

std::vector<std::string> link_files(const std::vector<uint64_t>& seqs, const std::string& dir) {
  std::vector<std::string> out;
  for (const uint64_t s : seqs) out.push_back(link_file(dir, s));
  return out;
}

std::vector<uint64_t> link_seqs(const std::string& dir) {
  std::vector<uint64_t> out;
  for (const ChainLink& l : list_links(dir)) out.push_back(l.seq);
  return out;
}

// The first difference between what `a` and `b` store (every env's head, claim and online start, each stored
// step's bytes, each stored step's priority weight), or "" when they store the same. Both must be quiet.
std::string state_difference(const Buffer& a, const Buffer& b) {
  if (a.num_envs() != b.num_envs() || a.capacity() != b.capacity() || !(a.schema() == b.schema())) {
    return "another geometry or schema";
  }
  if (a.has_priorities() != b.has_priorities()) return "one has priorities, the other not";
  for (uint64_t e = 0; e < a.num_envs(); ++e) {
    const test::EnvCounters ca = counters(a, e);
    const test::EnvCounters cb = counters(b, e);
    if (!(ca == cb)) {
      return fmt::format("env {}: head, claimed, online_start {}, {}, {} against {}, {}, {}", e, ca.head, ca.claimed,
                         ca.online_start, cb.head, cb.claimed, cb.online_start);
    }
    const uint64_t lo = ca.claimed > a.capacity() ? ca.claimed - a.capacity() : 0;
    for (uint64_t s = lo; s < ca.head; ++s) {
      if (stored_step(a, e, s) != stored_step(b, e, s)) return fmt::format("env {} step {}: other bytes", e, s);
      if (!a.has_priorities()) continue;
      const double wa = detail::step_weight(detail::priority_tree_of(segment_of(a), e), segment_of(a).env_control(e), s);
      const double wb = detail::step_weight(detail::priority_tree_of(segment_of(b), e), segment_of(b).env_control(e), s);
      if (wa != wb) return fmt::format("env {} step {}: priority weight {} against {}", e, s, wa, wb);
    }
  }
  return "";
}

// The first env of `b` whose stored steps are not what its payload writer published, or "".
std::string payload_violation(const Buffer& b) {
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    const std::string bad = check_env_payloads(b, e);
    if (!bad.empty()) return bad;
  }
  return "";
}

// The seq of the newest link that restores from the links of `dir` up to `seq` alone (hard links to them in a
// directory of their own), as verify_chain finds it.
uint64_t restores_alone(const std::string& dir, uint64_t seq) {
  DirGuard alone(temp_dir("chain-alone"));
  REQUIRE(::mkdir(alone.path().c_str(), 0700) == 0);
  for (const ChainLink& l : list_links(dir)) {
    if (l.seq > seq) continue;
    REQUIRE(::link(l.path.c_str(), link_file(alone.path(), l.seq).c_str()) == 0);
  }
  return verify_chain(alone.path()).link_seq;
}

// The bytes of every file in `dir` but its lock, by name: what a failed save must leave as it was.
std::map<std::string, std::string> directory_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const std::string& name : test::entries_containing(dir, "")) {
    if (name != "chain.lock") out[name] = slurp(dir + "/" + name);
  }
  return out;
}

// A payload step of `version` (the learner's rewrite of a step bumps it) as the fields try_update takes.
struct PayloadFields {
  explicit PayloadFields(const test::Payload& p)
      : hdr(p.hdr, p.hdr + 4), body(p.body, p.body + test::kBody), tail(p.tail, p.tail + test::kTail) {}
  std::vector<uint64_t> hdr;
  std::vector<float> body;
  std::vector<uint8_t> tail;
};

std::string versioned_bytes(uint64_t env, uint64_t step, uint64_t version) {
  const test::Payload p = test::make_payload(env, step, version);
  std::string out(reinterpret_cast<const char*>(p.hdr), sizeof p.hdr);
  out.append(reinterpret_cast<const char*>(p.body), sizeof p.body);
  out.append(reinterpret_cast<const char*>(p.tail), sizeof p.tail);
  return out;
}

// A writer process pushing payload steps into `envs` of `name` until killed, a pause every 8 pushes (so that it
// leaves a core to the saves under test).
pid_t payload_writer(const std::string& name, std::vector<int32_t> envs) {
  return test::spawn_payload_writer(name, std::move(envs), 100);
}

// Mounts a tmpfs of `bytes` at a new directory, unmounted and removed when it goes out of scope; mounted() is
// false where this process may not mount (not root, or no CAP_SYS_ADMIN, as in most containers).
class SmallTmpfs {
 public:
  explicit SmallTmpfs(uint64_t bytes) : path_(temp_dir("chain-tmpfs")) {
    if (::geteuid() != 0 || ::mkdir(path_.c_str(), 0700) != 0) return;
    mounted_ = ::mount("tmpfs", path_.c_str(), "tmpfs", 0, fmt::format("size={}", bytes).c_str()) == 0;
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  ~SmallTmpfs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    ::rmdir(path_.c_str());
  }
  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool mounted_ = false;
};

}  // namespace

TEST_CASE("a chain's first link is whole, each later link holds only the steps published since the previous one, "
          "and the newest restores exactly what a whole save of the same instant holds") {
  SegmentGuard source(unique_name("chain-src"));
  SegmentGuard from_chain(unique_name("chain-restored"));
  SegmentGuard from_file(unique_name("chain-whole"));
  DirGuard dir(temp_dir("chain"));
  FileGuard whole_file(temp_path("chain-whole"));
  Buffer b = Buffer::create(source.name(), 4, 64, kPayloadSchema, {.priority_exponent = 0.6});
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  const uint64_t sb = kPayloadSchema.step_bytes();
  Writer w(b, {0, 1, 2, 3});
  Sampler learner(b);
  push_steps(w, {0, 1, 2}, 10);  // env 3 stays empty

  const LinkResult first = save_link(reader, dir.path());
  CHECK(first.whole);
  CHECK(first.info.link_seq == 1);
  CHECK(first.info.path == link_file(dir.path(), 1));
  CHECK(first.info.chain_id != 0);
  CHECK(first.record_bytes == 30 * sb);
  CHECK(first.removed.empty());
  for (const CheckpointEnv& e : first.info.envs) {
    CAPTURE(e.env);
    CHECK(e.first_step == 0);
    CHECK(e.data_from == 0);
    CHECK(e.steps == e.head);
  }

  // Per round, the steps each env gets between two links; env 1 laps its ring of 64 in round 3.
  const std::vector<std::vector<uint64_t>> rounds = {{5, 0, 30, 3}, {2, 100, 0, 7}};
  LinkResult previous = first;
  for (std::size_t round = 0; round < rounds.size(); ++round) {
    CAPTURE(round);
    uint64_t new_steps = 0;
    for (uint64_t e = 0; e < 4; ++e) {
      push_steps(w, {static_cast<int32_t>(e)}, rounds[round][e]);
      new_steps += std::min<uint64_t>(rounds[round][e], 64);
    }
    // The learner gives a few steps new priorities: weights are whole in every link.
    const std::vector<uint64_t> envs{0, 2};
    const std::vector<uint64_t> steps{round, 3 + round};
    const std::vector<float> prios{2.5f + static_cast<float>(round), 7.0f};
    CHECK(learner.update_priorities(envs, steps, prios).applied == 2);

    const LinkResult link = save_link(reader, dir.path());
    CHECK_FALSE(link.whole);
    CHECK(link.info.link_seq == previous.info.link_seq + 1);
    CHECK(link.info.chain_id == first.info.chain_id);
    CHECK(link.removed.empty());  // keep = 3, and each link is needed
    for (const CheckpointEnv& e : link.info.envs) {
      CAPTURE(e.env);
      const CheckpointEnv& before = previous.info.envs[e.env];
      CHECK(e.head == before.head + rounds[round][e.env]);
      CHECK(e.head == segment_of(b).env_control(e.env).head.load());
      if (rounds[round][e.env] >= 64) {  // lapped: its whole window, the previous link holding none of it
        CHECK(e.first_step == e.head - 64);
        CHECK(e.data_from == e.first_step);
      } else {
        CHECK(e.first_step == before.first_step);
        CHECK(e.data_from == before.head);
      }
      CHECK(e.steps == e.head - e.data_from);
    }
    CHECK(link.record_bytes == new_steps * sb);
    CHECK(link.info.total_steps == new_steps);
    CHECK(link.chain_bytes == link.info.file_bytes + previous.chain_bytes);
    previous = link;
  }

  // A whole save of the same (quiet) instant differs from the newest link only by the records it leaves to earlier
  // links: the weights, episode records and counters are whole in both.
  const CheckpointInfo whole = save_checkpoint(reader, whole_file.path());
  CHECK(whole.self_contained());
  CHECK(whole.window_bytes() == previous.info.window_bytes());
  CHECK(whole.file_bytes - previous.info.file_bytes == (whole.total_steps - previous.info.total_steps) * sb);

  const LoadResult chained = load_chain(dir.path(), from_chain.name());
  CHECK(chained.created);
  CHECK(chained.notes.empty());
  CHECK(chained.info.link_seq == 3);
  load_checkpoint(whole_file.path(), from_file.name());
  const Buffer a = Buffer::open(from_chain.name(), {.read_only = true});
  const Buffer c = Buffer::open(from_file.name(), {.read_only = true});
  CHECK(state_difference(a, c) == "");
  CHECK(state_difference(a, reader) == "");
  CHECK(chained.info.learner == whole.learner);
  CHECK(chained.info.limiter == whole.limiter);
  CHECK(chained.info.max_priority == whole.max_priority);
  CHECK(payload_violation(a) == "");
}

TEST_CASE("a step rewritten in place between two links, or a load into the source, makes the next link copy the "
          "env's whole window, and the chain restores the new bytes") {
  SegmentGuard source(unique_name("chain-upd"));
  SegmentGuard restored(unique_name("chain-upd-restored"));
  DirGuard dir(temp_dir("chain-upd"));
  FileGuard earlier(temp_path("chain-upd-earlier"));
  Buffer b = Buffer::create(source.name(), 3, 32, kPayloadSchema);
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  {
    Writer w(b, {0, 1, 2});
    Sampler learner(b);
    push_steps(w, {0, 1, 2}, 10);
    REQUIRE(save_link(reader, dir.path()).whole);
    save_checkpoint(reader, earlier.path());  // heads 10, for the load below

    const PayloadFields v1(test::make_payload(1, 4, 1));
    REQUIRE(learner.try_update(1, 4, {field_bytes(v1.hdr), field_bytes(v1.body), field_bytes(v1.tail)}));
    push_steps(w, {0, 1, 2}, 2);
    const LinkResult link = save_link(reader, dir.path());
    CHECK_FALSE(link.whole);
    CHECK(link.info.envs[0].data_from == 10);
    CHECK(link.info.envs[1].data_from == 0);  // rewritten: its whole window
    CHECK(link.info.envs[1].steps == 12);
    CHECK(link.info.envs[2].data_from == 10);

    const LoadResult r = load_chain(dir.path(), restored.name());
    CHECK(r.info.link_seq == 2);
    const Buffer a = Buffer::open(restored.name(), {.read_only = true});
    CHECK(state_difference(a, reader) == "");
    CHECK(stored_step(a, 1, 4) == versioned_bytes(1, 4, 1));
    CHECK(stored_step(a, 1, 5) == payload_bytes(1, 5));
    push_steps(w, {0, 1, 2}, 5);
    CHECK_FALSE(save_link(reader, dir.path()).whole);  // nothing rewritten since link 2: incremental again
  }
  Buffer::remove(restored.name());

  // The earlier checkpoint loaded into the source: the heads go back to 10 and every env's update_seq moves.
  load_checkpoint(earlier.path(), source.name());
  const LinkResult after_load = save_link(reader, dir.path());
  CHECK(after_load.whole);
  for (const CheckpointEnv& e : after_load.info.envs) {
    CAPTURE(e.env);
    CHECK(e.head == 10);
    CHECK(e.data_from == e.first_step);
    CHECK(e.steps == 10);
  }
  const LoadResult r = load_chain(dir.path(), restored.name());
  CHECK(r.info.link_seq == after_load.info.link_seq);
  const Buffer a = Buffer::open(restored.name(), {.read_only = true});
  CHECK(state_difference(a, reader) == "");
  CHECK(stored_step(a, 1, 4) == payload_bytes(1, 4));  // the earlier checkpoint's step, before the rewrite
  CHECK(payload_violation(a) == "");
}

TEST_CASE("save_link keeps the newest `keep` links and every link they need, and a whole link (compaction) frees "
          "the old link that an env which stopped pushing kept alive") {
  SegmentGuard source(unique_name("chain-prune"));
  DirGuard dir(temp_dir("chain-prune"));
  // 4 envs x 4096 steps of 113 bytes: a window of 1.85 MB, above the 1 MiB floor of the compaction budget.
  constexpr uint64_t kCap = 4096;
  Buffer b = Buffer::create(source.name(), 4, kCap, kPayloadSchema);
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  const uint64_t window = 4 * kCap * kPayloadSchema.step_bytes();
  Writer w(b, {0, 1, 2, 3});
  push_steps(w, {0, 1, 2, 3}, kCap + 7);

  // Env 0 stops pushing after link 1; envs 1-3 lap their rings between links, so each later link holds their whole
  // windows and none of env 0's steps: every link needs link 1 for env 0, until a whole link holds env 0 again.
  bool compacting = false;
  ChainOptions options;
  options.keep = 2;
  SUBCASE("without compaction (a ratio no chain reaches)") { options.compact_ratio = 100; }
  SUBCASE("with compaction at 1.5 times the window") {
    options.compact_ratio = 1.5;
    compacting = true;
  }
  CAPTURE(options.compact_ratio);
  std::vector<LinkResult> links;
  for (uint64_t seq = 1; seq <= 7; ++seq) {
    CAPTURE(seq);
    if (seq > 1) push_steps(w, {1, 2, 3}, kCap + 3);
    links.push_back(save_link(reader, dir.path(), options));
    const LinkResult& r = links.back();
    REQUIRE(r.info.link_seq == seq);
    CHECK(r.info.envs[0].head == kCap + 7);

    // Which links are whole, which are removed: with compaction, the links after link 1 alternate between a whole
    // link (link n - 1 needs link n - 2 and itself: 1.75 windows, over 1.5) and an incremental one.
    const bool whole = seq == 1 || (compacting && seq % 2 == 1);
    CHECK(r.whole == whole);
    if (seq > 1) CHECK((r.info.chain_id == links[seq - 2].info.chain_id) == !whole);  // a whole link: a new chain
    if (!whole) {
      CHECK(r.info.envs[0].steps == 0);  // env 0 is in an earlier link
      CHECK(r.info.envs[1].data_from == r.info.envs[1].first_step);
    }
    std::vector<uint64_t> removed;
    if (!compacting && seq >= 4) removed = {seq - 2};        // link 1 stays: links seq - 1 and seq need it
    if (compacting && seq >= 4 && seq % 2 == 0) removed = {seq - 3, seq - 2};  // the previous whole link frees them
    CHECK(r.removed == link_files(removed, dir.path()));

    // What is left: the newest two links and what they need, each of them restoring from the links up to it.
    const std::vector<uint64_t> kept = link_seqs(dir.path());
    uint64_t bytes = 0;
    for (const ChainLink& l : list_links(dir.path())) bytes += l.file_bytes;
    CHECK(r.chain_bytes == bytes);
    CHECK(static_cast<double>(r.chain_bytes) <= (options.compact_ratio + 2) * static_cast<double>(window) + 16384);
    if (!compacting) {
      CHECK(kept.front() == 1);  // needed by every kept link, never removed
    } else if (seq >= 4) {
      CHECK(kept.front() == (seq % 2 == 0 ? seq - 1 : seq - 2));  // the chain's whole link
    }
    for (const uint64_t k : {seq - (seq > 1), seq}) CHECK(restores_alone(dir.path(), k) == k);
  }
  if (!compacting) CHECK(links.back().chain_bytes > window + 2 * (3 * window / 4));
  SegmentGuard restored(unique_name("chain-prune-restored"));
  load_chain(dir.path(), restored.name());
  CHECK(state_difference(Buffer::open(restored.name(), {.read_only = true}), reader) == "");
}

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
