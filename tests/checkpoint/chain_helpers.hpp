// tests/checkpoint/chain_helpers.hpp: what the chain tests of test_checkpoint share (checkpoint/chain.cpp,
// checkpoint/chain_failures.cpp): link paths, state and payload comparisons, a writer process, a small tmpfs.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "detail/protocol/priorities.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "payload.hpp"
#include "support.hpp"
#include "checkpoint/checkpoint_helpers.hpp"

namespace {

using test::DirGuard;

inline std::string temp_dir(const std::string& tag) { return fmt::format("/tmp/{}.chain", unique_name(tag)); }

inline std::string link_file(const std::string& dir, uint64_t seq) {
  return fmt::format("{}/link-{:010}.shmrckpt", dir, seq);
}

inline std::vector<std::string> link_files(const std::vector<uint64_t>& seqs, const std::string& dir) {
  std::vector<std::string> out;
  for (const uint64_t s : seqs) out.push_back(link_file(dir, s));
  return out;
}

inline std::vector<uint64_t> link_seqs(const std::string& dir) {
  std::vector<uint64_t> out;
  for (const ChainLink& l : list_links(dir)) out.push_back(l.seq);
  return out;
}

// The first difference between what `a` and `b` store (every env's head, claim and online start, each stored
// step's bytes, each stored step's priority weight), or "" when they store the same. Both must be quiet.
inline std::string state_difference(const Buffer& a, const Buffer& b) {
  if (a.num_envs() != b.num_envs() || a.capacity() != b.capacity() || !(a.schema() == b.schema())) {
    return "another geometry or schema";
  }
  if (a.has_priorities() != b.has_priorities()) return "one has priorities, the other not";
  for (uint64_t e = 0; e < a.num_envs(); ++e) {
    const test::EnvCounters ca = counters(a, e);
    const test::EnvCounters cb = counters(b, e);
    if (!(ca == cb)) {
      return fmt::format("env {}: head, claimed, online_start {}, {}, {} against {}, {}, {}", e, ca.head, ca.claimed,
                         ca.online_start, cb.head, cb.claimed, cb.online_start);
    }
    const uint64_t lo = ca.claimed > a.capacity() ? ca.claimed - a.capacity() : 0;
    for (uint64_t s = lo; s < ca.head; ++s) {
      if (stored_step(a, e, s) != stored_step(b, e, s)) return fmt::format("env {} step {}: other bytes", e, s);
      if (!a.has_priorities()) continue;
      const double wa = detail::step_weight(detail::priority_tree_of(segment_of(a), e), segment_of(a).env_control(e), s);
      const double wb = detail::step_weight(detail::priority_tree_of(segment_of(b), e), segment_of(b).env_control(e), s);
      if (wa != wb) return fmt::format("env {} step {}: priority weight {} against {}", e, s, wa, wb);
    }
  }
  return "";
}

// The first env of `b` whose stored steps are not what its payload writer published, or "".
inline std::string payload_violation(const Buffer& b) {
  for (uint64_t e = 0; e < b.num_envs(); ++e) {
    const std::string bad = check_env_payloads(b, e);
    if (!bad.empty()) return bad;
  }
  return "";
}

// The seq of the newest link that restores from the links of `dir` up to `seq` alone (hard links to them in a
// directory of their own), as verify_chain finds it.
inline uint64_t restores_alone(const std::string& dir, uint64_t seq) {
  DirGuard alone(temp_dir("chain-alone"));
  REQUIRE(::mkdir(alone.path().c_str(), 0700) == 0);
  for (const ChainLink& l : list_links(dir)) {
    if (l.seq > seq) continue;
    REQUIRE(::link(l.path.c_str(), link_file(alone.path(), l.seq).c_str()) == 0);
  }
  return verify_chain(alone.path()).link_seq;
}

// The bytes of every file in `dir` but its lock, by name: what a failed save must leave as it was.
inline std::map<std::string, std::string> directory_bytes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const std::string& name : test::entries_containing(dir, "")) {
    if (name != "chain.lock") out[name] = slurp(dir + "/" + name);
  }
  return out;
}

// A payload step of `version` (the learner's rewrite of a step bumps it) as the fields try_update takes.
struct PayloadFields {
  explicit PayloadFields(const test::Payload& p)
      : hdr(p.hdr, p.hdr + 4), body(p.body, p.body + test::kBody), tail(p.tail, p.tail + test::kTail) {}
  std::vector<uint64_t> hdr;
  std::vector<float> body;
  std::vector<uint8_t> tail;
};

inline std::string versioned_bytes(uint64_t env, uint64_t step, uint64_t version) {
  const test::Payload p = test::make_payload(env, step, version);
  std::string out(reinterpret_cast<const char*>(p.hdr), sizeof p.hdr);
  out.append(reinterpret_cast<const char*>(p.body), sizeof p.body);
  out.append(reinterpret_cast<const char*>(p.tail), sizeof p.tail);
  return out;
}

// A writer process pushing payload steps into `envs` of `name` until killed, a pause every 8 pushes (so that it
// leaves a core to the saves under test).
inline pid_t payload_writer(const std::string& name, std::vector<int32_t> envs) {
  return test::spawn_payload_writer(name, std::move(envs), 100);
}

// Mounts a tmpfs of `bytes` at a new directory, unmounted and removed when it goes out of scope; mounted() is
// false where this process may not mount (not root, or no CAP_SYS_ADMIN, as in most containers).
class SmallTmpfs {
 public:
  explicit SmallTmpfs(uint64_t bytes) : path_(temp_dir("chain-tmpfs")) {
    if (::geteuid() != 0 || ::mkdir(path_.c_str(), 0700) != 0) return;
    mounted_ = ::mount("tmpfs", path_.c_str(), "tmpfs", 0, fmt::format("size={}", bytes).c_str()) == 0;
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  ~SmallTmpfs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    ::rmdir(path_.c_str());
  }
  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool mounted_ = false;
};

}  // namespace
