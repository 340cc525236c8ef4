// The consuming queue in one process (docs/design/consuming_queue.md): each step delivered once in insertion order
// and at random (chi-square over the undelivered steps, a model with the delivered ones rejected), writers that block
// on a full ring and wake when a learner consumes, learners that wait for steps, the messages, and the repair of a
// dead learner's claims (given back before its commit, delivered after).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "caps/caps_helpers.hpp"
#include "detail/protocol/consume.hpp"
#include "shmreplay/internal/queue_layout.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

struct QueueRig {
  SegmentGuard guard;
  Buffer buf;
  QueueRig(const std::string& tag, uint64_t envs, uint64_t capacity, uint64_t max_learners = 1)
      : guard(unique_name(tag)),
        buf(Buffer::create(guard.name(), envs, capacity, kCapsSchema,
                           {.max_learners = max_learners, .consuming_queue = true})) {}
};

SampleOptions consuming(Consume order, uint64_t timeout_ms = 0) {
  return {.consume = order, .consume_timeout_ms = timeout_ms};
}

// The (env, step) payloads of a batch's rows, in row order.
std::vector<std::pair<uint64_t, uint64_t>> rows_of(const SampleBatch& batch) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (std::size_t r = 0; r < batch.rows(); ++r) out.emplace_back(batch.field_as<uint64_t>(0)[r], batch.field_as<uint64_t>(1)[r]);
  return out;
}

}  // namespace

TEST_CASE("a consuming queue delivers each step once, in insertion order across envs, then throws empty_view") {
  QueueRig rig("queue-fifo", 3, 8);
  CHECK(rig.buf.consuming_queue());
  CHECK(rig.buf.max_times_sampled() == 1);
  Writer w(rig.buf, {0, 1, 2});
  const uint64_t order[] = {2, 0, 0, 1, 2, 1, 0, 2, 2, 1};
  std::vector<std::pair<uint64_t, uint64_t>> pushed;
  for (const uint64_t e : order) {
    pushed.emplace_back(e, w.head(e));
    push_tagged(w, e);
  }
  Sampler s(rig.buf);
  Rng rng(3);
  SampleBatch batch;
  std::vector<std::pair<uint64_t, uint64_t>> got;
  for (int i = 0; i < 5; ++i) {
    s.sample_transitions(View::replay, 2, rng, batch, consuming(Consume::fifo));
    for (const auto& r : rows_of(batch)) got.push_back(r);
  }
  CHECK(got == pushed);
  std::string msg;
  CHECK(error_of([&] { s.sample_transitions(View::replay, 1, rng, batch, consuming(Consume::fifo)); }, &msg) ==
        static_cast<int>(Errc::empty_view));
  CHECK(msg.find("cannot consume 1 rows of") != std::string::npos);
  CHECK(msg.find("nothing was delivered") != std::string::npos);
}

