// tests/priorities/sequences.cpp: sequence priorities (CreateOptions::sequence_priority_length,
// SampleOptions::sequence_priority_eta): each start's window leaves equal eta-free max and mean of its sequence's
// step weights after a writer and two learners changed them at once (and every window tree node the sum of its
// children); draws of three learner ranks follow eta * max + (1 - eta) * mean (chi-square, with the start's own
// priority rejected); the refusals; and stale windows and fresh sums that a killed writer or learner left are
// refreshed by the party that takes its role over.
// Part of test_priorities (tests/CMakeLists.txt); its helpers are in priorities_helpers.hpp.
#include "priorities_helpers.hpp"

#include "detail/protocol/sequence_priorities.hpp"

namespace {

// The window of start q from the step leaves, as the definition says: the stored steps [q, q + L) (tagged leaves).
struct Window {
  bool stored = false;
  double max = 0;
  double mean = 0;
};
Window model_window(Buffer& buf, uint64_t e, uint64_t q, uint64_t length) {
  const detail::PriorityTreeView steps = detail::priority_tree_of(std::as_const(segment_of(buf)), e);
  const uint64_t head = segment_of(buf).env_control(e).head.load();
  Window w;
  if (q >= head || q + buf.capacity() < head) return w;
  double sum = 0;
  uint64_t n = 0;
  for (uint64_t s = q; s < std::min(q + length, head); ++s) {
    const double x = detail::slot_weight(steps, s);
    w.max = std::max(w.max, x);
    sum += x;
    ++n;
  }
  w.stored = true;
  w.mean = static_cast<double>(static_cast<float>(sum / static_cast<double>(n)));
  return w;
}

// Every stored start's window leaves against the model, and every window tree node the sum of its children.
void check_windows(Buffer& buf, uint64_t length) {
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    const detail::SequenceTrees t = detail::sequence_trees_of(segment_of(buf), e);
    const uint64_t head = segment_of(buf).env_control(e).head.load();
    for (uint64_t q = head > buf.capacity() ? head - buf.capacity() : 0; q < head; ++q) {
      const Window w = model_window(buf, e, q, length);
      CAPTURE(e);
      CAPTURE(q);
      REQUIRE(w.stored);
      CHECK(detail::slot_weight(t.max, q) == w.max);
      CHECK(detail::slot_weight(t.mean, q) == w.mean);
    }
    CHECK(check_sums(t.max).empty());
    CHECK(check_sums(t.mean).empty());
  }
}

}  // namespace

TEST_CASE("sequence priorities stay exact while a writer pushes and two learners update priorities at once: every "
          "window leaf is its sequence's max and mean step weight, every node the sum of its children") {
  // (The writer pushes until the learners have made 500 updates, so that their refreshes overlap its own.)
  SegmentGuard guard(unique_name("seqprio"));
  constexpr uint64_t kLength = 5;
  Buffer buf = Buffer::create(guard.name(), 2, 64, kSchema,
                              {.priority_exponent = 1.0, .sequence_priority_length = kLength, .max_learners = 3});
  CHECK(buf.sequence_priority_length() == kLength);
  std::atomic<bool> writing{true};
  std::atomic<uint64_t> updates{0};
  std::thread writer([&] {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    std::mt19937_64 gen(3);
    for (int s = 0; s < 3000 || updates < 500; ++s) {  // until the learners have updated while it pushed
      for (uint64_t e = 0; e < 2; ++e) push(w, buf, e, static_cast<float>(gen() % 16) * 0.25f);
    }
    writing = false;
  });
  std::vector<std::thread> learners;
  for (uint64_t rank = 1; rank < 3; ++rank) {
    learners.emplace_back([&, rank] {
      Sampler s(buf, {.rank = rank});
      std::mt19937_64 gen(rank);
      std::vector<uint64_t> envs, steps;
      std::vector<float> prios;
      while (writing) {
        envs.clear();
        steps.clear();
        prios.clear();
        const uint64_t e = gen() % 2;
        const uint64_t head = s.sizes(e).head;
        if (head < 20) continue;
        const uint64_t first = head - 1 - gen() % 40;  // a run of up to 8 recent steps, some overwritten meanwhile
        for (uint64_t k = 0; k < 1 + gen() % 8 && first + k < head; ++k) {
          envs.push_back(e);
          steps.push_back(first + k);
          prios.push_back(static_cast<float>(gen() % 16) * 0.5f);
        }
        s.update_priorities(envs, steps, prios);
        ++updates;
      }
    });
  }
  writer.join();
  for (std::thread& t : learners) t.join();
  check_windows(buf, kLength);
}

