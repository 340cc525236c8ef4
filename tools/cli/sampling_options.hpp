// tools/cli/sampling_options.hpp: the options of the sampling policies a buffer is created with or changed by:
// the rate limiter's (`create`, `limit`), and the priorities', policy versions', sample cap's and consuming queue's
// (`create`). Used by main.cpp; the values' checks are option_checks.hpp's.
#pragma once

#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace shmreplay::cli {

/// The rate limiter's options (create and limit). In `limit`, an option not given keeps its current value.
void add_rate_limit_options(CLI::App* cmd, RateLimitArgs& args);
/// The sampling policies fixed at creation: priorities (with the initial priority and sequence priorities), the
/// policy-version field, the sample cap, the consuming queue.
void add_sampling_policy_options(CLI::App* cmd, CreateArgs& args);

}  // namespace shmreplay::cli
