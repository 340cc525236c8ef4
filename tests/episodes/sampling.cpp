// tests/episodes/sampling.cpp: sampling with episodes = cross | stop | within, period and min_steps: every row against
// the reference model, the start distributions (chi-square), total_weight, the exact fallback, strictly
// increasing sequences, refused options, n-step returns, and work per row that does not grow with the stored steps.
// Part of test_episodes (tests/CMakeLists.txt); its helpers are in episodes_helpers.hpp.
#include "episodes_helpers.hpp"

TEST_CASE("every sampled row is one the reference model allows, for every episode option, across wrap-around and "
          "auto-reset steps") {
  std::mt19937_64 gen(20250101);
  Rng rng(17);
  SampleBatch out;
  const std::array<Episodes, 3> modes = {Episodes::cross, Episodes::stop, Episodes::within};
  for (const Flavor flavor : {Flavor::done, Flavor::term_trunc}) {
    for (const uint64_t num_envs : {1u, 3u}) {
      for (const uint64_t cap : {1u, 3u, 5u, 8u}) {
        CAPTURE(static_cast<int>(flavor));
        CAPTURE(num_envs);
        CAPTURE(cap);
        Rig rig("ep-model", flavor, num_envs, cap);
        std::vector<uint64_t> all(num_envs);
        for (uint64_t e = 0; e < num_envs; ++e) all[e] = e;
        const uint64_t one_in = 1 + gen() % 4;  // how often an episode ends
        for (int op = 0; op < 320; ++op) {
          CAPTURE(op);
          const uint64_t kind = gen() % 10;
          if (kind < 4) {
            std::shuffle(all.begin(), all.end(), gen);
            const std::vector<uint64_t> envs(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(1 + gen() % num_envs));
            std::vector<std::array<bool, 3>> flags;
            for (std::size_t i = 0; i < envs.size(); ++i) flags.push_back(random_flags(gen, flavor, one_in));
            push_steps(rig.w, rig.m, envs, flags, static_cast<int>(gen() % 3));
            continue;
          }
          if (kind == 4) {
            rig.s.reset_online_queue();
            rig.m.reset_online();
            continue;
          }
          const SampleOptions o{.episodes = modes[gen() % 3], .period = 1 + gen() % 4, .min_steps = 0};
          const std::size_t L = 1 + gen() % cap;
          const double power = static_cast<double>(gen() % 3);
          const View view = kind < 8 ? View::replay : View::online;
          const std::size_t rows = 1 + gen() % 12;
          CAPTURE(to_string(o.episodes));
          CAPTURE(o.period);
          CAPTURE(L);
          CAPTURE(power);
          CAPTURE(to_string(view));
          std::string msg;
          const int rc = error_of([&] { rig.s.sample(view, rows, L, power, rng, out, o); }, &msg);
          if (rig.m.total_weight(view, L, power, o) == 0.0) {
            CHECK_MESSAGE(rc == code(Errc::empty_view), msg);
            continue;
          }
          REQUIRE_MESSAGE(rc == 0, msg);
          const std::string problem = check_rows(out, rig.m, view, 0, rows, L, power, o);
          REQUIRE_MESSAGE(problem.empty(), problem);
          if (kind == 9 && rig.m.total_weight(View::replay, L, power, o) > 0.0) {  // mixed, both views
            const std::size_t rb = 1 + gen() % 4;
            REQUIRE(error_of([&] { rig.s.sample_mixed(rb, rows, L, power, rng, out, o); }) == 0);
            const std::string mixed = check_rows(out, rig.m, View::replay, 0, rb, L, power, o) +
                                      check_rows(out, rig.m, View::online, rb, rows, L, power, o);
            REQUIRE_MESSAGE(mixed.empty(), mixed);
          }
        }
        CHECK(rig.s.retries() == 0);
      }
    }
  }
}

