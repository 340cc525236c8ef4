// Priorities (layout 1.3): the per-env sum trees (lib/detail/protocol/priorities) in private memory, their
// concurrent walks, prioritized sampling against a reference model (chi-square, with a wrong alpha rejected; the
// importance weights exactly), dropped updates of overwritten steps, argument errors, and the repair of a walk
// that a killed writer or learner left half done.
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
#include <memory>
#include <new>
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
std::string check_sums(const detail::PriorityTree& t) {
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
void push(Writer& w, Buffer& b, uint64_t e, float p) {
  const uint64_t step = b.segment().env_control(e).head.load();
  const uint64_t ids[1] = {e};
  const float prio[1] = {p};
  const FieldBytes fields[2] = {field_bytes(std::span<const uint64_t>(&e, 1)),
                                field_bytes(std::span<const uint64_t>(&step, 1))};
  w.push(std::span<const uint64_t>(ids, 1), fields, std::span<const float>(prio, 1));
}

}  // namespace

TEST_CASE("the sum tree's range weights and draws are exact for any range, wrapped or not") {
  std::mt19937_64 rng(3);
  for (const uint64_t cap : {1u, 2u, 5u, 8u, 13u}) {
    LocalTree lt(cap);
    std::vector<double> w(cap);
    for (uint64_t s = 0; s < cap; ++s) {
      w[s] = static_cast<double>(rng() % 5) * 0.25;  // exact in f32 too
      detail::set_new_priority(lt.tree, s, w[s]);
    }
    CHECK(check_sums(lt.tree) == "");
    for (uint64_t lo = 0; lo < 2 * cap; ++lo) {
      for (uint64_t n = 0; n <= cap; ++n) {
        double expect = 0;
        for (uint64_t p = lo; p < lo + n; ++p) expect += w[p % cap];
        CHECK(detail::range_weight(lt.tree, lo, lo + n) == doctest::Approx(expect));
        // Sweeping u over [0, total) finds each positive-weight step for exactly its share of u.
        if (expect <= 0) continue;
        // (A view of the whole ring is walked from the ring's slot 0 instead of from lo: one descent from the
        // root, the same distribution.)
        const uint64_t from = n == cap ? lo + (cap - lo % cap) % cap : lo;
        for (uint64_t p = from; p < from + n; ++p) {
          double before = 0;
          for (uint64_t q = from; q < p; ++q) before += w[q % cap];
          if (w[p % cap] <= 0) continue;
          const uint64_t step = detail::find_step(lt.tree, lo, lo + n, before + w[p % cap] / 2);
          CHECK(step >= lo);
          CHECK(step < lo + n);
          CHECK(step % cap == p % cap);
        }
      }
    }
  }
}

