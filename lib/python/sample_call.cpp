// lib/python/sample_call.cpp: Sampler.sample, sample_mixed, sample_transitions and total_weight, the calls a learner
// makes for every batch, as vectorcall methods (vectorcall.hpp). pybind11's dispatch of their keyword arguments
// (out= and the options are keyword-only) cost about 7,000 instructions per call, a tenth of a 256-row flat sample
// from cache; here the arguments are bound by name and converted as pybind11 converts them (argument()), and the
// views' names are recognised by pointer. The options, their defaults, conversions and docstring lines come from
// the table of sample_options.hpp. The sampling itself is PySampler::fill's: the GIL released around the copy,
// out= filled in place.
#include "bindings.hpp"
#include "objects.hpp"
#include "sample_options.hpp"
#include "vectorcall.hpp"

namespace shmreplay::python {

std::string sample_call_doc(const char* method, SampleCall call, const char* lead, bool out, const char* body) {
  std::string signature = fmt::format("{}($self, {}, *", method, lead);
  std::string options;
  for (const SampleOption& o : kSampleOptions) {
    if ((o.calls & call) == 0) continue;
    const std::string given = fmt::format("{}={}", o.name, o.default_text());
    signature += ", " + given;
    options += fmt::format("\n- ``{}``: {}", given, o.doc);
  }
  if (out) signature += ", out=None";
  return fmt::format("{})\n--\n\n{}\n\nKeyword-only options (the defaults are the C++ SampleOptions'):\n{}",
                     signature, body, options);
}

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

// out=: None (a new Batch) or a Batch, which fill() checks.
py::object out_argument(PyObject* out) {
  return out == nullptr ? py::none() : py::reinterpret_borrow<py::object>(out);
}

// Each call's own arguments, then its options (sample_options.hpp), then out.
constexpr auto kSampleNames =
    argument_names<kSample, true>(std::array{"view", "batch_size", "sequence_length", "power"});
constexpr auto kMixedNames =
    argument_names<kSampleMixed, true>(std::array{"replay_batch", "online_batch", "sequence_length", "power"});
constexpr auto kTransitionNames = argument_names<kSampleTransitions, true>(std::array{"view", "batch_size"});
constexpr auto kWeightNames = argument_names<kTotalWeight, false>(std::array{"view", "sequence_length", "power"});

PyObject* sampler_sample(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    const char* const fn = "sample";
    std::array<PyObject*, kSampleNames.size()> a{};
    bind_arguments(fn, kSampleNames, 3, args, nargsf, kwnames, a, 4);
    PySampler& s = self_of<PySampler>(self);
    const View v = view_argument(fn, a[0]);
    const auto rows = argument<std::size_t>(fn, "batch_size", a[1]);
    const auto length = argument<std::size_t>(fn, "sequence_length", a[2]);
    const double power = argument_or<double>(fn, kSampleNames, a, 3, 0.0);
    const SampleOptions o = options_of(kSample, fn, a, 4);
    return s.fill(fn, rows, length, out_argument(a.back()), [&](Sampler& smp, SampleBatch& b) {
              smp.sample(v, rows, length, power, s.rng, b, o);
            })
        .release()
        .ptr();
  });
}

PyObject* sampler_sample_mixed(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    const char* const fn = "sample_mixed";
    std::array<PyObject*, kMixedNames.size()> a{};
    bind_arguments(fn, kMixedNames, 3, args, nargsf, kwnames, a, 4);
    PySampler& s = self_of<PySampler>(self);
    const auto replay = argument<std::size_t>(fn, "replay_batch", a[0]);
    const auto online = argument<std::size_t>(fn, "online_batch", a[1]);
    const auto length = argument<std::size_t>(fn, "sequence_length", a[2]);
    const double power = argument_or<double>(fn, kMixedNames, a, 3, 0.0);
    const SampleOptions o = options_of(kSampleMixed, fn, a, 4);
    const std::size_t rows = online > SIZE_MAX - replay ? SIZE_MAX : replay + online;  // SIZE_MAX: fill() refuses it
    return s.fill(fn, rows, length, out_argument(a.back()), [&](Sampler& smp, SampleBatch& b) {
              smp.sample_mixed(replay, online, length, power, s.rng, b, o);
            })
        .release()
        .ptr();
  });
}

PyObject* sampler_sample_transitions(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    const char* const fn = "sample_transitions";
    std::array<PyObject*, kTransitionNames.size()> a{};
    bind_arguments(fn, kTransitionNames, 2, args, nargsf, kwnames, a, 2);
    PySampler& s = self_of<PySampler>(self);
    const View v = view_argument(fn, a[0]);
    const auto rows = argument<std::size_t>(fn, "batch_size", a[1]);
    const SampleOptions o = options_of(kSampleTransitions, fn, a, 2);
    return s.fill(fn, rows, 1, out_argument(a.back()), [&](Sampler& smp, SampleBatch& b) {
              smp.sample_transitions(v, rows, s.rng, b, o);
            })
        .release()
        .ptr();
  });
}

