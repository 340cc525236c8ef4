// Sample caps in one process (docs/design/sample_caps.md): a step delivered exactly max_times_sampled times and then
// gone, the draws exact over the starts not yet capped (chi-square, a wrong model rejected), the step tag of a count
// word refusing a slot whose word counts another step, the create option's bounds, and a checkpoint keeping the cap
// and each step's count.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "caps/caps_helpers.hpp"
#include "checkpoint/checkpoint_helpers.hpp"
#include "shmreplay/internal/caps_layout.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

// How many times each (env, step) was the start of a row of `batch` (its payload, as delivered).
void count_rows(const SampleBatch& batch, std::map<std::pair<uint64_t, uint64_t>, uint64_t>& seen) {
  const auto envs = batch.field_as<uint64_t>(0);
  const auto steps = batch.field_as<uint64_t>(1);
  for (std::size_t r = 0; r < batch.rows(); ++r) ++seen[{envs[r], steps[r]}];
}

uint64_t learner_counter(const std::string& name, const char* row) {
  const SegmentInfo info = Inspector(name).snapshot();
  return info.learner.counters[*counter_index(CounterScope::learner, row)];
}

}  // namespace

TEST_CASE("a step is delivered exactly max_times_sampled times, then it leaves the view; a view of capped steps "
          "throws empty_view until a new step arrives") {
  CapsRig rig("caps-exact", 2, 8, 3);
  CHECK(rig.buf.max_times_sampled() == 3);
  Writer w(rig.buf, {0, 1});
  for (int i = 0; i < 2; ++i) {
    push_tagged(w, 0);
    push_tagged(w, 1);
  }
  Sampler s(rig.buf);
  Rng rng(11);
  SampleBatch batch;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> seen;
  s.sample_transitions(View::replay, 7, rng, batch);  // 4 steps x 3 deliveries: 7, then 5 one at a time
  count_rows(batch, seen);
  for (int i = 0; i < 5; ++i) {
    s.sample_transitions(View::replay, 1, rng, batch);
    count_rows(batch, seen);
  }
  REQUIRE(seen.size() == 4);
  for (const auto& [key, n] : seen) CHECK(n == 3);
  std::string msg;
  CHECK(error_of([&] { s.sample_transitions(View::replay, 1, rng, batch); }, &msg) ==
        static_cast<int>(Errc::empty_view));
  CHECK(msg.find("every stored step was sampled max_times_sampled = 3 times") != std::string::npos);
  CHECK(learner_counter(rig.guard.name(), "cap_claimed") == 12);
  CHECK(learner_counter(rig.guard.name(), "cap_retired") == 4);
  CHECK(learner_counter(rig.guard.name(), "cap_rejected") > 0);
  push_tagged(w, 1);  // step 2 of env 1: three more deliveries, all of it
  s.sample_transitions(View::replay, 3, rng, batch);
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(batch.field_as<uint64_t>(0)[r] == 1);
    CHECK(batch.field_as<uint64_t>(1)[r] == 2);
  }
  // A batch larger than the deliveries left cannot be filled: empty_view, not a row past the cap; and the call
  // that threw gives back the deliveries it had claimed, so all three are there for the next call.
  push_tagged(w, 0);
  CHECK(error_of([&] { s.sample_transitions(View::replay, 4, rng, batch); }) == static_cast<int>(Errc::empty_view));
  s.sample_transitions(View::replay, 3, rng, batch);
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(batch.field_as<uint64_t>(0)[r] == 0);
    CHECK(batch.field_as<uint64_t>(1)[r] == 2);
  }
  CHECK(learner_counter(rig.guard.name(), "cap_claimed") == 18);
  CHECK(learner_counter(rig.guard.name(), "cap_retired") == 6);
}

