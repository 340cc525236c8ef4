// shmreplay/version.hpp: the library's version, the one place it is written (the segment layout has its own, in
// layout.hpp). CMakeLists.txt reads these three lines for project(VERSION) and the package config; pyproject.toml
// reads them (scikit-build-core's regex provider) for the Python package's version; the CLI's --version and the
// Python module's __version__ print kVersion.
#pragma once

#define SHMREPLAY_VERSION_MAJOR 0
#define SHMREPLAY_VERSION_MINOR 2
#define SHMREPLAY_VERSION_PATCH 0

#define SHMREPLAY_VERSION_STR_(x) #x
#define SHMREPLAY_VERSION_STR(x) SHMREPLAY_VERSION_STR_(x)

namespace shmreplay {
/// The library's version, "major.minor.patch" (SHMREPLAY_VERSION_MAJOR, _MINOR and _PATCH).
inline constexpr const char* kVersion = SHMREPLAY_VERSION_STR(SHMREPLAY_VERSION_MAJOR) "." SHMREPLAY_VERSION_STR(
    SHMREPLAY_VERSION_MINOR) "." SHMREPLAY_VERSION_STR(SHMREPLAY_VERSION_PATCH);
}
