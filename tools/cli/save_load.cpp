// `shmreplay save` and `shmreplay load`: thin layers over shmreplay/checkpoint.hpp, with a progress bar on stderr
// (when stderr is a terminal, or with --progress). `save --every` adds a link to a chain directory periodically
// (save_link); `load DIR` restores a chain's newest complete link (load_chain). An interrupted save (Ctrl-C,
// SIGTERM, SIGHUP) removes its temporary file before it dies; an interrupted load leaves nothing, since the library
// names a new segment only once it is complete. A save lowers its own CPU priority first (--nice, default 10).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "info_forms.hpp"
#include "progress.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/error.hpp"
#include "text.hpp"

namespace shmreplay::cli {
namespace {

using Json = nlohmann::ordered_json;

// The temporary file of the save in progress, for the signal handler, which may only make async-signal-safe
// calls: the path in a fixed buffer, set before the flag (release) and read after it (acquire).
char g_temp_path[4096];
std::atomic<bool> g_temp_set{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler reads g_temp_set: it must be lock-free");

// SIGINT/SIGTERM/SIGHUP during a save: remove the temporary file, then die of the same signal (the default action
// once the handler returns, since the signal is blocked while it runs), so the shell sees an interrupted command.
extern "C" void remove_temp_and_reraise(int sig) {
  if (g_temp_set.load(std::memory_order_acquire)) ::unlink(g_temp_path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void remove_temp_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = remove_temp_and_reraise;
  ::sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaddset(&sa.sa_mask, sig);  // one handler run at a time
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup: keep ignoring it
    ::sigaction(sig, &sa, nullptr);
  }
}

void remember_temp(const std::string& path) {
  if (path.size() >= sizeof g_temp_path) return;  // too long to keep: a later save removes it (see save_checkpoint)
  std::memcpy(g_temp_path, path.c_str(), path.size() + 1);
  g_temp_set.store(true, std::memory_order_release);
}

Json checkpoint_json(const CheckpointInfo& info) {
  Json envs = Json::array();
  for (const CheckpointEnv& e : info.envs) {
    envs.push_back({{"env", e.env},
                    {"first_step", e.first_step},
                    {"data_from", e.data_from},
                    {"steps", e.steps},
                    {"head", e.head},
                    {"claimed", e.claimed},
                    {"online_start", e.online_start}});
  }
  return {
      {"file", info.path},
      {"format", fmt::format("{}.{}", info.format_major, info.format_minor)},
      {"source", info.source_name},
      {"num_envs", info.num_envs},
      {"capacity", info.capacity},
      {"schema_spec", info.schema.to_string()},
      {"total_steps", info.total_steps},
      {"file_bytes", info.file_bytes},
      {"saved_time_ns", info.saved_time_ns},
      {"chain_id", fmt::format("{:016x}", info.chain_id)},
      {"link", info.link_seq},
      {"max_learners", info.max_learners},
      {"priority_exponent", info.priority_exponent ? Json(*info.priority_exponent) : Json(nullptr)},
      {"initial_priority", initial_priority_json(info.initial_priority)},
      {"sequence_priority_length", info.sequence_priority_length},
      {"max_times_sampled", info.max_times_sampled},
      {"consuming_queue", info.consuming_queue},
      {"policy_version", info.policy_version},
      {"policy_max_staleness", info.policy_max_staleness ? Json(*info.policy_max_staleness) : Json(nullptr)},
      {"rate_limit", info.limiter.limit ? Json(info.limiter.limit->to_string()) : Json(nullptr)},
      {"limiter_samples", info.limiter.samples},
      {"rows_sampled", info.learner.rows_sampled},
      {"envs", std::move(envs)},
  };
}

// One line per link of `save --every`, or one JSON object per line.
void print_link(const LinkResult& r, double seconds, bool json) {
  const CheckpointInfo& info = r.info;
  if (json) {
    Json out = checkpoint_json(info);
    out["whole"] = r.whole;
    out["record_bytes"] = r.record_bytes;
    out["chain_bytes"] = r.chain_bytes;
    out["seconds"] = seconds;
    out["removed"] = r.removed;
    out.erase("envs");
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("link {} ({}): {} steps, {} of records, {}, in {:.2f} s; the directory holds {}{}\n", info.link_seq,
               r.whole ? "whole" : "incremental", info.total_steps, human_bytes(r.record_bytes),
               human_bytes(info.file_bytes), seconds, human_bytes(r.chain_bytes),
               r.removed.empty() ? std::string() : fmt::format(", {} older links removed", r.removed.size()));
  }
  std::fflush(stdout);
}

// The notes of a load or a link, on stderr: what the checkpoint lacked, what a mismatch changed, the files of a
// chain directory not taken.
void print_notes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) fmt::print(stderr, "note: {}\n", n);
}

// Whether a failed link is the directory's fault, which the next tick would meet again: another user's directory
// or file, a link number that would not read back, something else in its place, another saver.
bool ends_the_chain(const Error& e) {
  for (const Errc c : {Errc::already_exists, Errc::lease_held, Errc::permission_denied, Errc::invalid_argument}) {
    if (e.code() == make_error_code(c)) return true;
  }
  return false;
}

// `save --every`: a link every `args.every` seconds, on a fixed schedule (a save longer than the period starts the
// next one at once), until interrupted or `args.count` links. The files of the directory a link did not take are
// printed as notes when they differ from the previous link's.
int run_save_every(const SaveArgs& args, const Buffer& source, ProgressBar& bar) {
  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(args.every));
  auto next = Clock::now();
  bool failures = false;
  std::vector<std::string> notes;
  for (uint64_t n = 0; args.count == 0 || n < args.count; ++n) {
    std::this_thread::sleep_until(next);
    next += period;
    const auto started = Clock::now();
    if (next < started) next = started;  // behind schedule: do not try to catch up with saves in a row
    ChainOptions options;
    options.keep = args.keep;
    options.allow_other_owner = args.allow_other_owner;
    options.save.progress = [&bar](const CheckpointProgress& p) { bar(p.phase, p.done_bytes, p.total_bytes); };
    options.save.temp_file_created = remember_temp;
    try {
      const LinkResult r = save_link(source, args.file, options);
      g_temp_set.store(false, std::memory_order_release);
      if (r.notes != notes) print_notes(r.notes);
      notes = r.notes;
      print_link(r, std::chrono::duration<double>(Clock::now() - started).count(), args.json);
    } catch (const Error& e) {
      // A failed link (a full disk, a busy writer) leaves the chain as it was: say so and try again at the next
      // tick, so that a run keeps its checkpoints once the cause is gone. Only a wrong directory ends the command.
      g_temp_set.store(false, std::memory_order_release);
      if (ends_the_chain(e)) throw;
      print_error(fmt::format("link {} failed and the chain is as it was (next try in {} s): {}",
                              n + 1, args.every, e.what()));
      failures = true;
    }
  }
  return failures ? kExitFailure : kExitOk;
}

}  // namespace

