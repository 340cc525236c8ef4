// cartpole.hpp: the classic cart-pole (Barto, Sutton & Anderson 1983, with the constants and Euler integration
// of Gym's CartPole-v1) and an envpool-style asynchronous pool of them.
//
// The pool mimics envpool's async mode without threads: send() steps the chosen envs at once but each result
// becomes ready only after that env's latency (a per-env base, log-uniform between the pool's bounds, times a
// per-step jitter), and recv() returns the first `batch_size` envs to become ready, in the order they did. So
// the env ids that recv hands back come in a varying, arbitrary order, as with real envpool workers.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cartpole {

using Obs = std::array<float, 4>;  // cart position, cart velocity, pole angle (rad), pole angular velocity

/// One cart-pole. Reward 1 per step; an episode terminates when the pole leans past 12 degrees or the cart
/// leaves [-2.4, 2.4], and is truncated after 500 steps.
class CartPole {
 public:
  static constexpr double kGravity = 9.8, kMassCart = 1.0, kMassPole = 0.1, kHalfLength = 0.5;
  static constexpr double kForce = 10.0, kTau = 0.02;
  static constexpr double kThetaLimit = 12.0 * 2.0 * 3.14159265358979323846 / 360.0, kXLimit = 2.4;
  static constexpr uint32_t kMaxSteps = 500;

  explicit CartPole(uint64_t seed) : rng_(seed) { reset(); }

  Obs reset() {
    std::uniform_real_distribution<double> u(-0.05, 0.05);
    for (double& v : state_) v = u(rng_);
    steps_ = 0;
    return obs();
  }

  struct Result {
    float reward = 0;
    bool terminated = false;
    bool truncated = false;
  };

  /// One 20 ms step pushing the cart left (action 0) or right (action 1).
  Result step(int32_t action) {
    auto& [x, x_dot, theta, theta_dot] = state_;
    constexpr double total_mass = kMassCart + kMassPole, pole_mass_length = kMassPole * kHalfLength;
    const double force = action == 1 ? kForce : -kForce;
    const double cos_t = std::cos(theta), sin_t = std::sin(theta);
    const double temp = (force + pole_mass_length * theta_dot * theta_dot * sin_t) / total_mass;
    const double theta_acc = (kGravity * sin_t - cos_t * temp) /
                             (kHalfLength * (4.0 / 3.0 - kMassPole * cos_t * cos_t / total_mass));
    const double x_acc = temp - pole_mass_length * theta_acc * cos_t / total_mass;
    x += kTau * x_dot;
    x_dot += kTau * x_acc;
    theta += kTau * theta_dot;
    theta_dot += kTau * theta_acc;
    ++steps_;
    Result r;
    r.reward = 1.0f;
    r.terminated = std::abs(x) > kXLimit || std::abs(theta) > kThetaLimit;
    r.truncated = !r.terminated && steps_ >= kMaxSteps;
    return r;
  }

  Obs obs() const {
    return {static_cast<float>(state_[0]), static_cast<float>(state_[1]), static_cast<float>(state_[2]),
            static_cast<float>(state_[3])};
  }

 private:
  std::mt19937_64 rng_;
  std::array<double, 4> state_{};
  uint32_t steps_ = 0;
};

/// What recv() hands back for one env: the observation to act on next, and the outcome of the action sent
/// before (reward 0 and no flags after async_reset). Episodes reset automatically: when `done`, `obs` is already
/// the first observation of the next episode, and `episode_return` is the finished episode's return.
struct EnvResult {
  uint32_t env_id = 0;  // 0 .. num_envs-1 within the pool
  Obs obs{};
  float reward = 0;
  bool done = false;       // the episode ended with the action sent before: terminated or truncated
  bool truncated = false;  // it ended by the time limit
  bool first = false;      // nothing was sent before (async_reset)
  float episode_return = 0;
  uint32_t episode_length = 0;
};