TEST_CASE("two parties walking one tree at once leave every node equal to the sum of its children") {
  // The writer sets new leaves and the learner updates stored ones, each walking to the root with no lock, both
  // as fast as they can for a while; afterwards the sums are exact (priorities.hpp's argument). A small tree, so
  // that the walks meet below the root. (The race this guards against, a walk that summed stale children storing
  // last, has a window of nanoseconds at the very end of a run: this test rarely catches a walk without the
  // re-read; docs/design.md, "Priorities", has the argument that the re-read closes it, and the next test makes
  // that interleaving deterministic.)
  const uint64_t cap = 4;
  int stale_rounds = 0;
  for (int round = 0; round < 5; ++round) {
    LocalTree lt(cap);
    layout::EnvControl env{};
    std::atomic<uint64_t> walk_word{0};
    std::atomic<int> started{0};
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      started.fetch_add(1);
      while (started.load() < 2) {
      }
      for (uint64_t s = 0; !stop.load(std::memory_order_relaxed); ++s) {
        env.claimed.store(s + 1);
        detail::set_new_priority(lt.tree, s, static_cast<double>((s * 7919) % 101) / 10);
        env.head.store(s + 1);
      }
    });
    std::thread learner([&] {
      std::mt19937_64 rng(static_cast<uint64_t>(round));
      started.fetch_add(1);
      while (started.load() < 2) {
      }
      while (!stop.load(std::memory_order_relaxed)) {
        const uint64_t head = env.head.load();
        if (head == 0) continue;
        const uint64_t step = head - 1 - rng() % std::min<uint64_t>(head, cap);
        detail::update_priority(lt.tree, env, 0, step, static_cast<double>(rng() % 50) / 7, walk_word);
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop.store(true);
    writer.join();
    learner.join();
    const std::string bad = check_sums(lt.tree);
    if (!bad.empty()) ++stale_rounds;
    CHECK_MESSAGE(bad == "", bad);
    CHECK(walk_word.load() == 0);
  }
  CHECK(stale_rounds == 0);
}

namespace {

// The interleaving of the walk test below: the tree's page, and the walk that the SIGSEGV handler runs.
struct PausedWalk {
  static inline void* page = nullptr;
  static inline std::size_t page_bytes = 0;
  static inline const detail::PriorityTree* tree = nullptr;
  static inline std::atomic<int> faults{0};
};

// On the faulting thread, between the loads of a walk and its store: makes the page writable (the store then
// runs when the handler returns) and, the first time, sets leaf 1 and walks it to the root.
void run_other_walk(int, siginfo_t*, void*) {
  ::mprotect(PausedWalk::page, PausedWalk::page_bytes, PROT_READ | PROT_WRITE);
  if (PausedWalk::faults.fetch_add(1) == 0) {
    const detail::PriorityTree& t = *PausedWalk::tree;
    t.words[t.leaves + 1].store(detail::make_leaf(1, 5.0));
    detail::walk(t, 1);
  }
}

}  // namespace

TEST_CASE("a walk whose node changed under it between its reads and its store walks that node again") {
  // The interleaving that the two-party test above rarely meets, made deterministic: walk A has read a node's
  // children and is about to store their sum when walk B changes the other child and walks through the node and
  // on to the root first; then A stores the sum it computed before B. A's re-read of the children must see B's
  // change and sum again, or the node (and the root) keep A's stale sum for good. The tree lives on a read-only
  // page, so A's first store faults; the SIGSEGV handler, on A's thread between A's loads and its store, makes the
  // page writable and runs B to the end, and A's store runs when the handler returns.
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer performs atomic stores inside its runtime, holding a lock of its own that B's stores take too.
  MESSAGE("skipped under ThreadSanitizer: a fault inside its atomic store cannot run another walk");
  return;
#endif
  const auto page_bytes = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* page = ::mmap(nullptr, page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED);
  auto* words = static_cast<std::atomic<uint64_t>*>(page);
  for (std::size_t i = 0; i < 8; ++i) new (words + i) std::atomic<uint64_t>(0);
  const detail::PriorityTree t{words, 4, 4};
  for (uint64_t s = 0; s < 4; ++s) detail::set_new_priority(t, s, 1.0);
  REQUIRE(check_sums(t) == "");
  t.words[t.leaves + 0].store(detail::make_leaf(0, 2.0));  // A's leaf; A's walk starts at node 2

  PausedWalk::page = page;
  PausedWalk::page_bytes = page_bytes;
  PausedWalk::tree = &t;
  PausedWalk::faults = 0;
  struct sigaction sa {};
  struct sigaction old {};
  sa.sa_sigaction = run_other_walk;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGSEGV, &sa, &old) == 0);
  REQUIRE(::mprotect(page, page_bytes, PROT_READ) == 0);
  detail::walk(t, 0);  // walk A
  ::sigaction(SIGSEGV, &old, nullptr);
  CHECK(PausedWalk::faults.load() == 1);  // A was paused once, at its first store
  CHECK(check_sums(t) == "");
  CHECK(std::bit_cast<double>(t.words[1].load()) == 2.0 + 5.0 + 1.0 + 1.0);
  ::munmap(page, page_bytes);
}

