// tests/learners/learners_helpers.hpp: what the several-learner tests share (layout 1.7, docs/design/learners.md).
#pragma once

#include <cstdint>
#include <string>

#include "payload.hpp"
#include "support.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
