// Checkpoints of the priority selectors (format 2.3; docs/design/checkpoints.md, "Sampling policies"): sequence
// priorities come back with their length and window trees recomputed from the loaded weights (a new segment, an
// existing one with stale windows, and an older file's weights), so L-step prioritized draws weigh each start by
// eta * max + (1 - eta) * mean as before the save; the initial priority comes back, and with +infinity each step's
// "never returned by a prioritized draw" state.
// Part of test_priorities (tests/CMakeLists.txt); its helpers are in priorities_helpers.hpp.
#include "priorities_helpers.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "detail/os/crc32.hpp"
#include "detail/protocol/sequence_priorities.hpp"
#include "shmreplay/internal/checkpoint_format.hpp"

namespace {

constexpr uint64_t kSeqLength = 4;
constexpr double kFirst = std::numeric_limits<double>::infinity();

struct CkptFile {
  std::string path = fmt::format("/tmp/{}.ckpt", unique_name("prio-ckpt"));
  ~CkptFile() { std::remove(path.c_str()); }
};

// The total of eta * M[q] + (1 - eta) * A[q] over every stored start, M and A computed from the step leaves.
double model_total(Buffer& buf, double eta) {
  double total = 0;
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    const detail::PriorityTreeView steps = detail::priority_tree_of(std::as_const(segment_of(buf)), e);
    const uint64_t head = segment_of(buf).env_control(e).head.load();
    for (uint64_t q = head > buf.capacity() ? head - buf.capacity() : 0; q < head; ++q) {
      double max = 0;
      double mean = 0;
      REQUIRE(detail::window_of(steps, kSeqLength, q, max, mean));
      total += eta * max + (1 - eta) * static_cast<double>(static_cast<float>(mean));
    }
  }
  return total;
}

// What an L-step prioritized call's draws are proportional to, for eta 0.9 and 0.3, checked against the model; and
// every window tree node the sum of its children.
std::vector<double> sequence_totals(Buffer& buf) {
  std::vector<double> out;
  for (const double eta : {0.9, 0.3}) {
    const double t = Sampler(buf).total_weight(View::replay, kSeqLength, 0.0, {.prioritized = true,
                                                                                .sequence_priority_eta = eta});
    CHECK(t == doctest::Approx(model_total(buf, eta)).epsilon(1e-9));
    out.push_back(t);
  }
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    const detail::SequenceTrees t = detail::sequence_trees_of(segment_of(buf), e);
    CHECK(check_sums(t.max).empty());
    CHECK(check_sums(t.mean).empty());
  }
  return out;
}

}  // namespace

TEST_CASE("a checkpoint of a buffer with sequence priorities loads with its length and window trees recomputed, so "
          "L-step prioritized draws weigh each start as before the save, into a new name and over stale windows") {
  SegmentGuard src(unique_name("seqckpt-src"));
  SegmentGuard dst(unique_name("seqckpt-dst"));
  CkptFile file;
  Buffer buf = Buffer::create(src.name(), 2, 16, kSchema, {.priority_exponent = 0.5,
                                                           .sequence_priority_length = kSeqLength});
  std::mt19937_64 gen(4);
  {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    for (int s = 0; s < 21; ++s) push(w, buf, 0, static_cast<float>(1 + gen() % 9));  // env 0 wraps
    for (int s = 0; s < 9; ++s) push(w, buf, 1, static_cast<float>(1 + gen() % 9));
    Sampler(buf).update_priorities(std::vector<uint64_t>{0, 1}, std::vector<uint64_t>{15, 4},
                                   std::vector<float>{40.0f, 0.0f});
  }
  const std::vector<double> before = sequence_totals(buf);
  (void)save_checkpoint(buf, file.path);

  const LoadResult r = load_checkpoint(file.path, dst.name());
  CHECK(r.info.sequence_priority_length == kSeqLength);
  Buffer loaded = Buffer::open(dst.name());
  REQUIRE(loaded.sequence_priority_length() == kSeqLength);
  const std::vector<double> after = sequence_totals(loaded);
  CHECK(after[0] == doctest::Approx(before[0]).epsilon(1e-12));
  CHECK(after[1] == doctest::Approx(before[1]).epsilon(1e-12));
  Rng rng(2);
  SampleBatch batch;
  Sampler(loaded).sample(View::replay, 64, kSeqLength, 0.0, rng, batch, {.prioritized = true});
  CHECK(batch.rows() == 64);

  // Into the source itself after its writer went on with other priorities: the windows the pushes left are replaced.
  {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    for (int s = 0; s < 11; ++s) push(w, buf, 1, 100.0f);
  }
  (void)load_checkpoint(file.path, src.name());
  const std::vector<double> again = sequence_totals(buf);
  CHECK(again[0] == doctest::Approx(before[0]).epsilon(1e-12));
  CHECK(again[1] == doctest::Approx(before[1]).epsilon(1e-12));
}

