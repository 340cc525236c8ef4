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
#include <type_traits>

#include "aliases.hpp"
#include "bindings.hpp"

namespace shmreplay::python {

namespace py = pybind11;

/// The signature of a METH_FASTCALL | METH_KEYWORDS method.
using FastMethod = PyObject* (*)(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames);

/// F as the PyCFunction a PyMethodDef holds (METH_FASTCALL | METH_KEYWORDS tells CPython its real signature).
template <FastMethod F>
PyCFunction as_cfunction() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(F));
}

/// Binds a vectorcall's arguments (positional ones first, then those named by `kwnames`) to `names`, in order,
/// into `out` (borrowed references, null where not given); the first `required` names must be given, and only the
/// first `max_positional` may be given by position (the rest are keyword-only). Throws py::type_error with
/// Python's wording for too many arguments, an unknown or repeated keyword, or a missing one; for an unknown keyword
/// that docs/naming.md lists as another interface's name, the message names the Python one (aliases.hpp).
template <std::size_t N>
void bind_arguments(const char* function, const std::array<const char*, N>& names, std::size_t required,
                    PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames, std::array<PyObject*, N>& out,
                    std::size_t max_positional = N) {
  const auto positional = static_cast<std::size_t>(PyVectorcall_NARGS(nargsf));
  if (positional > max_positional) {
    throw py::type_error(fmt::format("{}() takes at most {} {}arguments ({} given)", function, max_positional,
                                     max_positional < N ? "positional " : "", positional));
  }
  out.fill(nullptr);
  for (std::size_t i = 0; i < positional; ++i) out[i] = args[i];
  const Py_ssize_t keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < keywords; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    std::size_t i = 0;
    while (i < N && PyUnicode_CompareWithASCIIString(key, names[i]) != 0) ++i;
    if (i == N) {
      // a name another interface spells this way: the message names the Python one (aliases.hpp)
      if (auto message = keyword_alias_message(function, py::str(key).cast<std::string>())) {
        throw py::type_error(*message);
      }
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

/// An argument as T, converted as pybind11 converts a bound function's argument (an int for an int parameter, an
/// int or float for a float one, a str for a string, ...), or py::type_error naming the function, the argument
/// and the type it got.
template <class T>
T argument(const char* function, const char* name, PyObject* value) {
  static_assert(std::is_arithmetic_v<T> || std::is_same_v<T, std::string>, "add T's wording below");
  py::detail::make_caster<T> caster;
  if (!caster.load(py::handle(value), true)) {
    PyErr_Clear();
    const char* want = std::is_same_v<T, bool>            ? "a bool"
                       : std::is_same_v<T, std::string>   ? "a str"
                       : std::is_floating_point_v<T>      ? "a number"
                       : std::is_unsigned_v<T>            ? "an int >= 0"
                                                          : "an int";
    std::string got = py::repr(value).cast<std::string>();
    if (got.size() > 60) got = got.substr(0, 57) + "...";
    throw py::type_error(fmt::format("{}(): argument '{}' must be {}, got {} ({})", function, name, want, got,
                                     Py_TYPE(value)->tp_name));
  }
  return py::detail::cast_op<T>(std::move(caster));
}

/// The argument at `i` of a bound call as T (argument()), or `fallback` where it was not given.
template <class T, std::size_t N>
T argument_or(const char* function, const std::array<const char*, N>& names, const std::array<PyObject*, N>& args,
              std::size_t i, T fallback) {
  return args[i] == nullptr ? fallback : argument<T>(function, names[i], args[i]);
}

/// The C++ object of `self`, an instance of the pybind11 class bound to T (the method descriptor has checked its
/// type), loaded as pybind11 loads an argument, with the type's record looked up once.
template <class T>
T& self_of(PyObject* self) {
  static const py::detail::type_info* const type = py::detail::get_type_info(typeid(T));
  py::detail::type_caster_generic caster(type);
  if (!caster.load(self, false) || caster.value == nullptr) {
    throw py::type_error(fmt::format("this {} was not initialised (a subclass's __init__ must call the base's)",
                                     Py_TYPE(self)->tp_name));
  }
  return *static_cast<T*>(caster.value);
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
