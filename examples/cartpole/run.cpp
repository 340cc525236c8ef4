// cartpole_run: the launcher. Creates a shmreplay buffer and the parameter block, starts one learner and K
// actor processes (cartpole_learner, cartpole_actor, found next to this program), forwards their progress
// lines, stops everything after --seconds or on Ctrl-C / SIGTERM, and prints a summary.
//
//   cartpole_run [--seconds 25] [--workers 2] [--envs-per-worker 16] [--keep] [--json] [--learner CMD]
//
// --learner runs another learner in place of cartpole_learner: CMD is a shell command line, run as
// `exec CMD --buffer NAME`; it must print "@report {json}" (with at least "violations") before it exits, as
// examples/python/torch_learner.py does.
//
// No process outlives it: children are stopped with SIGTERM (SIGKILL after a grace period) and reaped, and each
// child asks the kernel for SIGTERM should the launcher itself die. The buffer is removed unless --keep.
// Exit status 0 when every child exited cleanly and the learner saw no consistency violation.
#include <fmt/format.h>
#include <shmreplay/shmreplay.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "agent.hpp"

using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

struct Options {
  double seconds = 25;
  uint32_t workers = 2, envs_per_worker = 16, batch = 8;
  uint64_t capacity = 4096;
  std::string name;
  bool keep = false, json = false, quiet = false;
  std::string learner;  // a shell command line in place of cartpole_learner; empty: cartpole_learner
};

struct Child {
  std::string label;  // "learner", "actor 0", ...
  pid_t pid = -1;
  int out = -1;  // read end of its stdout
  std::string partial;
  std::optional<json> report;
  int status = 0;
  bool reaped = false;
};

std::FILE* g_progress = stdout;  // stderr in --json mode, so stdout holds only the summary

Child spawn(const std::string& label, const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) {
    // If the launcher dies (even by SIGKILL) the kernel sends this child SIGTERM: no orphan keeps running.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(fds[1], STDOUT_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "cartpole_run: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  return Child{label, pid, fds[0], {}, std::nullopt, 0, false};
}

// Reads what a child printed; forwards whole lines, keeps its "@report" line. Returns false at EOF.
bool drain(Child& c, const Options& o) {
  char buf[4096];
  const ssize_t n = ::read(c.out, buf, sizeof buf);
  if (n <= 0) return n < 0 && errno == EINTR;
  c.partial.append(buf, static_cast<std::size_t>(n));
  for (std::size_t nl; (nl = c.partial.find('\n')) != std::string::npos;) {
    const std::string line = c.partial.substr(0, nl);
    c.partial.erase(0, nl + 1);
    if (line.rfind("@report ", 0) == 0) {
      c.report = json::parse(line.substr(8), nullptr, /*allow_exceptions=*/false);
    } else if (!o.quiet) {
      fmt::print(g_progress, "[{}] {}\n", c.label, line);
      std::fflush(g_progress);
    }
  }
  return true;
}

void pump(std::vector<Child>& children, const Options& o, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Child*> who;
  for (Child& c : children) {
    if (c.out >= 0) {
      fds.push_back({c.out, POLLIN, 0});
      who.push_back(&c);
    }
  }
  if (fds.empty()) {
    ::poll(nullptr, 0, timeout_ms);
    return;
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !drain(*who[i], o)) {
      ::close(who[i]->out);
      who[i]->out = -1;
    }
  }
}

void reap(std::vector<Child>& children) {
  for (Child& c : children) {
    if (!c.reaped && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) c.reaped = true;
  }
}

// SIGTERM the selected children, wait for them (forwarding output) up to `grace`, then SIGKILL what is left.
void stop(std::vector<Child>& children, const Options& o, bool learner, std::chrono::milliseconds grace) {
  for (Child& c : children) {
    if (!c.reaped && (c.label == "learner") == learner) ::kill(c.pid, SIGTERM);
  }
  const auto give_up = Clock::now() + grace;
  const auto pending = [&] {
    for (const Child& c : children) {
      if ((c.label == "learner") == learner && (!c.reaped || c.out >= 0)) return true;
    }
    return false;
  };
  while (pending() && Clock::now() < give_up) {
    pump(children, o, 50);
    reap(children);
  }
  for (Child& c : children) {
    if ((c.label == "learner") == learner && !c.reaped) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &c.status, 0);
      c.reaped = true;
    }
  }
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return fmt::format("exit {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return "unknown";
}

