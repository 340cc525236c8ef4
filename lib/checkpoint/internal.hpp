// lib/checkpoint/internal.hpp: what the checkpoint files share, private to lib/checkpoint/: the checkpoint file's
// reading and writing (InFile, OutFile, TempFile: file_io.cpp), the save's care for its path (check_replaceable,
// remove_stale_temporaries: file_io.cpp), progress reports, the format's helpers (struct_crc, block_steps,
// printable_bytes), the copy of one env's window (save_env: save_env.cpp), and the validation of an open file
// (verify_file: verify.cpp), which a load runs before it writes a byte. Who calls it: the files of lib/checkpoint/
// (save.cpp, save_env.cpp, verify.cpp, load.cpp, load_leases.cpp). Nothing here is shared across threads.
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

/// The save's temporary file, written at offsets (pwrite), then sized and synced (finish).
class OutFile {
 public:
  OutFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  void write_at(uint64_t offset, const void* data, uint64_t bytes);
  void finish(uint64_t size);

 private:
  std::string path_;
  UniqueFd fd_;
};

/// A checkpoint opened for reading: a regular file (Errc::not_found, not_a_segment otherwise) of size().
class InFile {
 public:
  explicit InFile(const std::string& path);
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

/// What save_env copied of one env: its window [first_step, first_step + steps) and the env's counters for it.
struct SavedEnv {
  uint64_t first_step = 0;
  uint64_t steps = 0;
  uint64_t claimed = 0;
  uint64_t online_start = 0;
  uint64_t last_push_ns = 0;
  uint32_t crc = 0;  ///< of the records written
};

/// Copies one env's window into `out` at `data_start` while its writer may push (save_env.cpp), staging chunks
/// in `staging`; throws Errc::contended after `max_rounds` spoilt copies.
SavedEnv save_env(const Buffer& b, uint64_t env, OutFile& out, uint64_t data_start, std::vector<std::byte>& staging,
                  const std::vector<uint64_t>& offsets, Progress& progress, uint32_t max_rounds);

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
  bool learner_ = false;     // whether the learner lease is held
  uint64_t envs_held_ = 0;   // envs 0 .. envs_held_ - 1 are held
};

/// Throws Errc::corrupt: "checkpoint '<path>' is corrupt: <what>".
[[noreturn]] void corrupt(const std::string& path, const std::string& what);

/// Reads and validates the whole of `in` (every checksum) and returns what it holds; verify_checkpoint and the
/// loads call it. Throws as verify_checkpoint says.
CheckpointInfo verify_file(const InFile& in, const CheckpointProgressFn& progress);

}  // namespace shmreplay::detail
