// tests/rate_limit/model.cpp: a randomized model of the counting and wake-up protocol, checked at every step.
// Part of test_rate_limit (tests/CMakeLists.txt); its helpers are in rate_limit_helpers.hpp.
#include "rate_limit_helpers.hpp"

// A randomized model of the counting and wake-up protocol
//
// Each actor runs the protocol's steps as the code does, one shared-memory access per step, and a scheduler
// picks the next actor at random (sequential consistency: the code's seq_cst handshakes; docs/design/rate_limiter.md
// argues
// the weaker orders). A futex sleeper is blocked until its word changes. Checked after every step: the published
// error never leaves [min_diff, max_diff]; and when no actor can run, someone sleeps although its condition
// holds: a lost wake-up (with B + spi <= 2 * error buffer, writers or the learner can always go on).

namespace model {

struct Shared {
  std::vector<uint64_t> head, reserved;
  uint64_t admit_seq = 0, samples = 0;
  uint64_t wseq = 0, wpromise = 0;  // the writers' wake word and re-check promise (time does not pass here, so
                                    // a promise, once made, stays pending: wake.hpp's expiry only saves wakes)
  uint64_t lseq = 0, lwaiters = 0;  // the learner's wake word
};

struct Actor {
  int pc = 0;
  bool asleep = false;
  uint64_t sleep_seq = 0;
  bool waiting = false;  // registered as a waiter (the learner); waiting for the limiter (a writer)
  // scratch
  uint64_t v = 0, count = 0, s = 0;
  std::size_t e = 0;
};

struct Model {
  detail::LimiterSettings limit;
  uint64_t batch;
  Shared sh;
  std::vector<Actor> writers;
  Actor learner;

  Model(std::size_t w, const RateLimit& r, uint64_t b) : limit{r, 0}, batch(b), writers(w) {
    sh.head.assign(w, 0);
    sh.reserved.assign(w, 0);
  }

  uint64_t published() const {
    uint64_t t = 0;
    for (uint64_t h : sh.head) t += h;
    return t;
  }
  uint64_t admitted() const {
    uint64_t t = 0;
    for (std::size_t i = 0; i < sh.head.size(); ++i) t += std::max(sh.head[i], sh.reserved[i]);
    return t;
  }

  // Writer i pushes one step per call to its own env i.
  //  0: v = admit_seq, s = samples   1..: count env by env   2: verdict   3: reserve   4: CAS   5: publish
  //  6: notify learner (fence, waiters check, bump)    wait path, every round: 10 promise to re-check (the CAS),
  //  11 seq = wseq, then 0..4 with waiting set, 12 sleep if wseq == seq.
  void step_writer(std::size_t i) {
    Actor& a = writers[i];
    switch (a.pc) {
      case 0: a.v = sh.admit_seq; a.s = sh.samples; a.count = 0; a.e = 0; a.pc = 1; break;
      case 1:
        a.count += std::max(sh.head[a.e], sh.reserved[a.e]);
        if (++a.e == sh.head.size()) a.pc = 2;
        break;
      case 2:
        if (detail::insert_verdict(limit, a.count, a.s, 1).allowed()) {
          a.pc = 3;
        } else {
          a.pc = a.waiting ? 12 : 10;
        }
        break;
      case 3: sh.reserved[i] = sh.head[i] + 1; a.pc = 4; break;
      case 4:
        if (sh.admit_seq == a.v) {
          ++sh.admit_seq;
          a.waiting = false;  // nothing to take back: the promise runs out by itself
          a.pc = 5;
        } else {
          sh.reserved[i] = sh.head[i];  // withdraw, count again
          a.pc = 0;
        }
        break;
      case 5: ++sh.head[i]; a.pc = 6; break;
      case 6:
        if (sh.lwaiters != 0) ++sh.lseq;  // notify_waiters: wakes the learner
        a.pc = 0;
        break;
      case 10: sh.wpromise = 1; a.waiting = true; a.pc = 11; break;
      case 11: a.sleep_seq = sh.wseq; a.pc = 0; break;  // then the admission attempt
      case 12:
        if (sh.wseq == a.sleep_seq) a.asleep = true;  // FUTEX_WAIT
        a.pc = 10;
        break;
    }
  }

