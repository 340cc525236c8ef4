// tests/priorities/trees.cpp: the per-env sum trees (lib/detail/protocol/priorities) in private memory: exact range
// weights and draws, two parties walking one tree at once, and a walk whose node changed under it.
// Part of test_priorities (tests/CMakeLists.txt); its helpers are in priorities_helpers.hpp.
#include "priorities_helpers.hpp"

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
  // re-read; docs/design/priorities.md, "Priorities", has the argument that the re-read closes it, and the next test
  // makes
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