TEST_CASE("the options' defaults sample exactly what the calls without options sample, on any buffer") {
  for (const bool episodes : {false, true}) {
    const std::string name = unique_name("ep-default");
    SegmentGuard guard(name);
    Buffer buf = episodes ? Buffer::create(name, 3, 16, kSchema, options_for(Flavor::done))
                          : Buffer::create(name, 3, 16, kSchema);
    Writer w = Writer::range(buf, 0, 3);
    Sampler s(buf);
    Model m(Flavor::done, 3, 16);
    std::mt19937_64 gen(3);
    for (int i = 0; i < 60; ++i) push_one_step(w, m, gen() % 3, gen() % 5 == 0);
    SampleBatch a, b;
    for (const std::size_t L : {1u, 4u, 16u}) {
      Rng r1(L), r2(L);
      s.sample(View::replay, 40, L, 1.0, r1, a);
      s.sample(View::replay, 40, L, 1.0, r2, b, SampleOptions{});
      CHECK(std::ranges::equal(a.start_steps(), b.start_steps()));
      CHECK(std::ranges::equal(a.env_ids(), b.env_ids()));
      CHECK(std::ranges::equal(a.mask(), b.mask()));
      s.sample_mixed(20, 5, L, 2.0, r1, a);
      s.sample_mixed(20, 5, L, 2.0, r2, b, SampleOptions{});
      CHECK(std::ranges::equal(a.start_steps(), b.start_steps()));
      s.sample_transitions(View::replay, 30, r1, a);
      s.sample_transitions(View::replay, 30, r2, b, SampleOptions{.min_steps = 10});
      CHECK(std::ranges::equal(a.start_steps(), b.start_steps()));
    }
  }
}

TEST_CASE("stop and within start positions follow their weights (chi-square, powers 0, 1, 2, periods 1 and 3)") {
  // Fixed episodes with wrap-around: env 0 never wraps, env 1 wraps twice, env 2 ends every step for a while.
  Rig rig("ep-chi", Flavor::term_trunc, 3, 24);
  Model& m = rig.m;
  const std::vector<int> lengths0 = {3, 9, 1, 6};           // 19 steps
  const std::vector<int> lengths1 = {5, 12, 7, 2, 11, 4, 15, 8, 2};  // 66 steps, wrapped
  auto push_episodes = [&](uint64_t env, const std::vector<int>& lengths, bool open_last) {
    for (std::size_t k = 0; k < lengths.size(); ++k) {
      for (int i = 0; i < lengths[k]; ++i) {
        const bool last = i + 1 == lengths[k] && !(open_last && k + 1 == lengths.size());
        push_one_step(rig.w, m, env, false, last && k % 2 == 0, last && k % 2 == 1, static_cast<int>(k % 3));
      }
    }
  };
  push_episodes(0, lengths0, true);
  push_episodes(1, lengths1, false);
  push_episodes(2, {4, 1, 1, 1, 2, 1, 10, 1, 1, 3}, true);
  rig.s.reset_online_queue();
  m.reset_online();
  push_episodes(1, {3, 6}, true);
  push_episodes(2, {2, 5}, true);

  constexpr std::size_t kL = 6;
  Rng rng(99);
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    for (const uint64_t period : {1u, 3u}) {
      for (const View view : {View::replay, View::online}) {
        CAPTURE(to_string(mode));
        CAPTURE(period);
        CAPTURE(to_string(view));
        const SampleOptions o{.episodes = mode, .period = period};
        std::vector<std::vector<uint64_t>> counts;
        std::vector<Cells> cells;
        for (const double power : {0.0, 1.0, 2.0}) {
          cells.push_back(cells_of(m, view, kL, power, o));
          counts.push_back(count_starts(rig.s, m, view, kL, power, o, cells.back(), rng, 25, 1000));
        }
        const double n = 25.0 * 1000.0;
        const double df = static_cast<double>(cells[0].nonzero - 1);
        const double bound = df + 6.0 * std::sqrt(2.0 * df);
        CAPTURE(df);
        for (std::size_t i = 0; i < 3; ++i) {
          CAPTURE(i);
          CHECK(chi_square(counts[i], cells[i].prob, n) <= bound);  // df 0 (one cell): the statistic is 0
        }
        if (mode == Episodes::stop) {  // the same bound rejects counts drawn with another power
          CHECK(chi_square(counts[0], cells[1].prob, n) > bound);
          CHECK(chi_square(counts[2], cells[1].prob, n) > bound);
        }
      }
    }
  }
  CHECK(rig.s.retries() == 0);
}

