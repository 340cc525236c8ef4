// The option names a user brings to the CLI from shmreplay's C++ and Python APIs (or from another subcommand),
// which the CLI does not take, and the option to use instead: the CLI rows of docs/naming.md's alias table.
// main.cpp consults it when the command line does not parse, so that `create --num-envs 4` is answered with
// "unknown option '--num-envs'; did you mean '--envs'?" rather than CLI11's "arguments were not expected".
// tests/test_cli_naming.cpp runs every row of the doc's table against the CLI.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace shmreplay::cli {

/// One option the CLI rejects with a pointer to the right one.
struct FlagAlias {
  const char* subcommand;  ///< "create", "dump", ...
  const char* alias;       ///< the option as a user would type it, "--num-envs"
  const char* right;       ///< the option to use, "--envs"
  const char* origin;      ///< where the alias comes from, for the message: "num_envs in C++ and Python"
};

/// Every row (the table that docs/naming.md lists).
std::span<const FlagAlias> flag_aliases() noexcept;

/// The message for `arg` (an argument of `subcommand` that did not parse: "--num-envs" or "--num-envs=4") when it
/// is an alias in the table: "unknown option '--num-envs'; did you mean '--envs'? (num_envs in C++ and Python)".
/// nullopt for any other argument.
std::optional<std::string> flag_alias_message(std::string_view subcommand, std::string_view arg);

}  // namespace shmreplay::cli
