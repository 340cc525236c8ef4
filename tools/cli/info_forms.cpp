// tools/cli/info_forms.cpp: what `info`, `ls` and `watch` print of a segment: its JSON forms and its text tables
// (info_forms.hpp, commands.hpp). The commands themselves are in commands.cpp.
#include "info_forms.hpp"

#include "commands.hpp"

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
#include "detail/os/process.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/counters.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/schema.hpp"
#include "progress.hpp"
#include "text.hpp"


namespace shmreplay::cli {

using Align = Table::Align;

std::string counted(uint64_t n, std::string_view singular, std::string_view plural) {
  return fmt::format("{} {}", n, n == 1 ? singular : plural);
}

std::string layout_text(uint32_t major, uint32_t minor) { return fmt::format("{}.{}", major, minor); }

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }
// -- JSON forms --

Json schema_json(const Schema& schema) {
  Json fields = Json::array();
  for (const Field& f : schema.fields()) {
    fields.push_back({{"name", f.name},
                      {"dtype", dtype_name(f.dtype)},
                      {"shape", f.shape},
                      {"bytes", f.bytes()},
                      {"stack_axis", f.stack_axis ? Json(*f.stack_axis) : Json(nullptr)},
                      {"codec", f.compressed() ? Json(codec_text(f.codec, f.codec_level)) : Json(nullptr)},
                      {"derived", f.derived}});
  }
  return fields;
}

// The stacked fields (layout 1.6): one object each, [] without.
Json stacks_json(const SegmentInfo& i) {
  Json stacks = Json::array();
  for (const StackGeometry& st : i.stacks) {
    const Field& f = i.schema[st.field];
    stacks.push_back({{"field", f.name},
                      {"index", st.field},
                      {"axis", *f.stack_axis},
                      {"depth", st.depth},
                      {"frames_per_env", st.frames},
                      {"frame_bytes", st.frame_bytes},
                      {"restarts_held", stack_restarts_held(st, i.capacity)},
                      {"ring_bytes", i.num_envs * st.frames * st.frame_bytes},
                      {"index_bytes", i.num_envs * i.capacity * sizeof(uint64_t)}});
  }
  return stacks;
}

void add_counter_keys(Json& j, CounterScope scope, const std::vector<uint64_t>& values) {
  const std::span<const Counter> rows = counters(scope);
  for (std::size_t k = 0; k < rows.size() && k < values.size(); ++k) {
    if (rows[k].in_json) j[std::string(rows[k].name)] = values[k];
  }
}

// An env: its id, the counter table's env rows, then its lease, update lock, priorities and last episode.
Json env_json(const EnvInfo& e) {
  Json j = {{"env", e.env}};
  add_counter_keys(j, CounterScope::env, e.counters);
  j["owner"] = to_string(e.owner);
  j["owner_pid"] = e.owner_pid;
  j["owner_start_ticks"] = e.owner_start_ticks;
  j["update_lock"] = to_string(e.update_lock);
  j["update_lock_slot"] = e.update_lock_slot;
  j["state"] = state_text(e);
  j["priority_total"] = e.priority_total;
  j["last_episode"] = {{"length", e.last_episode_length},
                       {"return", e.last_episode_return},
                       {"end", to_string(e.last_episode_end)}};
  return j;
}

// "done=done reward=reward": the fields with episode roles, or "" for a buffer without them.
std::string episode_fields_text(const SegmentInfo& i) {
  std::string out;
  const auto add = [&](const char* role, const std::optional<std::size_t>& index) {
    if (index) out += fmt::format("{}{}={}", out.empty() ? "" : " ", role, i.schema[*index].name);
  };
  add("done", i.episode_fields.done);
  add("terminated", i.episode_fields.terminated);
  add("truncated", i.episode_fields.truncated);
  add("reward", i.episode_fields.reward);
  return out;
}

// The owner's user name, or null when the password database has none.
Json owner_user_json(const SegmentInfo& i) { return i.owner_name.empty() ? Json(nullptr) : Json(i.owner_name); }

// ls's OWNER column: the user name, or the uid when it has none.
std::string owner_cell(const SegmentInfo& i) {
  return i.owner_name.empty() ? fmt::format("{}", i.owner_uid) : i.owner_name;
}

