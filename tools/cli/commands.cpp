#include "shmreplay/internal/segment.hpp"
#include "commands.hpp"
#include "info_forms.hpp"

#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "detail/os/owner.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/schema.hpp"
#include "progress.hpp"
#include "text.hpp"

namespace shmreplay::cli {
namespace {

using Align = Table::Align;

Schema read_schema_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw_errno(errno, fmt::format("cannot read schema file '{}'", path));
  std::string text;
  char chunk[4096];
  std::size_t got = 0;
  while ((got = std::fread(chunk, 1, sizeof chunk, file.get())) > 0) text.append(chunk, got);
  if (std::ferror(file.get())) throw_errno(errno, fmt::format("cannot read schema file '{}'", path));
  try {
    return Schema::parse(text);
  } catch (const Error& e) {
    throw Error(e.errc(), fmt::format("schema file '{}': {}", path, e.what()));
  }
}

}  // namespace

void print_error(std::string_view message) {
  std::string line;
  for (const char c : message) {  // one line, and no control characters from a file's name or contents
    if (c == '\n' || c == '\r' || c == '\t') {
      line += ' ';
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      line += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      line += c;
    }
  }
  std::fflush(stdout);  // keep what was printed before the error ahead of it when both go to one terminal
  fmt::print(stderr, "shmreplay: error: {}\n", line);
}

void warn_if_world_writable(const std::string& name, uint32_t mode) {
  if (!detail::world_writable(mode)) return;
  std::fflush(stdout);
  fmt::print(stderr,
             "shmreplay: warning: mode {:04o} makes segment '{}' world-writable: every user of this machine can "
             "corrupt its steps and counters; share it with a group instead (mode 0660)\n",
             mode, name);
}

int run_create(const CreateArgs& args) {
  const Schema schema = args.schema_file.empty() ? Schema::parse(args.schema_spec) : read_schema_file(args.schema_file);
  // A bar for big segments on a terminal (populating 256 MiB takes a fraction of a second), or when asked.
  constexpr uint64_t kBarFromBytes = uint64_t{256} << 20;
  ProgressBar bar(show_progress(args.progress), fmt::format("'{}'", args.name));
  const Buffer b = Buffer::create(
      args.name, args.num_envs, args.capacity, schema,
      {.mode = args.mode,
       .replace = args.replace,
       .episodes = args.episodes,
       .episode_queue_capacity = args.episode_queue_capacity,
       .policy_version = args.policy_version,
       .priority_exponent = args.priority_exponent,
       .initial_priority = args.initial_priority,
       .sequence_priority_length = args.sequence_priority_length,
       .rate_limit = args.rate_limit.limit(),
       .stack_restarts = args.stack_restarts,
       .stack_continuity = args.stack_continuity == "episodes" ? StackContinuity::episodes : StackContinuity::compare,
       .compressed_bytes = args.compressed_bytes,
       .expected_compression = args.expected_compression,
       .max_learners = args.learners,
       .max_times_sampled = args.max_times_sampled,
       .consuming_queue = args.consuming_queue,
       .reanalyse_chunk = args.reanalyse_chunk,
       .cold_capacity = args.cold_capacity,
       .cold_dir = args.cold_dir,
       .populate = args.populate,
       .populate_progress = [&bar, &args](uint64_t done, uint64_t total) {
         if (args.progress || total > kBarFromBytes) bar("populating", done, total);
       }});
  SegmentInfo info;  // what step_bytes_text reads
  info.num_envs = b.num_envs();
  info.capacity = b.capacity();
  info.step_bytes = schema.step_bytes();
  info.data_bytes = stored_data_bytes(b);
  info.stacks = segment_of(b).stacks();
  fmt::print("created '{}': {} x {}, {} per step, {} ({})\n", b.name(), counted(b.num_envs(), "env", "envs"),
             counted(b.capacity(), "step", "steps"), step_bytes_text(info), human_bytes(b.total_bytes()), b.path());
  for (const PackedGeometry& g : segment_of(b).packed()) {  // the byte budget each compressed field got
    fmt::print("  {} ({}): {} per env for its records, {} in all; {} of frames as pushed per env\n",
               schema[g.stack.field].name, codec_text(g.codec, g.level), human_bytes(g.ring_bytes),
               human_bytes(g.ring_bytes * b.num_envs()), human_bytes(g.stack.frame_bytes * b.capacity()));
  }
  warn_if_world_writable(b.name(), args.mode);
  return kExitOk;
}

