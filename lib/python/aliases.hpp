// lib/python/aliases.hpp: the names a user brings to a Python call from shmreplay's C++ API and CLI (or from other
// replay libraries), which the Python API does not take, and the message that names the Python spelling instead:
// the Python rows of docs/naming.md's alias table, in one place (aliases.cpp). The module takes no silent
// duplicates: such a name is rejected, with
//   sample() got an unexpected keyword argument 'importance_exponent'; shmreplay's Python name for it is 'beta'
//   (C++: SampleOptions::importance_exponent)
// Consulted only when a call has already failed: by bind_arguments (vectorcall.hpp) for an unknown keyword, by the
// pybind11 methods that add_keyword_hints wraps when their dispatch raises TypeError, and by the __getattr__ that
// add_attribute_hints gives a class (called by Python only for an attribute the class does not have).
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <string_view>

namespace shmreplay::python {

/// How a row's hint reads.
enum class AliasKind {
  name,     ///< another spelling of the same thing: "shmreplay's Python name for it is '{python}' ({origin})"
  seconds,  ///< a millisecond count: "Python takes seconds: {python}=... ({origin} is in milliseconds)"
  other,    ///< origin is the whole hint
};

/// The message for a call of `function` ("sample", or "Buffer.open" for a wrapped method) with a keyword it does not
/// take, when the table lists that keyword for it: "{function}() got an unexpected keyword argument '{keyword}';
/// {hint}". nullopt for any other keyword.
std::optional<std::string> keyword_alias_message(std::string_view function, std::string_view keyword);

/// Makes the module answer every row of the table: wraps the pybind11 methods that rows name (one vectorcall more
/// per call, and only on cold methods: a TypeError from their dispatch becomes keyword_alias_message's), and gives
/// each class that attribute rows name a __getattr__ (Python calls it only for an attribute the class lacks; never
/// Writer or Sampler, whose methods are called per step and would lose CPython's method-call fast path). The
/// vectorcall methods (push_call.cpp, sample_call.cpp) need nothing: bind_arguments asks for the message. Called
/// once by module.cpp, after every class is bound.
void add_alias_hints(pybind11::module_& m);

/// The table (its own rows, and those of the sample options: sample_options.hpp), as (kind, where, alias, python
/// name) tuples, kind "keyword" or "attribute" (the module's _aliases(),
/// for tests/python/test_naming.py, which checks it against docs/naming.md).
pybind11::list alias_rows();

}  // namespace shmreplay::python
