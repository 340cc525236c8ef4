// The shmreplay CLI's subcommands, one function each. main.cpp parses the command line into these argument
// structs and calls the function; the functions print to stdout and throw shmreplay::Error (or another
// std::exception) on failure, which main() reports as one `shmreplay: error: ...` line with exit code 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shmreplay::cli {

/// Exit codes: success, a runtime failure (the segment, the OS), a usage error (the command line).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

/// Prints the one-line error report to stderr: "shmreplay: error: <message>", newlines folded into spaces.
void print_error(std::string_view message);

struct CreateArgs {
  std::string name;
  uint64_t num_envs = 0;
  uint64_t capacity = 0;
  std::string schema_spec;  ///< the schema text; empty when schema_file is given
  std::string schema_file;  ///< a file holding the schema text; empty when schema_spec is given
  uint32_t mode = 0600;
  bool replace = false;
};

struct LsArgs {
  bool json = false;
};

struct InfoArgs {
  std::string name;
  bool json = false;
};

struct RmArgs {
  std::vector<std::string> names;
};

/// Each returns the process's exit code. run_rm reports a failing name itself and goes on with the others.
int run_create(const CreateArgs& args);
int run_ls(const LsArgs& args);
int run_info(const InfoArgs& args);
int run_rm(const RmArgs& args);

/// Envs that `info` prints in its text form; the rest are counted as omitted (--json has them all).
inline constexpr std::size_t kMaxEnvRowsShown = 64;

}  // namespace shmreplay::cli
