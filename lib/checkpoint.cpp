#include "shmreplay/checkpoint.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "detail/os/crc32.hpp"
#include "detail/os/file.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/episodes.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/seqlock.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/layout.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay {
namespace {

using checkpoint_format::CheckpointHeader;
using checkpoint_format::CheckpointTrailer;
using checkpoint_format::EnvSection;
using detail::UniqueFd;

static_assert(std::endian::native == std::endian::little,
              "checkpoint files are little-endian and written with the structs' native representation");

constexpr uint64_t kIoBlockBytes = 1ull << 20;  // records per read, write or copy: about this many bytes

template <class T>
uint32_t struct_crc(T copy, uint32_t T::*crc_field) noexcept {
  copy.*crc_field = 0;
  return detail::crc32(0, &copy, sizeof copy);
}

// Steps per block of about kIoBlockBytes, at least one, at most `most`.
uint64_t block_steps(uint64_t step_bytes, uint64_t most) noexcept {
  return std::clamp<uint64_t>(kIoBlockBytes / std::max<uint64_t>(step_bytes, 1), 1, std::max<uint64_t>(most, 1));
}

// Reports progress at most once per block; total may be an estimate, so done is clamped to it.
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

// -- files --

class OutFile {
 public:
  OutFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  void write_at(uint64_t offset, const void* data, uint64_t bytes) {
    const auto* p = static_cast<const std::byte*>(data);
    while (bytes > 0) {
      const ssize_t n = ::pwrite(fd_.get(), p, static_cast<std::size_t>(std::min<uint64_t>(bytes, 1ull << 30)),
                                 static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno(errno, fmt::format("cannot write checkpoint file '{}' at offset {}", path_, offset));
      }
      p += n;
      offset += static_cast<uint64_t>(n);
      bytes -= static_cast<uint64_t>(n);
    }
  }
  void finish(uint64_t size) {
    if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0) {
      throw_errno(errno, fmt::format("cannot set the size of checkpoint file '{}'", path_));
    }
    if (::fsync(fd_.get()) != 0) throw_errno(errno, fmt::format("cannot sync checkpoint file '{}'", path_));
  }

 private:
  std::string path_;
  UniqueFd fd_;
};

class InFile {
 public:
  explicit InFile(const std::string& path) : path_(path) {
    fd_ = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd_) {
      const int e = errno;
      if (e == ENOENT) {
        throw Error(Errc::not_found, fmt::format("cannot read checkpoint '{}': it does not exist", path));
      }
      throw_errno(e, fmt::format("cannot read checkpoint '{}'", path));
    }
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) throw_errno(errno, fmt::format("cannot stat checkpoint '{}'", path));
    if (!S_ISREG(st.st_mode)) {
      throw Error(Errc::not_a_segment, fmt::format("cannot read checkpoint '{}': it is not a regular file", path));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  uint64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
  // Reads exactly `bytes` bytes at `offset`; a short read means the file shrank since it was validated.
  void read_at(uint64_t offset, void* data, uint64_t bytes) const {
    auto* p = static_cast<std::byte*>(data);
    while (bytes > 0) {
      const ssize_t n = ::pread(fd_.get(), p, static_cast<std::size_t>(std::min<uint64_t>(bytes, 1ull << 30)),
                                static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno(errno, fmt::format("cannot read checkpoint '{}' at offset {}", path_, offset));
      }
      if (n == 0) {
        throw Error(Errc::truncated, fmt::format("checkpoint '{}' ends at offset {}, where {} more bytes were "
                                                 "expected (did the file change while it was read?)",
                                                 path_, offset, bytes));
      }
      p += n;
      offset += static_cast<uint64_t>(n);
      bytes -= static_cast<uint64_t>(n);
    }
  }

 private:
  std::string path_;
  UniqueFd fd_;
  uint64_t size_ = 0;
};

// Removes a temporary file unless committed.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void commit() noexcept { path_.clear(); }

 private:
  std::string path_;
};

std::string printable_bytes(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::string hex;
  std::string text;
  for (std::size_t i = 0; i < bytes; ++i) {
    hex += fmt::format("{}{:02x}", i == 0 ? "" : " ", p[i]);
    text += std::isprint(p[i]) ? static_cast<char>(p[i]) : '.';
  }
  return fmt::format("{} (\"{}\")", hex, text);
}

// -- save --

