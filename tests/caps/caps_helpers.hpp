// Shared by the sample-cap tests (tests/caps/): a buffer whose steps say which env and step they are, created with
// a sample cap, and a pusher of such steps; the process tests' shared tallies and child bodies.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <new>
#include <string>

#include "shmreplay/shmreplay.hpp"
#include "support.hpp"

namespace shmreplay::test {

// "env" and "step" say where a sampled row's first step came from.
inline const Schema kCapsSchema = Schema::parse("env:u64 step:u64");

struct CapsRig {
  SegmentGuard guard;
  Buffer buf;
  CapsRig(const std::string& tag, uint64_t envs, uint64_t capacity, uint64_t cap, uint64_t max_learners = 1)
      : guard(unique_name(tag)),
        buf(Buffer::create(guard.name(), envs, capacity, kCapsSchema,
                           {.max_learners = max_learners, .max_times_sampled = cap})) {}
};

// Pushes the next step of `env`; its payload is (env, head).
inline void push_tagged(Writer& w, uint64_t env) {
  const uint64_t step = w.head(env);
  w.push_one(env, {FieldBytes{&env, sizeof env}, FieldBytes{&step, sizeof step}});
}

// For the process tests (caps/processes.cpp, queue/processes.cpp): a T (the children's tallies, with a
// std::atomic<uint64_t> `failures`) in a shared anonymous mapping, built in place.
template <class T>
T* map_shared_tally() {
  void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return new (p) T{};
}

// A forked child's body: an exception it should not have thrown is printed and counted in t->failures; the child
// ends with _exit(3) either way (its work ends only by a kill or by its own return).
template <class T>
[[noreturn]] void run_child(T* t, const char* who, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s %d: %s\n", who, static_cast<int>(::getpid()), e.what());
    t->failures.fetch_add(1);
  }
  ::_exit(3);
}

}  // namespace shmreplay::test
