// The hot paths do not allocate once warmed up: a counting global operator new (enabled only around the measured
// calls, on the measuring thread) must see zero heap allocations across the learner's sample calls (replay,
// online, mixed, transitions, with options), peek, try_update and reset_online_queue, and across the writer's
// push, push_one and reserve/commit. Its own executable, because replacing the global allocation functions
// affects every translation unit linked with it.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "shmreplay/internal/segment.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"

namespace {

thread_local bool t_counting = false;
std::atomic<uint64_t> g_allocations{0};

void* counted_alloc(std::size_t bytes) {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}

void* counted_aligned_alloc(std::size_t bytes, std::align_val_t align) {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  const auto a = std::max(static_cast<std::size_t>(align), sizeof(void*));
  if (::posix_memalign(&p, a, bytes == 0 ? 1 : bytes) == 0) return p;
  throw std::bad_alloc();
}

// Counts heap allocations made by this thread while alive.
class AllocationCounter {
 public:
  AllocationCounter() : start_(g_allocations.load()) { t_counting = true; }
  ~AllocationCounter() { t_counting = false; }
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;
  uint64_t count() const { return g_allocations.load() - start_; }

 private:
  uint64_t start_;
};

}  // namespace

// Every replaceable allocation function goes through malloc/free, so that the sized and aligned forms (which a
// sanitizer runtime also provides) never pair with a different allocator.
void* operator new(std::size_t bytes) { return counted_alloc(bytes); }
void* operator new[](std::size_t bytes) { return counted_alloc(bytes); }
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(bytes);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(bytes);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t bytes, std::align_val_t align) { return counted_aligned_alloc(bytes, align); }
void* operator new[](std::size_t bytes, std::align_val_t align) { return counted_aligned_alloc(bytes, align); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace shmreplay;
using namespace shmreplay::test;

TEST_CASE("the counting allocator sees allocations (the zero-allocation test below can fail)") {
  AllocationCounter counter;
  auto* v = new std::vector<int>(100);
  delete v;
  CHECK(counter.count() >= 2);
}

// A buffer, its writer and learner, and everything the measured rounds use, built before them: ids, field arrays,
// one payload per env.
struct AllocRig {
  static constexpr uint64_t kEnvs = 4;
  static constexpr uint64_t kCapacity = 32;
  static constexpr std::size_t kL = 8;
  static constexpr std::size_t kRows = 64;
  Buffer& buf;
  Writer writer = Writer::range(buf, 0, kEnvs);
  Sampler learner{buf};
  Rng rng{5};
  SampleBatch batch;
  const std::vector<int32_t> all_ids = {3, 0, 2, 1};
  const std::vector<uint64_t> peek_ids = {0, 1, 2, 3, 1};
  const uint64_t one_env[1] = {2};
  std::vector<uint64_t> hdr = std::vector<uint64_t>(4 * kEnvs);
  std::vector<float> body = std::vector<float>(kBody * kEnvs);
  std::vector<uint8_t> tail = std::vector<uint8_t>(kTail * kEnvs);
  const std::array<FieldBytes, 3> batch_fields = {field_bytes(hdr), field_bytes(body), field_bytes(tail)};
  Payload single{};
  const std::array<FieldBytes, 3> single_fields = {FieldBytes{single.hdr, sizeof single.hdr},
                                                   FieldBytes{single.body, sizeof single.body},
                                                   FieldBytes{single.tail, sizeof single.tail}};
  const SampleOptions with_period{.period = 3, .min_steps = 8};

  explicit AllocRig(Buffer& b) : buf(b) {}

  // The next payload of each env of all_ids, in place.
  void fill() {
    for (std::size_t i = 0; i < all_ids.size(); ++i) {
      const auto e = static_cast<uint64_t>(all_ids[i]);
      const Payload p = make_payload(e, segment_of(buf).env_control(e).head.load(), 0);
      std::memcpy(&hdr[4 * i], p.hdr, sizeof p.hdr);
      std::memcpy(&body[kBody * i], p.body, sizeof p.body);
      std::memcpy(&tail[kTail * i], p.tail, sizeof p.tail);
    }
  }

  // One round of every operation, in the shapes the measured rounds use (no doctest assertion inside: doctest
  // may allocate). Returns whether try_update rewrote its step.
  bool round(uint64_t i) {
    fill();
    writer.push(all_ids, batch_fields);
    single = make_payload(1, segment_of(buf).env_control(1).head.load(), 0);
    writer.push_one(1, single_fields);
    {
      StepSlot slot = writer.reserve(3);
      fill_slot(slot);
      slot.commit();
    }
    const double power = static_cast<double>(i % 3);
    learner.sample(View::replay, kRows, kL, power, rng, batch);
    learner.sample(View::online, kRows / 2, kL, power, rng, batch);
    learner.sample_mixed(kRows / 2, kRows / 2, kL, power, rng, batch);
    learner.sample_transitions(View::replay, kRows, rng, batch);
    learner.sample(View::replay, kRows, kL, power, rng, batch, with_period);
    learner.peek(peek_ids, batch);
    learner.peek(one_env, batch);
    const EnvSizes sz = learner.sizes(0);
    const Payload p = make_payload(0, sz.head - 1 - i % sz.replay, i + 1);
    const bool updated = learner.try_update(0, p.hdr[1],
                                            {FieldBytes{p.hdr, sizeof p.hdr}, FieldBytes{p.body, sizeof p.body},
                                             FieldBytes{p.tail, sizeof p.tail}});
    learner.reset_online_queue();
    return updated;
  }
};

TEST_CASE("once warmed up, sampling, peek, try_update, online resets and pushes make no heap allocation") {
  SegmentGuard guard(unique_name("alloc"));
  Buffer buf = Buffer::create(guard.name(), AllocRig::kEnvs, AllocRig::kCapacity, kPayloadSchema);
  AllocRig rig(buf);
  // Warm up: fill every ring past its capacity, then run each operation once.
  for (uint64_t i = 0; i < AllocRig::kCapacity + 4; ++i) {
    rig.fill();
    rig.writer.push(rig.all_ids, rig.batch_fields);
  }
  {
    // The counter sees the library's own allocations: a cold batch grows its storage.
    AllocationCounter counter;
    rig.learner.sample(View::replay, AllocRig::kRows, AllocRig::kL, 1.0, rig.rng, rig.batch);
    CHECK(counter.count() > 0);
  }
  REQUIRE(rig.round(0));

  uint64_t allocations = 0;
  uint64_t updates = 0;
  {
    AllocationCounter counter;
    for (uint64_t i = 1; i <= 50; ++i) {
      if (rig.round(i)) ++updates;
    }
    allocations = counter.count();
  }
  CHECK(updates == 50);
  CHECK_MESSAGE(allocations == 0, allocations << " heap allocation(s) in 50 warmed-up rounds");
  // The rounds did real work: the last batch is a sound peek, and the rings hold intact steps.
  const SampleBatch& batch = rig.batch;
  for (std::size_t row = 0; row < batch.rows(); ++row) {
    CHECK(check_row(batch, row, rig.learner.sizes(batch.env_ids()[row]).head) == "");
  }
  for (uint64_t e = 1; e < AllocRig::kEnvs; ++e) CHECK(check_env_payloads(buf, e) == "");  // env 0: updated steps
}
