// cartpole_learner: the learner process. It waits for enough data, samples mixed batches of sequences (replay
// plus online queue, as Muesli does), verifies every sampled step's stamp, takes one actor-critic step with
// V-trace targets (IMPALA) on the masked sequences, publishes the new parameters for the actors, and resets the
// online queue after each update.
//
//   cartpole_learner --buffer NAME [--replay-batch 32] [--online-batch 32] [--length 16] [--seconds 0]
//
// Prints one progress line per second; stops on SIGINT/SIGTERM (or after --seconds); the last line of its
// output is "@report {json}" for the launcher.
#include <fmt/format.h>
#include <shmreplay/shmreplay.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <numeric>
#include <vector>

#include "agent.hpp"

using namespace cartpole;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string buffer;
  std::size_t replay_batch = 32, online_batch = 32, length = 16;
  double power = 1.0, lr = 0.01, entropy = 0.01, seconds = 0, print_seconds = 1.0;
  uint64_t min_replay = 2048, min_online = 256, seed = 1;
};

class Adam {
 public:
  explicit Adam(double lr) : lr_(lr) {}
  void step(Params& p, const Params& grad) {  // gradient descent on the loss
    ++t_;
    const double c1 = 1 - std::pow(0.9, t_), c2 = 1 - std::pow(0.999, t_);
    for (std::size_t i = 0; i < p.size(); ++i) {
      m_[i] = 0.9 * m_[i] + 0.1 * grad[i];
      v_[i] = 0.999 * v_[i] + 0.001 * grad[i] * grad[i];
      p[i] -= lr_ * (m_[i] / c1) / (std::sqrt(v_[i] / c2) + 1e-8);
    }
  }

 private:
  double lr_;
  double t_ = 0;
  Params m_{}, v_{};
};

struct UpdateStats {
  double value_loss = 0;  // mean squared V-trace error over the trained steps
  uint64_t trained = 0;
  uint64_t violations = 0;
  std::vector<float> returns;  // episode returns ending in the online rows
};

// Checks one row against its stamps: env id, consecutive step indices, checksums, and a mask that is a prefix
// ending at or before the env's head. Returns the number of valid steps, or -1 on a violation.
int64_t check_row(const shmreplay::SampleBatch& b, std::size_t row, uint64_t head_now) {
  const std::size_t L = b.sequence_length();
  const uint64_t env = b.env_ids()[row], start = b.start_steps()[row];
  std::size_t n = 0;
  while (n < L && b.valid(row, n)) ++n;
  for (std::size_t t = n; t < L; ++t) {
    if (b.valid(row, t)) return -1;  // a hole in the mask
  }
  if (n == 0 || start + n > head_now) return -1;
  for (std::size_t t = 0; t < n; ++t) {
    uint64_t stamp[3];
    float obs[4];
    std::memcpy(stamp, b.step(kStamp, row, t), sizeof stamp);
    std::memcpy(obs, b.step(kObs, row, t), sizeof obs);
    const auto scalar = [&](Field f, auto zero) {
      decltype(zero) v;
      std::memcpy(&v, b.step(f, row, t), sizeof v);
      return v;
    };
    const uint64_t sum = step_checksum(env, start + t, obs, scalar(kAction, int32_t{}), scalar(kLogprob, 0.0f),
                                       scalar(kReward, 0.0f), scalar(kValue, 0.0f), scalar(kDone, uint8_t{}),
                                       scalar(kTruncated, uint8_t{}), scalar(kEpisodeReturn, 0.0f));
    if (stamp[0] != env || stamp[1] != start + t || stamp[2] != sum) return -1;
  }
  return static_cast<int64_t>(n);
}

