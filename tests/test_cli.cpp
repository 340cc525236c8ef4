// The `shmreplay` CLI, run as a child process: output, --json forms, exit codes and error lines; watch, dump, save
// and load against buffers filled by writer processes that keep pushing.
#include <doctest/doctest.h>

#include <chrono>

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shmreplay/buffer.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/layout.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/version.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"

using namespace shmreplay;
using test::file_mode;
using test::UmaskGuard;
using nlohmann::json;
using test::check_env_payloads;
using test::payload_bytes;
using test::SegmentGuard;
using test::stored_step;
using test::unique_name;

namespace {

const std::string kSpec = "obs:f32[4] action:i32 reward:f32 done:bool";  // 25 bytes per step

struct CliResult {
  int exit_code = -1;  ///< the exit status, or 128 + signal
  std::string out;
  std::string err;
};

// The CLI's path and `args` as execv's argv (made before fork: the child only execs).
struct CliArgv {
  explicit CliArgv(const std::vector<std::string>& args) : storage{SHMREPLAY_CLI_PATH} {
    storage.insert(storage.end(), args.begin(), args.end());
    for (std::string& s : storage) argv.push_back(s.data());
    argv.push_back(nullptr);
  }
  std::vector<std::string> storage;
  std::vector<char*> argv;
};

// Runs the CLI with `args` (no shell), collecting stdout and stderr through pipes until both close.
CliResult run_cli(const std::vector<std::string>& args) {
  int out_pipe[2];
  int err_pipe[2];
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
  CliArgv cli(args);

  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::execv(cli.argv[0], cli.argv.data());
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

// The user name of `uid` from the password database, or "" when it has none.
std::string user_name(uid_t uid) {
  const passwd* pw = ::getpwuid(uid);
  return pw != nullptr ? std::string(pw->pw_name) : std::string();
}

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
  CHECK(j["priorities"].is_null());  // created without priorities
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

TEST_CASE("create --populate always with --progress reports populating to 100%; never reports nothing; a bad "
          "value is a usage error") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult always = run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", "obs:u8[4096]",
                                    "--populate", "always", "--progress"});
  REQUIRE(always.exit_code == 0);
  CHECK(contains(always.out, fmt::format("created '{}'", name)));
  CHECK(contains(line_starting(always.err, fmt::format("populating '{}': 100%", name)), "of"));

  const CliResult never = run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", "obs:u8[4096]",
                                   "--replace", "--populate", "never", "--progress"});
  REQUIRE(never.exit_code == 0);
  CHECK(never.err.empty());

  const CliResult bad = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--replace",
                                 "--populate", "sometimes"});
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
        std::vector<std::string>{"NAME", "ENVS", "CAPACITY", "FILL", "STEPS", "BYTES", "WRITERS", "OWNER", "AGE"});
  const std::vector<std::string> row = words(line_starting(r.out, name + " "));
  REQUIRE(row.size() == 10);  // BYTES is two words, e.g. "1.0 MiB"
  CHECK(row[1] == "3");
  CHECK(row[2] == "100");
  CHECK(row[3] == "0.0%");
  CHECK(row[4] == "0");
  CHECK(row[7] == "0");
  const std::string me = user_name(::geteuid());
  CHECK(row[8] == (me.empty() ? std::to_string(::geteuid()) : me));
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
  CHECK((*mine)["owner_uid"] == ::geteuid());
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
  CHECK(words(line_starting(text.out, source + " ")).size() == 10);

  const CliResult js = run_cli({"ls", "--json"});
  REQUIRE(js.exit_code == 0);
  const json j = parse_json(js.out);
  const json* entry = find_named(j, truncated.name());
  REQUIRE(entry != nullptr);
  CHECK(entry->size() == 2);
  CHECK(contains((*entry)["error"].get<std::string>(), "100 bytes"));
}

TEST_CASE("create --priority-exponent makes a buffer with priorities, and info shows their totals and maximum") {
  const std::string name = unique_name("cliprio");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "8", "--schema", "x:u8", "--priority-exponent",
                   "0.5"}).exit_code == 0);
  {
    Buffer b = Buffer::open(name);
    CHECK(b.priority_exponent() == 0.5);
    Writer w(b, std::vector<uint64_t>{0, 1});
    const uint8_t x[2] = {1, 2};
    const uint64_t ids[2] = {0, 1};
    const float prio[2] = {4.0f, 9.0f};
    const FieldBytes fields[1] = {field_bytes(std::span<const uint8_t>(x, 2))};
    w.push(std::span<const uint64_t>(ids, 2), fields, std::span<const float>(prio, 2));
  }
  const CliResult text = run_cli({"info", name});
  REQUIRE(text.exit_code == 0);
  CHECK(contains(text.out, "alpha 0.5; total priority^alpha 5 over the replay view, max priority 9"));
  const CliResult r = run_cli({"info", name, "--json"});
  REQUIRE(r.exit_code == 0);
  const json j = parse_json(r.out);
  CHECK(j["priorities"]["exponent"] == 0.5);
  CHECK(j["priorities"]["total"] == 5.0);  // 4^0.5 + 9^0.5
  CHECK(j["priorities"]["max_priority"] == 9.0);
  CHECK(j["envs"][1]["priority_total"] == 3.0);
}

TEST_CASE("create --samples-per-insert makes a rate-limited buffer; limit shows, changes and removes it; info shows "
          "its counts") {
  const std::string name = unique_name("clilimit");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", "x:u8", "--samples-per-insert", "2",
                   "--error-buffer", "16", "--min-size-to-sample", "4"}).exit_code == 0);
  {
    Buffer b = Buffer::open(name);
    REQUIRE(b.rate_limit().has_value());
    CHECK(*b.rate_limit() == RateLimit::ratio(2.0, 4, 16.0));
    Writer w(b, std::vector<uint64_t>{0, 1});
    const uint8_t x[2] = {1, 2};
    const uint64_t ids[2] = {0, 1};
    const FieldBytes fields[1] = {field_bytes(std::span<const uint8_t>(x, 2))};
    for (int i = 0; i < 5; ++i) w.push(std::span<const uint64_t>(ids, 2), fields);
  }
  const CliResult info = run_cli({"info", name});
  REQUIRE(info.exit_code == 0);
  CHECK(contains(info.out, "rate limit    samples_per_insert 2, min_size_to_sample 4, error buffer 16"));
  CHECK(contains(info.out, "10 inserts, 0 samples (0 per insert), error 20"));
  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["rate_limit"]["inserts"] == 10);
  CHECK(j["rate_limit"]["error"] == 20.0);
  CHECK(j["rate_limit"]["max_diff"] == 24.0);
  // Shown without a change (read-only), then changed, then removed.
  const CliResult shown = run_cli({"limit", name});
  REQUIRE(shown.exit_code == 0);
  CHECK(contains(shown.out, "rate limit samples_per_insert 2"));
  CHECK(Buffer::open(name).rate_limit_state().changes == 0);
  const CliResult changed = run_cli({"limit", name, "--min-size-to-sample", "8"});  // the ratio is kept
  REQUIRE(changed.exit_code == 0);
  CHECK(contains(changed.out, "new rate limit samples_per_insert 2, min_size_to_sample 8"));
  CHECK(*Buffer::open(name).rate_limit() == RateLimit::ratio(2.0, 8, 16.0));
  CHECK(run_cli({"limit", name, "--off"}).exit_code == 0);
  CHECK_FALSE(Buffer::open(name).rate_limit().has_value());
  CHECK(parse_json(run_cli({"limit", name, "--json"}).out)["rate_limit"].is_null());
  // Incomplete or impossible settings are refused with the reason.
  const CliResult half = run_cli({"limit", name, "--samples-per-insert", "2"});
  CHECK(half.exit_code == 1);
  CHECK(contains(half.err, "--samples-per-insert needs --error-buffer"));
  const CliResult tight = run_cli({"limit", name, "--samples-per-insert", "4", "--error-buffer", "1"});
  CHECK(tight.exit_code == 1);
  CHECK(contains(tight.err, "expected at least 4"));
  const CliResult both = run_cli({"limit", name, "--off", "--min-size-to-sample", "3"});
  CHECK(both.exit_code == 1);
  CHECK(contains(both.err, "--off removes the rate limiter"));
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
  layout::EnvControl& env0 = b.segment().env_control(0);
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

