// tools/bench/scaling_plots.cpp: shmreplay_bench_scaling's figures (scaling_plots.hpp).
#include "scaling_plots.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#ifndef SHMREPLAY_SOURCE_DIR
#define SHMREPLAY_SOURCE_DIR "."
#endif

namespace shmreplay::bench {

namespace {

struct Figure {
  std::string file;
  std::vector<std::string> args;  // plot_tables.py's, less the input and --out
};

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<Figure> figures() {
  const std::vector<std::string> ratio = {"--reference", "100", "the limit", "--ylabel", "% of the machine's limit"};
  const std::vector<std::string> latency = {"--log", "--ylabel", "µs per sample call"};
  std::vector<Figure> f;
  for (const auto& [kind, seq] : {std::pair<std::string, std::string>{"small", "seq 64"}, {"Atari", "seq 8"}}) {
    const std::string file = kind == "small" ? "size_small" : "size_atari";
    const std::vector<std::string> size = {"--after", "### Size: " + kind + " steps", "--x", "stored steps", "--logx"};
    f.push_back({file + "_ratios.png",
                 size + std::vector<std::string>{"--columns", "transitions ours/gather", seq + " ours/gather",
                                                 "push ours/limit", "--title",
                                                 kind + " steps: rates as a share of the limit, against the stored steps"} +
                     ratio});
    f.push_back({file + "_rates.png",
                 size + std::vector<std::string>{"--log", "--columns", "transitions M rows/s",
                                                 "transitions gather M rows/s", seq + " M rows/s",
                                                 seq + " gather M rows/s", "push M steps/s", "push limit M steps/s",
                                                 "--ylabel", "M rows (steps) per second", "--title",
                                                 kind + " steps: ours and the limit's own curve"}});
    f.push_back({file + "_latency.png",
                 std::vector<std::string>{"--after", "Latency of the calls (" + kind + " steps)", "--x", "stored steps",
                                          "--logx", "--columns", "transitions p50 µs", "transitions p99 µs",
                                          "transitions p99.9 µs", seq + " p50 µs", seq + " p99 µs", seq + " p99.9 µs",
                                          "--title", kind + " steps: latency of a sample call"} +
                     latency});
  }
  const std::vector<std::string> full = {"--after", "### Writers at full speed", "--x", "writers", "--logx"};
  f.push_back({"writers_full.png", full + std::vector<std::string>{"--columns", "push ours/plain", "sample ours/plain",
                                                                  "--title", "Writers at full speed, one learner"} +
                                       ratio});
  f.push_back({"writers_full_rates.png",
               full + std::vector<std::string>{"--log", "--columns", "push M steps/s", "plain push M steps/s",
                                               "push per writer-core M steps/s", "learner M rows/s",
                                               "plain learner M rows/s", "--ylabel", "M steps (rows) per second",
                                               "--title", "Writers at full speed: rates"}});
  f.push_back({"writers_full_latency.png",
               full + std::vector<std::string>{"--columns", "p50 µs", "p99 µs", "p99.9 µs", "--title",
                                               "The learner's sample call beside writers at full speed"} +
                   latency});
  f.push_back({"writers_fixed.png",
               std::vector<std::string>{"--after", "### Writers at a fixed rate", "--x", "writers", "--logx",
                                        "--columns", "push/target", "sample ours/plain", "--title",
                                        "Writers at a fixed rate per env, one learner"} +
                   ratio});
  for (const std::string length : {"1", "64"}) {
    f.push_back({"learners_l" + length + ".png",
                 {"--after", "### Learners", "--where", "seq len=" + length, "--x", "learners", "--columns", "ours n/1",
                  "plain n/1", "--reference", "1", "one learner", "--ylabel", "rows/s over one learner's", "--title",
                  "Learner processes, sequence length " + length}});
    f.push_back({"latency_l" + length + ".png",
                 std::vector<std::string>{"--after", "### Latency of a sample call", "--where", "seq len=" + length,
                                          "--x", "writers", "--columns", "p50 µs", "p99 µs", "p99.9 µs",
                                          "gather p50 µs", "gather p99 µs", "--title",
                                          "Sample-call latency beside writers at full speed, sequence length " +
                                              length} +
                     latency});
  }
  return f;
}

// The text after "--after" in a figure's arguments.
std::string after_of(const Figure& f) {
  for (std::size_t i = 0; i + 1 < f.args.size(); ++i) {
    if (f.args[i] == "--after") return f.args[i + 1];
  }
  return {};
}

int run(const std::vector<std::string>& argv) {
  std::vector<char*> c;
  for (const std::string& a : argv) c.push_back(const_cast<char*>(a.c_str()));
  c.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::execvp(c[0], c.data());
    std::fprintf(stderr, "shmreplay_bench_scaling: cannot run %s: %s\n", c[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::string default_plot_python() {
  const std::string venv = std::string(SHMREPLAY_SOURCE_DIR) + "/.venv/bin/python";
  return ::access(venv.c_str(), X_OK) == 0 ? venv : "python3";
}

int draw_scaling_plots(const std::string& dir, const std::string& markdown, const std::string& python) {
  ::mkdir(dir.c_str(), 0777);  // EEXIST is fine; a real failure shows when the file is written
  const std::string md = dir + "/scaling.md";
  {
    std::ofstream out(md);
    out << markdown;
    if (!out) {
      fmt::print(stderr, "shmreplay_bench_scaling: cannot write {}\n", md);
      return 1;
    }
  }
  if (run({python, "-c", "import matplotlib"}) != 0) {
    fmt::print(stderr, "shmreplay_bench_scaling: {} cannot import matplotlib: no figures (the tables are in {}; pass "
                       "--python with an interpreter that has it)\n", python, md);
    return 1;
  }
  const std::string script = std::string(SHMREPLAY_SOURCE_DIR) + "/tools/bench/plot_tables.py";
  int failed = 0, drawn = 0;
  for (const Figure& f : figures()) {
    if (markdown.find(after_of(f)) == std::string::npos) continue;  // that sweep did not run
    const std::string where = std::string("seq len=");
    bool has_rows = true;
    for (std::size_t i = 0; i + 1 < f.args.size(); ++i) {  // a --where that no row can match: no figure
      if (f.args[i] == "--where" && f.args[i + 1].rfind(where, 0) == 0) {
        has_rows = markdown.find("| " + f.args[i + 1].substr(where.size()) + " |") != std::string::npos;
      }
    }
    if (!has_rows) continue;
    std::vector<std::string> argv = {python, script, md};
    argv.insert(argv.end(), f.args.begin(), f.args.end());
    argv.push_back("--out");
    argv.push_back(dir + "/" + f.file);
    const int rc = run(argv);
    if (rc != 0) {
      ++failed;
      fmt::print(stderr, "shmreplay_bench_scaling: figure {} failed (exit {})\n", f.file, rc);
    } else {
      ++drawn;
    }
  }
  fmt::print(stderr, "shmreplay_bench_scaling: {} figures in {} ({} failed), from {}\n", drawn, dir, failed, md);
  return failed;
}

}  // namespace shmreplay::bench
