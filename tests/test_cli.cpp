// The `shmreplay` CLI, run as a child process: output, --json forms, exit codes and error lines.
#include <doctest/doctest.h>

#include <chrono>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shmreplay/buffer.hpp"
#include "shmreplay/layout.hpp"
#include "shmreplay/version.hpp"
#include "support.hpp"

using namespace shmreplay;
using nlohmann::json;
using test::SegmentGuard;
using test::unique_name;

namespace {

const std::string kSpec = "obs:f32[4] action:i32 reward:f32 done:bool";  // 25 bytes per step

struct CliResult {
  int exit_code = -1;  ///< the exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs the CLI with `args` (no shell), collecting stdout and stderr through pipes until both close.
CliResult run_cli(const std::vector<std::string>& args) {
  int out_pipe[2];
  int err_pipe[2];
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
  std::vector<std::string> storage{SHMREPLAY_CLI_PATH};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);

  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  CliResult r;
  std::array<pollfd, 2> fds{{{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}}};
  std::array<std::string*, 2> sinks{&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char chunk[4096];
      const ssize_t got = ::read(fds[k].fd, chunk, sizeof chunk);
      if (got > 0) {
        sinks[k]->append(chunk, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Whether `err` is exactly one line that starts with the CLI's error prefix.
bool one_error_line(const std::string& err) {
  return err.starts_with("shmreplay: error: ") && err.ends_with('\n') &&
         std::count(err.begin(), err.end(), '\n') == 1;
}

// The line of `text` that starts with `prefix` (empty when there is none).
std::string line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(prefix)) return line;
  }
  return {};
}

// The whitespace-separated words of `line`.
std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  return {std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()};
}

CliResult create(const std::string& name, uint64_t envs = 3, uint64_t capacity = 100) {
  return run_cli({"create", name, "--envs", std::to_string(envs), "--capacity", std::to_string(capacity),
                  "--schema", kSpec});
}

json parse_json(const std::string& text) {
  json j;
  REQUIRE_NOTHROW(j = json::parse(text));
  return j;
}

const json* find_named(const json& array, const std::string& name) {
  for (const json& item : array) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

using test::write_file;

std::string read_file(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(max_bytes, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(max_bytes));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  return bytes;
}

// 4 KiB of random bytes: not shmreplay's magic (with overwhelming probability).
std::string random_bytes() {
  std::mt19937_64 rng(std::random_device{}());
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  return bytes;
}

// This process's start time in clock ticks after boot: field 22 of /proc/self/stat.
uint64_t own_start_ticks() {
  std::ifstream in("/proc/self/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t close_paren = stat.rfind(')');
  REQUIRE(close_paren != std::string::npos);
  const std::vector<std::string> fields = words(stat.substr(close_paren + 1));  // fields 3, 4, ...
  REQUIRE(fields.size() > 22 - 3);
  return std::stoull(fields[22 - 3]);
}

}  // namespace

TEST_CASE("create prints the segment's shape and info shows the schema and sizes") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult c = create(name, 3, 100);
  REQUIRE(c.exit_code == 0);
  CHECK(c.err.empty());
  CHECK(c.out.starts_with(fmt::format("created '{}': 3 envs x 100 steps, 25 bytes per step, ", name)));
  CHECK(contains(c.out, fmt::format("({})", guard.path())));
  CHECK(Buffer::exists(name));

  const CliResult i = run_cli({"info", name});
  REQUIRE(i.exit_code == 0);
  CHECK(i.err.empty());
  CHECK(words(line_starting(i.out, "name")) == std::vector<std::string>{"name", name});
  CHECK(words(line_starting(i.out, "path")) == std::vector<std::string>{"path", guard.path()});
  CHECK(words(line_starting(i.out, "layout")) ==
        std::vector<std::string>{"layout", fmt::format("{}.{}", layout::kLayoutMajor, layout::kLayoutMinor)});
  CHECK(words(line_starting(i.out, "envs")) == std::vector<std::string>{"envs", "3"});
  CHECK(contains(line_starting(i.out, "capacity"), "100 steps"));
  CHECK(contains(line_starting(i.out, "step"), "25 bytes"));
  CHECK(contains(line_starting(i.out, "creator"), "(exited)"));  // the creator was the CLI process, now exited
  CHECK(contains(i.out, kSpec));
  CHECK(words(line_starting(i.out, "  0  obs")) == std::vector<std::string>{"0", "obs", "f32", "[4]", "16"});
  CHECK(words(line_starting(i.out, "  3  done")) == std::vector<std::string>{"3", "done", "bool", "scalar", "1"});
  // The env table: env 2 has published nothing and has no owner.
  bool saw_env_2 = false;
  std::istringstream lines(i.out);
  for (std::string line; std::getline(lines, line);) {
    const auto w = words(line);
    if (w.size() == 9 && w[0] == "2" && w[6] == "none") {
      CHECK(w == std::vector<std::string>{"2", "0", "0", "0", "0", "-", "none", "-", "never"});
      saw_env_2 = true;
    }
  }
  CHECK(saw_env_2);
}

TEST_CASE("info --json reports the geometry, the schema and empty envs") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 3, 100).exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});

  const CliResult r = run_cli({"info", name, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  const json j = parse_json(r.out);
  CHECK(j["name"] == name);
  CHECK(j["path"] == guard.path());
  CHECK(j["layout"] == fmt::format("{}.{}", layout::kLayoutMajor, layout::kLayoutMinor));
  CHECK(j["num_envs"] == 3);
  CHECK(j["capacity"] == 100);
  CHECK(j["step_bytes"] == 25);
  CHECK(j["total_bytes"] == b.total_bytes());
  CHECK(j["data_bytes"] == 3 * 100 * 25);
  CHECK(j["creator_pid"].get<uint64_t>() > 0);
  CHECK(j["creator_alive"] == false);  // the creator was the CLI process, which has exited
  CHECK(j["total_pushed"] == 0);
  CHECK(j["replay_steps"] == 0);
  CHECK(j["live_writers"] == 0);
  CHECK(j["schema_spec"] == kSpec);
  CHECK(Schema::parse(j["schema_spec"].get<std::string>()) == b.schema());

  const json& schema = j["schema"];
  REQUIRE(schema.size() == 4);
  CHECK(schema[0] == json{{"name", "obs"}, {"dtype", "f32"}, {"shape", {4}}, {"bytes", 16}});
  CHECK(schema[1] == json{{"name", "action"}, {"dtype", "i32"}, {"shape", json::array()}, {"bytes", 4}});
  CHECK(schema[3]["dtype"] == "bool");

  const json& envs = j["envs"];
  REQUIRE(envs.size() == 3);
  for (std::size_t e = 0; e < envs.size(); ++e) {
    CAPTURE(e);
    CHECK(envs[e]["env"] == e);
    CHECK(envs[e]["head"] == 0);
    CHECK(envs[e]["length"] == 0);
    CHECK(envs[e]["owner"] == "none");
    CHECK(envs[e]["last_push_ns"] == 0);
  }
}

TEST_CASE("create reads the schema from --schema-file, with newlines and comments") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const std::string file = fmt::format("/tmp/{}.schema", unique_name("cli-schema"));
  write_file(file, "# observation first\nobs:u8[2,3]   # image\naction:i64\n\ndone:bool\n");
  const CliResult c = run_cli({"create", name, "--envs", "2", "--capacity", "8", "--schema-file", file});
  std::remove(file.c_str());
  REQUIRE(c.exit_code == 0);
  CHECK(contains(c.out, "2 envs x 8 steps, 15 bytes per step"));

  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["schema_spec"] == "obs:u8[2,3] action:i64 done:bool");
  CHECK(j["schema"][0]["shape"] == json{2, 3});
}

