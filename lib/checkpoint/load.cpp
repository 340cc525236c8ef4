// lib/checkpoint/load.cpp: load_checkpoint and load_checkpoint_into: validate the whole file (verify_file), check
// that the target is the same buffer (check_target), take its leases (LoadLeases, load_leases.cpp), and rewrite
// each env inside the update seqlock (write_envs): its records, counters, episode bookkeeping and priorities. A new
// segment is filled while it has no name and named only when complete. Who calls it: the CLI's `load`, programs
// that restore their buffer (include/shmreplay/checkpoint.hpp has the guarantees).
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "detail/os/file.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/stacks.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {
namespace {

using checkpoint_format::EnvSection;

// "done=done reward=reward", or "none".
std::string episode_fields_text(const Schema& schema, const EpisodeFieldIndices& f) {
  std::string out;
  const auto add = [&](const char* role, const std::optional<std::size_t>& index) {
    if (index) out += fmt::format("{}{}={}", out.empty() ? "" : " ", role, schema[*index].name);
  };
  add("done", f.done);
  add("terminated", f.terminated);
  add("truncated", f.truncated);
  add("reward", f.reward);
  return out.empty() ? std::string("none") : out;
}

EpisodeFields episode_field_names(const Schema& schema, const EpisodeFieldIndices& f) {
  const auto name = [&](const std::optional<std::size_t>& index) { return index ? schema[*index].name : std::string(); };
  return {name(f.done), name(f.terminated), name(f.truncated), name(f.reward)};
}

// Refuses a target that is read-only or not the same buffer as the checkpoint's: schema, episode fields, geometry.
void check_target(const Buffer& target, const CheckpointInfo& info) {
  if (target.read_only()) {
    throw Error(Errc::read_only, fmt::format("cannot load '{}' into '{}': the segment is mapped read-only",
                                             info.path, target.name()));
  }
  if (!(target.schema() == info.schema)) {
    const std::vector<std::string> diffs = Schema::differences(target.schema(), info.schema);
    std::string listed;
    for (const std::string& d : diffs) listed += (listed.empty() ? "" : "; ") + d;
    throw Error(Errc::schema_mismatch,
                fmt::format("cannot load '{}' into '{}': the checkpoint's schema differs from the segment's in {} "
                            "place{}: {} (segment '{}', checkpoint '{}')",
                            info.path, target.name(), diffs.size(), diffs.size() == 1 ? "" : "s", listed,
                            target.schema().to_string(), info.schema.to_string()));
  }
  if (!(target.episode_fields() == info.episode_fields)) {
    throw Error(Errc::schema_mismatch,
                fmt::format("cannot load '{}' into '{}': the checkpoint's episode fields are {}, the segment's {}",
                            info.path, target.name(), episode_fields_text(info.schema, info.episode_fields),
                            episode_fields_text(target.schema(), target.episode_fields())));
  }
  if (target.num_envs() != info.num_envs || target.capacity() != info.capacity) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot load '{}' into '{}': the checkpoint holds {} envs x {} steps, the segment has {} "
                            "envs x {} steps",
                            info.path, target.name(), info.num_envs, info.capacity, target.num_envs(),
                            target.capacity()));
  }
}

// The env rewriter of one load: the file's records of an env into its ring slots, a block at a time.
class EnvWriter {
 public:
  EnvWriter(Buffer& target, const detail::InFile& in, const CheckpointInfo& info, detail::Progress& progress)
      : target_(target), in_(in), info_(info), progress_(progress), schema_(target.schema()),
        sb_(schema_.step_bytes()), cap_(target.capacity()), offsets_(detail::record_field_offsets(schema_)),
        per_block_(detail::block_steps(sb_, cap_)), block_(static_cast<std::size_t>(per_block_ * sb_)) {
    for (std::size_t f = 0; f < schema_.size(); ++f) rings_.push_back(target.segment().field_data(f));
  }

  // Writes env e's records into its slots, checking their checksum as they are read again. A stacked field's
  // stacks are stored as frames, step after step, as a writer stores them (detail/protocol/stacks.hpp), from
  // fresh cursors: the env's frames start over at the first loaded step.
  void write_records(const CheckpointEnv& e) {
    uint32_t crc = 0;
    const uint64_t data_offset = e.offset + sizeof(EnvSection);
    Segment& seg = target_.segment();
    std::vector<detail::StackCursor> cursors(seg.stacks().size(), detail::StackCursor{0, e.first_step});
    std::vector<const std::byte*> sources(seg.stacks().size());
    if (seg.has_stacks()) seg.env_control(e.env).stacks_intact_from.store(e.first_step, std::memory_order_relaxed);
    for (uint64_t done = 0; done < e.steps;) {
      const uint64_t n = std::min(per_block_, e.steps - done);
      in_.read_at(data_offset + done * sb_, block_.data(), n * sb_);
      crc = detail::crc32(crc, block_.data(), n * sb_);
      for (uint64_t i = 0; seg.has_stacks() && i < n; ++i) {
        for (std::size_t k = 0; k < sources.size(); ++k) {
          sources[k] = block_.data() + i * sb_ + offsets_[seg.stacks()[k].field];
        }
        detail::store_stacks(seg, e.env, e.first_step + done + i, sources.data(), cursors.data(),
                             /*may_continue=*/done + i > 0, /*compare=*/true);
      }
      for (std::size_t f = 0; f < schema_.size(); ++f) {
        if (schema_[f].stacked()) continue;
        const uint64_t b = schema_[f].bytes();
        std::byte* ring = rings_[f] + e.env * cap_ * b;
        for (uint64_t i = 0; i < n; ++i) {
          std::memcpy(ring + ((e.first_step + done + i) % cap_) * b, block_.data() + i * sb_ + offsets_[f], b);
        }
      }
      done += n;
      progress_.add(n * sb_);
    }
    if (crc != e.data_crc) {
      throw Error(Errc::corrupt, fmt::format("checkpoint '{}' changed while it was loaded into '{}': env {}'s "
                                             "records no longer match their checksum",
                                             info_.path, target_.name(), e.env));
    }
  }