Json listed_json(const ListedSegment& s) {
  if (!s.info) return {{"name", s.name}, {"error", s.error}};
  const SegmentInfo& i = *s.info;
  return {
      {"name", s.name},
      {"envs", i.num_envs},
      {"capacity", i.capacity},
      {"step_bytes", i.step_bytes},
      {"stored_step_bytes", stored_step_bytes(i)},
      {"compression_ratio", i.compressed.empty() ? Json(nullptr) : Json(compression_ratio(i))},
      {"steps_lost_to_budget", i.compressed.empty() ? Json(nullptr) : Json(i.steps_lost_to_budget)},
      {"total_bytes", i.total_bytes},
      {"replay_steps", i.replay_steps},
      {"online_steps", i.online_steps},
      {"total_pushed", i.total_pushed},
      {"fill", i.num_envs * i.capacity == 0 ? 0.0
                                             : static_cast<double>(i.replay_steps) /
                                                   static_cast<double>(i.num_envs * i.capacity)},
      {"live_writers", i.live_writers},
      {"learner", to_string(i.learner.state)},
      {"owner_uid", i.owner_uid},
      {"owner_user", owner_user_json(i)},
      {"creation_time_ns", i.creation_time_ns},
      {"age_s", seconds(age_ns(i.creation_time_ns))},
      {"layout", layout_text(i.layout_major, i.layout_minor)},
  };
}

// The mean age of the rows sampled (layout 1.8), null before any was counted.
Json mean_age_json(const LearnerInfo& l) {
  return l.age_rows == 0 ? Json(nullptr) : Json(static_cast<double>(l.age_sum_steps) / static_cast<double>(l.age_rows));
}

// A learner slot (or every slot together): its holder, the counter table's learner rows, the mean sample age.
Json learner_json(const LearnerInfo& l) {
  Json j = {{"state", to_string(l.state)}, {"pid", l.pid}, {"start_ticks", l.start_ticks}};
  add_counter_keys(j, CounterScope::learner, l.counters);
  j["mean_age_steps"] = mean_age_json(l);
  return j;
}

// Each learner slot (layout 1.7), with its rank.
Json learners_json(const std::vector<LearnerInfo>& slots) {
  Json out = Json::array();
  for (const LearnerInfo& l : slots) {
    Json j = learner_json(l);
    j["rank"] = l.slot;
    out.push_back(std::move(j));
  }
  return out;
}

Json rate_limit_json(const RateLimitState& s) {
  if (!s.limit) return nullptr;
  const RateLimit& r = *s.limit;
  const auto bound = [](double v) { return std::abs(v) == std::numeric_limits<double>::max() ? Json(nullptr) : Json(v); };
  return {
      {"min_size_to_sample", r.min_size_to_sample},
      {"samples_per_insert", r.samples_per_insert},
      {"error_buffer", r.has_ratio() ? Json(r.error_buffer()) : Json(nullptr)},
      {"min_diff", bound(r.min_diff)},
      {"max_diff", bound(r.max_diff)},
      {"inserts", s.inserts},
      {"samples", s.samples},
      {"stored", s.stored},
      {"error", s.error},
      {"learner_waiting_rows", s.learner_waiting_rows},
      {"learners_waiting", s.learners_waiting},
      {"learner_waiting_since_ns", s.learner_waiting_since_ns},
      {"writer_waiters", s.writer_waiters},
      {"writer_waiting_since_ns", s.writer_waiting_since_ns},
      {"last_sample_ns", s.last_sample_ns},
      {"learner_limited", s.learner_limited},
      {"learner_timeouts", s.learner_timeouts},
      {"writers_limited", s.writers_limited},
      {"writer_timeouts", s.writer_timeouts},
      {"changes", s.changes},
  };
}

