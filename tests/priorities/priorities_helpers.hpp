// tests/priorities/priorities_helpers.hpp: what the parts of test_priorities share (tests/CMakeLists.txt builds
// them into one executable): a sum tree in private memory, the check that every node is the sum of its children,
// and a push with a priority.
// test_priorities (layout 1.3): the per-env sum trees (lib/detail/protocol/priorities) in private memory, their
// concurrent walks, prioritized sampling against a reference model (chi-square, with a wrong alpha rejected; the
// importance weights exactly), dropped updates of overwritten steps, argument errors, and the repair of a walk
// that a killed writer or learner left half done.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "detail/protocol/priorities.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

namespace {

// A tree in private memory.
struct LocalTree {
  explicit LocalTree(uint64_t capacity)
      : words(2 * std::bit_ceil(capacity)), tree{words.data(), std::bit_ceil(capacity), capacity} {}
  std::vector<std::atomic<uint64_t>> words;
  detail::PriorityTree tree;
};

// Every internal node equals the sum of its children (bit for bit: that is how they are computed).
inline std::string check_sums(const detail::PriorityTree& t) {
  for (uint64_t n = 1; n < t.leaves; ++n) {
    const auto value = [&](uint64_t i) {
      const uint64_t w = t.words[i].load();
      return i >= t.leaves ? detail::leaf_weight(w) : std::bit_cast<double>(w);
    };
    if (value(n) != value(2 * n) + value(2 * n + 1)) {
      return fmt::format("node {}: {} != {} + {}", n, value(n), value(2 * n), value(2 * n + 1));
    }
  }
  return "";
}

const Schema kSchema = Schema::parse("env:u64 step:u64");

// Pushes one step of env `e` with priority p (its fields are its own env and step).
inline void push(Writer& w, Buffer& b, uint64_t e, float p) {
  const uint64_t step = segment_of(b).env_control(e).head.load();
  const uint64_t ids[1] = {e};
  const float prio[1] = {p};
  const FieldBytes fields[2] = {field_bytes(std::span<const uint64_t>(&e, 1)),
                                field_bytes(std::span<const uint64_t>(&step, 1))};
  w.push(std::span<const uint64_t>(ids, 1), fields, std::span<const float>(prio, 1));
}

// Pushes one step of env `e` without a priority: it enters at the buffer's initial priority.
inline void push_unprioritized(Writer& w, uint64_t e) {
  StepSlot slot = w.reserve(e);
  slot.commit();
}

// Three learner ranks sampling prioritized batches of `rows` single steps with `options` until `writing` is false and
// a call finds nothing left (empty_view), each call's rows recorded; returns how many times each (env, step) was
// returned, over every rank. An empty_view while the writer runs is waited out. (zero_on_sample.cpp, initial.cpp)
inline std::map<std::pair<uint64_t, uint64_t>, int> drain_ranks(Buffer& buf, const std::atomic<bool>& writing,
                                                               std::size_t rows, const SampleOptions& options) {
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> got(3);
  std::vector<std::string> failures(3);  // an unexpected error of a rank's thread, reported on the test's thread
  std::vector<std::thread> learners;
  for (uint64_t rank = 0; rank < 3; ++rank) {
    learners.emplace_back([&, rank] {
      Sampler s(buf, {.rank = rank});
      Rng rng = rank_rng(9, rank);
      SampleBatch out;
      for (;;) {
        const bool last = !writing;  // read before the call: a call after the writer ended drains the rest
        try {
          s.sample(View::replay, rows, 1, 0.0, rng, out, options);
        } catch (const Error& e) {
          // contended: three ranks racing for the last few steps can each lose every round of one call (each
          // retry redraws from a snapshot whose steps another rank took meanwhile); the next call goes on.
          const bool again = e.code() == make_error_code(Errc::contended);
          if (!again && e.code() != make_error_code(Errc::empty_view)) {
            failures[rank] = e.what();
            return;
          }
          if (last && !again) return;  // nothing left to take
          std::this_thread::yield();
          continue;
        }
        for (std::size_t r = 0; r < rows; ++r) got[rank].emplace_back(out.env_ids()[r], out.start_steps()[r]);
      }
    });
  }
  for (std::thread& t : learners) t.join();
  for (const std::string& f : failures) CHECK_MESSAGE(f.empty(), f);
  std::map<std::pair<uint64_t, uint64_t>, int> times;
  for (const auto& ranks_rows : got) {
    for (const auto& cell : ranks_rows) ++times[cell];
  }
  return times;
}

// How many cells of `times` were returned more than once.
inline uint64_t returned_twice(const std::map<std::pair<uint64_t, uint64_t>, int>& times) {
  uint64_t twice = 0;
  for (const auto& [cell, k] : times) twice += k > 1 ? 1u : 0u;
  return twice;
}

}  // namespace
