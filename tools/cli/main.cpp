// shmreplay: the command-line tool that creates, lists, inspects, watches, dumps, saves, loads and removes
// shmreplay segments.
//
//   shmreplay create NAME --envs N --capacity T (--schema SPEC | --schema-file FILE) [--mode OCTAL] [--replace]
//                    [--populate auto|always|never] [--progress]
//   shmreplay ls [--json]
//   shmreplay info NAME [--json]
//   shmreplay watch NAME [--interval S] [--once | --count N] [--json] [--plain]
//   shmreplay dump NAME [--env E]... [--last N | --steps A:B] [--field F]... [--online] [--full] [--json]
//   shmreplay save NAME FILE [--force] [--decode-compressed] [--nice N] [--progress] [--json] [--allow-other-owner]
//   shmreplay save NAME DIR --every SECONDS [--keep N] [--count N] [--nice N] [--progress] [--json]
//                  [--allow-other-owner]
//   shmreplay journal NAME DIR [--bound SECONDS] [--keep N] [--verbose] [--json] [--allow-other-owner]
//   shmreplay load FILE|DIR [NAME] [--mode OCTAL] [--progress] [--json] [--allow-other-owner] [--allow-mismatch]
//   shmreplay limit NAME [--samples-per-insert X] [--error-buffer E] [--min-size-to-sample N] [--off]
//                   [--max-staleness K|off] [--json]
//                   [--allow-other-owner]
//   shmreplay metrics [NAME...] (--listen HOST:PORT | --once)
//   shmreplay rm NAME... [--force]
//   shmreplay --version
//
// Exit codes: 0 success; 1 a runtime error (one `shmreplay: error: ...` line on stderr); 2 a usage error (the
// same kind of line). This file only parses the command line (an option another interface spells differently is
// answered by aliases.cpp, which names the right one: docs/naming.md); commands.cpp, watch.cpp, dump.cpp and
// save_load.cpp do the work; option_checks.cpp has the validators of its option values. Every command but create, load and rm maps the segment read-only. The display commands
// (ls, info, watch, dump, limit without settings) show a segment of another user, with its owner; save, load and
// limit with settings refuse one unless --allow-other-owner.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "aliases.hpp"
#include "commands.hpp"
#include "option_checks.hpp"
#include "sampling_options.hpp"
#include "detail/os/file.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/version.hpp"