Json info_json(const SegmentInfo& i) {
  Json envs = Json::array();
  for (const EnvInfo& e : i.envs) envs.push_back(env_json(e));
  return {
      {"name", i.name},
      {"path", i.path},
      {"layout", layout_text(i.layout_major, i.layout_minor)},
      {"num_envs", i.num_envs},
      {"capacity", i.capacity},
      {"step_bytes", i.step_bytes},
      {"stored_step_bytes", stored_step_bytes(i)},
      {"total_bytes", i.total_bytes},
      {"data_bytes", i.data_bytes},
      {"stacks", stacks_json(i)},
      {"stack_continuity", i.stacks.empty() ? Json(nullptr) : Json(std::string(to_string(i.stack_continuity)))},
      {"compressed", compressed_json(i)},
      {"owner_uid", i.owner_uid},
      {"owner_user", owner_user_json(i)},
      {"owned_by_you", i.owner_uid == static_cast<uint32_t>(::geteuid())},
      {"creator_pid", i.creator_pid},
      {"creator_alive", i.creator_alive},
      {"creation_time_ns", i.creation_time_ns},
      {"created", iso_utc(i.creation_time_ns)},
      {"age_s", seconds(age_ns(i.creation_time_ns))},
      {"total_pushed", i.total_pushed},
      {"replay_steps", i.replay_steps},
      {"online_steps", i.online_steps},
      {"live_writers", i.live_writers},
      {"learner", learner_json(i.learner)},
      {"max_learners", i.learners.size()},
      {"live_learners", i.live_learners},
      {"learners", learners_json(i.learners)},
      {"episodes",
       {{"fields", episode_fields_text(i)},
        {"queue_capacity", i.episode_queue_capacity},
        {"completed", i.episodes_completed},
        {"records_dropped", i.episode_records_dropped},
        {"queue_depth", i.episode_queue_depth},
        {"records_lost", i.episode_records_lost}}},
      {"priorities", i.priority_exponent ? Json{{"exponent", *i.priority_exponent},
                                                {"max_priority", i.max_priority},
                                                {"initial_priority", initial_priority_json(i.initial_priority)},
                                                {"sequence_priority_length", i.sequence_priority_length},
                                                {"total", i.priority_total},
                                                {"updates", i.priority_updates},
                                                {"updates_dropped", i.priority_updates_dropped}}
                                         : Json(nullptr)},
      {"rate_limit", rate_limit_json(i.rate_limit)},
      {"policy", policy_json(i.policy)},
      {"max_times_sampled", i.max_times_sampled},
      {"consuming_queue", i.consuming_queue},
      {"reanalyse_walk", i.walk.chunk_steps == 0 ? Json(nullptr)
                                                 : Json{{"chunk_steps", i.walk.chunk_steps},
                                                        {"pass", i.walk.pass},
                                                        {"newest_version", i.walk.newest_version
                                                                               ? Json(*i.walk.newest_version)
                                                                               : Json(nullptr)},
                                                        {"workers", i.walk.workers},
                                                        {"repairs", i.walk.repairs}}},
      {"cold_tier", i.cold.capacity == 0 ? Json(nullptr)
                                         : Json{{"capacity", i.cold.capacity},
                                                {"dir", i.cold.dir},
                                                {"steps", i.cold.steps},
                                                {"file_bytes", i.cold.file_bytes}}},
      {"journal", journal_json(i.journal, detail::realtime_ns())},
      {"schema_spec", i.schema.to_string()},
      {"schema", schema_json(i.schema)},
      {"envs", std::move(envs)},
  };
}

// -- text forms --

// The cold tier's line of `info` (layout 1.11): its steps below the rings and its files.
std::string cold_steps_text(const SegmentInfo& i) {
  return fmt::format("{} on disk ({} full; {} per env, {} of files in {}/{}.cold)", i.cold.steps,
                     percent(i.cold.steps, i.cold.capacity * i.num_envs), i.cold.capacity,
                     human_bytes(i.cold.file_bytes), i.cold.dir, i.name);
}

// ", N rows written back, M refused" for learners that called write_back (issue 48); "" for those that did not.
std::string write_backs_text(const LearnerInfo& l) {
  const uint64_t applied = l.counters.at(*counter_index(CounterScope::learner, "write_backs_applied"));
  const uint64_t refused = l.counters.at(*counter_index(CounterScope::learner, "write_backs_refused"));
  if (applied + refused == 0) return {};
  return fmt::format(", {} written back, {} refused (overwritten since sampled)", counted(applied, "row", "rows"),
                     refused);
}

