// lib/python/aliases.cpp: the Python module's table of rejected aliases (aliases.hpp) and the three ways it is
// consulted: the vectorcall methods' unknown keyword (vectorcall.hpp), wrapped pybind11 methods, and __getattr__.
// Every row is in docs/naming.md's alias table; tests/python/test_naming.py checks both ways.
#include "aliases.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "sample_options.hpp"

namespace shmreplay::python {

namespace py = pybind11;

namespace {

using Kind = AliasKind;

struct Alias {
  bool attribute;      // an attribute of a class (else a keyword of a call)
  std::string_view where;  // the calls ("Sampler.sample Sampler.sample_mixed") or the class ("Batch")
  const char* alias;   // the name a user tries
  const char* python;  // the Python name to use (a keyword, an attribute, or the builtin: "__len__")
  Kind kind;
  const char* origin;  // where the alias comes from, or the hint (Kind::other)
};

constexpr const char* kWriterCalls = "Writer Writer.range";

constexpr std::array kAliases = {
    // keywords
    // (the sample options' rows come from their table: sample_options.hpp, all_aliases below)
    Alias{false, "Sampler.sample Sampler.sample_mixed Sampler.total_weight", "distribution_power", "power",
          Kind::name, "C++: the distribution_power argument"},
    Alias{false, "Sampler.wait", "timeout_ms", "timeout", Kind::seconds, "C++: Sampler::wait's timeout_ms"},
    Alias{false, "Buffer.open", "ready_timeout_ms", "ready_timeout", Kind::seconds,
          "C++: OpenOptions::ready_timeout_ms"},
    Alias{false, "Buffer.open", "timeout_ms", "ready_timeout", Kind::seconds, "C++: OpenOptions::ready_timeout_ms"},
    Alias{false, "Buffer.open", "timeout", "ready_timeout", Kind::name, "the wait for the creator to finish"},
    Alias{false, "Buffer.open", "expected_schema", "schema", Kind::name, "C++: OpenOptions::expected_schema"},
    Alias{false, "Buffer.create", "envs", "num_envs", Kind::name, "CLI: create --envs"},
    Alias{false, "Buffer.create", "episode_queue", "episode_queue_capacity", Kind::name, "CLI: create --episode-queue"},
    Alias{false, "Buffer.create", "alpha", "priority_exponent", Kind::name,
          "prioritized replay's alpha; C++: CreateOptions::priority_exponent"},
    Alias{false, "Buffer.create", "episodes", "done", Kind::other,
          "Python takes the episode fields as keywords: done=, terminated=, truncated=, reward= (C++: "
          "CreateOptions::episodes)"},
    Alias{false, "Buffer.create", "samples_per_insert", "rate_limit", Kind::other,
          "Python takes rate_limit=RateLimit.ratio(samples_per_insert, min_size_to_sample, error_buffer) (CLI: create "
          "--samples-per-insert)"},
    Alias{false, "Buffer.create", "error_buffer", "rate_limit", Kind::other,
          "Python takes rate_limit=RateLimit.ratio(samples_per_insert, min_size_to_sample, error_buffer) (CLI: create "
          "--error-buffer)"},
    Alias{false, "Buffer.create", "min_size_to_sample", "rate_limit", Kind::other,
          "Python takes rate_limit=RateLimit.min_size(min_size_to_sample) or RateLimit.ratio(...) (CLI: create "
          "--min-size-to-sample)"},
    Alias{false, "Buffer.create", "progress", "populate_progress", Kind::other,
          "Python takes a callable: populate_progress=f, called as f(done_bytes, total_bytes) (CLI: create "
          "--progress)"},
    Alias{false, kWriterCalls, "rate_limit_timeout_ms", "rate_limit_timeout", Kind::seconds,
          "C++: WriterOptions::rate_limit_timeout_ms"},
    Alias{false, kWriterCalls, "timeout_ms", "rate_limit_timeout", Kind::seconds,
          "C++: WriterOptions::rate_limit_timeout_ms"},
    Alias{false, kWriterCalls, "timeout", "rate_limit_timeout", Kind::name, "the wait for the rate limiter"},
    Alias{false, "Writer.push Writer.push_one", "fields", "data", Kind::name, "C++: the fields argument"},
    Alias{false, "Writer.push_one", "env_id", "env", Kind::name, "C++: Writer::push_one's env_id"},
    // attributes
    Alias{true, "Batch", "start_steps", "starts", Kind::name, "C++: SampleBatch::start_steps()"},
    Alias{true, "RateLimitState", "learner_waiting_since_ns", "learner_waiting_since", Kind::other,
          "Python gives seconds since the epoch, as time.time(): learner_waiting_since (C++: "
          "RateLimitState::learner_waiting_since_ns)"},
    Alias{true, "RateLimitState", "writer_waiting_since_ns", "writer_waiting_since", Kind::other,
          "Python gives seconds since the epoch, as time.time(): writer_waiting_since (C++: "
          "RateLimitState::writer_waiting_since_ns)"},
    Alias{true, "Schema", "size", "__len__", Kind::other, "Python uses len(schema) (C++: Schema::size())"},
    Alias{true, "Schema", "to_string", "__str__", Kind::other, "Python uses str(schema) (C++: Schema::to_string())"},
    Alias{true, "Field", "to_string", "__str__", Kind::other, "Python uses str(field) (C++: Field::to_string())"},
};

// The rows above, then those of the sample options' table (made once: their `where` lists the calls each option
// is taken by, from the table's bits).
const std::vector<Alias>& all_aliases() {
  static const std::vector<Alias> rows = [] {
    static std::vector<std::string> wheres;  // the strings the rows' `where` point into
    wheres.reserve(kSampleOptions.size());
    std::vector<Alias> out(kAliases.begin(), kAliases.end());
    for (const SampleOption& o : kSampleOptions) {
      std::vector<std::string> calls;
      for (std::size_t c = 0; c < kSampleCalls.size(); ++c) {
        if ((o.calls & kSampleCalls[c]) != 0) calls.emplace_back(kSampleCallNames[c]);
      }
      wheres.push_back(fmt::format("{}", fmt::join(calls, " ")));
      for (const OptionAlias& a : o.aliases) {
        if (a.alias != nullptr) out.push_back(Alias{false, wheres.back(), a.alias, o.name, a.kind, a.origin});
      }
    }
    return out;
  }();
  return rows;
}

// Whether `name` is one of the space-separated names of `where`, or (for a vectorcall method, which names itself
// "sample") the part after a dot of one of them.
bool lists(std::string_view where, std::string_view name) {
  while (!where.empty()) {
    const std::size_t end = where.find(' ');
    const std::string_view item = where.substr(0, end);
    const std::size_t dot = item.rfind('.');
    if (item == name || (dot != std::string_view::npos && item.substr(dot + 1) == name)) return true;
    where = end == std::string_view::npos ? std::string_view() : where.substr(end + 1);
  }
  return false;
}

std::optional<std::string> hint(bool attribute, std::string_view where, std::string_view alias) {
  for (const Alias& a : all_aliases()) {
    if (a.attribute != attribute || alias != a.alias || !lists(a.where, where)) continue;
    switch (a.kind) {
      case Kind::name: return fmt::format("shmreplay's Python name for it is '{}' ({})", a.python, a.origin);
      case Kind::seconds:
        return fmt::format("Python takes seconds: {}=... ({} is in milliseconds)", a.python, a.origin);
      case Kind::other: return std::string(a.origin);
    }
  }
  return std::nullopt;
}

// A wrapped method: the pybind11 function it calls, and the PyMethodDef of the wrapper (which must outlive it).
struct Hinted {
  py::object original;
  std::string name;
  std::string function;
  std::string doc;
  PyMethodDef def{};
};

PyObject* hinted_call(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  const auto* h = static_cast<const Hinted*>(PyCapsule_GetPointer(self, nullptr));
  PyObject* result = PyObject_Vectorcall(h->original.ptr(), args, nargsf, kwnames);
  if (result != nullptr || kwnames == nullptr || !PyErr_ExceptionMatches(PyExc_TypeError)) return result;
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); ++k) {
    Py_ssize_t size = 0;
    const char* key = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(kwnames, k), &size);
    if (key == nullptr) return nullptr;  // (a new error: cannot happen for a str)
    if (auto message = keyword_alias_message(h->function, std::string_view(key, static_cast<std::size_t>(size)))) {
      PyErr_SetString(PyExc_TypeError, message->c_str());  // replaces pybind11's "incompatible function arguments"
      break;
    }
  }
  return nullptr;
}

