// `shmreplay watch`: a live view of a segment, like top: pushes/s, samples/s, per-env fill bars, writer liveness.
//
// On a terminal it redraws in place (the alternate screen, cursor hidden, stdin in non-canonical no-echo mode so
// that 'q' quits without Enter); the terminal is restored on exit, on SIGINT/SIGTERM/SIGHUP/SIGQUIT, and around
// a Ctrl-Z suspension. Otherwise, or with --once, --count, --plain or --json, it prints plain frames (or JSON
// lines) one after another, for logs and tests. Every frame comes from a read-only snapshot of the segment.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "info_forms.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "text.hpp"

namespace shmreplay::cli {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using Align = Table::Align;

// -- the terminal: state shared with the signal handlers, which only use async-signal-safe calls --

termios g_saved_termios{};
volatile std::sig_atomic_t g_raw = 0;       // stdin is in our mode; g_saved_termios restores it
volatile std::sig_atomic_t g_on_screen = 0; // the alternate screen is shown
volatile std::sig_atomic_t g_stop = 0;      // the signal that asked us to quit
volatile std::sig_atomic_t g_resumed = 0;   // SIGCONT after a Ctrl-Z: enter our mode again and redraw

constexpr char kEnterScreen[] = "\x1b[?1049h\x1b[?25l";  // alternate screen, hide the cursor
constexpr char kLeaveScreen[] = "\x1b[?25h\x1b[?1049l";  // show the cursor, main screen

void write_all(int fd, const char* data, std::size_t bytes) noexcept {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void leave_terminal() noexcept {
  if (g_raw) ::tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_termios);
  g_raw = 0;
  if (g_on_screen) write_all(STDOUT_FILENO, kLeaveScreen, sizeof kLeaveScreen - 1);
  g_on_screen = 0;
}

void enter_terminal() noexcept {
  if (::isatty(STDIN_FILENO) && ::tcgetattr(STDIN_FILENO, &g_saved_termios) == 0) {
    termios t = g_saved_termios;
    t.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // keys arrive at once and unechoed; ISIG stays: Ctrl-C
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    if (::tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0) g_raw = 1;
  }
  write_all(STDOUT_FILENO, kEnterScreen, sizeof kEnterScreen - 1);
  g_on_screen = 1;
}

void on_quit_signal(int signo) { g_stop = signo; }

void on_suspend(int) {
  const int saved_errno = errno;
  leave_terminal();
  std::signal(SIGTSTP, SIG_DFL);
  std::raise(SIGTSTP);  // delivered when this handler returns: the process stops with the terminal restored
  errno = saved_errno;
}

void on_continue(int) { g_resumed = 1; }

void set_handler(int signo, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a signal interrupts poll() so the loop sees it at once
  ::sigaction(signo, &sa, nullptr);
}

// The interactive session: enters the terminal mode, and restores it (and the default handlers) when destroyed,
// also while an exception unwinds.
class Screen {
 public:
  Screen() {
    for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) set_handler(s, on_quit_signal);
    set_handler(SIGTSTP, on_suspend);
    set_handler(SIGCONT, on_continue);
    enter_terminal();
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;
  ~Screen() {
    leave_terminal();
    for (const int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGCONT}) std::signal(s, SIG_DFL);
  }

  enum class Wake { timeout, quit, redraw };

  // Waits until `deadline`, a quit key (q), a quit signal, or a resume after Ctrl-Z.
  Wake wait_until(Clock::time_point deadline) {
    for (;;) {
      if (g_stop) return Wake::quit;
      if (g_resumed) {
        g_resumed = 0;
        set_handler(SIGTSTP, on_suspend);
        enter_terminal();
        return Wake::redraw;
      }
      const auto now = Clock::now();
      if (now >= deadline) return Wake::timeout;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
      pollfd fd{STDIN_FILENO, POLLIN, 0};
      const bool listen = g_raw && keys_;
      const int ready = ::poll(&fd, listen ? 1 : 0, static_cast<int>(std::min<long long>(ms, 1000)));
      if (ready > 0 && (fd.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        char keys[64];
        const ssize_t n = ::read(STDIN_FILENO, keys, sizeof keys);
        for (ssize_t i = 0; i < n; ++i) {
          if (keys[i] == 'q' || keys[i] == 'Q') return Wake::quit;
        }
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) keys_ = false;  // hung up: wait for signals
      }
    }
  }

