// tests/sampler/rows.cpp: what sample draws: every row against the reference model (wrap-around, online resets),
// determinism for a seed, and the start positions' distribution (chi-square), a huge power included.
// Part of test_sampler (tests/CMakeLists.txt); its helpers are in sampler_helpers.hpp.
#include "sampler_helpers.hpp"

TEST_CASE("every sampled row is one the reference model allows, across wrap-around and online resets") {
  std::mt19937_64 gen(20240601);  // the test's own choices
  Rng rng(99);
  for (const uint64_t num_envs : {1u, 2u, 5u}) {
    for (const uint64_t cap : {1u, 3u, 5u, 8u}) {
      CAPTURE(num_envs);
      CAPTURE(cap);
      Rig rig("model", num_envs, cap);
      Writer& w = rig.w;
      Sampler& s = rig.s;
      Model& m = rig.m;
      SampleBatch out;
      std::vector<uint64_t> all(num_envs);
      for (uint64_t e = 0; e < num_envs; ++e) all[e] = e;

      for (int op = 0; op < 500; ++op) {
        CAPTURE(op);
        const uint64_t kind = gen() % 12;
        const std::size_t length = 1 + gen() % cap;
        const double power = kPowers[gen() % kPowers.size()];
        if (kind < 5) {  // push to a random subset, in random order
          std::shuffle(all.begin(), all.end(), gen);
          const auto count = static_cast<std::ptrdiff_t>(1 + gen() % num_envs);
          const std::vector<uint64_t> envs(all.begin(), all.begin() + count);
          push_envs(w, m, envs, static_cast<int>(gen() % 3));
        } else if (kind == 5) {
          s.reset_online_queue();
          m.reset_online();
        } else if (kind < 9) {  // one view
          const View view = gen() % 2 == 0 ? View::replay : View::online;
          const std::size_t rows = 1 + gen() % 16;
          if (m.size(view) == 0) {
            CHECK(error_of([&] { s.sample(view, rows, length, power, rng, out); }) == code(Errc::empty_view));
            CHECK(error_of([&] { s.sample_transitions(view, rows, rng, out); }) == code(Errc::empty_view));
          } else {
            REQUIRE(error_of([&] { s.sample(view, rows, length, power, rng, out); }) == 0);
            REQUIRE(out.rows() == rows);
            const std::string problem = check_rows(out, m, view, 0, rows, length);
            REQUIRE_MESSAGE(problem.empty(), problem);
            s.sample_transitions(view, rows, rng, out);
            const std::string problem1 = check_rows(out, m, view, 0, rows, 1);
            REQUIRE_MESSAGE(problem1.empty(), problem1);
          }
        } else if (kind < 11) {  // mixed
          const std::size_t rb = gen() % 5;
          const std::size_t oq = rb == 0 ? 1 + gen() % 4 : gen() % 5;
          const bool empty = (rb > 0 && m.size(View::replay) == 0) || (oq > 0 && m.size(View::online) == 0);
          if (empty) {
            CHECK(error_of([&] { s.sample_mixed(rb, oq, length, power, rng, out); }) == code(Errc::empty_view));
          } else {
            REQUIRE(error_of([&] { s.sample_mixed(rb, oq, length, power, rng, out); }) == 0);
            REQUIRE(out.rows() == rb + oq);
            const std::string problem = check_rows(out, m, View::replay, 0, rb, length) +
                                        check_rows(out, m, View::online, rb, oq, length);
            REQUIRE_MESSAGE(problem.empty(), problem);
          }
        } else {  // peek at a random list of envs (repeats allowed)
          std::vector<uint64_t> envs(1 + gen() % (2 * num_envs));
          for (uint64_t& e : envs) e = gen() % num_envs;
          s.peek(envs, out);
          const std::string problem = check_peek(out, m, envs);
          REQUIRE_MESSAGE(problem.empty(), problem);
        }
        check_sizes(s, m);
      }
      CHECK(s.retries() == 0);
    }
  }
}

TEST_CASE("the same buffer state and seed give identical batches; different seeds give different ones") {
  auto fill = [](Buffer& buf, Sampler& s, Model& m) {
    std::mt19937_64 gen(5);
    Writer w = Writer::range(buf, 0, buf.num_envs());
    for (int i = 0; i < 80; ++i) {
      std::vector<uint64_t> envs = {0, 1, 2, 3};
      std::shuffle(envs.begin(), envs.end(), gen);
      envs.resize(1 + gen() % 4);
      push_envs(w, m, envs, i % 3);
      if (i == 60) {
        s.reset_online_queue();
        m.reset_online();
      }
    }
  };
  const std::string name_a = unique_name("det-a");
  const std::string name_b = unique_name("det-b");
  SegmentGuard guard_a(name_a);
  SegmentGuard guard_b(name_b);
  Buffer a = Buffer::create(name_a, 4, 16, kSchema);
  Buffer b = Buffer::create(name_b, 4, 16, kSchema);
  Sampler sa(a);
  Sampler sb(b);
  Model ma(4, 16);
  Model mb(4, 16);
  fill(a, sa, ma);
  fill(b, sb, mb);
  REQUIRE(ma.size(View::online) > 0);

  SampleBatch x;
  SampleBatch y;
  for (const uint64_t seed : {1u, 2u, 12345u}) {
    for (const double power : kPowers) {
      for (const std::size_t length : {1u, 4u, 16u}) {
        CAPTURE(seed);
        CAPTURE(power);
        CAPTURE(length);
        Rng ra(seed);
        Rng rb(seed);
        sa.sample(View::replay, 32, length, power, ra, x);
        sb.sample(View::replay, 32, length, power, rb, y);
        CHECK(same_batch(x, y));
        sa.sample(View::online, 32, length, power, ra, x);
        sb.sample(View::online, 32, length, power, rb, y);
        CHECK(same_batch(x, y));
        sa.sample_mixed(24, 8, length, power, ra, x);
        sb.sample_mixed(24, 8, length, power, rb, y);
        CHECK(same_batch(x, y));
        CHECK(check_rows(x, ma, View::replay, 0, 24, length) + check_rows(x, ma, View::online, 24, 8, length) == "");
      }
    }
  }
  // sample_transitions is sample(view, n, 1, power 0).
  Rng ra(77);
  Rng rb(77);
  sa.sample_transitions(View::replay, 40, ra, x);
  sb.sample(View::replay, 40, 1, 0.0, rb, y);
  CHECK(same_batch(x, y));
  // Different seeds: different rows.
  Rng r1(1);
  Rng r2(2);
  sa.sample(View::replay, 64, 3, 1.0, r1, x);
  sb.sample(View::replay, 64, 3, 1.0, r2, y);
  CHECK_FALSE(same_batch(x, y));
  CHECK_FALSE(std::ranges::equal(x.start_steps(), y.start_steps()));
}