TEST_CASE("create of a missing schema file fails with exit code 1 and names the file") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult c = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema-file", "/nonexistent/x"});
  CHECK(c.exit_code == 1);
  CHECK(one_error_line(c.err));
  CHECK(contains(c.err, "/nonexistent/x"));
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("create of an existing name fails with one error line, and --replace replaces it") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 3, 100).exit_code == 0);

  const CliResult again = create(name, 5, 7);
  CHECK(again.exit_code == 1);
  CHECK(again.out.empty());
  CHECK(one_error_line(again.err));
  CHECK(contains(again.err, "already exists"));
  CHECK(contains(again.err, "shmreplay create --replace"));
  CHECK(Buffer::open(name, {.read_only = true}).num_envs() == 3);

  const CliResult replaced =
      run_cli({"create", name, "--envs", "5", "--capacity", "7", "--schema", "x:u8", "--replace"});
  CHECK(replaced.exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});
  CHECK(b.num_envs() == 5);
  CHECK(b.capacity() == 7);
  CHECK(b.schema() == Schema::parse("x:u8"));
}

TEST_CASE("create with --mode sets the file's permission bits") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "640"}).exit_code ==
          0);
  struct stat st {};
  REQUIRE(::stat(guard.path().c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);

  const CliResult bad = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "9"});
  CHECK(bad.exit_code == 2);
  CHECK(one_error_line(bad.err));
}

