// tests/episodes/killed.cpp: writer processes SIGKILLed at random moments and replaced: rows never cross a boundary,
// the step meta agrees with the data, and an episode cut by a kill still gets its correct record.
// Part of test_episodes (tests/CMakeLists.txt); its helpers are in episodes_helpers.hpp.
#include "episodes_helpers.hpp"

namespace {

// A writer process: pushes steps {env, step} with random flags (so that a step republished after a kill may get
// other flags than the dead writer staged) and reward reward_of(env, step), by every push path, until killed.
[[noreturn]] void episode_writer_main(const std::string& name, std::vector<uint64_t> envs, uint64_t seed) {
  try {
    Buffer buf = Buffer::open(name);
    Writer writer(buf, envs);
    Rng rng(seed);
    for (;;) {
      const uint64_t env = envs[rng() % envs.size()];
      const uint64_t step = segment_of(buf).env_control(env).head.load(std::memory_order_relaxed);
      const uint64_t hdr[2] = {env, step};
      const uint8_t term = rng() % 9 == 0 ? 1 : 0;
      const uint8_t trunc = rng() % 13 == 0 ? 1 : 0;
      const float reward = reward_of(env, step);
      const uint64_t mode = rng() % 4;
      if (mode < 2) {
        writer.push_one(env, {FieldBytes{hdr, sizeof hdr}, value_bytes(term), value_bytes(trunc), value_bytes(reward)});
      } else {
        StepSlot slot = writer.reserve(env);
        std::memcpy(slot.field(0).data(), hdr, sizeof hdr);
        std::memcpy(slot.field(1).data(), &term, 1);
        if (mode == 3) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100));
        std::memcpy(slot.field(2).data(), &trunc, 1);
        std::memcpy(slot.field(3).data(), &reward, 4);
        if (rng() % 10 != 0) slot.commit();  // sometimes abandoned
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "episode writer %d: %s\n", static_cast<int>(::getpid()), e.what());
  }
  ::_exit(3);
}


bool ends_at(const SampleBatch& b, std::size_t row, std::size_t t) {
  return std::to_integer<uint8_t>(*b.step(1, row, t)) != 0 || std::to_integer<uint8_t>(*b.step(2, row, t)) != 0;
}

// One row of a concurrent sample: consecutive steps of its env below the head; for stop and within no episode
// end before its last step; within full length. `strict` (no writer running): a stop row shorter than L ends at
// an episode end or at the head.
std::string check_episode_row(const SampleBatch& b, std::size_t row, Episodes mode, uint64_t head, bool strict) {
  const uint64_t env = b.env_ids()[row];
  const uint64_t start = b.start_steps()[row];
  const std::size_t L = b.sequence_length();
  const std::optional<std::size_t> prefix = mask_prefix(b, row);
  if (!prefix) return "mask has a hole";
  const std::size_t valid = *prefix;
  if (valid == 0) return "empty row";
  if (mode == Episodes::within && valid != L) return "within row shorter than L";
  for (std::size_t t = 0; t < valid; ++t) {
    uint64_t hdr[2];
    std::memcpy(hdr, b.step(0, row, t), sizeof hdr);
    if (hdr[0] != env || hdr[1] != start + t) {
      return fmt::format("env {} step {} at position {} of a row of env {} from {}", hdr[0], hdr[1], t, env, start);
    }
    if (start + t >= head) return "row reaches past the head";
    float reward = 0;
    std::memcpy(&reward, b.step(3, row, t), 4);
    if (reward != reward_of(env, start + t)) return "wrong reward";
    if (mode != Episodes::cross && t + 1 < valid && ends_at(b, row, t)) {
      return fmt::format("{} row of env {} from {} crosses the episode end at step {}", to_string(mode), env, start,
                         start + t);
    }
  }
  if (strict && mode == Episodes::stop && valid < L && !ends_at(b, row, valid - 1) && start + valid != head) {
    return fmt::format("stop row of env {} from {} stops after {} steps at step {}, which ends no episode", env,
                       start, valid, start + valid - 1);
  }
  return "";
}

