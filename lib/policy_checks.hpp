// lib/policy_checks.hpp: the refusals a staleness window gets wherever it is published (Sampler::publish_policy,
// Buffer::set_policy_window; lib/buffer_policy.cpp), and the state a PolicyControl reads as.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "shmreplay/buffer.hpp"
#include "shmreplay/internal/layout.hpp"

namespace shmreplay::detail {

/// Throws invalid_argument when `max_staleness` cannot be published in `buffer`: a window on a buffer without a
/// policy-version field, or the value that stands for "no window". `what` begins the message ("cannot publish a
/// policy window for 'NAME'").
void check_policy_window(const Buffer& buffer, std::optional<uint64_t> max_staleness, const std::string& what);

/// The version, window and publish count stored in `p`, read now.
PolicyState policy_state(const layout::PolicyControl& p) noexcept;

}  // namespace shmreplay::detail
