// lib/python/checkpoint_results.hpp: what the checkpoint calls of bind_checkpoint.cpp return, as Python classes
// (bind_checkpoint_results.cpp): CheckpointInfo and its parts, LoadResult, VerifyResult, LinkResult, ChainLink.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "shmreplay/checkpoint.hpp"

namespace shmreplay::python {

/// verify()'s result: what the file (or the chain's restored link) holds, and what a chain's verification skipped.
struct VerifyResult {
  CheckpointInfo info;
  std::vector<std::string> notes;
};

/// Binds the classes above to module `m` (before the calls that return them).
void bind_checkpoint_results(pybind11::module_& m);

}  // namespace shmreplay::python