TEST_CASE("prioritized samples draw starts by priority^alpha (chi-square, and a wrong alpha is rejected), with "
          "exact importance weights; total_weight is the sum of priority^alpha, priority_weights each step's") {
  SegmentGuard guard(unique_name("prio"));
  const double alpha = 0.7;
  const uint64_t cap = 8;
  Buffer buf = Buffer::create(guard.name(), 3, cap, kSchema, {.priority_exponent = alpha});
  CHECK(buf.has_priorities());
  CHECK(buf.priority_exponent() == alpha);
  Writer w(buf, std::vector<uint64_t>{0, 1, 2});
  std::mt19937_64 gen(5);
  std::map<std::pair<uint64_t, uint64_t>, double> priority;  // the model: (env, step) -> priority
  const auto push_random = [&](uint64_t e) {
    const float p = static_cast<float>(gen() % 9) * 0.5f;
    priority[{e, buf.segment().env_control(e).head.load()}] = p;
    push(w, buf, e, p);
  };
  for (int i = 0; i < 13; ++i) push_random(0);  // env 0 wraps
  for (int i = 0; i < 5; ++i) push_random(1);
  Sampler learner(buf);
  learner.reset_online_queue();
  for (int i = 0; i < 6; ++i) push_random(2);  // env 2: all online
  push_random(0);                              // and one online step of env 0
  // The learner updates some stored priorities.
  const std::vector<uint64_t> envs = {0, 1, 2};
  const std::vector<uint64_t> steps = {10, 2, 3};
  const std::vector<float> prios = {6.0f, 0.0f, 3.5f};
  const PriorityUpdateResult r = learner.update_priorities(envs, steps, prios);
  CHECK(r.applied == 3);
  CHECK(r.dropped == 0);
  for (std::size_t i = 0; i < envs.size(); ++i) priority[{envs[i], steps[i]}] = prios[i];
  {  // priority_weights: each stored step's priority^alpha (f32 leaves); -1 for overwritten and unpublished steps
    std::vector<uint64_t> es, ss;
    std::vector<double> expected;
    for (const auto& [cell, p] : priority) {
      const EnvSizes sz = learner.sizes(cell.first);
      es.push_back(cell.first);
      ss.push_back(cell.second);
      expected.push_back(cell.second + sz.replay >= sz.head ? std::pow(p, alpha) : -1.0);
    }
    es.push_back(1);
    ss.push_back(learner.sizes(1).head);  // not published yet
    expected.push_back(-1.0);
    std::vector<double> got(es.size());
    learner.priority_weights(es, ss, got);
    CHECK(std::count(expected.begin(), expected.end(), -1.0) == 7);  // env 0's 6 overwritten steps, one unpublished
    for (std::size_t i = 0; i < es.size(); ++i) {
      CAPTURE(es[i]);
      CAPTURE(ss[i]);
      CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-6));
    }
    std::vector<double> short_out(1);
    CHECK(error_of([&] { learner.priority_weights(es, ss, short_out); }) == static_cast<int>(Errc::size_mismatch));
  }

  for (const View view : {View::replay, View::online}) {
    CAPTURE(to_string(view));
    // The model's cells: every step of the view with its probability.
    std::vector<std::pair<uint64_t, uint64_t>> cells;
    std::vector<double> weight;
    for (uint64_t e = 0; e < 3; ++e) {
      const EnvSizes sz = learner.sizes(e);
      const uint64_t n = view == View::replay ? sz.replay : sz.online;
      for (uint64_t s = sz.head - n; s < sz.head; ++s) {
        cells.emplace_back(e, s);
        weight.push_back(std::pow(priority.at({e, s}), alpha));
      }
    }
    double total = 0;
    for (const double x : weight) total += x;
    // total_weight is this sum: the normaliser of the draws checked below (stop changes a row's length, not its
    // weight), to the f32 precision of the tree's leaves.
    CHECK(learner.total_weight(view, 3, 0.0, {.prioritized = true}) == doctest::Approx(total).epsilon(1e-6));
    std::vector<double> prob, wrong;
    double wrong_total = 0;
    for (std::size_t i = 0; i < cells.size(); ++i) wrong_total += std::pow(priority.at(cells[i]), 1.0);
    for (std::size_t i = 0; i < cells.size(); ++i) {
      prob.push_back(weight[i] / total);
      wrong.push_back(std::pow(priority.at(cells[i]), 1.0) / wrong_total);
    }
    std::vector<uint64_t> counts(cells.size());
    Rng rng(11);
    SampleBatch batch;
    const SampleOptions opts{.prioritized = true, .importance_exponent = 0.5};
    const std::size_t rows = 500;
    const int calls = 100;
    for (int c = 0; c < calls; ++c) {
      learner.sample(view, rows, 3, 0.0, rng, batch, opts);
      double largest = 0;
      for (std::size_t row = 0; row < rows; ++row) {
        const auto cell = std::find(cells.begin(), cells.end(),
                                    std::pair{batch.env_ids()[row], batch.start_steps()[row]});
        REQUIRE(cell != cells.end());
        const std::size_t i = static_cast<std::size_t>(cell - cells.begin());
        REQUIRE(prob[i] > 0);  // a zero priority is never drawn
        ++counts[i];
        largest = std::max(largest, std::pow(static_cast<double>(cells.size()) * prob[i], -0.5));
        // The row's data is its own env's steps from the start on, masked at the head.
        const uint64_t head = learner.sizes(cell->first).head;
        for (std::size_t t = 0; t < 3; ++t) {
          const bool valid = cell->second + t < head;
          CHECK(batch.valid(row, t) == valid);
          if (valid) CHECK(batch.field_as<uint64_t>(1)[row * 3 + t] == cell->second + t);
        }
      }
      for (std::size_t row = 0; row < rows; ++row) {
        const auto cell = std::find(cells.begin(), cells.end(),
                                    std::pair{batch.env_ids()[row], batch.start_steps()[row]});
        const double nP = static_cast<double>(cells.size()) * prob[static_cast<std::size_t>(cell - cells.begin())];
        CHECK(batch.weights()[row] == doctest::Approx(std::pow(nP, -0.5) / largest).epsilon(1e-5));
      }
    }
    const double n = static_cast<double>(rows) * calls;
    std::size_t df = 0;
    for (const double p : prob) df += p > 0;
    const double bound = chi_square_bound(static_cast<double>(df - 1));
    CHECK(chi_square(counts, prob, n) < bound);
    CHECK(chi_square(counts, wrong, n) > bound);  // alpha = 1 instead of 0.7: the test can tell
  }
  // An unprioritized sample of the same buffer has weights of 1.
  Rng rng(1);
  SampleBatch batch;
  learner.sample(View::replay, 16, 2, 1.0, rng, batch);
  for (const float x : batch.weights()) CHECK(x == 1.0f);
}

