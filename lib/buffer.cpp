// lib/buffer.cpp: a segment's lifecycle: create (placed by detail/segment's placement rule in an unnamed file,
// then named), open (accepted by its acceptance rule), remove; and the Buffer that owns one process's mapping.
#include "shmreplay/buffer.hpp"

#include <algorithm>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "detail/os/file.hpp"
#include "detail/os/owner.hpp"
#include "detail/os/populate.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "detail/segment/name.hpp"
#include "detail/segment/rules.hpp"
#include "detail/storage/cold_files.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay {

using detail::human_bytes;
using detail::UniqueFd;
using layout::kMagic;
using layout::kMaxCapacity;
using layout::kMaxEnvs;

namespace {

// A consuming queue's combinations (CreateOptions::consuming_queue).
void check_queue_arguments(const std::string& name, const Schema& schema, const CreateOptions& options) {
  const auto refuse = [&](const std::string& what) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}' as a consuming queue: {}", name, what));
  };
  if (options.max_times_sampled > 1) {
    refuse(fmt::format("max_times_sampled is {}, expected 0 or 1 (a queue delivers each step once)",
                       options.max_times_sampled));
  }
  for (const Field& f : schema.fields()) {
    if (f.stacked() || f.compressed()) {
      refuse(fmt::format("field '{}' is {}; its steps may leave the views before they are delivered, which a queue "
                         "cannot allow",
                         f.name, f.stacked() ? "stacked" : "compressed"));
    }
  }
  if (options.rate_limit) refuse("it has a rate limiter; a queue paces its writers and learners itself");
}

// The cold tier's options for the storage layer (detail/storage/cold_files.hpp), with what of the other options the
// first slice of the tier does not support yet.
detail::ColdOptions cold_options(const CreateOptions& o) {
  detail::ColdOptions c{o.cold_capacity, o.cold_dir, o.mode, o.replace, {}};
  const EpisodeFields& ep = o.episodes;
  if (o.priority_exponent) c.unsupported = "priority_exponent is given (priorities over the cold tier are not supported yet)";
  if (!ep.done.empty() || !ep.terminated.empty() || !ep.truncated.empty() || !ep.reward.empty()) {
    c.unsupported = "episode fields are given (episode bookkeeping over the cold tier is not supported yet)";
  }
  if (!o.policy_version.empty()) c.unsupported = "policy_version is given (policy windows over the cold tier are not supported yet)";
  if (o.consuming_queue) c.unsupported = "consuming_queue is set (a queue never lets a step leave the ring undelivered)";
  if (o.max_times_sampled != 0) c.unsupported = "max_times_sampled is given (sample caps over the cold tier are not supported yet)";
  if (o.reanalyse_chunk != 0) c.unsupported = "reanalyse_chunk is given (a reanalyse walk over the cold tier is not supported yet)";
  return c;
}

// Every argument of create, checked before anything is made; returns the episode roles they name.
// CreateOptions::initial_priority as SegmentHeader::initial_priority_bits (0: the running maximum; a fixed value,
// 0 stored as -0.0; +infinity: never-sampled steps first), checked: only with priorities, a priority that fits an
// f32 (as every priority must: priority_fits) or +infinity. Checks sequence_priority_length too (the other
// priority option of layout 1.11).
uint64_t initial_priority_word(const std::string& name, uint64_t capacity, const CreateOptions& options) {
  if (options.sequence_priority_length != 0 &&
      (!options.priority_exponent || options.sequence_priority_length > capacity)) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': sequence_priority_length is {}, expected {}",
                            name, options.sequence_priority_length,
                            options.priority_exponent ? fmt::format("1 to the capacity, {}", capacity)
                                                      : std::string("0 in a buffer without priorities (give a "
                                                                    "priority_exponent too)")));
  }
  if (!options.initial_priority) return 0;
  const double p = *options.initial_priority;
  if (!options.priority_exponent) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': initial_priority is {}, but the buffer has no "
                            "priorities (give a priority_exponent too)",
                            name, p));
  }
  if (p == std::numeric_limits<double>::infinity()) return layout::kInitialPriorityFirst;
  if (!detail::priority_fits(p, *options.priority_exponent)) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': initial_priority {} {}, or +infinity (never-sampled "
                            "steps drawn first)",
                            name, p, detail::priority_misfit(p, *options.priority_exponent)));
  }
  return std::bit_cast<uint64_t>(p == 0 ? -0.0 : p);
}

