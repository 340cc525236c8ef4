// shmreplay: the command-line tool that creates, lists, inspects and removes shmreplay segments.
//
//   shmreplay create NAME --envs N --capacity T (--schema SPEC | --schema-file FILE) [--mode OCTAL] [--replace]
//   shmreplay ls [--json]
//   shmreplay info NAME [--json]
//   shmreplay rm NAME...
//   shmreplay --version
//
// Exit codes: 0 success; 1 a runtime error (one `shmreplay: error: ...` line on stderr); 2 a usage error (the
// same kind of line). This file only parses the command line; commands.cpp does the work.
#include <charconv>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/layout.hpp"
#include "shmreplay/version.hpp"

namespace {

using namespace shmreplay::cli;

// Parses all of `text` as an unsigned integer in `base`; nullopt when it is not one or does not fit.
std::optional<uint64_t> parse_unsigned(const std::string& text, int base) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, base);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// CLI11's own integer parsing accepts "-1" (as 2^64-1) and reads "010" as octal; counts here are plain decimal.
const CLI::Validator kCount(
    [](std::string& text) {
      return parse_unsigned(text, 10) ? std::string() : fmt::format("'{}' is not a non-negative decimal integer", text);
    },
    "", "count");

const CLI::Validator kOctalMode(
    [](std::string& text) {
      const auto mode = parse_unsigned(text, 8);
      return mode && *mode <= 07777 ? std::string()
                                    : fmt::format("'{}' is not an octal file mode (0 to 7777, e.g. 0600)", text);
    },
    "", "octal mode");

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
  cmd->add_option("--mode", raw.mode, "Permission bits of the segment file, in octal")
      ->check(kOctalMode)
      ->type_name("OCTAL")
      ->capture_default_str();
  cmd->add_flag("--replace", args.replace, "Atomically replace an existing segment of the same name");
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
  CLI::App* cmd = app.add_subcommand("rm", "Remove segments (refuses files that are not shmreplay segments)");
  cmd->add_option("NAME", args.names, "Segment names")->required()->type_name("");
  return cmd;
}

// One line for a command-line error: CLI11's message, or a clearer one for an unknown subcommand, and where to
// find the usage.
std::string usage_message(const CLI::App& app, const CLI::ParseError& e) {
  const std::vector<CLI::App*> chosen = app.get_subcommands();
  const std::vector<std::string> rest = app.remaining();
  std::string message = e.what();
  if (chosen.empty() && rest.empty()) {
    message = "a subcommand is required (create, ls, info or rm)";
  } else if (chosen.empty()) {
    message = rest.front().starts_with("-") ? fmt::format("unknown option '{}'", rest.front())
                                             : fmt::format("unknown subcommand '{}' (expected create, ls, info or rm)",
                                                           rest.front());
  }
  const std::string help =
      chosen.empty() ? std::string("shmreplay --help") : fmt::format("shmreplay {} --help", chosen.front()->get_name());
  return fmt::format("{}; run '{}'", message, help);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("shmreplay: create, list, inspect and remove replay buffers in POSIX shared memory", "shmreplay");
  app.set_version_flag("--version", fmt::format("shmreplay {} (segment layout {}.{})", shmreplay::kVersion,
                                                shmreplay::layout::kLayoutMajor, shmreplay::layout::kLayoutMinor));
  app.require_subcommand(1);
  app.footer(fmt::format("Segments live in {} ($SHMREPLAY_SHM_DIR, else /dev/shm). Exit codes: 0 success, 1 error, "
                         "2 usage error.\nRun 'shmreplay SUBCOMMAND --help' for a subcommand's options.",
                         shmreplay::shm_directory()));

  CreateArgs create_args;
  CreateText create_raw;
  LsArgs ls_args;
  InfoArgs info_args;
  RmArgs rm_args;
  CLI::App* create = add_create(app, create_args, create_raw);
  CLI::App* ls = add_ls(app, ls_args);
  CLI::App* info = add_info(app, info_args);
  CLI::App* rm = add_rm(app, rm_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(usage_message(app, e));
    return kExitUsage;
  }

  try {
    if (create->parsed()) {
      create_args.num_envs = *parse_unsigned(create_raw.envs, 10);
      create_args.capacity = *parse_unsigned(create_raw.capacity, 10);
      create_args.mode = static_cast<uint32_t>(*parse_unsigned(create_raw.mode, 8));
      return run_create(create_args);
    }
    if (ls->parsed()) return run_ls(ls_args);
    if (info->parsed()) return run_info(info_args);
    if (rm->parsed()) return run_rm(rm_args);
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitFailure;
  }
  print_error("no subcommand; run 'shmreplay --help'");  // unreachable: require_subcommand(1)
  return kExitUsage;
}
