// lib/python/vectorcall.hpp: methods called through CPython's vectorcall protocol directly, for the few calls
// whose cost per call matters next to the C++ work (Writer.push of a handful of small steps, push_one): a method
// descriptor over a METH_FASTCALL | METH_KEYWORDS function, so a call costs what a builtin method's does, where
// pybind11's generic dispatcher spends a few hundred nanoseconds (argument vectors on the heap, overload
// resolution, a bound-method object). What it shares with the pybind11 bindings: the C++ objects (objects.hpp),
// the conversions (convert.hpp) and the error translation (set_python_error).
//
// What such a function must do itself, and the helpers here do: bind positional and keyword arguments to names
// with Python's TypeErrors (bind_arguments), turn every C++ exception into the Python exception pybind11 would
// have raised (guarded), and be installed on the pybind11 class (add_vectorcall_method).
#pragma once

#include <pybind11/pybind11.h>

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <exception>
#include <new>
#include <string>

#include "bindings.hpp"

namespace shmreplay::python {

namespace py = pybind11;

/// The signature of a METH_FASTCALL | METH_KEYWORDS method.
using FastMethod = PyObject* (*)(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames);

/// Binds a vectorcall's arguments (positional ones first, then those named by `kwnames`) to `names`, in order,
/// into `out` (borrowed references, null where not given); the first `required` names must be given. Throws
/// py::type_error with Python's wording for too many arguments, an unknown or repeated keyword, or a missing one.
template <std::size_t N>
void bind_arguments(const char* function, const std::array<const char*, N>& names, std::size_t required,
                    PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames, std::array<PyObject*, N>& out) {
  const auto positional = static_cast<std::size_t>(PyVectorcall_NARGS(nargsf));
  if (positional > N) {
    throw py::type_error(fmt::format("{}() takes at most {} arguments ({} given)", function, N, positional));
  }
  out.fill(nullptr);
  for (std::size_t i = 0; i < positional; ++i) out[i] = args[i];
  const Py_ssize_t keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < keywords; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    std::size_t i = 0;
    while (i < N && PyUnicode_CompareWithASCIIString(key, names[i]) != 0) ++i;
    if (i == N) {
      throw py::type_error(fmt::format("{}() got an unexpected keyword argument {}", function,
                                       py::repr(key).cast<std::string>()));
    }
    if (out[i] != nullptr) {
      throw py::type_error(fmt::format("{}() got multiple values for argument '{}'", function, names[i]));
    }
    out[i] = args[positional + static_cast<std::size_t>(k)];
  }
  for (std::size_t i = 0; i < required; ++i) {
    if (out[i] == nullptr) {
      throw py::type_error(fmt::format("{}() missing required argument '{}' (pos {})", function, names[i], i + 1));
    }
  }
}

/// Runs `body` (which returns a new reference) and returns its result; a C++ exception becomes the Python
/// exception pybind11's dispatcher would have raised for it (shmreplay::Error: its class from shmreplay._errors),
/// and the result is null.
template <class Body>
PyObject* guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const Error& e) {
    set_python_error(e);
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
  return nullptr;
}

/// Installs `function` as the method `def.ml_name` of the pybind11 class `cls` (a method descriptor, which also
/// checks that self is an instance of the class). `def` must outlive the module (a static): the descriptor keeps a
/// pointer to it. Its ml_doc may start with "name($self, ...)\n--\n\n" for inspect.signature.
inline void add_vectorcall_method(py::handle cls, PyMethodDef& def) {
  py::object descriptor =
      py::reinterpret_steal<py::object>(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &def));
  if (!descriptor) throw py::error_already_set();
  if (PyObject_SetAttrString(cls.ptr(), def.ml_name, descriptor.ptr()) != 0) throw py::error_already_set();
}

}  // namespace shmreplay::python
