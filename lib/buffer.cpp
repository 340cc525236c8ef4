#include "shmreplay/buffer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "detail/os/file.hpp"
#include "detail/os/owner.hpp"
#include "detail/os/populate.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/lease.hpp"
#include "detail/protocol/rate_limit.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay {
namespace {

using detail::human_bytes;
using detail::round_up;
using detail::UniqueFd;
using namespace layout;

// Where everything goes in a segment of the given shape. create() writes this into the header; open() checks
// the header against the same rules (not against this exact plan, so that a newer minor version may place
// extra sections).
struct Plan {
  SectionDesc sections[kSectionsUsed];
  std::vector<uint64_t> field_offsets;
  uint64_t total_bytes = 0;
};

[[noreturn]] void too_large(uint64_t num_envs, uint64_t capacity, const std::string& what) {
  throw Error(Errc::invalid_argument,
              fmt::format("a buffer of {} envs x {} steps is too large: {} overflows 64 bits", num_envs, capacity,
                          what));
}

uint64_t checked_mul(uint64_t a, uint64_t b, uint64_t num_envs, uint64_t capacity, const std::string& what) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) too_large(num_envs, capacity, what);
  return r;
}

uint64_t checked_add(uint64_t a, uint64_t b, uint64_t num_envs, uint64_t capacity, const std::string& what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > UINT64_MAX - kPageBytes) too_large(num_envs, capacity, what);
  return r;
}

// The episode roles a create() asked for, resolved against the schema: per field its role code.
struct Roles {
  std::vector<uint32_t> of_field;  // FieldRole per field, schema order
  EpisodeFieldIndices indices;
  uint64_t queue_capacity = 0;     // records per env; 0 without episode fields
};

bool is_integer_or_bool(DType d) noexcept {
  switch (d) {
    case DType::u8: case DType::i8: case DType::u16: case DType::i16: case DType::u32: case DType::i32:
    case DType::u64: case DType::i64: case DType::boolean: return true;
    default: return false;
  }
}

// The one check both create() and open() make of a set of roles; returns "" or what is wrong.
std::string role_problem(const Schema& schema, const EpisodeFieldIndices& r) {
  auto describe = [&](const char* role, std::size_t f) {
    return fmt::format("episode field {} = '{}' ({})", role, schema[f].name, schema[f].to_string());
  };
  if (r.done && (r.terminated || r.truncated)) {
    return fmt::format("{} is given together with {}: name either done, or terminated and/or truncated",
                       describe("done", *r.done),
                       r.terminated ? describe("terminated", *r.terminated) : describe("truncated", *r.truncated));
  }
  const std::pair<const char*, std::optional<std::size_t>> flags[] = {
      {"done", r.done}, {"terminated", r.terminated}, {"truncated", r.truncated}};
  for (const auto& [role, f] : flags) {
    if (f && (schema[*f].elements() != 1 || !is_integer_or_bool(schema[*f].dtype))) {
      return fmt::format("{} is not a flag: expected a scalar bool or integer field, actual dtype {} shape {}",
                         describe(role, *f), dtype_name(schema[*f].dtype), schema[*f].shape_string());
    }
  }
  if (r.reward) {
    const Field& f = schema[*r.reward];
    if (f.elements() != 1 || f.dtype == DType::boolean) {
      return fmt::format("{} is not a reward: expected a scalar numeric field (not bool), actual dtype {} shape {}",
                         describe("reward", *r.reward), dtype_name(f.dtype), f.shape_string());
    }
    if (!r.any_flag()) {
      return fmt::format("{} is given without an episode-end field: name done, or terminated and/or truncated too",
                         describe("reward", *r.reward));
    }
  }
  return {};
}

Roles resolve_roles(const std::string& name, const Schema& schema, const CreateOptions& options) {
  Roles roles;
  roles.of_field.assign(schema.size(), kRoleNone);
  const EpisodeFields& ep = options.episodes;
  auto fail = [&](const std::string& what) {
    throw Error(Errc::invalid_argument, fmt::format("cannot create shmreplay segment '{}': {}", name, what));
  };
  const std::pair<const char*, const std::string*> named[] = {
      {"done", &ep.done}, {"terminated", &ep.terminated}, {"truncated", &ep.truncated}, {"reward", &ep.reward}};
  const uint32_t codes[] = {kRoleDone, kRoleTerminated, kRoleTruncated, kRoleReward};
  std::optional<std::size_t>* slots[] = {&roles.indices.done, &roles.indices.terminated, &roles.indices.truncated,
                                         &roles.indices.reward};
  for (std::size_t i = 0; i < 4; ++i) {
    const std::string& field = *named[i].second;
    if (field.empty()) continue;
    const auto f = schema.find(field);
    if (!f) {
      std::vector<std::string> names;
      for (const Field& x : schema.fields()) names.push_back(x.name);
      fail(fmt::format("episode field {} = '{}' names no field of the schema (its fields: {})", named[i].first,
                       field, fmt::join(names, ", ")));
    }
    if (roles.of_field[*f] != kRoleNone) {
      const char* other = named[roles.of_field[*f] - 1].first;
      fail(fmt::format("field '{}' is named as episode field {} and as {}; each role needs its own field", field,
                       other, named[i].first));
    }
    roles.of_field[*f] = codes[i];
    *slots[i] = *f;
  }
  if (const std::string problem = role_problem(schema, roles.indices); !problem.empty()) fail(problem);
  if (roles.indices.any_flag()) {
    roles.queue_capacity = options.episode_queue_capacity == 0 ? kDefaultEpisodeQueueCapacity
                                                               : options.episode_queue_capacity;
    if (roles.queue_capacity > kMaxEpisodeQueueCapacity) {
      fail(fmt::format("episode_queue_capacity is {} records, expected 1 to {}", roles.queue_capacity,
                       kMaxEpisodeQueueCapacity));
    }
  } else if (options.episode_queue_capacity != 0) {
    fail(fmt::format("episode_queue_capacity is {}, but the buffer has no episode fields (set "
                     "CreateOptions::episodes.done, or terminated and/or truncated)",
                     options.episode_queue_capacity));
  }
  return roles;
}