// ---------------------------------------------------------------------------------------------------------------
// watch, dump, save, load, and rm of segments in use

namespace {

const std::string kPayloadSpec = test::kPayloadSchema.to_string();  // hdr:u64[4] body:f32[13] tail:u8[29]

/// A writer process: leases `envs` of `name` and pushes self-checking payload steps (test::make_payload) until
/// stop() or kill(): flat out, or pausing 100 us after every 16 pushes (so that it leaves the other core to the
/// CLI processes under test).
class WriterProcess {
 public:
  WriterProcess(const std::string& name, std::vector<int32_t> envs, bool flat_out = false) {
    int stop_pipe[2];
    REQUIRE(::pipe2(stop_pipe, O_CLOEXEC) == 0);
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(stop_pipe[1]);
      int code = 0;
      try {
        Buffer b = Buffer::open(name);
        const std::vector<uint64_t> ids(envs.begin(), envs.end());
        Writer w(b, ids);
        test::PayloadPusher pusher;
        pollfd stop{stop_pipe[0], POLLIN, 0};
        for (uint64_t n = 1;; ++n) {
          pusher.push(w, envs);
          if (n % 64 == 0 && ::poll(&stop, 1, 0) != 0) break;  // the parent closed its end
          if (!flat_out && n % 16 == 0) ::usleep(100);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer process: %s\n", e.what());
        code = 2;
      }
      ::_exit(code);
    }
    ::close(stop_pipe[0]);
    stop_fd_ = stop_pipe[1];
  }
  WriterProcess(const WriterProcess&) = delete;
  WriterProcess& operator=(const WriterProcess&) = delete;
  ~WriterProcess() {
    if (pid_ > 0) kill();
    if (stop_fd_ >= 0) ::close(stop_fd_);
  }

  pid_t pid() const { return pid_; }

  /// Asks the writer to stop and returns its exit code (0: it pushed without error until asked).
  int stop() {
    ::close(stop_fd_);
    stop_fd_ = -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  /// SIGKILL: the writer dies holding its leases.
  void kill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  /// Waits until every env of `b` has published at least `steps` steps (the writer runs flat out; a writer that
  /// died fails the test instead of hanging it).
  void wait_for_heads(const Buffer& b, uint64_t steps) const {
    for (uint64_t e = 0; e < b.num_envs(); ++e) wait_for_env(b, e, steps);
  }
  /// Waits until env `env` of `b` has published at least `steps` steps.
  void wait_for_env(const Buffer& b, uint64_t env, uint64_t steps) const {
    while (b.segment().env_control(env).head.load() < steps) {
      REQUIRE(::waitpid(pid_, nullptr, WNOHANG) == 0);
      ::usleep(1000);
    }
  }

 private:
  pid_t pid_ = -1;
  int stop_fd_ = -1;
};

std::vector<int32_t> all_envs(uint64_t n) {
  std::vector<int32_t> ids;
  for (uint64_t e = 0; e < n; ++e) ids.push_back(static_cast<int32_t>(e));
  return ids;
}

// Creates a segment with the payload schema (in this process: the CLI's create has its own tests, and every CLI
// run costs a process start, which sanitizer builds make slow).
CliResult create_payload(const std::string& name, uint64_t envs, uint64_t capacity) {
  Buffer::create(name, envs, capacity, test::kPayloadSchema);
  return {0, "", ""};
}


std::vector<json> json_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    json j;
    REQUIRE_NOTHROW(j = json::parse(line));
    out.push_back(std::move(j));
  }
  return out;
}

std::string temp_file(const std::string& tag) { return fmt::format("/tmp/{}.ckpt", unique_name(tag)); }

// Removes a file when it goes out of scope.
struct FileGuard {
  std::string path;
  ~FileGuard() { std::remove(path.c_str()); }
};

// Writes `bytes` into a new file at `path` (the old one removed first: truncating in place is slow on ext4).
void replace_file(const std::string& path, std::string_view bytes) {
  std::remove(path.c_str());
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Fills envs of a quiet segment with payload steps from this process: env e gets steps[e] steps.
void push_payloads(const std::string& name, const std::vector<uint64_t>& steps) {
  Buffer b = Buffer::open(name);
  Writer w = Writer::range(b, 0, b.num_envs());
  test::PayloadPusher pusher;
  for (std::size_t e = 0; e < steps.size(); ++e) {
    for (uint64_t i = 0; i < steps[e]; ++i) pusher.push(w, {static_cast<int32_t>(e)});
  }
}

}  // namespace

TEST_CASE("save while a writer process keeps pushing, then load: every restored step is the one its writer published") {
  const std::string name = unique_name("cli-save");
  const std::string copy = unique_name("cli-load");
  SegmentGuard guard(name);
  SegmentGuard copy_guard(copy);
  FileGuard file{temp_file("cli-save")};
  REQUIRE(create_payload(name, 4, 128).exit_code == 0);
  const Buffer source = Buffer::open(name, {.read_only = true});
  WriterProcess writer(name, all_envs(4), /*flat_out=*/true);
  writer.wait_for_heads(source, 3 * 128);  // every ring lapped: the save must follow a moving window

  const CliResult saved = run_cli({"save", name, file.path, "--json"});
  REQUIRE(saved.exit_code == 0);
  CHECK(saved.err.empty());  // stderr is not a terminal and --progress was not given: no progress bar
  const json s = parse_json(saved.out);
  CHECK(s["source"] == name);
  CHECK(s["file"] == file.path);
  CHECK(s["num_envs"] == 4);
  CHECK(s["capacity"] == 128);
  CHECK(s["schema_spec"] == kPayloadSpec);
  CHECK(s["format"] == "1.0");
  REQUIRE(s["envs"].size() == 4);
  uint64_t total = 0;
  for (const json& e : s["envs"]) {
    CAPTURE(e.dump());
    // A full window: claimed = head holds the last 128 steps; claimed = head + 1 (a write in progress), 127.
    CHECK(e["steps"].get<uint64_t>() == (e["claimed"] == e["head"] ? 128u : 127u));
    CHECK(e["first_step"].get<uint64_t>() + e["steps"].get<uint64_t>() == e["head"].get<uint64_t>());
    CHECK(e["head"].get<uint64_t>() <= source.segment().env_control(e["env"].get<uint64_t>()).head.load());
    total += e["steps"].get<uint64_t>();
  }
  CHECK(s["total_steps"] == total);
  CHECK(s["file_bytes"] == whole_file(file.path).size());
  CHECK(writer.stop() == 0);

  const CliResult loaded = run_cli({"load", file.path, copy, "--json"});
  REQUIRE(loaded.exit_code == 0);
  const json l = parse_json(loaded.out);
  CHECK(l["name"] == copy);
  CHECK(l["created"] == true);
  CHECK(l["checkpoint"]["total_steps"] == total);

  const Buffer restored = Buffer::open(copy, {.read_only = true});
  CHECK(restored.schema() == test::kPayloadSchema);
  for (uint64_t e = 0; e < 4; ++e) {
    CAPTURE(e);
    const json& saved_env = s["envs"][e];
    CHECK(restored.segment().env_control(e).head.load() == saved_env["head"].get<uint64_t>());
    CHECK(restored.segment().env_control(e).claimed.load() == saved_env["claimed"].get<uint64_t>());
    CHECK(check_env_payloads(restored, e) == "");
  }

  // dump --json --full of the copy reads the same steps back: each header is {env, step, version 0, checksum}.
  const CliResult dumped = run_cli({"dump", copy, "--json", "--full", "--field", "hdr"});
  REQUIRE(dumped.exit_code == 0);
  const std::vector<json> rows = json_lines(dumped.out);
  CHECK(rows.size() == total);
  for (const json& row : rows) {
    const uint64_t env = row["env"];
    const uint64_t step = row["step"];
    const test::Payload p = test::make_payload(env, step, 0);
    CHECK(row["fields"]["hdr"] == json{p.hdr[0], p.hdr[1], p.hdr[2], p.hdr[3]});
  }
}