TEST_CASE("total_weight is the sum of the weights sample draws by, for every episode option, period, power and "
          "view") {
  // Episodes of several lengths with wrap-around, and an online view; the model's weights are the ones the
  // chi-square test above holds sample to, so a total that matches them is the normaliser of sample's draws.
  Rig rig("ep-total", Flavor::term_trunc, 3, 24);
  Model& m = rig.m;
  auto push_episodes = [&](uint64_t env, const std::vector<int>& lengths) {
    for (std::size_t k = 0; k < lengths.size(); ++k) {
      for (int i = 0; i < lengths[k]; ++i) {
        const bool last = i + 1 == lengths[k] && k + 1 < lengths.size();
        push_one_step(rig.w, m, env, false, last && k % 2 == 0, last && k % 2 == 1, 0);
      }
    }
  };
  SampleOptions none;
  CHECK(rig.s.total_weight(View::replay, 4, 1.0, none) == 0.0);  // an empty view
  push_episodes(0, {3, 9, 1, 6});
  push_episodes(1, {5, 12, 7, 2, 11, 4, 15, 8, 2});
  push_episodes(2, {4, 1, 1, 1, 2, 1, 10, 1, 1, 3});
  rig.s.reset_online_queue();
  m.reset_online();
  CHECK(rig.s.total_weight(View::online, 4, 1.0, none) == 0.0);
  push_episodes(1, {3, 6});
  push_episodes(2, {2, 5});
  for (const Episodes mode : {Episodes::cross, Episodes::stop, Episodes::within}) {
    for (const uint64_t period : {1u, 3u}) {
      for (const View view : {View::replay, View::online}) {
        for (const std::size_t L : {1u, 6u, 24u}) {
          for (const double power : {0.0, 0.5, 1.0, 2.0}) {
            CAPTURE(to_string(mode));
            CAPTURE(period);
            CAPTURE(to_string(view));
            CAPTURE(L);
            CAPTURE(power);
            const SampleOptions o{.episodes = mode, .period = period};
            const double expected = m.total_weight(view, L, power, o);
            CHECK(rig.s.total_weight(view, L, power, o) == doctest::Approx(expected).epsilon(1e-12));
          }
        }
      }
    }
  }
  // min_steps: a view below it weighs 0 (sample would refuse it), at it the usual total.
  const uint64_t stored = rig.s.size(View::replay);
  CHECK(rig.s.total_weight(View::replay, 6, 1.0, {.min_steps = stored + 1}) == 0.0);
  CHECK(rig.s.total_weight(View::replay, 6, 1.0, {.min_steps = stored}) ==
        doctest::Approx(m.total_weight(View::replay, 6, 1.0, none)).epsilon(1e-12));
  // Invalid arguments are refused as sample refuses them.
  CHECK(error_of([&] { rig.s.total_weight(View::replay, 0, 1.0); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { rig.s.total_weight(View::replay, 6, -1.0); }) == code(Errc::invalid_argument));
}

TEST_CASE("the exact fallback (short episodes, a long sequence, a high power) draws from the same distribution") {
  // Episodes of 1-3 steps and L = 32 with power 2: a proposal is accepted with probability about (2/32)^2, so
  // rows exhaust their proposals and the call switches to enumerating episodes; the distribution must not change.
  Rig rig("ep-exact", Flavor::done, 2, 64);
  std::mt19937_64 gen(8);
  for (int i = 0; i < 150; ++i) push_one_step(rig.w, rig.m, gen() % 2, gen() % 2 == 0);
  // One episode of 33 steps in env 1, so within has two valid starts among 66 proposals.
  push_one_step(rig.w, rig.m, 1, true);
  for (int i = 0; i < 33; ++i) push_one_step(rig.w, rig.m, 1, false);
  Rng rng(5);
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    CAPTURE(to_string(mode));
    const SampleOptions o{.episodes = mode, .period = 1};
    const uint64_t before = rig.s.stats().exact_fallbacks;
    const double power = mode == Episodes::stop ? 2.0 : 0.0;
    const Cells cells = cells_of(rig.m, View::replay, 32, power, o);
    const auto counts = count_starts(rig.s, rig.m, View::replay, 32, power, o, cells, rng, 40, 1000);
    CHECK(rig.s.stats().exact_fallbacks > before);
    const double df = static_cast<double>(cells.nonzero - 1);
    CHECK(chi_square(counts, cells.prob, 40000.0) <= df + 6.0 * std::sqrt(2.0 * df));
    SampleBatch out;
    rig.s.sample(View::replay, 200, 32, power, rng, out, o);
    const std::string problem = check_rows(out, rig.m, View::replay, 0, 200, 32, power, o);
    CHECK_MESSAGE(problem.empty(), problem);
  }
}