int run_save(const SaveArgs& args) {
  // A save reads and writes as fast as it can; on a machine whose cores the writers and the learner keep busy, a
  // lower CPU priority leaves them theirs (docs/benchmarks/checkpoints.md: 0.65x of their rates beside a save at
  // nice 0 on 2 cores, 0.93x at nice 10), and costs nothing on an idle core.
  errno = 0;
  if (args.nice > 0 && ::nice(args.nice) == -1 && errno != 0) {
    fmt::print(stderr, "shmreplay: warning: cannot lower this save's CPU priority (nice {}): {}\n", args.nice,
               std::strerror(errno));
  }
  const Buffer source = Buffer::open(args.name, {.read_only = true, .allow_other_owner = args.allow_other_owner});
  ProgressBar bar(show_progress(args.progress), fmt::format("'{}'", source.name()));
  remove_temp_on_signals();
  if (args.every > 0) return run_save_every(args, source, bar);
  const CheckpointInfo info = save_checkpoint(
      source, args.file,
      {.progress = [&bar](const CheckpointProgress& p) { bar(p.phase, p.done_bytes, p.total_bytes); },
       .temp_file_created = remember_temp,
       .force = args.force,
       .decode_compressed = args.decode_compressed});
  g_temp_set.store(false, std::memory_order_release);  // renamed to args.file: nothing to remove any more
  if (args.json) {
    fmt::print("{}\n", checkpoint_json(info).dump(2));
    return kExitOk;
  }
  fmt::print("saved '{}' to '{}': {} envs x {} steps, {} steps stored, {}{}\n", source.name(), args.file,
             info.num_envs, info.capacity, info.total_steps, human_bytes(info.file_bytes),
             info.file_bytes >= 1024 ? fmt::format(" ({} bytes)", info.file_bytes) : std::string());
  return kExitOk;
}

int run_load(const LoadArgs& args) {
  ProgressBar bar(show_progress(args.progress), fmt::format("'{}'", args.file));
  const LoadOptions options{
      .progress = [&bar](const CheckpointProgress& p) { bar(p.phase, p.done_bytes, p.total_bytes); },
      .mode = args.mode,
      .allow_other_owner = args.allow_other_owner,
      .allow_mismatch = args.allow_mismatch};
  const bool chain = is_chain_dir(args.file);
  const LoadResult r = chain ? load_chain(args.file, args.name, options) : load_checkpoint(args.file, args.name, options);
  if (r.created) warn_if_world_writable(r.name, args.mode);
  print_notes(r.notes);
  if (args.json) {
    Json out = {{"name", r.name}, {"created", r.created}, {"steps_restored", r.steps_restored}, {"notes", r.notes}};
    out["checkpoint"] = checkpoint_json(r.info);
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  uint64_t saved = 0;
  for (const CheckpointEnv& e : r.info.envs) saved += e.head - e.first_step;
  fmt::print("loaded '{}' into {} segment '{}': {} envs x {} steps, {} steps restored{}\n",
             chain ? r.info.path : args.file, r.created ? "new" : "existing", r.name, r.info.num_envs,
             r.info.capacity, r.steps_restored,
             r.steps_restored < saved ? fmt::format(" of {} saved (see the note)", saved) : std::string());
  return kExitOk;
}

}  // namespace shmreplay::cli