// Replaces the pybind11 method `name` of `cls` (an instance or static method, as pybind11 stores them) by one that
// calls it and, when it raises TypeError for a call with a keyword the table lists for `function`, raises
// keyword_alias_message's TypeError instead. One vectorcall more per call; docstring and binding as before.
void add_keyword_hints(py::handle cls, const std::string& name, const std::string& function) {
  const py::object entry = py::reinterpret_borrow<py::object>(cls.attr("__dict__"))[py::str(name)];
  const bool is_static = py::isinstance(entry, py::module_::import("builtins").attr("staticmethod"));
  if (!is_static && !PyInstanceMethod_Check(entry.ptr())) {
    throw std::logic_error(fmt::format("aliases.cpp: {} is not a pybind11 method", function));
  }
  auto h = std::make_unique<Hinted>();
  h->original = is_static ? entry.attr("__func__")
                          : py::reinterpret_borrow<py::object>(PyInstanceMethod_GET_FUNCTION(entry.ptr()));
  h->name = name;
  h->function = function;
  h->doc = py::str(h->original.attr("__doc__"));
  h->def = {h->name.c_str(), reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&hinted_call)),
            METH_FASTCALL | METH_KEYWORDS, h->doc.c_str()};
  PyMethodDef* def = &h->def;
  const py::capsule owner(h.release(), [](void* p) { delete static_cast<Hinted*>(p); });
  const py::object module = py::getattr(cls, "__module__", py::none());
  const auto wrapper = py::reinterpret_steal<py::object>(PyCFunction_NewEx(def, owner.ptr(), module.ptr()));
  if (!wrapper) throw py::error_already_set();
  const auto bound = py::reinterpret_steal<py::object>(is_static ? PyStaticMethod_New(wrapper.ptr())
                                                                 : PyInstanceMethod_New(wrapper.ptr()));
  if (!bound) throw py::error_already_set();
  py::setattr(cls, name.c_str(), bound);
}