// `info`'s sampled line: rows, calls, retries, updates, online resets, and write-backs.
std::string sampled_text(const LearnerInfo& l) {
  return fmt::format("{} in {}, {} retried, {} updated, {} online resets{}", counted(l.rows_sampled, "row", "rows"),
                     counted(l.sample_calls, "call", "calls"), l.retries, counted(l.steps_updated, "step", "steps"),
                     l.online_resets, write_backs_text(l));
}

void print_pair(std::string_view key, std::string_view value) { fmt::print("{:<14}{}\n", key, value); }

void print_info_summary(const SegmentInfo& i) {
  const uint64_t slots = i.num_envs * i.capacity;
  print_pair("name", i.name);
  print_pair("path", i.path);
  print_pair("layout", layout_text(i.layout_major, i.layout_minor));
  print_pair("envs", fmt::format("{}", i.num_envs));
  print_pair("capacity", fmt::format("{} per env", counted(i.capacity, "step", "steps")));
  print_pair("step", step_bytes_text(i));
  for (const StackGeometry& st : i.stacks) {
    print_pair("stacked", fmt::format("{}: {} frames on axis {}; {} frames per env of {} bytes (room for {} restarts "
                                      "per env at no loss)",
                                      i.schema[st.field].name, st.depth, *i.schema[st.field].stack_axis, st.frames,
                                      st.frame_bytes, stack_restarts_held(st, i.capacity)));
  }
  if (!i.stacks.empty()) {
    print_pair("continuity", i.stack_continuity == StackContinuity::compare
                                 ? "compare (each pushed stack checked against the previous step's, byte for byte)"
                                 : "episodes (a stack continues unless the previous step ended an episode)");
  }
  for (const auto& [key, text] : compressed_lines(i)) print_pair(key, text);
  print_pair("size", fmt::format("{} ({} bytes; step data {} bytes)", human_bytes(i.total_bytes), i.total_bytes,
                                 i.data_bytes));
  print_pair("owner", owner_text(i));
  print_pair("creator", fmt::format("pid {} ({})", i.creator_pid, i.creator_alive ? "running" : "exited"));
  print_pair("created", fmt::format("{} ago ({})", human_age(age_ns(i.creation_time_ns)), iso_utc(i.creation_time_ns)));
  print_pair("total pushed", counted(i.total_pushed, "step", "steps"));
  print_pair("replay steps", fmt::format("{} ({} full)", i.replay_steps, percent(i.replay_steps, slots)));
  if (i.cold.capacity != 0) print_pair("cold steps", cold_steps_text(i));  // (1.11) the views' part below the rings
  print_pair("online steps", fmt::format("{} ({} full)", i.online_steps, percent(i.online_steps, slots)));
  print_pair("live writers", fmt::format("{}", i.live_writers));
  const LearnerInfo& l = i.learner;
  if (i.learners.size() <= 1) {
    print_pair("learner", l.state == OwnerState::none
                              ? std::string("none attached")
                              : fmt::format("pid {} ({}, attached {} ago)", l.pid, to_string(l.state),
                                            human_age(age_ns(l.since_ns))));
  } else {  // layout 1.7: one line per slot
    print_pair("learners", fmt::format("{} of {} slots held by live learners; {} rows sampled in {} calls, {} "
                                       "retries",
                                       i.live_learners, i.learners.size(), l.rows_sampled, l.sample_calls,
                                       l.retries));
    for (const LearnerInfo& s : i.learners) {
      print_pair(fmt::format("  rank {}", s.slot),
                 fmt::format("{}; {} rows in {} calls, {} retries{}",
                             s.state == OwnerState::none
                                 ? std::string("free")
                                 : fmt::format("pid {} ({}, attached {} ago)", s.pid, to_string(s.state),
                                               human_age(age_ns(s.since_ns))),
                             s.rows_sampled, s.sample_calls, s.retries,
                             s.waiting_rows != 0 ? fmt::format(", waiting for {} rows", s.waiting_rows) : ""));
    }
  }
  if (i.episode_queue_capacity > 0) {
    print_pair("episodes", fmt::format("{} completed, {} waiting for the learner, {} dropped (queue {} per env), {} "
                                       "lost to learners killed while popping; {}",
                                       i.episodes_completed, i.episode_queue_depth, i.episode_records_dropped,
                                       i.episode_queue_capacity, i.episode_records_lost, episode_fields_text(i)));
  }
  if (i.priority_exponent) {
    const std::string initial = !i.initial_priority            ? std::string("the running maximum")
                                : std::isinf(*i.initial_priority) ? std::string("drawn first (inf)")
                                                                  : fmt::format("{:g}", *i.initial_priority);
    const std::string sequences =
        i.sequence_priority_length == 0 ? std::string()
                                        : fmt::format("; sequence priorities over {} steps", i.sequence_priority_length);
    print_pair("priorities", fmt::format("alpha {:g}; total priority^alpha {:g} over the replay view, max priority "
                                         "{:g}; new steps at {}{}; {} updated by the learner, {} dropped (overwritten)",
                                         *i.priority_exponent, i.priority_total, i.max_priority, initial, sequences,
                                         i.priority_updates, i.priority_updates_dropped));
  }
  if (i.rate_limit.limit) print_pair("rate limit", rate_limit_text(i.rate_limit));
  print_sampling_policies(i);
  if (i.journal.present()) print_pair("journal", journal_text(i.journal, detail::realtime_ns()));
  print_pair("sampled", sampled_text(l));
  if (l.age_rows != 0) {  // layout 1.8
    print_pair("sample age", fmt::format("{:.1f} steps behind the head on average ({} counted)",
                                         static_cast<double>(l.age_sum_steps) / static_cast<double>(l.age_rows),
                                         counted(l.age_rows, "row", "rows")));
  }
}