TEST_CASE("draws under a sample cap are uniform over the starts not yet capped (chi-square), and a model that "
          "includes the capped starts is rejected") {
  constexpr uint64_t kEnvs = 2, kCap = 32, kMax = 255;
  CapsRig rig("caps-uniform", kEnvs, kCap, kMax);
  Writer w(rig.buf, {0, 1});
  for (uint64_t s = 0; s < 40; ++s) {  // env 0: steps 8..39 stored (a lap and a bit); env 1: 0..31
    push_tagged(w, 0);
    if (s < kCap) push_tagged(w, 1);
  }
  Segment& seg = segment_of(rig.buf);
  const auto first = [&](uint64_t e) { return e == 0 ? uint64_t{8} : uint64_t{0}; };
  const auto capped = [](uint64_t e, uint64_t step) { return (step + e) % 3 == 0; };  // about a third
  // Each call starts from the same words: the capped starts at the cap, the rest at 0 deliveries (a call of 100
  // rows cannot bring one to 255).
  const auto reset_words = [&] {
    for (uint64_t e = 0; e < kEnvs; ++e) {
      for (uint64_t step = first(e); step < first(e) + kCap; ++step) {
        seg.cap_words(e)[step % kCap].store(layout::cap_word(step, capped(e, step) ? kMax : 0));
      }
    }
  };
  std::vector<double> model(kEnvs * kCap, 0.0), everything(kEnvs * kCap, 1.0 / (kEnvs * kCap));
  double uncapped = 0;
  for (uint64_t e = 0; e < kEnvs; ++e) {
    for (uint64_t step = first(e); step < first(e) + kCap; ++step) {
      if (!capped(e, step)) {
        model[e * kCap + step - first(e)] = 1.0;
        ++uncapped;
      }
    }
  }
  for (double& p : model) p /= uncapped;
  Sampler s(rig.buf);
  Rng rng(5);
  SampleBatch batch;
  std::vector<uint64_t> counts(kEnvs * kCap, 0);
  uint64_t capped_rows = 0;
  constexpr std::size_t kCalls = 300, kRows = 100;
  for (std::size_t c = 0; c < kCalls; ++c) {
    reset_words();
    s.sample_transitions(View::replay, kRows, rng, batch);
    for (std::size_t r = 0; r < kRows; ++r) {
      const uint64_t e = batch.field_as<uint64_t>(0)[r];
      const uint64_t step = batch.field_as<uint64_t>(1)[r];
      if (capped(e, step)) ++capped_rows;
      ++counts[e * kCap + step - first(e)];
    }
  }
  const double n = kCalls * kRows;
  CHECK(capped_rows == 0);
  CHECK(chi_square(counts, model, n) < chi_square_bound(uncapped - 1));
  CHECK(chi_square(counts, everything, n) > chi_square_bound(kEnvs * kCap - 1));
}

TEST_CASE("a count word tagged with another step refuses the slot's start: an overwritten slot starts at 0 "
          "deliveries, and a word that still counts an older step is never claimed") {
  CapsRig rig("caps-tag", 1, 4, 1);
  Writer w(rig.buf, {0});
  for (int i = 0; i < 4; ++i) push_tagged(w, 0);
  Sampler s(rig.buf);
  Rng rng(2);
  SampleBatch batch;
  s.sample_transitions(View::replay, 4, rng, batch);  // steps 0..3 once each: all capped
  CHECK(error_of([&] { s.sample_transitions(View::replay, 1, rng, batch); }) == static_cast<int>(Errc::empty_view));
  for (int i = 0; i < 4; ++i) push_tagged(w, 0);  // steps 4..7 overwrite every slot: fresh tags, 0 deliveries
  // Slot 1 (step 5) as if its writer had not stored its word: it still counts step 1, with no delivery counted.
  segment_of(rig.buf).cap_words(0)[1].store(layout::cap_word(1, 0));
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> seen;
  s.sample_transitions(View::replay, 3, rng, batch);
  count_rows(batch, seen);
  CHECK(seen == std::map<std::pair<uint64_t, uint64_t>, uint64_t>{{{0, 4}, 1}, {{0, 6}, 1}, {{0, 7}, 1}});
  CHECK(error_of([&] { s.sample_transitions(View::replay, 1, rng, batch); }) == static_cast<int>(Errc::empty_view));
  CHECK(segment_of(rig.buf).cap_words(0)[1].load() == layout::cap_word(1, 0));  // untouched
}