class AsyncCartPolePool {
 public:
  using Clock = std::chrono::steady_clock;

  AsyncCartPolePool(uint32_t num_envs, uint32_t batch_size, uint64_t seed, double min_latency_us,
                    double max_latency_us)
      : batch_size_(batch_size), rng_(seed) {
    if (num_envs == 0 || batch_size == 0 || batch_size > num_envs) {
      throw std::invalid_argument("AsyncCartPolePool: need 0 < batch_size <= num_envs");
    }
    std::uniform_real_distribution<double> log_latency(std::log(min_latency_us), std::log(max_latency_us));
    for (uint32_t i = 0; i < num_envs; ++i) {
      envs_.push_back(Slot{CartPole(seed * 1000003 + i), {}, {}, false, std::exp(log_latency(rng_)), 0, 0});
      envs_.back().result.env_id = i;
    }
  }

  uint32_t num_envs() const { return static_cast<uint32_t>(envs_.size()); }

  /// Starts every env's first episode; their first observations arrive through recv().
  void async_reset() {
    for (Slot& s : envs_) {
      s.result = EnvResult{.env_id = s.result.env_id, .obs = s.env.reset(), .first = true};
      schedule(s);
    }
  }

  /// Steps the given envs (each must have been returned by recv() since it was last sent).
  void send(std::span<const uint32_t> env_ids, std::span<const int32_t> actions) {
    for (std::size_t i = 0; i < env_ids.size(); ++i) {
      Slot& s = envs_.at(env_ids[i]);
      if (s.in_flight) throw std::logic_error("AsyncCartPolePool::send: env already in flight");
      const CartPole::Result r = s.env.step(actions[i]);
      s.episode_return += r.reward;
      ++s.episode_length;
      EnvResult& out = s.result;
      out = EnvResult{.env_id = out.env_id, .obs = s.env.obs(), .reward = r.reward};
      if (r.terminated || r.truncated) {
        out.done = true;
        out.truncated = r.truncated;
        out.episode_return = s.episode_return;
        out.episode_length = s.episode_length;
        out.obs = s.env.reset();
        s.episode_return = 0;
        s.episode_length = 0;
      }
      schedule(s);
    }
  }

  /// Blocks until `batch_size` envs in flight are ready (or all of them, if fewer are in flight) and returns
  /// them in the order they became ready. The span stays valid until the next call.
  std::span<const EnvResult> recv() {
    in_flight_.clear();
    for (uint32_t i = 0; i < envs_.size(); ++i) {
      if (envs_[i].in_flight) in_flight_.push_back(i);
    }
    const std::size_t n = std::min<std::size_t>(batch_size_, in_flight_.size());
    const auto by_ready = [&](uint32_t a, uint32_t b) { return envs_[a].ready_at < envs_[b].ready_at; };
    std::partial_sort(in_flight_.begin(), in_flight_.begin() + static_cast<std::ptrdiff_t>(n), in_flight_.end(),
                      by_ready);
    ready_.clear();
    if (n == 0) return ready_;
    std::this_thread::sleep_until(envs_[in_flight_[n - 1]].ready_at);
    for (std::size_t i = 0; i < n; ++i) {
      Slot& s = envs_[in_flight_[i]];
      s.in_flight = false;
      ready_.push_back(s.result);
    }
    return ready_;
  }

 private:
  struct Slot {
    CartPole env;
    EnvResult result;
    Clock::time_point ready_at;
    bool in_flight;
    double latency_us;  // this env's base latency
    float episode_return;
    uint32_t episode_length;
  };

  void schedule(Slot& s) {
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    s.ready_at = Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(1000.0 * s.latency_us * jitter(rng_)));
    s.in_flight = true;
  }

  uint32_t batch_size_;
  std::mt19937_64 rng_;
  std::vector<Slot> envs_;
  std::vector<uint32_t> in_flight_;
  std::vector<EnvResult> ready_;
};

}  // namespace cartpole