TEST_CASE("start positions follow the weights min(remaining, L)^power (chi-square), and the test has power") {
  Rig rig("chi", 3, 12);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  push_env(w, m, 0, 5);   // env 0: 7 steps, never wrapped
  push_env(w, m, 1, 25);  // env 1: 30 steps, wrapped twice
  push_env(w, m, 2, 14);  // env 2: 20 steps, wrapped
  s.reset_online_queue();
  m.reset_online();
  push_env(w, m, 0, 2);  // env 0 gets no online step: replay [0, 7), online [5, 7)
  push_env(w, m, 1, 5);  // replay [18, 30), online [25, 30)
  push_env(w, m, 2, 6);  // replay [8, 20), online [14, 20)
  check_sizes(s, m);

  constexpr std::size_t kLength = 5;
  constexpr std::size_t kRows = 1000;
  constexpr std::size_t kCalls = 200;
  const double n = static_cast<double>(kRows * kCalls);
  Rng rng(2024);
  SampleBatch out;
  for (const View view : {View::replay, View::online}) {
    CAPTURE(to_string(view));
    std::vector<std::vector<uint64_t>> counts;
    std::vector<std::vector<double>> probs;
    for (const double power : {0.0, 1.0, 2.0}) {
      const Cells cells = cells_of(m, view, kLength, power);
      std::vector<uint64_t> count(cells.prob.size(), 0);
      uint64_t outside = 0;
      for (std::size_t call = 0; call < kCalls; ++call) {
        s.sample(view, kRows, kLength, power, rng, out);
        for (std::size_t row = 0; row < kRows; ++row) {
          const uint64_t e = out.env_ids()[row];
          const uint64_t p = out.start_steps()[row];
          const Window win = m.window(view, e);
          if (p >= win.lo && p < win.hi) {
            ++count[cells.offset[e] + (p - win.lo)];
          } else {
            ++outside;
          }
        }
      }
      REQUIRE(outside == 0);
      counts.push_back(count);
      probs.push_back(cells.prob);
    }
    const double df = static_cast<double>(probs[0].size() - 1);
    const double bound = chi_square_bound(df);
    CAPTURE(df);
    CAPTURE(bound);
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(chi_square(counts[i], probs[i], n) < bound);
    }
    // The same bound rejects counts drawn with another power.
    CHECK(chi_square(counts[0], probs[1], n) > bound);
    CHECK(chi_square(counts[2], probs[1], n) > bound);
  }
}

TEST_CASE("a huge finite power favours the longest starts instead of collapsing to one row or failing") {
  // L^power overflows a double here (8^400 = 2^1200). The limit of the weights is "only starts with the longest
  // remaining length"; rejecting such a power with invalid_argument is acceptable too. Neither a single repeated
  // row nor Errc::contended (no writer runs) is.
  Rig rig("bigpow", 3, 12);
  Writer& w = rig.w;
  Sampler& s = rig.s;
  Model& m = rig.m;
  Rng rng(4);
  SampleBatch out;
  auto check_power = [&](View view, std::size_t expected_envs) {
    std::string msg;
    const int rc = error_of([&] { s.sample(view, 300, 8, 400.0, rng, out); }, &msg);
    CAPTURE(msg);
    if (rc == code(Errc::invalid_argument)) {
      CHECK(contains(msg, "400"));
      return;
    }
    REQUIRE(rc == 0);
    CHECK(check_rows(out, m, view, 0, 300, 8) == "");
    std::vector<uint64_t> per_env(3, 0);
    uint64_t short_rows = 0;
    for (std::size_t row = 0; row < 300; ++row) {
      const uint64_t e = out.env_ids()[row];
      ++per_env[e];
      if (m.window(view, e).hi - out.start_steps()[row] < 8) ++short_rows;
    }
    CHECK(short_rows == 0);
    CHECK(static_cast<std::size_t>(std::ranges::count_if(per_env, [](uint64_t c) { return c > 0; })) ==
          expected_envs);
  };
  for (uint64_t e = 0; e < 3; ++e) push_env(w, m, e, 10);
  check_power(View::replay, 3);  // starts 0..2 of each env
  s.reset_online_queue();
  m.reset_online();
  push_env(w, m, 0, 9);
  push_env(w, m, 1, 9);
  check_power(View::online, 2);  // env 2's online view is empty (shorter than L)
  CHECK(s.retries() == 0);
}
