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
#include "checkpoint/packed_records.hpp"
#include "detail/os/file.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "detail/protocol/stacks.hpp"
#include "detail/protocol/walk.hpp"
#include "detail/storage/staged_kinds.hpp"
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

// Refuses (Errc::schema_mismatch) a target whose priorities, limiter or stack rule differ from the file's, unless
// the options allow it; then `notes` says so (load_env_extras and load_global_state say what they did).
void check_state(const Buffer& target, const CheckpointInfo& info, const LoadOptions& options,
                 std::vector<std::string>& notes) {
  const std::vector<std::string> diffs = detail::state_mismatches(target, info);
  if (diffs.empty()) return;
  std::string listed;
  for (const std::string& d : diffs) listed += (listed.empty() ? "" : "; ") + d;
  if (!options.allow_mismatch) {
    throw Error(Errc::schema_mismatch,
                fmt::format("cannot load '{}' into '{}': the checkpoint's state settings differ from the segment's in "
                            "{} place{}: {}; load into a new name, or pass --allow-mismatch (LoadOptions::"
                            "allow_mismatch) to load anyway as docs/cli.md says",
                            info.path, target.name(), diffs.size(), diffs.size() == 1 ? "" : "s", listed));
  }
  notes.push_back("loaded despite differences (allow_mismatch): " + listed);
}

// 0, 1, ..., n - 1.
std::vector<uint64_t> all_envs(uint64_t n) {
  std::vector<uint64_t> envs(static_cast<std::size_t>(n));
  for (uint64_t e = 0; e < n; ++e) envs[static_cast<std::size_t>(e)] = e;
  return envs;
}

// The env rewriter of one load: each env's records, from the files that hold them, into its ring slots, a block
// at a time; then its counters and extras from the newest file.
class EnvWriter {
 public:
  EnvWriter(Buffer& target, const detail::LoadSources& sources, detail::Progress& progress)
      : target_(target), sources_(sources), progress_(progress), schema_(target.schema()),
        sb_(schema_.step_bytes()), cap_(target.capacity()), offsets_(detail::record_field_offsets(schema_)),
        per_block_(detail::block_steps(sb_, cap_)), block_(static_cast<std::size_t>(per_block_ * sb_)),
        envs_(all_envs(target.num_envs())),
        stores_(segment_of(target), envs_, detail::KindWriterMode::load, /*all_kinds=*/true) {}

  // Writes env `env`'s window (as the newest file describes it) into its slots: each step from the newest file
  // that holds it, in step order. Each file's records of the env are read whole, so that their checksum is checked
  // again (a file changed since it was verified is caught). Every field is stored through its storage kind, step
  // after step, as a writer stores it (detail/storage/; a stacked field's stacks as frames), from a fresh start:
  // the env's frames start over at the first loaded step.
  void write_records(uint64_t env) {
    const CheckpointEnv& last = sources_.infos.back()->envs[env];
    Segment& seg = segment_of(target_);
    stores_.restart(env, last.first_step);  // every kind starts over at the first loaded step
    // The view starts at the first loaded step: with stacked fields the bound is that step (the frames start over
    // there); without, it is needed only when the saved window began above claimed - capacity (a dead updater's
    // torn step had left the view), and stays 0 otherwise, as in a buffer that never lost a step.
    const uint64_t slots_from = last.claimed > cap_ ? last.claimed - cap_ : 0;
    const bool bound = seg.has_stacks() || last.first_step > slots_from;
    seg.env_control(env).stacks_intact_from.store(bound ? last.first_step : 0, std::memory_order_relaxed);
    uint64_t next = last.first_step;  // the next step to write
    for (std::size_t k = 0; k < sources_.files.size(); ++k) {
      const CheckpointEnv& fe = sources_.infos[k]->envs[env];
      uint64_t hi = std::min(fe.head, last.head);  // steps of newer files are taken from them
      for (std::size_t j = k + 1; j < sources_.files.size(); ++j) hi = std::min(hi, sources_.infos[j]->envs[env].data_from);
      const uint64_t lo = std::max(last.first_step, fe.data_from);
      if (lo >= hi && k + 1 < sources_.files.size()) continue;  // nothing of this file is needed for this env
      if (lo < hi && lo != next) gap(env, next, lo);
      copy_file(*sources_.files[k], *sources_.infos[k], fe, lo, std::max(lo, hi));
      if (lo < hi) next = hi;
    }
    if (next < last.head) gap(env, next, last.head);
  }

 private:
  [[noreturn]] void gap(uint64_t env, uint64_t from, uint64_t to) const {
    throw Error(Errc::corrupt, fmt::format("checkpoint '{}': no link holds steps {} .. {} of env {} (its window {} "
                                           "..{}); the chain is incomplete",
                                           sources_.infos.back()->path, from, to - 1, env,
                                           sources_.infos.back()->envs[env].first_step,
                                           sources_.infos.back()->envs[env].head));
  }

