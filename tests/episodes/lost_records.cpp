// tests/episodes/lost_records.cpp: completed-episode records and learners SIGKILLed while they pop them (issue 43):
// each record reaches one caller at most once, and the records a killed learner had taken are counted in
// episode_records_lost, exactly. Part of test_episodes (tests/CMakeLists.txt); its helpers are in episodes_helpers.hpp.
#include "episodes_helpers.hpp"

#include <fcntl.h>
#include <poll.h>

#include "detail/protocol/episode_queue.hpp"
#include "detail/protocol/lease.hpp"

namespace {

// A buffer of 3 envs with two learner slots and no learner yet; `per_env` episodes of 1 to 3 steps pushed to every
// env (the queues hold them all), with their model.
struct PopRig {
  PopRig(const std::string& tag, int per_env)
      : guard(unique_name(tag)), buf(Buffer::create(guard.name(), 3, 512, kSchema, options())), m(Flavor::done, 3, 512) {
    Writer w = Writer::range(buf, 0, 3);
    for (int k = 0; k < per_env; ++k) {
      for (uint64_t e = 0; e < 3; ++e) {
        const int steps = 1 + (k + static_cast<int>(e)) % 3;
        for (int i = 0; i < steps; ++i) push_one_step(w, m, e, i + 1 == steps);
      }
    }
  }
  static CreateOptions options() {
    CreateOptions o = options_for(Flavor::done, 256);
    o.max_learners = 2;
    return o;
  }
  std::vector<EpisodeRecord> all() const {
    std::vector<EpisodeRecord> out;
    for (uint64_t e = 0; e < 3; ++e) {
      const std::vector<EpisodeRecord> r = m.records(e);
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }
  uint64_t lost() const { return Inspector(guard.name()).snapshot().episode_records_lost; }
  SegmentGuard guard;
  Buffer buf;
  Model m;
};

// A pipe whose read end collects what a child wrote, once the child is gone.
struct Pipe {
  Pipe() { REQUIRE(::pipe(fd) == 0); }
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  void put(const void* p, std::size_t bytes) const {
    for (std::size_t done = 0; done < bytes;) {
      const ssize_t n = ::write(fd[1], static_cast<const char*>(p) + done, bytes - done);
      if (n <= 0) ::_exit(3);
      done += static_cast<std::size_t>(n);
    }
  }
  std::string drain() {  // after the child's death: every byte it wrote
    ::close(fd[1]);
    fd[1] = -1;
    std::string out;
    char chunk[4096];
    for (ssize_t n; (n = ::read(fd[0], chunk, sizeof chunk)) > 0;) out.append(chunk, static_cast<std::size_t>(n));
    return out;
  }
  int fd[2] = {-1, -1};
};

std::vector<EpisodeRecord> as_records(const std::string& bytes) {
  std::vector<EpisodeRecord> out(bytes.size() / sizeof(EpisodeRecord));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(EpisodeRecord));  // never null
  return out;
}

// Every record the buffer still holds, popped by a new learner in this process.
std::vector<EpisodeRecord> drain_all(Buffer& buf) {
  Sampler learner(buf);
  std::vector<EpisodeRecord> out, chunk(64);
  for (std::size_t n; (n = learner.pop_episodes(chunk)) > 0;) {
    out.insert(out.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return out;
}

// Waits for a child that kills itself; whether it died of SIGKILL (not an _exit for a failed step).
bool killed_itself(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

using Key = std::pair<uint64_t, uint64_t>;  // (env, first step): a record's identity
Key key(const EpisodeRecord& r) { return {r.env, r.first_step}; }

}  // namespace

TEST_CASE("a learner killed inside pop_episodes with records in hand has exactly those counted lost, and the next "
          "learner gets every other record once") {
  PopRig rig("ep-lost-pop", 4);  // 12 records
  Pipe in_hand;
  // The child takes 7 records (of several envs), reports them and is killed before pop_episodes hands them over.
  const pid_t child = spawn([&] {
    Buffer b = Buffer::open(rig.guard.name());
    Sampler learner(b);
    std::vector<EpisodeRecord> out(7);
    learner.pop_episodes(out, [&](std::span<const EpisodeRecord> taken) {
      in_hand.put(taken.data(), taken.size_bytes());
      ::raise(SIGKILL);
    });
    ::_exit(1);
  });
  const std::vector<EpisodeRecord> lost = as_records(in_hand.drain());
  REQUIRE(killed_itself(child));
  REQUIRE(lost.size() == 7);
  CHECK(rig.lost() == 7);  // seen while the dead learner still holds its envs' locks
  const std::vector<EpisodeRecord> rest = drain_all(rig.buf);
  CHECK(rest.size() == 5);
  const SegmentInfo after = Inspector(rig.guard.name()).snapshot();
  CHECK(after.episode_records_lost == 7);  // counted once, when the next learner took the locks over
  CHECK(after.episode_queue_depth == 0);
  uint64_t per_env = 0;
  for (const EnvInfo& e : after.envs) per_env += e.episode_records_lost;
  CHECK(per_env == 7);
  // Every record exactly once: in the dead learner's hands (counted) or delivered to the next learner.
  std::map<Key, int> seen;
  for (const EpisodeRecord& r : lost) ++seen[key(r)];
  for (const EpisodeRecord& r : rest) ++seen[key(r)];
  const std::vector<EpisodeRecord> all = rig.all();
  REQUIRE(all.size() == 12);
  CHECK(seen.size() == all.size());
  for (const EpisodeRecord& r : all) CHECK(seen[key(r)] == 1);
}

TEST_CASE("records taken by a learner killed between its take and its hand-over, or while it repairs a dead one's "
          "lock, are counted lost exactly once; those it handed over are not") {
  PopRig rig("ep-lost-steps", 4);  // 4 records per env
  Segment& seg = segment_of(rig.buf);
  // Child 1: takes 3 records of env 0 and hands them over, takes 2 of env 1 and is killed holding them.
  Pipe delivered;
  pid_t child = spawn([&] {
    Buffer b = Buffer::open(rig.guard.name());
    const uint64_t me = detail::self_lease_word();
    EpisodeRecord out[3];
    if (detail::take_records(segment_of(b), 0, out, me) != 3) ::_exit(2);
    detail::hand_over_records(segment_of(b), 0, me, /*delivered=*/true);
    delivered.put(out, sizeof out);
    if (detail::take_records(segment_of(b), 1, std::span(out, 2), me) != 2) ::_exit(2);
    ::raise(SIGKILL);
  });
  const std::vector<EpisodeRecord> handed = as_records(delivered.drain());
  REQUIRE(killed_itself(child));
  REQUIRE(handed.size() == 3);
  CHECK(rig.lost() == 2);
  // Child 2: takes env 1's lock over from the dead child (counting its 2), takes 1 record and is killed too.
  child = spawn([&] {
    Buffer b = Buffer::open(rig.guard.name());
    EpisodeRecord out[1];
    if (detail::take_records(segment_of(b), 1, out, detail::self_lease_word()) != 1) ::_exit(2);
    ::raise(SIGKILL);
  });
  REQUIRE(killed_itself(child));
  CHECK(detail::queue_consumer(seg, 1).lost.load() == 2);  // the repair's one store, before it died
  const SegmentInfo mid = Inspector(rig.guard.name()).snapshot();
  CHECK(mid.envs[0].episode_records_lost == 0);
  CHECK(mid.envs[1].episode_records_lost == 3);
  CHECK(mid.episode_records_lost == 3);
  const std::vector<EpisodeRecord> rest = drain_all(rig.buf);
  CHECK(rig.lost() == 3);
  // Delivered: child 1's 3 of env 0 and the rest; lost: env 1's first 3 records, no other.
  std::set<Key> got;
  for (const EpisodeRecord& r : handed) CHECK(got.insert(key(r)).second);
  for (const EpisodeRecord& r : rest) CHECK(got.insert(key(r)).second);
  const std::vector<EpisodeRecord> env1 = rig.m.records(1);
  for (const EpisodeRecord& r : rig.all()) {
    const bool lost = r.env == 1 && r.first_step < env1[3].first_step;
    CHECK(got.count(key(r)) == (lost ? 0u : 1u));
  }
}

TEST_CASE("learners SIGKILLed at random moments while popping deliver no record twice and leave none uncounted") {
  PopRig rig("ep-lost-random", 60);  // 180 records
  std::mt19937_64 gen(43);
  std::map<Key, int> seen;
  std::size_t unconfirmed = 0;  // records a child received but was killed before confirming the call returned
  int kills = 0;
  for (int round = 0; round < 60 && seen.size() < 150; ++round) {
    Pipe log;
    // The child pops 1 to 4 records a call; it logs them inside the call (delivery), then a zero record once the
    // call returned (handed over). A kill between the two leaves the records logged and perhaps counted lost.
    const pid_t child = spawn([&] {
      Buffer b = Buffer::open(rig.guard.name());
      Sampler learner(b);
      std::vector<EpisodeRecord> out(1 + static_cast<std::size_t>(round % 4));
      const EpisodeRecord confirm{~0ull, 0, 0, 0.0, EpisodeEnd::none};
      for (;;) {
        // Slow deliveries, so that kills land in them: before the log (records nobody saw) and after it.
        const std::size_t n = learner.pop_episodes(out, [&](std::span<const EpisodeRecord> taken) {
          ::usleep(150);
          log.put(taken.data(), taken.size_bytes());
          ::usleep(150);
        });
        if (n > 0) log.put(&confirm, sizeof confirm);
        ::usleep(500);
      }
    });
    std::this_thread::sleep_for(std::chrono::microseconds(500 + gen() % 4000));
    kill_and_reap(child);
    ++kills;
    std::size_t pending = 0;
    for (const EpisodeRecord& r : as_records(log.drain())) {
      if (r.env == ~0ull) {
        pending = 0;
        continue;
      }
      ++seen[key(r)];
      ++pending;
    }
    unconfirmed += pending;
  }
  for (const EpisodeRecord& r : drain_all(rig.buf)) ++seen[key(r)];
  const std::vector<EpisodeRecord> all = rig.all();
  REQUIRE(all.size() == 180);
  std::size_t missing = 0;
  for (const EpisodeRecord& r : all) {
    CHECK(seen[key(r)] <= 1);  // never delivered twice
    if (seen[key(r)] == 0) ++missing;
  }
  std::set<Key> known;
  for (const EpisodeRecord& r : all) known.insert(key(r));
  for (const auto& [k, times] : seen) CHECK(known.count(k) == 1);  // nothing but the writers' records
  // A record nobody received was counted lost; the count exceeds those only by records logged inside a call that
  // was killed before it returned.
  const uint64_t lost = rig.lost();
  MESSAGE(fmt::format("{} kills, {} records lost (counted {}), {} logged in calls killed before they returned",
                      kills, missing, lost, unconfirmed));
  CHECK(lost >= missing);
  CHECK(lost <= missing + unconfirmed);
}
