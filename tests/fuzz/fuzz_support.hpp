// What the fuzz targets share: a private segment directory, files written from fuzz input, and the reader and
// learner calls that every target drives over a segment it managed to open or load.
//
// Each fuzz process makes its own directory under /dev/shm and points SHMREPLAY_SHM_DIR at it (so nothing a fuzz
// input becomes can touch a real segment), and removes it at exit. shmreplay::Error is the expected outcome of
// hostile input and is swallowed; anything else (another exception, a crash, a sanitizer report, a hang) is a
// finding.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "shmreplay/internal/checkpoint_format.hpp"
#include "shmreplay/internal/layout.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/shmreplay.hpp"

namespace shmreplay::fuzz {

/// The process's private segment directory (made on first use, removed at exit).
inline const std::string& private_dir() {
  static const std::string dir = [] {
    // The pid in the name lets tools/fuzz/run.sh remove the directories of fuzz processes that crashed.
    std::string templ = "/dev/shm/shmreplay-fuzz-" + std::to_string(::getpid()) + "-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) std::abort();
    ::setenv("SHMREPLAY_SHM_DIR", templ.c_str(), 1);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(shm_directory(), ec);
    });
    return templ;
  }();
  return dir;
}

/// Replaces the file `path` with `size` bytes of `data` (a new inode each time, so that no mapping of the old
/// file can see it shrink).
inline void write_file(const std::string& path, const uint8_t* data, std::size_t size) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

/// A small deterministic number source fed by the input, for the choices the targets make (rows, lengths).
class Choices {
 public:
  Choices(const uint8_t* data, std::size_t size) {
    for (std::size_t i = 0; i < size; ++i) seed_ = seed_ * 1099511628211ull ^ data[i];
  }
  uint64_t next(uint64_t bound) {  // in [0, bound)
    seed_ ^= seed_ >> 33;
    seed_ *= 0xff51afd7ed558ccdull;
    seed_ ^= seed_ >> 33;
    return bound == 0 ? 0 : seed_ % bound;
  }
  uint64_t seed() const noexcept { return seed_; }

 private:
  uint64_t seed_ = 14695981039346656037ull;
};

/// Drives every read-only view of the segment `name`: open read-only, the inspector's snapshot and listing, and
/// read_steps over a bounded part of each env's view (a few envs).
inline void read_as_inspector(const std::string& name, Choices& choices) {
  try {
    Inspector insp(Buffer::open(name, {.read_only = true}));
    const SegmentInfo info = insp.snapshot();
    for (uint64_t k = 0; k < std::min<uint64_t>(info.num_envs, 4); ++k) {
      const uint64_t env = choices.next(info.num_envs);
      const EnvInfo& e = info.envs[env];
      const uint64_t first = e.head - std::min(e.length, e.head);
      (void)insp.read_steps(env, first + choices.next(8), 1 + choices.next(std::min<uint64_t>(info.capacity, 64)));
    }
    (void)list_segments();
  } catch (const Error&) {
  }
}

/// Drives the learner's calls over the segment `name` (opened writable: a Sampler takes the learner lease): sizes,
/// samples of every kind (with episode options when the buffer records episodes), peek, pop_episodes, nstep,
/// reset_online_queue.
inline void drive_learner(const std::string& name, Choices& choices) {
  try {
    Buffer buf = Buffer::open(name);
    // A hostile segment can make every copy fail validation (an odd update_seq no learner will end): each call
    // then gives up with Errc::contended after max_retry_rounds, which the default makes 10000 rounds.
    Sampler learner(buf, {.max_retry_rounds = 64});
    Rng rng(choices.seed());
    SampleBatch batch;
    const uint64_t envs = buf.num_envs();
    for (uint64_t k = 0; k < std::min<uint64_t>(envs, 4); ++k) (void)learner.sizes(choices.next(envs));
    const auto attempt = [](auto&& call) {
      try {
        call();
      } catch (const Error&) {
      }
    };
    const std::size_t length = 1 + choices.next(std::min<uint64_t>(buf.capacity(), 8));
    const double power = static_cast<double>(choices.next(3));
    // Whatever rate limiter the bytes describe, a held-back call refuses at once instead of waiting.
    const SampleOptions now{.rate_limit_timeout_ms = 0};
    attempt([&] { learner.sample(View::replay, 1 + choices.next(8), length, power, rng, batch, now); });
    attempt([&] {
      learner.sample(View::online, 1 + choices.next(4), length, power, rng, batch,
                     {.period = 1 + choices.next(3), .min_steps = choices.next(4), .rate_limit_timeout_ms = 0});
    });
    attempt([&] { learner.sample_mixed(choices.next(4), 1 + choices.next(4), length, power, rng, batch, now); });
    attempt([&] { learner.sample_transitions(View::replay, 1 + choices.next(8), rng, batch, now); });
    attempt([&] { (void)learner.rate_limit_verdict(1 + choices.next(8)); });
    if (buf.has_episodes()) {
      attempt([&] {
        learner.sample(View::replay, 1 + choices.next(8), length, power, rng, batch, {.episodes = Episodes::stop, .rate_limit_timeout_ms = 0});
      });
      attempt([&] {
        learner.sample(View::replay, 1 + choices.next(8), length, power, rng, batch,
                       {.episodes = Episodes::within, .period = 1 + choices.next(2), .rate_limit_timeout_ms = 0});
      });
      if (batch.rows() > 0 && buf.episode_fields().reward) {
        attempt([&] { (void)nstep(batch, 0, 0, 1 + choices.next(4), 0.99); });
      }
      EpisodeRecord records[8];
      (void)learner.pop_episodes(records);
    }
    if (buf.has_priorities()) {  // the trees' sums are the segment's words: whatever they hold, draws stay in range
      attempt([&] {
        learner.sample(View::replay, 1 + choices.next(8), length, 0.0, rng, batch,
                       {.episodes = buf.has_episodes() && choices.next(2) != 0 ? Episodes::stop : Episodes::cross,
                        .prioritized = true,
                        .rate_limit_timeout_ms = 0});
      });
      attempt([&] { learner.sample_mixed(choices.next(4), 1 + choices.next(4), length, 0.0, rng, batch,
                                         {.prioritized = true, .importance_exponent = 0.5,
                                          .rate_limit_timeout_ms = 0}); });
      if (batch.rows() > 0) {
        std::vector<float> prios(batch.rows(), static_cast<float>(choices.next(5)));
        attempt([&] { (void)learner.update_priorities(batch.env_ids(), batch.start_steps(), prios); });
      }
    }
    std::vector<uint64_t> ids;
    for (uint64_t k = 0; k < std::min<uint64_t>(envs, 4); ++k) ids.push_back(choices.next(envs));
    attempt([&] { learner.peek(ids, batch); });
    learner.reset_online_queue();
    (void)learner.size(View::online);
  } catch (const Error&) {
  }
}

}  // namespace shmreplay::fuzz
