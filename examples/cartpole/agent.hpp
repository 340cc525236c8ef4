// agent.hpp: what the CartPole actors and the learner share: the step schema, the linear policy and value
// function, the self-check stamp of every step, and the small shared block where the learner publishes
// parameters that the actors read.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>

#include "cartpole.hpp"
#include "shmreplay/vocabulary.hpp"  // shm_directory

namespace cartpole {

// One pushed step. obs is what the actor acted on; action, logprob (of the behaviour policy) and value (its
// estimate of obs) come from the actor; reward and done are the outcome (as in the Muesli seed's Storage).
// truncated marks an episode cut by the time limit, episode_return is the finished return on done steps, and
// stamp = {env id, step index, checksum of the other fields} lets the learner verify every row it samples.
inline constexpr const char* kSchema =
    "obs:f32[4] action:i32 logprob:f32 reward:f32 value:f32 done:bool truncated:bool episode_return:f32 "
    "stamp:u64[3]";
enum Field : std::size_t { kObs, kAction, kLogprob, kReward, kValue, kDone, kTruncated, kEpisodeReturn, kStamp };

inline constexpr double kGamma = 0.98;
inline constexpr double kValueScale = 1.0 / (1.0 - kGamma);  // V = kValueScale * w.psi keeps w of order 1

inline constexpr std::size_t kPolicyFeatures = 5;   // scaled obs, bias
inline constexpr std::size_t kValueFeatures = 15;   // bias, scaled obs, their 10 products
inline constexpr std::size_t kNumParams = kPolicyFeatures + kValueFeatures;
using Params = std::array<double, kNumParams>;     // policy logit weights, then value weights

inline std::array<double, 4> scaled(const float* obs) {
  return {obs[0] / 2.4, obs[1] / 3.0, obs[2] / 0.21, obs[3] / 3.0};
}

inline std::array<double, kPolicyFeatures> policy_features(const float* obs) {
  const auto s = scaled(obs);
  return {s[0], s[1], s[2], s[3], 1.0};
}

inline std::array<double, kValueFeatures> value_features(const float* obs) {
  const auto s = scaled(obs);
  std::array<double, kValueFeatures> f{};
  f[0] = 1.0;
  std::size_t k = 1;
  for (std::size_t i = 0; i < 4; ++i) f[k++] = s[i];
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = i; j < 4; ++j) f[k++] = s[i] * s[j];
  }
  return f;
}

/// Logit of "push right" (action 1); the policy is Bernoulli(sigmoid(logit)).
inline double policy_logit(const Params& p, const float* obs) {
  const auto f = policy_features(obs);
  double z = 0;
  for (std::size_t i = 0; i < kPolicyFeatures; ++i) z += p[i] * f[i];
  return std::clamp(z, -30.0, 30.0);
}

inline double log_prob(double logit, int32_t action) {
  // log sigmoid(z) for action 1, log sigmoid(-z) for action 0, computed stably.
  const double z = action == 1 ? logit : -logit;
  return -std::log1p(std::exp(-z));
}

inline double value(const Params& p, const float* obs) {
  const auto f = value_features(obs);
  double v = 0;
  for (std::size_t i = 0; i < kValueFeatures; ++i) v += p[kPolicyFeatures + i] * f[i];
  return kValueScale * v;
}

/// FNV-1a over the step's bytes, seeded with its env id and step index.
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  template <class T>
  Hasher& add(const T& value) {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
    return *this;
  }
};

inline uint64_t step_checksum(uint64_t env, uint64_t step, const float* obs, int32_t action, float logprob,
                              float reward, float value, uint8_t done, uint8_t truncated, float episode_return) {
  Hasher h;
  h.add(env).add(step);
  for (int i = 0; i < 4; ++i) h.add(obs[i]);
  h.add(action).add(logprob).add(reward).add(value).add(done).add(truncated).add(episode_return);
  return h.h;
}

/// The learner's published parameters: a seqlock over 64-bit words, in its own small shared-memory file next to the
/// buffer ("<buffer>.params" in shmreplay::shm_directory(), so SHMREPLAY_SHM_DIR moves it with the buffer). One
/// writer (the learner), any number of readers.
class SharedParams {
 public:
  static std::string path(const std::string& buffer) { return shmreplay::shm_directory() + "/" + buffer + ".params"; }