// Every stored step's meta word must agree with the flags of the published steps (no writer may run).
std::string check_meta_against_data(const Buffer& buf) {
  const uint64_t cap = buf.capacity();
  for (uint64_t e = 0; e < buf.num_envs(); ++e) {
    const uint64_t head = segment_of(buf).env_control(e).head.load();
    const uint64_t claimed = segment_of(buf).env_control(e).claimed.load() & layout::kClaimMask;
    const uint64_t lo = std::min(claimed > cap ? claimed - cap : 0, head);
    std::optional<uint64_t> start;  // known once an end was seen in the window
    for (uint64_t s = lo; s < head; ++s) {
      const std::byte* rec_term = segment_of(buf).field_data(1) + (e * cap + s % cap);
      const std::byte* rec_trunc = segment_of(buf).field_data(2) + (e * cap + s % cap);
      const bool end = *rec_term != std::byte{0} || *rec_trunc != std::byte{0};
      const uint64_t meta = segment_of(buf).step_meta(e)[s % cap].load();
      const uint64_t meta_start = meta & layout::kMetaStartMask;
      if (((meta & layout::kMetaEndsEpisode) != 0) != end) return fmt::format("env {} step {}: end bit wrong", e, s);
      if (start ? meta_start != *start : meta_start > lo) {
        return fmt::format("env {} step {}: meta says the episode starts at {}, the flags say {}", e, s, meta_start,
                           start ? *start : lo);
      }
      if (end) start = s + 1;
    }
  }
  return "";
}

// The sampling side of the kill test: calls in every episodes mode (cycling), each row checked, the retries counted
// per mode.
struct EpisodeSampling {
  Sampler& learner;
  Rng& rng;
  SampleBatch batch;
  uint64_t rows = 0, violations = 0, calls = 0;
  std::array<uint64_t, 3> mode_retries = {0, 0, 0};
  std::string first;

  EpisodeSampling(Sampler& s, Rng& r) : learner(s), rng(r) {}

  // One call; `strict`: no writer runs (check_episode_row's strict).
  void sample_and_check(bool strict) {
    static constexpr std::array<Episodes, 3> kModes = {Episodes::cross, Episodes::stop, Episodes::within};
    const Episodes mode = kModes[calls % 3];
    const std::size_t L = 1 + rng() % 12;
    const SampleOptions o{.episodes = mode, .period = 1 + rng() % 3};
    ++calls;
    const uint64_t retries_before = learner.retries();
    struct Count {
      uint64_t& retries;
      uint64_t before;
      Sampler& s;
      ~Count() { retries += s.retries() - before; }
    } count{mode_retries[static_cast<std::size_t>(mode)], retries_before, learner};
    try {
      if (calls % 4 == 0) {
        learner.sample_mixed(24, 8, L, static_cast<double>(rng() % 3), rng, batch, o);
      } else {
        learner.sample(View::replay, 32, L, static_cast<double>(rng() % 3), rng, batch, o);
      }
    } catch (const Error& e) {
      if (e.errc() == Errc::empty_view) return;
      throw;
    }
    for (std::size_t row = 0; row < batch.rows(); ++row) {
      ++rows;
      const std::string v = check_episode_row(batch, row, mode, learner.sizes(batch.env_ids()[row]).head, strict);
      if (!v.empty() && violations++ == 0) first = v;
    }
    if (calls % 5 == 0) learner.reset_online_queue();
  }
};

// Every env's records (popped, per env) against the inspector's `info`: none dropped or queued, one per completed
// episode, exactly once and in order (they tile the env's steps from 0 up to the episode in progress), each with
// its return and end. The records in all.
uint64_t check_records(const SegmentInfo& info, std::map<uint64_t, std::vector<EpisodeRecord>>& records) {
  uint64_t total_records = 0;
  for (uint64_t e = 0; e < info.envs.size(); ++e) {
    CAPTURE(e);
    const auto& rs = records[e];
    total_records += rs.size();
    CHECK(info.envs[e].episode_records_dropped == 0);
    CHECK(info.envs[e].episode_queue_depth == 0);
    CHECK(info.envs[e].episodes_completed == rs.size());
    uint64_t next = 0;
    for (const EpisodeRecord& r : rs) {
      REQUIRE(r.first_step == next);
      REQUIRE(r.length >= 1);
      double ret = 0.0;
      for (uint64_t s = r.first_step; s < r.first_step + r.length; ++s) ret += static_cast<double>(reward_of(e, s));
      REQUIRE(r.episode_return == ret);
      REQUIRE((r.end == EpisodeEnd::terminated || r.end == EpisodeEnd::truncated));
      next = r.first_step + r.length;
    }
    CHECK(info.envs[e].episode_start == next);
  }
  return total_records;
}

}  // namespace

