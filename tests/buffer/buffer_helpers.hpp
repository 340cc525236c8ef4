// tests/buffer/buffer_helpers.hpp: what the parts of test_buffer share (tests/CMakeLists.txt builds them into one
// executable): the test schema, a real segment's bytes and ways to damage them and open the result, and a
// mapping's resident size.
// test_buffer: Buffer: create, open, remove, and every kind of bad input, across real processes.
#pragma once

#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/layout.hpp"
#include "support.hpp"

using namespace shmreplay;
using namespace shmreplay::layout;
using test::error_of;
using test::run_in_child;
using test::SegmentGuard;
using test::unique_name;

namespace {

const Schema kSchema = Schema::parse("obs:f32[4] action:i32 reward:f32 done:bool");

using test::code;

inline std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::string& path, const std::vector<char>& bytes) {
  test::write_file(path, std::string_view(bytes.data(), bytes.size()));
}

// A copy of a freshly created segment's bytes, for tests that corrupt it.
inline std::vector<char> real_segment_bytes() {
  const std::string name = unique_name("src");
  SegmentGuard guard(name);
  (void)Buffer::create(name, 3, 16, kSchema);
  return read_file(guard.path());
}

template <class T>
inline void poke(std::vector<char>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

// Opens a file holding `bytes` and returns the error code (0 when it opens), with the message in *message.
inline int open_bytes(const std::vector<char>& bytes, std::string* message, const OpenOptions& options = {}) {
  const std::string name = unique_name("bad");
  SegmentGuard guard(name);
  write_file(guard.path(), bytes);
  return error_of([&] { (void)Buffer::open(name, options); }, message);
}

using test::contains;


// The resident bytes (Rss) of this process's mapping that starts at `base`, from /proc/self/smaps; -1 if none.
inline int64_t mapping_rss_bytes(const void* base) {
  std::ifstream smaps("/proc/self/smaps");
  const auto want = reinterpret_cast<uintptr_t>(base);
  bool in_it = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long start = 0;
    unsigned long end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2 && line.find(':') > line.find(' ')) {
      in_it = start == want;
      continue;
    }
    long long kib = 0;
    if (in_it && std::sscanf(line.c_str(), "Rss: %lld kB", &kib) == 1) return kib * 1024;
  }
  return -1;
}

}  // namespace
