// tests/cli/crash_recovery.cpp: a crash of every process, and of /dev/shm, while `shmreplay save --every` writes a
// chain: `shmreplay load DIR` restores the newest complete link, every step as its writer published it, losing only
// the steps published since that link's save began. Prints the loss in steps and in seconds.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

#include <time.h>

#include <utility>

namespace {

uint64_t realtime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Child processes of one test, SIGKILLed and reaped when it ends however it ends (crash() kills them earlier).
class Crew {
 public:
  Crew() = default;
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;
  ~Crew() { crash(); }
  void add(pid_t pid) { pids_.push_back(pid); }
  /// Whether every one of them still runs (none failed and exited).
  bool alive() const {
    return std::all_of(pids_.begin(), pids_.end(), [](pid_t p) { return ::waitpid(p, nullptr, WNOHANG) == 0; });
  }
  /// SIGKILLs every one of them; true when each was still running until then.
  bool crash() {
    bool all = true;
    for (const pid_t pid : pids_) all = test::kill_and_reap(pid) && all;
    pids_.clear();
    return all;
  }

 private:
  std::vector<pid_t> pids_;
};

// A writer process pushing payload steps into `envs` of `name`, 8 pushes then a 1 ms pause (about 7,000 steps a
// second per env: an RL actor's pace, not a benchmark's), until killed.
pid_t paced_writer(const std::string& name, std::vector<int32_t> envs) {
  return test::spawn_payload_writer(name, std::move(envs), 1000);
}

// A learner process: samples prioritized rows of 4 steps and gives their starts new priorities, until killed.
pid_t learner(const std::string& name) {
  return test::spawn([name] {
    try {
      Buffer b = Buffer::open(name);
      Sampler learner(b);
      Rng rng(7);
      SampleBatch batch;
      std::vector<float> priorities;
      for (;;) {
        ::usleep(500);
        if (learner.size(View::replay) < 64) continue;
        learner.sample(View::replay, 32, 4, 0.0, rng, batch, {.prioritized = true});
        priorities.resize(batch.rows());
        for (float& p : priorities) p = static_cast<float>(1 + rng() % 1000) / 100;
        learner.update_priorities(batch.env_ids(), batch.start_steps(), priorities);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "learner process: %s\n", e.what());
      ::_exit(3);
    }
  });
}

// The links in `dir` (none while it does not exist yet).
std::size_t links_in(const std::string& dir) {
  try {
    return list_links(dir).size();
  } catch (const Error&) {
    return 0;
  }
}

// What the crash test saw of the heads: (realtime ns, each env's head), each list read before its time was taken.
using Looks = std::vector<std::pair<uint64_t, std::vector<uint64_t>>>;

// Each env's restored head (of `restored`, from the link `link`) is at least its head before the restored link's save
// began, and at most what its writer had published at the crash; every restored step is the one its writer
// published. Adds the steps lost to *lost_total; a line per env for the message: what was lost, and the age of the
// restored steps (the env's head was still at most the restored one when the test last saw it so, which was this
// long before the crash, to the 5 ms between looks). `times`: the start and the crash, realtime ns.
std::string check_restored_envs(const Buffer& restored, const CheckpointInfo& link,
                                const std::vector<uint64_t>& published, const std::vector<uint64_t>& before_save,
                                const Looks& seen, std::pair<uint64_t, uint64_t> times, uint64_t* lost_total) {
  const auto [started_ns, crash_ns] = times;
  const double elapsed_s = static_cast<double>(crash_ns - started_ns) / 1e9;
  std::string table;
  for (uint64_t e = 0; e < restored.num_envs(); ++e) {
    CAPTURE(e);
    const uint64_t head = segment_of(restored).env_control(e).head.load();
    CHECK(head == link.envs[e].head);
    CHECK(head <= published[e]);
    CHECK(head >= before_save[e]);
    CHECK(check_env_payloads(restored, e) == "");
    const uint64_t lost = published[e] - std::min(head, published[e]);
    *lost_total += lost;
    uint64_t last_below_ns = started_ns;
    for (const auto& [time_ns, heads] : seen) {
      if (heads[e] <= head) last_below_ns = time_ns;
    }
    table += fmt::format("\n  env {}: published {:6}, restored {:6}: lost {:5} steps, the last {:.2f} s ({:.0f} "
                         "steps/s on average)",
                         e, published[e], head, lost, static_cast<double>(crash_ns - last_below_ns) / 1e9,
                         static_cast<double>(published[e]) / elapsed_s);
  }
  return table;
}

}  // namespace