// Removes what earlier saves to `path` left behind when they were killed (SIGKILL, or a program without the CLI's
// signal handler): `path.tmp-<pid>-<n>` files of processes that no longer exist. A file whose pid looks dead is
// still left alone while some process holds its lock (every save flocks its temporary file as it creates it), so
// a save running in another pid namespace, where its pid means nothing here, keeps its file. Best effort: errors
// are ignored (an unreadable directory, a file removed meanwhile).
void remove_stale_temporaries(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : path.substr(0, slash);
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp-";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* ent = ::readdir(d)) {
    const std::string_view name(ent->d_name);
    if (!name.starts_with(prefix)) continue;
    // The rest must be <pid>-<n>, both decimal.
    const std::string_view rest = name.substr(prefix.size());
    const std::size_t dash = rest.find('-');
    const auto decimal = [](std::string_view t) {
      return !t.empty() && t.size() <= 19 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (dash == std::string_view::npos || !decimal(rest.substr(0, dash)) || !decimal(rest.substr(dash + 1))) continue;
    const uint64_t pid = std::stoull(std::string(rest.substr(0, dash)));
    if (pid == static_cast<uint64_t>(::getpid()) || pid > static_cast<uint64_t>(std::numeric_limits<pid_t>::max())) {
      continue;  // this process's own saves (other threads) are alive; a number that is no pid is no save's
    }
    if (pid == 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (EPERM: alive)
    UniqueFd fd(::openat(::dirfd(d), ent->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // a save (in another pid namespace) still writes it
    ::unlinkat(::dirfd(d), ent->d_name, 0);
  }
  ::closedir(d);
}

// Refuses (Errc::already_exists) to replace what is at `path` unless it is nothing or a checkpoint file (a regular
// file that starts with "SHMRCKPT"), or `force`: a save must never silently destroy another file given by mistake.
// Checked before the save starts and again just before the rename, so that a file that appeared meanwhile is kept
// too (what remains is the moment between the second check and the rename).
void check_replaceable(const std::string& path, bool force) {
  if (force) return;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // nothing there (another error: the save's own calls report it)
  const auto refuse = [&](const std::string& what) {
    throw Error(Errc::already_exists,
                fmt::format("refusing to replace '{}': {}; save to another file, or replace it on purpose with "
                            "--force (SaveOptions::force)",
                            path, what));
  };
  if (S_ISLNK(st.st_mode)) {
    refuse("it is a symbolic link, not a shmreplay checkpoint (a save would replace the link with a new file, not "
           "write through it)");
  }
  if (!S_ISREG(st.st_mode)) refuse("it is not a regular file, so not a shmreplay checkpoint");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) return;  // gone meanwhile, or unreadable: the rename decides
  uint64_t magic = 0;
  const ssize_t got = ::pread(fd.get(), &magic, sizeof magic, 0);
  if (got != static_cast<ssize_t>(sizeof magic)) {
    refuse(fmt::format("it is not a shmreplay checkpoint (the file is {} bytes, too short for the 8-byte magic)",
                       st.st_size));
  }
  if (magic != checkpoint_format::kMagic) {
    refuse(fmt::format("it is not a shmreplay checkpoint (it starts with {}, expected the magic \"SHMRCKPT\")",
                       printable_bytes(&magic, sizeof magic)));
  }
}

// The permission bits of a checkpoint of `b`: the segment's read/write bits for group and others, so that saving
// a private buffer gives a private file, and read/write for the owner, who must be able to load it back. Never
// execute, set-id or sticky bits, whatever the segment has.
mode_t checkpoint_mode(const Buffer& b) noexcept { return static_cast<mode_t>((b.mode() & 0066u) | 0600u); }

struct SavedEnv {
  uint64_t first_step = 0;
  uint64_t steps = 0;
  uint64_t claimed = 0;
  uint64_t online_start = 0;
  uint64_t last_push_ns = 0;
  uint32_t crc = 0;
};

// Copies one env's window into `out` at `data_start` (see the top of checkpoint.hpp). The loop keeps the run of
// consecutive steps [s, t) it has copied and validated: a chunk whose oldest steps were reclaimed before the copy
// reached them breaks the run, which restarts at the oldest intact step, and the loop follows the writer until
// the run is a full window ending at some head the env had.
SavedEnv save_env(const Buffer& b, uint64_t env, OutFile& out, uint64_t data_start, std::vector<std::byte>& staging,
                  const std::vector<uint64_t>& offsets, Progress& progress, uint32_t max_rounds) {
  const layout::EnvControl& c = b.segment().env_control(env);
  const uint64_t cap = b.capacity();
  const uint64_t sb = b.schema().step_bytes();
  const uint64_t chunk = staging.size() / std::max<uint64_t>(sb, 1);
  uint32_t spoilt = 0;
  const auto spoil = [&] {
    if (++spoilt > max_rounds) {
      throw Error(Errc::contended,
                  fmt::format("cannot save env {} of '{}': its copy was spoilt {} times (its writer laps the "
                              "ring of {} steps faster than it can be copied, or the learner keeps rewriting it)",
                              env, b.name(), max_rounds, cap));
    }
    ::sched_yield();
  };
  for (;;) {  // one attempt from a fresh snapshot
    // The counters, none of them from an update or a load in progress.
    const std::optional<detail::EnvCounters> counters = detail::read_counters_stable(c);
    if (!counters) {
      spoil();
      continue;
    }
    uint64_t h = counters->head;
    const uint64_t c0 = counters->claimed;
    const uint64_t online = counters->online_start;
    const uint64_t h0 = h;
    uint64_t s = std::min(c0 > cap ? c0 - cap : 0, h);
    uint64_t t = s;
    uint64_t written = 0;  // records of the run in the file
    uint32_t crc = 0;
    bool restart = false;
    uint64_t claimed_out = 0;
    const auto append = [&](const std::byte* records, uint64_t n) {
      out.write_at(data_start + written * sb, records, n * sb);
      crc = detail::crc32(crc, records, n * sb);
      written += n;
      progress.add(n * sb);
    };
    for (;;) {
      if (t < h && t - s < cap) {
        const uint64_t n = std::min({h - t, chunk, cap - (t - s)});
        const detail::CopyResult r = detail::copy_records(b.segment(), env, t, n, offsets, staging.data());
        if (r.outcome == detail::CopyOutcome::raced) {
          spoil();
          continue;
        }
        if (r.outcome == detail::CopyOutcome::reset) {
          restart = true;
          break;
        }
        const uint64_t v = r.intact_from;
        uint64_t keep = 0;
        if (v > t) {  // steps [t, v) were reclaimed before they were copied: the run restarts at v
          spoil();
          written = 0;
          crc = 0;
          if (v >= t + n) {
            s = t = v;
            continue;
          }
          keep = v - t;
          s = v;
        }
        append(staging.data() + keep * sb, n - keep);
        t += n;
        if (t - s == cap || (s == 0 && t >= h0)) {
          claimed_out = t;  // the env had head = claimed = t, holding exactly [s, t)
          break;
        }
        if (s > 0 && t + 1 - s == cap && v == s) {
          claimed_out = t + 1;  // at the validation claimed was t + 1: its writer was writing step t
          break;
        }
        continue;
      }
      if (t - s == cap || (s == 0 && t >= h0)) {
        claimed_out = t;
        break;
      }
      // Every published step up to h is copied, but the run is short of a window: follow the writer.
      const detail::EnvCounters now = detail::read_counters(c);
      const uint64_t hn = now.head;
      const uint64_t cn = now.claimed;
      if (hn < t) {  // the env was reloaded
        restart = true;
        break;
      }
      if (hn == t) {
        if (t + 1 - s == cap && cn == t + 1) {
          claimed_out = t + 1;  // its writer is writing step t (or died doing so)
          break;
        }
        spoil();
      }
      h = hn;
    }
    if (restart) {
      spoil();
      continue;
    }
    SavedEnv saved;
    saved.first_step = s;
    saved.steps = t - s;
    saved.claimed = claimed_out;
    saved.online_start = std::min(online, t);
    saved.last_push_ns = c.last_push_ns.load(std::memory_order_relaxed);
    saved.crc = crc;
    return saved;
  }
}

// -- verify --

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw Error(Errc::corrupt, fmt::format("checkpoint '{}' is corrupt: {}", path, what));
}

CheckpointInfo verify(const InFile& in, const CheckpointProgressFn& progress_fn) {
  const std::string& path = in.path();
  const uint64_t size = in.size();
  CheckpointHeader h{};
  if (size < sizeof h.magic) {
    throw Error(Errc::truncated, fmt::format("checkpoint '{}' is truncated: it has {} bytes, less than the {}-byte "
                                             "header of a checkpoint",
                                             path, size, sizeof h));
  }
  in.read_at(0, &h, std::min<uint64_t>(size, sizeof h));
  if (h.magic != checkpoint_format::kMagic) {
    if (h.magic == layout::kMagic) {
      throw Error(Errc::not_a_segment, fmt::format("'{}' is not a shmreplay checkpoint: it is a shmreplay segment "
                                                   "file (magic \"SHMRPLAY\"), expected magic \"SHMRCKPT\"",
                                                   path));
    }
    throw Error(Errc::not_a_segment, fmt::format("'{}' is not a shmreplay checkpoint: it starts with {}, expected "
                                                 "\"SHMRCKPT\"",
                                                 path, printable_bytes(&h.magic, sizeof h.magic)));
  }
  if (size < sizeof h) {
    throw Error(Errc::truncated, fmt::format("checkpoint '{}' is truncated: it has {} bytes, less than the {}-byte "
                                             "header",
                                             path, size, sizeof h));
  }
  if (h.format_major != checkpoint_format::kFormatMajor) {
    throw Error(Errc::version_mismatch,
                fmt::format("checkpoint '{}' has format {}.{}, this program reads format {}.x{}", path,
                            h.format_major, h.format_minor, checkpoint_format::kFormatMajor,
                            h.format_major > checkpoint_format::kFormatMajor ? "; upgrade this program" : ""));
  }
  const uint32_t header_crc = struct_crc(h, &CheckpointHeader::header_crc);
  if (header_crc != h.header_crc) {
    corrupt(path, fmt::format("its header (bytes 0-{}) fails its checksum: stored {:#010x}, computed {:#010x}",
                              sizeof h - 1, h.header_crc, header_crc));
  }
  if (h.file_bytes > size) {
    throw Error(Errc::truncated, fmt::format("checkpoint '{}' is truncated: it has {} bytes, its header says {} ({} "
                                             "missing)",
                                             path, size, h.file_bytes, h.file_bytes - size));
  }
  if (h.file_bytes < size) {
    corrupt(path, fmt::format("it has {} bytes, its header says {} ({} extra bytes at the end)", size, h.file_bytes,
                              size - h.file_bytes));
  }
  if (h.header_bytes < sizeof h || h.header_bytes > size) {
    corrupt(path, fmt::format("header_bytes is {}, expected {} to the file size, {}", h.header_bytes, sizeof h, size));
  }
  if (h.num_envs == 0 || h.num_envs > layout::kMaxEnvs) {
    corrupt(path, fmt::format("num_envs is {}, expected 1 to {}", h.num_envs, layout::kMaxEnvs));
  }
  if (h.capacity == 0 || h.capacity > layout::kMaxCapacity) {
    corrupt(path, fmt::format("capacity is {}, expected 1 to {}", h.capacity, layout::kMaxCapacity));
  }
  if (h.meta_bytes > checkpoint_format::kMaxMetaBytes || h.name_bytes > h.meta_bytes ||
      h.schema_bytes != h.meta_bytes - h.name_bytes || h.meta_bytes > size - h.header_bytes) {
    corrupt(path, fmt::format("its meta block ({} bytes: name {}, schema {}) does not fit: at most {} bytes, the "
                              "name and schema filling it, inside the file of {} bytes",
                              h.meta_bytes, h.name_bytes, h.schema_bytes, checkpoint_format::kMaxMetaBytes, size));
  }
  std::string meta(static_cast<std::size_t>(h.meta_bytes), '\0');
  in.read_at(h.header_bytes, meta.data(), meta.size());
  const uint32_t meta_crc = detail::crc32(0, meta.data(), meta.size());
  if (meta_crc != h.meta_crc) {
    corrupt(path, fmt::format("its meta block (bytes {}-{}: name and schema) fails its checksum: stored {:#010x}, "
                              "computed {:#010x}",
                              h.header_bytes, h.header_bytes + h.meta_bytes - 1, h.meta_crc, meta_crc));
  }
  CheckpointInfo info;
  info.path = path;
  info.format_major = h.format_major;
  info.format_minor = h.format_minor;
  info.source_name = meta.substr(0, static_cast<std::size_t>(h.name_bytes));
  try {
    detail::normalize_name(info.source_name);
  } catch (const Error& e) {
    corrupt(path, fmt::format("its source name is invalid: {}", e.what()));
  }
  try {
    info.schema = Schema::parse(std::string_view(meta).substr(static_cast<std::size_t>(h.name_bytes)));
  } catch (const Error& e) {
    corrupt(path, fmt::format("its schema does not parse: {}", e.what()));
  }
  if (info.schema.size() != h.num_fields || info.schema.step_bytes() != h.step_bytes) {
    corrupt(path, fmt::format("its header says {} fields and {} bytes per step, its schema '{}' has {} and {}",
                              h.num_fields, h.step_bytes, info.schema.to_string(), info.schema.size(),
                              info.schema.step_bytes()));
  }
  const auto episode_field = [&](uint32_t index, const char* role) -> std::optional<std::size_t> {
    if (index == checkpoint_format::kNoField) return std::nullopt;
    if (index >= info.schema.size()) {
      corrupt(path, fmt::format("its episode {} field is field {}, but the schema has {} fields", role, index,
                                info.schema.size()));
    }
    return index;
  };
  info.episode_fields.done = episode_field(h.episode_done, "done");
  info.episode_fields.terminated = episode_field(h.episode_terminated, "terminated");
  info.episode_fields.truncated = episode_field(h.episode_truncated, "truncated");
  info.episode_fields.reward = episode_field(h.episode_reward, "reward");
  info.episode_queue_capacity = h.episode_queue_capacity;
  if (info.episode_fields.any_flag() != (h.episode_queue_capacity != 0)) {
    corrupt(path, fmt::format("its episode queue capacity is {} for a buffer {} episode flag fields",
                              h.episode_queue_capacity, info.episode_fields.any_flag() ? "with" : "without"));
  }
  info.source_layout_major = h.source_layout_major;
  info.source_layout_minor = h.source_layout_minor;
  info.source_creation_time_ns = h.source_creation_time_ns;
  info.saved_time_ns = h.saved_time_ns;
  info.num_envs = h.num_envs;
  info.capacity = h.capacity;
  info.file_bytes = h.file_bytes;

  const uint64_t sb = h.step_bytes;
  if (size - h.header_bytes - h.meta_bytes < sizeof(CheckpointTrailer)) {  // header_bytes + meta_bytes <= size
    corrupt(path, fmt::format("it has {} bytes, too few for its header, meta block and trailer", size));
  }
  const uint64_t end = size - sizeof(CheckpointTrailer);  // where the env sections must end
  Progress progress(progress_fn, "verifying", size);
  progress.add(h.header_bytes + h.meta_bytes);
  std::vector<std::byte> block(static_cast<std::size_t>(block_steps(sb, h.capacity) * sb));
  uint64_t offset = h.header_bytes + h.meta_bytes;
  uint64_t total_steps = 0;
  info.envs.reserve(static_cast<std::size_t>(h.num_envs));
  for (uint64_t k = 0; k < h.num_envs; ++k) {
    EnvSection e{};
    if (offset > end || end - offset < sizeof e) {
      corrupt(path, fmt::format("env {}'s section header at offset {} runs past the trailer at offset {}", k, offset,
                                end));
    }
    in.read_at(offset, &e, sizeof e);
    const std::string where = fmt::format("env {}'s section header (offset {})", k, offset);
    if (e.magic != checkpoint_format::kEnvMagic) {
      corrupt(path, fmt::format("{} starts with {}, expected \"SHMRENV.\"", where,
                                printable_bytes(&e.magic, sizeof e.magic)));
    }
    const uint32_t crc = struct_crc(e, &EnvSection::header_crc);
    if (crc != e.header_crc) {
      corrupt(path, fmt::format("{} fails its checksum: stored {:#010x}, computed {:#010x}", where, e.header_crc, crc));
    }
    if (e.env != k) corrupt(path, fmt::format("{} is for env {}, expected env {}", where, e.env, k));
    if (e.steps > h.capacity || e.first_step > std::numeric_limits<uint64_t>::max() - e.steps || e.head != e.first_step + e.steps ||
        (e.claimed != e.head && e.claimed != e.head + 1) ||
        e.first_step != (e.claimed > h.capacity ? e.claimed - h.capacity : 0) || e.online_start > e.head) {
      corrupt(path, fmt::format("{} is inconsistent: steps {} .. {} ({} steps), head {}, claimed {}, online start "
                                "{}, capacity {}",
                                where, e.first_step, e.first_step + e.steps, e.steps, e.head, e.claimed,
                                e.online_start, h.capacity));
    }
    offset += sizeof e;
    const uint64_t data_bytes = e.steps * sb;  // steps <= 2^40 and sb <= 2^32: may exceed 2^64 only if both near max
    if (sb != 0 && e.steps > (end - offset) / sb) {
      corrupt(path, fmt::format("env {}'s {} records of {} bytes at offset {} run past the trailer at offset {}", k,
                                e.steps, sb, offset, end));
    }
    uint32_t data_crc = 0;
    for (uint64_t at = 0; at < data_bytes;) {
      const uint64_t n = std::min<uint64_t>(block.size(), data_bytes - at);
      in.read_at(offset + at, block.data(), n);
      data_crc = detail::crc32(data_crc, block.data(), n);
      at += n;
      progress.add(n);
    }
    if (data_crc != e.data_crc) {
      corrupt(path, fmt::format("env {}'s records (steps {} .. {}, bytes {}-{}) fail their checksum: stored "
                                "{:#010x}, computed {:#010x}",
                                k, e.first_step, e.head - 1, offset, offset + data_bytes - 1, e.data_crc, data_crc));
    }
    info.envs.push_back({e.env, e.first_step, e.steps, e.head, e.claimed, e.online_start, e.last_push_ns,
                         offset - sizeof e, e.data_crc});
    progress.add(sizeof e);
    offset += data_bytes;
    total_steps += e.steps;
  }
  if (offset != end) {
    corrupt(path, fmt::format("its env sections end at offset {}, but its trailer starts at offset {}", offset, end));
  }
  CheckpointTrailer tr{};
  in.read_at(end, &tr, sizeof tr);
  const uint32_t tr_crc = struct_crc(tr, &CheckpointTrailer::trailer_crc);
  if (tr.magic != checkpoint_format::kTrailerMagic || tr_crc != tr.trailer_crc) {
    corrupt(path, fmt::format("its trailer (offset {}) is damaged: magic {}, checksum stored {:#010x}, computed "
                              "{:#010x}",
                              end, printable_bytes(&tr.magic, sizeof tr.magic), tr.trailer_crc, tr_crc));
  }
  if (tr.total_steps != total_steps || h.total_steps != total_steps || tr.record_bytes != total_steps * sb) {
    corrupt(path, fmt::format("its envs hold {} steps, its header says {} and its trailer {} ({} record bytes)",
                              total_steps, h.total_steps, tr.total_steps, tr.record_bytes));
  }
  info.total_steps = total_steps;
  progress.finish();
  return info;
}

// -- load --

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

// Takes the learner lease and every env's lease of `target`, or throws lease_held naming a live holder.
struct Leases {
  Sampler learner;
  Writer writers;
};

Leases take_leases(Buffer& target, const std::string& path) {
  try {
    Sampler learner(target);
    Writer writers = Writer::range(target, 0, target.num_envs());
    return {std::move(learner), std::move(writers)};
  } catch (const Error& e) {
    if (e.errc() != Errc::lease_held) throw;
    throw Error(Errc::lease_held,
                fmt::format("cannot load '{}' into '{}': a load needs the learner's lease and every env's; {}",
                            path, target.name(), e.what()));
  }
}

// Writes every env of the validated checkpoint into `target`, whose leases this process holds.
void write_envs(Buffer& target, const InFile& in, const CheckpointInfo& info, const CheckpointProgressFn& progress_fn) {
  const Schema& schema = target.schema();
  const uint64_t sb = schema.step_bytes();
  const uint64_t cap = target.capacity();
  const std::vector<uint64_t> offsets = detail::record_field_offsets(schema);
  std::vector<std::byte*> rings;
  for (std::size_t f = 0; f < schema.size(); ++f) rings.push_back(target.segment().field_data(f));
  Progress progress(progress_fn, "loading", info.total_steps * sb);
  const uint64_t per_block = block_steps(sb, cap);
  std::vector<std::byte> block(static_cast<std::size_t>(per_block * sb));
  for (const CheckpointEnv& e : info.envs) {
    layout::EnvControl& c = target.segment().env_control(e.env);
    // This process is the learner now, the only writer of update_seq: the env is rewritten inside an update
    // section, as try_update does, so that readers that copy meanwhile (dump, save) reject their copies. It ends
    // on success and on error alike.
    const detail::UpdateSection section(c);
    uint32_t crc = 0;
    const uint64_t data_offset = e.offset + sizeof(EnvSection);
    for (uint64_t done = 0; done < e.steps;) {
      const uint64_t n = std::min(per_block, e.steps - done);
      in.read_at(data_offset + done * sb, block.data(), n * sb);
      crc = detail::crc32(crc, block.data(), n * sb);
      for (std::size_t f = 0; f < schema.size(); ++f) {
        const uint64_t b = schema[f].bytes();
        std::byte* ring = rings[f] + e.env * cap * b;
        for (uint64_t i = 0; i < n; ++i) {
          std::memcpy(ring + ((e.first_step + done + i) % cap) * b, block.data() + i * sb + offsets[f], b);
        }
      }
      done += n;
      progress.add(n * sb);
    }
    if (crc != e.data_crc) {
      throw Error(Errc::corrupt, fmt::format("checkpoint '{}' changed while it was loaded into '{}': env {}'s "
                                             "records no longer match their checksum",
                                             info.path, target.name(), e.env));
    }
    detail::store_counters(c, e.head, e.claimed, e.online_start, e.last_push_ns);
    // The episode bookkeeping (step meta, the writer's journal) follows from the steps' flags and rewards.
    if (target.has_episodes()) detail::rebuild_env(target.segment(), e.env);
    // Priorities are not part of a checkpoint (format 1.0): in a target with priorities every loaded step enters
    // at the running maximum, as a pushed step without a priority does, and the rest of the tree is cleared.
    if (target.has_priorities()) {
      const detail::PriorityTree tree{target.segment().priority_tree(e.env), target.priority_leaves(), cap};
      const double w = detail::priority_weight(detail::max_priority(target.segment().global_control().max_priority),
                                               target.priority_exponent());
      for (uint64_t s = 0; s < tree.leaves; ++s) tree.words[tree.leaves + s].store(0);
      for (uint64_t s = e.first_step; s < e.head; ++s) tree.words[tree.leaves + s % cap].store(detail::make_leaf(s, w));
      detail::rebuild(tree);
    }
  }
  progress.finish();
}

}  // namespace

