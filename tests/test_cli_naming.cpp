// The CLI's rejected option aliases against docs/naming.md: every CLI row of the doc's alias table is answered
// with exit code 2 and one error line naming the right option (for `--alias VALUE` and `--alias=VALUE`, also when a
// required option is missing too), the CLI's table (tools/cli/aliases.cpp) is the doc's, and an option that is no
// alias keeps CLI11's message. The CLI runs as a child process, as in test_cli.cpp.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli/aliases.hpp"
#include "support.hpp"

using shmreplay::test::SegmentGuard;
using shmreplay::test::unique_name;

namespace {

struct CliResult {
  int exit_code = -1;  ///< the exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs the CLI with `args` (no shell), collecting stdout and stderr through pipes until both close (test_cli.cpp's
// run_cli; argv is made before fork: the child only execs).
CliResult run_cli(const std::vector<std::string>& args) {
  std::vector<std::string> storage{SHMREPLAY_CLI_PATH};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  int out_pipe[2];
  int err_pipe[2];
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
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

struct Row {
  std::string subcommand;
  std::string alias;
  std::string decision;
  std::string right;
  friend auto operator<=>(const Row&, const Row&) = default;
};

// A table cell without its padding and backticks.
std::string cell(std::string text) {
  const auto strip = [&] {
    while (!text.empty() && (text.front() == ' ' || text.front() == '`')) text.erase(0, 1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '`')) text.pop_back();
  };
  strip();
  return text;
}

// The CLI rows of docs/naming.md's alias table (| Interface | Where | Alias | Decision | Use instead |).
std::vector<Row> doc_rows() {
  std::ifstream in(SHMREPLAY_NAMING_DOC);
  REQUIRE(in.good());
  std::vector<Row> rows;
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("| Interface | Where | Alias | Decision | Use instead |")) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (!line.starts_with("|")) break;
    std::vector<std::string> cells;
    std::istringstream parts(line.substr(1));
    for (std::string c; std::getline(parts, c, '|');) cells.push_back(cell(c));
    REQUIRE(cells.size() == 5);
    if (cells[0] == "CLI") rows.push_back({cells[1], cells[2], cells[3], cells[4]});
  }
  return rows;
}

}  // namespace

TEST_CASE("cli naming: the doc lists CLI aliases, and the CLI's table is exactly the doc's") {
  const std::vector<Row> doc = doc_rows();
  REQUIRE(doc.size() >= 5);
  std::set<Row> from_doc(doc.begin(), doc.end());
  std::set<Row> from_cli;
  for (const shmreplay::cli::FlagAlias& a : shmreplay::cli::flag_aliases()) {
    from_cli.insert({a.subcommand, a.alias, "rejected", a.right});
  }
  CHECK(from_doc == from_cli);
}

TEST_CASE("cli naming: every alias is rejected with exit code 2 and a message naming the right option") {
  for (const Row& row : doc_rows()) {
    CAPTURE(row.subcommand);
    CAPTURE(row.alias);
    REQUIRE(row.decision == "rejected");
    const SegmentGuard seg(unique_name("naming"));
    const std::string expected = "unknown option '" + row.alias + "'; did you mean '" + row.right + "'?";
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{row.subcommand, seg.name(), row.alias, "1"},
          std::vector<std::string>{row.subcommand, seg.name(), row.alias + "=1"}}) {
      const CliResult r = run_cli(args);
      CHECK(r.exit_code == 2);
      CHECK(r.out.empty());
      CHECK(one_error_line(r.err));
      CHECK_MESSAGE(contains(r.err, expected), r.err);
      CHECK(contains(r.err, "run 'shmreplay " + row.subcommand + " --help'"));
    }
    CHECK(!shmreplay::Buffer::exists(seg.name()));  // nothing was created
  }
}

TEST_CASE("cli naming: the alias wins over a missing required option, and other options keep CLI11's message") {
  const SegmentGuard seg(unique_name("naming"));
  // --envs is missing too: CLI11 reports that first; the alias is the user's real mistake
  CliResult r = run_cli({"create", seg.name(), "--num-envs", "4", "--capacity", "8", "--schema", "a:f32"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "unknown option '--num-envs'; did you mean '--envs'? (num_envs in C++ and Python)"));
  r = run_cli({"create", seg.name(), "--envs", "2", "--capacity", "8", "--schema", "a:f32", "--bogus"});
  CHECK(r.exit_code == 2);
  CHECK(contains(r.err, "--bogus"));
  CHECK(!contains(r.err, "did you mean"));
  // the alias of one subcommand is no alias of another: dump's --envs is create's right name
  r = run_cli({"create", seg.name(), "--envs", "2", "--capacity", "8", "--schema", "a:f32"});
  CHECK(r.exit_code == 0);
}
