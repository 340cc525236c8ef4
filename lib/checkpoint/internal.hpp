// lib/checkpoint/internal.hpp: what the checkpoint files share, private to lib/checkpoint/: the checkpoint file's
// reading and writing (InFile, OutFile, TempFile: file_io.cpp), the save's care for its path (check_replaceable,
// remove_stale_temporaries: file_io.cpp), progress reports, the format's helpers (struct_crc, block_steps,
// printable_bytes), the copy of one env's window (save_env: save_env.cpp), and the validation of an open file
// (verify_file: verify.cpp; read_header, read_meta: verify_header.cpp), which a load runs before it writes a byte.
// Who calls it: the files of lib/checkpoint/ (save.cpp, save_env.cpp, verify.cpp, verify_header.cpp, load.cpp,
// load_leases.cpp). Nothing here is shared across threads.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "detail/os/crc32.hpp"
#include "detail/os/file.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/internal/checkpoint_format.hpp"

namespace shmreplay::detail {

static_assert(std::endian::native == std::endian::little,
              "checkpoint files are little-endian and written with the structs' native representation");

inline constexpr uint64_t kIoBlockBytes = 1ull << 20;  // records per read, write or copy: about this many bytes

/// The CRC-32 of a format struct with its own checksum field zeroed (how every header_crc is defined).
template <class T>
uint32_t struct_crc(T copy, uint32_t T::*crc_field) noexcept {
  copy.*crc_field = 0;
  return crc32(0, &copy, sizeof copy);
}

/// Steps per block of about kIoBlockBytes, at least one, at most `most`.
inline uint64_t block_steps(uint64_t step_bytes, uint64_t most) noexcept {
  return std::clamp<uint64_t>(kIoBlockBytes / std::max<uint64_t>(step_bytes, 1), 1, std::max<uint64_t>(most, 1));
}

/// `bytes` bytes as hex and as text for messages: `53 48 4d 52 ("SHMR")`.
std::string printable_bytes(const void* data, std::size_t bytes);

/// Reports progress at most once per block; total may be an estimate, so done is clamped to it.
class Progress {
 public:
  Progress(const CheckpointProgressFn& fn, std::string_view phase, uint64_t total) : fn_(fn), phase_(phase), total_(total) {
    report();
  }
  void add(uint64_t bytes) {
    done_ += bytes;
    report();
  }
  void finish() {
    done_ = total_;
    report();
  }

 private:
  void report() const {
    if (fn_) fn_({phase_, std::min(done_, total_), total_});
  }
  const CheckpointProgressFn& fn_;
  std::string_view phase_;
  uint64_t total_;
  uint64_t done_ = 0;
};

/// The save's temporary file (opened read-write), written at offsets (pwrite), then sized and synced (finish).
class OutFile {
 public:
  OutFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  void write_at(uint64_t offset, const void* data, uint64_t bytes);
  /// Reads back exactly `bytes` bytes this save wrote at `offset` (save_env moves a run's records).
  void read_at(uint64_t offset, void* data, uint64_t bytes) const;
  void finish(uint64_t size);

 private:
  std::string path_;
  UniqueFd fd_;
};

/// A checkpoint opened for reading: a regular file (Errc::not_found, not_a_segment otherwise) of size().
class InFile {
 public:
  explicit InFile(const std::string& path);
  /// The file `fd`, opened by the caller (a chain directory's link, opened without following a link), as `path`.
  InFile(std::string path, UniqueFd fd);
  uint64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
  /// Reads exactly `bytes` bytes at `offset`; a short read means the file shrank since it was validated.
  void read_at(uint64_t offset, void* data, uint64_t bytes) const;

 private:
  std::string path_;
  UniqueFd fd_;
  uint64_t size_ = 0;
};

/// Removes a temporary file unless committed.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile();
  void commit() noexcept { path_.clear(); }

 private:
  std::string path_;
};

/// Removes the temporary files of killed saves to `path` (file_io.cpp says which). Best effort: never throws.
void remove_stale_temporaries(const std::string& path);

/// Throws Errc::already_exists unless what is at `path` is nothing or a checkpoint file, or `force`.
void check_replaceable(const std::string& path, bool force);

/// What save_env copied of one env: its window [first_step, data_from + steps), the records [data_from, ...) it
/// wrote, and the env's counters for that instant.
struct SavedEnv {
  uint64_t first_step = 0;
  uint64_t data_from = 0;
  uint64_t steps = 0;  ///< records written: head - data_from
  uint64_t claimed = 0;
  uint64_t online_start = 0;
  uint64_t last_push_ns = 0;
  uint64_t update_seq = 0;
  uint32_t crc = 0;  ///< of the records written
  uint64_t frame_bytes = 0;  ///< (2.3) of the frame block written after the records
  uint32_t frame_crc = 0;    ///< ... its CRC-32
  uint64_t head() const noexcept { return data_from + steps; }
};

