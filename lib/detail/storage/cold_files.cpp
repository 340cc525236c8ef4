// detail/storage/cold_files.cpp: the cold tier's directory and files (cold_files.hpp; docs/design/cold_tier.md).
#include "detail/storage/cold_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "detail/os/file.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/cold_layout.hpp"

namespace shmreplay::detail {
namespace {

using layout::ColdControl;
using layout::ColdFileHeader;

[[noreturn]] void refuse(const std::string& name, const std::string& why) {
  throw Error(Errc::invalid_argument, fmt::format("cannot create shmreplay segment '{}': {}", name, why));
}

// A cold directory's mode: the segment's read/write bits, with search (x) where it gives read.
mode_t dir_mode(uint32_t mode) noexcept {
  const uint32_t shared = mode & 0066u;
  return static_cast<mode_t>(0700u | shared | ((mode & 0044u) >> 2));
}

std::string cold_path(const std::string& dir, const std::string& name) { return fmt::format("{}/{}.cold", dir, name); }
std::string env_file(uint64_t env) { return fmt::format("env-{}", env); }

// Removes <path>'s files named env-* and the directory; ENOENT anywhere is fine. Returns an errno or 0.
int remove_cold_dir(const std::string& path) noexcept {
  const int dir_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) return errno == ENOENT ? 0 : errno;
  DIR* dir = ::fdopendir(dir_fd);  // owns dir_fd from here
  if (dir == nullptr) {
    const int e = errno;
    ::close(dir_fd);
    return e;
  }
  int first_error = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (std::strncmp(entry->d_name, "env-", 4) != 0) continue;
    if (::unlinkat(dir_fd, entry->d_name, 0) != 0 && errno != ENOENT && first_error == 0) first_error = errno;
  }
  ::closedir(dir);
  if (first_error != 0) return first_error;
  return ::rmdir(path.c_str()) == 0 || errno == ENOENT ? 0 : errno;
}

// One env file: made, sized (reserved where the file system can), its header written.
UniqueFd make_env_file(int dir_fd, uint64_t env, uint64_t file_bytes, const ColdFileHeader& header, uint32_t mode,
                       const std::string& where) {
  const std::string file = env_file(env);
  UniqueFd fd(::openat(dir_fd, file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) throw_errno(errno, fmt::format("cannot create the cold file '{}/{}'", where, file));
  if (::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) {
    throw_errno(errno, fmt::format("cannot set mode {:o} on the cold file '{}/{}'", mode, where, file));
  }
  int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(file_bytes));
  if (err == EOPNOTSUPP || err == EINVAL) err = ::ftruncate(fd.get(), static_cast<off_t>(file_bytes)) == 0 ? 0 : errno;
  if (err != 0) {
    throw_errno(err, fmt::format("cannot reserve {} bytes for the cold file '{}/{}'", file_bytes, where, file));
  }
  if (::pwrite(fd.get(), &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
    throw_errno(errno, fmt::format("cannot write the header of the cold file '{}/{}'", where, file));
  }
  return fd;
}

// Maps each env file of `fds` (`file_bytes` each) into a ColdMapping.
ColdMapping map_files(std::vector<UniqueFd>& fds, uint64_t file_bytes, const ColdControl& cc, const Schema& schema,
                      bool writable, const std::string& where) {
  struct Maps {
    std::vector<std::pair<void*, std::size_t>> list;
    ~Maps() {
      for (const auto& [addr, bytes] : list) ::munmap(addr, bytes);
    }
  };
  auto maps = std::make_shared<Maps>();
  ColdMapping m;
  m.cold_capacity = cc.cold_capacity;
  m.record_bytes = cc.record_bytes;
  uint64_t column = 0;  // per field a column of cold_capacity values, in schema order
  for (const Field& f : schema.fields()) {
    m.columns.push_back(column);
    column += cc.cold_capacity * f.bytes();
  }
  for (std::size_t e = 0; e < fds.size(); ++e) {
    void* addr = ::mmap(nullptr, file_bytes, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fds[e].get(), 0);
    if (addr == MAP_FAILED) throw_errno(errno, fmt::format("cannot map the cold file '{}/{}'", where, env_file(e)));
    maps->list.emplace_back(addr, file_bytes);
    m.records.push_back(static_cast<std::byte*>(addr) + layout::kColdRecordsOffset);
  }
  m.maps = std::move(maps);
  return m;
}

uint64_t file_bytes_of(const ColdControl& cc) { return layout::kColdRecordsOffset + cc.cold_capacity * cc.record_bytes; }

}  // namespace