PyObject* sampler_total_weight(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    const char* const fn = "total_weight";
    std::array<PyObject*, kWeightNames.size()> a{};
    bind_arguments(fn, kWeightNames, 2, args, nargsf, kwnames, a, 3);
    PySampler& s = self_of<PySampler>(self);
    const View v = view_argument(fn, a[0]);
    const auto length = checked_int<std::size_t>("Sampler.total_weight(): sequence_length", a[1], 0, SIZE_MAX);
    const double power = argument_or<double>(fn, kWeightNames, a, 2, 0.0);
    const SampleOptions o = options_of(kTotalWeight, fn, a, 3);
    const std::shared_ptr<Sampler> smp = s.get(fn);
    double total = 0.0;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(s.mu);
      total = smp->total_weight(v, length, power, o);
    }
    return PyFloat_FromDouble(total);
  });
}

PyMethodDef g_sample_def = {"sample", as_cfunction<sampler_sample>(), METH_FASTCALL | METH_KEYWORDS, nullptr};
PyMethodDef g_sample_mixed_def = {"sample_mixed", as_cfunction<sampler_sample_mixed>(),
                                  METH_FASTCALL | METH_KEYWORDS, nullptr};
PyMethodDef g_sample_transitions_def = {"sample_transitions", as_cfunction<sampler_sample_transitions>(),
                                        METH_FASTCALL | METH_KEYWORDS, nullptr};
PyMethodDef g_total_weight_def = {"total_weight", as_cfunction<sampler_total_weight>(),
                                  METH_FASTCALL | METH_KEYWORDS, nullptr};

// Installs `def` with its docstring (kept for the process: the descriptor points at both).
void add_sample_method(py::handle cls, PyMethodDef& def, SampleCall call, const char* lead, bool out,
                       const char* body) {
  static std::array<std::string, kSampleCalls.size()> docs;
  std::string& doc = docs[static_cast<std::size_t>(std::countr_zero(static_cast<unsigned>(call)))];
  doc = sample_call_doc(def.ml_name, call, lead, out, body);
  def.ml_doc = doc.c_str();
  add_vectorcall_method(cls, def);
}

}  // namespace

py::list sample_option_rows() {
  py::list rows;
  for (const SampleOption& o : kSampleOptions) {
    py::list calls;
    for (std::size_t c = 0; c < kSampleCalls.size(); ++c) {
      if ((o.calls & kSampleCalls[c]) != 0) calls.append(kSampleCallNames[c]);
    }
    rows.append(py::make_tuple(o.name, calls, o.default_text(), o.doc));
  }
  return rows;
}

void add_sample_methods(py::handle sampler_class) {
  add_sample_method(
      sampler_class, g_sample_def, kSample, "view, batch_size, sequence_length, power=0.0", true,
      "batch_size sequences of sequence_length steps from view 'replay' or 'online'; each start is weighted by "
      "min(steps left to the head, sequence_length)**power, or with prioritized=True by its priority**alpha "
      "(power must then be 0; batch.weights holds the importance weights for beta, in [0, 1] for any beta; "
      "EmptyView when every stored step has priority 0). Returns a Batch: out= fills that one; without it, one of "
      "the last two this Sampler made is filled again when nothing refers to it or its arrays, else a new one.");
  add_sample_method(sampler_class, g_sample_mixed_def, kSampleMixed,
                    "replay_batch, online_batch, sequence_length, power=0.0", true,
                    "replay_batch rows from the replay view, then online_batch rows from the online queue.");
  add_sample_method(sampler_class, g_sample_transitions_def, kSampleTransitions, "view, batch_size", true,
                    "Flat transitions: uniform single steps (a Batch with sequence_length 1); with prioritized=True "
                    "drawn by priority**alpha, with importance weights in batch.weights.");
  add_sample_method(
      sampler_class, g_total_weight_def, kTotalWeight, "view, sequence_length, power=0.0", false,
      "The total weight of the view's starts for sample() with these arguments (the sum of min(steps left, "
      "sequence_length)**power, of 1 for episodes='within', of priority**alpha with prioritized=True and power 0): "
      "sample draws a start with probability weight / total. 0.0 for an empty view or one below min_steps. What "
      "shmreplay.ray splits a batch among buffers by.");
}

}  // namespace shmreplay::python
