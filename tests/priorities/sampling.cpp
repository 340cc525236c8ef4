// tests/priorities/sampling.cpp: prioritized sampling and priority updates: starts drawn by priority^alpha
// (chi-square), dropped updates of overwritten steps, the running maximum (for pushes and for loaded checkpoints),
// and the importance weights.
// Part of test_priorities (tests/CMakeLists.txt); its helpers are in priorities_helpers.hpp.
#include "priorities_helpers.hpp"

namespace {

using PriorityModel = std::map<std::pair<uint64_t, uint64_t>, double>;  // (env, step) -> priority

// priority_weights: each stored step's priority^alpha (f32 leaves); -1 for overwritten and unpublished steps.
void check_priority_weights(Sampler& learner, const PriorityModel& priority, double alpha) {
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

// Prioritized samples of `view` draw starts by priority^alpha (chi-square against the model, and against alpha = 1),
// with exact importance weights and rows of their own env's steps; total_weight is the sum.
void check_prioritized_draws(Sampler& learner, const PriorityModel& priority, double alpha, View view) {
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

}  // namespace

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
  PriorityModel priority;  // the model
  const auto push_random = [&](uint64_t e) {
    const float p = static_cast<float>(gen() % 9) * 0.5f;
    priority[{e, segment_of(buf).env_control(e).head.load()}] = p;
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
  check_priority_weights(learner, priority, alpha);
  for (const View view : {View::replay, View::online}) check_prioritized_draws(learner, priority, alpha, view);
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
  CHECK(segment_of(buf).global_control().priority_updates.load() == 1);
  CHECK(segment_of(buf).global_control().priority_updates_dropped.load() == 1);
  const detail::PriorityTree tree{segment_of(buf).priority_tree(0), buf.priority_leaves(), buf.capacity()};
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
  const detail::PriorityTree tree{segment_of(buf).priority_tree(0), buf.priority_leaves(), buf.capacity()};
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

TEST_CASE("a checkpoint loaded into a buffer with priorities restores every stored step's weight and the running maximum") {
  SegmentGuard guard(unique_name("prioload"));
  Buffer buf = Buffer::create(guard.name(), 2, 8, kSchema, {.priority_exponent = 1.0});
  {
    Writer w(buf, std::vector<uint64_t>{0, 1});
    for (int i = 0; i < 11; ++i) push(w, buf, static_cast<uint64_t>(i % 2), static_cast<float>(i));
  }
  const std::string path = fmt::format("/tmp/{}.ckpt", guard.name());
  const std::unique_ptr<const char, void (*)(const char*)> rm(path.c_str(), [](const char* p) { ::unlink(p); });
  // The weight of every stored step (priority^1 = the step's value pushed), to compare after the load.
  const auto weights = [&](uint64_t e) {
    const detail::PriorityTree tree{segment_of(buf).priority_tree(e), buf.priority_leaves(), buf.capacity()};
    std::vector<double> out;
    const uint64_t head = segment_of(buf).env_control(e).head.load();
    for (uint64_t s = head - std::min<uint64_t>(head, 8); s < head; ++s) {
      out.push_back(detail::step_weight(tree, segment_of(buf).env_control(e), s));
    }
    return out;
  };
  const std::vector<double> before0 = weights(0), before1 = weights(1);
  save_checkpoint(buf, path);
  // Overwrite every weight, so that the load must restore them.
  for (uint64_t e = 0; e < 2; ++e) {
    const detail::PriorityTree tree{segment_of(buf).priority_tree(e), buf.priority_leaves(), buf.capacity()};
    for (uint64_t s = 0; s < tree.leaves; ++s) tree.words[tree.leaves + s].store(0);
    detail::rebuild(tree);
  }
  load_checkpoint_into(buf, path);
  const double max = detail::max_priority(segment_of(buf).global_control().max_priority);
  CHECK(max == 10.0);
  CHECK(weights(0) == before0);
  CHECK(weights(1) == before1);
  CHECK(before0.size() == 6);
  CHECK(before0.back() == 10.0);
  for (uint64_t e = 0; e < 2; ++e) {
    const detail::PriorityTree tree{segment_of(buf).priority_tree(e), buf.priority_leaves(), buf.capacity()};
    CHECK(check_sums(tree) == "");
  }
}