detail::FieldRoles check_create_arguments(const std::string& name, uint64_t num_envs, uint64_t capacity,
                                          const Schema& schema, const CreateOptions& options) {
  if (num_envs < 1 || num_envs > kMaxEnvs) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': num_envs is {}, expected 1 to {}", name,
                            num_envs, kMaxEnvs));
  }
  if (capacity < 1 || capacity > kMaxCapacity) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': capacity is {} steps, expected 1 to {}", name,
                            capacity, kMaxCapacity));
  }
  if (schema.empty()) {
    throw Error(Errc::invalid_schema,
                fmt::format("cannot create shmreplay segment '{}': the schema has no fields", name));
  }
  if (const std::string problem = detail::segment_mode_problem(options.mode); !problem.empty()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': mode {:04o} is not allowed: a segment's mode may "
                            "have only read and write bits (expected a subset of {:04o}, e.g. 0600), and {}",
                            name, options.mode, detail::kSegmentModeBits, problem));
  }
  detail::FieldRoles roles =
      detail::resolve_field_roles(name, schema, options.episodes, options.episode_queue_capacity,
                                  options.policy_version);
  if (options.priority_exponent && !(std::isfinite(*options.priority_exponent) && *options.priority_exponent >= 0)) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': priority_exponent is {}, expected a finite number "
                            ">= 0 (sampling weights are priority^alpha)",
                            name, *options.priority_exponent));
  }
  if (options.stack_restarts != 0 &&
      std::none_of(schema.fields().begin(), schema.fields().end(), [](const Field& f) { return f.stacked(); })) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': stack_restarts is {}, but the schema has no "
                            "stacked field (declare one as NAME:DTYPE[SHAPE]:stack=AXIS)",
                            name, options.stack_restarts));
  }
  const bool compressed =
      std::any_of(schema.fields().begin(), schema.fields().end(), [](const Field& f) { return f.compressed(); });
  if ((options.compressed_bytes != 0 || options.expected_compression != 0) && !compressed) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': {} is given, but the schema has no compressed field "
                            "(declare one as NAME:DTYPE[SHAPE]:lz4 or :zstd=LEVEL)",
                            name, options.compressed_bytes != 0 ? "compressed_bytes" : "expected_compression"));
  }
  if (options.expected_compression != 0 && !(options.expected_compression >= 1 && options.expected_compression <= 1e6)) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': expected_compression is {}, expected 1 to 1e6 (bytes "
                            "as pushed over bytes stored), or 0 for the default {}",
                            name, options.expected_compression, kDefaultExpectedCompression));
  }
  if (options.stack_continuity != StackContinuity::compare) {
    if (options.stack_continuity != StackContinuity::episodes) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot create shmreplay segment '{}': stack_continuity code {} is not one of compare "
                              "(0) or episodes (1)",
                              name, static_cast<uint32_t>(options.stack_continuity)));
    }
    if (std::none_of(schema.fields().begin(), schema.fields().end(), [](const Field& f) { return f.stacked(); })) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot create shmreplay segment '{}': stack_continuity is episodes, but the schema has "
                              "no stacked field (declare one as NAME:DTYPE[SHAPE]:stack=AXIS)",
                              name));
    }
    if (!roles.indices.any_flag()) {
      throw Error(Errc::invalid_argument,
                  fmt::format("cannot create shmreplay segment '{}': stack_continuity is episodes, which trusts the "
                              "episode flags, but the buffer has no episode fields (give done, or terminated and/or "
                              "truncated)",
                              name));
    }
  }
  if (options.max_learners < 1 || options.max_learners > layout::kMaxLearners) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': max_learners is {}, expected 1 to {} (learner "
                            "processes that sample it at once)",
                            name, options.max_learners, layout::kMaxLearners));
  }
  if (options.max_times_sampled > layout::kMaxTimesSampled) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': max_times_sampled is {}, expected 0 (no cap) to {} "
                            "(deliveries per stored step)",
                            name, options.max_times_sampled, layout::kMaxTimesSampled));
  }
  if (options.consuming_queue) check_queue_arguments(name, schema, options);
  if (options.reanalyse_chunk > std::min(capacity, layout::kMaxReanalyseChunk)) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': reanalyse_chunk is {}, expected 0 (no walk) or 1 to "
                            "the capacity, {}{}",
                            name, options.reanalyse_chunk, capacity,
                            capacity > layout::kMaxReanalyseChunk ? " (and at most 2^32)" : ""));
  }
  detail::check_cold_arguments(name, schema, cold_options(options));  // (1.11) the cold tier
  if (options.rate_limit) {
    detail::check_rate_limit(*options.rate_limit, num_envs * capacity,
                             fmt::format("cannot create shmreplay segment '{}' with rate limit {}", name,
                                         options.rate_limit->to_string()));
  }
  return roles;
}