  // Rows and columns of the terminal (24 x 80 when unknown).
  static std::pair<std::size_t, std::size_t> size() {
    winsize ws{};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      return {ws.ws_row, ws.ws_col};
    }
    return {24, 80};
  }

  static void draw(const std::vector<std::string>& lines, std::size_t columns) {
    std::string out = "\x1b[H";  // home; each line clears its rest, then everything below is cleared
    for (const std::string& line : lines) {
      out += line.size() > columns ? line.substr(0, columns) : line;
      out += "\x1b[K\r\n";
    }
    out += "\x1b[J";
    write_all(STDOUT_FILENO, out.data(), out.size());
  }

 private:
  bool keys_ = true;  // stdin can still deliver a 'q'
};

// -- frames --

// Rates between two snapshots; negative when unknown (the first interactive frame).
struct Rates {
  double seconds = -1.0;
  double pushes = -1.0;
  double samples = -1.0;
  double retries = -1.0;
  std::vector<double> env_pushes;
  std::vector<double> learner_samples;  // per learner slot (layout 1.7); -1 where unknown
};

double per_second(uint64_t before, uint64_t after, double seconds) {
  return after >= before ? static_cast<double>(after - before) / seconds : 0.0;  // a load may move heads back
}

Rates rates_between(const SegmentInfo& a, const SegmentInfo& b, double seconds) {
  Rates r;
  if (seconds <= 0.0) {
    r.env_pushes.assign(b.envs.size(), -1.0);
    r.learner_samples.assign(b.learners.size(), -1.0);
    return r;
  }
  r.seconds = seconds;
  r.pushes = per_second(a.total_pushed, b.total_pushed, seconds);
  r.samples = per_second(a.learner.rows_sampled, b.learner.rows_sampled, seconds);
  r.retries = per_second(a.learner.retries, b.learner.retries, seconds);
  for (std::size_t e = 0; e < b.envs.size(); ++e) {
    r.env_pushes.push_back(e < a.envs.size() ? per_second(a.envs[e].head, b.envs[e].head, seconds) : -1.0);
  }
  for (std::size_t k = 0; k < b.learners.size(); ++k) {
    r.learner_samples.push_back(
        k < a.learners.size() ? per_second(a.learners[k].rows_sampled, b.learners[k].rows_sampled, seconds) : -1.0);
  }
  return r;
}

struct WriterCounts {
  uint64_t alive = 0;  // distinct live owners
  uint64_t dead = 0;   // distinct dead owners
  uint64_t free = 0;   // envs with no owner
};

WriterCounts count_writers(const SegmentInfo& s) {
  WriterCounts c;
  std::map<uint64_t, OwnerState> owners;
  for (const EnvInfo& e : s.envs) {
    if (e.owner == OwnerState::none) {
      ++c.free;
    } else {
      owners[e.owner_pid] = e.owner;
    }
  }
  for (const auto& [pid, state] : owners) (state == OwnerState::alive ? c.alive : c.dead) += 1;
  return c;
}

std::string learner_text(const LearnerInfo& l) {
  if (l.state == OwnerState::none) return "none attached";
  return fmt::format("pid {} ({}, attached {} ago)", l.pid, to_string(l.state), human_age(age_ns(l.since_ns)));
}

// Several learner slots (layout 1.7): each rank's holder and rows/s, on one line (the first 8 ranks).
std::string learners_text(const SegmentInfo& s, const Rates& r) {
  constexpr std::size_t kShown = 8;
  std::string text = fmt::format("{} of {} slots live", s.live_learners, s.learners.size());
  for (std::size_t k = 0; k < s.learners.size() && k < kShown; ++k) {
    const LearnerInfo& l = s.learners[k];
    const double rate = k < r.learner_samples.size() ? r.learner_samples[k] : -1.0;
    text += l.state == OwnerState::none
                ? fmt::format("; rank {} free", l.slot)
                : fmt::format("; rank {} pid {} ({}) {} rows/s", l.slot, l.pid, to_string(l.state), rate_text(rate));
  }
  if (s.learners.size() > kShown) text += "; ...";
  return text;
}