TEST_CASE("save and load show progress on stderr with --progress") {
  const std::string name = unique_name("cli-progress");
  SegmentGuard guard(name);
  FileGuard file{temp_file("cli-progress")};
  REQUIRE(create_payload(name, 2, 64).exit_code == 0);
  push_payloads(name, {100, 10});
  const CliResult saved = run_cli({"save", name, file.path, "--progress"});
  REQUIRE(saved.exit_code == 0);
  CHECK(contains(saved.out, fmt::format("saved '{}' to '{}'", name, file.path)));
  CHECK(contains(saved.out, "74 steps stored"));
  CHECK(contains(saved.err, "saving"));
  CHECK(contains(saved.err, "100%"));
  const CliResult loaded = run_cli({"load", file.path, "--progress"});  // into the segment it came from
  REQUIRE(loaded.exit_code == 0);
  CHECK(contains(loaded.out, fmt::format("into existing segment '{}'", name)));
  CHECK(contains(loaded.err, "verifying"));
  CHECK(contains(loaded.err, "loading"));
}

TEST_CASE("load refuses truncated and corrupt checkpoints with one error line and leaves the target untouched") {
  const std::string name = unique_name("cli-bad");
  const std::string fresh = unique_name("cli-fresh");
  SegmentGuard guard(name);
  SegmentGuard fresh_guard(fresh);
  FileGuard good{temp_file("cli-good")};
  FileGuard bad{temp_file("cli-bad")};
  REQUIRE(create_payload(name, 3, 16).exit_code == 0);
  push_payloads(name, {20, 5, 0});
  REQUIRE(run_cli({"save", name, good.path}).exit_code == 0);
  push_payloads(name, {3, 3, 3});  // the target now differs from the checkpoint
  const std::string target_before = whole_file(guard.path());
  const std::string whole = whole_file(good.path);
  const CheckpointInfo info = verify_checkpoint(good.path);
  const uint64_t records = info.envs[0].offset + sizeof(checkpoint_format::EnvSection);

  const auto refused = [&](const std::string& what, Errc code, bool also_new) {
    CAPTURE(what);
    for (const std::string& target : also_new ? std::vector<std::string>{name, fresh} : std::vector<std::string>{name}) {
      const CliResult r = run_cli({"load", bad.path, target});
      CHECK(r.exit_code == 1);
      CHECK(r.out.empty());
      CHECK(one_error_line(r.err));
      CHECK(contains(r.err, bad.path));
      CHECK(contains(r.err, code == Errc::truncated ? "truncated" : "corrupt"));
    }
    CHECK(whole_file(guard.path()) == target_before);
    CHECK_FALSE(Buffer::exists(fresh));
  };
  // A few cuts and flips against the existing target, the first of each also against a new name
  // (test_checkpoint tries every byte of the headers against the library).
  for (const uint64_t length : {records + 100, uint64_t{100}, uint64_t{whole.size() - 1}}) {
    replace_file(bad.path, std::string_view(whole).substr(0, length));
    refused(fmt::format("truncated to {} bytes", length), Errc::truncated, length == records + 100);
  }
  for (const uint64_t at : {records + 50, uint64_t{130}, info.envs[1].offset + 16}) {
    std::string flipped = whole;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x40);
    replace_file(bad.path, flipped);
    refused(fmt::format("byte {} flipped", at), Errc::corrupt, at == records + 50);
  }
  const CliResult good_load = run_cli({"load", good.path, name});
  CHECK(good_load.exit_code == 0);
  CHECK(whole_file(guard.path()) != target_before);
}

TEST_CASE("load into an existing segment with a different schema is refused and names the difference") {
  const std::string name = unique_name("cli-schema");
  const std::string other = unique_name("cli-schema-other");
  SegmentGuard guard(name);
  SegmentGuard other_guard(other);
  FileGuard file{temp_file("cli-schema")};
  REQUIRE(create_payload(name, 2, 8).exit_code == 0);
  push_payloads(name, {3, 3});
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  Buffer::create(other, 2, 8, Schema::parse("hdr:u64[4] body:f32[12] tail:u8[29]"));
  const std::string before = whole_file(other_guard.path());
  const CliResult r = run_cli({"load", file.path, other});
  CHECK(r.exit_code == 1);
  CHECK(one_error_line(r.err));
  CHECK(contains(r.err, "field 'body'"));
  CHECK(contains(r.err, "schema"));
  CHECK(whole_file(other_guard.path()) == before);

  const CliResult not_a_checkpoint = run_cli({"load", guard.path(), other});
  CHECK(not_a_checkpoint.exit_code == 1);
  CHECK(one_error_line(not_a_checkpoint.err));
  CHECK(contains(not_a_checkpoint.err, "not a shmreplay checkpoint"));
}

TEST_CASE("load refuses a segment with a live writer, and rm refuses it unless --force") {
  const std::string name = unique_name("cli-busy");
  SegmentGuard guard(name);
  FileGuard file{temp_file("cli-busy")};
  REQUIRE(create_payload(name, 2, 32).exit_code == 0);
  push_payloads(name, {5, 5});
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});
  {
    WriterProcess writer(name, {1});
    writer.wait_for_env(b, 1, 40);

    const CliResult load = run_cli({"load", file.path, name});
    CHECK(load.exit_code == 1);
    CHECK(one_error_line(load.err));
    CHECK(contains(load.err, fmt::format("pid {}", writer.pid())));

    const CliResult rm = run_cli({"rm", name});
    CHECK(rm.exit_code == 1);
    CHECK(one_error_line(rm.err));
    CHECK(contains(rm.err, fmt::format("1 live writer (pid {})", writer.pid())));
    CHECK(contains(rm.err, "--force"));
    CHECK(Buffer::exists(name));
    writer.kill();  // dies holding env 1's lease
  }
  // A dead writer does not hold the segment: load and rm proceed (the load takes the dead lease over).
  CHECK(run_cli({"load", file.path, name}).exit_code == 0);
  CHECK(b.segment().env_control(1).head.load() == 5);  // the checkpoint's head, taken over from the dead writer
  const CliResult rm = run_cli({"rm", name});
  CHECK(rm.exit_code == 0);
  CHECK_FALSE(Buffer::exists(name));

  // --force removes a segment in use; its writer keeps working on its mapping.
  REQUIRE(create_payload(name, 2, 32).exit_code == 0);
  WriterProcess writer(name, {0, 1});
  writer.wait_for_heads(Buffer::open(name, {.read_only = true}), 1);
  CHECK(run_cli({"rm", name}).exit_code == 1);
  const CliResult forced = run_cli({"rm", "--force", name});
  CHECK(forced.exit_code == 0);
  CHECK(forced.out == fmt::format("removed '{}'\n", name));
  CHECK_FALSE(Buffer::exists(name));
  CHECK(writer.stop() == 0);
}

