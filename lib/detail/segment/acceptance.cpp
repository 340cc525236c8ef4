// detail/segment/acceptance.cpp: open's acceptance rule: what a file must be before anything of it is trusted
// (accept_prefix, read with pread before mapping), a creator's "ready" awaited (await_ready), then every count,
// section and field of the header checked and copied out once (accept_segment, over the rows of the section table,
// section_table.cpp). Create's placement rule, beside it in placement.cpp, places sections so that they pass.
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "detail/os/process.hpp"
#include "detail/segment/rules.hpp"
#include "detail/segment/section_table.hpp"
#include "detail/storage/storage_kinds.hpp"
#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/walk_layout.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay::detail {
namespace {

using namespace layout;

std::string magic_text(uint64_t magic) {
  std::string s;
  for (int i = 0; i < 8; ++i) {
    const char c = static_cast<char>((magic >> (8 * i)) & 0xff);
    s += (c >= 0x20 && c < 0x7f) ? c : '.';
  }
  return s;
}

std::string creator_text(const SegmentHeader& h) {
  const bool alive = process_alive(h.creator_pid, h.creator_start_ticks);
  return fmt::format("pid {}, {}", h.creator_pid, alive ? "still running" : "no longer running");
}

// The header's counts and sections, checked against the file and each other.
struct Sections {
  uint64_t header_bytes = 0;
  SectionCounts counts;  // read once from the header, checked
  double alpha = 0.0;
  std::array<SectionDesc, kMaxSections> sec{};  // each section as accepted; {0, 0} where absent
};

using Placed = std::vector<std::pair<SectionDesc, std::string>>;  // sections checked so far, for the overlap check

// The header's own sizes and the counts every section's size follows from. Everything is read once, checked, and
// kept in this process.
Sections accept_counts(const SegmentHeader& h, LayoutVersion version, const OpenCheck& v) {
  const uint32_t major = version.major;
  const uint32_t minor = version.minor;
  const uint64_t file_bytes = v.file_bytes();
  Sections s;
  const uint64_t header_bytes = s.header_bytes = h.header_bytes;
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
  SectionCounts& c = s.counts;
  const auto in_range = [&](const char* what, uint64_t value, uint64_t low, uint64_t high) {
    if (value < low || value > high) v.fail(Errc::corrupt, fmt::format("{} is {}, expected {} to {}", what, value, low, high));
    return value;
  };
  c.num_envs = in_range("num_envs", h.num_envs, 1, kMaxEnvs);
  c.capacity = in_range("capacity", h.capacity, 1, kMaxCapacity);
  c.num_fields = in_range("num_fields", h.num_fields, 1, kMaxFields);
  c.queue_capacity = in_range("episode_queue_capacity", h.episode_queue_capacity, 0, kMaxEpisodeQueueCapacity);
  c.max_learners = in_range("max_learners", h.max_learners, 1, kMaxLearners);  // (1.7)
  if (h.num_sections < kSectionsUsed || h.num_sections > kMaxSections) {
    v.fail(Errc::corrupt, fmt::format("num_sections is {}, expected {} to {} for layout {}.{}", h.num_sections,
                                      kSectionsUsed, kMaxSections, major, minor));
  }
  c.max_times_sampled = in_range("max_times_sampled", h.max_times_sampled, 0, kMaxTimesSampled);  // (1.11)
  c.consuming_queue = in_range("consuming_queue", h.consuming_queue, 0, 1) == 1;                 // (1.11)
  if (c.consuming_queue && c.max_times_sampled != 1) {
    v.fail(Errc::corrupt, fmt::format("a consuming queue has max_times_sampled {}, expected 1", c.max_times_sampled));
  }
  // (1.3) alpha's bits; 0 means no priorities (alpha = 0 is stored as -0.0).
  const uint64_t exponent_bits = h.priority_exponent_bits;
  c.priorities = exponent_bits != 0;
  const double alpha = s.alpha = std::bit_cast<double>(exponent_bits);
  if (c.priorities && !(std::isfinite(alpha) && alpha >= 0)) {
    v.fail(Errc::corrupt, fmt::format("the priority exponent is {}, expected a finite number >= 0", alpha));
  }
  // (1.11) sequence priorities: L up to the capacity, only with priorities.
  // (1.11) the reanalyse walk's chunk: 0 (none) or 1 to the capacity.
  // (1.11) a cold tier: its section's entry says (no header word does); the row checks the entry's size.
  c.cold = h.sections[kSectionCold].bytes != 0;
  c.reanalyse_chunk = in_range("reanalyse_chunk", h.reanalyse_chunk, 0, std::min(c.capacity, kMaxReanalyseChunk));
  c.sequence_priority_length = in_range("sequence_priority_length", h.sequence_priority_length, 0,
                                        c.priorities ? c.capacity : 0);
  // (1.11) 0 (the running maximum), a fixed priority that fits (0 stored as -0.0), or +infinity; only with priorities.
  c.initial_priority_bits = h.initial_priority_bits;
  const double initial = std::bit_cast<double>(c.initial_priority_bits);
  const double largest = std::numeric_limits<float>::max();  // a priority is an f32 (priority_fits)
  const bool fits = c.initial_priority_bits == kInitialPriorityFirst || c.initial_priority_bits == std::bit_cast<uint64_t>(-0.0) ||
                    (initial > 0 && initial <= largest);
  if (c.initial_priority_bits != 0 && (!c.priorities || !fits)) {
    v.fail(Errc::corrupt, fmt::format("the initial priority is {}{}, expected a number in [0, {}] or +infinity",
                                      initial, c.priorities ? "" : " in a buffer without priorities",
                                      static_cast<float>(largest)));
  }
  return s;
}

// Every section, as its row of the section table says (section_table.cpp): its size for the counts, its bounds and
// alignment in the file, and no two overlapping. A section of this version's minor or older that the counts make
// empty is absent: 0 bytes, its offset ignored.
Sections accept_sections(const SegmentHeader& h, LayoutVersion version, const OpenCheck& v) {
  Sections s = accept_counts(h, version, v);
  Placed placed;
  for (const SectionRow& row : section_rows()) {
    const SectionDesc sec = h.sections[row.id];  // read once
    if (row.size != SectionSize::placed_by_kinds) {
      const std::optional<uint64_t> expect = row.bytes(s.counts);
      if (!expect) v.fail(Errc::corrupt, fmt::format("the size of {} overflows 64 bits ({})", row.name, row.explain(s.counts)));
      if (row.size == SectionSize::at_least ? sec.bytes < *expect : sec.bytes != *expect) {
        v.fail(Errc::corrupt, fmt::format("{} is {} bytes, expected {}{}: {}", row.name, sec.bytes,
                                          row.size == SectionSize::at_least ? "at least " : "", *expect,
                                          row.explain(s.counts)));
      }
      if (*expect == 0) continue;  // absent
    }
    v.check_range(row.name, sec.offset, sec.bytes, s.header_bytes, row.align);
    placed.emplace_back(sec, row.name);
    s.sec[row.id] = sec;
  }
  v.check_disjoint(placed);
  return s;
}

// A field's codec word: its codec and level (1.10), its flags (1.11: bits 16-31, kFieldDerived alone so far), into
// `f`; the Schema checks the codec and level as it checks any field.
void accept_codec_word(uint32_t word, Field& f, const std::string& what, const OpenCheck& v) {
  if ((word & ~(0xffffu | kFieldDerived)) != 0) {
    v.fail(Errc::corrupt, fmt::format("{} has codec word {:#x}, whose bits 17-31 are not 0", what, word));
  }
  f.derived = (word & kFieldDerived) != 0;
  f.codec = static_cast<Codec>(word & 0xff);
  f.codec_level = static_cast<int8_t>((word >> 8) & 0xff);
}

// One entry of the field table, copied out of the segment once (a stranger may scribble on it while we read, and a
// value checked must be the value used) and checked: a valid field whose storage lies inside the data section,
// apart from the other fields' (storage collects the ranges), with a known episode role at most once (roles).
Field accept_field(const FieldDesc& entry, uint64_t i, const Sections& s, uint64_t steps, const OpenCheck& v,
                   Placed& storage, EpisodeFieldIndices& roles, SegmentGeometry& g) {
  FieldDesc d;
  std::memcpy(&d, &entry, sizeof d);
  const uint64_t header_bytes = s.header_bytes;
  const uint64_t num_envs = s.counts.num_envs;
  const uint64_t capacity = s.counts.capacity;
  const SectionDesc data_sec = s.sec[kSectionData];
  const auto* nul = static_cast<const uint8_t*>(std::memchr(d.name, 0, sizeof d.name));
  if (nul == nullptr) v.fail(Errc::corrupt, fmt::format("field {}'s name is not NUL-terminated", i + 1));
  Field f;
  f.name.assign(reinterpret_cast<const char*>(d.name), static_cast<std::size_t>(nul - d.name));
  const std::string what = fmt::format("field {} '{}'", i + 1, f.name);
  if (!is_dtype(d.dtype)) {
    v.fail(Errc::corrupt, fmt::format("{} has dtype code {}, which is unknown", what, d.dtype));
  }
  if (d.ndim > kMaxDims) {
    v.fail(Errc::corrupt, fmt::format("{} has {} dimensions, at most {} are allowed", what, d.ndim, kMaxDims));
  }
  f.dtype = static_cast<DType>(d.dtype);
  f.shape.assign(d.dims, d.dims + d.ndim);
  if (d.stack != 0) f.stack_axis = d.stack - 1;  // layout 1.6: checked below, as the Schema checks any field
  accept_codec_word(d.codec, f, what, v);
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
  // The field's storage, as its kind accepts it (lib/detail/storage/storage_kinds.cpp): inside the data section,
  // aligned, apart from the rest (checked together by the caller).
  const StorageKindRow* kind = storage_kind(d.storage_kind);
  if (kind == nullptr) {
    v.fail(Errc::corrupt, fmt::format("{} has storage kind code {:#x}, which this library does not know (a newer "
                                      "shmreplay, or a kind only its tests define)",
                                      what, d.storage_kind));
  }
  FieldAcceptor a;
  a.num_envs = num_envs;
  a.capacity = capacity;
  a.steps = steps;
  a.what = what;
  a.fail = [&](Errc code, const std::string& message) { v.fail(code, message); };
  a.place = [&](const std::string& part, uint64_t offset, uint64_t bytes) {
    v.check_range(part, offset, bytes, header_bytes, kDataAlignBytes);
    if (offset < data_sec.offset || offset + bytes > data_sec.offset + data_sec.bytes) {
      v.fail(Errc::corrupt, fmt::format("{} [{}, {}) lies outside the data section [{}, {})", part, offset,
                                        offset + bytes, data_sec.offset, data_sec.offset + data_sec.bytes));
    }
    storage.emplace_back(SectionDesc{offset, bytes}, part);
  };
  if (const StorageKindRow& expected = storage_kind_for(f); expected.id != kind->id) {
    v.fail(Errc::corrupt, fmt::format("{} ({}) is stored as kind {}, expected {}", what, f.to_string(), kind->name,
                                      expected.name));
  }
  kind->accept(d, f, static_cast<std::size_t>(i), a, g);
  g.field_kinds.push_back(kind->id);
  g.field_offsets.push_back(d.data_offset);  // accepted by the kind
  if (d.role >= kRoleCount) {
    v.fail(Errc::corrupt, fmt::format("{} has episode role code {}, which is unknown", what, d.role));
  }
  std::optional<std::size_t>* role_slot[] = {nullptr, &roles.done, &roles.terminated, &roles.truncated,
                                             &roles.reward, &roles.policy_version};
  static_assert(std::size(role_slot) == kRoleCount, "one slot per role code");
  if (d.role != kRoleNone) {
    if (*role_slot[d.role]) {
      v.fail(Errc::corrupt, fmt::format("{} and field {} both have episode role code {}", what,
                                        **role_slot[d.role] + 1, d.role));
    }
    *role_slot[d.role] = static_cast<std::size_t>(i);
  }
  return f;
}

}  // namespace

