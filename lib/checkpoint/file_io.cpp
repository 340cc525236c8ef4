// lib/checkpoint/file_io.cpp: the checkpoint file's reading and writing (InFile, OutFile, TempFile), and the
// save's care for its path: what it may replace (check_replaceable) and the temporary files of killed saves
// (remove_stale_temporaries). Who calls it: save.cpp, save_env.cpp, verify.cpp, load.cpp (internal.hpp).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay::detail {

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

// -- OutFile, InFile, TempFile --

// Throws the error of a write, size change or sync of the file `fd` (`what` says which) that failed with `err`. A
// full file system (ENOSPC), a full quota (EDQUOT) and a file past the process's size limit (EFBIG, with SIGXFSZ
// ignored: RLIMIT_FSIZE, `ulimit -f`) are Errc::no_space, their message saying the bytes left or the limit.
[[noreturn]] void throw_write_error(int fd, int err, const std::string& what) {
  if (err == ENOSPC || err == EDQUOT) {
    struct statvfs vfs {};
    const std::string free_bytes =
        ::fstatvfs(fd, &vfs) == 0
            ? fmt::format("; its file system has {} bytes free", static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize)
            : std::string();
    throw Error(Errc::no_space, fmt::format("{}: {}{}", what, std::strerror(err), err == ENOSPC ? free_bytes : ""));
  }
  if (err == EFBIG) {
    rlimit limit {};
    const bool limited = ::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY;
    throw Error(Errc::no_space,
                fmt::format("{}: {} ({})", what, std::strerror(err),
                            limited ? fmt::format("this process's file size limit, RLIMIT_FSIZE or `ulimit -f`, is {} "
                                                  "bytes",
                                                  static_cast<uint64_t>(limit.rlim_cur))
                                    : std::string("past the largest file its file system holds")));
  }
  throw_errno(err, what);
}

void OutFile::write_at(uint64_t offset, const void* data, uint64_t bytes) {
  const auto* p = static_cast<const std::byte*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_.get(), p, static_cast<std::size_t>(std::min<uint64_t>(bytes, 1ull << 30)),
                               static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_write_error(fd_.get(), errno,
                        fmt::format("cannot write checkpoint file '{}' at offset {} ({} bytes)", path_, offset, bytes));
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

void OutFile::read_at(uint64_t offset, void* data, uint64_t bytes) const {
  auto* p = static_cast<std::byte*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_.get(), p, static_cast<std::size_t>(std::min<uint64_t>(bytes, 1ull << 30)),
                              static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw_errno(n < 0 ? errno : EIO,
                  fmt::format("cannot read back checkpoint file '{}' at offset {} ({} bytes)", path_, offset, bytes));
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

void OutFile::finish(uint64_t size) {
  if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0) {
    throw_write_error(fd_.get(), errno,
                      fmt::format("cannot set the size of checkpoint file '{}' to {} bytes", path_, size));
  }
  // A file system that allocates late (ext4, XFS) may report a full disk only here.
  if (::fsync(fd_.get()) != 0) {
    throw_write_error(fd_.get(), errno, fmt::format("cannot sync checkpoint file '{}'", path_));
  }
}

namespace {

UniqueFd open_for_reading(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    const int e = errno;
    if (e == ENOENT) {
      throw Error(Errc::not_found, fmt::format("cannot read checkpoint '{}': it does not exist", path));
    }
    throw_errno(e, fmt::format("cannot read checkpoint '{}'", path));
  }
  return fd;
}

}  // namespace

InFile::InFile(const std::string& path) : InFile(path, open_for_reading(path)) {}

InFile::InFile(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) throw_errno(errno, fmt::format("cannot stat checkpoint '{}'", path_));
  if (!S_ISREG(st.st_mode)) {
    throw Error(Errc::not_a_segment, fmt::format("cannot read checkpoint '{}': it is not a regular file", path_));
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

void InFile::read_at(uint64_t offset, void* data, uint64_t bytes) const {
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

TempFile::~TempFile() {
  if (!path_.empty()) ::unlink(path_.c_str());
}

// -- the save's path --

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

}  // namespace shmreplay::detail