TEST_CASE("watch --count prints plain frames with rates, fill bars and writer liveness") {
  const std::string name = unique_name("cli-watch");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 3, 64).exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});
  WriterProcess writer(name, {0, 2});
  writer.wait_for_env(b, 0, 64);
  writer.wait_for_env(b, 2, 64);

  const CliResult r = run_cli({"watch", name, "--count", "2", "--interval", "0.05"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') > 10);
  const std::string frame2 = r.out.substr(r.out.find("\n\nshmreplay watch") + 2);  // frames are blank-line separated
  CHECK(frame2.starts_with(fmt::format("shmreplay watch '{}'", name)));
  CHECK(contains(r.out.substr(0, r.out.find("\n\n")), "shmreplay watch"));
  const std::vector<std::string> pushes = words(line_starting(frame2, "pushes/s"));
  REQUIRE(pushes.size() >= 2);
  CHECK(std::stod(pushes[1]) >= 0.0);
  CHECK(contains(line_starting(frame2, "writers"), "1 alive, 0 dead, 1 env without a writer"));
  CHECK(contains(line_starting(frame2, "learner"), "none attached"));
  const std::vector<std::string> env0 = words(line_starting(frame2, "    0  ["));
  REQUIRE(env0.size() >= 10);
  // A full ring: 64 steps, or 63 while a write is in progress (its slot is not part of the view).
  CHECK(env0[1] == "[####################]");
  CHECK((env0[2] == "100.0%" || env0[2] == "98.4%"));
  CHECK(env0[7] == std::to_string(writer.pid()));
  CHECK(env0[8] == "alive");
  const std::vector<std::string> env1 = words(line_starting(frame2, "    1  ["));
  REQUIRE(env1.size() >= 10);
  CHECK(env1[1] == "[--------------------]");
  CHECK(env1[8] == "none");

  const CliResult once = run_cli({"watch", name, "--once", "--interval", "0.02"});
  CHECK(once.exit_code == 0);
  CHECK(std::count(once.out.begin(), once.out.end(), '\n') == 13);  // a title, 7 summary lines, a blank, a table of 3
  CHECK(writer.stop() == 0);
}

TEST_CASE("watch --json prints one parseable frame per line") {
  const std::string name = unique_name("cli-watch-json");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 2, 64).exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});
  WriterProcess writer(name, {0, 1});
  writer.wait_for_heads(b, 64);
  const CliResult r = run_cli({"watch", name, "--json", "--count", "3", "--interval", "0.03"});
  REQUIRE(r.exit_code == 0);
  const std::vector<json> frames = json_lines(r.out);
  REQUIRE(frames.size() == 3);
  uint64_t pushed = 0;
  for (const json& f : frames) {
    CHECK(f["name"] == name);
    CHECK(f["num_envs"] == 2);
    CHECK(f["live_writers"] == 1);
    CHECK(f["dead_writers"] == 0);
    CHECK(f["interval_s"].get<double>() > 0.0);
    CHECK(f["pushes_per_s"].get<double>() >= 0.0);
    CHECK(f["total_pushed"].get<uint64_t>() >= pushed);
    pushed = f["total_pushed"].get<uint64_t>();
    CHECK(f["fill"].get<double>() >= 127.0 / 128);  // full, or one slot being rewritten
    CHECK(f["learner"]["state"] == "none");
    REQUIRE(f["envs"].size() == 2);
    CHECK(f["envs"][1]["owner_pid"] == writer.pid());
    CHECK(f["envs"][1]["state"] == "alive");
    CHECK(f["envs"][1]["length"].get<uint64_t>() >= 63);
    CHECK(f["envs"][1]["last_push_age_s"].is_number());
  }
  CHECK(writer.stop() == 0);

  CHECK(run_cli({"watch", name, "--once", "--count", "2"}).exit_code == 2);
  CHECK(run_cli({"watch", name, "--interval", "0"}).exit_code == 2);
}

TEST_CASE("dump selects envs, the last steps, a step range and fields, and summarises large arrays") {
  const std::string name = unique_name("cli-dump");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 3, 8).exit_code == 0);
  push_payloads(name, {12, 3, 0});  // env 0 wrapped: steps 4..11 stored

  // The whole view as a table, arrays summarised.
  const CliResult all = run_cli({"dump", name});
  REQUIRE(all.exit_code == 0);
  CHECK(words(line_starting(all.out, "ENV")) == std::vector<std::string>{"ENV", "STEP", "hdr", "body", "tail"});
  CHECK(std::count(all.out.begin(), all.out.end(), '\n') == 1 + 8 + 3);
  const std::string row = line_starting(all.out, "  0     4  ");
  CHECK(contains(row, "[0, 4, 0, "));    // hdr has 4 elements: printed whole
  CHECK(contains(row, "f32[13] min="));  // body has 13: summarised
  CHECK(contains(row, "u8[29] min="));
  CHECK(contains(row, "first=["));
  CHECK(line_starting(all.out, "  0     3  ").empty());  // overwritten
  CHECK_FALSE(line_starting(all.out, "  1     2  ").empty());

  // --env and --last, as JSON lines with summaries.
  const std::vector<json> last = json_lines(run_cli({"dump", name, "--env", "0,1", "--last", "2", "--json"}).out);
  REQUIRE(last.size() == 4);
  CHECK(last[0]["env"] == 0);
  CHECK(last[0]["step"] == 10);
  CHECK(last[1]["step"] == 11);
  CHECK(last[2]["env"] == 1);
  CHECK(last[2]["step"] == 1);
  const json& body = last[0]["fields"]["body"];
  const test::Payload p = test::make_payload(0, 10, 0);
  CHECK(body["dtype"] == "f32");
  CHECK(body["shape"] == json{13});
  CHECK(body["first"][0] == p.body[0]);
  double lo = p.body[0], hi = p.body[0], sum = 0;
  for (const float v : p.body) {
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
    sum += v;
  }
  CHECK(body["min"] == lo);
  CHECK(body["max"] == hi);
  CHECK(body["mean"].get<double>() == doctest::Approx(sum / 13));

  // --steps, --field and --full.
  const std::vector<json> range =
      json_lines(run_cli({"dump", name, "--env", "0", "--steps", "6:9", "--field", "tail", "--full", "--json"}).out);
  REQUIRE(range.size() == 3);
  for (std::size_t i = 0; i < range.size(); ++i) {
    const uint64_t step = 6 + i;
    CHECK(range[i]["step"] == step);
    CHECK(range[i]["fields"].size() == 1);
    const test::Payload q = test::make_payload(0, step, 0);
    CHECK(range[i]["fields"]["tail"] == std::vector<uint64_t>(q.tail, q.tail + test::kTail));
  }
  const CliResult none = run_cli({"dump", name, "--env", "2"});
  CHECK(none.exit_code == 0);
  CHECK(contains(none.out, "no stored steps match"));

  // Errors: an unknown field or env (exit 1), conflicting or malformed selections (usage, exit 2).
  const CliResult field = run_cli({"dump", name, "--field", "nope"});
  CHECK(field.exit_code == 1);
  CHECK(one_error_line(field.err));
  CHECK(contains(field.err, "'nope'"));
  CHECK(contains(field.err, "hdr, body, tail"));
  const CliResult env = run_cli({"dump", name, "--env", "3"});
  CHECK(env.exit_code == 1);
  CHECK(contains(env.err, "env ids run from 0 to 2"));
  CHECK(run_cli({"dump", name, "--last", "2", "--steps", "1:3"}).exit_code == 2);
  CHECK(run_cli({"dump", name, "--steps", "5:3"}).exit_code == 2);
}