TEST_CASE("a bad schema spec fails with exit code 1 and a message that names the field") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult r =
      run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "obs:f32[4] action:q7 done:bool"});
  CHECK(r.exit_code == 1);
  CHECK(one_error_line(r.err));
  CHECK(contains(r.err, "'action'"));
  CHECK(contains(r.err, "q7"));
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("an invalid count is refused by the library with exit code 1") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult r = create(name, 0, 10);
  CHECK(r.exit_code == 1);
  CHECK(one_error_line(r.err));
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("usage errors exit with code 2 and one error line") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);

  SUBCASE("missing --envs") {
    const CliResult r = run_cli({"create", name, "--capacity", "10", "--schema", kSpec});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "--envs"));
    CHECK_FALSE(Buffer::exists(name));
  }
  SUBCASE("a count that is not a decimal number") {
    for (const char* count : {"-1", "0x10", "ten", "99999999999999999999999"}) {
      CAPTURE(count);
      const CliResult r = run_cli({"create", name, "--envs", count, "--capacity", "10", "--schema", kSpec});
      CHECK(r.exit_code == 2);
      CHECK(one_error_line(r.err));
    }
    CHECK_FALSE(Buffer::exists(name));
  }
  SUBCASE("both --schema and --schema-file, or neither") {
    CHECK(run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", kSpec, "--schema-file", "/x"})
              .exit_code == 2);
    const CliResult r = run_cli({"create", name, "--envs", "1", "--capacity", "1"});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
  }
  SUBCASE("an unknown subcommand") {
    const CliResult r = run_cli({"frobnicate", name});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "frobnicate"));
  }
  SUBCASE("no subcommand") {
    const CliResult r = run_cli({});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
  }
  SUBCASE("an unknown option") {
    const CliResult r = run_cli({"ls", "--bogus"});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "--bogus"));
  }
}

TEST_CASE("--help prints the usage and exits with code 0") {
  const CliResult top = run_cli({"--help"});
  CHECK(top.exit_code == 0);
  CHECK(top.err.empty());
  for (const char* sub : {"create", "ls", "info", "rm"}) CHECK(contains(top.out, sub));

  const CliResult sub = run_cli({"create", "--help"});
  CHECK(sub.exit_code == 0);
  CHECK(contains(sub.out, "--schema-file"));
  CHECK(contains(sub.out, "--replace"));
}