[[noreturn]] void throw_no_space(const std::string& name, uint64_t needed, const std::string& dir, uint64_t free_now) {
  throw Error(Errc::no_space,
              fmt::format("cannot create shmreplay segment '{}': it needs {} bytes ({}) but '{}' has {} bytes "
                          "({}) free; use fewer envs, a smaller capacity or schema, or a larger {}",
                          name, needed, human_bytes(needed), dir, free_now, human_bytes(free_now), dir));
}

// The segment's unnamed file, with its mode and every page reserved: a full tmpfs fails here, with an error,
// instead of SIGBUS at some later write.
UniqueFd reserve_file(const std::string& dir, const std::string& name, uint32_t mode, uint64_t total_bytes) {
  UniqueFd fd = detail::make_unnamed_file(dir, name, mode);
  if (::fchmod(fd.get(), mode) != 0) {  // O_TMPFILE's mode is subject to the umask
    throw_errno(errno, fmt::format("cannot set mode {:o} on shmreplay segment '{}'", mode, name));
  }
  const int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(total_bytes));
  if (err == ENOSPC) {
    struct statvfs now {};
    ::statvfs(dir.c_str(), &now);
    throw_no_space(name, total_bytes, dir, static_cast<uint64_t>(now.f_bavail) * now.f_frsize);
  }
  if (err != 0) {
    throw_errno(err, fmt::format("cannot reserve {} bytes for shmreplay segment '{}' in '{}'", total_bytes,
                                 name, dir));
  }
  return fd;
}

}  // namespace

Buffer Buffer::create(std::string_view name, uint64_t num_envs, uint64_t capacity, const Schema& schema,
                      const CreateOptions& options) {
  Buffer b = create_unnamed(name, num_envs, capacity, schema, options);
  b.publish();
  return b;
}

Buffer Buffer::create_unnamed(std::string_view name_in, uint64_t num_envs, uint64_t capacity, const Schema& schema,
                              const CreateOptions& options) {
  const std::string name = detail::normalize_name(name_in);
  const std::string dir = shm_directory();
  const std::string path = detail::segment_path(name);
  const detail::FieldRoles roles = check_create_arguments(name, num_envs, capacity, schema, options);
  const uint64_t initial_priority_bits = initial_priority_word(name, capacity, options);
  const detail::SegmentPlan plan = detail::plan_segment(num_envs, capacity, schema, roles.queue_capacity,
                                                       options.priority_exponent.has_value(), options.stack_restarts,
                                                       options.max_learners,
                                                       {options.compressed_bytes, options.expected_compression},
                                                       options.consuming_queue ? 1 : options.max_times_sampled,
                                                       options.consuming_queue, initial_priority_bits,
                                                       options.sequence_priority_length, options.reanalyse_chunk,
                                                       options.cold_capacity > 0);
  // An early, clear answer for the common case; publish_name() still settles races atomically.
  struct stat existing {};
  if (!options.replace && ::lstat(path.c_str(), &existing) == 0) detail::already_exists(name, path);

  // Fail early, with numbers, when the file system cannot hold the segment (Docker's /dev/shm is 64 MiB).
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    throw_errno(errno, fmt::format("cannot create shmreplay segment '{}': cannot query free space of '{}'", name,
                                   dir));
  }
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (plan.total_bytes > free_bytes) throw_no_space(name, plan.total_bytes, dir, free_bytes);
  // Read before fallocate takes the segment's pages out of MemAvailable.
  bool populate = options.populate == Populate::always;
  if (options.populate == Populate::automatic) {
    const std::optional<uint64_t> available = detail::mem_available_bytes();
    populate = available && plan.total_bytes <= *available / 2;
  }

  UniqueFd fd = reserve_file(dir, name, options.mode, plan.total_bytes);

  struct stat made {};
  if (::fstat(fd.get(), &made) != 0) {
    throw_errno(errno, fmt::format("cannot stat the new shmreplay segment '{}'", name));
  }

  detail::Mapping map(fd.get(), plan.total_bytes, /*writable=*/true, path);
  if (populate) {  // before write_segment: the fallback touch writes zeros, which only a fresh file may get
    const int perr = detail::populate_writable(map.data(), plan.total_bytes, options.populate_progress);
    if (perr != 0 && options.populate == Populate::always) {
      throw_errno(perr, fmt::format("cannot populate the {} bytes of shmreplay segment '{}' "
                                    "(madvise MADV_POPULATE_WRITE; CreateOptions::populate is always)",
                                    plan.total_bytes, name));
    }
  }
  detail::write_segment(map.data(), num_envs, capacity, schema, plan, roles, options.priority_exponent,
                        options.rate_limit, options.stack_continuity);

  Buffer b;
  b.path_ = path;
  b.mode_ = options.mode;
  b.owner_uid_ = static_cast<uint32_t>(made.st_uid);
  b.segment_ = std::make_unique<Segment>(map.data(), map.size(), /*read_only=*/false,
                                         detail::planned_geometry(name, num_envs, capacity, schema, plan, roles,
                                                                  options.priority_exponent,
                                                                  options.stack_continuity));
  map.release();
  b.unnamed_fd_ = fd.release();
  if (options.cold_capacity > 0) detail::create_cold_files(*b.segment_, cold_options(options));
  b.replace_on_publish_ = options.replace;
  return b;
}

