// detail/storage/cold_files.hpp: the cold tier's files (layout 1.11; internal/cold_layout.hpp, docs/design/cold_tier.md):
// create's checks of the cold options, the directory and one file per env that create makes, what open checks
// before it maps them, and their removal with the segment.
//
// Who calls it: Buffer::create_unnamed, Buffer::open and Buffer::remove (lib/buffer.cpp), and the roles' refusals of
// what the first slice does not support (checkpoints). Cold path: every function may throw Error.
#pragma once

#include <cstdint>
#include <string>

#include "shmreplay/internal/segment.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay::detail {

/// CreateOptions' cold tier, as create hands it down (the storage layer does not see the roles' options).
struct ColdOptions {
  uint64_t cold_capacity = 0;  ///< CreateOptions::cold_capacity
  std::string cold_dir;        ///< CreateOptions::cold_dir
  uint32_t mode = 0600;        ///< the segment's mode, for the files
  bool replace = false;        ///< CreateOptions::replace
  /// What of the other options the first slice does not support with a cold tier ("" when none): create's words,
  /// "priority_exponent is given (...)"
  std::string unsupported;
};

/// create's checks of the cold options: throws Error(invalid_argument) naming the option and why (a cold directory
/// that is not an absolute path of a directory, a capacity past layout::kMaxColdCapacity, a stacked or compressed
/// field, and `o.unsupported`).
void check_cold_arguments(const std::string& name, const Schema& schema, const ColdOptions& o);

/// Makes <cold_dir>/<name>.cold/ and its env files (mode `o.mode`, as the segment's), fills the segment's
/// ColdControl and hands `seg` the files' mappings. With `o.replace`, an existing <name>.cold/ is emptied first;
/// without, it is refused (already_exists). Precondition: check_cold_arguments passed; the segment is unnamed.
void create_cold_files(Segment& seg, const ColdOptions& o);

/// Open's acceptance of the cold tier of a segment that has one: its ColdControl (copied once and checked), each
/// env file's header against the segment's (format, env, capacity, record bytes, the segment's creation), then the
/// mappings (read-only for a read-only segment). Throws Error(corrupt) or the OS's error naming the file.
void open_cold_files(Segment& seg);

/// After Buffer::remove read the segment's header through `segment_fd` (its magic checked): removes the env files
/// of its cold tier and their directory, if it has one. Throws Error(system) naming the directory left behind.
void remove_cold_files(int segment_fd, const std::string& name);

/// Throws Error(invalid_argument) for `what` ("save a checkpoint of") on a buffer with a cold tier, saying `why` the
/// first slice refuses it ("checkpoints do not hold it yet"); returns without one.
void refuse_cold(const Segment& seg, const char* what, const char* why);

}  // namespace shmreplay::detail