namespace {

using namespace shmreplay::cli;

// --allow-other-owner, for the commands that take a segment's data or write to it (OpenOptions::allow_other_owner).
void add_allow_other_owner(CLI::App* cmd, bool& flag, const std::string& what) {
  cmd->add_flag("--allow-other-owner", flag,
                what + " (refused by default: another user may have made it to read your steps or feed your learner)");
}

// The options of `create` that are kept as text for CLI11 and converted after it (the validators above
// guarantee that they convert).
struct CreateText {
  std::string envs;
  std::string capacity;
  std::string mode = "0600";
};

CLI::App* add_create(CLI::App& app, CreateArgs& args, CreateText& raw) {
  CLI::App* cmd = app.add_subcommand("create", "Create a segment (fails if the name exists, unless --replace)");
  cmd->add_option("NAME", args.name, "Segment name (the file " + shmreplay::shm_directory() + "/NAME)")
      ->required()
      ->type_name("");
  cmd->add_option("--envs", raw.envs, "Number of envs (rings)")->required()->check(kCount)->type_name("N");
  cmd->add_option("--capacity", raw.capacity, "Steps per env")->required()->check(kCount)->type_name("T");
  CLI::Option_group* schema = cmd->add_option_group("schema", "The step's fields (exactly one of these)");
  schema->add_option("--schema", args.schema_spec, "Schema text, e.g. 'obs:f32[4] action:i32 reward:f32 done:bool'")
      ->type_name("SPEC");
  schema->add_option("--schema-file", args.schema_file, "File holding the schema text ('#' comments allowed)")
      ->type_name("FILE");
  schema->require_option(1);
  cmd->add_option("--mode", raw.mode, "Permission bits of the segment file, in octal: read/write bits only")
      ->check(kOctalMode)
      ->type_name("OCTAL")
      ->capture_default_str();
  cmd->add_flag("--replace", args.replace, "Atomically replace an existing segment of the same name");
  CLI::Option_group* ep = cmd->add_option_group("episodes", "Episode fields: writers record boundaries and returns");
  ep->add_option("--done", args.episodes.done, "Field that ends an episode (scalar bool or integer)")->type_name("FIELD");
  ep->add_option("--terminated", args.episodes.terminated, "Field that ends an episode by termination")
      ->type_name("FIELD");
  ep->add_option("--truncated", args.episodes.truncated, "Field that ends an episode by truncation")
      ->type_name("FIELD");
  ep->add_option("--reward", args.episodes.reward, "Reward field summed into episode returns (scalar numeric)")
      ->type_name("FIELD");
  ep->add_option("--episode-queue", args.episode_queue_capacity, "Completed-episode records kept per env")
      ->check(kCount)
      ->type_name("N");
  add_sampling_policy_options(cmd, args);
  add_rate_limit_options(cmd, args.rate_limit);
  cmd->add_option("--learners", args.learners,
                  "Learner processes that may sample the buffer at once, one per rank (Sampler rank=); 1 to 64")
      ->check(kCount)
      ->type_name("N");
  cmd->add_option("--stack-restarts", args.stack_restarts,
                  "With a stacked field (NAME:DTYPE[SHAPE]:stack=AXIS): steps per env whose stack does not continue "
                  "the previous one's (episode starts) that the frame rings hold at no loss; default 1 + capacity/128")
      ->check(kCount)
      ->type_name("N");
  cmd->add_option("--compressed-bytes", args.compressed_bytes,
                  "With a compressed field (NAME:DTYPE[SHAPE]:lz4 or :zstd=LEVEL): the bytes of their records, every "
                  "compressed field and env together (1073741824, 1GiB, 512M); when frames compress worse, an env's "
                  "oldest steps leave the view. Default: the frames' bytes as pushed over --expected-compression")
      ->transform(CLI::AsSizeValue(false))
      ->type_name("BYTES");
  cmd->add_option("--expected-compression", args.expected_compression,
                  "With a compressed field and no --compressed-bytes: the ratio (bytes as pushed over bytes stored) "
                  "the byte budget assumes, at least 1; default 4")
      ->type_name("RATIO");
  cmd->add_option("--stack-continuity", args.stack_continuity,
                  "With a stacked field: compare (each pushed stack checked against the previous step's, byte for "
                  "byte; the default) or episodes (trust the episode flags: a push reads and writes one frame)")
      ->transform(CLI::Transformer(std::map<std::string, std::string>{{"compare", "compare"}, {"episodes", "episodes"}},
                                   CLI::ignore_case)
                      .description(""))
      ->check(CLI::IsMember({"compare", "episodes"}))
      ->type_name("compare|episodes");
  cmd->add_option("--populate", args.populate,
                  "Fault the segment's pages in now: never, always or auto (when it is at most half of "
                  "MemAvailable). Writers in other processes still fault them into their own mappings")
      ->transform(CLI::CheckedTransformer(std::map<std::string, shmreplay::Populate>{
                                              {"auto", shmreplay::Populate::automatic},
                                              {"always", shmreplay::Populate::always},
                                              {"never", shmreplay::Populate::never}},
                                          CLI::ignore_case))
      ->type_name("auto|always|never")
      ->default_str("never");
  cmd->add_flag("--progress", args.progress,
                "Show populating progress on stderr for any size, even when it is not a terminal (by default: on a "
                "terminal, for segments over 256 MiB)");
  return cmd;
}

CLI::App* add_ls(CLI::App& app, LsArgs& args) {
  CLI::App* cmd = app.add_subcommand("ls", "List the shmreplay segments in the shared-memory directory");
  cmd->add_flag("--json", args.json, "Print a JSON array instead of a table");
  return cmd;
}

CLI::App* add_info(CLI::App& app, InfoArgs& args) {
  CLI::App* cmd = app.add_subcommand("info", "Show a segment's geometry, schema, counters and env owners");
  cmd->add_option("NAME", args.name, "Segment name")->required()->type_name("");
  cmd->add_flag("--json", args.json, "Print one JSON object instead of text");
  return cmd;
}

CLI::App* add_rm(CLI::App& app, RmArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "rm", "Remove segments (refuses files that are not shmreplay segments, and segments in use unless --force)");
  cmd->add_option("NAME", args.names, "Segment names")->required()->type_name("");
  cmd->add_flag("--force", args.force, "Remove even while live writers or a live learner use the segment");
  return cmd;
}

const CLI::Validator kPositiveSeconds(
    [](std::string& text) {
      double v = 0.0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      return ec == std::errc() && ptr == text.data() + text.size() && v >= 0.001 && v <= 86400.0
                 ? std::string()
                 : fmt::format("'{}' is not a number of seconds from 0.001 to 86400", text);
    },
    "", "seconds");

