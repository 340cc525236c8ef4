// lib/python/sample_call.cpp: Sampler.sample, sample_mixed and sample_transitions, the calls a learner makes for
// every batch, as vectorcall methods (vectorcall.hpp). pybind11's dispatch of their keyword arguments (out= and
// the options are keyword-only) cost about 7,000 instructions per call, a tenth of a 256-row flat sample from
// cache; here the arguments are bound by name and converted as pybind11 converts them (argument()), and the
// views' names are recognised by pointer. The sampling itself is PySampler::fill's, as before: the GIL released
// around the copy, out= filled in place.
#include "bindings.hpp"
#include "objects.hpp"
#include "vectorcall.hpp"

namespace shmreplay::python {

namespace {

// The view argument: the interned "replay" or "online" (a literal in the caller's code) by pointer, otherwise
// parse_view()'s answer or error.
View view_argument(const char* function, PyObject* value) {
  static PyObject* const replay = PyUnicode_InternFromString("replay");  // kept for the process
  static PyObject* const online = PyUnicode_InternFromString("online");
  if (value == replay) return View::replay;
  if (value == online) return View::online;
  return parse_view(argument<std::string>(function, "view", value));
}

// The keyword-only options shared by sample and sample_mixed: episodes, period, min_steps, prioritized, beta and
// rate_limit_timeout at names[first .. first + 5], with the defaults of the signatures below.
template <std::size_t N>
SampleOptions sequence_options(const char* function, const std::array<const char*, N>& names,
                               const std::array<PyObject*, N>& a, std::size_t first) {
  const std::string episodes = argument_or<std::string>(function, names, a, first, "cross");
  return sample_options(episodes, argument_or<uint64_t>(function, names, a, first + 1, 1),
                        argument_or<uint64_t>(function, names, a, first + 2, 0),
                        argument_or<bool>(function, names, a, first + 3, false),
                        argument_or<double>(function, names, a, first + 4, 0.4),
                        argument_or<double>(function, names, a, first + 5, 10.0));
}

// out=: None (a new Batch) or a Batch, which fill() checks.
py::object out_argument(PyObject* out) {
  return out == nullptr ? py::none() : py::reinterpret_borrow<py::object>(out);
}

constexpr std::array<const char*, 11> kSampleNames = {"view",       "batch_size",  "sequence_length", "power",
                                                      "episodes",   "period",      "min_steps",       "prioritized",
                                                      "beta",       "rate_limit_timeout", "out"};

PyObject* sampler_sample(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    std::array<PyObject*, 11> a{};
    bind_arguments("sample", kSampleNames, 3, args, nargsf, kwnames, a, 4);
    PySampler& s = self_of<PySampler>(self);
    const View v = view_argument("sample", a[0]);
    const auto rows = argument<std::size_t>("sample", "batch_size", a[1]);
    const auto length = argument<std::size_t>("sample", "sequence_length", a[2]);
    const double power = argument_or<double>("sample", kSampleNames, a, 3, 0.0);
    const SampleOptions o = sequence_options("sample", kSampleNames, a, 4);
    return s.fill("sample", rows, length, out_argument(a[10]), [&](Sampler& smp, SampleBatch& b) {
              smp.sample(v, rows, length, power, s.rng, b, o);
            })
        .release()
        .ptr();
  });
}

constexpr std::array<const char*, 11> kMixedNames = {"replay_batch", "online_batch", "sequence_length", "power",
                                                     "episodes",     "period",       "min_steps",       "prioritized",
                                                     "beta",         "rate_limit_timeout", "out"};