// The run's summary: the buffer's own counters (read through the read-only inspector), the learner's report, the
// actors' returns, every process's exit; ok only if every process exited cleanly and on time, none is left running,
// and the learner saw no violation.
json summarize(const Options& o, const std::vector<Child>& children, double seconds, bool interrupted,
               bool early_exit) {
  const uint64_t num_envs = uint64_t{o.workers} * o.envs_per_worker;
  // The buffer's own counters, read through the read-only inspector.
  const shmreplay::SegmentInfo info = shmreplay::Inspector(o.name).snapshot();
  uint64_t pushes = 0;
  for (const shmreplay::EnvInfo& e : info.envs) pushes += e.head;

  json summary = {{"seconds", seconds}, {"interrupted", interrupted}, {"workers", o.workers},
                  {"envs", num_envs},   {"pushes", pushes},           {"pushes_per_s", static_cast<double>(pushes) / seconds}};
  const json empty = json::object();
  const json& lr = children[0].report ? *children[0].report : empty;
  summary["learner_report"] = children[0].report.has_value();
  for (const char* key : {"updates", "rows_sampled", "retries", "violations", "loss_first", "loss_last",
                          "eval_return_first", "eval_return_last", "eval_return_best"}) {
    summary[key] = lr.value(key, json());
  }
  summary["samples_per_s"] = lr.value("rows_sampled", 0.0) / seconds;
  summary["loss_falling"] = lr.contains("loss_first") && lr["loss_last"].get<double>() < lr["loss_first"].get<double>();
  double ret_first = 0, ret_last = 0, actor_steps = 0;
  json processes = json::array();
  bool clean = true;
  int reports = 0;
  for (const Child& c : children) {
    const bool ok = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0 && c.report.has_value();
    clean = clean && ok;
    processes.push_back({{"role", c.label}, {"pid", c.pid}, {"status", exit_text(c.status)}, {"clean", ok}});
    if (c.label != "learner" && c.report) {
      ret_first += c.report->value("return_first", 0.0);
      ret_last += c.report->value("return_last", 0.0);
      actor_steps += c.report->value("steps", 0.0);
      ++reports;
    }
  }
  int left_running = 0;
  for (const Child& c : children) left_running += ::kill(c.pid, 0) == 0 ? 1 : 0;
  summary["return_first"] = reports ? ret_first / reports : 0.0;
  summary["return_last"] = reports ? ret_last / reports : 0.0;
  summary["processes"] = processes;
  summary["left_running"] = left_running;
  summary["segment"] = {{"name", o.name}, {"kept", o.keep}};
  const bool ok = clean && !early_exit && left_running == 0 && lr.value("violations", 1) == 0;
  summary["ok"] = ok;
  return summary;
}

// The summary as JSON (--json) or as text.
void print_summary(const Options& o, const std::vector<Child>& children, const json& summary) {
  const json empty = json::object();
  const json& lr = children[0].report ? *children[0].report : empty;
  const double seconds = summary["seconds"].get<double>();
  const bool interrupted = summary["interrupted"].get<bool>();
  const uint64_t pushes = summary["pushes"].get<uint64_t>();
  double actor_steps = 0;
  for (const Child& c : children) {
    if (c.label != "learner" && c.report) actor_steps += c.report->value("steps", 0.0);
  }
  const int left_running = summary["left_running"].get<int>();
  if (o.json) {
    fmt::print("{}\n", summary.dump(2));
    return;
  }
  fmt::print("\nsummary: {:.1f} s{}, {} actors x {} envs\n", seconds, interrupted ? " (interrupted)" : "", o.workers,
             o.envs_per_worker);
  fmt::print("  steps pushed     {:>12}  ({:.0f}/s; actors report {:.0f})\n", pushes, static_cast<double>(pushes) / seconds, actor_steps);
  fmt::print("  rows sampled     {:>12}  ({:.0f}/s) in {} updates, {} retries\n", lr.value("rows_sampled", 0),
             lr.value("rows_sampled", 0.0) / seconds, lr.value("updates", 0), lr.value("retries", 0));
  fmt::print("  learner loss     {:>12.3f}  -> {:.3f} ({})\n", lr.value("loss_first", 0.0), lr.value("loss_last", 0.0),
             lr.contains("eval_return_last")               ? "TD loss: it need not fall"
             : summary["loss_falling"].get<bool>() ? "falling"
                                                   : "NOT falling");
  if (lr.contains("eval_return_last")) {
    fmt::print("  greedy return    {:>12.1f}  -> {:.1f}, best {:.1f} (the learner's own evaluation)\n",
               lr.value("eval_return_first", 0.0), lr.value("eval_return_last", 0.0),
               lr.value("eval_return_best", 0.0));
  }
  fmt::print("  episode return   {:>12.1f}  -> {:.1f} (actors' first and last 100 episodes)\n",
             summary["return_first"].get<double>(), summary["return_last"].get<double>());
  fmt::print("  violations       {:>12}  (every sampled step's stamp checked by the learner)\n",
             lr.contains("violations") ? std::to_string(lr["violations"].get<uint64_t>()) : "no report");
  for (const Child& c : children) {
    fmt::print("  {:<16} pid {:<8} {}\n", c.label, c.pid, exit_text(c.status));
  }
  fmt::print("  processes left   {:>12}\n", left_running);
  fmt::print("  buffer           {}\n", o.keep ? fmt::format("kept: '{}' (shmreplay info {})", o.name, o.name) : "removed");
}

