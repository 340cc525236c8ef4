// lib/python/push_call.cpp: Writer.push and Writer.push_one, the calls an env worker makes for every step it
// takes, as vectorcall methods (vectorcall.hpp) whose cost per call is close to the C++ push's own:
// - no heap allocation for a call with up to 16 fields: the field arrays and their bytes sit in small vectors on
//   the stack, and int32 (envpool's) or int64 env id arrays are passed to the Writer in place;
// - a field is found by pointer: the dict's keys are, in the common case, the very str objects of the schema's
//   names (CPython interns identifier-like string literals and so do we), checked in schema order first;
// - the GIL is kept for a small push (at most PyWriter::kHoldGilBytes of step data, PyWriter::run) by a writer
//   that never waits (for the rate limiter, a policy window or a consuming queue's learners): such a push takes a
//   few hundred nanoseconds, less than handing the GIL to another thread and taking it back. A larger push, or one
//   that may wait, releases the GIL as before.
// The conversions and errors are convert.hpp's, the same as every other call's.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "bindings.hpp"
#include "objects.hpp"
#include "small_vector.hpp"
#include "vectorcall.hpp"

namespace shmreplay::python {

using namespace py::literals;

namespace {

// The field arrays of one call in schema order (converted ones owned here), and the bytes the Writer reads.
struct PushFields {
  SmallVector<py::object, 16> arrays;
  SmallVector<FieldBytes, 16> bytes;
  SmallVector<uint64_t, 16> scalars;  // a one-value field's value, converted (scalar_bytes)
  std::size_t total = 0;
};

// The schema index of the field named by `key`, a dict key that is not the expected name's object: another
// name's interned str or last seen key (keys in another order), an exact str equal to a name (then remembered
// as that field's seen key), or field_index()'s answer or error.
std::size_t find_field(const char* op, PyWriter& w, PyObject* key) {
  const std::size_t n = w.names.size();
  for (std::size_t f = 0; f < n; ++f) {
    if (key == w.names[f].ptr() || key == w.seen_keys[f].ptr()) return f;
  }
  if (PyUnicode_CheckExact(key)) {
    for (std::size_t f = 0; f < n; ++f) {
      if (PyUnicode_Compare(key, w.names[f].ptr()) == 0) {  // two str: never an error
        w.seen_keys[f] = py::reinterpret_borrow<py::object>(key);
        return f;
      }
    }
  }
  return field_index(op, w.buffer->schema(), key);
}

// NumPy's scalar objects (numpy/arrayscalars.h, the same in NumPy 1 and 2: PyFloatScalarObject and the rest): the
// object header, then the value. For the 1- to 8-byte types of a field the value starts right after the header.
template <class T>
struct NumpyScalar {
  PyObject_HEAD T obval;
};
static_assert(offsetof(NumpyScalar<uint8_t>, obval) == sizeof(PyObject) &&
              offsetof(NumpyScalar<double>, obval) == sizeof(PyObject));

template <class T>
const void* store(T v, uint64_t& scratch) {
  static_assert(sizeof(T) <= sizeof(scratch));
  std::memcpy(&scratch, &v, sizeof(T));
  return &scratch;
}

template <class T>
const void* store_integer(long long v, uint64_t& scratch) {
  if (v < static_cast<long long>(std::numeric_limits<T>::min()) ||
      static_cast<unsigned long long>(v) > static_cast<unsigned long long>(std::numeric_limits<T>::max())) {
    return nullptr;
  }
  return store(static_cast<T>(v), scratch);
}

// The bytes of a one-value field's value, without making an array: a NumPy scalar of exactly the field's dtype
// (read in place), a Python float for an f32 or f64 field, a bool for a bool field, an int in range for an
// integer field (written to `scratch`). Null for anything else, which field_array() then converts (or refuses,
// with its error): the results are the same either way.
const void* scalar_bytes(const Field& f, PyObject* value, uint64_t& scratch) {
  if (Py_TYPE(value) == reinterpret_cast<PyTypeObject*>(g_scalar_types[static_cast<uint32_t>(f.dtype)].ptr())) {
    return reinterpret_cast<const char*>(value) + sizeof(PyObject);
  }
  if (PyFloat_CheckExact(value)) {
    const double d = PyFloat_AS_DOUBLE(value);
    if (f.dtype == DType::f64) return store(d, scratch);
    // beyond float's range NumPy gives inf; leave that (and its warning) to it
    if (f.dtype == DType::f32 && !(std::fabs(d) > std::numeric_limits<float>::max())) {
      return store(static_cast<float>(d), scratch);
    }
    return nullptr;
  }
  if (value == Py_True || value == Py_False) {
    return f.dtype == DType::boolean ? store(static_cast<uint8_t>(value == Py_True), scratch) : nullptr;
  }
  if (!PyLong_CheckExact(value)) return nullptr;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred() != nullptr)) {
    PyErr_Clear();
    return nullptr;
  }
  switch (f.dtype) {
    case DType::i8: return store_integer<int8_t>(v, scratch);
    case DType::u8: return store_integer<uint8_t>(v, scratch);
    case DType::i16: return store_integer<int16_t>(v, scratch);
    case DType::u16: return store_integer<uint16_t>(v, scratch);
    case DType::i32: return store_integer<int32_t>(v, scratch);
    case DType::u32: return store_integer<uint32_t>(v, scratch);
    case DType::i64: return store(static_cast<int64_t>(v), scratch);
    case DType::u64: return v < 0 ? nullptr : store(static_cast<uint64_t>(v), scratch);
    default: return nullptr;
  }
}