Plan plan_layout(uint64_t num_envs, uint64_t capacity, const Schema& schema, uint64_t queue_capacity,
                 bool priorities) {
  Plan p;
  uint64_t at = sizeof(SegmentHeader);
  p.sections[kSectionFields] = {at, schema.size() * sizeof(FieldDesc)};
  at = round_up(at + p.sections[kSectionFields].bytes, kCacheLineBytes);
  p.sections[kSectionEnvs] = {at, num_envs * sizeof(EnvControl)};
  at = round_up(at + p.sections[kSectionEnvs].bytes, kCacheLineBytes);
  p.sections[kSectionGlobal] = {at, sizeof(GlobalControl)};
  at = round_up(at + p.sections[kSectionGlobal].bytes, kPageBytes);
  const uint64_t data_start = at;
  const uint64_t steps = checked_mul(num_envs, capacity, num_envs, capacity, "the number of steps");
  for (const Field& f : schema.fields()) {
    const std::string what = fmt::format("the storage of field '{}' ({} bytes per step)", f.name, f.bytes());
    const uint64_t bytes = checked_mul(steps, f.bytes(), num_envs, capacity, what);
    at = round_up(at, kDataAlignBytes);
    p.field_offsets.push_back(at);
    at = checked_add(at, bytes, num_envs, capacity, "the segment's size");
  }
  p.sections[kSectionData] = {data_start, at - data_start};
  // Layout 1.2: the episode sections follow the data (so everything before is placed as in 1.1); all three are
  // empty in a buffer without episode fields.
  const bool episodes = queue_capacity != 0;
  at = round_up(at, kCacheLineBytes);
  p.sections[kSectionEpisodes] = {at, episodes ? num_envs * sizeof(EpisodeControl) : 0};
  at = checked_add(at, p.sections[kSectionEpisodes].bytes, num_envs, capacity, "the segment's size");
  const uint64_t meta_bytes = episodes ? checked_mul(steps, sizeof(uint64_t), num_envs, capacity, "the step meta") : 0;
  p.sections[kSectionStepMeta] = {at, meta_bytes};
  at = round_up(checked_add(at, meta_bytes, num_envs, capacity, "the segment's size"), kCacheLineBytes);
  const uint64_t queue_bytes =
      checked_mul(checked_mul(num_envs, queue_capacity, num_envs, capacity, "the episode queues"),
                  sizeof(EpisodeRecordSlot), num_envs, capacity, "the episode queues");
  p.sections[kSectionEpisodeQueues] = {at, queue_bytes};
  at = checked_add(at, queue_bytes, num_envs, capacity, "the segment's size");
  // Layout 1.3: the priority trees, empty without priorities.
  at = round_up(at, kCacheLineBytes);
  const uint64_t tree_bytes =
      priorities ? checked_mul(checked_mul(num_envs, 2 * std::bit_ceil(capacity), num_envs, capacity,
                                           "the priority trees"),
                               sizeof(uint64_t), num_envs, capacity, "the priority trees")
                 : 0;
  p.sections[kSectionPriorities] = {at, tree_bytes};
  at = checked_add(at, tree_bytes, num_envs, capacity, "the segment's size");
  p.total_bytes = round_up(at, kPageBytes);
  if (p.total_bytes > static_cast<uint64_t>(SIZE_MAX / 2)) too_large(num_envs, capacity, "the segment's size");
  return p;
}