TEST_CASE("a consuming queue refuses sample calls without consume, consume with a mixture or sample_mixed, and "
          "consume on a buffer that is not a queue") {
  QueueRig rig("queue-refuse", 1, 4);
  Writer w(rig.buf, {0});
  push_tagged(w, 0);
  Sampler s(rig.buf);
  Rng rng(1);
  SampleBatch batch;
  std::string msg;
  CHECK(error_of([&] { s.sample_transitions(View::replay, 1, rng, batch); }, &msg) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(msg.find("consume = fifo or random") != std::string::npos);
  CHECK(error_of([&] { s.sample(View::replay, 1, 1, 1.0, rng, batch, consuming(Consume::fifo)); }) ==
        static_cast<int>(Errc::invalid_argument));  // power 1
  SampleOptions mixed = consuming(Consume::random);
  mixed.mixture = Mixture{.uniform = 0.5, .recency = 0.5};
  mixed.recency_half_life = 4.0;
  CHECK(error_of([&] { s.sample(View::replay, 2, 1, 0.0, rng, batch, mixed); }, &msg) ==
        static_cast<int>(Errc::invalid_argument));  // a mixture
  CHECK(msg.find("no other sampling option") != std::string::npos);
  CHECK(error_of([&] { s.sample_mixed(1, 1, 1, 0.0, rng, batch, consuming(Consume::fifo)); }, &msg) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(msg.find("only sample and sample_transitions consume") != std::string::npos);
  CapsRig plain("queue-plain", 1, 4, 0);
  Sampler p(plain.buf);
  CHECK(error_of([&] { p.sample_transitions(View::replay, 1, rng, batch, consuming(Consume::random)); }, &msg) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(msg.find("is not a consuming queue") != std::string::npos);
  CHECK(error_of([] {
          SegmentGuard g(unique_name("queue-cap2"));
          Buffer::create(g.name(), 1, 4, kCapsSchema, {.max_times_sampled = 2, .consuming_queue = true});
        }) == static_cast<int>(Errc::invalid_argument));
}

TEST_CASE("random consumption is uniform over the undelivered steps; a model that includes the delivered ones is "
          "rejected") {
  constexpr uint64_t kCap = 12, kOld = 4, kTrials = 3000;
  QueueRig rig("queue-random", 1, kCap);
  Writer w(rig.buf, {0});
  Sampler s(rig.buf);
  Rng rng(29);
  SampleBatch batch;
  std::vector<uint64_t> counts(kCap, 0);
  for (uint64_t t = 0; t < kTrials; ++t) {
    const uint64_t base = w.head(0);
    for (uint64_t i = 0; i < kCap; ++i) push_tagged(w, 0);  // the ring's steps were all delivered: no wait
    s.sample_transitions(View::replay, kOld, rng, batch, consuming(Consume::fifo));  // the oldest 4 delivered
    s.sample_transitions(View::replay, 2, rng, batch, consuming(Consume::random));
    for (const auto& [env, step] : rows_of(batch)) ++counts[step - base];
    s.sample_transitions(View::replay, kCap - kOld - 2, rng, batch, consuming(Consume::fifo));  // drain
  }
  for (uint64_t i = 0; i < kOld; ++i) CHECK(counts[i] == 0);  // never a delivered step
  std::vector<double> model(kCap, 0.0), wrong(kCap, 1.0 / kCap);
  for (uint64_t i = kOld; i < kCap; ++i) model[i] = 1.0 / (kCap - kOld);
  const double n = 2.0 * kTrials;
  CHECK(chi_square(counts, model, n) < chi_square_bound(kCap - kOld - 1));
  std::vector<uint64_t> undelivered(counts.begin() + kOld, counts.end());  // the wrong model, on its own cells
  std::vector<double> wrong_tail(wrong.begin() + kOld, wrong.end());
  CHECK(chi_square(counts, wrong, n) > chi_square_bound(kCap - 1));
  CHECK(chi_square(undelivered, wrong_tail, n) > chi_square_bound(kCap - kOld - 1));
}

TEST_CASE("random consumption is uniform over the free steps of windows with delivered steps inside them, whether the "
          "windows fill most of the rings or few of them; a model that counts the delivered ones is rejected") {
  constexpr uint64_t kEnvs = 3, kCap = 16, kTrials = 2000;
  struct Shape {
    uint64_t pushed[kEnvs];  // steps pushed per env each trial
    std::vector<std::pair<uint64_t, uint64_t>> holes;  // (env, offset) delivered before the draw
  };
  const Shape shapes[] = {{{16, 10, 4}, {{0, 3}, {0, 9}, {0, 15}, {1, 0}, {1, 5}}},  // 30 of 48: the rings
                          {{9, 2, 1}, {{0, 1}, {0, 4}, {1, 1}}}};                     // 12 of 48: the windows
  for (const Shape& shape : shapes) {
    QueueRig rig("queue-holes", kEnvs, kCap);
    Writer w(rig.buf, {0, 1, 2});
    Sampler s(rig.buf);
    Segment& seg = segment_of(rig.buf);
    Rng rng(31);
    SampleBatch batch;
    std::vector<uint64_t> counts(kEnvs * kCap, 0);
    for (uint64_t t = 0; t < kTrials; ++t) {
      uint64_t base[kEnvs];
      for (uint64_t e = 0; e < kEnvs; ++e) {
        base[e] = w.head(e);
        for (uint64_t i = 0; i < shape.pushed[e]; ++i) push_tagged(w, e);
      }
      for (const auto& [e, off] : shape.holes) {  // as a learner's delivery leaves them (its commit done)
        const uint64_t step = base[e] + off;
        detail::deliver(seg.cap_words(e)[step % kCap], step);
      }
      s.sample_transitions(View::replay, 1, rng, batch, consuming(Consume::random));
      for (const auto& [env, step] : rows_of(batch)) ++counts[env * kCap + (step - base[env])];
      uint64_t left = 0;
      for (uint64_t e = 0; e < kEnvs; ++e) left += shape.pushed[e];
      s.sample_transitions(View::replay, left - shape.holes.size() - 1, rng, batch, consuming(Consume::fifo));
    }
    std::vector<double> model(kEnvs * kCap, 0.0), wrong(kEnvs * kCap, 0.0);
    uint64_t free = 0, stored = 0;
    for (uint64_t e = 0; e < kEnvs; ++e) {
      for (uint64_t i = 0; i < shape.pushed[e]; ++i) {
        const bool hole = std::find(shape.holes.begin(), shape.holes.end(), std::pair{e, i}) != shape.holes.end();
        model[e * kCap + i] = hole ? 0.0 : 1.0;
        wrong[e * kCap + i] = 1.0;
        free += hole ? 0 : 1;
        ++stored;
      }
    }
    for (double& m : model) m /= static_cast<double>(free);
    for (double& m : wrong) m /= static_cast<double>(stored);
    for (const auto& [e, off] : shape.holes) CHECK(counts[e * kCap + off] == 0);  // never a delivered step
    for (uint64_t e = 0; e < kEnvs; ++e) {
      for (uint64_t i = shape.pushed[e]; i < kCap; ++i) CHECK(counts[e * kCap + i] == 0);  // nor one not pushed
    }
    const double n = static_cast<double>(kTrials);
    CHECK(chi_square(counts, model, n) < chi_square_bound(static_cast<double>(free - 1)));
    CHECK(chi_square(counts, wrong, n) > chi_square_bound(static_cast<double>(stored - 1)));
    uint64_t drawn = 0;
    for (const uint64_t k : counts) drawn += k;
    CHECK(drawn == kTrials);  // none outside the pushed steps (the models' zero cells)
  }
}

TEST_CASE("a writer blocks while its ring slot holds an undelivered step, wakes when a learner consumes it, and "
          "times out naming the env and the step") {
  QueueRig rig("queue-block", 2, 4);
  {
    Writer w(rig.buf, {0, 1}, WriterOptions{.queue_timeout_ms = 0});
    for (int i = 0; i < 4; ++i) push_tagged(w, 1);
    std::string msg;
    CHECK(error_of([&] { push_tagged(w, 1); }, &msg) == static_cast<int>(Errc::rate_limited));
    CHECK(msg.find("env 1 of") != std::string::npos);
    CHECK(msg.find("its next step 4 holds step 0, not yet delivered") != std::string::npos);
    CHECK(w.head(1) == 4);  // nothing written
    push_tagged(w, 0);      // another env's ring has room
  }
  std::atomic<bool> pushed{false};
  std::thread writer([&] {
    Writer w(rig.buf, {1}, WriterOptions{.queue_timeout_ms = 10'000});
    push_tagged(w, 1);  // waits for step 0 of env 1 to be delivered
    pushed = true;
  });
  ::usleep(100'000);
  CHECK_FALSE(pushed.load());
  Sampler s(rig.buf);
  Rng rng(5);
  SampleBatch batch;
  s.sample_transitions(View::replay, 2, rng, batch, consuming(Consume::fifo));  // env 1's step 0 (the oldest push)
  writer.join();
  CHECK(pushed.load());
  CHECK(rows_of(batch)[0] == std::pair<uint64_t, uint64_t>{1, 0});
  const SegmentInfo info = Inspector(rig.guard.name()).snapshot();
  CHECK(info.envs[1].counters[*counter_index(CounterScope::env, "queue_blocked_pushes")] == 2);
  CHECK(info.envs[1].counters[*counter_index(CounterScope::env, "queue_timeouts")] == 1);
}

TEST_CASE("a consuming call waits for enough undelivered steps and is woken by the writer") {
  QueueRig rig("queue-wait", 2, 8);
  Sampler s(rig.buf);
  std::vector<std::pair<uint64_t, uint64_t>> got;
  std::thread learner([&] {
    Rng rng(7);
    SampleBatch batch;
    s.sample_transitions(View::replay, 3, rng, batch, consuming(Consume::random, 10'000));
    got = rows_of(batch);
  });
  ::usleep(50'000);
  Writer w(rig.buf, {0, 1});
  push_tagged(w, 0);
  push_tagged(w, 1);
  ::usleep(20'000);
  push_tagged(w, 0);
  learner.join();
  REQUIRE(got.size() == 3);
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<std::pair<uint64_t, uint64_t>>{{0, 0}, {0, 1}, {1, 0}});
}

namespace {

// A learner of slot 1 that claims the oldest step of env 0 (committing its call when `commit`) and dies without
// finishing: its claim stays pending, its lease names a dead process.
void die_holding_a_claim(const std::string& name, bool commit) {
  const pid_t pid = spawn([&] {
    Buffer b = Buffer::open(name);
    Sampler learner(b, SamplerOptions{.rank = 1});
    Segment& seg = segment_of(b);
    detail::begin_claims(seg.queue_learner(1));
    const uint64_t step = seg.queue_env(0).frontier.load();
    if (!detail::try_claim(seg.cap_words(0)[step % seg.capacity()], step, 1)) ::_exit(2);
    if (commit) detail::commit(seg.queue_learner(1), 1);
    ::_exit(0);  // no destructor: the lease stays the dead process's
  });
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

}  // namespace

TEST_CASE("a learner killed before its commit has its claims given back; after its commit, delivered") {
  QueueRig rig("queue-dead", 1, 4, 2);
  Writer w(rig.buf, {0}, WriterOptions{.queue_timeout_ms = 5'000});
  for (int i = 0; i < 4; ++i) push_tagged(w, 0);
  die_holding_a_claim(rig.guard.name(), /*commit=*/false);
  Sampler s(rig.buf);  // rank 0
  Rng rng(9);
  SampleBatch batch;
  // Steps 1-3 are free; step 0 is the dead learner's claim until a consuming call that runs short repairs it.
  s.sample_transitions(View::replay, 4, rng, batch, consuming(Consume::fifo, 5'000));
  std::vector<uint64_t> steps;
  for (const auto& [env, step] : rows_of(batch)) steps.push_back(step);
  std::sort(steps.begin(), steps.end());
  CHECK(steps == std::vector<uint64_t>{0, 1, 2, 3});
  // Now a committed claim: the learner dies after its commit, before it marked step 4 delivered. The writer, blocked
  // on step 4's slot, repairs the claim (delivered: the call committed) and goes on; step 4 is never delivered again.
  for (int i = 0; i < 4; ++i) push_tagged(w, 0);  // steps 4-7: the ring is full again
  die_holding_a_claim(rig.guard.name(), /*commit=*/true);  // claims the frontier, step 4
  push_tagged(w, 0);  // step 8 needs step 4 delivered
  CHECK(w.head(0) == 9);
  s.sample_transitions(View::replay, 4, rng, batch, consuming(Consume::fifo));
  steps.clear();
  for (const auto& [env, step] : rows_of(batch)) steps.push_back(step);
  CHECK(steps == std::vector<uint64_t>{5, 6, 7, 8});
  const SegmentInfo info = Inspector(rig.guard.name()).snapshot();
  CHECK(info.learners[1].counters[*counter_index(CounterScope::learner, "queue_returned")] == 1);
  CHECK(info.learners[1].counters[*counter_index(CounterScope::learner, "queue_delivered")] == 1);
}

TEST_CASE("a consuming call that finds fewer free steps than it asks for while a writer waits for one of them "
          "returns a partial batch of those steps, and the writer goes on") {
  for (const Consume order : {Consume::fifo, Consume::random}) {
    CAPTURE(to_string(order));
    QueueRig rig("queue-partial", 2, 4);
    Sampler s(rig.buf);
    Rng rng(11);
    SampleBatch batch;
    {
      Writer w(rig.buf, {0, 1});
      for (int i = 0; i < 4; ++i) push_tagged(w, 0);
      for (int i = 0; i < 4; ++i) push_tagged(w, 1);
    }
    s.sample_transitions(View::replay, 4, rng, batch, consuming(Consume::fifo));  // env 0's four (the oldest pushes)
    std::atomic<bool> pushed{false};
    std::thread writer([&] {
      Writer w(rig.buf, {1}, WriterOptions{.queue_timeout_ms = 3'000});
      try {
        push_tagged(w, 1);  // waits for env 1's step 0, one of the four free steps
        pushed = true;
      } catch (const Error&) {  // rate_limited: the learner never delivered it
      }
    });
    Segment& seg = segment_of(rig.buf);
    while (seg.queue_env(1).blocked_since_ns.load() == 0) ::usleep(1000);
    // Eight rows asked, four free, and the writer that would bring more waits for one of them.
    CHECK_NOTHROW(s.sample(View::replay, 8, 2, 0.0, rng, batch, consuming(order, 1'000)));
    writer.join();
    REQUIRE(pushed.load());
    CHECK(batch.rows() == 4);
    CHECK(batch.env_ids().size() == 4);
    CHECK(batch.mask().size() == 8);
    std::vector<std::pair<uint64_t, uint64_t>> got;
    for (std::size_t r = 0; r < batch.rows(); ++r) {
      got.emplace_back(batch.field_as<uint64_t>(0)[r * 2], batch.field_as<uint64_t>(1)[r * 2]);
      CHECK(batch.env_ids()[r] == 1);
    }
    std::sort(got.begin(), got.end());
    CHECK(got == std::vector<std::pair<uint64_t, uint64_t>>{{1, 0}, {1, 1}, {1, 2}, {1, 3}});
    s.sample_transitions(View::replay, 1, rng, batch, consuming(order));  // the writer's step 4
    CHECK(rows_of(batch) == std::vector<std::pair<uint64_t, uint64_t>>{{1, 4}});
  }
}

TEST_CASE("a consuming call short of free steps with no writer waiting delivers nothing and throws empty_view") {
  QueueRig rig("queue-short", 2, 4);
  {
    Writer w(rig.buf, {0, 1});
    for (int i = 0; i < 3; ++i) push_tagged(w, 1);
  }
  Sampler s(rig.buf);
  Rng rng(13);
  SampleBatch batch;
  CHECK(error_of([&] { s.sample_transitions(View::replay, 4, rng, batch, consuming(Consume::random, 20)); }) ==
        static_cast<int>(Errc::empty_view));
  s.sample_transitions(View::replay, 3, rng, batch, consuming(Consume::fifo));
  CHECK(batch.rows() == 3);
}
