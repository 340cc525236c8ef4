// Pins the cold-tier section (layout 1.11; internal/cold_layout.hpp) and the cold files' header to the layout
// version. Part of test_layout (pins.cpp pins the rest).
#include <doctest/doctest.h>

#include <cstddef>

#include "shmreplay/internal/cold_layout.hpp"

using namespace shmreplay::layout;

#pragma GCC diagnostic ignored "-Winvalid-offsetof"

TEST_CASE("layout 1.11: the cold-tier section's blocks and the cold files' header are pinned") {
  CHECK(kSectionCold == 14);
  CHECK(sizeof(ColdControl) == 512);
  CHECK(offsetof(ColdControl, cold_capacity) == 0);
  CHECK(offsetof(ColdControl, format_version) == 8);
  CHECK(offsetof(ColdControl, record_bytes) == 16);
  CHECK(offsetof(ColdControl, dir_bytes) == 24);
  CHECK(offsetof(ColdControl, dir) == 64);
  CHECK(sizeof(ColdEnv) == 64);
  CHECK(offsetof(ColdEnv, claimed) == 0);
  CHECK(offsetof(ColdEnv, head) == 8);
  CHECK(cold_envs_at() == 512);
  CHECK(cold_section_bytes(3) == 512 + 3 * 64);
  CHECK(sizeof(ColdFileHeader) == 64);
  CHECK(offsetof(ColdFileHeader, env) == 16);
  CHECK(offsetof(ColdFileHeader, creation_time_ns) == 48);
  CHECK(kColdRecordsOffset == 4096);
  CHECK(kColdFormatVersion == 1);
  CHECK(kColdMagic == 0x444c4f43524d4853ull);  // "SHMRCOLD"
}