TEST_CASE("a reserved step committed gets its count word like a pushed one") {
  CapsRig rig("caps-reserve", 1, 4, 2);
  Writer w(rig.buf, {0});
  for (int i = 0; i < 6; ++i) {
    StepSlot slot = w.reserve(0);
    const uint64_t env = 0, step = slot.step();
    std::memcpy(slot.field(0).data(), &env, 8);
    std::memcpy(slot.field(1).data(), &step, 8);
    slot.commit();
  }
  for (uint64_t step = 2; step < 6; ++step) {
    CHECK(segment_of(rig.buf).cap_words(0)[step % 4].load() == layout::cap_word(step, 0));
  }
}

TEST_CASE("max_times_sampled above 255 is refused at create, naming the bounds") {
  SegmentGuard guard(unique_name("caps-bounds"));
  std::string msg;
  CHECK(error_of([&] { Buffer::create(guard.name(), 1, 4, kCapsSchema, {.max_times_sampled = 256}); }, &msg) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(msg.find("max_times_sampled is 256, expected 0 (no cap) to 255") != std::string::npos);
  Buffer none = Buffer::create(guard.name(), 1, 4, kCapsSchema);
  CHECK(none.max_times_sampled() == 0);
  const SegmentInfo info = Inspector(guard.name()).snapshot();
  CHECK(info.max_times_sampled == 0);
}

TEST_CASE("a checkpoint keeps the sample cap and each step's count: a step at its cap before the save is not "
          "delivered after the load") {
  CapsRig rig("caps-ckpt", 1, 4, 2);
  SegmentGuard loaded(unique_name("caps-ckpt-new"));
  FileGuard file(temp_path("caps-ckpt"));
  Writer w(rig.buf, {0});
  for (int i = 0; i < 6; ++i) push_tagged(w, 0);  // steps 2..5 stored
  Sampler s(rig.buf);
  Rng rng(9);
  SampleBatch batch;
  s.sample_transitions(View::replay, 8, rng, batch);  // every delivery taken: each step at its cap
  CHECK(save_checkpoint(rig.buf, file.path()).max_times_sampled == 2);
  const LoadResult r = load_checkpoint(file.path(), loaded.name());
  CHECK(r.info.max_times_sampled == 2);
  Buffer dst = Buffer::open(loaded.name());
  CHECK(dst.max_times_sampled() == 2);
  Sampler d(dst);
  std::string m;
  CHECK(error_of([&] { d.sample_transitions(View::replay, 1, rng, batch); }, &m) == static_cast<int>(Errc::empty_view));
  CHECK(contains(m, "max_times_sampled"));
}

TEST_CASE("a checkpoint keeps each step's count of deliveries: a step sampled k times before the save is delivered "
          "N - k more times after the load") {
  CapsRig rig("caps-ckpt-k", 2, 8, 3);
  SegmentGuard loaded(unique_name("caps-ckpt-k-new"));
  FileGuard file(temp_path("caps-ckpt-k"));
  Writer w(rig.buf, {0, 1});
  for (int i = 0; i < 11; ++i) {
    push_tagged(w, 0);
    push_tagged(w, 1);
  }
  Sampler s(rig.buf);
  Rng rng(4);
  SampleBatch batch;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> before;
  s.sample_transitions(View::replay, 20, rng, batch);  // of 48 deliveries: counts from 0 to 3
  count_rows(batch, before);
  (void)save_checkpoint(rig.buf, file.path());
  (void)load_checkpoint(file.path(), loaded.name());
  Buffer dst = Buffer::open(loaded.name());
  Sampler d(dst);
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> after;
  d.sample_transitions(View::replay, 48 - 20, rng, batch);  // exactly the deliveries left
  count_rows(batch, after);
  for (uint64_t e = 0; e < 2; ++e) {
    for (uint64_t step = 3; step < 11; ++step) {
      CAPTURE(e);
      CAPTURE(step);
      CHECK(before[{e, step}] + after[{e, step}] == 3);
    }
  }
  CHECK(error_of([&] { d.sample_transitions(View::replay, 1, rng, batch); }) == static_cast<int>(Errc::empty_view));
}