void Buffer::publish() {
  if (unnamed_fd_ < 0) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot publish shmreplay segment '{}': it already has its name ('{}')", name(), path_));
  }
  const std::string dir = path_.substr(0, path_.rfind('/'));
  detail::publish_name(unnamed_fd_, path_, dir, name(), replace_on_publish_);
  ::close(unnamed_fd_);  // the name keeps the file now; the mapping keeps working without the descriptor
  unnamed_fd_ = -1;
}

Buffer Buffer::open(std::string_view name_in, const OpenOptions& options) {
  const std::string name = detail::normalize_name(name_in);
  const std::string path = detail::segment_path(name);
  // O_NONBLOCK: a FIFO planted under the name must not hang open(); it is refused as not a regular file below.
  const int flags = (options.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  UniqueFd fd(::open(path.c_str(), flags));
  if (!fd) {
    const int e = errno;
    if (e == ENOENT) {
      throw Error(Errc::not_found, fmt::format("cannot open shmreplay segment '{}': '{}' does not exist", name, path));
    }
    if (e == ELOOP) {
      throw Error(Errc::not_a_segment,
                  fmt::format("cannot open shmreplay segment '{}': {}", name, detail::symlink_at_name(path)));
    }
    throw_errno(e, fmt::format("cannot open shmreplay segment '{}' ({})", name, path));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno(errno, fmt::format("cannot stat '{}'", path));
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  const detail::OpenCheck check(name, path, file_bytes);
  if (!S_ISREG(st.st_mode)) check.fail(Errc::not_a_segment, "it is not a regular file");
  // Whose file it is comes before anything is read from it: nothing of another user's file is trusted unasked.
  if (!options.allow_other_owner) {
    if (const std::string problem = detail::other_owner_problem(st.st_uid); !problem.empty()) {
      check.fail(Errc::permission_denied, problem);
    }
  }
  const detail::LayoutVersion version = detail::accept_prefix(fd.get(), check);

  detail::Mapping map(fd.get(), static_cast<std::size_t>(file_bytes), !options.read_only, path);
  // The mapping is unmapped (by `map`) if the acceptance rule throws.
  const auto& header = *std::launder(reinterpret_cast<const layout::SegmentHeader*>(map.data()));
  detail::await_ready(header, options.ready_timeout_ms, check);
  SegmentGeometry geometry = detail::accept_segment(map.data(), version, name, check, options.expected_schema);

  Buffer b;
  b.path_ = path;
  b.mode_ = static_cast<uint32_t>(st.st_mode & 07777);
  b.owner_uid_ = static_cast<uint32_t>(st.st_uid);
  b.segment_ = std::make_unique<Segment>(map.data(), map.size(), options.read_only, std::move(geometry));
  map.release();
  if (b.segment_->has_cold_section()) detail::open_cold_files(*b.segment_);
  return b;
}

void Buffer::remove(std::string_view name_in) {
  const std::string name = detail::normalize_name(name_in);
  const std::string path = detail::segment_path(name);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) {
    const int e = errno;
    if (e == ENOENT) {
      throw Error(Errc::not_found,
                  fmt::format("cannot remove shmreplay segment '{}': '{}' does not exist", name, path));
    }
    if (e == ELOOP) {  // the link is left alone: it may be another user's, and its target is not a segment's name
      throw Error(Errc::not_a_segment,
                  fmt::format("cannot remove shmreplay segment '{}': {}", name, detail::symlink_at_name(path)));
    }
    throw_errno(e, fmt::format("cannot remove shmreplay segment '{}' ({})", name, path));
  }
  uint64_t magic = 0;
  if (::pread(fd.get(), &magic, sizeof magic, 0) != static_cast<ssize_t>(sizeof magic) || magic != kMagic) {
    throw Error(Errc::not_a_segment,
                fmt::format("refusing to remove '{}': it is not a shmreplay segment (no 'SHMRPLAY' magic)", path));
  }
  if (::unlink(path.c_str()) != 0) {
    throw_errno(errno, fmt::format("cannot remove shmreplay segment '{}' ({})", name, path));
  }
  detail::remove_cold_files(fd.get(), name);  // (1.11) its cold tier's files, if it has one
}

bool Buffer::exists(std::string_view name) {
  const std::string path = detail::segment_path(detail::normalize_name(name));
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    close_unnamed();
    segment_ = std::move(other.segment_);
    path_ = std::move(other.path_);
    mode_ = other.mode_;
    owner_uid_ = other.owner_uid_;
    unnamed_fd_ = std::exchange(other.unnamed_fd_, -1);
    replace_on_publish_ = other.replace_on_publish_;
  }
  return *this;
}