// Gives the pybind11 class `cls` a __getattr__ that raises AttributeError for a missing attribute (Python calls it
// only after the normal lookup failed), naming the Python spelling when the table lists the attribute.
void add_attribute_hints(py::handle cls, const std::string& class_name) {
  py::setattr(cls, "__getattr__",
              py::cpp_function(
                  [class_name](py::handle self, const std::string& attr) -> py::object {
                    // Python's own words (the type's full name), then the hint
                    std::string message =
                        fmt::format("'{}' object has no attribute '{}'", Py_TYPE(self.ptr())->tp_name, attr);
                    if (auto h = hint(true, class_name, attr)) message += "; " + *h;
                    // name and obj as Python's own error has them (its traceback's "Did you mean" reads them)
                    py::object error = py::module_::import("builtins").attr("AttributeError")(message);
                    error.attr("name") = attr;
                    error.attr("obj") = self;
                    PyErr_SetObject(PyExc_AttributeError, error.ptr());
                    throw py::error_already_set();
                  },
                  py::name("__getattr__"), py::is_method(cls), py::arg("name")));
}

// The names of a space-separated list.
std::vector<std::string> split(std::string_view where) {
  std::vector<std::string> out;
  while (!where.empty()) {
    const std::size_t end = where.find(' ');
    out.emplace_back(where.substr(0, end));
    where = end == std::string_view::npos ? std::string_view() : where.substr(end + 1);
  }
  return out;
}

}  // namespace

std::optional<std::string> keyword_alias_message(std::string_view function, std::string_view keyword) {
  auto h = hint(false, function, keyword);
  if (!h) return std::nullopt;
  return fmt::format("{}() got an unexpected keyword argument '{}'; {}", function, keyword, *h);
}

void add_alias_hints(py::module_& m) {
  std::set<std::string> done;
  for (const Alias& a : all_aliases()) {
    for (const std::string& where : split(a.where)) {
      if (!done.insert(where).second) continue;
      const std::size_t dot = where.find('.');
      const std::string class_name = where.substr(0, dot);
      if (class_name == "Writer" || class_name == "Sampler") {
        // Their methods are called per step: no __getattr__ (it costs CPython's method-call fast path).
        if (a.attribute) throw std::logic_error("aliases.cpp: no attribute rows for Writer or Sampler");
      }
      const py::object cls = m.attr(class_name.c_str());
      if (a.attribute) {
        add_attribute_hints(cls, class_name);
        continue;
      }
      const std::string method = dot == std::string::npos ? "__init__" : where.substr(dot + 1);
      const py::object entry = py::reinterpret_borrow<py::object>(cls.attr("__dict__"))[py::str(method)];
      if (Py_IS_TYPE(entry.ptr(), &PyMethodDescr_Type)) continue;  // a vectorcall method: bind_arguments asks
      // A static vectorcall function (create_call.cpp) has its own text signature, pybind11's have none:
      // bind_arguments asks.
      const bool static_vectorcall = Py_IS_TYPE(entry.ptr(), &PyStaticMethod_Type) &&
                                     !py::getattr(entry.attr("__func__"), "__text_signature__", py::none()).is_none();
      if (static_vectorcall) continue;
      add_keyword_hints(cls, method, where);
    }
  }
}

py::list alias_rows() {
  py::list rows;
  for (const Alias& a : all_aliases()) {
    for (const std::string& where : split(a.where)) {
      rows.append(py::make_tuple(a.attribute ? "attribute" : "keyword", where, a.alias, a.python));
    }
  }
  return rows;
}

}  // namespace shmreplay::python