TEST_CASE("ls and info report fill, live writers, totals and the learner of a buffer in use") {
  const std::string name = unique_name("cli-busy-info");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 2, 16).exit_code == 0);
  Buffer b = Buffer::open(name);
  WriterProcess writer(name, {0});
  writer.wait_for_env(b, 0, 16);
  Sampler learner(b);
  Rng rng(3);
  SampleBatch batch;
  learner.sample(View::replay, 5, 2, 1.0, rng, batch);

  const json listed = parse_json(run_cli({"ls", "--json"}).out);
  const json* mine = find_named(listed, name);
  REQUIRE(mine != nullptr);
  // env 0 full (or with one slot being rewritten by its writer), env 1 empty
  CHECK(((*mine)["fill"] == 0.5 || (*mine)["fill"] == 15.0 / 32));
  CHECK((*mine)["live_writers"] == 1);
  CHECK((*mine)["learner"] == "alive");
  CHECK((*mine)["age_s"].get<double>() >= 0.0);
  const std::vector<std::string> row = words(line_starting(run_cli({"ls"}).out, name + " "));
  REQUIRE(row.size() == 10);
  CHECK((row[3] == "50.0%" || row[3] == "46.9%"));
  CHECK(row[7] == "1");

  const json info = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(info["live_writers"] == 1);
  CHECK(info["replay_steps"].get<uint64_t>() >= 15);
  CHECK(info["total_pushed"].get<uint64_t>() >= 16);
  CHECK(info["learner"]["state"] == "alive");
  CHECK(info["learner"]["pid"] == ::getpid());
  CHECK(info["learner"]["rows_sampled"] == 5);
  CHECK(info["learner"]["sample_calls"] == 1);
  CHECK(info["envs"][0]["owner"] == "alive");
  CHECK(info["envs"][0]["owner_pid"] == writer.pid());
  CHECK(info["envs"][0]["last_push_ns"].get<uint64_t>() > 0);
  const std::string text = run_cli({"info", name}).out;
  CHECK(contains(line_starting(text, "sampled"), "5 rows in 1 call"));
  CHECK(contains(line_starting(text, "learner"), fmt::format("pid {} (alive", ::getpid())));
  CHECK(contains(line_starting(text, "online steps"), "full)"));
  CHECK(writer.stop() == 0);
}

TEST_CASE("create names episode fields and info shows completed episodes, per env and in JSON") {
  const std::string name = unique_name("cli-episodes");
  SegmentGuard guard(name);
  const CliResult c = run_cli({"create", name, "--envs", "2", "--capacity", "16", "--schema",
                               "obs:f32 reward:f32 terminated:bool truncated:bool", "--terminated", "terminated",
                               "--truncated", "truncated", "--reward", "reward", "--episode-queue", "4"});
  INFO(c.err);
  REQUIRE(c.exit_code == 0);
  {
    Buffer buf = Buffer::open(name);
    REQUIRE(buf.has_episodes());
    Writer writer(buf, {0, 1});
    // env 0: an episode of 3 steps (returns 1+2+3), then one cut by truncation after 2 steps; env 1: one step.
    const float rewards[] = {1, 2, 3, 4, 5};
    const uint8_t term[] = {0, 0, 1, 0, 0}, trunc[] = {0, 0, 0, 0, 1};
    for (int k = 0; k < 5; ++k) {
      const float obs = 0;
      writer.push_one(0, {value_bytes(obs), value_bytes(rewards[k]), value_bytes(term[k]), value_bytes(trunc[k])});
    }
    const float obs = 0, reward = 7;
    const uint8_t no = 0;
    writer.push_one(1, {value_bytes(obs), value_bytes(reward), value_bytes(no), value_bytes(no)});
  }
  const CliResult text = run_cli({"info", name});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("2 completed, 2 waiting for the learner, 0 dropped (queue 4 per env)") != std::string::npos);
  CHECK(text.out.find("terminated=terminated truncated=truncated reward=reward") != std::string::npos);
  CHECK(text.out.find("2 steps, return 9, truncated") != std::string::npos);
  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["episodes"]["completed"] == 2);
  CHECK(j["episodes"]["queue_depth"] == 2);
  CHECK(j["episodes"]["queue_capacity"] == 4);
  CHECK(j["envs"][0]["episodes_completed"] == 2);
  CHECK(j["envs"][0]["last_episode"]["length"] == 2);
  CHECK(j["envs"][0]["last_episode"]["return"] == 9.0);
  CHECK(j["envs"][0]["last_episode"]["end"] == "truncated");
  CHECK(j["envs"][1]["episodes_completed"] == 0);
  CHECK(j["envs"][1]["episode_start"] == 0);

  const CliResult bad = run_cli({"create", unique_name("cli-episodes-bad"), "--envs", "1", "--capacity", "4",
                                 "--schema", "obs:f32 done:f32", "--done", "done"});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("done") != std::string::npos);
}

TEST_CASE("save of a private segment writes a private file even with umask 0") {
  const std::string name = unique_name("cli-private");
  SegmentGuard guard(name);
  FileGuard file{temp_file("cli-private")};
  Buffer::create(name, 2, 16, test::kPayloadSchema, {.mode = 0600});
  push_payloads(name, {5, 20});
  {
    const UmaskGuard open_umask(0);
    REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  }
  CHECK(file_mode(file.path) == 0600);  // not 0666: the buffer's steps stay private
}

TEST_CASE("--mode with execute, set-id or sticky bits is a usage error naming the mode; 0666 is created with a warning") {
  const std::string name = unique_name("cli-mode");
  SegmentGuard guard(name);
  for (const std::string mode : {"4777", "0755", "2660", "1666"}) {
    CAPTURE(mode);
    const CliResult r = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", mode});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, fmt::format("mode {} is not allowed", mode)));
    CHECK(contains(r.err, "expected a subset of 0666"));
    CHECK(r.out.empty());
    CHECK_FALSE(Buffer::exists(name));
  }
  const CliResult setuid = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "4777"});
  CHECK(contains(setuid.err, "set-uid and execute bits (4111)"));

  const CliResult shared = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "0660"});
  REQUIRE(shared.exit_code == 0);
  CHECK(shared.err.empty());
  CHECK(file_mode(guard.path()) == 0660);
  const CliResult open_to_all =
      run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "0666", "--replace"});
  REQUIRE(open_to_all.exit_code == 0);
  CHECK(file_mode(guard.path()) == 0666);
  CHECK(open_to_all.err.starts_with(fmt::format("shmreplay: warning: mode 0666 makes segment '{}' world-writable", name)));
  CHECK(std::count(open_to_all.err.begin(), open_to_all.err.end(), '\n') == 1);

  // load --mode: the same rule for a new segment, and the same warning.
  FileGuard file{temp_file("cli-mode")};
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  const std::string copy = unique_name("cli-mode-load");
  SegmentGuard copy_guard(copy);
  const CliResult bad_load = run_cli({"load", file.path, copy, "--mode", "0700"});
  CHECK(bad_load.exit_code == 2);
  CHECK(contains(bad_load.err, "mode 0700 is not allowed"));
  CHECK_FALSE(Buffer::exists(copy));
  const CliResult loaded = run_cli({"load", file.path, copy, "--mode", "666"});
  REQUIRE(loaded.exit_code == 0);
  CHECK(file_mode(copy_guard.path()) == 0666);
  CHECK(contains(loaded.err, fmt::format("shmreplay: warning: mode 0666 makes segment '{}' world-writable", copy)));
}

