// tools/cli/sampling_options.cpp: the sampling policies' options of `create` and `limit` (sampling_options.hpp).
#include "sampling_options.hpp"

#include "option_checks.hpp"

namespace shmreplay::cli {

void add_rate_limit_options(CLI::App* cmd, RateLimitArgs& args) {
  CLI::Option_group* g = cmd->add_option_group(
      "rate limit", "A rate limiter (Reverb's): samples per inserted step within an error buffer, and/or a minimum size");
  g->add_option("--samples-per-insert", args.samples_per_insert,
                "Sampled rows per pushed step the limiter keeps (needs --error-buffer)")
      ->check(kFiniteNumber)
      ->type_name("X");
  g->add_option("--error-buffer", args.error_buffer,
                "How far (in sampled rows) samples may run ahead of or behind the ratio")
      ->check(kFiniteNumber)
      ->type_name("E");
  g->add_option("--min-size-to-sample", args.min_size_to_sample,
                "No sampling before this many steps are stored (alone: Reverb's MinSize)")
      ->check(kCount)
      ->type_name("N");
}

void add_sampling_policy_options(CLI::App* cmd, CreateArgs& args) {
  cmd->add_option("--policy-version", args.policy_version,
                  "Field that holds each step's policy version (scalar integer, non-decreasing per env): learners "
                  "sample inside a staleness window (limit --max-staleness) and writers behind it are held back")
      ->type_name("FIELD");
  cmd->add_option("--max-times-sampled", args.max_times_sampled,
                  "Deliver each stored step as a sampled row's start at most N times in all, by every learner "
                  "together; a step sampled N times leaves the views")
      ->check(kCount)
      ->type_name("N");
  cmd->add_option("--priority-exponent", args.priority_exponent,
                  "Give every step a priority; prioritized samples draw starts by priority^ALPHA")
      ->type_name("ALPHA");
  cmd->add_option("--initial-priority", args.initial_priority,
                  "With priorities: a new step's priority (default: the running maximum); inf draws steps no "
                  "prioritized sample returned yet before any other")
      ->type_name("P");
  cmd->add_option("--sequence-priority-length", args.sequence_priority_length,
                  "With priorities: prioritized samples of L steps weigh a start by eta*max + (1-eta)*mean of its "
                  "sequence's priority^alpha (R2D2)")
      ->check(kCount)
      ->type_name("L");
  cmd->add_flag("--consuming-queue", args.consuming_queue,
                "Make it a consuming queue: each step delivered once (sample with consume), writers wait instead of "
                "overwriting a step not yet delivered");
  cmd->add_option("--reanalyse-chunk", args.reanalyse_chunk,
                  "Give it a reanalyse walk of C-step chunks: workers are handed each chunk once per pass, in an "
                  "order they choose, and record the target version they used")
      ->check(kCount)
      ->type_name("C");
  cmd->add_option("--cold-capacity", args.cold_capacity,
                  "Keep N more steps per env on disk beyond the ring (a cold tier, sampled with the ring's steps; "
                  "needs --cold-dir)")
      ->check(kCount)
      ->type_name("N");
  cmd->add_option("--cold-dir", args.cold_dir,
                  "The cold tier's directory, an absolute path on a local disk: its files go into D/NAME.cold/ and "
                  "`rm` removes them")
      ->type_name("D");
}

}  // namespace shmreplay::cli