TEST_CASE("writers SIGKILLed at random moments and replaced: stop and within rows never cross a boundary, "
          "boundaries agree with the published steps, and every episode's record arrives exactly once") {
  const uint64_t num_envs = 6;
  const uint64_t capacity = 48;
  const std::size_t num_writers = 3;
  SegmentGuard guard(unique_name("ep-kill"));
  std::vector<std::vector<uint64_t>> slices(num_writers);
  for (uint64_t e = 0; e < num_envs; ++e) slices[e % num_writers].push_back(e);
  Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kKillSchema, kill_options());
  std::vector<pid_t> writers(num_writers);
  uint64_t seed = 100;
  for (std::size_t w = 0; w < num_writers; ++w) {
    writers[w] = spawn([&, w, s = seed++] { episode_writer_main(guard.name(), slices[w], s); });
  }
  Sampler learner(buf);
  REQUIRE(learner.wait(View::replay, num_envs * 8, 20'000));
  Rng rng(9);
  std::map<uint64_t, std::vector<EpisodeRecord>> records;
  std::vector<EpisodeRecord> popped(256);
  auto pop_all = [&] {
    for (std::size_t n; (n = learner.pop_episodes(popped)) > 0;) {
      for (std::size_t k = 0; k < n; ++k) records[popped[k].env].push_back(popped[k]);
    }
  };
  EpisodeSampling sampling(learner, rng);
  uint64_t kills = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(test::run_seconds(1.5));
  auto next_kill = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    sampling.sample_and_check(false);
    if (sampling.calls % 8 == 0) pop_all();
    if (std::chrono::steady_clock::now() >= next_kill) {
      const std::size_t w = rng() % num_writers;
      CHECK_MESSAGE(kill_and_reap(writers[w]), "a writer exited on its own (see its stderr)");
      ++kills;
      writers[w] = spawn([&, w, s = seed++] { episode_writer_main(guard.name(), slices[w], s); });
      next_kill = std::chrono::steady_clock::now() + std::chrono::milliseconds(10 + rng() % 60);
    }
  }
  for (const pid_t pid : writers) CHECK(kill_and_reap(pid));
  // Everyone is dead. The envs are taken over once more: a record a dead writer owed is queued now.
  {
    Writer last = Writer::range(buf, 0, num_envs);
    const std::string meta_problem = check_meta_against_data(buf);
    CHECK_MESSAGE(meta_problem.empty(), meta_problem);
    for (int i = 0; i < 300; ++i) sampling.sample_and_check(true);
  }
  pop_all();
  const SegmentInfo info = Inspector(guard.name()).snapshot();
  const uint64_t total_records = check_records(info, records);
  uint64_t pushes = 0;
  for (const EnvInfo& env : info.envs) pushes += env.head;
  MESSAGE(fmt::format("{} writer processes, {} kills: {} pushes, {} sample calls, {} rows checked, {} records, "
                      "retries {} (cross {}, stop {}, within {}), {} violations",
                      num_writers, kills, pushes, sampling.calls, sampling.rows, total_records, learner.retries(),
                      sampling.mode_retries[0], sampling.mode_retries[1], sampling.mode_retries[2],
                      sampling.violations));
  CHECK_MESSAGE(sampling.violations == 0, sampling.first);
  CHECK(kills > 0);
  CHECK(total_records > 0);
}

TEST_CASE("a writer SIGKILLed mid-episode and replaced still gives the episode's correct record") {
  SegmentGuard guard(unique_name("ep-midkill"));
  Buffer buf = Buffer::create(guard.name(), 2, 16, kKillSchema, kill_options());
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  // The child pushes steps 0-9 of env 1 (no episode end), says so, and waits to be killed.
  const pid_t child = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Writer w(b, {1});
    for (uint64_t s = 0; s < 10; ++s) {
      const uint64_t hdr[2] = {1, s};
      const uint8_t zero = 0;
      const float reward = reward_of(1, s);
      w.push_one(1, {FieldBytes{hdr, sizeof hdr}, value_bytes(zero), value_bytes(zero), value_bytes(reward)});
    }
    const char c = 'k';
    (void)!::write(ready[1], &c, 1);
    for (;;) ::pause();
  });
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  REQUIRE(kill_and_reap(child));
  ::close(ready[0]);
  ::close(ready[1]);
  Writer w(buf, {1});
  CHECK(w.takeovers() == 1);
  for (uint64_t s = 10; s < 14; ++s) {
    const uint64_t hdr[2] = {1, s};
    const uint8_t zero = 0, one = 1;
    const float reward = reward_of(1, s);
    w.push_one(1, {FieldBytes{hdr, sizeof hdr}, value_bytes(zero), value_bytes(s == 13 ? one : zero),
                   value_bytes(reward)});
  }
  Sampler learner(buf);
  EpisodeRecord r[2];
  REQUIRE(learner.pop_episodes(r) == 1);
  double ret = 0.0;
  for (uint64_t s = 0; s < 14; ++s) ret += static_cast<double>(reward_of(1, s));
  CHECK(r[0] == EpisodeRecord{1, 0, 14, ret, EpisodeEnd::truncated});
}