TEST_CASE("every sampled sequence is strictly increasing in step index, on the period grid, and within or stop "
          "never crosses an episode end, over a sweep of lengths, periods and capacities") {
  std::mt19937_64 gen(77);
  Rng rng(78);
  SampleBatch out;
  uint64_t rows_checked = 0;
  for (const uint64_t cap : {1u, 2u, 3u, 5u, 8u, 13u, 32u}) {
    Rig rig("ep-incr", Flavor::term_trunc, 2, cap);
    for (int i = 0; i < static_cast<int>(3 * cap + 7); ++i) {
      push_one_step(rig.w, rig.m, gen() % 2, false, gen() % 7 == 0, gen() % 9 == 0, static_cast<int>(gen() % 3));
    }
    for (const uint64_t L : {1u, 2u, 3u, 5u, 8u, 13u, 32u}) {
      if (L > cap) continue;
      for (const uint64_t period : {1u, 2u, 3u, 7u, 40u}) {
        for (const Episodes mode : {Episodes::cross, Episodes::stop, Episodes::within}) {
          CAPTURE(cap);
          CAPTURE(L);
          CAPTURE(period);
          CAPTURE(to_string(mode));
          const SampleOptions o{.episodes = mode, .period = period};
          if (error_of([&] { rig.s.sample(View::replay, 64, L, 1.0, rng, out, o); }) != 0) {
            CHECK(rig.m.total_weight(View::replay, L, 1.0, o) == 0.0);
            continue;
          }
          for (std::size_t row = 0; row < out.rows(); ++row) {
            const uint64_t e = out.env_ids()[row];
            const uint64_t start = out.start_steps()[row];
            const EnvSizes z = rig.s.sizes(e);
            const uint64_t lo = z.head - z.replay;
            REQUIRE((start - lo) % period == 0);
            std::size_t valid = 0;
            while (valid < L && out.valid(row, valid)) ++valid;
            REQUIRE(valid >= 1);
            if (mode == Episodes::within) REQUIRE(valid == L);
            for (std::size_t t = 0; t < L; ++t) {
              REQUIRE(out.valid(row, t) == (t < valid));
              if (t >= valid) continue;
              uint64_t id[2];
              std::memcpy(id, out.step(kId, row, t), sizeof id);
              REQUIRE(id[0] == e);
              REQUIRE(id[1] == start + t);  // consecutive: strictly increasing by one
              REQUIRE(id[1] < z.head);
              if (mode != Episodes::cross && t + 1 < valid) {
                const Step& s = rig.m.steps[e][id[1]];
                REQUIRE_FALSE(ends(s, Flavor::term_trunc));  // no episode ends before the row's last step
              }
            }
            ++rows_checked;
          }
        }
      }
    }
  }
  MESSAGE(fmt::format("{} rows checked", rows_checked));
  CHECK(rows_checked > 10000);
}

