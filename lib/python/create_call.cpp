// lib/python/create_call.cpp: Buffer.create as a static vectorcall method (vectorcall.hpp) whose options are the
// rows of create_options.hpp: bound by name (bind_arguments, which also names the Python keyword for another
// interface's spelling: aliases.cpp), converted by each row, and listed in the text signature and the docstring.
// Bound this way rather than by pybind11 so that a new option is a row, not a parameter in three lists.
#include "create_options.hpp"

#include "bindings.hpp"
#include "int_arg.hpp"
#include "objects.hpp"

namespace shmreplay::python {

void set_rate_limit(const char* name, PyObject* v, CreateOptions& o, CreateExtras&) {
  if (v == Py_None) {
    o.rate_limit.reset();
    return;
  }
  py::detail::make_caster<RateLimit> caster;
  if (!caster.load(py::handle(v), false)) {
    throw py::type_error(fmt::format("{}(): argument '{}' must be a RateLimit or None, got {}", kCreateFunction,
                                     name, Py_TYPE(v)->tp_name));
  }
  o.rate_limit = py::detail::cast_op<RateLimit&>(caster);
}

void set_populate(const char* name, PyObject* v, CreateOptions& o, CreateExtras&) {
  o.populate = parse_populate(argument<std::string>(kCreateFunction, name, v));
}

void set_populate_progress(const char* name, PyObject* v, CreateOptions& o, CreateExtras& x) {
  if (v == Py_None) return;
  if (!PyCallable_Check(v)) {
    throw Error(Errc::invalid_argument,
                fmt::format("{}(): {} must be a callable (done_bytes, total_bytes), got {}", kCreateFunction, name,
                            Py_TYPE(v)->tp_name));
  }
  x.populate_progress = py::reinterpret_borrow<py::object>(v);
  // Called from create() with the GIL released: it takes the GIL back for the call. An exception it raises aborts
  // create(), which leaves nothing behind, and reaches the caller.
  o.populate_progress = [&x](uint64_t done_bytes, uint64_t total_bytes) {
    py::gil_scoped_acquire gil;
    x.populate_progress(done_bytes, total_bytes);
  };
}

void set_stack_continuity(const char* name, PyObject* v, CreateOptions& o, CreateExtras&) {
  const std::string text = argument<std::string>(kCreateFunction, name, v);
  if (text == "episodes") {
    o.stack_continuity = StackContinuity::episodes;
  } else if (text == "compare") {
    o.stack_continuity = StackContinuity::compare;
  } else {
    throw Error(Errc::invalid_argument, fmt::format("{}(): {} is '{}', expected 'compare' or 'episodes'",
                                                    kCreateFunction, name, text));
  }
}

namespace {

constexpr std::array<const char*, 4> kLead = {"name", "num_envs", "capacity", "schema"};

constexpr auto argument_names() {
  std::array<const char*, kLead.size() + kCreateOptions.size()> names{};
  std::size_t i = 0;
  for (const char* n : kLead) names[i++] = n;
  for (const CreateOption& o : kCreateOptions) names[i++] = o.name;
  return names;
}
constexpr auto kNames = argument_names();

uint64_t lead_int(const char* name, PyObject* v) {
  return checked_int<uint64_t>(fmt::format("{}(): {}", kCreateFunction, name).c_str(), v, 0,
                               std::numeric_limits<uint64_t>::max());
}

PyObject* buffer_create(PyObject*, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    std::array<PyObject*, kNames.size()> a{};
    bind_arguments(kCreateFunction, kNames, kLead.size(), args, nargsf, kwnames, a, kLead.size());
    const std::string name = argument<std::string>(kCreateFunction, "name", a[0]);
    const uint64_t num_envs = lead_int("num_envs", a[1]);
    const uint64_t capacity = lead_int("capacity", a[2]);
    const py::handle schema(a[3]);
    const Schema s = py::isinstance<py::str>(schema) ? Schema::parse(schema.cast<std::string>())
                                                     : schema.cast<Schema>();
    CreateOptions o;
    CreateExtras x;
    for (std::size_t i = 0; i < kCreateOptions.size(); ++i) {
      if (a[kLead.size() + i] != nullptr) kCreateOptions[i].set(kCreateOptions[i].name, a[kLead.size() + i], o, x);
    }
    std::shared_ptr<Buffer> made;
    {
      py::gil_scoped_release release;  // fallocate, populate and initialise: may take a while for big buffers
      made = std::make_shared<Buffer>(Buffer::create(name, num_envs, capacity, s, o));
    }
    return py::cast(std::move(made)).release().ptr();
  });
}

std::string create_doc() {
  std::string signature = "create(name, num_envs, capacity, schema, *";
  std::string options;
  for (const CreateOption& o : kCreateOptions) {
    signature += fmt::format(", {}={}", o.name, o.default_text);
    options += fmt::format("\n- ``{}={}``: {}", o.name, o.default_text, o.doc);
  }
  return fmt::format("{})\n--\n\nCreate a buffer of num_envs rings of capacity steps; schema is a Schema or its text "
                     "form. The name appears only once the buffer is complete.\n\nKeyword-only options (the "
                     "defaults are the C++ CreateOptions'):\n{}",
                     signature, options);
}

// The method's definition and its docstring: kept for the process (the function object points at both).
std::string g_create_doc;
PyMethodDef g_create_def = {"create", as_cfunction<buffer_create>(), METH_FASTCALL | METH_KEYWORDS, nullptr};

}  // namespace

void add_create_method(py::handle buffer_class) {
  g_create_doc = create_doc();
  g_create_def.ml_doc = g_create_doc.c_str();
  const py::object module = py::getattr(buffer_class, "__module__", py::none());
  const auto function = py::reinterpret_steal<py::object>(PyCFunction_NewEx(&g_create_def, nullptr, module.ptr()));
  if (!function) throw py::error_already_set();
  const auto method = py::reinterpret_steal<py::object>(PyStaticMethod_New(function.ptr()));
  if (!method) throw py::error_already_set();
  py::setattr(buffer_class, "create", method);
}

}  // namespace shmreplay::python