/// A chain link's plan for one env: skip the steps below `skip_below` (the previous link's head) if the env's
/// update_seq is still `update_seq` (0, 0: copy the whole window).
struct EnvCopyPlan {
  uint64_t skip_below = 0;
  uint64_t update_seq = 0;
};

struct RecordLayout;  // packed_records.hpp
/// Copies one env's window into `out` at `data_start` while its writer may push (save_env.cpp), staging chunks
/// in `staging`, records laid out as `layout` says (with compressed fields as their records, the frame block after
/// them); throws Errc::contended after `max_rounds` spoilt copies.
SavedEnv save_env(const Buffer& b, uint64_t env, OutFile& out, uint64_t data_start, std::vector<std::byte>& staging,
                  const RecordLayout& layout, Progress& progress, uint32_t max_rounds, const EnvCopyPlan& plan = {});

// -- state.cpp: everything a checkpoint holds besides the records, both halves --

/// The env's extras for the window `saved` describes: its weights (with priorities) and the episode records
/// waiting in its queue, written to `out` at `at`; fills the section's weights, queue and extra_crc fields and
/// returns the bytes written.
uint64_t save_env_extras(const Buffer& b, uint64_t env, const SavedEnv& saved, OutFile& out, uint64_t at,
                         checkpoint_format::EnvSection& section);
/// The stack restart reserve a segment's frame rings hold per env (0 without stacked fields): what create made of
/// CreateOptions::stack_restarts, read back from the first stacked field's ring.
uint64_t stack_restarts_of(const Segment& seg) noexcept;
/// The buffer-wide state (alpha, max priority, limiter, learner counters, stack settings) into `info`.
void read_source_state(const Buffer& b, CheckpointInfo& info);
/// The differences between `target`'s state settings and the file's that change meaning (alpha, having
/// priorities, limiter settings, stack continuity, a smaller stack restart reserve), each a sentence; empty when
/// none.
std::vector<std::string> state_mismatches(const Buffer& target, const CheckpointInfo& info);
/// Restores env `e`'s weights (read from `in`, its extras checked against extra_crc) or resets them, and its
/// episode queue, into `target` (inside the env's UpdateSection; the caller holds every lease). `notes` gets what
/// was converted or left out, once per kind.
void load_env_extras(Buffer& target, const InFile& in, const CheckpointInfo& info, const CheckpointEnv& e,
                     std::vector<std::string>& notes);
/// Restores the buffer-wide state (max priority, limiter counts and, for a new segment, its settings, learner
/// counters) after every env was loaded. `created`: the target is the new segment built for this load.
void load_global_state(Buffer& target, const CheckpointInfo& info, bool created, std::vector<std::string>& notes);
/// The CreateOptions that rebuild the file's buffer (episodes, priorities, limiter, stacks) with `mode`.
CreateOptions create_options_of(const CheckpointInfo& info, uint32_t mode);

/// Policy versions (format 2.2, lib/checkpoint/policy_state.cpp): the source's published version and window into
/// `info` (save); published in the target, with each env's newest version read from its newest loaded step (load).
void read_policy_state(const Buffer& b, CheckpointInfo& info);
void load_policy_state(Buffer& target, const CheckpointInfo& info);
/// Sample caps (format 2.2 keeps the cap, read_policy_state saves it; 2.3 the counts): the deliveries counted of
/// env `env`'s steps [first_step, head), read after its records (a slot reused since counts as capped); and each
/// loaded step's count word, tagged with its step and its count from `counts` (none where the file has none).
std::vector<uint8_t> save_cap_counts(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t head);
void load_cap_words(Buffer& target, const CheckpointEnv& e, const std::vector<uint8_t>& counts);

/// The sampling policies' settings and per-step state (format 2.3, lib/checkpoint/sampling_state.cpp): the
/// consuming queue (its flag, next ticket, each step's ticket; the states go through the cap counts), the initial
/// priority (with +inf each step's fresh flag) and sequence priorities (the length; the window trees are rebuilt).
void read_sampling_state(const Buffer& b, CheckpointInfo& info);
/// Writes env `env`'s fresh flags and queue tickets for steps [first_step, head) at `at`, adding them to `crc` and
/// `section`; returns the bytes written.
uint64_t save_sampling_extras(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t head, OutFile& out,
                              uint64_t at, uint32_t& crc, checkpoint_format::EnvSection& section);
/// Per env, after its step leaves and count words: its fresh leaves, queue tickets and frontier, window trees.
void load_sampling_extras(Buffer& target, const CheckpointEnv& e, const std::vector<uint8_t>& fresh,
                          const std::vector<uint64_t>& tickets);
/// (2.4) Writes env `env`'s walk versions (walk_save_versions) at `at`, adding them to `crc` and `section`; returns
/// the bytes written (0 without a walk).
uint64_t save_walk_extras(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t head, OutFile& out,
                          uint64_t at, uint32_t& crc, checkpoint_format::EnvSection& section);
/// After every env: the queue's next ticket.
void load_sampling_state(Buffer& target, const CheckpointInfo& info, bool created);
/// The differences of the sampling settings between `target` and the file, each a sentence.
void sampling_mismatches(const Buffer& target, const CheckpointInfo& info, std::vector<std::string>& out);