  // Reads `fe`'s records of one file (all of them, for the checksum) and writes those of steps [lo, hi). A file
  // with compressed fields as their records (format 2.3) has them rebuilt from its frame block first: the stores
  // code them again, for the target's budget (docs/design/checkpoints.md, "Compressed fields").
  void copy_file(const detail::InFile& in, const CheckpointInfo& info, const CheckpointEnv& fe, uint64_t lo,
                 uint64_t hi) {
    const detail::RecordLayout layout = detail::record_layout(schema_, info.record_bytes != sb_);
    std::optional<detail::PackedFrameReader> frames;
    if (layout.packed) frames.emplace(in, info, fe);
    const uint64_t rb = layout.bytes;
    uint32_t crc = 0;
    for (uint64_t done = 0; done < fe.steps;) {
      const uint64_t n = std::min(per_block_, fe.steps - done);
      in.read_at(fe.records_offset + done * rb, block_.data(), n * rb);
      crc = detail::crc32(crc, block_.data(), n * rb);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t step = fe.data_from + done + i;
        if (step < lo || step >= hi) continue;
        const std::byte* record = block_.data() + i * rb;
        if (frames) {
          frames->rebuild(step, record, layout, offsets_, whole_.data());
          record = whole_.data();
        }
        stores_.store(fe.env, fe.env, step, /*ends_episode=*/false,
                      [&](std::size_t f) -> const std::byte* { return record + offsets_[f]; });
      }
      done += n;
      progress_.add(n * sb_);
    }
    if (crc != fe.data_crc) {
      throw Error(Errc::corrupt, fmt::format("checkpoint '{}' changed while it was loaded into '{}': env {}'s "
                                             "records no longer match their checksum",
                                             info.path, target_.name(), fe.env));
    }
  }

  Buffer& target_;
  const detail::LoadSources& sources_;
  detail::Progress& progress_;
  const Schema& schema_;
  const uint64_t sb_;
  const uint64_t cap_;
  const std::vector<uint64_t> offsets_;
  const uint64_t per_block_;
  std::vector<std::byte> block_;
  std::vector<std::byte> whole_ = std::vector<std::byte>(static_cast<std::size_t>(sb_));  // a rebuilt step
  const std::vector<uint64_t> envs_;  // every env: the load's stores, local index = env id
  detail::StagedKinds stores_;        // every field's stores, through its kind (detail/storage/staged_kinds.hpp)
};

// The steps of a load that the target keeps, and those left out because their frames do not fit its frame rings (a
// restart reserve smaller than the source's, allowed by allow_mismatch, or a format 1.0 file, which does not record
// the reserve): the store of each env's stacks raised its stacks_intact_from past them, as a writer's would.
class LeftOut {
 public:
  LeftOut(const Buffer& target, const CheckpointInfo& info) : target_(target), info_(info) {}

  // Env `e` was written; its stacks_intact_from is now `intact_from` (0 without stacked fields).
  void add(const CheckpointEnv& e, uint64_t intact_from) {
    const uint64_t from = std::clamp(intact_from, e.first_step, e.head);
    kept_ += e.head - from;
    window_ += e.head - e.first_step;
    if (from == e.first_step) return;
    left_ += from - e.first_step;
    if (++envs_ <= kNamed) {
      listed_ += fmt::format("{}env {} keeps steps {} of {} .. {}", listed_.empty() ? "" : ", ", e.env,
                             from < e.head ? fmt::format("{} .. {}", from, e.head - 1) : std::string("none"),
                             e.first_step, e.head - 1);
    }
  }

  void note(std::vector<std::string>& notes) const {
    if (left_ == 0) return;
    notes.push_back(fmt::format(
        "{} of the checkpoint's {} steps were left out: their frames do not fit the segment's frame rings (a stack "
        "restart reserve of {} per env, the checkpoint's {}): {}{}",
        left_, window_, detail::stack_restarts_of(segment_of(target_)),
        info_.holds_state() ? fmt::format("{}", info_.stack_restarts) : std::string("not recorded"), listed_,
        envs_ > kNamed ? fmt::format(", and {} more envs", envs_ - kNamed) : std::string()));
  }

  uint64_t kept() const noexcept { return kept_; }

 private:
  static constexpr uint64_t kNamed = 8;  // envs named in the note
  const Buffer& target_;
  const CheckpointInfo& info_;
  uint64_t kept_ = 0;
  uint64_t window_ = 0;
  uint64_t left_ = 0;
  uint64_t envs_ = 0;  // envs with steps left out
  std::string listed_;
};

}  // namespace