const CLI::Validator kStepRange(
    [](std::string& text) {
      return parse_step_range(text) ? std::string()
                                    : fmt::format("'{}' is not a step range (A:B for steps A to B-1, A:, :B or A)", text);
    },
    "", "step range");

struct WatchText {
  std::string interval = "1";
  std::string count;
};

CLI::App* add_watch(CLI::App& app, WatchArgs& args, WatchText& raw) {
  CLI::App* cmd = app.add_subcommand(
      "watch", "A live view of a segment: pushes/s, samples/s, per-env fill and writers (q or Ctrl-C quits)");
  cmd->add_option("NAME", args.name, "Segment name")->required()->type_name("");
  cmd->add_option("--interval", raw.interval, "Seconds between frames")
      ->check(kPositiveSeconds)
      ->type_name("S")
      ->capture_default_str();
  CLI::Option* once = cmd->add_flag("--once", args.once, "Print one frame (rates over one interval) and exit");
  cmd->add_option("--count", raw.count, "Print N frames, one per interval, and exit")
      ->check(kCount)
      ->type_name("N")
      ->excludes(once);
  cmd->add_flag("--json", args.json, "Print each frame as one line of JSON");
  cmd->add_flag("--plain", args.plain, "Print plain frames one after another, even on a terminal");
  return cmd;
}

struct DumpText {
  std::vector<std::string> envs;
  std::string last;
};

CLI::App* add_dump(CLI::App& app, DumpArgs& args, DumpText& raw) {
  CLI::App* cmd = app.add_subcommand("dump", "Print stored steps as a table or JSON lines (large arrays summarised)");
  cmd->add_option("NAME", args.name, "Segment name")->required()->type_name("");
  cmd->add_option("--env", raw.envs, "Env ids (repeat, or separate with commas); default: every env")
      ->delimiter(',')
      ->check(kCount)
      ->type_name("E");
  CLI::Option* last =
      cmd->add_option("--last", raw.last, "The newest N steps of each env")->check(kCount)->type_name("N");
  cmd->add_option("--steps", args.steps, "Steps A to B-1 (A:B), from A (A:), before B (:B), or step A alone")
      ->check(kStepRange)
      ->type_name("A:B")
      ->excludes(last);
  cmd->add_option("--field", args.fields, "Fields to print (repeat, or separate with commas); default: all")
      ->delimiter(',')
      ->type_name("F");
  cmd->add_flag("--online", args.online, "Select from the online view instead of every stored step");
  cmd->add_flag("--full", args.full, "Print every element of every array instead of a summary");
  cmd->add_flag("--json", args.json, "Print one JSON object per step, one per line");
  return cmd;
}

CLI::App* add_save(CLI::App& app, SaveArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "save", "Save a consistent checkpoint of a segment to a file while writers keep pushing (read-only)");
  cmd->add_option("NAME", args.name, "Segment name")->required()->type_name("");
  cmd->add_option("FILE", args.file,
                  "Checkpoint file to write (replaced atomically; a file that is not a checkpoint only with --force)")
      ->required()
      ->type_name("");
  cmd->add_flag("--force", args.force, "Replace FILE even when it is not a shmreplay checkpoint");
  CLI::Option* decode = cmd->add_flag(
      "--decode-compressed", args.decode_compressed,
      "Save compressed fields decoded, as whole steps (what format 2.2 wrote; for readers older than 2.3), instead "
      "of as their compressed records");
  CLI::Option* every =
      cmd->add_option("--every", args.every,
                      "Save periodically: FILE is a chain directory, and every SECONDS a link holding the steps "
                      "published since the previous one is added to it (incremental; until interrupted); 0.001 to "
                      "86400")
          ->check(kPositiveSeconds)
          ->type_name("SECONDS");
  decode->excludes(every);  // save_link has no such option: a chain's links hold the records as they are
  cmd->add_option("--keep", args.keep, "With --every: the newest links kept as restore points (older ones are "
                                       "removed once no kept link needs them)")
      ->check(CLI::Range(1u, 1000000u))
      ->needs(every)
      ->capture_default_str();
  cmd->add_option("--count", args.count, "With --every: stop after this many links (at least 1)")
      ->needs(every)
      ->check(kPositiveCount)
      ->type_name("N");
  cmd->add_option("--nice", args.nice, "Add N to this process's nice value before saving, so that on a busy "
                                       "machine writers and the learner keep the CPU they need (0 leaves it)")
      ->check(CLI::Range(0, 19))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_flag("--progress", args.progress, "Show a progress bar on stderr even when it is not a terminal");
  cmd->add_flag("--json", args.json, "Print what was saved as JSON (with --every: one object per line and link)");
  add_allow_other_owner(cmd, args.allow_other_owner,
                        "Save a segment that belongs to another user, or (--every) into a chain directory of another "
                        "user");
  return cmd;
}