void check_cold_arguments(const std::string& name, const Schema& schema, const ColdOptions& o) {
  if (o.cold_capacity == 0) {
    if (!o.cold_dir.empty()) refuse(name, "cold_dir is given without cold_capacity (steps per env on disk)");
    return;
  }
  if (o.cold_capacity > layout::kMaxColdCapacity) {
    refuse(name, fmt::format("cold_capacity is {}, expected 0 (no cold tier) to {}", o.cold_capacity,
                             layout::kMaxColdCapacity));
  }
  if (o.cold_dir.empty() || o.cold_dir.front() != '/' || o.cold_dir.size() >= layout::kColdDirBytes ||
      o.cold_dir.find('\0') != std::string::npos) {
    refuse(name, fmt::format("cold_dir is '{}', expected the absolute path of a directory on a local disk, below {} "
                             "bytes (every process that opens the buffer maps its files from there)",
                             o.cold_dir, layout::kColdDirBytes));
  }
  struct stat st {};
  if (::stat(o.cold_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    refuse(name, fmt::format("cold_dir '{}' is not an existing directory", o.cold_dir));
  }
  for (std::size_t i = 0; i < schema.size(); ++i) {
    if (schema[i].stacked() || schema[i].compressed()) {
      refuse(name, fmt::format("with cold_capacity {}: field '{}' is {}, and a cold tier holds only fields stored as "
                               "pushed so far",
                               o.cold_capacity, schema[i].name, schema[i].stacked() ? "stacked" : "compressed"));
    }
  }
  if (!o.unsupported.empty()) refuse(name, fmt::format("with cold_capacity {}: {}", o.cold_capacity, o.unsupported));
  if (schema.step_bytes() > (UINT64_MAX - layout::kColdRecordsOffset) / o.cold_capacity) {
    refuse(name, fmt::format("cold_capacity {} x {} bytes per step overflows 64 bits", o.cold_capacity,
                             schema.step_bytes()));
  }
}

namespace {

// create_cold_files once <path> is made (and removed again by the caller if this throws).
void fill_cold_dir(Segment& seg, const ColdOptions& o, const std::string& path) {
  const std::string& name = seg.name();
  UniqueFd dir_fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd || ::fchmod(dir_fd.get(), dir_mode(o.mode)) != 0) {
    throw_errno(errno, fmt::format("cannot create shmreplay segment '{}': cannot set up '{}'", name, path));
  }
  // The identity words; the segment has no name yet, so no other process reads them before they are whole.
  auto& cc = const_cast<ColdControl&>(seg.cold_control());
  cc.cold_capacity = o.cold_capacity;
  cc.format_version = layout::kColdFormatVersion;
  cc.record_bytes = seg.schema().step_bytes();
  cc.dir_bytes = o.cold_dir.size();
  std::memcpy(cc.dir, o.cold_dir.data(), o.cold_dir.size());
  const layout::SegmentHeader& h = seg.header();
  std::vector<UniqueFd> fds;
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    const ColdFileHeader fh{layout::kColdMagic, layout::kColdFormatVersion, e,  cc.cold_capacity, cc.record_bytes,
                            layout::kColdRecordsOffset, h.creation_time_ns, h.creator_pid};
    fds.push_back(make_env_file(dir_fd.get(), e, file_bytes_of(cc), fh, o.mode, path));
  }
  seg.attach_cold(map_files(fds, file_bytes_of(cc), cc, seg.schema(), /*writable=*/true, path));
}

}  // namespace

void create_cold_files(Segment& seg, const ColdOptions& o) {
  const std::string& name = seg.name();
  const std::string path = cold_path(o.cold_dir, name);
  if (o.replace) {
    if (const int e = remove_cold_dir(path); e != 0) {
      throw_errno(e, fmt::format("cannot create shmreplay segment '{}': cannot empty its old cold directory '{}'",
                                 name, path));
    }
  }
  if (::mkdir(path.c_str(), 0700) != 0) {
    if (errno == EEXIST) {
      throw Error(Errc::already_exists,
                  fmt::format("cannot create shmreplay segment '{}': its cold directory '{}' exists (a segment of that "
                              "name has it, or left it); remove that segment (shmreplay rm) or create with replace",
                              name, path));
    }
    throw_errno(errno, fmt::format("cannot create shmreplay segment '{}': cannot make '{}'", name, path));
  }
  try {
    fill_cold_dir(seg, o, path);
  } catch (...) {
    (void)remove_cold_dir(path);  // create leaves nothing behind
    throw;
  }
}