TEST_CASE("a format 2.2 checkpoint (no sequence-priority words) still loads, and into a buffer with sequence "
          "priorities (which the file does not contradict) its windows are computed from the file's weights") {
  SegmentGuard src(unique_name("seqckpt22-src"));
  SegmentGuard plain(unique_name("seqckpt22-plain"));
  SegmentGuard seq(unique_name("seqckpt22-seq"));
  CkptFile file;
  Buffer buf = Buffer::create(src.name(), 1, 8, kSchema, {.priority_exponent = 1.0});
  {
    Writer w(buf, std::vector<uint64_t>{0});
    for (int s = 0; s < 11; ++s) push(w, buf, 0, static_cast<float>(1 + s % 5));
  }
  (void)save_checkpoint(buf, file.path);
  namespace fmtck = shmreplay::checkpoint_format;
  std::string bytes;
  {
    std::ifstream in(file.path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  fmtck::CheckpointHeader h{};
  std::memcpy(&h, bytes.data(), sizeof h);
  REQUIRE(h.sequence_priority_length == 0);
  h.format_minor = 2;
  h.header_crc = 0;
  h.header_crc = detail::crc32(0, &h, sizeof h);
  std::memcpy(bytes.data(), &h, sizeof h);
  std::remove(file.path.c_str());
  std::ofstream(file.path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

  CHECK(load_checkpoint(file.path, plain.name()).info.format_minor == 2);
  CHECK(Buffer::open(plain.name()).sequence_priority_length() == 0);
  Buffer target = Buffer::create(seq.name(), 1, 8, kSchema, {.priority_exponent = 1.0,
                                                             .sequence_priority_length = kSeqLength});
  (void)load_checkpoint(file.path, seq.name());
  const std::vector<double> totals = sequence_totals(target);
  CHECK(totals[0] > 0);
}

TEST_CASE("a checkpoint keeps the initial priority: a fixed value for the loaded buffer's new steps, and with "
          "+infinity each step not yet returned by a prioritized draw is still drawn first after the load") {
  SegmentGuard fixed_src(unique_name("initckpt-fixed"));
  SegmentGuard fixed_dst(unique_name("initckpt-fixed-dst"));
  SegmentGuard src(unique_name("initckpt-first"));
  SegmentGuard dst(unique_name("initckpt-first-dst"));
  CkptFile fixed_file;
  CkptFile file;
  {
    Buffer b = Buffer::create(fixed_src.name(), 1, 8, kSchema, {.priority_exponent = 1.0, .initial_priority = 2.5});
    (void)save_checkpoint(b, fixed_file.path);
    CHECK(load_checkpoint(fixed_file.path, fixed_dst.name()).info.initial_priority == 2.5);
    Buffer loaded = Buffer::open(fixed_dst.name());
    CHECK(loaded.initial_priority() == 2.5);
    Writer w(loaded, std::vector<uint64_t>{0});
    push_unprioritized(w, 0);
    CHECK(detail::slot_weight(detail::priority_tree_of(std::as_const(segment_of(loaded)), 0), 0) == 2.5);
  }
  Buffer buf = Buffer::create(src.name(), 1, 32, kSchema, {.priority_exponent = 1.0, .initial_priority = kFirst});
  {
    Writer w(buf, std::vector<uint64_t>{0});
    for (int s = 0; s < 8; ++s) push(w, buf, 0, static_cast<float>(1 + s));
  }
  Rng rng(9);
  SampleBatch batch;
  Sampler(buf).sample(View::replay, 3, 1, 0.0, rng, batch, {.prioritized = true});  // takes 3 fresh steps
  std::set<uint64_t> fresh = {0, 1, 2, 3, 4, 5, 6, 7};
  for (const uint64_t s : batch.start_steps()) fresh.erase(s);
  REQUIRE(fresh.size() == 5);
  (void)save_checkpoint(buf, file.path);
  CHECK(load_checkpoint(file.path, dst.name()).info.initial_priority == kFirst);
  Buffer loaded = Buffer::open(dst.name());
  CHECK(loaded.initial_priority() == kFirst);
  Sampler learner(loaded);
  learner.sample(View::replay, 5, 1, 0.0, rng, batch, {.prioritized = true});
  CHECK(std::set<uint64_t>(batch.start_steps().begin(), batch.start_steps().end()) == fresh);
  // None fresh is left: the next draws are by priority, over all eight.
  CHECK(learner.total_weight(View::replay, 1, 0.0, {.prioritized = true}) == 36.0);
}
