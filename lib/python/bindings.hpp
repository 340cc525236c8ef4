// lib/python/bindings.hpp: the binding functions, one per file, that the module (module.cpp) calls in turn.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "shmreplay/error.hpp"
#include "shmreplay/rate_limit.hpp"

namespace shmreplay::python {

void bind_schema(pybind11::module_& m);   // bind_schema.cpp: Field, Schema
void bind_rate_limit(pybind11::module_& m);  // bind_rate_limit.cpp: RateLimit, RateLimitState
void bind_buffer(pybind11::module_& m);   // bind_buffer.cpp: Buffer
void bind_writer(pybind11::module_& m);   // bind_writer.cpp: StepSlot, Writer
// push_call.cpp: Writer.push and push_one, and the module's _push_repeated (their C++ baseline)
void add_push_methods(pybind11::module_& m, pybind11::handle writer_class);
void add_sample_methods(pybind11::handle sampler_class);  // sample_call.cpp: Sampler.sample, its kin, total_weight
/// The sample options' table (sample_options.hpp) as (keyword, [calls], default as Python writes it, doc) tuples:
/// the module's _sample_options(), for tests/python/test_sample_call.py.
pybind11::list sample_option_rows();
void bind_batch(pybind11::module_& m);    // bind_batch.cpp: Batch, EnvSizes, EpisodeRecord (the learner's outputs)
void bind_sampler(pybind11::module_& m);  // bind_sampler.cpp: Sampler
void bind_reanalyse(pybind11::module_& m);  // bind_reanalyse.cpp: Reanalyser, ReanalyseChunk (the walk's workers)
// bind_checkpoint.cpp: save, load, verify, save_link, list_links, Buffer.save, and their result classes
void bind_checkpoint(pybind11::module_& m);
void bind_journal(pybind11::module_& m);  // bind_journal.cpp: Journal

/// Sets the Python exception of e's code (shmreplay/_errors.py) with e's message (module.cpp; the module's
/// exception translator and the vectorcall entries, vectorcall.hpp, both use it).
void set_python_error(const Error& e);

/// "none", "min_size", "learner_ahead" or "writers_ahead" (bind_rate_limit.cpp).
std::string rate_limit_reason(RateLimitReason r);

}  // namespace shmreplay::python
