#include "detail/protocol/env_ids.hpp"

#include <string>

#include <fmt/format.h>

#include "shmreplay/error.hpp"

namespace shmreplay::detail {

void throw_env_out_of_range(const Segment& seg, uint64_t env, std::string_view op) {
  const auto as_signed = static_cast<int64_t>(env);
  throw Error(Errc::env_out_of_range,
              fmt::format("cannot {} env {} of '{}': env ids run from 0 to {}", op,
                          as_signed < 0 ? std::to_string(as_signed) : std::to_string(env), seg.name(),
                          seg.num_envs() - 1));
}

}  // namespace shmreplay::detail