CLI::App* add_load(CLI::App& app, LoadArgs& args, std::string& mode) {
  CLI::App* cmd = app.add_subcommand(
      "load", "Load a checkpoint, or the newest complete link of a chain directory, into a new segment, or into an "
              "existing one with the same schema and sizes");
  cmd->add_option("FILE", args.file, "Checkpoint file, or a chain directory (save --every)")->required()->type_name("");
  cmd->add_option("NAME", args.name, "Segment to load into (default: the name it was saved from)")->type_name("");
  cmd->add_option("--mode", mode, "Permission bits of a new segment's file, in octal: read/write bits only")
      ->check(kOctalMode)
      ->type_name("OCTAL")
      ->capture_default_str();
  cmd->add_flag("--progress", args.progress, "Show a progress bar on stderr even when it is not a terminal");
  cmd->add_flag("--json", args.json, "Print what was loaded as JSON");
  cmd->add_flag("--allow-mismatch", args.allow_mismatch,
                "Load into an existing segment whose priorities (alpha), rate limiter settings or stack continuity "
                "rule differ from the checkpoint's (docs/cli.md says what each part becomes)");
  add_allow_other_owner(cmd, args.allow_other_owner,
                        "Load into an existing segment that belongs to another user, or from a chain directory of "
                        "another user");
  return cmd;
}

CLI::App* add_limit(CLI::App& app, LimitArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "limit", "Show, set or remove a running segment's rate limiter (waiting processes re-check at once); settings "
               "not given keep their current values");
  cmd->add_option("NAME", args.name, "Segment name")->required()->type_name("");
  add_rate_limit_options(cmd, args.rate_limit);
  cmd->add_flag("--off", args.off, "Remove the rate limiter");
  cmd->add_option("--max-staleness", args.max_staleness,
                  "Set the policy window (a buffer with a policy-version field): samples draw steps of versions at "
                  "least the published version minus K, and writers below it are held back; off removes it")
      ->check(kWindow)
      ->type_name("K|off");
  cmd->add_flag("--json", args.json, "Print the limiter's and the policy window's state as JSON");
  add_allow_other_owner(cmd, args.allow_other_owner, "Change the limiter of a segment that belongs to another user");
  return cmd;
}

CLI::App* add_metrics(CLI::App& app, MetricsArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "metrics", "Serve Prometheus metrics of buffers at http://HOST:PORT/metrics, read at each scrape (read-only)");
  cmd->add_option("NAME", args.names, "Segment names (default: every shmreplay segment of yours, or of every user with "
                                      "--all-users, listed at each scrape)")
      ->type_name("");
  CLI::Option* listen =
      cmd->add_option("--listen", args.listen, "Address to serve on, HOST:PORT (port 0: any free port; the address "
                                               "served is printed on stderr)")
          ->type_name("HOST:PORT");
  CLI::Option* once = cmd->add_flag("--once", args.once, "Print one scrape to stdout and exit instead of serving");
  listen->excludes(once);
  cmd->add_flag("--all-users", args.all_users,
                "Serve other users' buffers too. Without it only the buffers whose file belongs to the user running "
                "this are served (whoever can connect reads what is served; a named buffer of another user reads "
                "shmreplay_buffer_up 0)");
  return cmd;
}

constexpr const char* kSubcommands = "create, ls, info, watch, dump, save, journal, load, limit, metrics or rm";

// One line for a command-line error: CLI11's message, or a clearer one for an unknown subcommand or for an option
// another interface spells differently (aliases.hpp: whichever error CLI11 reports first, such an option is the
// user's mistake), and where to find the usage.
std::string usage_message(const CLI::App& app, const CLI::ParseError& e) {
  const std::vector<CLI::App*> chosen = app.get_subcommands();
  const std::vector<std::string> rest = app.remaining();
  std::string message = e.what();
  std::optional<std::string> alias;
  if (!chosen.empty()) {
    for (const std::string& arg : chosen.front()->remaining()) {
      if (!alias) alias = flag_alias_message(chosen.front()->get_name(), arg);
    }
  }
  if (alias) {
    message = *alias;
  } else if (chosen.empty() && rest.empty()) {
    message = fmt::format("a subcommand is required ({})", kSubcommands);
  } else if (chosen.empty()) {
    message = rest.front().starts_with("-") ? fmt::format("unknown option '{}'", rest.front())
                                             : fmt::format("unknown subcommand '{}' (expected {})", rest.front(),
                                                           kSubcommands);
  }
  const std::string help =
      chosen.empty() ? std::string("shmreplay --help") : fmt::format("shmreplay {} --help", chosen.front()->get_name());
  return fmt::format("{}; run '{}'", message, help);
}