// `data` (a dict, or any mapping) as every field of the schema, each of shape leading + field.shape; errors are
// field_arrays()'s.
void collect_fields(const char* op, PyWriter& w, PyObject* data, std::initializer_list<py::ssize_t> leading,
                    PushFields& out) {
  py::object owned;
  if (!PyDict_Check(data)) {
    if (!PyMapping_Check(data) || PyObject_HasAttrString(data, "keys") == 0) {
      throw py::type_error(fmt::format("{}: data must be a dict (or mapping) of field names to arrays, got a {}", op,
                                       Py_TYPE(data)->tp_name));
    }
    owned = py::dict(py::reinterpret_borrow<py::object>(data));
    data = owned.ptr();
  }
  const Schema& schema = w.buffer->schema();
  const std::vector<py::object>& names = w.interned_names();
  const std::size_t n = schema.size();
  out.arrays.resize(n);
  out.bytes.resize(n);
  out.scalars.resize(n);
  Py_ssize_t pos = 0;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  std::size_t seen = 0;
  while (PyDict_Next(data, &pos, &key, &value)) {
    // held while in use: a conversion may run Python code (an __array__ method) that changes the dict
    const py::object hold_key = py::reinterpret_borrow<py::object>(key);
    const py::object hold_value = py::reinterpret_borrow<py::object>(value);
    const bool expected = seen < n && (key == names[seen].ptr() || key == w.seen_keys[seen].ptr());
    const std::size_t f = expected ? seen : find_field(op, w, key);
    ++seen;
    const Field& field = schema[f];
    if (leading.size() == 0 && field.shape.empty()) {
      if (const void* bytes = scalar_bytes(field, value, out.scalars[f])) {
        out.arrays[f] = py::reinterpret_borrow<py::object>(value);  // keeps a NumPy scalar's bytes alive
        out.bytes[f] = {bytes, dtype_bytes(field.dtype)};
        out.total += out.bytes[f].bytes;
        continue;
      }
    }
    out.arrays[f] = field_array(op, field, value, leading);
    const auto& a = static_cast<const py::array&>(out.arrays[f]);
    out.bytes[f] = {py::detail::array_proxy(a.ptr())->data, static_cast<std::size_t>(a.nbytes())};
    out.total += out.bytes[f].bytes;
  }
  // Fewer keys than fields means one is missing; as many can too, where two keys (str subclasses unequal to each
  // other) name the same field.
  bool all = seen >= n;
  for (std::size_t f = 0; all && f < n; ++f) all = static_cast<bool>(out.arrays[f]);
  if (!all) throw_missing_fields(op, schema, [&](std::size_t f) { return static_cast<bool>(out.arrays[f]); });
}

// A push's env ids: an int32 (envpool's) or int64 1-d C-contiguous array is read in place, anything else is
// converted once by env_id_vector(); every id is checked against the buffer's envs either way.
struct PushIds {
  std::span<const int32_t> narrow;
  std::span<const uint64_t> wide;
  std::vector<uint64_t> converted;
  bool is_narrow = false;

  std::size_t size() const { return is_narrow ? narrow.size() : wide.size(); }
};

void collect_ids(const char* op, PyObject* ids, uint64_t num_envs, PushIds& out) {
  if (py::isinstance<py::array>(ids)) {
    const auto* proxy = py::detail::array_proxy(ids);
    const bool i32 = proxy->descr == g_int32.ptr();
    if ((i32 || proxy->descr == g_int64.ptr()) && proxy->nd == 1 && (proxy->flags & py::array::c_style)) {
      const auto n = static_cast<std::size_t>(proxy->dimensions[0]);
      if (i32) {
        out.narrow = {reinterpret_cast<const int32_t*>(proxy->data), n};
        for (std::size_t i = 0; i < n; ++i) checked_env_id(op, out.narrow[i], i, num_envs);
        out.is_narrow = true;
      } else {
        // checked non-negative, so the same bytes read as uint64 are the same ids
        const auto* data = reinterpret_cast<const int64_t*>(proxy->data);
        for (std::size_t i = 0; i < n; ++i) checked_env_id(op, data[i], i, num_envs);
        out.wide = {reinterpret_cast<const uint64_t*>(proxy->data), n};
      }
      return;
    }
  }
  out.converted = env_id_vector(op, ids, num_envs);
  out.wide = out.converted;
}

