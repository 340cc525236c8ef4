// `shmreplay journal NAME DIR`: keeps a buffer durable in a chain directory within a bound (shmreplay/journal.hpp)
// until SIGINT, SIGTERM or SIGHUP, then writes a last link and exits 0. One line when it starts and one when it
// stops; a line per link with --verbose (or a JSON object per link with --json); a warning for each link that
// failed or ended a lag past the bound.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "info_forms.hpp"
#include "shmreplay/journal.hpp"
#include "text.hpp"

namespace shmreplay::cli {
namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler stores g_stop: it must be lock-free");

extern "C" void request_stop(int) { g_stop.store(true, std::memory_order_release); }

void stop_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  ::sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup: keep ignoring it
    ::sigaction(sig, &sa, nullptr);
  }
}

void print_journal_link(const JournalLink& l, const JournalArgs& args) {
  if (args.json) {
    const nlohmann::ordered_json out = {{"link", l.link_seq},   {"steps", l.steps},     {"file_bytes", l.file_bytes},
                                        {"whole", l.whole},     {"seconds", l.seconds}, {"lag_seconds", l.lag_s},
                                        {"late", l.late},       {"last", l.last},       {"error", l.error}};
    fmt::print("{}\n", out.dump());
    std::fflush(stdout);
    return;
  }
  if (!l.error.empty()) {
    fmt::print(stderr, "shmreplay: warning: a link failed and the chain is as it was (tried again): {}\n", l.error);
    return;
  }
  if (l.late) {
    fmt::print(stderr, "shmreplay: warning: link {} made steps durable {:.3f} s after they were published, past the "
                       "bound of {} s (the link took {:.3f} s)\n",
               l.link_seq, l.lag_s, args.bound, l.seconds);
  }
  if (args.verbose) {
    fmt::print("link {} ({}): {} steps, {}, in {:.3f} s; lag {:.3f} s{}\n", l.link_seq,
               l.whole ? "whole" : "incremental", l.steps, human_bytes(l.file_bytes), l.seconds, l.lag_s,
               l.last ? " (the last)" : "");
    std::fflush(stdout);
  }
}

}  // namespace

std::string journal_text(const JournalInfo& j, uint64_t now_ns) {
  if (!j.present()) return {};
  const std::string holder = j.state == OwnerState::alive  ? fmt::format("pid {}, bound {} s", j.pid, j.bound_s)
                             : j.state == OwnerState::dead ? fmt::format("pid {} died (bound {} s)", j.pid, j.bound_s)
                                                           : std::string("none runs");
  const std::string link =
      j.link_seq == 0 ? std::string("no durable link yet")
                      : fmt::format("link {} durable {} ago (took {:.3f} s)", j.link_seq,
                                    human_age(now_ns > j.done_ns ? now_ns - j.done_ns : 0),
                                    static_cast<double>(j.link_ns) * 1e-9);
  return fmt::format("{}; {}; lag {:.3f} s, {} steps not yet durable; {} links, {} late (largest lag {:.3f} s), {} "
                     "failed",
                     holder, link, j.lag_s(now_ns), j.pending_steps, j.links, j.late_links,
                     static_cast<double>(j.max_lag_ns) * 1e-9, j.failures);
}

Json journal_json(const JournalInfo& j, uint64_t now_ns) {
  if (!j.present()) return Json(nullptr);
  return Json{{"state", j.state == OwnerState::alive ? "alive" : j.state == OwnerState::dead ? "dead" : "none"},
              {"pid", j.pid},
              {"since_ns", j.since_ns},
              {"bound_seconds", j.bound_s},
              {"link", j.link_seq},
              {"durable_ns", j.durable_ns},
              {"done_ns", j.done_ns},
              {"link_seconds", static_cast<double>(j.link_ns) * 1e-9},
              {"lag_seconds", j.lag_s(now_ns)},
              {"pending_steps", j.pending_steps},
              {"max_lag_seconds", static_cast<double>(j.max_lag_ns) * 1e-9},
              {"links", j.links},
              {"late_links", j.late_links},
              {"failures", j.failures},
              {"takeovers", j.takeovers}};
}

CLI::App* add_journal(CLI::App& app, JournalArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "journal", "Keep a segment durable in a chain directory: every published step is in a synced link within the "
                 "bound, until interrupted (then a last link)");
  cmd->add_option("NAME", args.name, "Segment name")->required()->type_name("");
  cmd->add_option("DIR", args.dir, "Chain directory (created if missing; `shmreplay load DIR` restores it)")
      ->required()
      ->type_name("");
  cmd->add_option("--bound", args.bound, "Seconds within which a published step is durable")
      ->check(CLI::Range(kJournalMinBoundS, kJournalMaxBoundS))
      ->type_name("SECONDS")
      ->capture_default_str();
  cmd->add_option("--keep", args.keep, "The newest links kept as restore points")
      ->check(CLI::Range(1u, 1000000u))
      ->capture_default_str();
  cmd->add_flag("--verbose", args.verbose, "Print a line per link");
  cmd->add_flag("--json", args.json, "Print one JSON object per link, one a line");
  cmd->add_flag("--allow-other-owner", args.allow_other_owner,
                "Journal a segment of another user, or into a chain directory of another user");
  return cmd;
}

int run_journal(const JournalArgs& args) {
  JournalOptions options;
  options.bound_s = args.bound;
  options.keep = args.keep;
  options.allow_other_owner = args.allow_other_owner;
  options.on_link = [&args](const JournalLink& l) { print_journal_link(l, args); };
  Journal journal(args.name, args.dir, options);
  stop_on_signals();
  if (!args.json) {
    fmt::print("journal of '{}' into '{}': steps durable within {} s; stop it with Ctrl-C or SIGTERM\n",
               journal.buffer().name(), args.dir, args.bound);
    std::fflush(stdout);
  }
  journal.run(g_stop);
  const JournalStats s = journal.stats();
  if (!args.json) {
    fmt::print("journal of '{}' stopped: {} links, the newest {}; largest lag {:.3f} s, longest link {:.3f} s; {} "
               "late, {} failed\n",
               journal.buffer().name(), s.links, s.link_seq, s.max_lag_s, s.max_link_s, s.late, s.failures);
  }
  return s.failures > 0 ? kExitFailure : kExitOk;
}

}  // namespace shmreplay::cli
