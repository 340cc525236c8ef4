// lib/python/bind_checkpoint_results.cpp: the classes the checkpoint calls return (checkpoint_results.hpp):
// CheckpointInfo and its parts (CheckpointEnv, CheckpointLimiter, CheckpointLearner, the learner slots), LoadResult,
// VerifyResult, LinkResult and ChainLink, all read-only. Times are time.time() seconds (None: not recorded) and
// versions "MAJOR.MINOR" strings, as the CLI's JSON has them.
#include "checkpoint_results.hpp"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <optional>

#include "bindings.hpp"
#include "objects.hpp"

namespace shmreplay::python {

using namespace py::literals;

namespace {

// CLOCK_REALTIME nanoseconds as time.time() seconds; None for 0 (not recorded).
std::optional<double> seconds_or_none(uint64_t ns) {
  if (ns == 0) return std::nullopt;
  return static_cast<double>(ns) / 1e9;
}

std::string version_text(uint32_t major, uint32_t minor) { return fmt::format("{}.{}", major, minor); }

void bind_info_parts(py::module_& m) {
  py::class_<CheckpointEnv>(m, "CheckpointEnv", "One env as a checkpoint holds it (CheckpointInfo.envs).")
      .def_readonly("env", &CheckpointEnv::env, "the env id")
      .def_readonly("first_step", &CheckpointEnv::first_step,
                    "the window's first step: max(0, claimed - capacity), or above it with a stacked field")
      .def_readonly("data_from", &CheckpointEnv::data_from,
                    "the first step whose record this file holds: first_step, or later in a chain's incremental "
                    "link (the steps before it are in earlier links)")
      .def_readonly("steps", &CheckpointEnv::steps, "records of this env in the file: head - data_from")
      .def_readonly("head", &CheckpointEnv::head, "the window's end: steps first_step .. head - 1 were stored")
      .def_readonly("claimed", &CheckpointEnv::claimed,
                    "head, or head + 1 when its writer was writing step head at the saved instant")
      .def_readonly("online_start", &CheckpointEnv::online_start, "the learner's online-queue start, <= head")
      .def_property_readonly("last_push", [](const CheckpointEnv& e) { return seconds_or_none(e.last_push_ns); },
                             "time.time() of the env's last push when saved (None: never pushed); informational")
      .def_readonly("update_seq", &CheckpointEnv::update_seq, "the env's update sequence when saved (format 2.0)")
      .def_readonly("offset", &CheckpointEnv::offset, "where the env's section starts in the file")
      .def_readonly("records_offset", &CheckpointEnv::records_offset, "where its records start in the file")
      .def_readonly("data_crc", &CheckpointEnv::data_crc, "CRC-32 of the env's records")
      .def_readonly("extra_crc", &CheckpointEnv::extra_crc,
                    "CRC-32 of its priority weights and waiting episode records (format 2.0)")
      .def_readonly("weights", &CheckpointEnv::weights,
                    "priority weights in the file: head - first_step, or 0 without priorities")
      .def_readonly("queue_head", &CheckpointEnv::queue_head, "episode records popped from its queue since creation")
      .def_readonly("queue_tail", &CheckpointEnv::queue_tail, "episode records pushed to its queue since creation")
      .def_readonly("records_dropped", &CheckpointEnv::records_dropped,
                    "episode records dropped because its queue was full")
      .def_readonly("queued", &CheckpointEnv::queued, "episode records waiting in its queue, held by the file")
      .def("__repr__", [](const CheckpointEnv& e) {
        return fmt::format("<shmreplay.CheckpointEnv {}: steps {}..{} (records from {}), online from {}>", e.env,
                           e.first_step, e.head, e.data_from, e.online_start);
      });

  py::class_<CheckpointLearner>(m, "CheckpointLearner", "The learner's counters as a checkpoint holds them.")
      .def_readonly("rows_sampled", &CheckpointLearner::rows_sampled, "rows returned by sample calls and peeks")
      .def_readonly("sample_calls", &CheckpointLearner::sample_calls, "sample calls (and peeks) that returned")
      .def_readonly("retries", &CheckpointLearner::retries,
                    "rows redrawn because a writer overwrote them during the copy")
      .def_readonly("online_resets", &CheckpointLearner::online_resets, "calls of reset_online_queue")
      .def_readonly("steps_updated", &CheckpointLearner::steps_updated, "steps rewritten in place by the learner")
      .def_readonly("priority_updates", &CheckpointLearner::priority_updates, "priorities the learner set")
      .def_readonly("priority_updates_dropped", &CheckpointLearner::priority_updates_dropped,
                    "priority updates refused because the step had been overwritten")
      .def_readonly("write_backs_applied", &CheckpointLearner::write_backs_applied,
                    "rows write_back rewrote (format 2.4; 0 in older files)")
      .def_readonly("write_backs_refused", &CheckpointLearner::write_backs_refused,
                    "rows write_back refused (format 2.4; 0 in older files)")
      .def(py::self == py::self)
      .def("__repr__", [](const CheckpointLearner& l) {
        return fmt::format("<shmreplay.CheckpointLearner: {} rows in {} sample calls, {} priority updates>",
                           l.rows_sampled, l.sample_calls, l.priority_updates);
      });

  py::class_<CheckpointLimiter>(m, "CheckpointLimiter",
                                "The rate limiter as a checkpoint holds it: its settings, offset and counts.")
      .def_readonly("limit", &CheckpointLimiter::limit, "the settings (a RateLimit); None without a limiter")
      .def_readonly("error_offset", &CheckpointLimiter::error_offset, "the error offset in force")
      .def_readonly("samples", &CheckpointLimiter::samples, "rows counted by the limiter")
      .def_readonly("changes", &CheckpointLimiter::changes, "settings changes since creation")
      .def_property_readonly("last_sample",
                             [](const CheckpointLimiter& l) { return seconds_or_none(l.last_sample_ns); },
                             "time.time() of the last counted sample call; None when none was")
      .def_readonly("learner_limited", &CheckpointLimiter::learner_limited, "sample calls held back")
      .def_readonly("writers_limited", &CheckpointLimiter::writers_limited, "push calls held back")
      .def_readonly("writer_timeouts", &CheckpointLimiter::writer_timeouts, "held-back push calls that gave up")
      .def(py::self == py::self)
      .def("__repr__", [](const CheckpointLimiter& l) {
        if (!l.limit) return std::string("<shmreplay.CheckpointLimiter: no limiter>");
        return fmt::format("<shmreplay.CheckpointLimiter: {}; {} samples, offset {:g}>", l.limit->to_string(),
                           l.samples, l.error_offset);
      });
}

// The sampling policies' settings (formats 2.2, 2.3).
void def_sampling_settings(py::class_<CheckpointInfo>& c) {
  c.def_readonly("initial_priority", &CheckpointInfo::initial_priority, "new steps' priority; None: the running max")
      .def_readonly("sequence_priority_length", &CheckpointInfo::sequence_priority_length, "0: no sequence priorities")
      .def_readonly("reanalyse_chunk", &CheckpointInfo::reanalyse_chunk,
                    "steps per chunk of the reanalyse walk; 0 without; None in files older than 2.4")
      .def_readonly("max_times_sampled", &CheckpointInfo::max_times_sampled, "the sample cap; 0 without (2.2)")
      .def_readonly("consuming_queue", &CheckpointInfo::consuming_queue, "whether it was a consuming queue (2.3)")
      .def_readonly("policy_version", &CheckpointInfo::policy_version,
                    "the policy version the learners had published (2.2); 0 before any publish")
      .def_readonly("policy_max_staleness", &CheckpointInfo::policy_max_staleness,
                    "their window (2.2); None when none");
}

void bind_info(py::module_& m) {
  auto info = py::class_<CheckpointInfo>(m, "CheckpointInfo",
                             "What a checkpoint file holds, as read from its headers (save, verify, load).")
      .def_readonly("path", &CheckpointInfo::path, "the file")
      .def_property_readonly(
          "format", [](const CheckpointInfo& i) { return version_text(i.format_major, i.format_minor); },
          "the file's format version, '2.0' (or '1.0': steps only)")
      .def_readonly("source_name", &CheckpointInfo::source_name, "the name of the buffer it was saved from")
      .def_property_readonly(
          "source_layout",
          [](const CheckpointInfo& i) { return version_text(i.source_layout_major, i.source_layout_minor); },
          "that buffer's segment layout version, e.g. '1.6'")
      .def_property_readonly("source_creation_time",
                             [](const CheckpointInfo& i) { return seconds_or_none(i.source_creation_time_ns); },
                             "time.time() when that buffer was created")
      .def_property_readonly("save_started",
                             [](const CheckpointInfo& i) { return seconds_or_none(i.save_started_ns); },
                             "time.time() when the save began; None in a format 1.0 file")
      .def_property_readonly("saved_time", [](const CheckpointInfo& i) { return seconds_or_none(i.saved_time_ns); },
                             "time.time() when the save finished")
      .def_readonly("num_envs", &CheckpointInfo::num_envs, "envs of the source")
      .def_readonly("capacity", &CheckpointInfo::capacity, "steps per env of the source")
      .def_property_readonly("schema", [](const CheckpointInfo& i) { return std::make_shared<Schema>(i.schema); },
                             "the source's schema")
      .def_property_readonly(
          "episode_fields",
          [](const CheckpointInfo& i) {
            py::dict d;
            const auto put = [&](const char* role, const std::optional<std::size_t>& index) {
              if (index && *index < i.schema.size()) d[role] = i.schema[*index].name;
            };
            put("done", i.episode_fields.done);
            put("terminated", i.episode_fields.terminated);
            put("truncated", i.episode_fields.truncated);
            put("reward", i.episode_fields.reward);
            return d;
          },
          "the source's episode fields, {role: field name} for the roles it has ('done', 'terminated', "
          "'truncated', 'reward'); empty for a buffer without episodes")
      .def_readonly("episode_queue_capacity", &CheckpointInfo::episode_queue_capacity,
                    "the source's episode records per env queue; 0 without episode fields")
      .def_readonly("max_learners", &CheckpointInfo::max_learners,
                    "the source's learner slots (1 before format 2.1); each slot's counters and online views are "
                    "loaded with it")
      .def_readonly("stack_restarts", &CheckpointInfo::stack_restarts,
                    "the source's stack restart reserve (0 without stacked fields or in a 1.0 file)")
      .def_readonly("expected_compression", &CheckpointInfo::expected_compression,
                    "a ratio that gives each of the source's compressed fields at least its byte ring: what a load "
                    "into a new buffer creates it with; 0 without compressed fields")
      .def_property_readonly("stack_continuity",
                             [](const CheckpointInfo& i) { return std::string(to_string(i.stack_continuity)); },
                             "the source's stack continuity rule, 'compare' or 'episodes'")
      .def_readonly("priority_exponent", &CheckpointInfo::priority_exponent,
                    "alpha; None without priorities (or in a 1.0 file)")
      .def_readonly("max_priority", &CheckpointInfo::max_priority, "the running maximum priority")
      .def_readonly("limiter", &CheckpointInfo::limiter, "the rate limiter (a CheckpointLimiter; format 2.0)")
      .def_readonly("learner", &CheckpointInfo::learner, "the learner's counters (a CheckpointLearner; format 2.0)")
      .def_readonly("chain_id", &CheckpointInfo::chain_id, "a chain's id (save_link); 0 for a self-contained save")
      .def_readonly("link_seq", &CheckpointInfo::link_seq, "the link's number in its chain directory; 0 for save")
      .def_readonly("file_bytes", &CheckpointInfo::file_bytes, "the file's size")
      .def_readonly("total_steps", &CheckpointInfo::total_steps, "records in the file, all envs together")
      .def_readonly("envs", &CheckpointInfo::envs, "one CheckpointEnv per env, in env order")
      .def_property_readonly("holds_state", &CheckpointInfo::holds_state,
                             "whether the file holds the buffer's state besides its steps (priorities, limiter, "
                             "counters, episode records): format 2.0")
      .def_property_readonly("self_contained", &CheckpointInfo::self_contained,
                             "whether every env's window is in this file (False for a chain's incremental link)")
      .def_property_readonly("window_bytes", &CheckpointInfo::window_bytes,
                             "bytes of every env's window's records: what a self-contained save writes")
      .def("__repr__", [](const CheckpointInfo& i) {
        return fmt::format("<shmreplay.CheckpointInfo '{}': format {}, '{}', {} envs x {} steps, {} steps in {} "
                           "bytes{}>",
                           i.path, version_text(i.format_major, i.format_minor), i.source_name, i.num_envs,
                           i.capacity, i.total_steps, i.file_bytes,
                           i.link_seq == 0 ? std::string() : fmt::format(", link {}", i.link_seq));
      });
  def_sampling_settings(info);
}

void bind_results(py::module_& m) {
  py::class_<LoadResult>(m, "LoadResult", "What load() did.")
      .def_readonly("name", &LoadResult::name, "the buffer loaded into")
      .def_readonly("created", &LoadResult::created, "whether the load created it")
      .def_readonly("info", &LoadResult::info,
                    "what the file holds (a CheckpointInfo); for a chain directory, the restored link")
      .def_readonly("notes", &LoadResult::notes,
                    "what the load left out or changed: a 1.0 file's missing parts, differences loaded with "
                    "allow_mismatch=True, a chain's newer links that were incomplete, the steps whose frames did "
                    "not fit the target's stack restart reserve")
      .def_readonly("steps_restored", &LoadResult::steps_restored,
                    "steps the buffer holds of the restored windows: the file's, less those left out")
      .def("__repr__", [](const LoadResult& r) {
        return fmt::format("<shmreplay.LoadResult: '{}' into {} buffer '{}', {} note(s)>", r.info.path,
                           r.created ? "a new" : "the existing", r.name, r.notes.size());
      });

  py::class_<VerifyResult>(m, "VerifyResult", "What verify() found.")
      .def_readonly("info", &VerifyResult::info,
                    "what the file holds (a CheckpointInfo); for a chain directory, its newest complete link")
      .def_readonly("notes", &VerifyResult::notes, "for a chain directory, the newer links skipped and why")
      .def("__repr__", [](const VerifyResult& r) {
        return fmt::format("<shmreplay.VerifyResult: '{}' verifies, {} note(s)>", r.info.path, r.notes.size());
      });

  py::class_<LinkResult>(m, "LinkResult", "What save_link() wrote and removed.")
      .def_readonly("info", &LinkResult::info, "the new link (info.path, info.link_seq, info.chain_id)")
      .def_readonly("whole", &LinkResult::whole,
                    "whether every env's window is in it (a new chain, or every env changed)")
      .def_readonly("record_bytes", &LinkResult::record_bytes, "bytes of step records it holds")
      .def_readonly("chain_bytes", &LinkResult::chain_bytes,
                    "bytes of the links kept in the directory, the new one included")
      .def_readonly("removed", &LinkResult::removed, "the links removed because no kept link needs them")
      .def_readonly("notes", &LinkResult::notes,
                    "the files of the directory the save did not take, each named with why (another user's, "
                    "another chain's, unreadable, a name that is no link's)")
      .def("__repr__", [](const LinkResult& r) {
        return fmt::format("<shmreplay.LinkResult: link {} ({}), {} record bytes, the directory holds {} bytes>",
                           r.info.link_seq, r.whole ? "whole" : "incremental", r.record_bytes, r.chain_bytes);
      });

  py::class_<ChainLink>(m, "ChainLink", "One link file of a chain directory, as its headers say (list_links()).")
      .def_readonly("path", &ChainLink::path, "DIR/link-SEQ.shmrckpt")
      .def_readonly("seq", &ChainLink::seq, "its number in the directory")
      .def_readonly("chain_id", &ChainLink::chain_id, "its chain's id")
      .def_property_readonly("saved_time", [](const ChainLink& l) { return seconds_or_none(l.saved_time_ns); },
                             "time.time() when its save finished")
      .def_readonly("file_bytes", &ChainLink::file_bytes, "its size")
      .def_property_readonly("error",
                             [](const ChainLink& l) -> std::optional<std::string> {
                               if (l.error.empty()) return std::nullopt;
                               return l.error;
                             },
                             "None when its headers check; else why they do not")
      .def("__repr__", [](const ChainLink& l) {
        return fmt::format("<shmreplay.ChainLink {} '{}': chain {:016x}, {} bytes{}>", l.seq, l.path, l.chain_id,
                           l.file_bytes, l.error.empty() ? std::string() : "; " + l.error);
      });
}

}  // namespace

void bind_checkpoint_results(py::module_& m) {
  bind_info_parts(m);
  bind_info(m);
  bind_results(m);
}

}  // namespace shmreplay::python