double fraction(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

// The frame's lines. `bar_width` empty: as wide as fits in `columns` (5 to 30 characters).
std::vector<std::string> frame_lines(const WatchArgs& args, const SegmentInfo& s, const Rates& r, bool removed,
                                     std::size_t max_env_rows, std::optional<std::size_t> bar_width,
                                     std::size_t columns, bool interactive) {
  if (!bar_width) {
    const std::vector<std::string> narrow = frame_lines(args, s, r, removed, max_env_rows, 0, columns, interactive);
    std::size_t widest = 0;
    const auto table = std::find(narrow.begin(), narrow.end(), std::string());  // the table follows the blank line
    for (auto it = table; it != narrow.end(); ++it) widest = std::max(widest, it->size());
    bar_width = std::clamp<std::size_t>(columns > widest ? columns - widest - 1 : 0, 5, 30);
  }
  std::vector<std::string> lines;
  const auto pair = [&](std::string_view key, const std::string& value) {
    lines.push_back(fmt::format("{:<12}{}", key, value));
  };
  lines.push_back(fmt::format("shmreplay watch '{}'  {}  every {}s{}{}", s.name, iso_utc(detail::realtime_ns()),
                              args.interval_s, removed ? "  (removed from the shared-memory directory)" : "",
                              interactive ? "  (q or Ctrl-C quits)" : ""));
  pair("envs", fmt::format("{} x {} steps, {} per step, {}", s.num_envs, s.capacity, step_bytes_text(s),
                           human_bytes(s.total_bytes)));
  pair("pushes/s", fmt::format("{} ({} steps pushed in all)", rate_text(r.pushes), s.total_pushed));
  const LearnerInfo& l = s.learner;
  pair("samples/s", fmt::format("{} ({} rows sampled in all, {} retried, {} retried/s{})", rate_text(r.samples),
                                l.rows_sampled, l.retries, rate_text(r.retries), write_backs_text(l)));
  pair("replay", fmt::format("{} steps ({} full)", s.replay_steps, percent(s.replay_steps, s.num_envs * s.capacity)));
  pair("online", fmt::format("{} steps", s.online_steps));
  if (s.cold.capacity != 0) {  // (layout 1.11) the replay view's steps per tier: the rings above, the cold tier's here
    pair("on disk", fmt::format("{} steps ({} full), {} of them, {} of files", s.cold.steps,
                                percent(s.cold.steps, s.num_envs * s.cold.capacity),
                                human_bytes(s.cold.steps * s.step_bytes), human_bytes(s.cold.file_bytes)));
  }
  const WriterCounts w = count_writers(s);
  pair("writers", fmt::format("{} alive, {} dead, {} env{} without a writer", w.alive, w.dead, w.free,
                              w.free == 1 ? "" : "s"));
  if (s.learners.size() <= 1) {
    pair("learner", learner_text(l));
  } else {
    pair("learners", learners_text(s, r));
  }
  if (s.rate_limit.limit) pair("rate limit", rate_limit_text(s.rate_limit));
  for (const auto& [key, text] : compressed_lines(s)) pair(key, text);
  if (s.journal.present()) pair("journal", journal_text(s.journal, detail::realtime_ns()));
  lines.emplace_back();

  std::vector<Table::Column> headers{{"ENV", Align::right},    {"FILL"},
                                     {"", Align::right},       {"LENGTH", Align::right},
                                     {"ONLINE", Align::right}, {"HEAD", Align::right},
                                     {"PUSH/S", Align::right}, {"OWNER", Align::right},
                                     {"STATE"},                {"LAST PUSH"}};
  const std::vector<EnvColumn> extra = env_columns(s);  // the counter table's rows with a column, last
  for (const EnvColumn& c : extra) headers.push_back({std::string(c.row->column), Align::right});
  Table t(std::move(headers));
  const std::size_t shown = std::min(s.envs.size(), max_env_rows);
  for (std::size_t k = 0; k < shown; ++k) {
    const EnvInfo& e = s.envs[k];
    std::vector<std::string> row{
        fmt::format("{}", e.env), fill_bar(fraction(e.length, s.capacity), bar_width.value_or(0)),
        percent(e.length, s.capacity), fmt::format("{}", e.length), fmt::format("{}", e.online_length),
        fmt::format("{}", e.head), rate_text(k < r.env_pushes.size() ? r.env_pushes[k] : -1.0),
        e.owner == OwnerState::none ? std::string("-") : fmt::format("{}", e.owner_pid), state_text(e),
        e.last_push_ns == 0 ? std::string("never") : human_age(age_ns(e.last_push_ns)) + " ago"};
    for (const EnvColumn& c : extra) row.push_back(counter_cell(*c.row, e.counters.at(c.index)));
    t.add_row(std::move(row));
  }
  std::string table = t.render("  ");
  for (std::size_t start = 0; start < table.size();) {
    const std::size_t end = table.find('\n', start);
    lines.push_back(table.substr(start, end - start));
    start = end + 1;
  }
  if (shown < s.envs.size()) {
    lines.push_back(fmt::format("  ... {} more env{} ({})", s.envs.size() - shown, s.envs.size() - shown == 1 ? "" : "s",
                                interactive ? "enlarge the terminal" : "shmreplay watch --json lists every env"));
  }
  return lines;
}

// Each learner slot (layout 1.7): rank, holder, rows sampled and per second.
Json learners_json(const SegmentInfo& s, const Rates& r) {
  Json out = Json::array();
  for (std::size_t k = 0; k < s.learners.size(); ++k) {
    const LearnerInfo& l = s.learners[k];
    const double rate = k < r.learner_samples.size() ? r.learner_samples[k] : -1.0;
    out.push_back({{"rank", l.slot},
                   {"state", to_string(l.state)},
                   {"pid", l.pid},
                   {"rows_sampled", l.rows_sampled},
                   {"samples_per_s", rate < 0 ? Json(nullptr) : Json(rate)},
                   {"mean_age_steps", l.age_rows == 0 ? Json(nullptr)
                                                      : Json(static_cast<double>(l.age_sum_steps) /
                                                             static_cast<double>(l.age_rows))}});
  }
  return out;
}

Json frame_json(const SegmentInfo& s, const Rates& r, bool removed) {
  const auto rate = [](double v) { return v < 0.0 ? Json(nullptr) : Json(v); };
  const std::vector<EnvColumn> columns = env_columns(s);  // the counter table's rows with a column
  Json envs = Json::array();
  for (std::size_t k = 0; k < s.envs.size(); ++k) {
    const EnvInfo& e = s.envs[k];
    envs.push_back({
        {"env", e.env},
        {"head", e.head},
        {"length", e.length},
        {"online_length", e.online_length},
        {"fill", fraction(e.length, s.capacity)},
        {"pushes_per_s", rate(k < r.env_pushes.size() ? r.env_pushes[k] : -1.0)},
        {"owner", to_string(e.owner)},
        {"owner_pid", e.owner_pid},
        {"state", state_text(e)},
        {"last_push_age_s", e.last_push_ns == 0 ? Json(nullptr)
                                                : Json(static_cast<double>(age_ns(e.last_push_ns)) / 1e9)},
    });
    for (const EnvColumn& c : columns) envs.back()[std::string(c.row->name)] = e.counters.at(c.index);
  }
  const WriterCounts w = count_writers(s);
  return {
      {"name", s.name},
      {"time_ns", detail::realtime_ns()},
      {"interval_s", rate(r.seconds)},
      {"removed", removed},
      {"num_envs", s.num_envs},
      {"capacity", s.capacity},
      {"total_pushed", s.total_pushed},
      {"pushes_per_s", rate(r.pushes)},
      {"rows_sampled", s.learner.rows_sampled},
      {"samples_per_s", rate(r.samples)},
      {"retries", s.learner.retries},
      {"retries_per_s", rate(r.retries)},
      {"replay_steps", s.replay_steps},
      {"online_steps", s.online_steps},
      {"fill", fraction(s.replay_steps, s.num_envs * s.capacity)},
      {"live_writers", w.alive},
      {"dead_writers", w.dead},
      {"learner", {{"state", to_string(s.learner.state)}, {"pid", s.learner.pid}}},
      {"learners", learners_json(s, r)},
      {"rate_limit", s.rate_limit.limit ? Json{{"text", s.rate_limit.limit->to_string()},
                                               {"inserts", s.rate_limit.inserts},
                                               {"samples", s.rate_limit.samples},
                                               {"error", s.rate_limit.error},
                                               {"learner_waiting_rows", s.rate_limit.learner_waiting_rows},
                                               {"writer_waiters", s.rate_limit.writer_waiters}}
                                        : Json(nullptr)},
      {"journal", journal_json(s.journal, detail::realtime_ns())},
      {"envs", std::move(envs)},
  };
}

bool removed_from_directory(const std::string& name) {
  try {
    return !Buffer::exists(name);
  } catch (const Error&) {
    return false;
  }
}

int watch_plain(const WatchArgs& args, const Inspector& insp, Clock::duration interval) {
  const uint64_t frames = args.once ? 1 : args.count;  // 0: until killed
  SegmentInfo prev = insp.snapshot();
  auto prev_time = Clock::now();
  auto next = prev_time + interval;
  for (uint64_t k = 1; frames == 0 || k <= frames; ++k) {
    std::this_thread::sleep_until(next);
    next += interval;
    const SegmentInfo cur = insp.snapshot();
    const auto now = Clock::now();
    const Rates r = rates_between(prev, cur, std::chrono::duration<double>(now - prev_time).count());
    const bool removed = removed_from_directory(args.name);
    if (args.json) {
      fmt::print("{}\n", frame_json(cur, r, removed).dump());
    } else {
      if (k > 1) fmt::print("\n");
      for (const std::string& line : frame_lines(args, cur, r, removed, kMaxEnvRowsShown, 20, 0, false)) {
        fmt::print("{}\n", line);
      }
    }
    std::fflush(stdout);
    prev = cur;
    prev_time = now;
  }
  return kExitOk;
}

int watch_interactive(const WatchArgs& args, const Inspector& insp, Clock::duration interval) {
  Screen screen;
  SegmentInfo prev = insp.snapshot();
  auto prev_time = Clock::now();
  Rates r = rates_between(prev, prev, 0.0);
  SegmentInfo cur = prev;
  for (;;) {
    const auto [rows, columns] = Screen::size();
    const std::size_t header_rows = 11;  // the summary, a blank line, the table's header, the "more" line
    const std::size_t env_rows = rows > header_rows ? rows - header_rows : 1;
    Screen::draw(
        frame_lines(args, cur, r, removed_from_directory(args.name), env_rows, std::nullopt, columns, true),
        columns);
    const Screen::Wake wake = screen.wait_until(prev_time + interval);
    if (wake == Screen::Wake::quit) break;
    if (wake == Screen::Wake::redraw) continue;
    cur = insp.snapshot();
    const auto now = Clock::now();
    r = rates_between(prev, cur, std::chrono::duration<double>(now - prev_time).count());
    prev = cur;
    prev_time = now;
  }
  return kExitOk;
}

}  // namespace

int run_watch(const WatchArgs& args) {
  const Inspector insp(args.name, {.allow_other_owner = true});  // display only; info shows the owner
  const auto interval =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(args.interval_s));
  const bool interactive =
      !args.once && args.count == 0 && !args.json && !args.plain && ::isatty(STDOUT_FILENO) != 0;
  return interactive ? watch_interactive(args, insp, interval) : watch_plain(args, insp, interval);
}

}  // namespace shmreplay::cli
