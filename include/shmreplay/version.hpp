// shmreplay/version.hpp: the library's version (the segment layout has its own, in layout.hpp).
#pragma once

#define SHMREPLAY_VERSION_MAJOR 0
#define SHMREPLAY_VERSION_MINOR 1
#define SHMREPLAY_VERSION_PATCH 0

namespace shmreplay {
inline constexpr const char* kVersion = "0.1.0";
}