namespace detail {

uint64_t load_into(Buffer& target, const LoadSources& sources, const LoadOptions& options, bool created,
                   std::vector<std::string>& notes) {
  const CheckpointInfo& last = *sources.infos.back();
  uint64_t total = 0;
  for (const CheckpointInfo* info : sources.infos) total += info->total_steps * target.schema().step_bytes();
  Progress progress(options.progress, "loading", total);
  EnvWriter writer(target, sources, progress);
  LeftOut left_out(target, last);
  // The walk starts over (holds dropped, never completed; docs/design/reanalyse.md, "Checkpoints"); a 2.4 file's
  // env sections then give each loaded chunk its last target version (load_env_extras), and walk_restored below.
  const bool walk = segment_of(target).reanalyse_chunk() != 0;
  if (walk) walk_reset(segment_of(target));
  for (const CheckpointEnv& e : last.envs) {
    layout::EnvControl& c = segment_of(target).env_control(e.env);
    // This process is the learner now, the only writer of update_seq: the env is rewritten inside an update
    // section, as try_update does, so that readers that copy meanwhile (dump, save) reject their copies. It ends
    // on success and on error alike.
    const UpdateSection section(c);
    writer.write_records(e.env);
    left_out.add(e, c.stacks_intact_from.load(std::memory_order_relaxed));
    store_counters(c, e.head, e.claimed, e.online_start, e.last_push_ns);
    // Weights and the waiting episode records; then the episode bookkeeping (step meta, the writer's journal),
    // which follows from the steps' flags and rewards and counts the queue's records as done.
    load_env_extras(target, *sources.files.back(), last, e, notes);
    if (target.has_episodes()) rebuild_env(segment_of(target), e.env);
  }
  load_global_state(target, last, created, notes);
  load_policy_state(target, last);
  load_sampling_state(target, last, created);
  if (walk) walk_restored(segment_of(target));
  // Handles from before the load name step indices the load may have given other content: write_back refuses a
  // handle whose generation differs (docs/design/write_back.md, "Across a checkpoint load"). release: pairs with a
  // Reanalyser's acquire load before its claim (the walk is not excluded by the load's leases); a Sampler reads it
  // after taking a learner lease the load released.
  segment_of(target).global_control().load_generation.fetch_add(1, std::memory_order_release);
  progress.finish();
  left_out.note(notes);
  return left_out.kept();
}

LoadResult load_sources(const LoadSources& sources, std::string_view name, const LoadOptions& options,
                        std::vector<std::string> notes) {
  const CheckpointInfo& info = *sources.infos.back();
  LoadResult result;
  result.info = info;
  result.name = normalize_name(name.empty() ? std::string_view(info.source_name) : name);
  if (Buffer::exists(result.name)) {
    Buffer target = Buffer::open(result.name, {.allow_other_owner = options.allow_other_owner});
    check_target(target, info);
    check_state(target, info, options, notes);
    const LoadLeases leases(target, info.path);
    result.steps_restored = load_into(target, sources, options, /*created=*/false, notes);
    result.notes = std::move(notes);
    return result;
  }
  // Built and filled without a name, and named only when complete: a load that fails, or is killed at any
  // instruction (Ctrl-C, SIGKILL), leaves no segment behind, never an empty one with leases held by a dead pid.
  Buffer target = Buffer::create_unnamed(result.name, info.num_envs, info.capacity, info.schema,
                                         create_options_of(info, options.mode));
  {
    const LoadLeases leases(target, info.path);
    result.steps_restored = load_into(target, sources, options, /*created=*/true, notes);
  }  // the leases are released before the name appears
  target.publish();
  result.created = true;
  result.notes = std::move(notes);
  return result;
}

}  // namespace detail

namespace {

// Refuses a link of a chain: its steps before data_from are in other files.
void require_self_contained(const CheckpointInfo& info) {
  if (info.self_contained()) return;
  throw Error(Errc::invalid_argument,
              fmt::format("checkpoint '{}' is link {} of a chain and holds only the steps published since the link "
                          "before it: load the chain's directory instead (shmreplay load DIR, load_chain)",
                          info.path, info.link_seq));
}

}  // namespace

CheckpointInfo load_checkpoint_into(Buffer& target, const std::string& path, const LoadOptions& options,
                                    std::vector<std::string>* notes_out) {
  const detail::InFile in(path);
  const CheckpointInfo info = detail::verify_file(in, options.progress);
  require_self_contained(info);
  check_target(target, info);
  std::vector<std::string> notes;
  check_state(target, info, options, notes);
  const detail::LoadLeases leases(target, path);
  (void)detail::load_into(target, {{&in}, {&info}}, options, /*created=*/false, notes);
  if (notes_out) *notes_out = std::move(notes);
  return info;
}

LoadResult load_checkpoint(const std::string& path, std::string_view name, const LoadOptions& options) {
  const detail::InFile in(path);
  const CheckpointInfo info = detail::verify_file(in, options.progress);
  require_self_contained(info);
  return detail::load_sources({{&in}, {&info}}, name, options, {});
}

}  // namespace shmreplay
