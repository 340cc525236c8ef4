// detail/os/file.hpp: RAII for file descriptors and memory mappings, and the naming rules of segment files.
// Who calls it: Buffer (create, open, remove), checkpoints, the CLI. Each object is owned by one thread; the
// functions are pure or read the environment only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace shmreplay::detail {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept;
  /// Gives up ownership: returns the descriptor, which the caller closes.
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

/// A MAP_SHARED mapping of a whole file; unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  /// Maps `bytes` bytes of `fd` from offset 0; throws shmreplay::Error naming `path` on failure.
  Mapping(int fd, std::size_t bytes, bool writable, const std::string& path);
  Mapping(Mapping&& other) noexcept
      : addr_(std::exchange(other.addr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  Mapping& operator=(Mapping&& other) noexcept {
    if (this != &other) {
      reset();
      addr_ = std::exchange(other.addr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { reset(); }

  std::byte* data() const noexcept { return static_cast<std::byte*>(addr_); }
  std::size_t size() const noexcept { return bytes_; }
  void reset() noexcept;
  /// Gives up ownership: the caller unmaps.
  void release() noexcept {
    addr_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* addr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Checks a segment name and returns it without the optional leading '/' (as in shm_open's "/name").
/// Allowed: 1 to 200 bytes of [A-Za-z0-9_.-], not starting with '.'. Throws Error(Errc::invalid_argument).
std::string normalize_name(std::string_view name);

/// Path of the segment file for a normalized name: shm_directory() + "/" + name.
std::string segment_path(const std::string& name);

/// The one wording of a symbolic link found at a segment's name, which open, remove and create's refusal all use:
/// "'/dev/shm/x' is a symbolic link (to '/tmp/y'); a segment is a regular file, and shmreplay never follows a link
/// at a segment's name". (The target is read with readlink and left out when it cannot be.)
std::string symlink_at_name(const std::string& path);

/// "123 bytes", "1.5 KiB", "64.0 MiB", ...
std::string human_bytes(uint64_t bytes);

/// The permission bits a segment file may have: read and write, for owner, group and others.
inline constexpr uint32_t kSegmentModeBits = 0666;

/// Why `mode` is not a segment file's mode, or "" when it is one (a subset of kSegmentModeBits): "it also has
/// set-uid and execute bits (4111)". A segment is data, never a program, and set-id or sticky bits on it mean
/// nothing but trouble; the library's create and the CLI's --mode share this one rule.
std::string segment_mode_problem(uint32_t mode);

/// Whether `mode` lets every user write the file (the bit 0002).
constexpr bool world_writable(uint32_t mode) noexcept { return (mode & 0002u) != 0; }

constexpr uint64_t round_up(uint64_t value, uint64_t align) noexcept { return (value + align - 1) / align * align; }

}  // namespace shmreplay::detail
