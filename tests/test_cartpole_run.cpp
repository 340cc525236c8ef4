// The main job, end to end: cartpole_run starts a learner and actor processes on a real buffer, and this test
// checks its summary (pushes, samples, a falling value loss, zero consistency violations) and that no process
// is left behind, whether the run ends on time, on SIGTERM, or because the launcher itself is SIGKILLed.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shmreplay/inspector.hpp"
#include "support.hpp"

using namespace shmreplay;
using nlohmann::json;
using test::SegmentGuard;
using test::unique_name;
using Clock = std::chrono::steady_clock;

namespace {

// Removes the run's parameter block ("<name>.params") when it goes out of scope.
struct ParamsGuard {
  std::string path;
  ~ParamsGuard() { std::remove(path.c_str()); }
};

struct Launch {
  pid_t pid = -1;
  std::string out_path, err_path;
};

Launch start(const std::vector<std::string>& args) {
  static int counter = 0;
  Launch l;
  l.out_path = fmt::format("{}/cartpole-run-{}-{}.out", std::filesystem::temp_directory_path().string(), ::getpid(),
                           counter);
  l.err_path = fmt::format("{}/cartpole-run-{}-{}.err", std::filesystem::temp_directory_path().string(), ::getpid(),
                           counter++);
  std::vector<std::string> storage{CARTPOLE_RUN_PATH};
  storage.insert(storage.end(), args.begin(), args.end());
  std::fflush(nullptr);
  l.pid = ::fork();
  REQUIRE(l.pid >= 0);
  if (l.pid == 0) {
    std::vector<char*> argv;
    for (std::string& s : storage) argv.push_back(s.data());
    argv.push_back(nullptr);
    if (!std::freopen(l.out_path.c_str(), "w", stdout) || !std::freopen(l.err_path.c_str(), "w", stderr)) ::_exit(126);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return l;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::remove(path.c_str());
  return s.str();
}

struct Finished {
  int status = 0;
  std::string out, err;
};

Finished finish(const Launch& l) {
  Finished f;
  REQUIRE(::waitpid(l.pid, &f.status, 0) == l.pid);
  f.out = slurp(l.out_path);
  f.err = slurp(l.err_path);
  return f;
}

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

bool shm_exists(const std::string& name) { return std::filesystem::exists(shm_directory() + "/" + name); }

// The checks every run's summary must pass.
void check_summary(const json& s) {
  CHECK(s["pushes"].get<uint64_t>() > 0);
  CHECK(s["rows_sampled"].get<uint64_t>() > 0);
  CHECK(s["updates"].get<uint64_t>() > 0);
  CHECK(s["loss_falling"].get<bool>());
  CHECK(s["loss_last"].get<double>() < s["loss_first"].get<double>());
  CHECK(s["violations"].get<uint64_t>() == 0);
  CHECK(s["left_running"].get<int>() == 0);
  CHECK(s["ok"].get<bool>());
  REQUIRE(s["processes"].size() == 3);  // the learner and 2 actors
  for (const json& p : s["processes"]) {
    INFO(p.dump());
    CHECK(p["clean"].get<bool>());
    CHECK_FALSE(process_exists(p["pid"].get<pid_t>()));
  }
}

}  // namespace

TEST_CASE("a short run pushes, samples, learns with a falling loss, sees no violation and leaves nothing behind") {
  const std::string name = unique_name("cartpole");
  SegmentGuard guard(name);
  ParamsGuard params{shm_directory() + "/" + name + ".params"};
  const Finished f = finish(start({"--seconds", "5", "--json", "--quiet", "--name", name}));
  INFO(f.err);
  REQUIRE(WIFEXITED(f.status));
  CHECK(WEXITSTATUS(f.status) == 0);
  const json s = json::parse(f.out);
  check_summary(s);
  CHECK_FALSE(s["interrupted"].get<bool>());
  CHECK(s["segment"]["kept"].get<bool>() == false);
  CHECK_FALSE(shm_exists(name));
  CHECK_FALSE(shm_exists(name + ".params"));
  MESSAGE(fmt::format("{} pushes, {} rows sampled, {} updates, value loss {:.2f} -> {:.2f}, return {:.1f} -> {:.1f}",
                      s["pushes"].get<uint64_t>(), s["rows_sampled"].get<uint64_t>(), s["updates"].get<uint64_t>(),
                      s["loss_first"].get<double>(), s["loss_last"].get<double>(), s["return_first"].get<double>(),
                      s["return_last"].get<double>()));
}

TEST_CASE("SIGTERM stops the run cleanly with a summary, and --keep leaves the buffer for inspection") {
  const std::string name = unique_name("cartpole-term");
  SegmentGuard guard(name);
  ParamsGuard params{shm_directory() + "/" + name + ".params"};
  const Launch l = start({"--seconds", "120", "--json", "--quiet", "--keep", "--name", name});
  // Wait until the learner has learned a while (its lease is held and steps were pushed), then SIGTERM.
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    REQUIRE(Clock::now() < give_up);
    if (shm_exists(name)) {
      const SegmentInfo info = Inspector(name).snapshot();
      uint64_t pushed = 0;
      for (const EnvInfo& e : info.envs) pushed += e.head;
      if (info.learner.state == OwnerState::alive && pushed > 20'000) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  REQUIRE(::kill(l.pid, SIGTERM) == 0);
  const Finished f = finish(l);
  INFO(f.err);
  REQUIRE(WIFEXITED(f.status));
  CHECK(WEXITSTATUS(f.status) == 0);
  const json s = json::parse(f.out);
  check_summary(s);
  CHECK(s["interrupted"].get<bool>());
  // Kept: every writer and the learner are gone, the data is not.
  REQUIRE(shm_exists(name));
  const SegmentInfo info = Inspector(name).snapshot();
  uint64_t pushed = 0;
  for (const EnvInfo& e : info.envs) {
    pushed += e.head;
    CHECK(e.owner != OwnerState::alive);
  }
  CHECK(pushed == s["pushes"].get<uint64_t>());
  CHECK(info.learner.state != OwnerState::alive);
  CHECK(shm_exists(name + ".params"));
}

TEST_CASE("when the launcher is SIGKILLed its learner and actors stop by themselves") {
  // Orphans are re-parented to this process, so the test can reap them and read how they ended.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  const std::string name = unique_name("cartpole-kill");
  SegmentGuard guard(name);
  ParamsGuard params{shm_directory() + "/" + name + ".params"};
  const Launch l = start({"--seconds", "120", "--quiet", "--name", name});
  std::vector<pid_t> children;
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (children.empty()) {
    REQUIRE(Clock::now() < give_up);
    if (shm_exists(name)) {
      const SegmentInfo info = Inspector(name).snapshot();
      if (info.learner.state == OwnerState::alive && info.live_writers == 2) {
        children.push_back(static_cast<pid_t>(info.learner.pid));
        for (const EnvInfo& e : info.envs) {
          if (std::find(children.begin(), children.end(), static_cast<pid_t>(e.owner_pid)) == children.end()) {
            children.push_back(static_cast<pid_t>(e.owner_pid));
          }
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(children.size() == 3);
  REQUIRE(::kill(l.pid, SIGKILL) == 0);
  (void)finish(l);
  // Each child got SIGTERM from the kernel (PR_SET_PDEATHSIG) and exits cleanly on its own.
  for (const pid_t pid : children) {
    int status = 0;
    pid_t got = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while ((got = ::waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (got == 0) {  // never hang the suite: report, then clean up
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    INFO("pid ", pid);
    CHECK(got == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  // The segment outlives every process that used it (the launcher had no chance to remove it).
  CHECK(shm_exists(name));
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 0) == 0);
}

TEST_CASE("with SHMREPLAY_SHM_DIR set, the run keeps its buffer and its parameter block in that directory and leaves "
          "nothing in it or in /dev/shm") {
  const std::string name = unique_name("cartpole-dir");
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::create_directories(dir);
  const char* before = std::getenv("SHMREPLAY_SHM_DIR");
  const std::string saved = before != nullptr ? before : "";
  struct Restore {
    std::filesystem::path dir;
    bool had;
    std::string value;
    ~Restore() {
      if (had) {
        ::setenv("SHMREPLAY_SHM_DIR", value.c_str(), 1);
      } else {
        ::unsetenv("SHMREPLAY_SHM_DIR");
      }
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } restore{dir, before != nullptr, saved};
  ::setenv("SHMREPLAY_SHM_DIR", dir.c_str(), 1);  // for the run's processes (inherited) and shm_directory() here
  const Finished f = finish(start({"--seconds", "2", "--json", "--quiet", "--keep", "--name", name}));
  INFO(f.err);
  REQUIRE(WIFEXITED(f.status));
  CHECK(WEXITSTATUS(f.status) == 0);
  CHECK(std::filesystem::exists(dir / name));                  // --keep: the buffer, where SHMREPLAY_SHM_DIR says
  CHECK(std::filesystem::exists(dir / (name + ".params")));    // and its parameter block beside it
  CHECK(test::entries_containing("/dev/shm", name).empty());         // nothing in the default directory
  Buffer::remove(name);
  std::remove((dir / (name + ".params")).c_str());
  CHECK(test::entries_containing(dir.string(), name).empty());
}
