// The CLI's rejected option aliases (aliases.hpp): a table and its lookup. Every row is in docs/naming.md.
#include "aliases.hpp"

#include <array>

#include <fmt/format.h>

namespace shmreplay::cli {

namespace {

constexpr std::array kFlagAliases = {
    FlagAlias{"create", "--num-envs", "--envs", "num_envs in C++ and Python"},
    FlagAlias{"create", "--episode-queue-capacity", "--episode-queue", "episode_queue_capacity in C++ and Python"},
    FlagAlias{"create", "--alpha", "--priority-exponent", "priority_exponent in C++ and Python: alpha"},
    FlagAlias{"create", "--min-size", "--min-size-to-sample", "RateLimit.min_size in Python"},
    FlagAlias{"limit", "--min-size", "--min-size-to-sample", "RateLimit.min_size in Python"},
    FlagAlias{"limit", "--ratio", "--samples-per-insert", "RateLimit.ratio in Python: with --error-buffer"},
    FlagAlias{"create", "--ratio", "--samples-per-insert", "RateLimit.ratio in Python: with --error-buffer"},
    FlagAlias{"dump", "--envs", "--env", "repeat it, or separate ids with commas"},
    FlagAlias{"dump", "--fields", "--field", "repeat it, or separate names with commas"},
    FlagAlias{"watch", "--interval-ms", "--interval", "the CLI takes seconds, e.g. --interval 0.5"},
};

}  // namespace

std::span<const FlagAlias> flag_aliases() noexcept { return kFlagAliases; }

std::optional<std::string> flag_alias_message(std::string_view subcommand, std::string_view arg) {
  const std::string_view option = arg.substr(0, arg.find('='));  // "--num-envs=4" is "--num-envs"
  for (const FlagAlias& a : kFlagAliases) {
    if (subcommand == a.subcommand && option == a.alias) {
      return fmt::format("unknown option '{}'; did you mean '{}'? ({})", a.alias, a.right, a.origin);
    }
  }
  return std::nullopt;
}

}  // namespace shmreplay::cli