TEST_CASE("sampling options refuse what they cannot do, with the numbers") {
  Rig rig("ep-errors", Flavor::done, 2, 8);
  Rng rng(1);
  SampleBatch out;
  std::string msg;
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 2, 1.0, rng, out, {.period = 0}); }, &msg) ==
        code(Errc::invalid_argument));
  CHECK(contains(msg, "period is 0"));
  push_one_step(rig.w, rig.m, 0, false);
  push_one_step(rig.w, rig.m, 0, true);
  push_one_step(rig.w, rig.m, 1, false);
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 2, 1.0, rng, out, {.min_steps = 4}); }, &msg) ==
        code(Errc::empty_view));
  CHECK((contains(msg, "holds 3 steps") && contains(msg, "min_steps = 4")));
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 2, 1.0, rng, out, {.min_steps = 3}); }) == 0);
  rig.s.reset_online_queue();
  CHECK(error_of([&] { rig.s.sample_mixed(2, 2, 2, 1.0, rng, out, {.min_steps = 3}); }, &msg) ==
        code(Errc::empty_view));
  CHECK((contains(msg, "online") && contains(msg, "holds 0 steps")));
  CHECK(error_of([&] { rig.s.sample_mixed(2, 0, 2, 1.0, rng, out, {.min_steps = 3}); }) == 0);
  // Within: no two consecutive steps of one episode yet (env 0: [0, 1] ends at 1 -> fits; make L = 3).
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 3, 1.0, rng, out, {.episodes = Episodes::within}); }, &msg) ==
        code(Errc::empty_view));
  CHECK((contains(msg, "within") && contains(msg, "3 steps of one episode")));
  CHECK(error_of([&] { rig.s.sample(View::replay, 4, 2, 1.0, rng, out, {.episodes = Episodes::within}); }) == 0);
  CHECK(check_rows(out, rig.m, View::replay, 0, 4, 2, 1.0, {.episodes = Episodes::within}) == "");
  // A buffer without episode fields: cross only.
  const std::string plain = unique_name("ep-plain");
  SegmentGuard guard(plain);
  Buffer pb = Buffer::create(plain, 1, 4, kSchema);
  Sampler ps(pb);
  Writer pw(pb, {0});
  Model pm(Flavor::done, 1, 4);
  push_one_step(pw, pm, 0, true);
  for (const Episodes mode : {Episodes::stop, Episodes::within}) {
    CHECK(error_of([&] { ps.sample(View::replay, 2, 1, 1.0, rng, out, {.episodes = mode}); }, &msg) ==
          code(Errc::invalid_argument));
    CHECK((contains(msg, to_string(mode).data()) && contains(msg, "no episode fields")));
  }
  CHECK(error_of([&] { ps.sample(View::replay, 2, 1, 1.0, rng, out, {.period = 2}); }) == 0);
  EpisodeRecord none[4];
  CHECK(ps.pop_episodes(none) == 0);
  // The learner may not move boundaries: flag fields cannot be updated; the reward can.
  const uint8_t one = 1;
  const float r = 2.5f;
  CHECK(error_of([&] { (void)rig.s.try_update(1, 0, {{}, {}, value_bytes(one), {}, {}, {}}); }, &msg) ==
        code(Errc::invalid_argument));
  CHECK((contains(msg, "'done'") && contains(msg, "episode flag")));
  CHECK(rig.s.try_update(1, 0, {{}, {}, {}, {}, {}, value_bytes(r)}));
}

TEST_CASE("n-step returns stop after episode ends and at the mask, with the bootstrap index and discount") {
  Rig rig("ep-nstep", Flavor::term_trunc, 1, 8);
  // Steps 0..7 of env 0: rewards reward_of(0, s) = s - 3 (-3 .. 4); step 2 terminates, step 5 is truncated.
  for (uint64_t s = 0; s < 8; ++s) push_one_step(rig.w, rig.m, 0, false, s == 2, s == 5);
  Rng rng(1);
  SampleBatch b;
  rig.s.sample(View::replay, 1, 8, 0.0, rng, b, {.period = 8});  // the only start is step 0
  REQUIRE(b.start_steps()[0] == 0);
  const double g = 0.5;
  auto rew = [](uint64_t s) { return static_cast<double>(s) - 3.0; };

  NStep x = nstep(b, 0, 0, 3, g);  // 0, 1, 2 and step 2 terminates
  CHECK(x.steps == 3);
  CHECK(x.reward_sum == rew(0) + g * rew(1) + g * g * rew(2));
  CHECK(x.terminated);
  CHECK_FALSE(x.truncated);
  CHECK_FALSE(x.bootstrap);
  CHECK(x.bootstrap_discount == 0.0);

  x = nstep(b, 0, 1, 5, g);  // stops after the termination at 2
  CHECK(x.steps == 2);
  CHECK(x.reward_sum == rew(1) + g * rew(2));
  CHECK(x.terminated);

  x = nstep(b, 0, 3, 2, g);  // 3, 4: bootstrap from 5
  CHECK(x.steps == 2);
  CHECK(x.reward_sum == rew(3) + g * rew(4));
  CHECK(x.bootstrap == std::optional<std::size_t>(5));
  CHECK(x.bootstrap_discount == g * g);
  CHECK_FALSE(x.terminated);

  x = nstep(b, 0, 4, 4, g);  // 4, 5 and 5 is truncated: no stored bootstrap state
  CHECK(x.steps == 2);
  CHECK(x.reward_sum == rew(4) + g * rew(5));
  CHECK(x.truncated);
  CHECK_FALSE(x.terminated);
  CHECK_FALSE(x.bootstrap);
  CHECK(x.bootstrap_discount == g * g);

  x = nstep(b, 0, 6, 5, g);  // 6, 7 and the row ends: nothing to bootstrap from in the row
  CHECK(x.steps == 2);
  CHECK(x.reward_sum == rew(6) + g * rew(7));
  CHECK_FALSE(x.bootstrap);
  CHECK(x.bootstrap_discount == g * g);

  x = nstep(b, 0, 6, 1, g, kX);  // another reward field
  CHECK(x.reward_sum == static_cast<double>(6.5f));
  CHECK(x.bootstrap == std::optional<std::size_t>(7));

  // In a stop row the mask ends at the episode's end.
  rig.s.sample(View::replay, 1, 6, 0.0, rng, b, {.episodes = Episodes::stop, .period = 8});
  REQUIRE((b.valid(0, 2) && !b.valid(0, 3)));
  x = nstep(b, 0, 1, 4, 1.0);
  CHECK((x.steps == 2 && x.terminated && x.reward_sum == rew(1) + rew(2)));

  std::string msg;
  CHECK(error_of([&] { (void)nstep(b, 1, 0, 1, g); }, &msg) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)nstep(b, 0, 6, 1, g); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)nstep(b, 0, 0, 0, g); }) == code(Errc::invalid_argument));
  CHECK(error_of([&] { (void)nstep(b, 0, 0, 1, g, kId); }, &msg) == code(Errc::invalid_argument));
  CHECK(contains(msg, "scalar"));
  x = nstep(b, 0, 4, 1, g);  // masked out: nothing
  CHECK(x.steps == 0);
}