/// The leases a load holds on its target (load_leases.cpp, which says which words it repairs and why no others):
/// the learner lease and every env's lease, taken all or none by the constructor (Errc::lease_held naming a live
/// holder; nothing is left held), released by the destructor. `path` names the checkpoint in messages.
class LoadLeases {
 public:
  LoadLeases(Buffer& target, const std::string& path);
  LoadLeases(const LoadLeases&) = delete;
  LoadLeases& operator=(const LoadLeases&) = delete;
  ~LoadLeases();

 private:
  void take_learner();
  void take_envs();
  void release() noexcept;
  [[noreturn]] void refuse(const std::string& why) const;

  Buffer& target_;
  const std::string& path_;
  uint64_t me_ = 0;          // this process's lease word
  uint64_t learners_held_ = 0;  // learner slots 0 .. learners_held_ - 1 are held (layout 1.7: every slot)
  uint64_t envs_held_ = 0;   // envs 0 .. envs_held_ - 1 are held
};

/// What an env section (format 2.0) at `offset` says.
inline CheckpointEnv env_of(const checkpoint_format::EnvSection& s, uint64_t offset) noexcept {
  CheckpointEnv e;
  e.env = s.env;
  e.first_step = s.first_step;
  e.data_from = s.data_from;
  e.steps = s.records;
  e.head = s.head;
  e.claimed = s.claimed;
  e.online_start = s.online_start;
  e.last_push_ns = s.last_push_ns;
  e.update_seq = s.update_seq;
  e.offset = offset;
  e.records_offset = offset + sizeof s;
  e.data_crc = s.data_crc;
  e.extra_crc = s.extra_crc;
  e.weights = s.weights;
  e.queue_head = s.queue_head;
  e.queue_tail = s.queue_tail;
  e.records_dropped = s.records_dropped;
  e.queued = s.queued;
  e.cap_counts = s.cap_counts;
  e.fresh = s.fresh;
  e.queue_tickets = s.queue_tickets;
  e.walk_versions = s.walk_versions;
  e.frame_bytes = s.frame_bytes;
  e.frame_crc = static_cast<uint32_t>(s.frame_crc);
  return e;
}

/// Throws Errc::corrupt: "checkpoint '<path>' is corrupt: <what>".
[[noreturn]] void corrupt(const std::string& path, const std::string& what);

/// verify_header.cpp: `in`'s header, checked (magic, version, checksum, sizes that fit the file); a format 1.0
/// header is returned in the 2.0 struct. Throws Errc::truncated, not_a_segment, version_mismatch or corrupt.
checkpoint_format::CheckpointHeader read_header(const InFile& in);
/// verify_header.cpp: what the checked header `h` and its meta block (name, schema, buffer-wide state; checked
/// here) say: all but the envs. Throws Errc::corrupt.
CheckpointInfo read_meta(const InFile& in, const checkpoint_format::CheckpointHeader& h);
/// Reads and validates the whole of `in` (every checksum) and returns what it holds; verify_checkpoint and the
/// loads call it. Throws as verify_checkpoint says.
CheckpointInfo verify_file(const InFile& in, const CheckpointProgressFn& progress);
/// Reads and checks `in`'s header, meta block and env section headers, not the records (list_links, save_link's
/// look at the previous link).
CheckpointInfo read_headers(const InFile& in);

// -- save.cpp: one file --

/// What makes a save a chain's link: its chain, number, and per env what the previous link already holds.
struct LinkPlan {
  uint64_t chain_id = 0;
  uint64_t link_seq = 0;
  std::vector<EnvCopyPlan> envs;  ///< empty: copy every env's window whole
};
/// save_checkpoint's body: the file at `path` for `source`, a link when `link` says so.
CheckpointInfo write_checkpoint(const Buffer& source, const std::string& path, const SaveOptions& options,
                                const LinkPlan& link);

// -- load.cpp: restoring a state from one file or from the links of a chain --

/// Where each env's steps come from: per file, the info and the opened file (the restored state is the last's).
struct LoadSources {
  std::vector<const InFile*> files;
  std::vector<const CheckpointInfo*> infos;
};
/// Writes the state `sources` describe into `target`, whose leases this process holds: each env inside its
/// UpdateSection, then the buffer-wide state. `created`: the target is the unnamed segment built for this load.
/// Returns the steps the target holds of the restored windows (fewer than the files' when some steps' frames do not
/// fit the target's frame rings; `notes` then says which).
uint64_t load_into(Buffer& target, const LoadSources& sources, const LoadOptions& options, bool created,
                   std::vector<std::string>& notes);
/// Loads the state `sources` describe into the segment `name` (empty: the source's name), an existing one or a
/// new one named only when complete: what load_checkpoint and load_chain share. `notes` start the result's.
LoadResult load_sources(const LoadSources& sources, std::string_view name, const LoadOptions& options,
                        std::vector<std::string> notes);

}  // namespace shmreplay::detail