TEST_CASE("a crash of every process and of /dev/shm while `save --every 1` runs: `load DIR` restores every step as "
          "its writer published it, losing only the steps published since the newest link's save began") {
  const std::string name = unique_name("cli-crash");
  SegmentGuard guard(name);
  test::DirGuard dir(fmt::format("/tmp/{}.chain", unique_name("cli-crash")));
  constexpr uint64_t kEnvs = 4;
  constexpr uint64_t kCap = 1 << 15;  // the writers do not lap it in this test: the links after the first are incremental
  Buffer::create(name, kEnvs, kCap, test::kPayloadSchema, {.priority_exponent = 0.6});
  const Buffer source = Buffer::open(name, {.read_only = true});
  const uint64_t started_ns = realtime_ns();
  Crew crew;
  crew.add(paced_writer(name, {0, 1}));
  crew.add(paced_writer(name, {2, 3}));
  crew.add(learner(name));
  RunningCli saver({"save", name, dir.path(), "--every", "1"});

  // The heads as this test saw them, each list read before its time was taken.
  Looks seen;
  const auto look = [&] {
    std::vector<uint64_t> heads;
    for (uint64_t e = 0; e < kEnvs; ++e) heads.push_back(segment_of(source).env_control(e).head.load());
    seen.emplace_back(realtime_ns(), std::move(heads));
    ::usleep(5000);
  };
  // Three links (a whole one, then incremental ones), then a random part of a period more: the crash lands in a
  // save or between two, anywhere.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);  // a hang guard only
  while (links_in(dir.path()) < 3) {
    REQUIRE(crew.alive());
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    look();
  }
  const uint64_t seed = std::random_device{}();
  CAPTURE(seed);
  const auto crash_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(seed % 1000);
  while (std::chrono::steady_clock::now() < crash_at) look();

  const uint64_t crash_ns = realtime_ns();
  CHECK(saver.finish(SIGKILL) == 128 + SIGKILL);
  CHECK(crew.crash());
  std::vector<uint64_t> published;
  for (uint64_t e = 0; e < kEnvs; ++e) published.push_back(segment_of(source).env_control(e).head.load());
  Buffer::remove(name);  // /dev/shm is gone, as after a reboot
  REQUIRE_FALSE(Buffer::exists(name));

  const CliResult loaded = run_cli({"load", dir.path(), "--json"});
  INFO(loaded.err);
  REQUIRE(loaded.exit_code == 0);
  CHECK(loaded.err.empty());  // no note: no link was skipped
  const json l = parse_json(loaded.out);
  CHECK(l["name"] == name);
  CHECK(l["created"] == true);
  const std::vector<ChainLink> links = list_links(dir.path());
  const CheckpointInfo link = verify_chain(dir.path());
  CHECK(l["checkpoint"]["link"] == link.link_seq);
  CHECK(link.link_seq == links.back().seq);  // the newest link: a save killed midway left only a temporary file
  CHECK(link.link_seq >= 3);

  // Each env's restored head is at least its head before the restored link's save began, and at most what its
  // writer had published at the crash; every restored step is the one its writer published.
  std::vector<uint64_t> before_save(kEnvs, 0);
  for (const auto& [time_ns, heads] : seen) {
    if (time_ns < link.save_started_ns) before_save = heads;
  }
  const Buffer restored = Buffer::open(name, {.read_only = true});
  const double elapsed_s = static_cast<double>(crash_ns - started_ns) / 1e9;
  uint64_t lost_total = 0;
  const std::string table = check_restored_envs(restored, link, published, before_save, seen,
                                                {started_ns, crash_ns}, &lost_total);
  MESSAGE(fmt::format("crash {:.2f} s after the start, {} links complete ({} kept in the directory); restored link {}, "
                      "whose save began {:.3f} s before the crash and took {:.3f} s; {} steps lost in all, {} priority "
                      "updates restored{}",
                      elapsed_s, links.back().seq, links.size(), link.link_seq,
                      static_cast<double>(crash_ns - link.save_started_ns) / 1e9,
                      static_cast<double>(link.saved_time_ns - link.save_started_ns) / 1e9, lost_total,
                      link.learner.priority_updates, table));
}