void write_segment(std::byte* base, uint64_t num_envs, uint64_t capacity, const Schema& schema, const Plan& p,
                   const Roles& roles, std::optional<double> priority_exponent,
                   const std::optional<RateLimit>& rate_limit) {
  // The file came from fallocate, so every byte is already zero; construct the atomics in place.
  auto* h = new (base) SegmentHeader{};
  h->magic = kMagic;
  h->layout_major = kLayoutMajor;
  h->layout_minor = kLayoutMinor;
  h->header_bytes = sizeof(SegmentHeader);
  h->total_bytes = p.total_bytes;
  h->state.store(kStateInitializing, std::memory_order_relaxed);
  h->num_envs = num_envs;
  h->capacity = capacity;
  h->num_fields = schema.size();
  h->step_bytes = schema.step_bytes();
  h->creator_pid = static_cast<uint64_t>(::getpid());
  h->creator_start_ticks = detail::self_start_ticks();
  h->creation_time_ns = detail::realtime_ns();
  h->num_sections = kSectionsUsed;
  h->episode_queue_capacity = roles.queue_capacity;
  // alpha = 0 is stored as -0.0, so that 0 bits always mean "no priorities".
  h->priority_exponent_bits = priority_exponent ? std::bit_cast<uint64_t>(*priority_exponent == 0 ? -0.0
                                                                                               : *priority_exponent)
                                                : 0;
  for (uint32_t s = 0; s < kSectionsUsed; ++s) h->sections[s] = p.sections[s];

  auto* table = reinterpret_cast<FieldDesc*>(base + p.sections[kSectionFields].offset);
  for (std::size_t i = 0; i < schema.size(); ++i) {
    const Field& f = schema[i];
    auto* d = new (table + i) FieldDesc{};
    std::memcpy(d->name, f.name.data(), f.name.size());
    d->dtype = static_cast<uint32_t>(f.dtype);
    d->ndim = static_cast<uint32_t>(f.shape.size());
    std::copy(f.shape.begin(), f.shape.end(), d->dims);
    d->step_bytes = f.bytes();
    d->data_offset = p.field_offsets[i];
    d->data_bytes = num_envs * capacity * f.bytes();
    d->role = roles.of_field[i];
  }
  auto* envs = reinterpret_cast<EnvControl*>(base + p.sections[kSectionEnvs].offset);
  for (uint64_t e = 0; e < num_envs; ++e) new (envs + e) EnvControl{};
  auto* global = new (base + p.sections[kSectionGlobal].offset) GlobalControl{};
  // Nobody else can see the segment yet: the rewriter lease is free.
  if (rate_limit) detail::store_rate_limit(*global, rate_limit, /*inserts=*/std::nullopt, detail::self_lease_word(), 0);
  if (priority_exponent) {
    global->max_priority.store(std::bit_cast<uint64_t>(1.0), std::memory_order_relaxed);
    auto* words = reinterpret_cast<std::atomic<uint64_t>*>(base + p.sections[kSectionPriorities].offset);
    for (uint64_t i = 0; i < p.sections[kSectionPriorities].bytes / sizeof(uint64_t); ++i) {
      new (words + i) std::atomic<uint64_t>(0);
    }
  }
  if (roles.queue_capacity != 0) {
    // Journal slot 0 holds the state for head 0 (episode 0 starts at step 0, nothing completed); slot 1 holds
    // nothing yet. Meta words and record slots start as zeros.
    auto* eps = reinterpret_cast<EpisodeControl*>(base + p.sections[kSectionEpisodes].offset);
    for (uint64_t e = 0; e < num_envs; ++e) {
      auto* c = new (eps + e) EpisodeControl{};
      c->journal[1].for_head.store(kJournalWriting, std::memory_order_relaxed);
    }
    auto* meta = reinterpret_cast<std::atomic<uint64_t>*>(base + p.sections[kSectionStepMeta].offset);
    for (uint64_t i = 0; i < num_envs * capacity; ++i) new (meta + i) std::atomic<uint64_t>(0);
    auto* slots = reinterpret_cast<EpisodeRecordSlot*>(base + p.sections[kSectionEpisodeQueues].offset);
    for (uint64_t i = 0; i < num_envs * roles.queue_capacity; ++i) new (slots + i) EpisodeRecordSlot{};
  }

  // release: pairs with the attacher's acquire load of `state` in open(); everything above happens-before it.
  h->state.store(kStateReady, std::memory_order_release);
}

// The segment file while it is being built: unnamed (O_TMPFILE), so that nobody can open it half-made and a
// crash at any instruction leaves nothing behind.
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

// create() of a name that exists. The advice depends on what is there, and matches what `shmreplay rm`
// (Buffer::remove) accepts: only a segment is sent there; a link or another program's file is left to the user.
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
    what = not_ours(detail::symlink_at_name(path));
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
                       path, detail::user_text(st.st_uid), detail::user_text(::geteuid()), name);
  }
  throw Error(Errc::already_exists, fmt::format("cannot create shmreplay segment '{}': {}", name, what));
}

// Gives the finished unnamed file its name. Without `replace`, linkat() fails with EEXIST when the name exists,
// so of several racing creators exactly one wins. With it, the file is linked under a hidden name and renamed
// over the old one in one atomic step.
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

// -- open()'s validation --

class Validator {
 public:
  Validator(const std::string& name, const std::string& path, uint64_t file_bytes)
      : name_(name), path_(path), file_bytes_(file_bytes) {}

  [[noreturn]] void fail(Errc code, const std::string& what) const {
    throw Error(code, fmt::format("cannot open shmreplay segment '{}' ({}): {}", name_, path_, what));
  }

  // [offset, offset + bytes) must lie inside the file, after the header, and be aligned.
  void check_range(const std::string& what, uint64_t offset, uint64_t bytes, uint64_t header_bytes,
                   uint64_t align) const {
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, bytes, &end) || end > file_bytes_) {
      fail(Errc::corrupt, fmt::format("{} at offset {} with {} bytes ends beyond the file's {} bytes", what, offset,
                                      bytes, file_bytes_));
    }
    if (offset < header_bytes) {
      fail(Errc::corrupt,
           fmt::format("{} at offset {} overlaps the header, which is {} bytes", what, offset, header_bytes));
    }
    if (offset % align != 0) {
      fail(Errc::corrupt, fmt::format("{} at offset {} is not aligned to {} bytes", what, offset, align));
    }
  }

  // No two of `ranges` overlap.
  void check_disjoint(std::vector<std::pair<SectionDesc, std::string>> ranges) const {
    std::sort(ranges.begin(), ranges.end(),
              [](const auto& a, const auto& b) { return a.first.offset < b.first.offset; });
    for (std::size_t i = 1; i < ranges.size(); ++i) {
      const auto& [prev, prev_name] = ranges[i - 1];
      const auto& [cur, cur_name] = ranges[i];
      if (prev.offset + prev.bytes > cur.offset) {
        fail(Errc::corrupt, fmt::format("{} [{}, {}) overlaps {} [{}, {})", prev_name, prev.offset,
                                          prev.offset + prev.bytes, cur_name, cur.offset, cur.offset + cur.bytes));
      }
    }
  }

 private:
  const std::string& name_;
  const std::string& path_;
  uint64_t file_bytes_;
};

std::string magic_text(uint64_t magic) {
  std::string s;
  for (int i = 0; i < 8; ++i) {
    const char c = static_cast<char>((magic >> (8 * i)) & 0xff);
    s += (c >= 0x20 && c < 0x7f) ? c : '.';
  }
  return s;
}

std::string creator_text(const SegmentHeader& h) {
  const bool alive = detail::process_alive(h.creator_pid, h.creator_start_ticks);
  return fmt::format("pid {}, {}", h.creator_pid, alive ? "still running" : "no longer running");
}

}  // namespace