// Accumulates the loss gradient of one row of n valid steps into `grad` (V-trace, lambda = 1, rho-bar = c-bar = 1).
void row_gradient(const shmreplay::SampleBatch& b, std::size_t row, std::size_t n, const Params& p,
                  double entropy_coef, Params& grad, UpdateStats& stats) {
  std::vector<double> v(n), rho(n), vs(n);
  std::vector<Obs> observations(n);
  for (std::size_t t = 0; t < n; ++t) std::memcpy(observations[t].data(), b.step(kObs, row, t), sizeof(Obs));
  const auto obs = [&](std::size_t t) { return observations[t].data(); };
  const auto get = [&](Field f, std::size_t t, auto zero) {
    decltype(zero) x;
    std::memcpy(&x, b.step(f, row, t), sizeof x);
    return x;
  };
  for (std::size_t t = 0; t < n; ++t) {
    v[t] = value(p, obs(t));
    const double logit = policy_logit(p, obs(t));
    rho[t] = std::min(1.0, std::exp(log_prob(logit, get(kAction, t, int32_t{})) - get(kLogprob, t, 0.0f)));
  }
  const bool last_done = get(kDone, n - 1, uint8_t{}) != 0;
  const std::size_t m = last_done ? n : n - 1;  // steps with a target (the last one only bootstraps otherwise)
  // next_value(t): the value after step t; 0 past a termination, V(obs_t) as a stand-in past a truncation.
  const auto next_value = [&](std::size_t t) {
    if (get(kDone, t, uint8_t{}) == 0) return v[t + 1];
    return get(kTruncated, t, uint8_t{}) != 0 ? v[t] : 0.0;
  };
  for (std::size_t i = m; i-- > 0;) {
    const bool done = get(kDone, i, uint8_t{}) != 0;
    const double delta = rho[i] * (get(kReward, i, 0.0f) + kGamma * next_value(i) - v[i]);
    const double carry = (done || i + 1 >= m) ? 0.0 : kGamma * rho[i] * (vs[i + 1] - v[i + 1]);
    vs[i] = v[i] + delta + carry;
  }
  for (std::size_t t = 0; t < m; ++t) {
    const float* o = obs(t);
    const bool done = get(kDone, t, uint8_t{}) != 0;
    // Value: descend 0.5 (vs - V)^2 with vs held fixed.
    const double err = vs[t] - v[t];
    stats.value_loss += err * err;
    const auto fv = value_features(o);
    for (std::size_t i = 0; i < kValueFeatures; ++i) grad[kPolicyFeatures + i] -= err / kValueScale * fv[i];
    // Policy: ascend rho * (r + gamma vs_{t+1} - V) * grad log pi, plus an entropy bonus.
    const double q = get(kReward, t, 0.0f) + kGamma * (done ? next_value(t) : (t + 1 < m ? vs[t + 1] : v[t + 1]));
    const double advantage = rho[t] * (q - v[t]) / kValueScale;
    const double logit = policy_logit(p, o);
    const double prob = 1.0 / (1.0 + std::exp(-logit));
    const double dlogit = advantage * (get(kAction, t, int32_t{}) - prob) - entropy_coef * logit * prob * (1 - prob);
    const auto fp = policy_features(o);
    for (std::size_t i = 0; i < kPolicyFeatures; ++i) grad[i] -= dlogit * fp[i];
  }
  stats.trained += m;
}

// The gradient of one sampled batch (every row's that checks, into `grad`), and its statistics: rows trained, value
// loss, violations, and the returns of the episodes that ended in its online rows (the freshest episodes).
UpdateStats batch_gradient(const shmreplay::SampleBatch& batch, shmreplay::Sampler& learner, const Options& o,
                           const Params& params, Params& grad) {
  UpdateStats stats;
  for (std::size_t row = 0; row < batch.rows(); ++row) {
    const int64_t n = check_row(batch, row, learner.sizes(batch.env_ids()[row]).head);
    if (n < 0) {
      ++stats.violations;
      continue;
    }
    row_gradient(batch, row, static_cast<std::size_t>(n), params, o.entropy, grad, stats);
    if (row >= o.replay_batch) {  // online rows: the freshest episodes
      for (int64_t t = 0; t < n; ++t) {
        if (std::to_integer<int>(*batch.step(kDone, row, static_cast<std::size_t>(t))) != 0) {
          float ret;
          std::memcpy(&ret, batch.step(kEpisodeReturn, row, static_cast<std::size_t>(t)), sizeof ret);
          stats.returns.push_back(ret);
        }
      }
    }
  }
  return stats;
}

// The run's last lines: its totals, and the value loss and episode return over its first and last tenth (at least
// one update, at most 100 of them; 200 episodes), as text and as an @report line.
void report_run(const std::vector<double>& losses, const std::vector<float>& all_returns, uint64_t updates,
                uint64_t rows, uint64_t violations, const shmreplay::Sampler& learner, double secs, uint64_t pushed) {
  // First and last tenth of the run (at least one update, at most 100).
  const std::size_t k = std::clamp<std::size_t>(losses.size() / 10, 1, 100);
  const auto mean_of = [](auto first, auto last) {
    return first == last ? 0.0 : std::accumulate(first, last, 0.0) / static_cast<double>(last - first);
  };
  const std::size_t kr = std::clamp<std::size_t>(all_returns.size() / 10, 1, 200);
  const double loss_first = mean_of(losses.begin(), losses.begin() + static_cast<std::ptrdiff_t>(std::min(k, losses.size())));
  const double loss_last = mean_of(losses.end() - static_cast<std::ptrdiff_t>(std::min(k, losses.size())), losses.end());
  const double ret_first = mean_of(all_returns.begin(), all_returns.begin() + static_cast<std::ptrdiff_t>(std::min(kr, all_returns.size())));
  const double ret_last = mean_of(all_returns.end() - static_cast<std::ptrdiff_t>(std::min(kr, all_returns.size())), all_returns.end());
  say(fmt::format("{} updates, {} rows sampled ({:.0f}/s), {} retries, {} violations; value loss {:.3f} -> {:.3f}; "
             "episode return {:.1f} -> {:.1f}",
             updates, rows, static_cast<double>(rows) / secs, learner.retries(), violations, loss_first, loss_last,
             ret_first, ret_last));
  const nlohmann::json report = {
      {"role", "learner"},        {"updates", updates},         {"rows_sampled", rows},
      {"retries", learner.retries()}, {"violations", violations}, {"loss_first", loss_first},
      {"loss_last", loss_last},   {"return_first", ret_first},  {"return_last", ret_last},
      {"seconds", secs},          {"pushed", pushed}};
  say("@report " + report.dump());
}

