// lib/python/bindings.hpp: the binding functions, one per file, that the module (module.cpp) calls in turn.
#pragma once

#include <pybind11/pybind11.h>

namespace shmreplay::python {

void bind_schema(pybind11::module_& m);   // bind_schema.cpp: Field, Schema
void bind_buffer(pybind11::module_& m);   // bind_buffer.cpp: Buffer
void bind_writer(pybind11::module_& m);   // bind_writer.cpp: StepSlot, Writer
void bind_sampler(pybind11::module_& m);  // bind_sampler.cpp: Batch, EnvSizes, EpisodeRecord, Sampler

}  // namespace shmreplay::python