std::string shm_directory() {
  const char* dir = std::getenv("SHMREPLAY_SHM_DIR");
  return (dir != nullptr && *dir != '\0') ? std::string(dir) : std::string("/dev/shm");
}

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
  const Roles roles = resolve_roles(name, schema, options);
  if (options.priority_exponent && !(std::isfinite(*options.priority_exponent) && *options.priority_exponent >= 0)) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot create shmreplay segment '{}': priority_exponent is {}, expected a finite number "
                            ">= 0 (sampling weights are priority^alpha)",
                            name, *options.priority_exponent));
  }
  if (options.rate_limit) {
    detail::check_rate_limit(*options.rate_limit, num_envs * capacity,
                             fmt::format("cannot create shmreplay segment '{}' with rate limit {}", name,
                                         options.rate_limit->to_string()));
  }
  const Plan plan = plan_layout(num_envs, capacity, schema, roles.queue_capacity,
                                options.priority_exponent.has_value());
  // An early, clear answer for the common case; publish_name() still settles races atomically.
  struct stat existing {};
  if (!options.replace && ::lstat(path.c_str(), &existing) == 0) already_exists(name, path);

  // Fail early, with numbers, when the file system cannot hold the segment (Docker's /dev/shm is 64 MiB).
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    throw_errno(errno, fmt::format("cannot create shmreplay segment '{}': cannot query free space of '{}'", name,
                                   dir));
  }
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const auto no_space = [&](uint64_t free_now) {
    throw Error(Errc::no_space,
                fmt::format("cannot create shmreplay segment '{}': it needs {} bytes ({}) but '{}' has {} bytes "
                            "({}) free; use fewer envs, a smaller capacity or schema, or a larger {}",
                            name, plan.total_bytes, human_bytes(plan.total_bytes), dir, free_now,
                            human_bytes(free_now), dir));
  };
  if (plan.total_bytes > free_bytes) no_space(free_bytes);
  // Read before fallocate takes the segment's pages out of MemAvailable.
  bool populate = options.populate == Populate::always;
  if (options.populate == Populate::automatic) {
    const std::optional<uint64_t> available = detail::mem_available_bytes();
    populate = available && plan.total_bytes <= *available / 2;
  }

  UniqueFd fd = make_unnamed_file(dir, name, options.mode);
  if (::fchmod(fd.get(), options.mode) != 0) {  // O_TMPFILE's mode is subject to the umask
    throw_errno(errno, fmt::format("cannot set mode {:o} on shmreplay segment '{}'", options.mode, name));
  }
  // Reserve every page now: a full tmpfs fails here, with an error, instead of SIGBUS at some later write.
  const int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(plan.total_bytes));
  if (err == ENOSPC) {
    struct statvfs now {};
    ::statvfs(dir.c_str(), &now);
    no_space(static_cast<uint64_t>(now.f_bavail) * now.f_frsize);
  }
  if (err != 0) {
    throw_errno(err, fmt::format("cannot reserve {} bytes for shmreplay segment '{}' in '{}'", plan.total_bytes,
                                 name, dir));
  }

  struct stat made {};
  if (::fstat(fd.get(), &made) != 0) {
    throw_errno(errno, fmt::format("cannot stat the new shmreplay segment '{}'", name));
  }

  Buffer b;
  b.name_ = name;
  b.path_ = path;
  b.schema_ = schema;
  b.mode_ = options.mode;
  b.owner_uid_ = static_cast<uint32_t>(made.st_uid);
  detail::Mapping map(fd.get(), plan.total_bytes, /*writable=*/true, path);
  if (populate) {  // before write_segment: the fallback touch writes zeros, which only a fresh file may get
    const int perr = detail::populate_writable(map.data(), plan.total_bytes, options.populate_progress);
    if (perr != 0 && options.populate == Populate::always) {
      throw_errno(perr, fmt::format("cannot populate the {} bytes of shmreplay segment '{}' "
                                    "(madvise MADV_POPULATE_WRITE; CreateOptions::populate is always)",
                                    plan.total_bytes, name));
    }
  }
  write_segment(map.data(), num_envs, capacity, schema, plan, roles, options.priority_exponent, options.rate_limit);

  b.base_ = map.data();
  b.map_bytes_ = map.size();
  map.release();
  b.num_envs_ = num_envs;
  b.capacity_ = capacity;
  b.total_bytes_ = plan.total_bytes;
  b.envs_offset_ = plan.sections[kSectionEnvs].offset;
  b.global_offset_ = plan.sections[kSectionGlobal].offset;
  b.field_offsets_ = plan.field_offsets;
  b.episode_fields_ = roles.indices;
  b.episode_queue_capacity_ = roles.queue_capacity;
  b.episodes_offset_ = plan.sections[kSectionEpisodes].offset;
  b.step_meta_offset_ = plan.sections[kSectionStepMeta].offset;
  b.queues_offset_ = plan.sections[kSectionEpisodeQueues].offset;
  b.priorities_offset_ = plan.sections[kSectionPriorities].offset;
  b.priority_leaves_ = options.priority_exponent ? std::bit_ceil(capacity) : 0;
  b.priority_exponent_ = options.priority_exponent.value_or(0.0);
  b.unnamed_fd_ = fd.release();
  b.replace_on_publish_ = options.replace;
  return b;
}