int run(const Options& o) {
  using namespace cartpole;
  const std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  const uint64_t num_envs = uint64_t{o.workers} * o.envs_per_worker;
  const shmreplay::Schema schema = shmreplay::Schema::parse(kSchema);
  shmreplay::Buffer::create(o.name, num_envs, o.capacity, schema);
  struct Cleanup {  // the segment and the parameter block go away on every exit path, unless --keep
    const Options& o;
    ~Cleanup() {
      if (!o.keep) {
        try {
          shmreplay::Buffer::remove(o.name);
        } catch (const std::exception&) {
        }
        SharedParams::remove(o.name);
      }
    }
  } cleanup{o};
  SharedParams::create(o.name);
  fmt::print(g_progress, "buffer '{}': {} envs x {} steps of {} bytes; 1 learner and {} actors for {} s (Ctrl-C stops)\n",
             o.name, num_envs, o.capacity, schema.step_bytes(), o.workers, o.seconds);
  std::fflush(g_progress);

  std::vector<Child> children;
  children.reserve(o.workers + 1);
  const auto start = Clock::now();
  if (o.learner.empty()) {
    children.push_back(spawn("learner", {(dir / "cartpole_learner").string(), "--buffer", o.name}));
  } else {  // exec: the shell becomes the learner, so its pid is the one signalled and reaped
    children.push_back(spawn("learner", {"/bin/sh", "-c", fmt::format("exec {} --buffer '{}'", o.learner, o.name)}));
  }
  for (uint32_t w = 0; w < o.workers; ++w) {
    children.push_back(spawn(fmt::format("actor {}", w),
                             {(dir / "cartpole_actor").string(), "--buffer", o.name, "--first",
                              std::to_string(w * o.envs_per_worker), "--count", std::to_string(o.envs_per_worker),
                              "--batch", std::to_string(o.batch), "--seed", std::to_string(w + 1)}));
  }

  bool early_exit = false;
  while (!g_stop.load(std::memory_order_relaxed) && Clock::now() - start < std::chrono::duration<double>(o.seconds)) {
    pump(children, o, 100);
    reap(children);
    for (const Child& c : children) early_exit = early_exit || c.reaped;
    if (early_exit) break;
  }
  const bool interrupted = g_stop.load(std::memory_order_relaxed);
  stop(children, o, /*learner=*/false, std::chrono::seconds(5));  // actors first: the learner sees all they push
  stop(children, o, /*learner=*/true, std::chrono::seconds(5));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  const json summary = summarize(o, children, seconds, interrupted, early_exit);
  print_summary(o, children, summary);
  return summary["ok"].get<bool>() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.name = fmt::format("cartpole-{}", ::getpid());
  CLI::App app("CartPole actor/learner run on a shmreplay buffer: 1 learner and K envpool-style actor processes");
  app.add_option("--seconds", o.seconds, "how long to run")->check(CLI::PositiveNumber);
  app.add_option("--workers", o.workers, "actor processes")->check(CLI::Range(1, 64));
  app.add_option("--envs-per-worker", o.envs_per_worker, "envs owned by each actor")->check(CLI::Range(1, 4096));
  app.add_option("--batch", o.batch, "envs per recv in each actor")->check(CLI::PositiveNumber);
  app.add_option("--capacity", o.capacity, "steps kept per env")->check(CLI::Range(64, 1 << 24));
  app.add_option("--name", o.name, "buffer name (default cartpole-<pid>)");
  app.add_flag("--keep", o.keep, "keep the buffer (and its parameter block) after the run, for `shmreplay info`");
  app.add_flag("--json", o.json, "print the summary as JSON on stdout (progress goes to stderr)");
  app.add_flag("--quiet", o.quiet, "do not forward the children's progress lines");
  app.add_option("--learner", o.learner,
                 "run this shell command (plus --buffer NAME) as the learner instead of cartpole_learner, e.g. "
                 "\".venv/bin/python examples/python/torch_learner.py\"");
  CLI11_PARSE(app, argc, argv);
  if (o.json) g_progress = stderr;
  o.batch = std::min(o.batch, o.envs_per_worker);
  cartpole::install_stop_handlers();
  try {
    return run(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cartpole_run: error: {}\n", e.what());
    return 1;
  }
}
