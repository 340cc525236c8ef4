// `shmreplay save` and `shmreplay load`: thin layers over shmreplay/checkpoint.hpp, with a progress bar on stderr
// (when stderr is a terminal, or with --progress). An interrupted save (Ctrl-C, SIGTERM, SIGHUP) removes its
// temporary file before it dies; an interrupted load leaves nothing, since the library names a new segment only
// once it is complete.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "progress.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/checkpoint.hpp"
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
      {"envs", std::move(envs)},
  };
}

}  // namespace

int run_save(const SaveArgs& args) {
  const Buffer source = Buffer::open(args.name, {.read_only = true, .allow_other_owner = args.allow_other_owner});
  ProgressBar bar(show_progress(args.progress), fmt::format("'{}'", source.name()));
  remove_temp_on_signals();
  const CheckpointInfo info = save_checkpoint(
      source, args.file,
      {.progress = [&bar](const CheckpointProgress& p) { bar(p.phase, p.done_bytes, p.total_bytes); },
       .temp_file_created = remember_temp,
       .force = args.force});
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
  const LoadResult r = load_checkpoint(
      args.file, args.name,
      {.progress = [&bar](const CheckpointProgress& p) { bar(p.phase, p.done_bytes, p.total_bytes); },
       .mode = args.mode,
       .allow_other_owner = args.allow_other_owner});
  if (r.created) warn_if_world_writable(r.name, args.mode);
  if (args.json) {
    Json out = {{"name", r.name}, {"created", r.created}};
    out["checkpoint"] = checkpoint_json(r.info);
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  fmt::print("loaded '{}' into {} segment '{}': {} envs x {} steps, {} steps restored\n", args.file,
             r.created ? "new" : "existing", r.name, r.info.num_envs, r.info.capacity, r.info.total_steps);
  return kExitOk;
}

}  // namespace shmreplay::cli
