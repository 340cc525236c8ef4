// Every sampled byte of a tiered buffer (layout 1.11) is what was pushed: rows in the cold tier, in the ring, and
// rows that straddle both, before and after the cold ring wraps, in the replay and the online view. Part of
// test_cold.
#include <doctest/doctest.h>

#include <string>

#include "cold/cold_helpers.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

struct Kinds {
  uint64_t cold = 0, hot = 0, straddling = 0;
};

// Samples `calls` batches of L-step rows and checks every byte of each; counts the rows by tier (a row is cold when
// its steps all lie below the ring, [head - capacity, head)).
Kinds sample_and_check(Buffer& b, Sampler& s, std::size_t L, View view, int calls) {
  Rng rng(7);
  SampleBatch batch;
  Kinds k;
  const uint64_t cap = b.capacity();
  for (int call = 0; call < calls; ++call) {
    s.sample(view, 64, L, 0.0, rng, batch);
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      const uint64_t head = segment_of(b).env_control(batch.env_ids()[row]).head.load();
      REQUIRE_MESSAGE(check_row(batch, row, head, head) == "", "row ", row, " start ", batch.start_steps()[row]);
      const uint64_t start = batch.start_steps()[row];
      const uint64_t ring_lo = head > cap ? head - cap : 0;
      const uint64_t end = start + *mask_prefix(batch, row);
      if (end <= ring_lo) ++k.cold;
      else if (start >= ring_lo) ++k.hot;
      else ++k.straddling;
    }
  }
  return k;
}

}  // namespace

TEST_CASE("every sampled byte of a tiered buffer is what was pushed: cold rows, ring rows and rows straddling both") {
  const ColdDir dir("bytes");
  const std::string name = unique_name("cold-bytes");
  SegmentGuard guard(name);
  Buffer b = make_tiered(name, dir, 3, 16, 40);
  Sampler s(b);
  for (const uint64_t pushed : {uint64_t{10}, uint64_t{50}, uint64_t{300}}) {  // ring only; cold filling; wrapped
    CAPTURE(pushed);
    push_payloads(b, pushed - segment_of(b).env_control(0).head.load());
    const Kinds k = sample_and_check(b, s, 6, View::replay, 40);
    if (pushed > 16) {
      CHECK(k.cold > 0);
      CHECK(k.straddling > 0);
    }
    CHECK(k.hot > 0);
    // The view is the two tiers' run: every start the model holds, and none below it.
    const uint64_t lo = tiered_lo(pushed, 16, 40);
    CHECK(s.total_weight(View::replay, 6, 0.0) == doctest::Approx(3.0 * static_cast<double>(pushed - lo)));
  }
  Buffer::remove(name);
}

TEST_CASE("the online view of a tiered buffer reaches into the cold tier down to its start") {
  const ColdDir dir("online");
  const std::string name = unique_name("cold-online");
  SegmentGuard guard(name);
  Buffer b = make_tiered(name, dir, 2, 8, 64);
  push_payloads(b, 5);
  Sampler s(b);
  s.reset_online_queue();  // the online view starts at step 5
  push_payloads(b, 30);    // steps [5, 35): 27 of them below the ring
  Rng rng(3);
  SampleBatch batch;
  for (int call = 0; call < 30; ++call) {
    s.sample(View::online, 32, 4, 0.0, rng, batch);
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      CHECK(batch.start_steps()[row] >= 5);
      REQUIRE(check_row(batch, row, 35, 35) == "");
    }
  }
  Buffer::remove(name);
}

TEST_CASE("a second process's Sampler of a tiered buffer reads the cold tier through its own mapping") {
  const ColdDir dir("reopen");
  const std::string name = unique_name("cold-reopen");
  SegmentGuard guard(name);
  {
    Buffer b = make_tiered(name, dir, 2, 8, 32);
    push_payloads(b, 30);
  }
  const int rc = run_in_child([&] {
    Buffer b = Buffer::open(name);
    Sampler s(b);
    const Kinds k = sample_and_check(b, s, 5, View::replay, 20);
    return k.cold > 0 && k.straddling > 0;
  });
  CHECK(rc == 0);
  Buffer::remove(name);
}

TEST_CASE("read_steps (behind dump) returns an env's run over both tiers, every byte as pushed, and info counts it") {
  const ColdDir dir("read");
  const std::string name = unique_name("cold-read");
  SegmentGuard guard(name);
  Buffer b = make_tiered(name, dir, 2, 8, 32);
  push_payloads(b, 60);  // per env: [20, 60), steps [20, 52) in the cold tier
  const Inspector in(name, {.read_only = true});  // its own read-only mapping, as `dump` has
  for (uint64_t e = 0; e < 2; ++e) {
    const StepRecords all = in.read_steps(e, 0, 1000);
    CHECK(all.first_step == 20);
    REQUIRE(all.count == 40);
    for (uint64_t k = 0; k < all.count; ++k) {
      const std::string got(reinterpret_cast<const char*>(all.bytes.data()) + k * all.record_bytes, all.record_bytes);
      REQUIRE_MESSAGE(got == payload_bytes(e, 20 + k), "step ", 20 + k);
    }
    const StepRecords cold_only = in.read_steps(e, 25, 5);  // a run inside the cold tier
    CHECK(cold_only.first_step == 25);
    CHECK(cold_only.count == 5);
    const StepRecords straddling = in.read_steps(e, 48, 8);
    CHECK(straddling.first_step == 48);
    CHECK(straddling.count == 8);
    CHECK(std::string(reinterpret_cast<const char*>(straddling.bytes.data()) + 5 * straddling.record_bytes,
                      straddling.record_bytes) == payload_bytes(e, 53));
  }
  const SegmentInfo info = in.snapshot();
  CHECK(info.cold.capacity == 32);
  CHECK(info.cold.steps == 2 * 32);
  CHECK(info.replay_steps == 2 * 8);
  CHECK(info.cold.dir == dir.path());
  Buffer::remove(name);
}