PyObject* sampler_sample_mixed(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    std::array<PyObject*, 11> a{};
    bind_arguments("sample_mixed", kMixedNames, 3, args, nargsf, kwnames, a, 4);
    PySampler& s = self_of<PySampler>(self);
    const auto replay = argument<std::size_t>("sample_mixed", "replay_batch", a[0]);
    const auto online = argument<std::size_t>("sample_mixed", "online_batch", a[1]);
    const auto length = argument<std::size_t>("sample_mixed", "sequence_length", a[2]);
    const double power = argument_or<double>("sample_mixed", kMixedNames, a, 3, 0.0);
    const SampleOptions o = sequence_options("sample_mixed", kMixedNames, a, 4);
    const std::size_t rows = online > SIZE_MAX - replay ? SIZE_MAX : replay + online;  // SIZE_MAX: fill() refuses it
    return s.fill("sample_mixed", rows, length, out_argument(a[10]), [&](Sampler& smp, SampleBatch& b) {
              smp.sample_mixed(replay, online, length, power, s.rng, b, o);
            })
        .release()
        .ptr();
  });
}

constexpr std::array<const char*, 6> kTransitionNames = {"view", "batch_size",         "prioritized",
                                                         "beta", "rate_limit_timeout", "out"};

PyObject* sampler_sample_transitions(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    const char* const fn = "sample_transitions";
    std::array<PyObject*, 6> a{};
    bind_arguments(fn, kTransitionNames, 2, args, nargsf, kwnames, a, 2);
    PySampler& s = self_of<PySampler>(self);
    const View v = view_argument(fn, a[0]);
    const auto rows = argument<std::size_t>(fn, "batch_size", a[1]);
    const SampleOptions o = sample_options("cross", 1, 0, argument_or<bool>(fn, kTransitionNames, a, 2, false),
                                           argument_or<double>(fn, kTransitionNames, a, 3, 0.4),
                                           argument_or<double>(fn, kTransitionNames, a, 4, 10.0));
    return s.fill(fn, rows, 1, out_argument(a[5]), [&](Sampler& smp, SampleBatch& b) {
              smp.sample_transitions(v, rows, s.rng, b, o);
            })
        .release()
        .ptr();
  });
}

PyMethodDef g_sample_def = {
    "sample", as_cfunction<sampler_sample>(), METH_FASTCALL | METH_KEYWORDS,
    "sample($self, view, batch_size, sequence_length, power=0.0, *, episodes='cross', period=1, min_steps=0, "
    "prioritized=False, beta=0.4, rate_limit_timeout=10.0, out=None)\n--\n\n"
    "batch_size sequences of sequence_length steps from view 'replay' or 'online'; each start is weighted by "
    "min(steps left to the head, sequence_length)**power, or with prioritized=True by its priority**alpha "
    "(power must then be 0; batch.weights holds the importance weights for beta, in [0, 1] for any beta; "
    "EmptyView when every stored step has priority 0). In a buffer with a rate limiter the call waits "
    "up to rate_limit_timeout seconds for it (0: RateLimited at once when it holds the call back; inf: no "
    "timeout; Ctrl-C raises KeyboardInterrupt within 50 ms). Returns a Batch: out= fills that one; without it, "
    "one of the last two this Sampler made is filled again when nothing refers to it or its arrays, else a new one."};

PyMethodDef g_sample_mixed_def = {
    "sample_mixed", as_cfunction<sampler_sample_mixed>(), METH_FASTCALL | METH_KEYWORDS,
    "sample_mixed($self, replay_batch, online_batch, sequence_length, power=0.0, *, episodes='cross', period=1, "
    "min_steps=0, prioritized=False, beta=0.4, rate_limit_timeout=10.0, out=None)\n--\n\n"
    "replay_batch rows from the replay view, then online_batch rows from the online queue."};

PyMethodDef g_sample_transitions_def = {
    "sample_transitions", as_cfunction<sampler_sample_transitions>(), METH_FASTCALL | METH_KEYWORDS,
    "sample_transitions($self, view, batch_size, *, prioritized=False, beta=0.4, rate_limit_timeout=10.0, "
    "out=None)\n--\n\n"
    "Flat transitions: uniform single steps (a Batch with sequence_length 1); with prioritized=True drawn by "
    "priority**alpha, with importance weights in batch.weights."};

}  // namespace

void add_sample_methods(py::handle sampler_class) {
  add_vectorcall_method(sampler_class, g_sample_def);
  add_vectorcall_method(sampler_class, g_sample_mixed_def);
  add_vectorcall_method(sampler_class, g_sample_transitions_def);
}

}  // namespace shmreplay::python
