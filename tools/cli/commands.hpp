// The shmreplay CLI's subcommands, one function each. main.cpp parses the command line into these argument
// structs and calls the function; the functions print to stdout and throw shmreplay::Error (or another
// std::exception) on failure, which main() reports as one `shmreplay: error: ...` line with exit code 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shmreplay/counters.hpp"
#include "shmreplay/inspector.hpp"

namespace CLI {
class App;
}

namespace shmreplay::cli {

/// Exit codes: success, a runtime failure (the segment, the OS), a usage error (the command line).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

/// Prints the one-line error report to stderr: "shmreplay: error: <message>", newlines folded into spaces.
void print_error(std::string_view message);

/// Prints a one-line warning to stderr, "shmreplay: warning: <message>", when a new segment `name` got a
/// world-writable `mode` (allowed, but every local user can then corrupt it).
void warn_if_world_writable(const std::string& name, uint32_t mode);

/// The rate limiter's options, shared by `create` and `limit`: --samples-per-insert with --error-buffer (Reverb's
/// SampleToInsertRatio, after --min-size-to-sample steps), or --min-size-to-sample alone (Reverb's MinSize).
struct RateLimitArgs {
  std::optional<double> samples_per_insert;
  std::optional<double> error_buffer;
  std::optional<uint64_t> min_size_to_sample;
  /// The limiter these ask for (nullopt when none is asked for); throws Error(invalid_argument) for an
  /// incomplete set (a ratio without an error buffer, an error buffer without a ratio).
  std::optional<RateLimit> limit() const;
  /// Whether any of the options was given.
  bool any() const noexcept { return samples_per_insert || error_buffer || min_size_to_sample; }
  /// The limiter these ask for on top of `current` (`limit` on a running buffer): each setting not given keeps
  /// its current value (a ratio and its error buffer only from a ratio limiter), then as limit().
  std::optional<RateLimit> merged(const std::optional<RateLimit>& current) const;
};

struct CreateArgs {
  std::string name;
  uint64_t num_envs = 0;
  uint64_t capacity = 0;
  std::string schema_spec;  ///< the schema text; empty when schema_file is given
  std::string schema_file;  ///< a file holding the schema text; empty when schema_spec is given
  uint32_t mode = 0600;
  bool replace = false;
  shmreplay::EpisodeFields episodes;   ///< field names with episode roles; all empty: none
  uint64_t episode_queue_capacity = 0;  ///< 0: the library's default
  std::optional<double> priority_exponent;  ///< alpha: with it, the buffer has priorities
  uint64_t stack_restarts = 0;  ///< stacked fields' reserve of non-continuing stacks per env; 0: the default
  std::string stack_continuity = "compare";  ///< --stack-continuity compare|episodes
  uint64_t learners = 1;  ///< --learners: learner processes that may sample at once (max_learners)
  std::string policy_version;       ///< --policy-version: the field holding each step's policy version; empty: none
  uint64_t max_times_sampled = 0;   ///< --max-times-sampled: the sample cap; 0: none
  std::optional<double> initial_priority;  ///< --initial-priority: new steps' priority; nullopt: the running maximum
  uint64_t sequence_priority_length = 0;   ///< --sequence-priority-length: L of sequence priorities; 0: none
  bool consuming_queue = false;            ///< --consuming-queue: each step delivered once
  uint64_t reanalyse_chunk = 0;            ///< --reanalyse-chunk C: a reanalyse walk of C-step chunks
  uint64_t cold_capacity = 0;              ///< --cold-capacity N: steps per env kept on disk; 0: no cold tier
  std::string cold_dir;                    ///< --cold-dir D: the cold tier's directory
  uint64_t compressed_bytes = 0;      ///< --compressed-bytes: compressed fields' byte budget; 0: by the ratio
  double expected_compression = 0;    ///< --expected-compression: the ratio the budget assumes; 0: the default
  RateLimitArgs rate_limit;
  shmreplay::Populate populate = shmreplay::Populate::never;  ///< --populate auto|always|never
  bool progress = false;  ///< a populate progress bar on stderr whatever the size, even when not a terminal
};

struct LimitArgs {
  std::string name;
  RateLimitArgs rate_limit;
  bool off = false;   ///< remove the limiter
  /// --max-staleness K|off: the policy window to set (Buffer::set_policy_window); empty: not given.
  std::string max_staleness;
  bool json = false;
  bool allow_other_owner = false;  ///< change the limiter of another user's segment
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
  bool force = false;  ///< remove even while live writers or a live learner use the segment
};

struct WatchArgs {
  std::string name;
  double interval_s = 1.0;  ///< seconds between frames
  uint64_t count = 0;       ///< frames to print, then exit; 0: until q, Ctrl-C or a signal
  bool once = false;        ///< one frame (rates measured over one interval), then exit
  bool json = false;        ///< one JSON object per frame, one per line
  bool plain = false;       ///< plain frames even on a terminal
};

struct DumpArgs {
  std::string name;
  std::vector<uint64_t> envs;       ///< empty: every env
  std::optional<uint64_t> last;     ///< the newest N steps of each env's view
  std::string steps;                ///< a step range "A:B" (half-open), "A:", ":B" or "A"; empty: the whole view
  std::vector<std::string> fields;  ///< empty: every field
  bool online = false;              ///< the online view instead of the replay view
  bool json = false;                ///< JSON lines, one per step
  bool full = false;                ///< every element of every array, never a summary
};

struct SaveArgs {
  std::string name;
  std::string file;
  bool progress = false;  ///< a progress bar on stderr even when stderr is not a terminal
  bool json = false;
  bool allow_other_owner = false;  ///< save another user's segment, or into another user's chain directory
  bool force = false;              ///< replace FILE even when it is not a checkpoint
  bool decode_compressed = false;  ///< compressed fields saved decoded, as whole steps (format 2.2's way)
  double every = 0;                ///< > 0: FILE is a chain directory; a link every this many seconds
  uint32_t keep = 3;               ///< with every: the newest links kept as restore points
  uint64_t count = 0;              ///< with every: stop after this many links (0, not given: until interrupted)
  int nice = 10;                   ///< added to the process's nice value before the save (0: leave it)
};

struct JournalArgs {
  std::string name;
  std::string dir;
  double bound = 2.0;   ///< seconds within which a published step is durable
  uint32_t keep = 3;    ///< the newest links kept as restore points
  bool verbose = false; ///< a line per link
  bool json = false;    ///< a JSON object per link
  bool allow_other_owner = false;
};

struct MetricsArgs {
  std::vector<std::string> names;  ///< the buffers to export; empty: every shmreplay segment, listed at each scrape
  std::string listen;              ///< HOST:PORT to serve /metrics on (port 0: any free port, printed on stderr)
  bool once = false;               ///< print one scrape to stdout and exit, without serving
  bool all_users = false;          ///< serve other users' buffers too (default: only the caller's, by euid)
};

struct LoadArgs {
  std::string file;
  std::string name;  ///< empty: the name the checkpoint was saved from
  uint32_t mode = 0600;
  bool progress = false;
  bool json = false;
  bool allow_other_owner = false;  ///< load into another user's existing segment, or from their chain directory
  bool allow_mismatch = false;     ///< load into a segment whose priorities, limiter or stack rule differ
};

/// Each returns the process's exit code. run_rm reports a failing name itself and goes on with the others.
int run_create(const CreateArgs& args);
int run_ls(const LsArgs& args);
int run_info(const InfoArgs& args);
int run_rm(const RmArgs& args);
int run_watch(const WatchArgs& args);  // watch.cpp
int run_dump(const DumpArgs& args);    // dump.cpp
int run_save(const SaveArgs& args);    // save_load.cpp
int run_load(const LoadArgs& args);    // save_load.cpp
int run_journal(const JournalArgs& args);  // journal.cpp
/// The `journal` subcommand's options (journal.cpp keeps them beside the command).
CLI::App* add_journal(CLI::App& app, JournalArgs& args);
int run_limit(const LimitArgs& args);  // limit.cpp
int run_metrics(const MetricsArgs& args);  // metrics.cpp

/// One scrape of `shmreplay metrics`: the Prometheus text exposition of `names` (when empty, every segment whose
/// file this process's euid owns, or every segment when `all_users`), read from read-only mappings now. A buffer
/// that does not open, or that another user owns and not `all_users`, is shmreplay_buffer_up 0. metrics.cpp.
std::string metrics_text(const std::vector<std::string>& names, bool all_users);

/// The rate limiter's line of `info` and `watch`: settings, counts, ratio and who waits since when.
std::string rate_limit_text(const RateLimitState& s);

/// Parses dump's step range: "A:B" is [A, B), "A:" is [A, end), ":B" is [0, B), "A" is [A, A + 1); nullopt when
/// the text is none of these (or A > B).
std::optional<std::pair<uint64_t, uint64_t>> parse_step_range(const std::string& text);

/// An env's writer state for display: "none", "alive", "dead", or "idle" (alive, no push for kIdleAfterNs).
inline constexpr uint64_t kIdleAfterNs = 10'000'000'000ull;
std::string state_text(const EnvInfo& env);

/// The segment's owner for `info`: "uid 1000 (alice)", and when that is not this process's user, who this process
/// is and what that means for the programs that open it.
std::string owner_text(const SegmentInfo& info);

/// Bytes the segment stores per step slot: data_bytes / (num_envs x capacity). With stacked fields it is less than
/// step_bytes (a stacked field keeps about one frame per step, plus its frame-index word); otherwise equal.
double stored_step_bytes(const SegmentInfo& info);
/// A step's bytes for display: "25 bytes", or with stacked or compressed fields "28233 bytes as pushed, 7279.7
/// stored" (compressed: the byte budget's share).
std::string step_bytes_text(const SegmentInfo& info);
/// The restarts (steps whose stack does not continue the previous step's) that a stacked field's frame rings hold
/// per env at no loss: (frames - capacity) / (K - 1) - 1, rounded down.
uint64_t stack_restarts_held(const StackGeometry& stack, uint64_t capacity);

/// An env row of the counter table with a column in `info`'s and `watch`'s env tables (Counter::column): its index
/// in EnvInfo::counters and the row.
struct EnvColumn {
  std::size_t index = 0;
  const Counter* row = nullptr;
};
/// Those rows that apply to the segment `info` describes (counter_applies), in row order; both tables put them
/// last, so that the usual columns keep their places.
std::vector<EnvColumn> env_columns(const SegmentInfo& info);

// -- Compressed fields (compression.cpp) --

/// A codec as the schema writes it: "lz4", "zstd=3" ("none" for Codec::none).
std::string codec_text(Codec codec, int32_t level);
/// The summary lines of `info` and `watch` for the compressed fields (key, text): one per field, then the bytes per
/// stored step; none without compressed fields.
std::vector<std::pair<std::string, std::string>> compressed_lines(const SegmentInfo& info);
/// Every compressed field's frames as pushed over their records' bytes; 0 without (or before a frame was stored).
double compression_ratio(const SegmentInfo& info);
/// A counter's cell in a text table: its value, in human units for a row in bytes ("1.2 KiB").
std::string counter_cell(const Counter& c, uint64_t value);

/// Envs that `info` prints in its text form; the rest are counted as omitted (--json has them all).
inline constexpr std::size_t kMaxEnvRowsShown = 64;

}  // namespace shmreplay::cli
