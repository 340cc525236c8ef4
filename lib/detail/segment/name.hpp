// detail/segment/name.hpp: a segment's file and its name in shm_directory(): the unnamed file create builds it in,
// the one atomic step that names it, and the advice when the name is taken. Buffer::create_unnamed and
// Buffer::publish (lib/buffer.cpp) call them; a crash at any instruction leaves nothing half-made under the name.
#pragma once

#include <cstdint>
#include <string>

#include "detail/os/file.hpp"

namespace shmreplay::detail {

/// An unnamed (O_TMPFILE) file in `dir` with permission bits `mode`, for segment `name`. Throws Error(system) with
/// advice when `dir` cannot hold unnamed files (not a tmpfs).
UniqueFd make_unnamed_file(const std::string& dir, const std::string& name, uint32_t mode);

/// create() of a name that exists: throws Error(already_exists) with advice that depends on what is there and
/// matches what `shmreplay rm` (Buffer::remove) accepts.
[[noreturn]] void already_exists(const std::string& name, const std::string& path);

/// Gives the finished unnamed file `fd` its name `path`. Without `replace`, linkat() fails with EEXIST when the
/// name exists, so of several racing creators exactly one wins. With it, the file is linked under a hidden name
/// and renamed over the old one in one atomic step.
void publish_name(int fd, const std::string& path, const std::string& dir, const std::string& name, bool replace);

}  // namespace shmreplay::detail