void open_cold_files(Segment& seg) {
  ColdControl cc;
  std::memcpy(static_cast<void*>(&cc), &seg.cold_control(), sizeof cc);  // read once: what is checked is used
  const std::string& name = seg.name();
  const auto corrupt = [&](const std::string& what) {
    throw Error(Errc::corrupt, fmt::format("cannot open shmreplay segment '{}': its cold tier {}", name, what));
  };
  if (cc.format_version != layout::kColdFormatVersion) {
    corrupt(fmt::format("has file format {}, this library reads {}", cc.format_version, layout::kColdFormatVersion));
  }
  if (cc.cold_capacity < 1 || cc.cold_capacity > layout::kMaxColdCapacity) {
    corrupt(fmt::format("has cold_capacity {}, expected 1 to {}", cc.cold_capacity, layout::kMaxColdCapacity));
  }
  if (cc.record_bytes != seg.schema().step_bytes()) {
    corrupt(fmt::format("has {} bytes per record, expected the step's {}", cc.record_bytes, seg.schema().step_bytes()));
  }
  for (std::size_t f = 0; f < seg.schema().size(); ++f) {
    if (seg.field_kind(f) != layout::kStoragePlainRing) corrupt(fmt::format("has field {} not stored as pushed", f));
  }
  if (cc.dir_bytes == 0 || cc.dir_bytes >= layout::kColdDirBytes || cc.dir[cc.dir_bytes] != 0) {
    corrupt(fmt::format("names a directory of {} bytes, expected 1 to {}, NUL-terminated", cc.dir_bytes,
                        layout::kColdDirBytes - 1));
  }
  const std::string path = cold_path(std::string(reinterpret_cast<const char*>(cc.dir), cc.dir_bytes), name);
  const uint64_t bytes = file_bytes_of(cc);
  const layout::SegmentHeader& h = seg.header();
  std::vector<UniqueFd> fds;
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    const std::string file = fmt::format("{}/{}", path, env_file(e));
    UniqueFd fd(::open(file.c_str(), (seg.read_only() ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!fd) throw_errno(errno, fmt::format("cannot open shmreplay segment '{}': its cold file '{}'", name, file));
    struct stat st {};
    ColdFileHeader fh{};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < bytes ||
        ::pread(fd.get(), &fh, sizeof fh, 0) != static_cast<ssize_t>(sizeof fh)) {
      corrupt(fmt::format("file '{}' is not a regular file of at least {} bytes", file, bytes));
    }
    if (fh.magic != layout::kColdMagic || fh.format_version != cc.format_version || fh.env != e ||
        fh.cold_capacity != cc.cold_capacity || fh.record_bytes != cc.record_bytes ||
        fh.records_offset != layout::kColdRecordsOffset || fh.creation_time_ns != h.creation_time_ns ||
        fh.creator_pid != h.creator_pid) {
      corrupt(fmt::format("file '{}' is not env {}'s of this segment (its header: env {}, {} records of {} bytes, "
                          "created {} by pid {}; expected created {} by pid {})",
                          file, e, fh.env, fh.cold_capacity, fh.record_bytes, fh.creation_time_ns, fh.creator_pid,
                          h.creation_time_ns, h.creator_pid));
    }
    fds.push_back(std::move(fd));
  }
  seg.attach_cold(map_files(fds, bytes, cc, seg.schema(), !seg.read_only(), path));
}

void remove_cold_files(int segment_fd, const std::string& name) {
  layout::SegmentHeader h{};
  if (::pread(segment_fd, static_cast<void*>(&h), sizeof h, 0) != static_cast<ssize_t>(sizeof h)) return;
  if (h.num_sections <= layout::kSectionCold || h.num_sections > layout::kMaxSections) return;
  const layout::SectionDesc sec = h.sections[layout::kSectionCold];
  if (sec.bytes < sizeof(ColdControl)) return;  // no cold tier
  ColdControl cc{};
  if (::pread(segment_fd, static_cast<void*>(&cc), sizeof cc, static_cast<off_t>(sec.offset)) !=
      static_cast<ssize_t>(sizeof cc)) {
    return;
  }
  if (cc.dir_bytes == 0 || cc.dir_bytes >= layout::kColdDirBytes || cc.dir[0] != '/') return;
  const std::string path = cold_path(std::string(reinterpret_cast<const char*>(cc.dir), cc.dir_bytes), name);
  if (const int e = remove_cold_dir(path); e != 0) {
    throw_errno(e, fmt::format("removed shmreplay segment '{}', but not its cold directory '{}' (remove it by hand)",
                               name, path));
  }
}

void refuse_cold(const Segment& seg, const char* what, const char* why) {
  if (seg.cold_capacity() == 0) return;
  throw Error(Errc::invalid_argument,
              fmt::format("cannot {} '{}': it has a cold tier ({} steps per env on disk), and {} (docs/design/"
                          "cold_tier.md)",
                          what, seg.name(), seg.cold_capacity(), why));
}

}  // namespace shmreplay::detail