TEST_CASE("prioritized draws of three learner ranks with sequence priorities follow eta * max + (1 - eta) * mean of "
          "each sequence's step weights (chi-square), and the start's own priority is rejected") {
  SegmentGuard guard(unique_name("seqdraw"));
  constexpr uint64_t kLength = 4;
  const double alpha = 0.5;
  Buffer buf = Buffer::create(guard.name(), 3, 16, kSchema,
                              {.priority_exponent = alpha, .sequence_priority_length = kLength, .max_learners = 3});
  {
    Writer w(buf, std::vector<uint64_t>{0, 1, 2});
    std::mt19937_64 gen(8);
    const int steps[3] = {21, 9, 3};  // env 0 wraps; env 2 holds fewer steps than a sequence
    for (uint64_t e = 0; e < 3; ++e) {
      for (int s = 0; s < steps[e]; ++s) push(w, buf, e, static_cast<float>(1 + gen() % 9));
    }
    Sampler updater(buf, {.rank = 0});
    updater.update_priorities(std::vector<uint64_t>{0, 0, 1}, std::vector<uint64_t>{15, 16, 4},
                              std::vector<float>{40.0f, 0.0f, 25.0f});
  }
  for (const double eta : {0.9, 0.3}) {
    CAPTURE(eta);
    std::vector<std::pair<uint64_t, uint64_t>> cells;
    std::vector<double> prob, own;
    double total = 0;
    double own_total = 0;
    for (uint64_t e = 0; e < 3; ++e) {
      const uint64_t head = segment_of(buf).env_control(e).head.load();
      for (uint64_t q = head > 16 ? head - 16 : 0; q < head; ++q) {
        const Window w = model_window(buf, e, q, kLength);
        cells.emplace_back(e, q);
        prob.push_back(eta * w.max + (1 - eta) * w.mean);
        own.push_back(detail::slot_weight(detail::priority_tree_of(std::as_const(segment_of(buf)), e), q));
        total += prob.back();
        own_total += own.back();
      }
    }
    for (double& p : prob) p /= total;
    for (double& p : own) p /= own_total;
    const SampleOptions opts{.prioritized = true, .sequence_priority_eta = eta};
    CHECK(Sampler(buf).total_weight(View::replay, kLength, 0.0, opts) == doctest::Approx(total).epsilon(1e-9));
    std::vector<std::vector<uint64_t>> counts(3, std::vector<uint64_t>(cells.size(), 0));
    constexpr std::size_t kRows = 500;
    constexpr int kCalls = 40;
    std::vector<std::thread> ranks;
    for (uint64_t r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        Sampler s(buf, {.rank = r});
        Rng rng = rank_rng(77, r);
        SampleBatch out;
        for (int c = 0; c < kCalls; ++c) {
          s.sample(View::replay, kRows, kLength, 0.0, rng, out, opts);
          for (std::size_t row = 0; row < kRows; ++row) {
            const auto it = std::find(cells.begin(), cells.end(), std::pair{out.env_ids()[row], out.start_steps()[row]});
            if (it != cells.end()) ++counts[r][static_cast<std::size_t>(it - cells.begin())];
          }
        }
      });
    }
    for (std::thread& t : ranks) t.join();
    std::vector<uint64_t> all(cells.size(), 0);
    for (const auto& c : counts) {
      for (std::size_t i = 0; i < c.size(); ++i) all[i] += c[i];
    }
    const double n = 3.0 * kRows * kCalls;
    std::size_t df = 0;
    for (const double p : prob) df += p > 0 ? 1u : 0u;
    const double bound = chi_square_bound(static_cast<double>(df - 1));
    CHECK(std::accumulate(all.begin(), all.end(), uint64_t{0}) == static_cast<uint64_t>(n));
    CHECK(chi_square(all, prob, n) < bound);
    CHECK(chi_square(all, own, n) > bound);  // a draw by the start's own priority: the test can tell
  }
}

