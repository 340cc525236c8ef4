// detail/protocol/env_ids.hpp: the one check of an env id against a buffer, made before any role touches an env's
// words (Writer, Sampler, Inspector). Cold path; safe from any thread.
#pragma once

#include <cstdint>
#include <string_view>

#include "shmreplay/internal/segment.hpp"

namespace shmreplay::detail {

/// Throws Error(env_out_of_range): "cannot <op> env <id> of '<name>': env ids run from 0 to <num_envs - 1>". An id
/// of 2^63 or more is shown as the negative number it came from (a negative int32 or Python int).
[[noreturn]] void throw_env_out_of_range(const Segment& buffer, uint64_t env, std::string_view op);

/// Throws as above unless env < buffer.num_envs(). `op` is the verb phrase of the message ("peek at").
inline void check_env_id(const Segment& buffer, uint64_t env, std::string_view op) {
  if (env >= buffer.num_envs()) throw_env_out_of_range(buffer, env, op);
}

}  // namespace shmreplay::detail
