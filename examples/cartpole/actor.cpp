// cartpole_actor: an env worker process. It owns a range of env ids of a shmreplay buffer, drives that many
// CartPoles envpool-style (send actions for a batch of envs; recv returns whichever envs finished, in arbitrary
// order), acts with the parameters the learner last published, and pushes every completed step.
//
//   cartpole_actor --buffer NAME --first 0 --count 16 [--batch 8] [--seed 1] [--seconds 0]
//
// Stops on SIGINT/SIGTERM (or after --seconds); the last line of its output is "@report {json}" for the
// launcher.
#include <fmt/format.h>
#include <shmreplay/shmreplay.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <numeric>
#include <vector>

#include "agent.hpp"

using namespace cartpole;

namespace {

struct Options {
  std::string buffer;
  uint32_t first = 0, count = 16, batch = 8;
  uint64_t seed = 1;
  double seconds = 0, min_latency_us = 200, max_latency_us = 2000;
};

struct Pending {  // the half of a step known when its action is sent
  Obs obs{};
  int32_t action = 0;
  float logprob = 0, value = 0;
  bool valid = false;
};

// One push call's arrays: a leading dimension of up to `batch` rows per field, as envpool's recv hands back.
struct PushBatch {
  explicit PushBatch(std::size_t n)
      : ids(n), obs(n), action(n), logprob(n), reward(n), value(n), done(n), truncated(n), ret(n), stamp(n) {}
  std::vector<uint64_t> ids;
  std::vector<Obs> obs;
  std::vector<int32_t> action;
  std::vector<float> logprob, reward, value;
  std::vector<uint8_t> done, truncated;
  std::vector<float> ret;
  std::vector<std::array<uint64_t, 3>> stamp;

  // Row n: the step of `env` that began when `p` was sent and ended with `r`, which the push will give index `step`.
  void set(std::size_t n, uint64_t env, uint64_t step, const Pending& p, const EnvResult& r) {
    ids[n] = env;
    obs[n] = p.obs;
    action[n] = p.action;
    logprob[n] = p.logprob;
    reward[n] = r.reward;
    value[n] = p.value;
    done[n] = r.done;
    truncated[n] = r.truncated;
    ret[n] = r.done ? r.episode_return : 0.0f;
    stamp[n] = {env, step,
                step_checksum(env, step, p.obs.data(), p.action, p.logprob, r.reward, p.value, done[n], truncated[n],
                              ret[n])};
  }

  // Pushes the first n rows in one call.
  void push(shmreplay::Writer& writer, std::size_t n) const {
    writer.push(std::span<const uint64_t>(ids.data(), n),
                {rows(obs, n), rows(action, n), rows(logprob, n), rows(reward, n), rows(value, n), rows(done, n),
                 rows(truncated, n), rows(ret, n), rows(stamp, n)});
  }

  template <class T>
  static shmreplay::FieldBytes rows(const std::vector<T>& v, std::size_t n) {
    return {v.data(), n * sizeof(T)};
  }
};

int run(const Options& o) {
  shmreplay::Buffer buffer = shmreplay::Buffer::open(o.buffer, {.expected_schema = shmreplay::Schema::parse(kSchema)});
  shmreplay::Writer writer = shmreplay::Writer::range(buffer, o.first, o.count);
  SharedParams shared = SharedParams::open(o.buffer);
  Params params{};
  uint64_t params_version = shared.read(params);

  AsyncCartPolePool pool(o.count, o.batch, o.seed, o.min_latency_us, o.max_latency_us);
  std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<Pending> pending(o.count);
  PushBatch batch(o.batch);
  std::vector<uint32_t> send_ids;
  std::vector<int32_t> send_actions;
  std::deque<float> recent;  // returns of the last 100 episodes
  std::vector<float> first_returns;
  uint64_t steps = 0, episodes = 0, param_updates = 0;
  const auto start = std::chrono::steady_clock::now();

  pool.async_reset();
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (o.seconds > 0 && std::chrono::steady_clock::now() - start > std::chrono::duration<double>(o.seconds)) break;
    const auto results = pool.recv();
    if (shared.version() != params_version) {
      params_version = shared.read(params);
      ++param_updates;
    }
    std::size_t n = 0;
    send_ids.clear();
    send_actions.clear();
    for (const EnvResult& r : results) {
      Pending& p = pending[r.env_id];
      if (p.valid) {  // the step that began when p was sent is complete: queue it for the push
        const uint64_t env = o.first + r.env_id;
        batch.set(n++, env, writer.head(env), p, r);  // head: the index this push gives the step
      }
      if (r.done) {
        ++episodes;
        if (first_returns.size() < 100) first_returns.push_back(r.episode_return);
        recent.push_back(r.episode_return);
        if (recent.size() > 100) recent.pop_front();
      }
      const double logit = policy_logit(params, r.obs.data());
      const int32_t action = uniform(rng) < 1.0 / (1.0 + std::exp(-logit)) ? 1 : 0;
      p = Pending{r.obs, action, static_cast<float>(log_prob(logit, action)),
                  static_cast<float>(value(params, r.obs.data())), true};
      send_ids.push_back(r.env_id);
      send_actions.push_back(action);
    }
    if (n > 0) {
      batch.push(writer, n);
      steps += n;
    }
    pool.send(send_ids, send_actions);
  }

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto mean = [](const auto& v) {
    return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  say(fmt::format("envs {}-{}: {} steps ({:.0f}/s), {} episodes, mean return first {:.1f} last {:.1f}, {} parameter updates",
             o.first, o.first + o.count - 1, steps, static_cast<double>(steps) / secs, episodes, mean(first_returns), mean(recent),
             param_updates));
  const nlohmann::json report = {{"role", "actor"},           {"first_env", o.first},
                                 {"envs", o.count},           {"steps", steps},
                                 {"episodes", episodes},      {"return_first", mean(first_returns)},
                                 {"return_last", mean(recent)}, {"param_updates", param_updates},
                                 {"seconds", secs}};
  say("@report " + report.dump());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("CartPole env worker: pushes steps of its envs into a shmreplay buffer");
  app.add_option("--buffer", o.buffer, "buffer name")->required();
  app.add_option("--first", o.first, "first env id owned");
  app.add_option("--count", o.count, "number of env ids owned")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "envs per recv (envpool's batch_size)")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "random seed");
  app.add_option("--seconds", o.seconds, "stop after this long (0: on SIGINT/SIGTERM)");
  app.add_option("--min-latency-us", o.min_latency_us, "fastest env's mean step latency");
  app.add_option("--max-latency-us", o.max_latency_us, "slowest env's mean step latency");
  CLI11_PARSE(app, argc, argv);
  o.batch = std::min(o.batch, o.count);
  install_stop_handlers();
  try {
    return run(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cartpole_actor: error: {}\n", e.what());
    return 1;
  }
}