void Buffer::publish() {
  if (unnamed_fd_ < 0) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot publish shmreplay segment '{}': it already has its name ('{}')", name_, path_));
  }
  const std::string dir = path_.substr(0, path_.rfind('/'));
  publish_name(unnamed_fd_, path_, dir, name_, replace_on_publish_);
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
  Validator v(name, path, file_bytes);
  if (!S_ISREG(st.st_mode)) v.fail(Errc::not_a_segment, "it is not a regular file");
  // Whose file it is comes before anything is read from it: nothing of another user's file is trusted unasked.
  if (!options.allow_other_owner) {
    if (const std::string problem = detail::other_owner_problem(st.st_uid); !problem.empty()) {
      v.fail(Errc::permission_denied, problem);
    }
  }

  // The magic and the version come first, read with pread so that even a tiny file cannot fault.
  uint64_t prefix[2] = {0, 0};
  const ssize_t got = ::pread(fd.get(), prefix, sizeof prefix, 0);
  if (got < static_cast<ssize_t>(sizeof(uint64_t)) || prefix[0] != kMagic) {
    if (got < static_cast<ssize_t>(sizeof(uint64_t))) {
      v.fail(Errc::not_a_segment,
             fmt::format("it is not a shmreplay segment: the file is {} bytes, too short for the 8-byte magic",
                         file_bytes));
    }
    v.fail(Errc::not_a_segment, fmt::format("it is not a shmreplay segment: magic 0x{:016x} ('{}'), expected "
                                            "0x{:016x} ('SHMRPLAY')",
                                            prefix[0], magic_text(prefix[0]), kMagic));
  }
  if (got < static_cast<ssize_t>(sizeof prefix)) {
    v.fail(Errc::truncated, fmt::format("it is truncated: the file is {} bytes, too short for the layout version",
                                        file_bytes));
  }
  const auto major = static_cast<uint32_t>(prefix[1] & 0xffffffffu);
  const auto minor = static_cast<uint32_t>(prefix[1] >> 32);
  if (major != kLayoutMajor) {
    v.fail(Errc::version_mismatch,
           fmt::format("segment layout {}.{}, library {}.{}: {}", major, minor, kLayoutMajor, kLayoutMinor,
                       major > kLayoutMajor ? "a newer shmreplay made it; upgrade this program"
                                            : "an older shmreplay made it; recreate the segment"));
  }
  if (minor < kLayoutMinor) {
    // What each older minor version lacks that this library needs.
    static constexpr const char* kLacks[] = {
        "the learner lease, episode bookkeeping, priorities and the rate limiter",  // 1.0
        "episode bookkeeping, priorities and the rate limiter",                     // 1.1
        "priorities and the rate limiter",                                          // 1.2
        "the rate limiter",                                                         // 1.3
        "the rate limiter's marks of waiting writers",                              // 1.4
    };
    static_assert(std::size(kLacks) == kLayoutMinor, "one entry per older minor version");
    v.fail(Errc::version_mismatch,
           fmt::format("segment layout {}.{}, library {}.{}: an older shmreplay made it, without the sections this "
                       "library needs ({}); recreate the segment",
                       major, minor, kLayoutMajor, kLayoutMinor, kLacks[minor]));
  }
  if (file_bytes < sizeof(SegmentHeader)) {
    v.fail(Errc::truncated, fmt::format("it is truncated: the file is {} bytes, shorter than the {}-byte header",
                                        file_bytes, sizeof(SegmentHeader)));
  }

  Buffer b;
  b.name_ = name;
  b.path_ = path;
  b.read_only_ = options.read_only;
  b.mode_ = static_cast<uint32_t>(st.st_mode & 07777);
  b.owner_uid_ = static_cast<uint32_t>(st.st_uid);
  {
    detail::Mapping map(fd.get(), static_cast<std::size_t>(file_bytes), !options.read_only, path);
    b.base_ = map.data();
    b.map_bytes_ = map.size();
    map.release();
  }
  // From here on `b` owns the mapping: an exception unmaps it.
  const auto& h = *std::launder(reinterpret_cast<const SegmentHeader*>(b.base_));

  // Wait for (or report) a creator that has not finished, polling every 1 ms and running the thread's
  // InterruptCheck every 50 polls. Acquire pairs with create()'s release store.
  const auto deadline = deadline_after_ms(options.ready_timeout_ms);
  for (uint64_t polls = 1; h.state.load(std::memory_order_acquire) != kStateReady; ++polls) {
    if (polls % 50 == 0) InterruptCheck::run();
    if (std::chrono::steady_clock::now() >= deadline) {
      v.fail(Errc::not_ready,
             fmt::format("it is not ready: its creator ({}) has not finished initialising it{}", creator_text(h),
                         options.ready_timeout_ms ? fmt::format(" within {} ms", options.ready_timeout_ms) : ""));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  // Everything below is read once, checked, and kept in this process.
  const uint64_t header_bytes = h.header_bytes;
  if (header_bytes < sizeof(SegmentHeader) || (minor == kLayoutMinor && header_bytes != sizeof(SegmentHeader))) {
    v.fail(Errc::corrupt, fmt::format("header_bytes is {}, expected {} for layout {}.{}", header_bytes,
                                      sizeof(SegmentHeader), major, minor));
  }
  if (h.total_bytes != file_bytes) {
    v.fail(h.total_bytes > file_bytes ? Errc::truncated : Errc::corrupt,
           fmt::format("{}the header says the segment is {} bytes, but the file is {} bytes",
                       h.total_bytes > file_bytes ? "it is truncated: " : "", h.total_bytes, file_bytes));
  }
  if (file_bytes < header_bytes) {
    v.fail(Errc::truncated, fmt::format("it is truncated: the file is {} bytes, shorter than its {}-byte header",
                                        file_bytes, header_bytes));
  }
  const uint64_t num_envs = h.num_envs;
  const uint64_t capacity = h.capacity;
  const uint64_t num_fields = h.num_fields;
  if (num_envs < 1 || num_envs > kMaxEnvs) {
    v.fail(Errc::corrupt, fmt::format("num_envs is {}, expected 1 to {}", num_envs, kMaxEnvs));
  }
  if (capacity < 1 || capacity > kMaxCapacity) {
    v.fail(Errc::corrupt, fmt::format("capacity is {}, expected 1 to {}", capacity, kMaxCapacity));
  }
  if (num_fields < 1 || num_fields > kMaxFields) {
    v.fail(Errc::corrupt, fmt::format("num_fields is {}, expected 1 to {}", num_fields, kMaxFields));
  }
  if (h.num_sections < kSectionsUsed || h.num_sections > kMaxSections) {
    v.fail(Errc::corrupt, fmt::format("num_sections is {}, expected {} to {} for layout {}.{}", h.num_sections,
                                      kSectionsUsed, kMaxSections, major, minor));
  }
  const SectionDesc fields_sec = h.sections[kSectionFields];
  const SectionDesc envs_sec = h.sections[kSectionEnvs];
  const SectionDesc data_sec = h.sections[kSectionData];
  const SectionDesc global_sec = h.sections[kSectionGlobal];
  if (fields_sec.bytes != num_fields * sizeof(FieldDesc)) {
    v.fail(Errc::corrupt, fmt::format("the field table is {} bytes, expected {} fields x {} bytes",
                                      fields_sec.bytes, num_fields, sizeof(FieldDesc)));
  }
  if (envs_sec.bytes != num_envs * sizeof(EnvControl)) {
    v.fail(Errc::corrupt, fmt::format("the env table is {} bytes, expected {} envs x {} bytes", envs_sec.bytes,
                                      num_envs, sizeof(EnvControl)));
  }
  v.check_range("the field table", fields_sec.offset, fields_sec.bytes, header_bytes, alignof(FieldDesc));
  v.check_range("the env table", envs_sec.offset, envs_sec.bytes, header_bytes, kCacheLineBytes);
  if (global_sec.bytes < sizeof(GlobalControl)) {
    v.fail(Errc::corrupt, fmt::format("the global section is {} bytes, expected at least {}", global_sec.bytes,
                                      sizeof(GlobalControl)));
  }
  v.check_range("the data section", data_sec.offset, data_sec.bytes, header_bytes, kDataAlignBytes);
  v.check_range("the global section", global_sec.offset, global_sec.bytes, header_bytes, kCacheLineBytes);
  // Layout 1.2: the episode sections, empty (0 bytes, offset ignored) in a buffer without episode fields.
  const uint64_t queue_capacity = h.episode_queue_capacity;
  const SectionDesc episodes_sec = h.sections[kSectionEpisodes];
  const SectionDesc meta_sec = h.sections[kSectionStepMeta];
  const SectionDesc queues_sec = h.sections[kSectionEpisodeQueues];
  if (queue_capacity > kMaxEpisodeQueueCapacity) {
    v.fail(Errc::corrupt, fmt::format("episode_queue_capacity is {}, expected 0 to {}", queue_capacity,
                                      kMaxEpisodeQueueCapacity));
  }
  const bool episodes = queue_capacity != 0;
  uint64_t expect_meta = 0;
  uint64_t expect_queues = 0;
  if (episodes && (__builtin_mul_overflow(num_envs * capacity, sizeof(uint64_t), &expect_meta) ||
                   __builtin_mul_overflow(num_envs * queue_capacity, sizeof(EpisodeRecordSlot), &expect_queues))) {
    v.fail(Errc::corrupt, "the episode sections' sizes overflow");
  }
  const uint64_t expect_episodes = episodes ? num_envs * sizeof(EpisodeControl) : 0;
  if (episodes_sec.bytes != expect_episodes || meta_sec.bytes != expect_meta || queues_sec.bytes != expect_queues) {
    v.fail(Errc::corrupt,
           fmt::format("the episode sections are {}, {} and {} bytes, expected {}, {} and {} for {} envs x {} steps "
                       "and {} records per queue",
                       episodes_sec.bytes, meta_sec.bytes, queues_sec.bytes, expect_episodes, expect_meta,
                       expect_queues, num_envs, capacity, queue_capacity));
  }
  std::vector<std::pair<SectionDesc, std::string>> sections = {{fields_sec, "the field table"},
                                                               {envs_sec, "the env table"},
                                                               {data_sec, "the data section"},
                                                               {global_sec, "the global section"}};
  if (episodes) {
    v.check_range("the episode control section", episodes_sec.offset, episodes_sec.bytes, header_bytes,
                  kCacheLineBytes);
    v.check_range("the step meta section", meta_sec.offset, meta_sec.bytes, header_bytes, kCacheLineBytes);
    v.check_range("the episode queue section", queues_sec.offset, queues_sec.bytes, header_bytes, kCacheLineBytes);
    sections.emplace_back(episodes_sec, "the episode control section");
    sections.emplace_back(meta_sec, "the step meta section");
    sections.emplace_back(queues_sec, "the episode queue section");
  }
  // Layout 1.3: the priority trees, empty (0 bytes, offset ignored) without priorities.
  const SectionDesc prio_sec = h.sections[kSectionPriorities];
  const bool priorities = h.priority_exponent_bits != 0;
  const double alpha = std::bit_cast<double>(h.priority_exponent_bits);
  if (priorities && !(std::isfinite(alpha) && alpha >= 0)) {
    v.fail(Errc::corrupt, fmt::format("the priority exponent is {}, expected a finite number >= 0", alpha));
  }
  uint64_t expect_trees = 0;
  if (priorities && (capacity > kMaxCapacity ||
                     __builtin_mul_overflow(num_envs, 2 * std::bit_ceil(capacity) * sizeof(uint64_t), &expect_trees))) {
    v.fail(Errc::corrupt, "the priority section's size overflows");
  }
  if (prio_sec.bytes != expect_trees) {
    v.fail(Errc::corrupt, fmt::format("the priority section is {} bytes, expected {} for {} envs x {} steps {}",
                                      prio_sec.bytes, expect_trees, num_envs, capacity,
                                      priorities ? "with priorities" : "without priorities"));
  }
  if (priorities) {
    v.check_range("the priority section", prio_sec.offset, prio_sec.bytes, header_bytes, kCacheLineBytes);
    sections.emplace_back(prio_sec, "the priority section");
  }
  v.check_disjoint(sections);

  // The schema table: every entry must describe a valid field whose storage lies inside the data section.
  const auto* table = std::launder(reinterpret_cast<const FieldDesc*>(b.base_ + fields_sec.offset));
  std::vector<Field> fields;
  std::vector<std::pair<SectionDesc, std::string>> storage;
  EpisodeFieldIndices roles;
  uint64_t steps = 0;
  if (__builtin_mul_overflow(num_envs, capacity, &steps)) v.fail(Errc::corrupt, "num_envs x capacity overflows");
  for (uint64_t i = 0; i < num_fields; ++i) {
    const FieldDesc& d = table[i];
    const auto* nul = static_cast<const uint8_t*>(std::memchr(d.name, 0, sizeof d.name));
    if (nul == nullptr) v.fail(Errc::corrupt, fmt::format("field {}'s name is not NUL-terminated", i + 1));
    Field f;
    f.name.assign(reinterpret_cast<const char*>(d.name), static_cast<std::size_t>(nul - d.name));
    const std::string what = fmt::format("field {} '{}'", i + 1, f.name);
    if (!is_dtype(d.dtype)) v.fail(Errc::corrupt, fmt::format("{} has dtype code {}, which is unknown", what, d.dtype));
    if (d.ndim > kMaxDims) {
      v.fail(Errc::corrupt, fmt::format("{} has {} dimensions, at most {} are allowed", what, d.ndim, kMaxDims));
    }
    f.dtype = static_cast<DType>(d.dtype);
    f.shape.assign(d.dims, d.dims + d.ndim);
    // Schema validation below rejects zero and overflowing dims; check them here first so bytes() is exact.
    try {
      (void)Schema({f});
    } catch (const Error& e) {
      v.fail(Errc::corrupt, fmt::format("the field table is invalid: {}", e.what()));
    }
    if (d.step_bytes != f.bytes()) {
      v.fail(Errc::corrupt, fmt::format("{} ({}) says {} bytes per step, expected {}", what, f.to_string(),
                                        d.step_bytes, f.bytes()));
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(steps, f.bytes(), &bytes) || d.data_bytes != bytes) {
      v.fail(Errc::corrupt, fmt::format("{} has {} bytes of storage, expected {} envs x {} steps x {} bytes", what,
                                        d.data_bytes, num_envs, capacity, f.bytes()));
    }
    v.check_range(fmt::format("the storage of {}", what), d.data_offset, d.data_bytes, header_bytes,
                  kDataAlignBytes);
    if (d.data_offset < data_sec.offset || d.data_offset + d.data_bytes > data_sec.offset + data_sec.bytes) {
      v.fail(Errc::corrupt, fmt::format("the storage of {} [{}, {}) lies outside the data section [{}, {})", what,
                                        d.data_offset, d.data_offset + d.data_bytes, data_sec.offset,
                                        data_sec.offset + data_sec.bytes));
    }
    storage.emplace_back(SectionDesc{d.data_offset, d.data_bytes}, fmt::format("the storage of {}", what));
    b.field_offsets_.push_back(d.data_offset);
    fields.push_back(std::move(f));
    if (d.role >= kRoleCount) v.fail(Errc::corrupt, fmt::format("{} has episode role code {}, which is unknown", what, d.role));
    std::optional<std::size_t>* role_slot[] = {nullptr, &roles.done, &roles.terminated, &roles.truncated, &roles.reward};
    if (d.role != kRoleNone) {
      if (*role_slot[d.role]) {
        v.fail(Errc::corrupt, fmt::format("{} and field {} both have episode role code {}", what,
                                          **role_slot[d.role] + 1, d.role));
      }
      *role_slot[d.role] = static_cast<std::size_t>(i);
    }
  }
  v.check_disjoint(storage);
  try {
    b.schema_ = Schema(std::move(fields));
  } catch (const Error& e) {
    v.fail(Errc::corrupt, fmt::format("the field table is invalid: {}", e.what()));
  }
  if (h.step_bytes != b.schema_.step_bytes()) {
    v.fail(Errc::corrupt, fmt::format("step_bytes is {}, but the fields add up to {}", h.step_bytes,
                                      b.schema_.step_bytes()));
  }
  if (const std::string problem = role_problem(b.schema_, roles); !problem.empty()) {
    v.fail(Errc::corrupt, fmt::format("the field table's episode roles are invalid: {}", problem));
  }
  if (roles.any_flag() != episodes) {
    v.fail(Errc::corrupt, fmt::format("episode_queue_capacity is {} but the field table has {} episode flag field",
                                      queue_capacity, roles.any_flag() ? "an" : "no"));
  }
  if (options.expected_schema) {
    const auto diffs = Schema::differences(*options.expected_schema, b.schema_);
    if (!diffs.empty()) {
      v.fail(Errc::schema_mismatch,
             fmt::format("its schema differs from the expected one in {} place{}: {} (expected '{}', actual '{}')",
                         diffs.size(), diffs.size() == 1 ? "" : "s", fmt::join(diffs, "; "),
                         options.expected_schema->to_string(), b.schema_.to_string()));
    }
  }
  b.num_envs_ = num_envs;
  b.capacity_ = capacity;
  b.total_bytes_ = file_bytes;
  b.envs_offset_ = envs_sec.offset;
  b.global_offset_ = global_sec.offset;
  b.episode_fields_ = roles;
  b.episode_queue_capacity_ = queue_capacity;
  b.episodes_offset_ = episodes_sec.offset;
  b.step_meta_offset_ = meta_sec.offset;
  b.queues_offset_ = queues_sec.offset;
  b.priorities_offset_ = prio_sec.offset;
  b.priority_leaves_ = priorities ? std::bit_ceil(capacity) : 0;
  b.priority_exponent_ = priorities ? std::abs(alpha) : 0.0;
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
}

bool Buffer::exists(std::string_view name) {
  const std::string path = detail::segment_path(detail::normalize_name(name));
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    unmap();
    name_ = std::move(other.name_);
    path_ = std::move(other.path_);
    schema_ = std::move(other.schema_);
    base_ = std::exchange(other.base_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    num_envs_ = std::exchange(other.num_envs_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    total_bytes_ = std::exchange(other.total_bytes_, 0);
    envs_offset_ = std::exchange(other.envs_offset_, 0);
    global_offset_ = std::exchange(other.global_offset_, 0);
    field_offsets_ = std::move(other.field_offsets_);
    read_only_ = other.read_only_;
    mode_ = other.mode_;
    owner_uid_ = other.owner_uid_;
    unnamed_fd_ = std::exchange(other.unnamed_fd_, -1);
    replace_on_publish_ = other.replace_on_publish_;
    episode_fields_ = std::exchange(other.episode_fields_, {});
    episode_queue_capacity_ = std::exchange(other.episode_queue_capacity_, 0);
    episodes_offset_ = std::exchange(other.episodes_offset_, 0);
    step_meta_offset_ = std::exchange(other.step_meta_offset_, 0);
    queues_offset_ = std::exchange(other.queues_offset_, 0);
    priorities_offset_ = std::exchange(other.priorities_offset_, 0);
    priority_leaves_ = std::exchange(other.priority_leaves_, 0);
    priority_exponent_ = std::exchange(other.priority_exponent_, 0.0);
  }
  return *this;
}

Buffer::~Buffer() { unmap(); }

void Buffer::unmap() noexcept {
  if (base_ != nullptr) ::munmap(base_, map_bytes_);
  base_ = nullptr;
  map_bytes_ = 0;
  if (unnamed_fd_ >= 0) ::close(unnamed_fd_);  // an unpublished segment vanishes with its last reference
  unnamed_fd_ = -1;
}

const SegmentHeader& Buffer::header() const noexcept {
  return *std::launder(reinterpret_cast<const SegmentHeader*>(base_));
}

const EnvControl& Buffer::env_control(uint64_t env) const noexcept {
  assert(env < num_envs_);
  return std::launder(reinterpret_cast<const EnvControl*>(base_ + envs_offset_))[env];
}

EnvControl& Buffer::env_control(uint64_t env) noexcept {
  assert(!read_only_ && env < num_envs_);
  return std::launder(reinterpret_cast<EnvControl*>(base_ + envs_offset_))[env];
}

const GlobalControl& Buffer::global_control() const noexcept {
  return *std::launder(reinterpret_cast<const GlobalControl*>(base_ + global_offset_));
}

GlobalControl& Buffer::global_control() noexcept {
  assert(!read_only_);
  return *std::launder(reinterpret_cast<GlobalControl*>(base_ + global_offset_));
}

const EpisodeControl& Buffer::episode_control(uint64_t env) const noexcept {
  assert(has_episodes() && env < num_envs_);
  return std::launder(reinterpret_cast<const EpisodeControl*>(base_ + episodes_offset_))[env];
}

EpisodeControl& Buffer::episode_control(uint64_t env) noexcept {
  assert(!read_only_ && has_episodes() && env < num_envs_);
  return std::launder(reinterpret_cast<EpisodeControl*>(base_ + episodes_offset_))[env];
}

std::atomic<uint64_t>* Buffer::priority_tree(uint64_t env) const noexcept {
  assert(has_priorities() && env < num_envs_);
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + priorities_offset_)) + env * 2 * priority_leaves_;
}