TEST_CASE("a priority update for a step that was overwritten since it was sampled is dropped and counted") {
  SegmentGuard guard(unique_name("priodrop"));
  Buffer buf = Buffer::create(guard.name(), 1, 4, kSchema, {.priority_exponent = 1.0});
  Writer w(buf, std::vector<uint64_t>{0});
  for (int i = 0; i < 4; ++i) push(w, buf, 0, 1.0f);
  Sampler learner(buf);
  push(w, buf, 0, 2.0f);  // step 4 overwrites step 0's slot
  const std::vector<uint64_t> envs = {0, 0};
  const std::vector<uint64_t> steps = {0, 1};
  const std::vector<float> prios = {9.0f, 3.0f};
  const PriorityUpdateResult r = learner.update_priorities(envs, steps, prios);
  CHECK(r.applied == 1);
  CHECK(r.dropped == 1);
  CHECK(buf.segment().global_control().priority_updates.load() == 1);
  CHECK(buf.segment().global_control().priority_updates_dropped.load() == 1);
  const detail::PriorityTree tree{buf.segment().priority_tree(0), buf.priority_leaves(), buf.capacity()};
  CHECK(detail::slot_weight(tree, 4) == 2.0);  // step 4 kept its own priority
  CHECK(detail::slot_weight(tree, 1) == 3.0);
  CHECK(detail::range_weight(tree, 1, 5) == 2.0 + 3.0 + 1.0 + 1.0);
  // The largest priority ever given (3, from the update; 9 was dropped... but counted as given) is where new
  // steps enter: the running maximum is raised by every update call's largest priority.
  push(w, buf, 0, 1.0f);
  CHECK(detail::slot_weight(tree, 5) == 1.0);
}

TEST_CASE("steps pushed without a priority enter at the running maximum") {
  SegmentGuard guard(unique_name("priomax"));
  Buffer buf = Buffer::create(guard.name(), 1, 8, kSchema, {.priority_exponent = 0.5});
  Writer w(buf, std::vector<uint64_t>{0});
  const detail::PriorityTree tree{buf.segment().priority_tree(0), buf.priority_leaves(), buf.capacity()};
  const uint64_t zero = 0;
  w.push_one(0, {field_bytes(std::span<const uint64_t>(&zero, 1)), field_bytes(std::span<const uint64_t>(&zero, 1))});
  CHECK(detail::slot_weight(tree, 0) == 1.0);  // max starts at 1
  push(w, buf, 0, 16.0f);
  CHECK(detail::slot_weight(tree, 1) == 4.0);  // 16^0.5
  StepSlot slot = w.reserve(0);
  slot.commit();
  CHECK(detail::slot_weight(tree, 2) == 4.0);  // at the maximum, 16
  StepSlot given = w.reserve(0);
  given.set_priority(9.0);
  given.commit();
  CHECK(detail::slot_weight(tree, 3) == 3.0);
}