Buffer::~Buffer() { close_unnamed(); }

void Buffer::close_unnamed() noexcept {
  segment_.reset();                            // unmaps
  if (unnamed_fd_ >= 0) ::close(unnamed_fd_);  // an unpublished segment vanishes with its last reference
  unnamed_fd_ = -1;
}

Segment& segment_of(Buffer& buffer) noexcept { return *buffer.segment_; }
const Segment& segment_of(const Buffer& buffer) noexcept { return *buffer.segment_; }

const std::string& Buffer::name() const noexcept { return segment_of(*this).name(); }
const Schema& Buffer::schema() const noexcept { return segment_of(*this).schema(); }
uint64_t Buffer::num_envs() const noexcept { return segment_of(*this).num_envs(); }
uint64_t Buffer::capacity() const noexcept { return segment_of(*this).capacity(); }
uint64_t Buffer::total_bytes() const noexcept { return segment_of(*this).total_bytes(); }
bool Buffer::read_only() const noexcept { return segment_of(*this).read_only(); }
const EpisodeFieldIndices& Buffer::episode_fields() const noexcept { return segment_of(*this).episode_fields(); }
bool Buffer::has_episodes() const noexcept { return segment_of(*this).has_episodes(); }
uint64_t Buffer::episode_queue_capacity() const noexcept { return segment_of(*this).episode_queue_capacity(); }
bool Buffer::has_priorities() const noexcept { return segment_of(*this).has_priorities(); }
uint64_t Buffer::max_learners() const noexcept { return segment_of(*this).max_learners(); }
uint64_t Buffer::max_times_sampled() const noexcept { return segment_of(*this).max_times_sampled(); }
bool Buffer::consuming_queue() const noexcept { return segment_of(*this).consuming_queue(); }
StackContinuity Buffer::stack_continuity() const noexcept { return segment_of(*this).stack_continuity(); }
double Buffer::priority_exponent() const noexcept { return segment_of(*this).priority_exponent(); }

std::optional<double> Buffer::initial_priority() const noexcept { return segment_of(*this).initial_priority(); }

uint64_t Buffer::sequence_priority_length() const noexcept { return segment_of(*this).sequence_priority_length(); }
uint64_t Buffer::reanalyse_chunk() const noexcept { return segment_of(*this).reanalyse_chunk(); }
uint64_t Buffer::cold_capacity() const noexcept { return segment_of(*this).cold_capacity(); }
uint64_t Buffer::priority_leaves() const noexcept { return segment_of(*this).priority_leaves(); }

}  // namespace shmreplay