const std::atomic<uint64_t>* Buffer::step_meta(uint64_t env) const noexcept {
  assert(has_episodes() && env < num_envs_);
  return std::launder(reinterpret_cast<const std::atomic<uint64_t>*>(base_ + step_meta_offset_)) + env * capacity_;
}

std::atomic<uint64_t>* Buffer::step_meta(uint64_t env) noexcept {
  assert(!read_only_ && has_episodes() && env < num_envs_);
  return std::launder(reinterpret_cast<std::atomic<uint64_t>*>(base_ + step_meta_offset_)) + env * capacity_;
}

const EpisodeRecordSlot* Buffer::episode_queue(uint64_t env) const noexcept {
  assert(has_episodes() && env < num_envs_);
  return std::launder(reinterpret_cast<const EpisodeRecordSlot*>(base_ + queues_offset_)) +
         env * episode_queue_capacity_;
}

EpisodeRecordSlot* Buffer::episode_queue(uint64_t env) noexcept {
  assert(!read_only_ && has_episodes() && env < num_envs_);
  return std::launder(reinterpret_cast<EpisodeRecordSlot*>(base_ + queues_offset_)) + env * episode_queue_capacity_;
}

std::string_view to_string(EpisodeEnd end) noexcept {
  switch (end) {
    case EpisodeEnd::none: return "none";
    case EpisodeEnd::done: return "done";
    case EpisodeEnd::terminated: return "terminated";
    case EpisodeEnd::truncated: return "truncated";
  }
  return "?";
}

const std::byte* Buffer::field_data(std::size_t field) const noexcept { return base_ + field_offsets_[field]; }

std::byte* Buffer::field_data(std::size_t field) noexcept {
  assert(!read_only_ && field < field_offsets_.size());
  return base_ + field_offsets_[field];
}

}  // namespace shmreplay