int run_ls(const LsArgs& args) {
  const std::vector<ListedSegment> segments = list_segments();
  if (args.json) {
    Json out = Json::array();
    for (const ListedSegment& s : segments) out.push_back(listed_json(s));
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  if (segments.empty()) {
    fmt::print("no shmreplay segments in {}\n", shm_directory());
    return kExitOk;
  }
  Table t({{"NAME"},
           {"ENVS", Align::right},
           {"CAPACITY", Align::right},
           {"FILL", Align::right},
           {"STEPS", Align::right},
           {"BYTES", Align::right},
           {"WRITERS", Align::right},
           {"OWNER"},
           {"AGE", Align::right}});
  for (const ListedSegment& s : segments) {
    if (!s.info) {
      t.add_spanning_row(s.name, "error: " + s.error);
      continue;
    }
    const SegmentInfo& i = *s.info;
    t.add_row({s.name, fmt::format("{}", i.num_envs), fmt::format("{}", i.capacity),
               percent(i.replay_steps, i.num_envs * i.capacity), fmt::format("{}", i.total_pushed),
               human_bytes(i.total_bytes), fmt::format("{}", i.live_writers), owner_cell(i),
               human_age(age_ns(i.creation_time_ns))});
  }
  fmt::print("{}", t.render());
  return kExitOk;
}

int run_info(const InfoArgs& args) {
  // Display only: a segment of another user is shown, with its owner (the "owner" line says what that means).
  const SegmentInfo info = Inspector(args.name, {.allow_other_owner = true}).snapshot();
  if (args.json) {
    fmt::print("{}\n", info_json(info).dump(2));
    return kExitOk;
  }
  print_info_summary(info);
  print_schema_table(info.schema);
  print_env_table(info);
  return kExitOk;
}

namespace {

// Why `name` must not be removed now (its live writers and learner) and how many processes that is; "" and 0
// when nothing alive uses it. A segment that cannot be opened has no users we can name: Buffer::remove decides.
std::pair<std::string, std::size_t> live_users(const std::string& name) {
  SegmentInfo info;
  try {
    info = Inspector(name, {.allow_other_owner = true}).snapshot();
  } catch (const Error&) {
    return {"", 0};
  }
  std::vector<uint64_t> pids;
  for (const EnvInfo& e : info.envs) {
    if (e.owner == OwnerState::alive && std::find(pids.begin(), pids.end(), e.owner_pid) == pids.end()) {
      pids.push_back(e.owner_pid);
    }
  }
  std::string why;
  if (!pids.empty()) {
    why = fmt::format("{} (pid{} {})", counted(pids.size(), "live writer", "live writers"), pids.size() == 1 ? "" : "s",
                      fmt::join(pids, ", "));
  }
  std::size_t processes = pids.size();
  std::vector<uint64_t> learners;  // the live learners' pids (layout 1.7: one per slot held)
  for (const LearnerInfo& l : info.learners) {
    if (l.state == OwnerState::alive && std::find(learners.begin(), learners.end(), l.pid) == learners.end()) {
      learners.push_back(l.pid);
    }
  }
  if (!learners.empty()) {
    why += fmt::format("{}{} (pid{} {})", why.empty() ? "" : " and ",
                       learners.size() == 1 ? std::string("a live learner")
                                            : fmt::format("{} live learners", learners.size()),
                       learners.size() == 1 ? "" : "s", fmt::join(learners, ", "));
    for (const uint64_t pid : learners) {
      if (std::find(pids.begin(), pids.end(), pid) == pids.end()) ++processes;
    }
  }
  return {why, processes};
}

}  // namespace

int run_rm(const RmArgs& args) {
  int code = kExitOk;
  for (const std::string& name : args.names) {
    try {
      if (!args.force) {
        const auto [users, processes] = live_users(name);
        if (processes > 0) {
          throw Error(Errc::lease_held,
                      fmt::format("refusing to remove '{}': it is in use by {}; stop {} first, or use --force "
                                  "(processes that have it mapped keep working on their mapping)",
                                  name, users, processes == 1 ? "it" : "them"));
        }
      }
      Buffer::remove(name);
      fmt::print("removed '{}'\n", name);
    } catch (const std::exception& e) {
      print_error(e.what());
      code = kExitFailure;
    }
  }
  return code;
}

}  // namespace shmreplay::cli