namespace {

/// The CLI running as a child process, its stderr read line by line (stdout goes to /dev/null), so that a test
/// can signal it at a chosen moment: after a given progress line.
class RunningCli {
 public:
  /// `env`: "NAME=value" entries added to the CLI's environment.
  explicit RunningCli(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    int err_pipe[2];
    REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
    CliArgv cli(args);
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      for (const std::string& entry : env) ::putenv(const_cast<char*>(entry.c_str()));  // lives until exec
      ::execv(cli.argv[0], cli.argv.data());
      ::_exit(127);
    }
    ::close(err_pipe[1]);
    err_fd_ = err_pipe[0];
  }
  RunningCli(const RunningCli&) = delete;
  RunningCli& operator=(const RunningCli&) = delete;
  ~RunningCli() {
    if (pid_ > 0) finish(SIGKILL);
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  /// The next line the CLI writes to stderr (without its newline); nullopt once it closed stderr (it exited).
  std::optional<std::string> next_line() {
    for (;;) {
      const std::size_t nl = pending_.find('\n');
      if (nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return line;
      }
      char chunk[4096];
      const ssize_t got = ::read(err_fd_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return std::nullopt;
      pending_.append(chunk, static_cast<std::size_t>(got));
    }
  }

  /// Sends `sig` (0: none) and reaps the CLI; its exit code, or 128 + the signal that ended it. `usage`, when
  /// given, receives the CLI's resource usage (ru_maxrss: its peak resident set, in KiB).
  int finish(int sig, rusage* usage = nullptr) {
    if (sig != 0) ::kill(pid_, sig);
    int status = 0;
    rusage ignored{};
    while (::wait4(pid_, &status, 0, usage != nullptr ? usage : &ignored) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int err_fd_ = -1;
  std::string pending_;
};

// A quiet segment of `envs` x `capacity` steps of about 4 KiB, full, with step s of env e holding id = e << 32 | s
// in its first field: a checkpoint of it is large enough that loading and saving take a while.
const Schema kBigSchema = Schema::parse("id:u64 blob:u8[4088]");

void fill_big(const std::string& name, uint64_t envs, uint64_t capacity) {
  Buffer b = Buffer::create(name, envs, capacity, kBigSchema);
  Writer w = Writer::range(b, 0, envs);
  std::vector<std::byte> blob(4088);
  for (uint64_t s = 0; s < capacity; ++s) {
    for (uint64_t e = 0; e < envs; ++e) {
      const uint64_t id = e << 32 | s;
      std::memset(blob.data(), static_cast<int>(id & 0xff), blob.size());
      w.push_one(e, {FieldBytes{&id, sizeof id}, FieldBytes{blob.data(), blob.size()}});
    }
  }
}

}  // namespace

TEST_CASE("load into a new name killed or interrupted at any moment leaves no segment and no temporary file") {
  const std::string source = unique_name("cli-kload-src");
  SegmentGuard source_guard(source);
  FileGuard file{temp_file("cli-kload")};
  fill_big(source, 8, 1024);  // 32 MiB of steps
  {
    const Buffer b = Buffer::open(source, {.read_only = true});
    (void)save_checkpoint(b, file.path);
  }
  const std::string target = unique_name("cli-kload-dst");
  SegmentGuard target_guard(target);

  // Kill after the n-th progress line (the verify pass prints about 11, the load pass 11 more), and after fixed
  // delays; SIGKILL, SIGINT (Ctrl-C) and SIGTERM in turn.
  const int signals[] = {SIGKILL, SIGINT, SIGTERM};
  int runs = 0, killed_loading = 0, killed_verifying = 0, completed = 0;
  const auto check_nothing_left = [&](const std::string& when) {
    CAPTURE(when);
    CHECK_FALSE(Buffer::exists(target));
    CHECK(test::entries_containing(shm_directory(), target).empty());
  };
  const auto check_complete = [&] {  // the kill came after the load finished: the segment must be whole
    const Buffer b = Buffer::open(target, {.read_only = true});
    for (uint64_t e = 0; e < 8; ++e) {
      CHECK(b.segment().env_control(e).head.load() == 1024);
      CHECK(b.segment().env_control(e).lease.load() == 0);
    }
    CHECK(b.segment().global_control().learner_lease.load() == 0);
    Buffer::remove(target);
  };
  for (int after_lines = 1; after_lines <= 24; ++after_lines) {
    const int sig = signals[runs++ % 3];
    RunningCli cli({"load", file.path, target, "--progress"});
    std::string last;
    for (int n = 0; n < after_lines; ++n) {
      const auto line = cli.next_line();
      if (!line) break;
      last = *line;
    }
    const int code = cli.finish(sig);
    if (code == 0) {
      ++completed;
      check_complete();
      continue;
    }
    CHECK(code == 128 + sig);
    if (Buffer::exists(target)) {  // the signal came between naming the finished segment and exiting
      ++completed;
      check_complete();
      check_nothing_left(fmt::format("signal {} after naming the segment", sig));
      continue;
    }
    (last.starts_with("loading") ? killed_loading : killed_verifying)++;
    check_nothing_left(fmt::format("signal {} after {} lines, the last '{}'", sig, after_lines, last));
  }
  for (const int delay_us : {0, 200, 1000, 3000, 10000, 30000, 60000, 100000}) {
    const int sig = signals[runs++ % 3];
    RunningCli cli({"load", file.path, target});
    ::usleep(static_cast<useconds_t>(delay_us));
    const int code = cli.finish(sig);
    if (code == 0) {
      ++completed;
      check_complete();
      continue;
    }
    CHECK(code == 128 + sig);
    if (Buffer::exists(target)) {  // named just before the signal: it must be whole
      ++completed;
      check_complete();
    }
    check_nothing_left(fmt::format("signal {} after {} us", sig, delay_us));
  }
  MESSAGE(fmt::format("{} loads signalled: {} while verifying, {} while loading; {} had finished", runs,
                      killed_verifying, killed_loading, completed));
  CHECK(killed_loading >= 5);  // the moments that used to leave an empty, leased segment behind
  // And a load that is left alone still creates the segment, whole.
  REQUIRE(run_cli({"load", file.path, target}).exit_code == 0);
  check_complete();
}

TEST_CASE("save interrupted by SIGINT, SIGTERM or SIGHUP removes its temporary file and dies of the signal") {
  const std::string source = unique_name("cli-ksave");
  SegmentGuard source_guard(source);
  fill_big(source, 8, 1024);  // 32 MiB of steps
  FileGuard file{temp_file("cli-ksave")};
  const std::string dir = file.path.substr(0, file.path.rfind('/'));
  const std::string temp_prefix = file.path.substr(dir.size() + 1) + ".tmp-";
  const int signals[] = {SIGINT, SIGTERM, SIGHUP};
  int interrupted = 0, finished = 0;
  for (int after_lines = 1; after_lines <= 9; ++after_lines) {
    const int sig = signals[after_lines % 3];
    CAPTURE(sig);
    CAPTURE(after_lines);
    RunningCli cli({"save", source, file.path, "--progress"});
    for (int n = 0; n < after_lines; ++n) {  // the first line comes once the temporary file exists
      if (!cli.next_line()) break;
    }
    const int code = cli.finish(sig);
    if (code == 0) {  // it finished before the signal: a whole checkpoint
      ++finished;
      CHECK(verify_checkpoint(file.path).total_steps == 8 * 1024);
      std::remove(file.path.c_str());
    } else {
      ++interrupted;
      CHECK(code == 128 + sig);
      CHECK_FALSE(std::ifstream(file.path).good());
    }
    CHECK(test::entries_containing(dir, temp_prefix).empty());
  }
  MESSAGE(fmt::format("{} saves interrupted, {} had finished", interrupted, finished));
  CHECK(interrupted >= 3);

  // SIGKILL leaves no chance to clean up: the temporary file stays until the next save to the same file.
  {
    RunningCli cli({"save", source, file.path, "--progress"});
    for (int n = 0; n < 2; ++n) REQUIRE(cli.next_line());
    REQUIRE(cli.finish(SIGKILL) == 128 + SIGKILL);
  }
  CHECK(test::entries_containing(dir, temp_prefix).size() == 1);
  REQUIRE(run_cli({"save", source, file.path}).exit_code == 0);
  CHECK(test::entries_containing(dir, temp_prefix).empty());
  CHECK(verify_checkpoint(file.path).total_steps == 8 * 1024);
}

TEST_CASE("dump of a large env streams it in bounded memory, as a table and as JSON lines") {
  // One env of 8192 steps of 32 KiB: 256 MiB of steps. A dump reads every one of them, so its resident set holds
  // the segment's pages (a shared mapping); what it allocates on top must stay small, not another copy of the env.
  const std::string name = unique_name("cli-bigdump");
  SegmentGuard guard(name);
  const uint64_t steps = 8192;
  uint64_t segment_bytes = 0;
  {
    Buffer b = Buffer::create(name, 1, steps, Schema::parse("id:u64 blob:u8[32760]"));
    segment_bytes = b.total_bytes();
    Writer w(b, {0});
    std::vector<std::byte> blob(32760, std::byte{7});
    for (uint64_t s = 0; s < steps; ++s) w.push_one(0, {FieldBytes{&s, sizeof s}, FieldBytes{blob.data(), blob.size()}});
  }
  // In a sanitizer build freed chunks wait in ASan's quarantine (256 MiB by default); keep it small here.
  const std::vector<std::string> env = {"ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=16"};
  for (const bool as_json : {false, true}) {
    CAPTURE(as_json);
    std::vector<std::string> args{"dump", name, "--field", "id"};
    if (as_json) args.push_back("--json");
    RunningCli cli(args, env);
    std::string err;
    while (const auto line = cli.next_line()) err += *line + "\n";
    rusage usage{};
    REQUIRE(cli.finish(0, &usage) == 0);
    CHECK(err.empty());
    const uint64_t peak = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
    const uint64_t beyond = peak > segment_bytes ? peak - segment_bytes : 0;
    MESSAGE(fmt::format("dump{}: peak resident {} MiB, {} MiB beyond the {} MiB segment", as_json ? " --json" : "",
                        peak >> 20, beyond >> 20, segment_bytes >> 20));
    CHECK(beyond < (128ull << 20));  // the whole env copied at once would be 256 MiB more
  }
  // What was streamed is every step, in order (checked on the JSON form, on a smaller selection).
  const CliResult part = run_cli({"dump", name, "--field", "id", "--json", "--steps", "8000:"});
  REQUIRE(part.exit_code == 0);
  const std::vector<json> rows = json_lines(part.out);
  REQUIRE(rows.size() == 192);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i]["step"] == 8000 + i);
    CHECK(rows[i]["fields"]["id"] == 8000 + i);
  }
}

