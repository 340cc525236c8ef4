// Creates, opens and removes a segment through the installed package; exits 0 when all of it works.
#include <shmreplay/shmreplay.hpp>

// The segment's bytes are not part of the API: the install leaves the internal headers out.
#if __has_include(<shmreplay/internal/segment.hpp>)
#error "the installed package holds shmreplay/internal/: internal headers must not be installed"
#endif

#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>

int main() {
  const std::string name = "srt-consumer-" + std::to_string(::getpid());
  try {
    const auto schema = shmreplay::Schema::parse("obs:f32[4] done:bool");
    const auto created = shmreplay::Buffer::create(name, 2, 16, schema);
    const auto opened = shmreplay::Buffer::open(name, {.expected_schema = schema});
    const bool same_version = std::strcmp(shmreplay::kVersion, SHMREPLAY_PACKAGE_VERSION) == 0;
    if (!same_version) {
      std::fprintf(stderr, "consumer: the headers say version %s, the CMake package config %s\n", shmreplay::kVersion,
                   SHMREPLAY_PACKAGE_VERSION);
    }
    const bool ok = same_version && opened.num_envs() == 2 && opened.capacity() == 16 && opened.schema() == schema;
    shmreplay::Buffer::remove(name);
    std::printf("consumer: shmreplay %s, %s\n", shmreplay::kVersion, ok ? "ok" : "MISMATCH");
    return ok ? 0 : 1;
  } catch (const shmreplay::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
