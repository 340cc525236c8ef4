// lib/python/int_arg.hpp: integer arguments of the Python API, converted and range-checked in one place. A bound
// function declares such a parameter as Int<"Class.method(): name", T, Lo, Hi> instead of T; pybind11 then accepts
// any Python int (or object with __index__: NumPy integers, bool) and a value outside [Lo, Hi] raises
// shmreplay.InvalidArgument saying which argument, the value and the range ("Sampler(): rank is -1, expected an
// integer from 0 to 63"), where pybind11's own caster would raise a TypeError listing every signature. A value
// that is no integer (a float, a str) still gets pybind11's TypeError, so overloads resolve as before. The
// signatures (and the stubs) still say `int`. checked_int is the same check for a value taken as a py::object.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "shmreplay/error.hpp"

namespace shmreplay::python {

namespace py = pybind11;

/// A string literal as a template argument: the argument's name in messages.
template <std::size_t N>
struct ArgText {
  constexpr ArgText(const char (&s)[N]) { std::copy_n(s, N, text); }  // NOLINT: implicit on purpose
  char text[N];
};

/// The integer `src` as T when it lies in [lo, hi]; Error(Errc::invalid_argument) naming `what` otherwise, and
/// py::type_error when `src` is no integer (a float, a str: nothing with __index__).
template <class T>
T checked_int(const char* what, py::handle src, T lo, T hi) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "an integer type");
  if (!src || PyFloat_Check(src.ptr()) || !PyIndex_Check(src.ptr())) {
    std::string got = src ? py::repr(src).cast<std::string>() : std::string("nothing");
    if (got.size() > 60) got = got.substr(0, 57) + "...";
    throw py::type_error(fmt::format("{} must be an integer, got {} ({})", what, got,
                                     src ? Py_TYPE(src.ptr())->tp_name : "NULL"));
  }
  const py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(src.ptr()));
  if (!i) throw py::error_already_set();
  int overflow = 0;
  const long long small = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (small == -1 && PyErr_Occurred()) throw py::error_already_set();
  bool in_range = false;
  T value{};
  if (overflow == 0) {
    if constexpr (std::is_signed_v<T>) {
      in_range = small >= static_cast<long long>(lo) && small <= static_cast<long long>(hi);
    } else {
      in_range = small >= 0 && static_cast<unsigned long long>(small) >= lo && static_cast<unsigned long long>(small) <= hi;
    }
    value = static_cast<T>(small);
  } else if (overflow > 0 && std::is_unsigned_v<T>) {
    const unsigned long long big = PyLong_AsUnsignedLongLong(i.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();  // past 2**64 - 1
    } else {
      in_range = big >= lo && big <= hi;
      value = static_cast<T>(big);
    }
  }
  if (!in_range) {
    std::string got = py::str(i).cast<std::string>();
    if (got.size() > 40) got = got.substr(0, 20) + "..." + got.substr(got.size() - 10) + fmt::format(" ({} digits)", got.size());
    throw Error(Errc::invalid_argument, fmt::format("{} is {}, expected {} to {}", what, got, lo, hi));
  }
  return value;
}

/// An integer parameter of a bound function, checked as checked_int says (see the top of this file).
template <ArgText What, class T = uint64_t, T Lo = std::numeric_limits<T>::min(), T Hi = std::numeric_limits<T>::max()>
struct Int {
  T value{};
  operator T() const noexcept { return value; }  // NOLINT: used as the T it holds
};

}  // namespace shmreplay::python

namespace pybind11::detail {

template <shmreplay::python::ArgText What, class T, T Lo, T Hi>
struct type_caster<shmreplay::python::Int<What, T, Lo, Hi>> {
  using Checked = shmreplay::python::Int<What, T, Lo, Hi>;
  PYBIND11_TYPE_CASTER(Checked, io_name("typing.SupportsInt | typing.SupportsIndex", "int"));

  // What pybind11's own integer caster takes (an int, anything with __index__, and when converting anything
  // int() takes but a float) is taken; a value out of range raises here, with the argument's name.
  bool load(handle src, bool convert) {
    if (!src || PyFloat_Check(src.ptr())) return false;
    if (PyIndex_Check(src.ptr())) {
      value.value = shmreplay::python::checked_int<T>(What.text, src, Lo, Hi);
      return true;
    }
    if (!convert || PyNumber_Check(src.ptr()) == 0) return false;
    const object as_int = reinterpret_steal<object>(PyNumber_Long(src.ptr()));
    if (!as_int) {
      PyErr_Clear();
      return false;
    }
    value.value = shmreplay::python::checked_int<T>(What.text, as_int, Lo, Hi);
    return true;
  }

  static handle cast(const Checked& v, return_value_policy policy, handle parent) {
    return make_caster<T>::cast(v.value, policy, parent);
  }
};

}  // namespace pybind11::detail