TEST_CASE("dump of an env whose counters are damaged fails with one error line naming the env and its counters") {
  const std::string name = unique_name("cli-damaged");
  SegmentGuard guard(name);
  {
    Buffer b = Buffer::create(name, 3, 8, Schema::parse("x:u32"));
    Writer w(b, {0, 1, 2});
    for (uint32_t s = 0; s < 5; ++s) {
      for (uint64_t e = 0; e < 3; ++e) w.push_one(e, {FieldBytes{&s, sizeof s}});
    }
  }
  {
    Buffer b = Buffer::open(name);  // a stray write: head far beyond claimed, which no writer leaves
    b.segment().env_control(1).head.store(uint64_t{1} << 62);
    b.segment().env_control(1).claimed.store(5);
  }
  for (const std::vector<std::string>& args : {std::vector<std::string>{"dump", name},
                                               std::vector<std::string>{"dump", name, "--json", "--env", "1"},
                                               std::vector<std::string>{"dump", name, "--env", "1", "--online"}}) {
    CAPTURE(args.size());
    const CliResult r = run_cli(args);
    CHECK(r.exit_code == 1);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, fmt::format("cannot dump env 1 of '{}': its counters are damaged", name)));
    CHECK(contains(r.err, fmt::format("head {}, claimed 5", uint64_t{1} << 62)));
    CHECK(contains(r.err, "more than its capacity of 8"));
    CHECK_FALSE(contains(r.err, "bad_alloc"));
  }
  // The undamaged envs still dump.
  const CliResult ok = run_cli({"dump", name, "--env", "0,2", "--json"});
  CHECK(ok.exit_code == 0);
  CHECK(json_lines(ok.out).size() == 10);
}

namespace {

// The part of `text` from `from` to the end of its line; "" when `from` does not occur.
std::string rest_of_line(const std::string& text, const std::string& from) {
  const std::size_t at = text.find(from);
  if (at == std::string::npos) return {};
  return text.substr(at, text.find('\n', at) - at);
}

}  // namespace

TEST_CASE("a segment of another user: info and ls show its owner; save, limit and load refuse it unless "
          "--allow-other-owner") {
  const std::string name = unique_name("cli-squat");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "8", "--schema", "x:u8", "--mode", "0666"}).exit_code ==
          0);
  {
    Buffer b = Buffer::open(name);
    Writer w(b, std::vector<uint64_t>{0, 1});
    for (uint8_t x = 0; x < 5; ++x) {
      for (uint64_t e = 0; e < 2; ++e) w.push_one(e, {FieldBytes{&x, 1}});
    }
  }
  if (::chown(guard.path().c_str(), 65534, static_cast<gid_t>(-1)) != 0) {
    MESSAGE("skipped: chown needs root");
    return;
  }
  const std::string nobody = user_name(65534);
  // The display commands show it, with its owner.
  const CliResult info = run_cli({"info", name});
  REQUIRE(info.exit_code == 0);
  const std::string owner = line_starting(info.out, "owner ");
  CHECK(contains(owner, "uid 65534"));
  CHECK(contains(owner, "another user"));
  CHECK(contains(owner, fmt::format("uid {}", ::geteuid())));
  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["owner_uid"] == 65534);
  const CliResult ls = run_cli({"ls"});
  REQUIRE(ls.exit_code == 0);
  CHECK(contains(line_starting(ls.out, "NAME"), "OWNER"));
  const std::vector<std::string> row = words(line_starting(ls.out, name + " "));
  CHECK(std::find(row.begin(), row.end(), nobody.empty() ? std::string("65534") : nobody) != row.end());
  const json all = parse_json(run_cli({"ls", "--json"}).out);
  const json* listed = find_named(all, name);
  REQUIRE(listed != nullptr);
  CHECK((*listed)["owner_uid"] == 65534);
  CHECK(run_cli({"dump", name}).exit_code == 0);
  CHECK(run_cli({"limit", name}).exit_code == 0);

  // The commands that take its data or write to it refuse it, naming both users, unless told otherwise.
  FileGuard file{temp_file("cli-squat")};
  const CliResult save = run_cli({"save", name, file.path});
  CHECK(save.exit_code == 1);
  CHECK(one_error_line(save.err));
  CHECK(contains(save.err, "uid 65534"));
  CHECK(contains(save.err, fmt::format("uid {}", ::geteuid())));
  CHECK(contains(save.err, "--allow-other-owner"));
  CHECK(::access(file.path.c_str(), F_OK) != 0);
  REQUIRE(run_cli({"save", name, file.path, "--allow-other-owner"}).exit_code == 0);

  const CliResult limit = run_cli({"limit", name, "--min-size-to-sample", "3"});
  CHECK(limit.exit_code == 1);
  CHECK(contains(limit.err, "--allow-other-owner"));
  CHECK(run_cli({"limit", name, "--min-size-to-sample", "3", "--allow-other-owner"}).exit_code == 0);

  const CliResult load = run_cli({"load", file.path, name});
  CHECK(load.exit_code == 1);
  CHECK(contains(load.err, "--allow-other-owner"));
  CHECK(run_cli({"load", file.path, name, "--allow-other-owner"}).exit_code == 0);
}

TEST_CASE("save refuses to replace a file that is not a checkpoint unless --force, and replaces a checkpoint") {
  const std::string name = unique_name("cli-saveover");
  SegmentGuard guard(name);
  REQUIRE(create(name, 2, 8).exit_code == 0);
  FileGuard file{temp_file("cli-saveover")};
  const std::string base = file.path.substr(file.path.rfind('/') + 1);
  const std::string precious = random_bytes();
  for (const std::string& bytes : {precious, std::string()}) {
    CAPTURE(bytes.size());
    replace_file(file.path, bytes);
    const CliResult r = run_cli({"save", name, file.path});
    CHECK(r.exit_code == 1);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, fmt::format("'{}'", file.path)));
    CHECK(contains(r.err, "not a shmreplay checkpoint"));
    CHECK(contains(r.err, "--force"));
    CHECK(whole_file(file.path) == bytes);
    CHECK(test::entries_containing("/tmp", base + ".tmp-").empty());
  }
  // A symbolic link there is not a checkpoint either (a save would replace the link, not write through it).
  FileGuard target{temp_file("cli-saveover-target")};
  replace_file(target.path, precious);
  std::remove(file.path.c_str());
  REQUIRE(::symlink(target.path.c_str(), file.path.c_str()) == 0);
  const CliResult link = run_cli({"save", name, file.path});
  CHECK(link.exit_code == 1);
  CHECK(contains(link.err, "symbolic link"));
  CHECK(whole_file(target.path) == precious);

  // --force replaces it; a checkpoint is then replaced without it.
  REQUIRE(run_cli({"save", name, file.path, "--force"}).exit_code == 0);
  CHECK(verify_checkpoint(file.path).num_envs == 2);
  CHECK(whole_file(target.path) == precious);
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  CHECK(verify_checkpoint(file.path).num_envs == 2);
}