TEST_CASE("stop and within sampling work per row does not grow with the number of stored steps") {
  // Episodes of 8 to 48 steps, L = 16, power 1: the same episode-length distribution in rings of 2^8 to 2^16
  // steps per env. Proposals and meta loads per row must stay flat (a scan of flags would grow 256-fold).
  std::vector<double> work_stop, work_within;
  for (const uint64_t cap : {1u << 8, 1u << 12, 1u << 16}) {
    const std::string name = unique_name("ep-work");
    SegmentGuard guard(name);
    Buffer buf = Buffer::create(name, 2, cap, kKillSchema, kill_options());
    {
      Writer w = Writer::range(buf, 0, 2);
      std::mt19937_64 gen(cap);
      std::vector<uint64_t> hdr(4);
      std::vector<uint8_t> term(2), trunc(2, 0);
      std::vector<float> reward(2, 1.0f);
      uint64_t left[2] = {0, 0};
      const std::vector<int32_t> both = {0, 1};
      for (uint64_t s = 0; s < cap; ++s) {
        for (int e = 0; e < 2; ++e) {
          if (left[e] == 0) left[e] = 8 + gen() % 41;
          term[static_cast<std::size_t>(e)] = --left[e] == 0 ? 1 : 0;
          hdr[static_cast<std::size_t>(2 * e)] = static_cast<uint64_t>(e);
          hdr[static_cast<std::size_t>(2 * e + 1)] = s;
        }
        w.push(std::span<const int32_t>(both), {field_bytes(hdr), field_bytes(term), field_bytes(trunc), field_bytes(reward)});
      }
    }
    Sampler s(buf);
    Rng rng(1);
    SampleBatch out;
    for (const Episodes mode : {Episodes::stop, Episodes::within}) {
      const SamplerStats before = s.stats();
      for (int call = 0; call < 50; ++call) s.sample(View::replay, 64, 16, 1.0, rng, out, {.episodes = mode});
      const SamplerStats& after = s.stats();
      const double rows = static_cast<double>(after.rows - before.rows);
      const double work = static_cast<double>((after.tries - before.tries) + (after.meta_loads - before.meta_loads) +
                                              (after.segments_enumerated - before.segments_enumerated));
      CHECK(after.exact_fallbacks == before.exact_fallbacks);
      (mode == Episodes::stop ? work_stop : work_within).push_back(work / rows);
      MESSAGE(fmt::format("capacity {:6}: {} work per row {:.2f}", cap, to_string(mode), work / rows));
    }
  }
  for (const auto* w : {&work_stop, &work_within}) {
    CHECK((*w)[0] < 16.0);
    CHECK((*w)[2] < 1.25 * (*w)[0] + 1.0);  // 256 times the steps, the same work
  }
}