// Every subcommand of the CLI and its arguments, as CLI11 fills them; run() runs the one parsed.
struct Subcommands {
  CreateArgs create_args;
  CreateText create_raw;
  LsArgs ls_args;
  InfoArgs info_args;
  RmArgs rm_args;
  WatchArgs watch_args;
  WatchText watch_raw;
  DumpArgs dump_args;
  DumpText dump_raw;
  SaveArgs save_args;
  JournalArgs journal_args;
  LoadArgs load_args;
  std::string load_mode = "0600";
  LimitArgs limit_args;
  MetricsArgs metrics_args;
  CLI::App* create;
  CLI::App* ls;
  CLI::App* info;
  CLI::App* watch;
  CLI::App* dump;
  CLI::App* save;
  CLI::App* journal;
  CLI::App* load;
  CLI::App* rm;
  CLI::App* limit;
  CLI::App* metrics;

  explicit Subcommands(CLI::App& app)
      : create(add_create(app, create_args, create_raw)),
        ls(add_ls(app, ls_args)),
        info(add_info(app, info_args)),
        watch(add_watch(app, watch_args, watch_raw)),
        dump(add_dump(app, dump_args, dump_raw)),
        save(add_save(app, save_args)),
        journal(add_journal(app, journal_args)),
        load(add_load(app, load_args, load_mode)),
        rm(add_rm(app, rm_args)),
        limit(add_limit(app, limit_args)),
        metrics(add_metrics(app, metrics_args)) {}

  // Runs the parsed subcommand (its exit code), after the conversions its arguments still need.
  int run() {
    if (create->parsed()) {
      create_args.num_envs = *parse_unsigned(create_raw.envs, 10);
      create_args.capacity = *parse_unsigned(create_raw.capacity, 10);
      create_args.mode = static_cast<uint32_t>(*parse_unsigned(create_raw.mode, 8));
      return run_create(create_args);
    }
    if (ls->parsed()) return run_ls(ls_args);
    if (info->parsed()) return run_info(info_args);
    if (rm->parsed()) return run_rm(rm_args);
    if (watch->parsed()) {
      watch_args.interval_s = std::stod(watch_raw.interval);
      if (!watch_raw.count.empty()) watch_args.count = *parse_unsigned(watch_raw.count, 10);
      if (!watch_raw.count.empty() && watch_args.count == 0) {
        print_error("--count must be at least 1; run 'shmreplay watch --help'");
        return kExitUsage;
      }
      return run_watch(watch_args);
    }
    if (dump->parsed()) {
      for (const std::string& e : dump_raw.envs) dump_args.envs.push_back(*parse_unsigned(e, 10));
      if (!dump_raw.last.empty()) dump_args.last = *parse_unsigned(dump_raw.last, 10);
      return run_dump(dump_args);
    }
    if (save->parsed()) return run_save(save_args);
    if (journal->parsed()) return run_journal(journal_args);
    if (limit->parsed()) return run_limit(limit_args);
    if (metrics->parsed()) return run_metrics(metrics_args);
    if (load->parsed()) {
      load_args.mode = static_cast<uint32_t>(*parse_unsigned(load_mode, 8));
      return run_load(load_args);
    }
    print_error("no subcommand; run 'shmreplay --help'");  // unreachable: require_subcommand(1)
    return kExitUsage;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("shmreplay: create, list, inspect, watch, dump, save, load, rate-limit, export metrics of and remove "
               "replay buffers in POSIX shared memory",
               "shmreplay");
  app.set_version_flag("--version", fmt::format("shmreplay {} (segment layout {}.{})", shmreplay::kVersion,
                                                shmreplay::layout::kLayoutMajor, shmreplay::layout::kLayoutMinor));
  app.require_subcommand(1);
  app.footer(fmt::format("Segments live in {} ($SHMREPLAY_SHM_DIR, else /dev/shm). Exit codes: 0 success, 1 error, "
                         "2 usage error.\nRun 'shmreplay SUBCOMMAND --help' for a subcommand's options.",
                         shmreplay::shm_directory()));

  Subcommands commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(usage_message(app, e));
    return kExitUsage;
  }

  try {
    return commands.run();
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitFailure;
  }
}