CheckpointInfo save_checkpoint(const Buffer& source, const std::string& path, const SaveOptions& options) {
  const Schema& schema = source.schema();
  const uint64_t sb = schema.step_bytes();
  const uint64_t cap = source.capacity();
  check_replaceable(path, options.force);
  remove_stale_temporaries(path);
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format("{}.tmp-{}-{}", path, ::getpid(), counter.fetch_add(1));
  const mode_t mode = checkpoint_mode(source);
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd) throw_errno(errno, fmt::format("cannot create checkpoint file '{}'", tmp));
  TempFile guard(tmp);
  // Held until this process closes the file or dies: tells remove_stale_temporaries of other processes that the
  // file is in use even where they cannot judge this pid. (A failure only weakens that hint.)
  (void)::flock(fd.get(), LOCK_EX | LOCK_NB);
  // The umask may have narrowed the mode at creation; set it exactly before a byte of the buffer is written.
  if (::fchmod(fd.get(), mode) != 0) {
    throw_errno(errno, fmt::format("cannot set mode {:04o} on checkpoint file '{}'", mode, tmp));
  }
  if (options.temp_file_created) options.temp_file_created(tmp);
  OutFile out(tmp, std::move(fd));

  CheckpointInfo info;
  info.path = path;
  info.format_major = checkpoint_format::kFormatMajor;
  info.format_minor = checkpoint_format::kFormatMinor;
  info.source_name = source.name();
  info.source_layout_major = source.segment().header().layout_major;
  info.source_layout_minor = source.segment().header().layout_minor;
  info.source_creation_time_ns = source.segment().header().creation_time_ns;
  info.num_envs = source.num_envs();
  info.capacity = cap;
  info.schema = schema;
  info.episode_fields = source.episode_fields();
  info.episode_queue_capacity = source.episode_queue_capacity();

  const std::string meta = info.source_name + schema.to_string();
  out.write_at(sizeof(CheckpointHeader), meta.data(), meta.size());
  uint64_t offset = sizeof(CheckpointHeader) + meta.size();

  uint64_t estimate = 0;  // the records of every env's view now; the copies follow the writers from there
  for (uint64_t e = 0; e < source.num_envs(); ++e) {
    const detail::StepRange r = detail::view_range(source.segment().env_control(e), View::replay, cap);
    estimate += (r.hi - r.lo) * sb;
  }
  Progress progress(options.progress, "saving", estimate);
  const std::vector<uint64_t> offsets = detail::record_field_offsets(schema);
  std::vector<std::byte> staging(static_cast<std::size_t>(block_steps(sb, cap) * sb));
  uint64_t record_bytes = 0;
  for (uint64_t e = 0; e < source.num_envs(); ++e) {
    const SavedEnv saved =
        save_env(source, e, out, offset + sizeof(EnvSection), staging, offsets, progress, options.max_rounds);
    EnvSection s{};
    s.magic = checkpoint_format::kEnvMagic;
    s.env = e;
    s.first_step = saved.first_step;
    s.steps = saved.steps;
    s.head = saved.first_step + saved.steps;
    s.claimed = saved.claimed;
    s.online_start = saved.online_start;
    s.last_push_ns = saved.last_push_ns;
    s.data_crc = saved.crc;
    s.header_crc = struct_crc(s, &EnvSection::header_crc);
    out.write_at(offset, &s, sizeof s);
    info.envs.push_back(
        {e, s.first_step, s.steps, s.head, s.claimed, s.online_start, s.last_push_ns, offset, s.data_crc});
    offset += sizeof s + saved.steps * sb;
    record_bytes += saved.steps * sb;
    info.total_steps += saved.steps;
  }
  CheckpointTrailer tr{};
  tr.magic = checkpoint_format::kTrailerMagic;
  tr.total_steps = info.total_steps;
  tr.record_bytes = record_bytes;
  tr.trailer_crc = struct_crc(tr, &CheckpointTrailer::trailer_crc);
  out.write_at(offset, &tr, sizeof tr);
  offset += sizeof tr;

  info.file_bytes = offset;
  info.saved_time_ns = detail::realtime_ns();
  CheckpointHeader h{};
  h.magic = checkpoint_format::kMagic;
  h.format_major = info.format_major;
  h.format_minor = info.format_minor;
  h.header_bytes = sizeof h;
  h.file_bytes = offset;
  h.num_envs = info.num_envs;
  h.capacity = cap;
  h.num_fields = schema.size();
  h.step_bytes = sb;
  h.total_steps = info.total_steps;
  h.meta_bytes = meta.size();
  h.name_bytes = info.source_name.size();
  h.schema_bytes = meta.size() - info.source_name.size();
  const auto index = [](const std::optional<std::size_t>& i) {
    return i ? static_cast<uint32_t>(*i) : checkpoint_format::kNoField;
  };
  h.episode_done = index(info.episode_fields.done);
  h.episode_terminated = index(info.episode_fields.terminated);
  h.episode_truncated = index(info.episode_fields.truncated);
  h.episode_reward = index(info.episode_fields.reward);
  h.episode_queue_capacity = info.episode_queue_capacity;
  h.saved_time_ns = info.saved_time_ns;
  h.source_creation_time_ns = info.source_creation_time_ns;
  h.source_layout_major = info.source_layout_major;
  h.source_layout_minor = info.source_layout_minor;
  h.meta_crc = detail::crc32(0, meta.data(), meta.size());
  h.header_crc = struct_crc(h, &CheckpointHeader::header_crc);
  out.write_at(0, &h, sizeof h);
  out.finish(offset);
  check_replaceable(path, options.force);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    throw_errno(errno, fmt::format("cannot rename checkpoint file '{}' to '{}'", tmp, path));
  }
  guard.commit();
  progress.finish();
  return info;
}

CheckpointInfo verify_checkpoint(const std::string& path, const CheckpointProgressFn& progress) {
  const InFile in(path);
  return verify(in, progress);
}

CheckpointInfo load_checkpoint_into(Buffer& target, const std::string& path, const LoadOptions& options) {
  const InFile in(path);
  CheckpointInfo info = verify(in, options.progress);
  check_target(target, info);
  Leases leases = take_leases(target, path);
  write_envs(target, in, info, options.progress);
  return info;
}

LoadResult load_checkpoint(const std::string& path, std::string_view name, const LoadOptions& options) {
  const InFile in(path);
  LoadResult result;
  result.info = verify(in, options.progress);
  const CheckpointInfo& info = result.info;
  result.name = detail::normalize_name(name.empty() ? std::string_view(info.source_name) : name);
  if (Buffer::exists(result.name)) {
    Buffer target = Buffer::open(result.name, {.allow_other_owner = options.allow_other_owner});
    check_target(target, info);
    Leases leases = take_leases(target, path);
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
    Leases leases = take_leases(target, path);
    write_envs(target, in, info, options.progress);
  }  // the leases are released before the name appears
  target.publish();
  result.created = true;
  return result;
}

}  // namespace shmreplay