TEST_CASE("--version prints the library and the layout versions") {
  const CliResult r = run_cli({"--version"});
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(contains(r.out, kVersion));
  CHECK(contains(r.out, fmt::format("layout {}.{}", layout::kLayoutMajor, layout::kLayoutMinor)));
}

TEST_CASE("ls shows a created segment and not a foreign file in the shared-memory directory") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 3, 100).exit_code == 0);
  SegmentGuard foreign(unique_name("cli-foreign"));
  write_file(foreign.path(), random_bytes());

  const CliResult r = run_cli({"ls"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(words(line_starting(r.out, "NAME")) ==
        std::vector<std::string>{"NAME", "ENVS", "CAPACITY", "FILL", "STEPS", "BYTES", "WRITERS", "AGE"});
  const std::vector<std::string> row = words(line_starting(r.out, name + " "));
  REQUIRE(row.size() == 9);  // BYTES is two words, e.g. "1.0 MiB"
  CHECK(row[1] == "3");
  CHECK(row[2] == "100");
  CHECK(row[3] == "0.0%");
  CHECK(row[4] == "0");
  CHECK(row[7] == "0");
  CHECK_FALSE(contains(r.out, foreign.name()));
}

TEST_CASE("ls --json lists a created segment with its geometry") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 4, 64).exit_code == 0);
  SegmentGuard foreign(unique_name("cli-foreign"));
  write_file(foreign.path(), random_bytes());

  const CliResult r = run_cli({"ls", "--json"});
  REQUIRE(r.exit_code == 0);
  const json j = parse_json(r.out);
  REQUIRE(j.is_array());
  const json* mine = find_named(j, name);
  REQUIRE(mine != nullptr);
  CHECK((*mine)["envs"] == 4);
  CHECK((*mine)["capacity"] == 64);
  CHECK((*mine)["step_bytes"] == 25);
  CHECK((*mine)["total_pushed"] == 0);
  CHECK((*mine)["live_writers"] == 0);
  CHECK((*mine)["layout"] == fmt::format("{}.{}", layout::kLayoutMajor, layout::kLayoutMinor));
  CHECK((*mine)["age_s"].get<double>() >= 0.0);
  CHECK_FALSE(mine->contains("error"));
  CHECK(find_named(j, foreign.name()) == nullptr);
}

TEST_CASE("ls lists a truncated segment with its error instead of failing") {
  const std::string source = unique_name("cli");
  SegmentGuard source_guard(source);
  REQUIRE(create(source, 2, 10).exit_code == 0);
  SegmentGuard truncated(unique_name("cli-trunc"));
  write_file(truncated.path(), read_file(source_guard.path(), 100));

  const CliResult text = run_cli({"ls"});
  REQUIRE(text.exit_code == 0);
  const std::string row = line_starting(text.out, truncated.name() + " ");
  CHECK(contains(row, "error:"));
  CHECK(contains(row, "100 bytes"));
  CHECK(words(line_starting(text.out, source + " ")).size() == 9);

  const CliResult js = run_cli({"ls", "--json"});
  REQUIRE(js.exit_code == 0);
  const json j = parse_json(js.out);
  const json* entry = find_named(j, truncated.name());
  REQUIRE(entry != nullptr);
  CHECK(entry->size() == 2);
  CHECK(contains((*entry)["error"].get<std::string>(), "100 bytes"));
}

TEST_CASE("info fails with exit code 1 on a missing name and on a foreign file") {
  SUBCASE("missing") {
    const CliResult r = run_cli({"info", unique_name("cli-missing")});
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "does not exist"));
  }
  SUBCASE("foreign") {
    SegmentGuard foreign(unique_name("cli-foreign"));
    write_file(foreign.path(), random_bytes());
    const CliResult r = run_cli({"info", foreign.name()});
    CHECK(r.exit_code == 1);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "not a shmreplay segment"));
  }
}