void OpenCheck::fail(Errc code, const std::string& what) const {
  throw Error(code, fmt::format("cannot open shmreplay segment '{}' ({}): {}", name_, path_, what));
}

void OpenCheck::check_range(const std::string& what, uint64_t offset, uint64_t bytes, uint64_t header_bytes,
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

void OpenCheck::check_disjoint(std::vector<std::pair<SectionDesc, std::string>> ranges) const {
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

LayoutVersion accept_prefix(int fd, const OpenCheck& check) {
  // The magic and the version come first, read with pread so that even a tiny file cannot fault.
  uint64_t prefix[2] = {0, 0};
  const ssize_t got = ::pread(fd, prefix, sizeof prefix, 0);
  if (got < static_cast<ssize_t>(sizeof(uint64_t)) || prefix[0] != kMagic) {
    if (got < static_cast<ssize_t>(sizeof(uint64_t))) {
      check.fail(Errc::not_a_segment,
             fmt::format("it is not a shmreplay segment: the file is {} bytes, too short for the 8-byte magic",
                         check.file_bytes()));
    }
    check.fail(Errc::not_a_segment, fmt::format("it is not a shmreplay segment: magic 0x{:016x} ('{}'), expected "
                                            "0x{:016x} ('SHMRPLAY')",
                                            prefix[0], magic_text(prefix[0]), kMagic));
  }
  if (got < static_cast<ssize_t>(sizeof prefix)) {
    check.fail(Errc::truncated, fmt::format("it is truncated: the file is {} bytes, too short for the layout version",
                                        check.file_bytes()));
  }
  const auto major = static_cast<uint32_t>(prefix[1] & 0xffffffffu);
  const auto minor = static_cast<uint32_t>(prefix[1] >> 32);
  if (major != kLayoutMajor) {
    check.fail(Errc::version_mismatch,
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
        "stacked fields",                                                           // 1.5
        "learner slots",                                                            // 1.6
        "sample ages and the learners' limiter timeouts",                           // 1.7
        "the step a learner rewrites, which the repair of a dead one needs",        // 1.8
        "the fields' storage kinds",                                                // 1.9
        "the policy section (policy versions and their window)",                    // 1.10
    };
    static_assert(std::size(kLacks) == kLayoutMinor, "one entry per older minor version");
    check.fail(Errc::version_mismatch,
           fmt::format("segment layout {}.{}, library {}.{}: an older shmreplay made it, without the sections this "
                       "library needs ({}); recreate the segment",
                       major, minor, kLayoutMajor, kLayoutMinor, kLacks[minor]));
  }
  if (check.file_bytes() < sizeof(SegmentHeader)) {
    check.fail(Errc::truncated, fmt::format("it is truncated: the file is {} bytes, shorter than the {}-byte header",
                                        check.file_bytes(), sizeof(SegmentHeader)));
  }

  return {major, minor};
}

void await_ready(const SegmentHeader& header, uint64_t timeout_ms, const OpenCheck& check) {
  // Wait for (or report) a creator that has not finished, polling every 1 ms and running the thread's
  // InterruptCheck every 50 polls. Acquire pairs with create()'s release store.
  const auto deadline = deadline_after_ms(timeout_ms);
  for (uint64_t polls = 1; header.state.load(std::memory_order_acquire) != kStateReady; ++polls) {
    if (polls % 50 == 0) InterruptCheck::run();
    if (std::chrono::steady_clock::now() >= deadline) {
      check.fail(Errc::not_ready,
             fmt::format("it is not ready: its creator ({}) has not finished initialising it{}", creator_text(header),
                         timeout_ms ? fmt::format(" within {} ms", timeout_ms) : ""));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

}

namespace {

// The counts of the learner slots and the sampling policies (1.7, 1.11), as accept_counts checked them.
void copy_policy_counts(const SectionCounts& c, SegmentGeometry& g) noexcept {
  g.max_learners = c.max_learners;
  g.max_times_sampled = c.max_times_sampled;
  g.consuming_queue = c.consuming_queue;
  g.initial_priority_bits = c.initial_priority_bits;
  g.sequence_priority_length = c.sequence_priority_length;
  g.reanalyse_chunk = c.reanalyse_chunk;
}

}  // namespace

SegmentGeometry accept_segment(const std::byte* base, LayoutVersion version, const std::string& name,
                               const OpenCheck& check, const std::optional<Schema>& expected_schema) {
  const OpenCheck& v = check;
  const auto& h = *std::launder(reinterpret_cast<const SegmentHeader*>(base));
  const Sections s = accept_sections(h, version, check);
  // The counts as accept_sections checked them (read once: the header may change under us).
  const uint64_t num_envs = s.counts.num_envs;
  const uint64_t capacity = s.counts.capacity;
  const uint64_t num_fields = s.counts.num_fields;
  const uint64_t queue_capacity = s.counts.queue_capacity;
  const bool episodes = queue_capacity != 0;
  const bool priorities = s.counts.priorities;
  SegmentGeometry g;
  // The schema table: every entry must describe a valid field whose storage lies inside the data section.
  const auto* table = std::launder(reinterpret_cast<const FieldDesc*>(base + s.sec[kSectionFields].offset));
  std::vector<Field> fields;
  std::vector<std::pair<SectionDesc, std::string>> storage;
  EpisodeFieldIndices roles;
  uint64_t steps = 0;
  if (__builtin_mul_overflow(num_envs, capacity, &steps)) v.fail(Errc::corrupt, "num_envs x capacity overflows");
  for (uint64_t i = 0; i < num_fields; ++i) {
    Field f = accept_field(table[i], i, s, steps, v, storage, roles, g);
    fields.push_back(std::move(f));
  }
  v.check_disjoint(storage);
  try {
    g.schema = Schema(std::move(fields));
  } catch (const Error& e) {
    v.fail(Errc::corrupt, fmt::format("the field table is invalid: {}", e.what()));
  }
  if (const uint64_t step_bytes = h.step_bytes; step_bytes != g.schema.step_bytes()) {
    v.fail(Errc::corrupt, fmt::format("step_bytes is {}, but the fields add up to {}", step_bytes,
                                      g.schema.step_bytes()));
  }
  if (const std::string problem = episode_role_problem(g.schema, roles); !problem.empty()) {
    v.fail(Errc::corrupt, fmt::format("the field table's episode roles are invalid: {}", problem));
  }
  if (roles.any_flag() != episodes) {
    v.fail(Errc::corrupt, fmt::format("episode_queue_capacity is {} but the field table has {} episode flag field",
                                      queue_capacity, roles.any_flag() ? "an" : "no"));
  }
  // Layout 1.6: the continuity rule, read once; trusting flags needs them and a stacked field.
  if (const uint64_t rule = h.stack_continuity; rule != static_cast<uint64_t>(StackContinuity::compare)) {
    if (rule != static_cast<uint64_t>(StackContinuity::episodes)) {
      v.fail(Errc::corrupt, fmt::format("stack_continuity is {}, expected 0 (compare) or 1 (episodes)", rule));
    }
    const bool stacked = std::any_of(g.schema.fields().begin(), g.schema.fields().end(),
                                     [](const Field& f) { return f.stacked(); });  // frame ring or compressed
    if (!stacked || !roles.any_flag()) {
      v.fail(Errc::corrupt, fmt::format("stack_continuity is 1 (episodes), but the segment has {}",
                                        !stacked ? "no stacked field" : "no episode flag field"));
    }
    g.stack_continuity = StackContinuity::episodes;
  }
  if (expected_schema) {
    const auto diffs = Schema::differences(*expected_schema, g.schema);
    if (!diffs.empty()) {
      v.fail(Errc::schema_mismatch,
             fmt::format("its schema differs from the expected one in {} place{}: {} (expected '{}', actual '{}')",
                         diffs.size(), diffs.size() == 1 ? "" : "s", fmt::join(diffs, "; "),
                         expected_schema->to_string(), g.schema.to_string()));
    }
  }
  g.name = name;
  g.num_envs = num_envs;
  g.capacity = capacity;
  g.total_bytes = check.file_bytes();
  g.sections = s.sec;
  copy_policy_counts(s.counts, g);
  g.learner_online_offset = g.max_learners > 1 ? s.sec[kSectionLearners].offset + learner_online_starts_at(g.max_learners) : 0;
  g.episode_fields = roles;
  g.episode_queue_capacity = queue_capacity;
  g.priority_leaves = priorities ? std::bit_ceil(capacity) : 0;
  g.priority_exponent = priorities ? std::abs(s.alpha) : 0.0;
  return g;
}

}  // namespace shmreplay::detail