void print_schema_table(const Schema& schema) {
  fmt::print("\nschema ({}, {} per step): {}\n", counted(schema.size(), "field", "fields"),
             counted(schema.step_bytes(), "byte", "bytes"), schema.to_string());
  const bool stacked = std::any_of(schema.fields().begin(), schema.fields().end(),
                                   [](const Field& f) { return f.stacked(); });
  std::vector<Table::Column> columns{{"#", Align::right}, {"NAME"}, {"DTYPE"}, {"SHAPE"}, {"BYTES", Align::right}};
  if (stacked) columns.push_back({"STACKED"});  // only for a schema with a stacked field (layout 1.6)
  const bool compressed = std::any_of(schema.fields().begin(), schema.fields().end(),
                                      [](const Field& f) { return f.compressed(); });
  if (compressed) columns.push_back({"CODEC"});  // only for a schema with a compressed field (layout 1.10)
  Table t(std::move(columns));
  for (std::size_t k = 0; k < schema.size(); ++k) {
    const Field& f = schema[k];
    std::vector<std::string> row{fmt::format("{}", k), f.name, std::string(dtype_name(f.dtype)), f.shape_string(),
                                 fmt::format("{}", f.bytes())};
    if (stacked) {
      row.push_back(f.stacked() ? fmt::format("axis {}, {} frames of {} bytes", *f.stack_axis, f.stack_depth(),
                                              f.frame_bytes())
                                : std::string("-"));
    }
    if (compressed) row.push_back(f.compressed() ? codec_text(f.codec, f.codec_level) : std::string("-"));
    t.add_row(std::move(row));
  }
  fmt::print("{}", t.render("  "));
}

