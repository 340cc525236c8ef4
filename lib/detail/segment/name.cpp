// detail/segment/name.cpp: a segment's file and its name (see name.hpp).
#include "detail/segment/name.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <fmt/format.h>

#include "detail/os/owner.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/layout.hpp"

namespace shmreplay::detail {

using layout::kMagic;

UniqueFd make_unnamed_file(const std::string& dir, const std::string& name, uint32_t mode) {
  UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, mode));
  if (fd) return fd;
  const int e = errno;
  if (e == EOPNOTSUPP || e == EISDIR || e == EINVAL) {
    throw Error(Errc::system, fmt::format("cannot create shmreplay segment '{}': '{}' does not support unnamed files "
                                          "(O_TMPFILE), which atomic creation needs; use a tmpfs directory such as "
                                          "/dev/shm",
                                          name, dir));
  }
  throw_errno(e, fmt::format("cannot create shmreplay segment '{}' in '{}'", name, dir));
}

// Only a segment is sent to `shmreplay rm`; a link or another program's file is left to the user.
[[noreturn]] void already_exists(const std::string& name, const std::string& path) {
  const auto not_ours = [&](const std::string& what) {
    return fmt::format("{}; `shmreplay rm` refuses it as well: remove it yourself (`rm '{}'`) once you know what it "
                       "is, or choose another name",
                       what, path);
  };
  std::string what = fmt::format("'{}' already exists; remove it first (`shmreplay rm {}`) or ask for replacement "
                                 "(CreateOptions::replace, `shmreplay create --replace`)",
                                 path, name);
  struct stat st {};
  UniqueFd fd;
  uint64_t magic = 0;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    what = not_ours(symlink_at_name(path));
  } else if (fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
             !fd || ::fstat(fd.get(), &st) != 0) {
    // gone meanwhile, or unreadable: the plain advice
  } else if (!S_ISREG(st.st_mode)) {
    what = not_ours(fmt::format("'{}' already exists and is not a shmreplay segment (not a regular file)", path));
  } else if (::pread(fd.get(), &magic, sizeof magic, 0) != static_cast<ssize_t>(sizeof magic) || magic != kMagic) {
    what = not_ours(fmt::format("'{}' already exists and is not a shmreplay segment (no 'SHMRPLAY' magic)", path));
  } else if (st.st_uid != ::geteuid()) {
    what = fmt::format("'{}' already exists, a segment of {}, not of this process's user, {}; have its owner remove "
                       "it (`shmreplay rm {}`), or choose another name",
                       path, user_text(st.st_uid), user_text(::geteuid()), name);
  }
  throw Error(Errc::already_exists, fmt::format("cannot create shmreplay segment '{}': {}", name, what));
}

void publish_name(int fd, const std::string& path, const std::string& dir, const std::string& name, bool replace) {
  const std::string proc = fmt::format("/proc/self/fd/{}", fd);
  if (!replace) {
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0) return;
    if (errno == EEXIST) already_exists(name, path);
    throw_errno(errno, fmt::format("cannot link shmreplay segment '{}' as '{}'", name, path));
  }
  static std::atomic<uint64_t> counter{0};
  const std::string hidden = fmt::format("{}/.shmreplay-{}-{}-{}", dir, name, ::getpid(),
                                         counter.fetch_add(1, std::memory_order_relaxed));
  if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, hidden.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    throw_errno(errno, fmt::format("cannot link shmreplay segment '{}' in '{}'", name, dir));
  }
  if (::rename(hidden.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(hidden.c_str());
    throw_errno(e, fmt::format("cannot rename shmreplay segment '{}' to '{}'", name, path));
  }
}

}  // namespace shmreplay::detail
