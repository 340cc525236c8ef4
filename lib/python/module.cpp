// The Python extension module shmreplay._shmreplay (wrapped by the package shmreplay/__init__.py).
//
// Buffer, Writer, Sampler, the schema and checkpoints for Python, with NumPy arrays in and out:
// - push takes an env id array and a dict of arrays shaped like envpool's recv output, [len(env_ids), *shape];
//   arrays of the field's dtype that are C-contiguous are read in place, others are converted once
//   (same-kind casts only: float64 into an f32 field, yes; float into an i32 field, no; integers into any integer
//   field when every value fits, never wrapped).
// - sample returns a Batch of freshly allocated arrays; with out=batch it fills that batch's arrays in place and
//   allocates no array.
// - dtypes: u8..i64 as numpy's integers, f16 as numpy.float16, bf16 as numpy.uint16 holding the bfloat16 bits,
//   f32/f64 as float32/float64, bool as numpy.bool_.
// - every shmreplay::Error becomes the shmreplay exception of its code (shmreplay/_errors.py).
// - the GIL is released while steps are copied, saved or loaded and while waiting, except for a small push by a writer that
//   never waits (push_call.cpp); each Writer and Sampler has a mutex, so two Python threads sharing one object
//   take turns instead of racing.
//
// The bindings live one object per file (bind_*.cpp); the conversions they share in convert.hpp, the objects
// behind the Python classes in objects.hpp. This file makes the module: the version, the error translation, and the
// calls;
// last, the other interfaces' names for the Python ones are answered with the right one (aliases.cpp, docs/naming.md).
#include "aliases.hpp"
#include "bindings.hpp"
#include "convert.hpp"

namespace py = pybind11;
using namespace py::literals;

namespace shmreplay::python {

static_assert(static_cast<int>(Errc::read_only) == 21, "keep shmreplay/_errors.py's table in step with Errc");

// shmreplay._errors.BY_CODE: the exception class of each error code.
static py::handle g_errors_by_code;

void set_python_error(const Error& e) {
  const int code = static_cast<int>(e.errc());
  py::handle cls = code >= 1 && code <= 22 ? py::handle(PyList_GetItem(g_errors_by_code.ptr(), code))
                                           : py::handle(PyExc_RuntimeError);
  // Messages quote user text; decode leniently so that a message is never lost to a stray byte.
  const std::string_view what = e.what();
  PyObject* text = PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace");
  if (text == nullptr) {
    PyErr_Clear();
    text = PyUnicode_FromString("(the message could not be decoded)");
  }
  PyErr_SetObject(cls.ptr(), text);
  Py_XDECREF(text);
}

PYBIND11_MODULE(_shmreplay, m) {
  m.doc() = "shmreplay's C++ core; import shmreplay, not this module";
  m.attr("__version__") = kVersion;  // shmreplay/version.hpp: the CLI's --version prints the same constant

  // Errors: shmreplay::Error -> the class of its code, from shmreplay/_errors.py (kept alive for the process).
  init_dtypes();
  g_errors_by_code = py::object(py::module_::import("shmreplay._errors").attr("BY_CODE")).release();
  if (py::len(g_errors_by_code) != 23) {
    throw std::runtime_error("shmreplay._errors.BY_CODE does not match the library");
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      set_python_error(e);
    }
  });
  m.def("_raise_errc", [](int code, const std::string& message) { throw Error(static_cast<Errc>(code), message); },
        "raise the exception of error code `code` (for the tests)");

  bind_schema(m);
  bind_rate_limit(m);
  bind_buffer(m);
  bind_writer(m);
  bind_batch(m);
  bind_sampler(m);
  bind_reanalyse(m);
  bind_checkpoint(m);
  bind_journal(m);
  // Other interfaces' names for the Python ones (docs/naming.md): rejected with a message naming the right one.
  add_alias_hints(m);
  m.def("_aliases", &alias_rows,
        "the rejected aliases as (kind, where, alias, python name) tuples (for the tests: docs/naming.md lists them)");
  m.def("_sample_options", &sample_option_rows,
        "the sample options as (keyword, calls, default, doc) tuples (for the tests: lib/python/sample_options.hpp)");
}

}  // namespace shmreplay::python