TEST_CASE("sequence priorities refuse what they cannot do, with clear errors") {
  SegmentGuard guard(unique_name("seqbad"));
  std::string message;
  CHECK(error_of([&] { Buffer::create(guard.name(), 1, 8, kSchema, {.sequence_priority_length = 4}); }, &message) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(message.find("sequence_priority_length is 4") != std::string::npos);
  CHECK(error_of([&] {
          Buffer::create(guard.name(), 1, 8, kSchema, {.priority_exponent = 1.0, .sequence_priority_length = 9});
        }, &message) == static_cast<int>(Errc::invalid_argument));
  CHECK(message.find("capacity, 8") != std::string::npos);
  Buffer buf = Buffer::create(guard.name(), 1, 8, kSchema, {.priority_exponent = 1.0, .sequence_priority_length = 3});
  Writer w(buf, std::vector<uint64_t>{0});
  for (int i = 0; i < 5; ++i) push(w, buf, 0, 1.0f);
  Sampler s(buf);
  Rng rng(1);
  SampleBatch b;
  for (const double eta : {-0.1, 1.5, std::nan("")}) {
    CHECK(error_of([&] { s.sample(View::replay, 2, 3, 0.0, rng, b, {.prioritized = true, .sequence_priority_eta = eta}); },
                   &message) == static_cast<int>(Errc::invalid_argument));
    CHECK(message.find("sequence_priority_eta") != std::string::npos);
  }
  CHECK(error_of([&] {
          s.sample(View::replay, 2, 3, 0.0, rng, b, {.prioritized = true, .zero_on_sample = true});
        }, &message) == static_cast<int>(Errc::invalid_argument));
  CHECK(message.find("zero_on_sample") != std::string::npos);
  // Another sequence length draws by the start's own priority, as without sequence priorities.
  s.sample(View::replay, 2, 2, 0.0, rng, b, {.prioritized = true, .zero_on_sample = true});
}

TEST_CASE("window and fresh-step trees left stale by a killed writer or learner are refreshed by whoever takes its "
          "role over") {
  SegmentGuard guard(unique_name("seqrepair"));
  constexpr uint64_t kLength = 4;
  const double inf = std::numeric_limits<double>::infinity();
  Buffer buf = Buffer::create(guard.name(), 2, 16, kSchema,
                              {.priority_exponent = 1.0, .initial_priority = inf, .sequence_priority_length = kLength});
  {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    for (int i = 0; i < 40; ++i) push(w, buf, static_cast<uint64_t>(i % 2), static_cast<float>(1 + i % 5));
  }
  check_windows(buf, kLength);
  const detail::SequenceTrees t = detail::sequence_trees_of(segment_of(buf), 0);
  const detail::PriorityTree fresh = detail::fresh_tree_of(segment_of(buf), 0);
  // Stale window leaves, and stale sums above a fresh-tree slot, as a party killed inside its refresh or walk leaves.
  const auto scribble = [&](uint64_t first, uint64_t last, uint64_t fresh_slot) {
    for (uint64_t q = first; q <= last; ++q) {
      t.max.words[t.max.leaves + q % 16].store(detail::make_leaf(q, 1e6));
      t.mean.words[t.mean.leaves + q % 16].store(detail::make_leaf(q, 1e6));
    }
    for (uint64_t n = (fresh.leaves + fresh_slot) / 2; n >= 1; n /= 2) fresh.words[n].store(std::bit_cast<uint64_t>(1e9));
  };
  const auto windows_hold = [&](uint64_t first, uint64_t last) {
    double max = 0;
    double mean = 0;
    for (uint64_t q = first; q <= last; ++q) {
      REQUIRE(detail::window_of(t.steps, kLength, q, max, mean));
      CHECK(detail::slot_weight(t.max, q) == max);
      CHECK(detail::slot_weight(t.mean, q) == static_cast<double>(static_cast<float>(mean)));
    }
    CHECK(check_sums(t.max).empty());
    CHECK(check_sums(t.mean).empty());
    CHECK(check_sums(fresh).empty());
  };
  // A writer killed inside its refresh of step `head`, after its step leaf: a child reserves the step and stops;
  // the leaf and stale windows are what its death leaves.
  const pid_t child = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Writer w(b, std::vector<uint64_t>{0});
    StepSlot slot = w.reserve(0);
    for (;;) ::pause();
  });
  const uint64_t head = segment_of(buf).env_control(0).head.load();
  while ((segment_of(buf).env_control(0).claimed.load() & layout::kClaimMask) != head + 1) std::this_thread::yield();
  detail::set_new_priority(t.steps, head, 3.0);
  scribble(head - kLength + 1, head - 1, head % 16);
  REQUIRE(kill_and_reap(child));
  {
    Writer replacement(buf, std::vector<uint64_t>{0});  // takes the dead lease over and redoes the refresh
    CHECK(replacement.takeovers() == 1);
    windows_hold(head - kLength + 1, head);
  }
  // A learner killed inside update_priorities' refresh: its slot's walk word names the env.
  const pid_t doomed = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Sampler s(b);
    for (;;) ::pause();
  });
  while (segment_of(buf).global_control().learner_lease.load() == 0) std::this_thread::yield();
  scribble(8, 12, 3);
  segment_of(buf).global_control().priority_walk.store((1ull << 40) | 3);  // env 0, slot 3
  REQUIRE(kill_and_reap(doomed));
  Sampler next(buf);
  CHECK(segment_of(buf).global_control().priority_walk.load() == 0);
  windows_hold(8, 12);
}