TEST_CASE("limit changes only the settings it is given, and non-finite numbers are usage errors") {
  const std::string name = unique_name("cli-limitkeep");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", "x:u8", "--samples-per-insert", "2",
                   "--error-buffer", "16", "--min-size-to-sample", "4"}).exit_code == 0);
  const auto limit_now = [&] { return Buffer::open(name, {.read_only = true}).rate_limit(); };
  const CliResult min_size = run_cli({"limit", name, "--min-size-to-sample", "8"});
  REQUIRE(min_size.exit_code == 0);
  CHECK(contains(min_size.out, "new rate limit samples_per_insert 2, min_size_to_sample 8, error buffer 16"));
  CHECK(limit_now() == RateLimit::ratio(2.0, 8, 16.0));
  CHECK(run_cli({"limit", name, "--samples-per-insert", "3"}).exit_code == 0);
  CHECK(limit_now() == RateLimit::ratio(3.0, 8, 16.0));
  CHECK(run_cli({"limit", name, "--error-buffer", "24"}).exit_code == 0);
  CHECK(limit_now() == RateLimit::ratio(3.0, 8, 24.0));
  // From a minimum size alone, a ratio keeps the minimum size.
  REQUIRE(run_cli({"limit", name, "--off"}).exit_code == 0);
  REQUIRE(run_cli({"limit", name, "--min-size-to-sample", "5"}).exit_code == 0);
  CHECK(limit_now() == RateLimit::min_size(5));
  const CliResult half = run_cli({"limit", name, "--samples-per-insert", "2"});
  CHECK(half.exit_code == 1);
  CHECK(contains(half.err, "--samples-per-insert needs --error-buffer"));
  CHECK(run_cli({"limit", name, "--samples-per-insert", "2", "--error-buffer", "16"}).exit_code == 0);
  CHECK(limit_now() == RateLimit::ratio(2.0, 5, 16.0));

  for (const std::string& value : {std::string("inf"), std::string("-inf"), std::string("nan"), std::string("1e400")}) {
    for (const bool bad_ratio : {false, true}) {
      CAPTURE(value);
      CAPTURE(bad_ratio);
      const std::vector<std::string> pair = {"--samples-per-insert", bad_ratio ? value : "2", "--error-buffer",
                                             bad_ratio ? "16" : value};
      std::vector<std::string> args = {"limit", name};
      args.insert(args.end(), pair.begin(), pair.end());
      const CliResult r = run_cli(args);
      CHECK(r.exit_code == 2);
      CHECK(one_error_line(r.err));
      CHECK(contains(r.err, fmt::format("{}: '{}' is not a finite number", bad_ratio ? "--samples-per-insert"
                                                                                      : "--error-buffer",
                                        value)));
      const std::string other = unique_name("cli-limitinf");
      SegmentGuard other_guard(other);
      args = {"create", other, "--envs", "1", "--capacity", "8", "--schema", "x:u8"};
      args.insert(args.end(), pair.begin(), pair.end());
      const CliResult c = run_cli(args);
      CHECK(c.exit_code == 2);
      CHECK(contains(c.err, fmt::format("'{}' is not a finite number", value)));
      CHECK_FALSE(Buffer::exists(other));
    }
  }
  CHECK(limit_now() == RateLimit::ratio(2.0, 5, 16.0));
}

TEST_CASE("dump --full of large steps as a table holds bounded text, not blocks of 1024 rows") {
  // 400 steps of f32[16384]: each row's text is about 200 KB, so 1024-row blocks would hold all 80 MB at once.
  const std::string name = unique_name("cli-fulldump");
  SegmentGuard guard(name);
  const uint64_t steps = 400;
  uint64_t segment_bytes = 0;
  {
    Buffer b = Buffer::create(name, 1, steps, Schema::parse("id:u64 v:f32[16384]"));
    segment_bytes = b.total_bytes();
    Writer w(b, {0});
    std::vector<float> v(16384);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.123456789f + static_cast<float>(i);
    for (uint64_t s = 0; s < steps; ++s) {
      w.push_one(0, {FieldBytes{&s, sizeof s}, FieldBytes{v.data(), v.size() * sizeof(float)}});
    }
  }
  RunningCli cli({"dump", name, "--full"}, {"ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=16"});
  std::string err;
  while (const auto line = cli.next_line()) err += *line + "\n";
  rusage usage{};
  REQUIRE(cli.finish(0, &usage) == 0);
  CHECK(err.empty());
  const uint64_t peak = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  const uint64_t beyond = peak > segment_bytes ? peak - segment_bytes : 0;
  MESSAGE(fmt::format("dump --full: peak resident {} MiB, {} MiB beyond the {} MiB segment", peak >> 20, beyond >> 20,
                      segment_bytes >> 20));
  // Bounded blocks: 10 MiB beyond the segment here, 70 MiB under ASan (whose runtime alone is about 50 MiB);
  // 1024-row blocks held 168 MiB beyond it.
  CHECK(beyond < (100ull << 20));
  // The rows are whole: every element of the last step.
  const CliResult last = run_cli({"dump", name, "--full", "--last", "1"});
  REQUIRE(last.exit_code == 0);
  CHECK(contains(last.out, "16383.123"));
  CHECK(std::count(last.out.begin(), last.out.end(), ',') == 16383);
}

TEST_CASE("a symlink at a buffer's name: info and rm word it alike, and create's advice is what rm accepts") {
  const std::string name = unique_name("cli-link");
  SegmentGuard guard(name);
  const std::string target = "/nonexistent/target";
  REQUIRE(::symlink(target.c_str(), guard.path().c_str()) == 0);
  const std::string sentence_start = fmt::format("'{}' is a symbolic link", guard.path());
  const CliResult info = run_cli({"info", name});
  const CliResult rm = run_cli({"rm", name});
  CHECK(info.exit_code == 1);
  CHECK(rm.exit_code == 1);
  const std::string info_says = rest_of_line(info.err, sentence_start);
  CHECK_FALSE(info_says.empty());
  CHECK(info_says == rest_of_line(rm.err, sentence_start));
  CHECK(contains(info_says, target));

  const CliResult c = create(name);
  CHECK(c.exit_code == 1);
  CHECK(one_error_line(c.err));
  CHECK(contains(c.err, sentence_start));
  CHECK_FALSE(contains(c.err, fmt::format("shmreplay rm {}", name)));
  CHECK(contains(c.err, fmt::format("rm '{}'", guard.path())));
  // The same for a file that is not a segment: rm refuses it, so create does not send the user there.
  std::remove(guard.path().c_str());
  write_file(guard.path(), random_bytes());
  const CliResult foreign = create(name);
  CHECK(foreign.exit_code == 1);
  CHECK(contains(foreign.err, "not a shmreplay segment"));
  CHECK_FALSE(contains(foreign.err, fmt::format("shmreplay rm {}", name)));
  CHECK(run_cli({"rm", name}).exit_code == 1);
  // A segment: create sends the user to `shmreplay rm`, which removes it.
  std::remove(guard.path().c_str());
  REQUIRE(create(name).exit_code == 0);
  const CliResult again = create(name);
  CHECK(again.exit_code == 1);
  CHECK(contains(again.err, fmt::format("`shmreplay rm {}`", name)));
  CHECK(run_cli({"rm", name}).exit_code == 0);
}
