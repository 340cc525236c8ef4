// A writer of a tiered buffer (layout 1.11) SIGKILLed at random points while a learner samples: no row is ever
// torn, and nothing it sealed is lost (the cold tier holds every sealed step a replacement writer did not
// overwrite, and the run of stored steps stays contiguous). Part of test_cold.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "cold/cold_helpers.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/internal/cold_layout.hpp"
#include "shmreplay/sampler.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

TEST_CASE("a writer SIGKILLed at random points leaves no torn row and loses nothing it sealed") {
  const ColdDir dir("kills");
  const std::string name = unique_name("cold-kills");
  SegmentGuard guard(name);
  constexpr uint64_t kCap = 16, kCold = 256;
  Buffer b = make_tiered(name, dir, 2, kCap, kCold);
  Sampler s(b);
  std::mt19937_64 pick(99);
  Rng rng(5);
  SampleBatch batch;
  uint64_t rows_checked = 0;
  for (int round = 0; round < 12; ++round) {
    const pid_t writer = spawn_payload_writer(name, {0, 1}, 100);
    while (segment_of(b).env_control(0).head.load() == 0 || segment_of(b).env_control(1).head.load() == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(2000 + pick() % 30000);
    while (std::chrono::steady_clock::now() < until) {
      s.sample(View::replay, 32, 5, 0.0, rng, batch);
      for (std::size_t row = 0; row < batch.rows(); ++row) {
        const uint64_t head = segment_of(b).env_control(batch.env_ids()[row]).head.load();
        REQUIRE(check_row(batch, row, head) == "");
        ++rows_checked;
      }
    }
    REQUIRE(kill_and_reap(writer));
    // What was sealed is there: the cold tier's records of [cold head - cold capacity, cold head) are the pushed
    // steps, and the ring takes over where they end.
    for (uint64_t e = 0; e < 2; ++e) {
      const layout::ColdEnv& ce = segment_of(b).cold_env(e);
      const uint64_t sealed = ce.head.load();
      const uint64_t claimed = segment_of(b).env_control(e).claimed.load() & layout::kClaimMask;
      CHECK(sealed + kCap >= claimed);  // sealed before the claim that reclaimed its slot
      const uint64_t from = sealed > kCold ? sealed - kCold : 0;
      for (uint64_t t = from; t < sealed; ++t) {
        std::string bytes;  // the step's values from each field's column (the files are column-major)
        for (std::size_t f = 0; f < kPayloadSchema.size(); ++f) {
          const uint64_t field = kPayloadSchema[f].bytes();
          bytes.append(reinterpret_cast<const char*>(segment_of(b).cold_column(e, f) + (t % kCold) * field), field);
        }
        if (ce.claimed.load() > t + kCold) continue;  // a seal killed mid-copy reuses this record: not stored
        REQUIRE_MESSAGE(bytes == payload_bytes(e, t), "env ", e, " cold step ", t);
      }
    }
  }
  CHECK(rows_checked > 1000);
  Buffer::remove(name);
}