TEST_CASE("priorities refuse what they cannot do, with clear errors") {
  SegmentGuard plain_guard(unique_name("noprio"));
  Buffer plain = Buffer::create(plain_guard.name(), 1, 4, kSchema);
  CHECK_FALSE(plain.has_priorities());
  {
    Writer w(plain, std::vector<uint64_t>{0});
    std::string m;
    CHECK(error_of([&] { push(w, plain, 0, 1.0f); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("created without priorities") != std::string::npos);
    Sampler s(plain);
    Rng rng(1);
    SampleBatch b;
    CHECK(error_of([&] { s.sample(View::replay, 1, 1, 0, rng, b, {.prioritized = true}); }, &m) ==
          static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("without priorities") != std::string::npos);
    const uint64_t zero[1] = {0};
    double out[1];
    CHECK(error_of([&] { s.priority_weights(zero, zero, out); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("without priorities") != std::string::npos);
  }
  std::string m;
  CHECK(error_of([&] { Buffer::create(unique_name("badalpha"), 1, 4, kSchema, {.priority_exponent = -1.0}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("priority_exponent is -1") != std::string::npos);

  SegmentGuard guard(unique_name("prioerr"));
  Buffer buf = Buffer::create(guard.name(), 2, 4, kSchema, {.priority_exponent = 0.0});
  CHECK(buf.priority_exponent() == 0.0);
  Writer w(buf, std::vector<uint64_t>{0, 1});
  CHECK(error_of([&] { push(w, buf, 0, -1.0f); }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("priority -1 (position 0) is not a finite number >= 0") != std::string::npos);
  CHECK(buf.segment().env_control(0).head.load() == 0);  // nothing was pushed
  push(w, buf, 0, 1.0f);
  Sampler s(buf);
  Rng rng(1);
  SampleBatch b;
  CHECK(error_of([&] { s.sample(View::replay, 1, 1, 0, rng, b, {.period = 2, .prioritized = true}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("period = 2") != std::string::npos);
  CHECK(error_of([&] {
          s.sample(View::replay, 1, 1, 0, rng, b, {.prioritized = true, .importance_exponent = -0.5});
        }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("importance_exponent (beta) is -0.5") != std::string::npos);
  // distribution_power weighs a start by its remaining length, which a prioritized draw does not: refused, not
  // silently ignored.
  CHECK(error_of([&] { s.sample(View::replay, 1, 2, 1.0, rng, b, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("distribution_power = 1") != std::string::npos);
  CHECK(error_of([&] { (void)s.total_weight(View::replay, 2, 2.0, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("distribution_power = 2") != std::string::npos);
  CHECK(error_of([&] { s.sample_mixed(1, 0, 2, 0.5, rng, b, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  const std::vector<uint64_t> envs = {0, 1};
  const std::vector<uint64_t> steps = {0, 0};
  const std::vector<float> prios = {1.0f, 1.0f};
  CHECK(error_of([&] { s.update_priorities(envs, steps, prios); }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("step 0 of env 1") != std::string::npos);
  CHECK(m.find("never published") != std::string::npos);
  CHECK(error_of([&] { s.update_priorities(envs, steps, std::span<const float>(prios.data(), 1)); }, &m) ==
        static_cast<int>(Errc::size_mismatch));
  CHECK(buf.segment().global_control().priority_updates.load() == 0);  // nothing was set
}

TEST_CASE("a priority whose weight priority^alpha is past the largest f32 is refused, as given, at push, "
          "set_priority and update; nothing infinite enters a tree or the running maximum") {
  // alpha 1.5: 1e27^1.5 = 3.2e40, past the f32 leaf's 3.4e38. Accepted, it made the leaf and the total infinite,
  // and every prioritized sample after it failed with a false "ring too small for the write rate".
  SegmentGuard guard(unique_name("priooverflow"));
  Buffer buf = Buffer::create(guard.name(), 1, 8, kSchema, {.priority_exponent = 1.5});
  Writer w(buf, std::vector<uint64_t>{0});
  push(w, buf, 0, 2.0f);
  std::string m;
  CHECK(error_of([&] { push(w, buf, 0, 1e27f); }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("priority 1e+27 (position 0)") != std::string::npos);
  CHECK(m.find("priority^alpha") != std::string::npos);
  CHECK(buf.segment().env_control(0).head.load() == 1);  // nothing was pushed
  push(w, buf, 0, 4e25f);                      // 4e25^1.5 = 2.5e38: fits
  {
    StepSlot slot = w.reserve(0);
    CHECK(error_of([&] { slot.set_priority(1e39); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("priority 1e+39") != std::string::npos);  // the double as given, not its f32 "inf"
    CHECK(error_of([&] { slot.set_priority(1e27); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("priority 1e+27") != std::string::npos);
    CHECK(error_of([&] { slot.set_priority(-1.0); }, &m) == static_cast<int>(Errc::invalid_argument));
    CHECK(m.find("not a finite number >= 0") != std::string::npos);
    slot.set_priority(4.0);
    slot.commit();
  }
  Sampler s(buf, {.max_retry_rounds = 100});
  const std::vector<uint64_t> envs = {0, 0};
  const std::vector<uint64_t> steps = {0, 2};
  const std::vector<float> prios = {1.0f, 1e27f};
  CHECK(error_of([&] { s.update_priorities(envs, steps, prios); }, &m) == static_cast<int>(Errc::invalid_argument));
  CHECK(m.find("priority 1e+27 (position 1, env 0 step 2)") != std::string::npos);
  CHECK(buf.segment().global_control().priority_updates.load() == 0);  // nothing was set
  CHECK(detail::max_priority(buf.segment().global_control().max_priority) == doctest::Approx(4e25));
  Rng rng(1);
  SampleBatch b;
  s.sample(View::replay, 64, 1, 0.0, rng, b, {.prioritized = true});
  for (std::size_t row = 0; row < b.rows(); ++row) CHECK(std::isfinite(b.weights()[row]));
  CHECK(std::isfinite(s.total_weight(View::replay, 1, 0.0, {.prioritized = true})));
}

TEST_CASE("prioritized sampling of a view whose every step has priority 0 says so (empty_view), not contention; a "
          "positive priority whose weight underflows f32 is still drawn") {
  SegmentGuard guard(unique_name("priozero"));
  Buffer buf = Buffer::create(guard.name(), 2, 8, kSchema, {.priority_exponent = 1.5});
  Writer w(buf, std::vector<uint64_t>{0, 1});
  for (int i = 0; i < 3; ++i) push(w, buf, 0, 0.0f);
  for (int i = 0; i < 2; ++i) push(w, buf, 1, 0.0f);
  Sampler s(buf, {.max_retry_rounds = 100});
  Rng rng(1);
  SampleBatch b;
  std::string m;
  CHECK(error_of([&] { s.sample(View::replay, 4, 1, 0.0, rng, b, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::empty_view));
  CHECK(m.find("every stored step") != std::string::npos);
  CHECK(m.find("priority 0") != std::string::npos);
  CHECK(s.total_weight(View::replay, 1, 0.0, {.prioritized = true}) == 0.0);
  s.sample(View::replay, 4, 1, 0.0, rng, b);  // unprioritized: any stored step
  // 1e-35^1.5 = 3e-53, below the smallest positive f32: the weight is that (denorm_min), not 0.
  push(w, buf, 1, 1e-35f);
  s.sample(View::replay, 64, 1, 0.0, rng, b, {.prioritized = true, .importance_exponent = 1.0});
  for (std::size_t row = 0; row < b.rows(); ++row) {
    CHECK(b.env_ids()[row] == 1);
    CHECK(b.start_steps()[row] == 2);
    CHECK(b.weights()[row] == 1.0f);
  }
  const uint64_t e[1] = {1}, st[1] = {2};
  double weight[1];
  s.priority_weights(e, st, weight);
  CHECK(weight[0] == static_cast<double>(std::numeric_limits<float>::denorm_min()));
}

TEST_CASE("a prioritized view whose sums lose its weights beside far larger ones gives up saying so, not with "
          "\"ring too small for the write rate\"") {
  // A known limit: a view's total is a difference of two prefix sums (f64), so a view of small weights after a
  // weight over 2^53 times larger reads 0. No row is overwritten (no writer runs); the message must not say so.
  SegmentGuard guard(unique_name("prioprecision"));
  Buffer buf = Buffer::create(guard.name(), 1, 4, kSchema, {.priority_exponent = 1.0});
  Writer w(buf, std::vector<uint64_t>{0});
  push(w, buf, 0, 1e20f);
  Sampler s(buf, {.max_retry_rounds = 20});
  s.reset_online_queue();
  push(w, buf, 0, 1e-3f);
  Rng rng(1);
  SampleBatch b;
  std::string m;
  CHECK(error_of([&] { s.sample(View::online, 1, 1, 0.0, rng, b, {.prioritized = true}); }, &m) ==
        static_cast<int>(Errc::contended));
  CHECK(m.find("no start to draw from") != std::string::npos);
  CHECK(m.find("too small for the write rate") == std::string::npos);
}

TEST_CASE("a sum tree holding a weight that is not finite is reported as corruption, not contention") {
  // Every priority that enters is checked, so only a damaged segment has one: sampling says so, as does
  // total_weight (which would otherwise hand a learner of several buffers an infinite share).
  for (const double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(bad);
    SegmentGuard guard(unique_name("priocorrupt"));
    Buffer buf = Buffer::create(guard.name(), 2, 8, kSchema, {.priority_exponent = 1.0});
    Writer w(buf, std::vector<uint64_t>{0, 1});
    for (int i = 0; i < 3; ++i) push(w, buf, 0, 1.0f);
    push(w, buf, 1, 1.0f);
    const detail::PriorityTree tree{buf.segment().priority_tree(0), buf.priority_leaves(), buf.capacity()};
    tree.words[tree.leaves + 1].store(detail::make_leaf(1, bad));
    detail::rebuild(tree);
    Sampler s(buf, {.max_retry_rounds = 100});
    Rng rng(1);
    SampleBatch b;
    std::string m;
    CHECK(error_of([&] { s.sample(View::replay, 4, 1, 0.0, rng, b, {.prioritized = true}); }, &m) ==
          static_cast<int>(Errc::corrupt));
    CHECK(m.find("not a finite number") != std::string::npos);
    CHECK(error_of([&] { (void)s.total_weight(View::replay, 1, 0.0, {.prioritized = true}); }, &m) ==
          static_cast<int>(Errc::corrupt));
    s.sample(View::replay, 4, 1, 0.0, rng, b);  // unprioritized sampling does not read the trees
  }
}

TEST_CASE("importance weights are in [0, 1] for any beta, 1e9 included: the batch's least likely row weighs 1") {
  SegmentGuard guard(unique_name("priobeta"));
  Buffer buf = Buffer::create(guard.name(), 1, 8, kSchema, {.priority_exponent = 1.0});
  Writer w(buf, std::vector<uint64_t>{0});
  for (const float p : {1.0f, 2.0f, 4.0f}) push(w, buf, 0, p);
  Sampler s(buf);
  Rng rng(1);
  SampleBatch b;
  for (const double beta : {0.0, 0.5, 1.0, 1e9}) {
    CAPTURE(beta);
    s.sample(View::replay, 256, 1, 0.0, rng, b, {.prioritized = true, .importance_exponent = beta});
    bool rarest = false;
    for (std::size_t row = 0; row < b.rows(); ++row) {
      const uint64_t step = b.start_steps()[row];
      rarest |= step == 0;
      // (N P)^-beta over the largest, which is step 0's (priority 1): (1 / priority)^beta
      const double expected = std::pow(1.0 / static_cast<double>(1u << step), beta);
      CHECK(b.weights()[row] == doctest::Approx(expected).epsilon(1e-6));
    }
    REQUIRE(rarest);  // P = 1/7 per row
  }
}

TEST_CASE("a walk left half done by a killed writer or learner is redone by whoever takes its role over") {
  SegmentGuard guard(unique_name("priorepair"));
  const uint64_t cap = 16;
  Buffer buf = Buffer::create(guard.name(), 2, cap, kSchema, {.priority_exponent = 1.0});
  {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    for (int i = 0; i < 20; ++i) push(w, buf, static_cast<uint64_t>(i % 2), static_cast<float>(i % 5));
  }
  const detail::PriorityTree tree{buf.segment().priority_tree(0), buf.priority_leaves(), buf.capacity()};
  const auto scribble_path = [&](uint64_t slot) {  // what a walk killed before its first store leaves: stale sums
    for (uint64_t n = (tree.leaves + slot) / 2; n >= 1; n /= 2) tree.words[n].store(std::bit_cast<uint64_t>(1e9));
  };
  // A writer killed between its claim and its head store, after its leaf store: a child reserves a step of env 0
  // (claimed = head + 1) and stops; its walk is then undone, and it is killed.
  const pid_t child = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Writer w(b, std::vector<uint64_t>{0});
    StepSlot slot = w.reserve(0);
    for (;;) ::pause();
  });
  const uint64_t head = buf.segment().env_control(0).head.load();
  while ((buf.segment().env_control(0).claimed.load() & ~layout::kUpdateLockBit) != head + 1) std::this_thread::yield();
  scribble_path(head % cap);
  REQUIRE(kill_and_reap(child));
  CHECK(check_sums(tree) != "");
  {
    Writer replacement(buf, std::vector<uint64_t>{0});  // takes the dead lease over and redoes the walk
    CHECK(replacement.takeovers() == 1);
    CHECK(check_sums(tree) == "");
  }
  // A learner killed inside update_priorities: its walk is recorded in priority_walk.
  const pid_t doomed = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Sampler s(b);
    for (;;) ::pause();
  });
  while (buf.segment().global_control().learner_lease.load() == 0) std::this_thread::yield();
  scribble_path(3);
  buf.segment().global_control().priority_walk.store((1ull << 40) | 3);  // env 0, slot 3
  REQUIRE(kill_and_reap(doomed));
  CHECK(check_sums(tree) != "");
  {
    Sampler next(buf);
    CHECK(check_sums(tree) == "");
    CHECK(buf.segment().global_control().priority_walk.load() == 0);
  }
  // A damaged word (an env past the buffer) left by a dead learner is cleared without a walk.
  const pid_t damaged = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Sampler s(b);
    for (;;) ::pause();
  });
  while (buf.segment().global_control().learner_lease.load() == 0) std::this_thread::yield();
  buf.segment().global_control().priority_walk.store((7ull << 40) | 3);  // env 6 of 2
  REQUIRE(kill_and_reap(damaged));
  Sampler after(buf);
  CHECK(buf.segment().global_control().priority_walk.load() == 0);
  CHECK(check_sums(tree) == "");
}

TEST_CASE("writer processes pushing with priorities are SIGKILLed while the learner samples by priority and updates "
          "what it sampled: rows are sound, and afterwards every env's tree sums exactly its stored weights") {
  SegmentGuard guard(unique_name("priotorture"));
  const uint64_t num_envs = 6;
  const uint64_t cap = 32;
  Buffer buf = Buffer::create(guard.name(), num_envs, cap, kSchema, {.priority_exponent = 0.6});
  const auto writer_body = [&](std::vector<uint64_t> envs, uint64_t seed) {
    Buffer b = Buffer::open(guard.name());
    Writer w(b, envs);
    std::mt19937_64 rng(seed);
    for (;;) {
      const uint64_t e = envs[rng() % envs.size()];
      if (rng() % 4 == 0) {
        StepSlot slot = w.reserve(e);
        const uint64_t step = slot.step();
        std::memcpy(slot.field(0).data(), &e, 8);
        std::memcpy(slot.field(1).data(), &step, 8);
        if (rng() % 2) slot.set_priority(static_cast<double>(rng() % 100) / 10);
        slot.commit();
      } else {
        push(w, b, e, static_cast<float>(rng() % 100) / 10);
      }
    }
  };
  std::vector<std::vector<uint64_t>> slices = {{0, 2, 4}, {1, 3, 5}};
  std::vector<pid_t> writers;
  uint64_t seed = 1;
  for (const auto& slice : slices) writers.push_back(spawn([&, slice, s = seed++] { writer_body(slice, s); }));
  Sampler learner(buf);
  REQUIRE(learner.wait(View::replay, num_envs * 4, 10'000));
  Rng rng(3);
  SampleBatch batch;
  uint64_t rows = 0, bad = 0, kills = 0, applied = 0, dropped = 0;
  std::vector<float> prios;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  auto next_kill = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  while (std::chrono::steady_clock::now() < until) {
    const View view = rng() % 2 != 0 && learner.size(View::online) > 0 ? View::online : View::replay;
    learner.sample(view, 64, 4, 0.0, rng, batch, {.prioritized = true, .importance_exponent = 0.4});
    learner.reset_online_queue();
    for (std::size_t r = 0; r < batch.rows(); ++r, ++rows) {
      for (std::size_t t = 0; t < 4 && batch.valid(r, t); ++t) {
        bad += batch.field_as<uint64_t>(0)[r * 4 + t] != batch.env_ids()[r] ||
               batch.field_as<uint64_t>(1)[r * 4 + t] != batch.start_steps()[r] + t;
      }
      bad += !(batch.weights()[r] > 0 && batch.weights()[r] <= 1);
    }
    prios.resize(batch.rows());
    for (float& p : prios) p = static_cast<float>(rng() % 1000) / 100;
    const PriorityUpdateResult u = learner.update_priorities(batch.env_ids(), batch.start_steps(), prios);
    applied += u.applied;
    dropped += u.dropped;
    if (std::chrono::steady_clock::now() >= next_kill) {
      const std::size_t w = rng() % writers.size();
      CHECK(kill_and_reap(writers[w]));
      ++kills;
      writers[w] = spawn([&, w, s = seed++] { writer_body(slices[w], s); });
      next_kill = std::chrono::steady_clock::now() + std::chrono::milliseconds(10 + rng() % 60);
    }
  }
  for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
  MESSAGE(fmt::format("{} kills, {} rows checked, {} priority updates applied, {} dropped (overwritten)", kills, rows,
                      applied, dropped));
  CHECK(bad == 0);
  CHECK(kills > 0);
  // The last writers died unreplaced, possibly inside a walk: their replacement is what repairs it.
  Writer all(buf, std::vector<uint64_t>{0, 1, 2, 3, 4, 5});
  for (uint64_t e = 0; e < num_envs; ++e) {
    const detail::PriorityTree tree{buf.segment().priority_tree(e), buf.priority_leaves(), buf.capacity()};
    CHECK(check_sums(tree) == "");
    double leaves = 0;
    for (uint64_t s = 0; s < cap; ++s) leaves += detail::slot_weight(tree, s);
    CHECK(detail::range_weight(tree, 0, cap) == doctest::Approx(leaves));
  }
}

TEST_CASE("a checkpoint loaded into a buffer with priorities gives every loaded step the running maximum") {
  SegmentGuard guard(unique_name("prioload"));
  Buffer buf = Buffer::create(guard.name(), 2, 8, kSchema, {.priority_exponent = 1.0});
  {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    for (int i = 0; i < 11; ++i) push(w, buf, static_cast<uint64_t>(i % 2), static_cast<float>(i));
  }
  const std::string path = fmt::format("/tmp/{}.ckpt", guard.name());
  const std::unique_ptr<const char, void (*)(const char*)> rm(path.c_str(), [](const char* p) { ::unlink(p); });
  save_checkpoint(buf, path);
  load_checkpoint_into(buf, path);
  const double max = detail::max_priority(buf.segment().global_control().max_priority);
  CHECK(max == 10.0);
  for (uint64_t e = 0; e < 2; ++e) {
    const detail::PriorityTree tree{buf.segment().priority_tree(e), buf.priority_leaves(), buf.capacity()};
    CHECK(check_sums(tree) == "");
    const uint64_t head = buf.segment().env_control(e).head.load();
    CHECK(detail::range_weight(tree, head - std::min<uint64_t>(head, 8), head) ==
          doctest::Approx(max * static_cast<double>(std::min<uint64_t>(head, 8))));
  }
}