  /// Creates the block (zero parameters, version 0), readable and writable by this user only. Throws
  /// std::runtime_error if it exists or cannot be made.
  static SharedParams create(const std::string& buffer) {
    namespace bip = boost::interprocess;
    const std::string file = path(buffer);
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error("cannot create '" + file + "': " + std::strerror(errno));
    const bool sized = ::ftruncate(fd, sizeof(Block)) == 0;
    ::close(fd);
    if (!sized) throw std::runtime_error("cannot size '" + file + "': " + std::strerror(errno));
    SharedParams p(bip::mapped_region(bip::file_mapping(file.c_str(), bip::read_write), bip::read_write));
    new (p.region_.get_address()) Block{};
    p.block().magic.store(kMagic, std::memory_order_release);  // pairs with the acquire load in open()
    return p;
  }

  /// Throws boost::interprocess::interprocess_exception when the block does not exist.
  static SharedParams open(const std::string& buffer) {
    namespace bip = boost::interprocess;
    const std::string file = path(buffer);
    SharedParams p(bip::mapped_region(bip::file_mapping(file.c_str(), bip::read_write), bip::read_write));
    // Pairs with the release store in create().
    if (p.region_.get_size() < sizeof(Block) || p.block().magic.load(std::memory_order_acquire) != kMagic) {
      throw std::runtime_error("'" + file + "' is not a CartPole parameter block");
    }
    return p;
  }

  static void remove(const std::string& buffer) { ::unlink(path(buffer).c_str()); }

  /// The learner only. Readers never see a mix of two versions.
  void publish(const Params& params) {
    Block& b = block();
    const uint64_t v = b.version.load(std::memory_order_relaxed);
    b.version.store(v + 1, std::memory_order_relaxed);  // odd: writing
    std::atomic_thread_fence(std::memory_order_release);  // pairs with the reader's acquire fence
    for (std::size_t i = 0; i < kNumParams; ++i) {
      b.words[i].store(std::bit_cast<uint64_t>(params[i]), std::memory_order_relaxed);
    }
    b.version.store(v + 2, std::memory_order_release);  // pairs with the reader's first acquire load
  }

  /// The version last published (0: none yet). Cheap: readers poll it and read() only when it changed.
  uint64_t version() const { return block().version.load(std::memory_order_acquire); }  // pairs with publish

  /// Copies a consistent set of parameters; returns its version.
  uint64_t read(Params& out) const {
    const Block& b = block();
    for (;;) {
      const uint64_t v1 = b.version.load(std::memory_order_acquire);  // pairs with publish's last store
      if (v1 % 2 != 0) continue;
      for (std::size_t i = 0; i < kNumParams; ++i) {
        out[i] = std::bit_cast<double>(b.words[i].load(std::memory_order_relaxed));
      }
      std::atomic_thread_fence(std::memory_order_acquire);  // pairs with publish's release fence
      if (b.version.load(std::memory_order_relaxed) == v1) return v1;
    }
  }

 private:
  static constexpr uint64_t kMagic = 0x53524d5043415254ull;  // "TRACPMRS"
  struct Block {
    std::atomic<uint64_t> magic;
    std::atomic<uint64_t> version;  // seqlock: odd while the learner writes
    std::array<std::atomic<uint64_t>, kNumParams> words;
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "the block is shared between processes");

  explicit SharedParams(boost::interprocess::mapped_region region) : region_(std::move(region)) {}
  Block& block() { return *static_cast<Block*>(region_.get_address()); }
  const Block& block() const { return *static_cast<const Block*>(region_.get_address()); }

  boost::interprocess::mapped_region region_;
};

/// SIGINT and SIGTERM ask the program to stop at its next loop iteration. SIGPIPE is ignored: a launcher that
/// died (its pipe closed) must not kill a child before it released its leases; say() drops such output.
inline std::atomic<bool> g_stop{false};
inline void install_stop_handlers() {
  static_assert(std::atomic<bool>::is_always_lock_free, "used from a signal handler");
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop.store(true, std::memory_order_relaxed); };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

/// Prints a line on stdout and flushes it; a closed stdout is not an error for a worker.
inline void say(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace cartpole