  //  0: s = samples, count   1: verdict   2: samples += B   3: notify writers (while a promise is pending)
  //  wait path: 10 waiters++,
  //  11 seq = lseq, then 0..1 with waiting set, 12 sleep if lseq == seq.
  void step_learner() {
    Actor& a = learner;
    switch (a.pc) {
      case 0: a.count = 0; a.e = 0; a.pc = 1; break;
      case 1:
        a.count += sh.head[a.e];
        if (++a.e == sh.head.size()) a.pc = 2;
        break;
      case 2:
        if (detail::sample_verdict(limit, a.count, a.count, sh.samples, batch).allowed()) {
          if (a.waiting) {
            --sh.lwaiters;
            a.waiting = false;
          }
          a.pc = 3;
        } else {
          a.pc = a.waiting ? 12 : 10;
        }
        break;
      case 3: sh.samples += batch; a.pc = 4; break;
      case 4:
        if (sh.wpromise != 0) ++sh.wseq;  // count_samples' notify
        a.pc = 0;
        break;
      case 10: ++sh.lwaiters; a.waiting = true; a.pc = 11; break;
      case 11: a.sleep_seq = sh.lseq; a.pc = 0; break;
      case 12:
        if (sh.lseq == a.sleep_seq) a.asleep = true;
        a.pc = 11;
        break;
    }
  }

  void wake_sleepers() {
    for (Actor& a : writers) {
      if (a.asleep && sh.wseq != a.sleep_seq) a.asleep = false;
    }
    if (learner.asleep && sh.lseq != learner.sleep_seq) learner.asleep = false;
  }
};

}  // namespace model

TEST_CASE("model: no interleaving drawn loses a wake-up or takes the published error outside its bounds") {
  struct Config {
    std::size_t writers;
    RateLimit limit;
    uint64_t batch;
  };
  const Config configs[] = {
      {3, RateLimit::ratio(1.0, 2, 4.0), 4},   // B + spi = 5 <= 8
      {2, RateLimit::ratio(4.0, 1, 4.0), 4},   // 8 <= 8: the tightest that still progresses
      {3, RateLimit::ratio(0.5, 4, 2.0), 3},   // fractional ratio
  };
  const int runs = static_cast<int>(env_seconds("SHMREPLAY_MODEL_RUNS", 3000));
  uint64_t steps_checked = 0;
  uint64_t samples_seen = 0;
  for (const Config& c : configs) {
    for (int run = 0; run < runs; ++run) {
      model::Model m(c.writers, c.limit, c.batch);
      std::mt19937_64 rng(static_cast<uint64_t>(run) * 7919 + c.writers);
      for (int step = 0; step < 600; ++step) {
        std::vector<int> runnable;
        for (std::size_t i = 0; i < c.writers; ++i) {
          if (!m.writers[i].asleep) runnable.push_back(static_cast<int>(i));
        }
        if (!m.learner.asleep) runnable.push_back(-1);
        if (runnable.empty()) {
          FAIL("every actor sleeps: a lost wake-up (run ", run, ", step ", step, ", ", c.limit.to_string(), ")");
        }
        const int who = runnable[rng() % runnable.size()];
        if (who < 0) {
          m.step_learner();
        } else {
          m.step_writer(static_cast<std::size_t>(who));
        }
        m.wake_sleepers();
        const double error = detail::limiter_error(m.limit, m.published(), m.sh.samples);
        if (error > c.limit.max_diff) {
          FAIL("the published error ", error, " exceeds max_diff ", c.limit.max_diff, " (run ", run, ")");
        }
        if (m.sh.samples > 0 && error < c.limit.min_diff) {
          FAIL("the published error ", error, " is below min_diff ", c.limit.min_diff, " (run ", run, ")");
        }
        ++steps_checked;
      }
      samples_seen += m.sh.samples;
    }
  }
  MESSAGE(steps_checked, " protocol steps checked, ", samples_seen, " rows sampled in the model");
  CHECK(samples_seen > 0);
}