TEST_CASE("rm removes segments and refuses a foreign file") {
  const std::string a = unique_name("cli");
  const std::string b = unique_name("cli");
  SegmentGuard guard_a(a);
  SegmentGuard guard_b(b);
  REQUIRE(create(a).exit_code == 0);
  REQUIRE(create(b).exit_code == 0);

  const CliResult r = run_cli({"rm", a, b});
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(r.out == fmt::format("removed '{}'\nremoved '{}'\n", a, b));
  CHECK_FALSE(Buffer::exists(a));
  CHECK_FALSE(Buffer::exists(b));

  SegmentGuard foreign(unique_name("cli-foreign"));
  write_file(foreign.path(), random_bytes());
  const CliResult refused = run_cli({"rm", foreign.name()});
  CHECK(refused.exit_code == 1);
  CHECK(one_error_line(refused.err));
  CHECK(contains(refused.err, "not a shmreplay segment"));
  CHECK(Buffer::exists(foreign.name()));

  const CliResult missing = run_cli({"rm", a});
  CHECK(missing.exit_code == 1);
  CHECK(one_error_line(missing.err));
  CHECK(contains(missing.err, "does not exist"));
}

// The STATE column of env 0's row in `info`'s text, when its OWNER column is `owner`; "" when there is no row.
std::string env0_state_text(const std::string& name, uint64_t owner) {
  std::istringstream lines(run_cli({"info", name}).out);
  for (std::string line; std::getline(lines, line);) {
    const auto w = words(line);
    if (w.size() >= 7 && w[0] == "0" && w[5] == std::to_string(owner)) return w[6];
  }
  return "";
}

TEST_CASE("info reports an env's lease holder as alive, idle when it stopped pushing, and dead when it vanished") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 3, 10).exit_code == 0);
  Buffer b = Buffer::open(name);
  const uint64_t me = static_cast<uint64_t>(::getpid());
  const uint64_t ticks = own_start_ticks();
  layout::EnvControl& env0 = b.env_control(0);
  const auto now_ns = [] {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  };
  env0.owner_start_ticks.store(ticks);
  env0.lease_since_ns.store(now_ns());
  env0.lease.store(layout::pack_owner(me, ticks), std::memory_order_release);

  {
    const json j = parse_json(run_cli({"info", name, "--json"}).out);
    CHECK(j["envs"][0]["owner"] == "alive");
    CHECK(j["envs"][0]["owner_pid"] == me);
    CHECK(j["envs"][0]["owner_start_ticks"] == ticks);
    CHECK(j["envs"][1]["owner"] == "none");
    CHECK(j["live_writers"] == 1);
    CHECK(env0_state_text(name, me) == "alive");
  }
  {
    // Alive, but its last push was a minute ago: idle.
    env0.last_push_ns.store(now_ns() - 60'000'000'000ull);
    const json j = parse_json(run_cli({"info", name, "--json"}).out);
    CHECK(j["envs"][0]["owner"] == "alive");
    CHECK(j["envs"][0]["state"] == "idle");
    CHECK(env0_state_text(name, me) == "idle");
  }

  // A child that has exited and been reaped: its pid names no process (or, if reused, one with another start).
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const uint64_t gone = static_cast<uint64_t>(child);
  env0.owner_start_ticks.store(1);
  env0.lease.store(layout::pack_owner(gone, 1), std::memory_order_release);
  {
    const json j = parse_json(run_cli({"info", name, "--json"}).out);
    CHECK(j["envs"][0]["owner"] == "dead");
    CHECK(j["envs"][0]["owner_pid"] == gone);
    CHECK(j["live_writers"] == 0);
  }
}

TEST_CASE("info shows the first 64 envs as text and says how many it omits, while --json has them all") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 100, 1).exit_code == 0);
  const CliResult text = run_cli({"info", name});
  REQUIRE(text.exit_code == 0);
  CHECK(contains(text.out, "36 more envs omitted"));
  CHECK(parse_json(run_cli({"info", name, "--json"}).out)["envs"].size() == 100);
}