void print_env_table(const SegmentInfo& i) {
  const std::vector<EnvInfo>& envs = i.envs;
  const bool episodes = i.episode_queue_capacity > 0;
  fmt::print("\nenvs:\n");
  std::vector<Table::Column> columns{{"ENV", Align::right},   {"HEAD", Align::right},  {"CLAIMED", Align::right},
                                     {"LENGTH", Align::right}, {"ONLINE", Align::right}, {"OWNER", Align::right},
                                     {"STATE"},                {"LEASED"},               {"LAST PUSH"}};
  if (episodes) {
    columns.push_back({"EPISODES", Align::right});
    columns.push_back({"LAST EPISODE"});
  }
  const std::vector<EnvColumn> extra = env_columns(i);  // the counter table's rows with a column, last
  for (const EnvColumn& c : extra) columns.push_back({std::string(c.row->column), Align::right});
  Table t(std::move(columns));
  const std::size_t shown = std::min(envs.size(), kMaxEnvRowsShown);
  for (std::size_t k = 0; k < shown; ++k) {
    const EnvInfo& e = envs[k];
    std::vector<std::string> row{
        fmt::format("{}", e.env), fmt::format("{}", e.head), fmt::format("{}", e.claimed),
        fmt::format("{}", e.length), fmt::format("{}", e.online_length),
        e.owner == OwnerState::none ? std::string("-") : fmt::format("{}", e.owner_pid), state_text(e),
        e.lease_since_ns == 0 ? std::string("-") : human_age(age_ns(e.lease_since_ns)) + " ago",
        e.last_push_ns == 0 ? std::string("never") : human_age(age_ns(e.last_push_ns)) + " ago"};
    if (episodes) {
      row.push_back(fmt::format("{}", e.episodes_completed));
      row.push_back(e.last_episode_length == 0 ? std::string("-")
                                               : fmt::format("{} steps, return {:g}, {}", e.last_episode_length,
                                                             e.last_episode_return, to_string(e.last_episode_end)));
    }
    for (const EnvColumn& c : extra) row.push_back(counter_cell(*c.row, e.counters.at(c.index)));
    t.add_row(std::move(row));
  }
  fmt::print("{}", t.render("  "));
  if (shown < envs.size()) {
    fmt::print("  ... {} omitted (shmreplay info --json lists every env)\n",
               counted(envs.size() - shown, "more env", "more envs"));
  }
}

std::string owner_text(const SegmentInfo& i) {
  const std::string owner = detail::user_text(i.owner_uid);
  const auto self = static_cast<uint32_t>(::geteuid());
  if (i.owner_uid == self) return owner;
  return fmt::format("{}: another user, not you ({}); programs of yours refuse to open it unless allowed "
                     "(allow_other_owner, --allow-other-owner)",
                     owner, detail::user_text(self));
}

double stored_step_bytes(const SegmentInfo& i) {
  const uint64_t slots = i.num_envs * i.capacity;
  return slots == 0 ? 0.0 : static_cast<double>(i.data_bytes) / static_cast<double>(slots);
}

std::string step_bytes_text(const SegmentInfo& i) {
  // Stacked and compressed fields store less than a step's bytes per slot (plain ones exactly them).
  if (i.data_bytes == i.num_envs * i.capacity * i.step_bytes) return counted(i.step_bytes, "byte", "bytes");
  return fmt::format("{} bytes as pushed, {:.1f} stored", i.step_bytes, stored_step_bytes(i));
}

uint64_t stack_restarts_held(const StackGeometry& st, uint64_t capacity) {
  if (st.depth < 2 || st.frames < capacity + (st.depth - 1)) return 0;
  return (st.frames - capacity) / (st.depth - 1) - 1;
}

std::vector<EnvColumn> env_columns(const SegmentInfo& info) {
  std::vector<EnvColumn> out;
  const std::span<const Counter> rows = counters(CounterScope::env);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (!rows[k].column.empty() && counter_applies(rows[k], info)) out.push_back({k, &rows[k]});
  }
  return out;
}

std::string counter_cell(const Counter& c, uint64_t value) {
  return c.unit == "bytes" ? human_bytes(value) : fmt::format("{}", value);
}

std::string state_text(const EnvInfo& e) {
  std::string text(to_string(e.owner));
  if (e.owner == OwnerState::alive) {
    const uint64_t since = e.last_push_ns != 0 ? e.last_push_ns : e.lease_since_ns;
    if (since != 0 && age_ns(since) > kIdleAfterNs) text = "idle";
  }
  // A learner that died holding the env's update lock: the next learner or writer to touch the env repairs it.
  if (e.update_lock == OwnerState::dead) text += fmt::format(", update lock of dead learner slot {}", e.update_lock_slot);
  return text;
}

}  // namespace shmreplay::cli