PyObject* writer_push(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    static constexpr std::array<const char*, 3> kNames = {"env_ids", "data", "priorities"};
    std::array<PyObject*, 3> a{};
    bind_arguments("push", kNames, 2, args, nargsf, kwnames, a);
    PyWriter& w = self_of<PyWriter>(self);
    w.get("push");
    PushIds ids;
    collect_ids("push", a[0], w.buffer->num_envs(), ids);
    PushFields fields;
    collect_fields("push", w, a[1], {static_cast<py::ssize_t>(ids.size())}, fields);
    const std::span<const FieldBytes> bytes(fields.bytes.data(), fields.bytes.size());
    if (a[2] == nullptr || a[2] == Py_None) {
      w.run("push", fields.total, [&](Writer& writer) {
        ids.is_narrow ? writer.push(ids.narrow, bytes) : writer.push(ids.wide, bytes);
      });
    } else {
      const auto prio = priority_array("push", a[2], ids.size());
      const std::span<const float> p(prio.data(), ids.size());
      w.run("push", fields.total, [&](Writer& writer) {
        ids.is_narrow ? writer.push(ids.narrow, bytes, p) : writer.push(ids.wide, bytes, p);
      });
    }
    Py_RETURN_NONE;
  });
}

PyObject* writer_push_one(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  return guarded([&] {
    static constexpr std::array<const char*, 2> kNames = {"env", "data"};
    std::array<PyObject*, 2> a{};
    bind_arguments("push_one", kNames, 2, args, nargsf, kwnames, a);
    PyWriter& w = self_of<PyWriter>(self);
    w.get("push_one");
    const auto env = argument<int64_t>("push_one", "env", a[0]);
    if (env < 0) throw Error(Errc::env_out_of_range, fmt::format("push_one: env id {} is negative", env));
    PushFields fields;
    collect_fields("push_one", w, a[1], {}, fields);
    const std::span<const FieldBytes> bytes(fields.bytes.data(), fields.bytes.size());
    w.run("push_one", fields.total,
             [&](Writer& writer) { writer.push_one(static_cast<uint64_t>(env), bytes); });
    Py_RETURN_NONE;
  });
}

PyMethodDef g_push_def = {
    "push", as_cfunction<writer_push>(), METH_FASTCALL | METH_KEYWORDS,
    "push($self, env_ids, data, priorities=None)\n--\n\n"
    "One step for each listed env (any subset, any order): data maps every field name to an array of shape "
    "``(len(env_ids), *field.shape)``, as envpool's recv returns. priorities= (a buffer with priorities): one per env, "
    "each a finite float32 >= 0 whose priority**alpha is a finite float32 (else InvalidArgument, naming the value "
    "as given); without, the steps enter at the running maximum."};

PyMethodDef g_push_one_def = {
    "push_one", as_cfunction<writer_push_one>(), METH_FASTCALL | METH_KEYWORDS,
    "push_one($self, env, data)\n--\n\nOne step of one env: data maps every field name to a value of shape "
    "field.shape."};

}  // namespace

void add_push_methods(py::module_& m, py::handle writer_class) {
  add_vectorcall_method(writer_class, g_push_def);
  add_vectorcall_method(writer_class, g_push_one_def);
  // The baseline of the Python push's cost (tools/bench/python_call_cost.py): the same push, with the same
  // arrays, made `count` times from C++ after one conversion, in the caller's process.
  m.def(
      "_push_repeated",
      [](PyWriter& w, py::handle env_ids, py::handle data, Int<"_push_repeated(): count"> count) {
        w.get("_push_repeated");
        PushIds ids;
        collect_ids("_push_repeated", env_ids.ptr(), w.buffer->num_envs(), ids);
        PushFields fields;
        collect_fields("_push_repeated", w, data.ptr(), {static_cast<py::ssize_t>(ids.size())}, fields);
        const std::span<const FieldBytes> bytes(fields.bytes.data(), fields.bytes.size());
        w.run("_push_repeated", fields.total, [&](Writer& writer) {
          for (uint64_t i = 0; i < count; ++i) {
            ids.is_narrow ? writer.push(ids.narrow, bytes) : writer.push(ids.wide, bytes);
          }
        });
      },
      "writer"_a, "env_ids"_a, "data"_a, "count"_a, "Writer.push(env_ids, data) made count times from C++ (for the "
      "benchmarks: the C++ cost of the same push in the same process).");
}

}  // namespace shmreplay::python
