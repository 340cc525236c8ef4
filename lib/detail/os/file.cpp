#include "detail/os/file.hpp"

#include "detail/os/char_text.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "shmreplay/internal/segment.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay::detail {

void UniqueFd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Mapping::Mapping(int fd, std::size_t bytes, bool writable, const std::string& path) {
  const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* addr = ::mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) throw_errno(errno, fmt::format("cannot map {} bytes of '{}'", bytes, path));
  addr_ = addr;
  bytes_ = bytes;
}

void Mapping::reset() noexcept {
  if (addr_ != nullptr) ::munmap(addr_, bytes_);
  addr_ = nullptr;
  bytes_ = 0;
}

std::string normalize_name(std::string_view name) {
  std::string_view n = name;
  if (!n.empty() && n.front() == '/') n.remove_prefix(1);
  const auto bad = [&](const std::string& why) {
    throw Error(Errc::invalid_argument, fmt::format("invalid segment name '{}': {}", name, why));
  };
  if (n.empty()) bad("it is empty");
  if (n.size() > 200) bad(fmt::format("it is {} bytes long, at most 200 are allowed", n.size()));
  if (n.front() == '.') bad("it starts with '.'");
  for (char c : n) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) bad(fmt::format("character {} is not allowed; names use [A-Za-z0-9_.-]", char_text(c)));
  }
  return std::string(n);
}

std::string segment_path(const std::string& name) { return shm_directory() + "/" + name; }

}  // namespace shmreplay::detail

namespace shmreplay {

std::string shm_directory() {
  const char* dir = std::getenv("SHMREPLAY_SHM_DIR");
  return (dir != nullptr && *dir != '\0') ? std::string(dir) : std::string("/dev/shm");
}

}  // namespace shmreplay

namespace shmreplay::detail {

std::string symlink_at_name(const std::string& path) {
  char target[4096];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target);
  const std::string to = n > 0 ? fmt::format(" (to '{}')", std::string_view(target, static_cast<std::size_t>(n))) : "";
  return fmt::format("'{}' is a symbolic link{}; a segment is a regular file, and shmreplay never follows a link at "
                     "a segment's name",
                     path, to);
}

std::string human_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string segment_mode_problem(uint32_t mode) {
  const uint32_t extra = mode & ~kSegmentModeBits;
  if (extra == 0) return {};
  std::string kinds;
  const auto add = [&](bool has, const char* kind) {
    if (has) kinds += fmt::format("{}{}", kinds.empty() ? "" : ", ", kind);
  };
  add((extra & ~07777u) != 0, "non-permission");
  add((extra & 04000u) != 0, "set-uid");
  add((extra & 02000u) != 0, "set-gid");
  add((extra & 01000u) != 0, "sticky");
  add((extra & 0111u) != 0, "execute");
  const std::size_t last_comma = kinds.rfind(", ");
  if (last_comma != std::string::npos) kinds.replace(last_comma, 2, " and ");
  return fmt::format("it also has {} bits ({:04o})", kinds, extra);
}

}  // namespace shmreplay::detail