int run(const Options& o) {
  shmreplay::Buffer buffer = shmreplay::Buffer::open(o.buffer, {.expected_schema = shmreplay::Schema::parse(kSchema)});
  shmreplay::Sampler learner(buffer);
  SharedParams shared = SharedParams::open(o.buffer);
  Params params{};
  shared.publish(params);
  Adam adam(o.lr);
  shmreplay::Rng rng(o.seed);
  shmreplay::SampleBatch batch;

  const auto start = Clock::now();
  const auto total_pushed = [&] {
    uint64_t n = 0;
    for (uint64_t e = 0; e < buffer.num_envs(); ++e) n += learner.sizes(e).head;
    return n;
  };
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  while (!g_stop.load(std::memory_order_relaxed) && !learner.wait(shmreplay::View::replay, o.min_replay, 100)) {
  }
  say(fmt::format("replay holds {} steps: learning", learner.size(shmreplay::View::replay)));

  std::vector<double> losses;
  std::vector<float> all_returns;
  uint64_t updates = 0, rows = 0, violations = 0, window_rows = 0, window_pushed = total_pushed();
  double window_loss = 0, window_start = elapsed(), next_print = window_start + o.print_seconds;
  uint64_t window_updates = 0;
  std::vector<float> window_returns;
  while (!g_stop.load(std::memory_order_relaxed) && (o.seconds <= 0 || elapsed() < o.seconds)) {
    if (learner.wait(shmreplay::View::online, o.min_online, 100)) {
      learner.sample_mixed(o.replay_batch, o.online_batch, o.length, o.power, rng, batch);
      learner.reset_online_queue();
      Params grad{};
      const UpdateStats stats = batch_gradient(batch, learner, o, params, grad);
      if (stats.trained > 0) {
        for (double& g : grad) g /= static_cast<double>(stats.trained);
        adam.step(params, grad);
        shared.publish(params);
        const double loss = stats.value_loss / static_cast<double>(stats.trained);
        losses.push_back(loss);
        window_loss += loss;
        ++window_updates;
        ++updates;
      }
      rows += batch.rows();
      window_rows += batch.rows();
      violations += stats.violations;
      window_returns.insert(window_returns.end(), stats.returns.begin(), stats.returns.end());
      all_returns.insert(all_returns.end(), stats.returns.begin(), stats.returns.end());
    }
    const double now = elapsed();
    if (now >= next_print) {
      const uint64_t pushed = total_pushed();
      const double dt = now - window_start;
      const double mean_ret = window_returns.empty() ? 0.0
          : std::accumulate(window_returns.begin(), window_returns.end(), 0.0) / static_cast<double>(window_returns.size());
      say(fmt::format("t {:5.1f}s  updates {:6}  value loss {:8.3f}  episode return {:6.1f}  samples/s {:8.0f}  "
                 "pushes/s {:8.0f}  retries {}  violations {}",
                 now, updates, window_updates ? window_loss / static_cast<double>(window_updates) : 0.0, mean_ret,
                 static_cast<double>(window_rows) / dt, static_cast<double>(pushed - window_pushed) / dt,
                 learner.retries(), violations));
          window_start = now;
      next_print = now + o.print_seconds;
      window_rows = window_updates = 0;
      window_loss = 0;
      window_pushed = pushed;
      window_returns.clear();
    }
  }

  report_run(losses, all_returns, updates, rows, violations, learner, elapsed(), total_pushed());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("CartPole learner: samples sequences from a shmreplay buffer and trains an actor-critic");
  app.add_option("--buffer", o.buffer, "buffer name")->required();
  app.add_option("--replay-batch", o.replay_batch, "rows from the replay view per update");
  app.add_option("--online-batch", o.online_batch, "rows from the online queue per update")->check(CLI::PositiveNumber);
  app.add_option("--length", o.length, "sequence length")->check(CLI::Range(2, 1000));
  app.add_option("--power", o.power, "distribution power of the start weights");
  app.add_option("--lr", o.lr, "Adam learning rate");
  app.add_option("--entropy", o.entropy, "entropy bonus");
  app.add_option("--min-replay", o.min_replay, "steps in the replay view before learning starts");
  app.add_option("--min-online", o.min_online, "new steps in the online queue per update");
  app.add_option("--seed", o.seed, "random seed");
  app.add_option("--seconds", o.seconds, "stop after this long (0: on SIGINT/SIGTERM)");
  app.add_option("--print-seconds", o.print_seconds, "progress line interval");
  CLI11_PARSE(app, argc, argv);
  install_stop_handlers();
  try {
    return run(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cartpole_learner: error: {}\n", e.what());
    return 1;
  }
}