  // Priorities are not part of a checkpoint (format 1.0): in a target with priorities every loaded step enters at
  // the running maximum, as a pushed step without a priority does, and the rest of the env's tree is cleared.
  void reset_priorities(const CheckpointEnv& e) {
    const detail::PriorityTree tree = detail::priority_tree_of(target_.segment(), e.env);
    const double w = detail::priority_weight(detail::max_priority(target_.segment().global_control().max_priority),
                                             target_.priority_exponent());
    for (uint64_t s = 0; s < tree.leaves; ++s) tree.words[tree.leaves + s].store(0);
    for (uint64_t s = e.first_step; s < e.head; ++s) tree.words[tree.leaves + s % cap_].store(detail::make_leaf(s, w));
    detail::rebuild(tree);
  }

 private:
  Buffer& target_;
  const detail::InFile& in_;
  const CheckpointInfo& info_;
  detail::Progress& progress_;
  const Schema& schema_;
  const uint64_t sb_;
  const uint64_t cap_;
  const std::vector<uint64_t> offsets_;
  const uint64_t per_block_;
  std::vector<std::byte> block_;
  std::vector<std::byte*> rings_;
};

// Writes every env of the validated checkpoint into `target`, whose leases this process holds (LoadLeases).
void write_envs(Buffer& target, const detail::InFile& in, const CheckpointInfo& info,
                const CheckpointProgressFn& progress_fn) {
  detail::Progress progress(progress_fn, "loading", info.total_steps * target.schema().step_bytes());
  EnvWriter writer(target, in, info, progress);
  for (const CheckpointEnv& e : info.envs) {
    layout::EnvControl& c = target.segment().env_control(e.env);
    // This process is the learner now, the only writer of update_seq: the env is rewritten inside an update
    // section, as try_update does, so that readers that copy meanwhile (dump, save) reject their copies. It ends
    // on success and on error alike.
    const detail::UpdateSection section(c);
    writer.write_records(e);
    detail::store_counters(c, e.head, e.claimed, e.online_start, e.last_push_ns);
    // The episode bookkeeping (step meta, the writer's journal) follows from the steps' flags and rewards.
    if (target.has_episodes()) detail::rebuild_env(target.segment(), e.env);
    if (target.has_priorities()) writer.reset_priorities(e);
  }
  progress.finish();
}

}  // namespace

CheckpointInfo load_checkpoint_into(Buffer& target, const std::string& path, const LoadOptions& options) {
  const detail::InFile in(path);
  CheckpointInfo info = detail::verify_file(in, options.progress);
  check_target(target, info);
  const detail::LoadLeases leases(target, path);
  write_envs(target, in, info, options.progress);
  return info;
}

LoadResult load_checkpoint(const std::string& path, std::string_view name, const LoadOptions& options) {
  const detail::InFile in(path);
  LoadResult result;
  result.info = detail::verify_file(in, options.progress);
  const CheckpointInfo& info = result.info;
  result.name = detail::normalize_name(name.empty() ? std::string_view(info.source_name) : name);
  if (Buffer::exists(result.name)) {
    Buffer target = Buffer::open(result.name, {.allow_other_owner = options.allow_other_owner});
    check_target(target, info);
    const detail::LoadLeases leases(target, path);
    write_envs(target, in, info, options.progress);
    return result;
  }
  CreateOptions create;
  create.mode = options.mode;
  if (info.episode_fields.any_flag()) {
    create.episodes = episode_field_names(info.schema, info.episode_fields);
    create.episode_queue_capacity = info.episode_queue_capacity;
  }
  // Built and filled without a name, and named only when complete: a load that fails, or is killed at any
  // instruction (Ctrl-C, SIGKILL), leaves no segment behind, never an empty one with leases held by a dead pid.
  Buffer target = Buffer::create_unnamed(result.name, info.num_envs, info.capacity, info.schema, create);
  {
    const detail::LoadLeases leases(target, path);
    write_envs(target, in, info, options.progress);
  }  // the leases are released before the name appears
  target.publish();
  result.created = true;
  return result;
}

}  // namespace shmreplay
