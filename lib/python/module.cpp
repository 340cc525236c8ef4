// The Python extension module shmreplay._shmreplay (wrapped by the package shmreplay/__init__.py).
//
// Buffer, Writer, Sampler and the schema for Python, with NumPy arrays in and out:
// - push takes an env id array and a dict of arrays shaped like envpool's recv output, [len(env_ids), *shape];
//   arrays of the field's dtype that are C-contiguous are read in place, others are converted once
//   (same-kind casts only: float64 into an f32 field, yes; float into an i32 field, no; integers into any integer
//   field when every value fits, never wrapped).
// - sample returns a Batch of freshly allocated arrays; with out=batch it fills that batch's arrays in place and
//   allocates no array.
// - dtypes: u8..i64 as numpy's integers, f16 as numpy.float16, bf16 as numpy.uint16 holding the bfloat16 bits,
//   f32/f64 as float32/float64, bool as numpy.bool_.
// - every shmreplay::Error becomes the shmreplay exception of its code (shmreplay/_errors.py).
// - the GIL is released while steps are copied and while waiting; each Writer and Sampler has a mutex, so two
//   Python threads sharing one object take turns instead of racing.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/version.hpp"
#include "shmreplay/writer.hpp"

namespace py = pybind11;
using namespace py::literals;

namespace shmreplay::python {
namespace {

static_assert(static_cast<int>(Errc::read_only) == 21, "keep shmreplay/_errors.py's table in step with Errc");

// ---------------------------------------------------------------------------------------------------------------
// dtypes and shapes

py::dtype make_numpy_dtype(DType d) {
  switch (d) {
    case DType::u8: return py::dtype::of<uint8_t>();
    case DType::i8: return py::dtype::of<int8_t>();
    case DType::u16: return py::dtype::of<uint16_t>();
    case DType::i16: return py::dtype::of<int16_t>();
    case DType::u32: return py::dtype::of<uint32_t>();
    case DType::i32: return py::dtype::of<int32_t>();
    case DType::u64: return py::dtype::of<uint64_t>();
    case DType::i64: return py::dtype::of<int64_t>();
    case DType::f16: return py::dtype("float16");
    case DType::bf16: return py::dtype::of<uint16_t>();  // the bits; numpy has no bfloat16
    case DType::f32: return py::dtype::of<float>();
    case DType::f64: return py::dtype::of<double>();
    case DType::boolean: return py::dtype::of<bool>();
  }
  throw Error(Errc::invalid_argument, "unknown dtype");
}

// The dtype objects, made once (at import) and kept for the process: a push compares against them per field.
std::array<py::handle, 14> g_dtypes;

void init_dtypes() {
  for (uint32_t raw = 1; raw < g_dtypes.size(); ++raw) {
    g_dtypes[raw] = make_numpy_dtype(static_cast<DType>(raw)).release();
  }
}

py::dtype numpy_dtype(DType d) { return py::reinterpret_borrow<py::dtype>(g_dtypes.at(static_cast<uint32_t>(d))); }

std::string dtype_text(const py::dtype& dt) { return py::str(py::handle(dt)).cast<std::string>(); }

std::string shape_text(std::span<const py::ssize_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::vector<py::ssize_t> field_shape(const Field& f, std::initializer_list<py::ssize_t> leading) {
  std::vector<py::ssize_t> shape(leading);
  for (uint64_t d : f.shape) shape.push_back(static_cast<py::ssize_t>(d));
  return shape;
}

std::span<const py::ssize_t> shape_of(const py::array& a) {
  return {a.shape(), static_cast<std::size_t>(a.ndim())};
}

bool has_shape(const py::array& a, std::initializer_list<py::ssize_t> leading, const Field& f) {
  if (static_cast<std::size_t>(a.ndim()) != leading.size() + f.shape.size()) return false;
  std::size_t i = 0;
  for (py::ssize_t d : leading) {
    if (a.shape(static_cast<py::ssize_t>(i++)) != d) return false;
  }
  for (uint64_t d : f.shape) {
    if (a.shape(static_cast<py::ssize_t>(i++)) != static_cast<py::ssize_t>(d)) return false;
  }
  return true;
}

// One rule for every push and update path (arrays, lists and Python ints alike): integers go into an integer
// field only if every value fits its dtype; a value that does not is an error, never a wrap (2**40 + 5 into an
// i32 field would otherwise be stored as 5).
void check_integer_range(const char* op, const Field& f, const py::array& a, const py::dtype& want) {
  const auto is_int = [](const py::dtype& d) { return d.kind() == 'i' || d.kind() == 'u'; };
  if (!is_int(a.dtype()) || !is_int(want) || a.size() == 0) return;
  py::module_ np = py::module_::import("numpy");
  if (np.attr("can_cast")(a.dtype(), want, "safe").cast<bool>()) return;
  py::object info = np.attr("iinfo")(want);
  // min and max as Python ints: exact for every pair of integer dtypes (NumPy 1 compares uint64 with int64 as
  // float64)
  const py::int_ lo(a.attr("min")()), hi(a.attr("max")());
  if (lo < py::int_(info.attr("min")) || hi > py::int_(info.attr("max"))) {
    const py::int_ bad = lo < py::int_(info.attr("min")) ? lo : hi;
    throw Error(Errc::invalid_argument,
                fmt::format("{}: field '{}' ({}): the value {} is out of the range of {} ({} to {})", op, f.name,
                            f.to_string(), py::str(bad).cast<std::string>(), dtype_text(want),
                            py::str(info.attr("min")).cast<std::string>(),
                            py::str(info.attr("max")).cast<std::string>()));
  }
}

// `value` as a C-contiguous array of field f's dtype and exactly the shape leading + f.shape: the same array when
// it already is one, otherwise one conversion (same-kind casts only). Errors name the operation, the field,
// expected and actual.
py::array field_array(const char* op, const Field& f, py::handle value, std::initializer_list<py::ssize_t> leading) {
  const py::dtype want = numpy_dtype(f.dtype);
  py::array a = py::array::ensure(value);
  if (!a) {
    PyErr_Clear();
    throw Error(Errc::invalid_argument,
                fmt::format("{}: field '{}' ({}) needs an array-like value, got a {}", op, f.name, f.to_string(),
                            py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>()));
  }
  // Integers (arrays, lists, Python ints) may go into any integer field, if every value fits (checked below):
  // np.array([1, 2]) is int64 to NumPy, but meant for a u8 action.
  const bool integers = std::string("iu").find(a.dtype().kind()) != std::string::npos &&
                        std::string("iu").find(want.kind()) != std::string::npos;
  if (!a.dtype().is(want) && !a.dtype().equal(want)) {
    const bool ok = integers ||
                    py::module_::import("numpy").attr("can_cast")(a.dtype(), want, "same_kind").cast<bool>();
    if (!ok) {
      std::string hint;
      if (f.dtype == DType::bf16) hint = "; a bf16 field takes uint16 arrays holding the bfloat16 bits "
                                         "(from torch: tensor.view(torch.int16).numpy().view(numpy.uint16))";
      throw Error(Errc::size_mismatch,
                  fmt::format("{}: field '{}' ({}) takes {} data, got {} (only same-kind casts are made){}", op,
                              f.name, f.to_string(), dtype_text(want), dtype_text(a.dtype()), hint));
    }
  }
  if (!has_shape(a, leading, f)) {
    throw Error(Errc::size_mismatch,
                fmt::format("{}: field '{}' ({}) needs shape {}, got an array of shape {}", op, f.name, f.to_string(),
                            shape_text(field_shape(f, leading)), shape_text(shape_of(a))));
  }
  if (a.dtype().equal(want) && (a.flags() & py::array::c_style)) return a;
  check_integer_range(op, f, a, want);
  return py::array(a.attr("astype")(want, "order"_a = "C", "casting"_a = "unsafe", "copy"_a = true));
}

// The fields named in `data`, in schema order; given[f] is false for a field not named. Unknown names are an
// error; missing ones are an error unless `partial`.
struct FieldArrays {
  std::vector<py::object> arrays;  // a numpy array where given, null otherwise
  std::vector<bool> given;

  const py::array& array(std::size_t f) const { return static_cast<const py::array&>(arrays[f]); }
  std::vector<FieldBytes> bytes() const {
    std::vector<FieldBytes> out(arrays.size());
    for (std::size_t f = 0; f < arrays.size(); ++f) {
      if (given[f]) out[f] = {array(f).data(), static_cast<std::size_t>(array(f).nbytes())};
    }
    return out;
  }
};

FieldArrays field_arrays(const char* op, const Schema& schema, const py::dict& data, bool partial,
                         std::initializer_list<py::ssize_t> leading) {
  FieldArrays out{std::vector<py::object>(schema.size()), std::vector<bool>(schema.size(), false)};
  for (auto [key, value] : data) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_Check(key.ptr()) ? PyUnicode_AsUTF8AndSize(key.ptr(), &size) : nullptr;
    if (text == nullptr) {
      PyErr_Clear();
      throw Error(Errc::invalid_argument, fmt::format("{}: field names must be str, got {}", op,
                                                      py::repr(key).cast<std::string>()));
    }
    const std::string_view name(text, static_cast<std::size_t>(size));
    const auto f = schema.find(name);
    if (!f) {
      throw Error(Errc::invalid_argument,
                  fmt::format("{}: '{}' is not a field of the schema ({})", op, name, schema.to_string()));
    }
    out.arrays[*f] = field_array(op, schema[*f], value, leading);
    out.given[*f] = true;
  }
  if (!partial) {
    std::string missing;
    for (std::size_t f = 0; f < schema.size(); ++f) {
      if (!out.given[f]) missing += (missing.empty() ? "'" : ", '") + schema[f].name + "'";
    }
    if (!missing.empty()) {
      throw Error(Errc::size_mismatch,
                  fmt::format("{}: no data for field {} (the schema is {})", op, missing, schema.to_string()));
    }
  }
  return out;
}

// An env id array (any integer dtype, any layout) as uint64 ids; negative ids are env_out_of_range.
std::vector<uint64_t> env_id_vector(const char* op, py::handle ids, uint64_t num_envs) {
  py::array a = py::array::ensure(ids);
  if (!a || a.ndim() != 1 || (a.size() > 0 && std::string("iu").find(a.dtype().kind()) == std::string::npos)) {
    if (!a) PyErr_Clear();
    throw Error(Errc::invalid_argument,
                fmt::format("{}: env ids must be a 1-d array (or sequence) of integers{}", op,
                            a ? fmt::format(", got {} of shape {}", dtype_text(a.dtype()), shape_text(shape_of(a)))
                              : ""));
  }
  // int32 (envpool's) and int64 are read in place; other integer types are converted once.
  const bool i32 = a.dtype().equal(py::dtype::of<int32_t>()) && (a.flags() & py::array::c_style);
  py::array typed = i32 ? a : py::array(py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a));
  std::vector<uint64_t> out(static_cast<std::size_t>(typed.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int64_t v = i32 ? static_cast<const int32_t*>(typed.data())[i] : static_cast<const int64_t*>(typed.data())[i];
    if (v < 0 || static_cast<uint64_t>(v) >= num_envs) {
      throw Error(Errc::env_out_of_range, fmt::format("{}: env id {} at position {} is out of range: the buffer has "
                                                      "envs 0 to {}",
                                                      op, v, i, num_envs - 1));
    }
    out[i] = static_cast<uint64_t>(v);
  }
  return out;
}

View parse_view(const std::string& v) {
  if (v == "replay") return View::replay;
  if (v == "online") return View::online;
  throw Error(Errc::invalid_argument, fmt::format("unknown view '{}': expected 'replay' or 'online'", v));
}

Episodes parse_episodes(const std::string& v) {
  if (v == "cross") return Episodes::cross;
  if (v == "stop") return Episodes::stop;
  if (v == "within") return Episodes::within;
  throw Error(Errc::invalid_argument,
              fmt::format("unknown episodes mode '{}': expected 'cross', 'stop' or 'within'", v));
}

// ---------------------------------------------------------------------------------------------------------------
// Schema

Field make_field(const std::string& name, const std::string& dtype, std::vector<uint64_t> shape) {
  const auto d = parse_dtype(dtype);
  if (!d) {
    throw Error(Errc::invalid_schema, fmt::format("field '{}': unknown dtype '{}' (expected one of u8 i8 u16 i16 "
                                                  "u32 i32 u64 i64 f16 bf16 f32 f64 bool)",
                                                  name, dtype));
  }
  return Field{name, *d, std::move(shape)};
}

// ---------------------------------------------------------------------------------------------------------------
// Batch storage

// Where every array of a Batch starts: a multiple of 64 bytes. JAX's CPU client takes an array through DLPack
// without a copy only when its data is 64-byte aligned (it copies otherwise; NumPy's own allocations are only
// 16-byte aligned), and 64 is also a cache line, so no two arrays of a batch share one.
constexpr std::size_t kBatchAlignment = 64;

// An uninitialised C-contiguous array of `shape` whose data starts on a kBatchAlignment boundary; the memory
// belongs to a capsule that is the array's base, freed when the last array or view of it goes.
py::array aligned_array(const py::dtype& dtype, const std::vector<py::ssize_t>& shape) {
  std::size_t bytes = static_cast<std::size_t>(dtype.itemsize());
  for (py::ssize_t d : shape) bytes *= static_cast<std::size_t>(d);
  bytes = std::max<std::size_t>(kBatchAlignment, (bytes + kBatchAlignment - 1) / kBatchAlignment * kBatchAlignment);
  void* data = std::aligned_alloc(kBatchAlignment, bytes);
  if (data == nullptr) throw std::bad_alloc();
  py::capsule owner(data, [](void* p) { std::free(p); });
  return py::array(dtype, shape, std::vector<py::ssize_t>{}, data, owner);
}

// ---------------------------------------------------------------------------------------------------------------
// Batch: the arrays a sample fills. Freshly made by a sample call, or made once and passed back as out=.

struct Batch {
  std::shared_ptr<const Schema> schema;
  std::vector<std::string> names;
  std::vector<py::array> fields;  // [rows, length, *shape] each
  py::array mask;                 // bool [rows, length]
  py::array env_ids;              // int64 [rows]
  py::array starts;               // int64 [rows]
  py::array weights;              // float32 [rows]: importance weights of a prioritized sample, else 1
  std::size_t rows = 0;
  std::size_t length = 0;

  static Batch make(const std::shared_ptr<const Schema>& schema, std::size_t rows, std::size_t length) {
    Batch b;
    b.schema = schema;
    b.rows = rows;
    b.length = length;
    const auto r = static_cast<py::ssize_t>(rows), l = static_cast<py::ssize_t>(length);
    for (const Field& f : schema->fields()) {
      b.names.push_back(f.name);
      b.fields.push_back(aligned_array(numpy_dtype(f.dtype), field_shape(f, {r, l})));
    }
    b.mask = aligned_array(py::dtype::of<bool>(), {r, l});
    b.env_ids = aligned_array(py::dtype::of<int64_t>(), {r});
    b.starts = aligned_array(py::dtype::of<int64_t>(), {r});
    b.weights = aligned_array(py::dtype::of<float>(), {r});
    return b;
  }

  // The C++ view of these arrays, after checking they still have the shapes a call of rows x length needs.
  SampleBatch borrow(const char* op, const Schema& s, std::size_t want_rows, std::size_t want_length) {
    if (!(*schema == s)) {
      throw Error(Errc::schema_mismatch, fmt::format("{}: out= is a batch of schema {}, the buffer's is {}", op,
                                                     schema->to_string(), s.to_string()));
    }
    if (rows != want_rows || length != want_length) {
      throw Error(Errc::size_mismatch, fmt::format("{}: out= holds {} rows x {} steps, this call needs {} x {}", op,
                                                   rows, length, want_rows, want_length));
    }
    std::vector<MutableFieldBytes> out(fields.size());
    for (std::size_t f = 0; f < fields.size(); ++f) {
      out[f] = {fields[f].mutable_data(), static_cast<std::size_t>(fields[f].nbytes())};
    }
    // bool and int64 arrays, lent as the library's uint8 mask and uint64 ids (same sizes, values in range)
    const auto n = [](const py::array& a) { return static_cast<std::size_t>(a.size()); };
    return SampleBatch::borrow(std::move(out), {static_cast<uint8_t*>(mask.mutable_data()), n(mask)},
                               {static_cast<uint64_t*>(env_ids.mutable_data()), n(env_ids)},
                               {static_cast<uint64_t*>(starts.mutable_data()), n(starts)});
  }

  py::array field(const std::string& name) const {
    for (std::size_t f = 0; f < names.size(); ++f) {
      if (names[f] == name) return fields[f];
    }
    throw py::key_error(fmt::format("'{}' is not a field of this batch (fields: {})", name, fmt::join(names, ", ")));
  }

  py::dict field_dict() const {
    py::dict d;
    for (std::size_t f = 0; f < names.size(); ++f) d[py::str(names[f])] = fields[f];
    return d;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Writer and StepSlot

struct PySlot;

struct PyWriter {
  std::shared_ptr<Buffer> buffer;
  std::optional<Writer> writer;
  std::mutex mu;  // taken with the GIL released where the call copies; never waits for the GIL while held
  std::vector<PySlot*> open_slots;  // reservations not yet committed or abandoned (changed with the GIL held)

  Writer& get(const char* op) {
    if (!writer) throw Error(Errc::invalid_argument, fmt::format("{}: this Writer is closed", op));
    return *writer;
  }
  void close();
};


struct PySlot {
  std::shared_ptr<PyWriter> owner;
  std::optional<StepSlot> slot;
  py::dict arrays;
  const char* state = "open";  // then "committed" or "abandoned"

  PySlot() = default;
  PySlot(PySlot&&) = delete;  // registered by address in owner->open_slots
  ~PySlot() {
    if (slot) abandon();
  }

  StepSlot& get(const char* op) {
    if (!slot) throw Error(Errc::invalid_argument, fmt::format("{}: this step slot was committed or abandoned", op));
    return *slot;
  }
  void commit() {
    std::lock_guard lock(owner->mu);
    get("commit").commit();
    state = "committed";
    forget();
  }
  void abandon() {
    std::lock_guard lock(owner->mu);
    if (slot) state = "abandoned";
    forget();  // an uncommitted StepSlot's destructor abandons the step: it is never published
  }
  // Drops the StepSlot (before its Writer can go) and the registration; the caller holds owner->mu.
  void forget() {
    slot.reset();
    std::erase(owner->open_slots, this);
  }
};

// Abandons the open reservations first: a StepSlot must not outlive its Writer.
void PyWriter::close() {
  std::lock_guard lock(mu);
  while (!open_slots.empty()) {
    open_slots.back()->state = "abandoned";
    open_slots.back()->forget();
  }
  writer.reset();
}

// ---------------------------------------------------------------------------------------------------------------
// Sampler

struct PySampler {
  std::shared_ptr<Buffer> buffer;
  std::shared_ptr<const Schema> schema;
  std::optional<Sampler> sampler;
  Rng rng;
  std::mutex mu;

  Sampler& get(const char* op) {
    if (!sampler) throw Error(Errc::invalid_argument, fmt::format("{}: this Sampler is closed", op));
    return *sampler;
  }
  void close() {
    py::gil_scoped_release release;  // another thread may be inside a sample, holding mu
    std::lock_guard lock(mu);
    sampler.reset();
  }

  // Runs `body(sampler, batch)` on `out` (or a new Batch of rows x length) with the GIL released.
  template <class Body>
  py::object fill(const char* op, std::size_t rows, std::size_t length, py::object out, Body&& body) {
    Sampler& s = get(op);
    py::object result = out;
    if (out.is_none()) {
      result = py::cast(Batch::make(schema, rows, length));
    } else if (!py::isinstance<Batch>(out)) {
      throw Error(Errc::invalid_argument,
                  fmt::format("{}: out= takes a shmreplay.Batch (from new_batch() or an earlier sample), got a {}", op,
                              py::str(py::type::handle_of(out).attr("__name__")).cast<std::string>()));
    }
    Batch& b = result.cast<Batch&>();
    SampleBatch sb = b.borrow(op, *schema, rows, length);
    auto* weights = static_cast<float*>(b.weights.mutable_data());
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mu);
      body(s, sb);
      std::copy(sb.weights().begin(), sb.weights().end(), weights);
    }
    return result;
  }
};

SampleOptions sample_options(const std::string& episodes, uint64_t period, uint64_t min_steps, bool prioritized,
                             double beta) {
  return SampleOptions{.episodes = parse_episodes(episodes),
                       .period = period,
                       .min_steps = min_steps,
                       .prioritized = prioritized,
                       .importance_exponent = beta};
}

// A 1-d array of `n` float32 priorities (converted once from any real dtype), or a clear error.
py::array_t<float, py::array::c_style | py::array::forcecast> priority_array(const char* op, py::handle p,
                                                                               std::size_t n) {
  py::array a = py::array::ensure(p);
  if (!a || a.ndim() != 1 || (a.size() > 0 && std::string("iuf").find(a.dtype().kind()) == std::string::npos)) {
    if (!a) PyErr_Clear();
    throw Error(Errc::invalid_argument,
                fmt::format("{}: priorities must be a 1-d array (or sequence) of numbers{}", op,
                            a ? fmt::format(", got {} of shape {}", dtype_text(a.dtype()), shape_text(shape_of(a)))
                              : ""));
  }
  if (static_cast<std::size_t>(a.size()) != n) {
    throw Error(Errc::size_mismatch, fmt::format("{}: {} priorities for {} steps", op, a.size(), n));
  }
  return py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
}

uint64_t seed_from(const py::object& seed) {
  if (seed.is_none()) {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }
  return seed.cast<uint64_t>();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------

PYBIND11_MODULE(_shmreplay, m) {
  m.doc() = "shmreplay's C++ core; import shmreplay, not this module";
  m.attr("__version__") = fmt::format("{}.{}.{}", SHMREPLAY_VERSION_MAJOR, SHMREPLAY_VERSION_MINOR,
                                      SHMREPLAY_VERSION_PATCH);

  // Errors: shmreplay::Error -> the class of its code, from shmreplay/_errors.py (kept alive for the process).
  init_dtypes();
  static py::handle by_code;
  by_code = py::object(py::module_::import("shmreplay._errors").attr("BY_CODE")).release();
  if (py::len(by_code) != 22) throw std::runtime_error("shmreplay._errors.BY_CODE does not match the library");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      const int code = static_cast<int>(e.errc());
      py::handle cls = code >= 1 && code <= 21 ? py::handle(PyList_GetItem(by_code.ptr(), code))
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
  });
  m.def("_raise_errc", [](int code, const std::string& message) { throw Error(static_cast<Errc>(code), message); },
        "raise the exception of error code `code` (for the tests)");

  // ----- schema
  py::class_<Field>(m, "Field", "One named field of a step: a dtype and a shape (empty for a scalar).")
      .def(py::init(&make_field), "name"_a, "dtype"_a, "shape"_a = std::vector<uint64_t>{},
           "A field: name, dtype as text (u8 i8 u16 i16 u32 i32 u64 i64 f16 bf16 f32 f64 bool), shape.")
      .def_readonly("name", &Field::name)
      .def_property_readonly("dtype", [](const Field& f) { return std::string(dtype_name(f.dtype)); })
      .def_property_readonly("shape", [](const Field& f) {
        py::tuple t(f.shape.size());
        for (std::size_t i = 0; i < f.shape.size(); ++i) t[i] = f.shape[i];
        return t;
      })
      .def_property_readonly("numpy_dtype", [](const Field& f) { return numpy_dtype(f.dtype); },
                             "the NumPy dtype of its arrays (bf16: uint16 holding the bfloat16 bits)")
      .def_property_readonly("elements", &Field::elements)
      .def_property_readonly("bytes", &Field::bytes, "bytes per step")
      .def("__str__", &Field::to_string)
      .def("__repr__", [](const Field& f) { return fmt::format("shmreplay.Field('{}')", f.to_string()); })
      .def(py::self == py::self);

  py::class_<Schema, std::shared_ptr<Schema>>(m, "Schema", "The ordered fields of every step of a buffer.")
      .def(py::init([](const std::vector<Field>& fields) { return std::make_shared<Schema>(fields); }), "fields"_a)
      .def_static("parse", [](const std::string& spec) { return std::make_shared<Schema>(Schema::parse(spec)); },
                  "spec"_a, "Parse the text form, e.g. 'obs:f32[4] action:i32 reward:f32 done:bool'.")
      .def_property_readonly("fields", &Schema::fields)
      .def_property_readonly("names", [](const Schema& s) {
        std::vector<std::string> n;
        for (const Field& f : s.fields()) n.push_back(f.name);
        return n;
      })
      .def_property_readonly("step_bytes", &Schema::step_bytes)
      .def("__len__", &Schema::size)
      .def("__iter__", [](const Schema& s) { return py::make_iterator(s.fields().begin(), s.fields().end()); },
           py::keep_alive<0, 1>())
      .def("__getitem__", [](const Schema& s, const std::string& name) {
        const auto f = s.find(name);
        if (!f) throw py::key_error(fmt::format("'{}' is not a field of {}", name, s.to_string()));
        return s[*f];
      })
      .def("__getitem__", [](const Schema& s, py::ssize_t i) {
        const auto n = static_cast<py::ssize_t>(s.size());
        if (i < -n || i >= n) throw py::index_error(fmt::format("field index {} of a schema of {} fields", i, n));
        return s[static_cast<std::size_t>(i < 0 ? i + n : i)];
      })
      .def("__contains__", [](const Schema& s, const std::string& name) { return s.find(name).has_value(); })
      .def("__str__", &Schema::to_string)
      .def("__repr__", [](const Schema& s) { return fmt::format("shmreplay.Schema.parse('{}')", s.to_string()); })
      .def(py::self == py::self);

  // ----- Buffer
  py::class_<Buffer, std::shared_ptr<Buffer>>(m, "Buffer", "A named replay buffer in POSIX shared memory.")
      .def_static(
          "create",
          [](const std::string& name, uint64_t num_envs, uint64_t capacity, py::object schema, uint32_t mode,
             bool replace, std::optional<std::string> done, std::optional<std::string> terminated,
             std::optional<std::string> truncated, std::optional<std::string> reward,
             uint64_t episode_queue_capacity, std::optional<double> priority_exponent) {
            const Schema s = py::isinstance<py::str>(schema) ? Schema::parse(schema.cast<std::string>())
                                                             : schema.cast<Schema>();
            CreateOptions o{.mode = mode, .replace = replace};
            o.episodes = {done.value_or(""), terminated.value_or(""), truncated.value_or(""), reward.value_or("")};
            o.episode_queue_capacity = episode_queue_capacity;
            o.priority_exponent = priority_exponent;
            py::gil_scoped_release release;  // fallocate and initialise: may take a while for big buffers
            return std::make_shared<Buffer>(Buffer::create(name, num_envs, capacity, s, o));
          },
          "name"_a, "num_envs"_a, "capacity"_a, "schema"_a, py::kw_only(), "mode"_a = 0600, "replace"_a = false,
          "done"_a = py::none(), "terminated"_a = py::none(), "truncated"_a = py::none(), "reward"_a = py::none(),
          "episode_queue_capacity"_a = 0, "priority_exponent"_a = py::none(),
          "Create a buffer of num_envs rings of capacity steps; schema is a Schema or its text form. With "
          "priority_exponent=alpha every stored step has a priority and prioritized samples draw starts with "
          "probability proportional to priority**alpha.")
      .def_static(
          "open",
          [](const std::string& name, std::optional<py::object> schema, bool read_only, double ready_timeout) {
            OpenOptions o{.read_only = read_only,
                          .ready_timeout_ms = static_cast<uint64_t>(std::max(0.0, ready_timeout) * 1000.0)};
            if (schema && !schema->is_none()) {
              o.expected_schema = py::isinstance<py::str>(*schema) ? Schema::parse(schema->cast<std::string>())
                                                                   : schema->cast<Schema>();
            }
            py::gil_scoped_release release;
            return std::make_shared<Buffer>(Buffer::open(name, o));
          },
          "name"_a, py::kw_only(), "schema"_a = py::none(), "read_only"_a = false, "ready_timeout"_a = 0.0,
          "Attach to an existing buffer; with schema=, fail with SchemaMismatch unless it is the buffer's.")
      .def_static("remove", &Buffer::remove, "name"_a, "Remove a buffer's name; attached processes keep working.")
      .def_static("exists", &Buffer::exists, "name"_a)
      .def_property_readonly("name", &Buffer::name)
      .def_property_readonly("path", &Buffer::path)
      .def_property_readonly("schema", [](const Buffer& b) { return std::make_shared<Schema>(b.schema()); })
      .def_property_readonly("num_envs", &Buffer::num_envs)
      .def_property_readonly("capacity", &Buffer::capacity, "steps kept per env")
      .def_property_readonly("step_bytes", [](const Buffer& b) { return b.schema().step_bytes(); })
      .def_property_readonly("total_bytes", &Buffer::total_bytes)
      .def_property_readonly("read_only", &Buffer::read_only)
      .def_property_readonly("has_episodes", &Buffer::has_episodes)
      .def_property_readonly("priority_exponent",
                             [](const Buffer& b) -> std::optional<double> {
                               if (!b.has_priorities()) return std::nullopt;
                               return b.priority_exponent();
                             },
                             "alpha of a buffer with priorities, None without")
      .def(
          "heads",
          [](const Buffer& b) {
            py::array_t<int64_t> out(static_cast<py::ssize_t>(b.num_envs()));
            for (uint64_t e = 0; e < b.num_envs(); ++e) {
              // acquire: pairs with the writer's release store of head (a step counted here is published)
              out.mutable_data()[e] = static_cast<int64_t>(b.env_control(e).head.load(std::memory_order_acquire));
            }
            return out;
          },
          "Steps published per env since creation (int64 array of num_envs).")
      .def(
          "read_steps",
          [](const Buffer& b, uint64_t env, uint64_t first_step, uint64_t count) {
            StepRecords records;
            {
              py::gil_scoped_release release;
              records = Inspector(b.name()).read_steps(env, first_step, count);
            }
            const Schema& schema = b.schema();
            const auto n = static_cast<py::ssize_t>(records.count);
            py::dict out;
            for (std::size_t f = 0; f < schema.size(); ++f) {
              py::array a(numpy_dtype(schema[f].dtype), field_shape(schema[f], {n}));
              const std::size_t bytes = schema[f].bytes();
              auto* dst = static_cast<std::byte*>(a.mutable_data());
              for (uint64_t i = 0; i < records.count; ++i) {
                std::memcpy(dst + i * bytes, records.bytes.data() + i * records.record_bytes + records.field_offsets[f],
                            bytes);
              }
              out[py::str(schema[f].name)] = a;
            }
            return py::make_tuple(records.first_step, out);
          },
          "env"_a, "first_step"_a, "count"_a,
          "Copies stored steps first_step .. first_step + count - 1 of env out (those still stored: the range is cut "
          "to what the ring holds), validated like a sample, without the learner lease. Returns (the first step "
          "copied, {field: array [steps, *shape]}).")
      .def("__repr__", [](const Buffer& b) {
        return fmt::format("<shmreplay.Buffer '{}': {} envs x {} steps of {} bytes; {}>", b.name(), b.num_envs(),
                           b.capacity(), b.schema().step_bytes(), b.schema().to_string());
      });

  // ----- Writer
  py::class_<PySlot>(m, "StepSlot",
                     "A reserved step: fill its arrays in place (they are views of the shared memory), then "
                     "commit. As a context manager it commits on a normal exit and abandons on an exception.")
      .def_property_readonly("env", [](PySlot& s) { return s.get("env").env(); })
      .def_property_readonly("step", [](PySlot& s) { return s.get("step").step(); })
      .def_property_readonly("fields", [](PySlot& s) { return s.arrays; })
      .def_property_readonly("schema", [](PySlot& s) { return std::make_shared<Schema>(s.owner->buffer->schema()); },
                             "the schema of the buffer the slot belongs to")
      .def("__getitem__", [](PySlot& s, const std::string& name) {
        if (!s.arrays.contains(name)) throw py::key_error(fmt::format("'{}' is not a field of this step", name));
        return s.arrays[py::str(name)];
      })
      .def("commit", &PySlot::commit, "Publish the step: samplers can see it from now on.")
      .def("set_priority", [](PySlot& s, double p) { s.get("set_priority").set_priority(p); }, "priority"_a,
           "The step's priority, set when it is committed (a buffer with priorities; without a call it enters at "
           "the running maximum).")
      .def("abandon", &PySlot::abandon, "Give the slot up unpublished; the env's next step reuses its index.")
      .def_property_readonly("state", [](const PySlot& s) { return std::string(s.state); },
                             "'open', 'committed' or 'abandoned' (by abandon(), an exception in its with block, or "
                             "the Writer's close())")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySlot& s, py::object type, py::object, py::object) {
        if (!s.slot) return false;
        if (type.is_none()) {
          s.commit();
        } else {
          s.abandon();
        }
        return false;
      });

  py::class_<PyWriter, std::shared_ptr<PyWriter>>(
      m, "Writer", "An env worker's view: it leases env ids for this process and pushes their steps.")
      .def(py::init([](std::shared_ptr<Buffer> buffer, py::object env_ids) {
             auto w = std::make_shared<PyWriter>();
             w->buffer = buffer;
             const std::vector<uint64_t> ids = env_id_vector("Writer", env_ids, buffer->num_envs());
             py::gil_scoped_release release;
             w->writer.emplace(*buffer, ids);
             return w;
           }),
           "buffer"_a, "env_ids"_a, "Lease env_ids; LeaseHeld names the owner's pid when another process has one.")
      .def_static(
          "range",
          [](std::shared_ptr<Buffer> buffer, uint64_t first, uint64_t count) {
            auto w = std::make_shared<PyWriter>();
            w->buffer = buffer;
            py::gil_scoped_release release;
            w->writer.emplace(Writer::range(*buffer, first, count));
            return w;
          },
          "buffer"_a, "first"_a, "count"_a, "Lease env ids first .. first+count-1.")
      .def_property_readonly("env_ids",
                             [](PyWriter& w) {
                               const auto& ids = w.get("env_ids").env_ids();
                               py::array_t<int64_t> out(static_cast<py::ssize_t>(ids.size()));
                               std::copy(ids.begin(), ids.end(), out.mutable_data());
                               return out;
                             })
      .def_property_readonly("buffer", [](PyWriter& w) { return w.buffer; })
      .def_property_readonly("takeovers", [](PyWriter& w) { return w.get("takeovers").takeovers(); },
                             "leases taken over from dead processes")
      .def("head", [](PyWriter& w, uint64_t env) { return w.get("head").head(env); }, "env"_a,
           "Steps this env has published.")
      .def(
          "push",
          [](PyWriter& w, py::object env_ids, const py::dict& data, py::object priorities) {
            Writer& writer = w.get("push");
            const std::vector<uint64_t> ids = env_id_vector("push", env_ids, w.buffer->num_envs());
            const auto arrays =
                field_arrays("push", w.buffer->schema(), data, false, {static_cast<py::ssize_t>(ids.size())});
            const auto fields = arrays.bytes();
            if (priorities.is_none()) {
              py::gil_scoped_release release;
              std::lock_guard lock(w.mu);
              writer.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(fields));
              return;
            }
            const auto prio = priority_array("push", priorities, ids.size());
            const std::span<const float> p(prio.data(), ids.size());
            py::gil_scoped_release release;
            std::lock_guard lock(w.mu);
            writer.push(std::span<const uint64_t>(ids), std::span<const FieldBytes>(fields), p);
          },
          "env_ids"_a, "data"_a, "priorities"_a = py::none(),
          "One step for each listed env (any subset, any order): data maps every field name to an array of shape "
          "(len(env_ids), *field.shape), as envpool's recv returns. priorities= (a buffer with priorities): one "
          "per env; without, the steps enter at the running maximum.")
      .def(
          "push_one",
          [](PyWriter& w, int64_t env, const py::dict& data) {
            Writer& writer = w.get("push_one");
            if (env < 0) {
              throw Error(Errc::env_out_of_range, fmt::format("push_one: env id {} is negative", env));
            }
            const auto arrays = field_arrays("push_one", w.buffer->schema(), data, false, {});
            const auto fields = arrays.bytes();
            py::gil_scoped_release release;
            std::lock_guard lock(w.mu);
            writer.push_one(static_cast<uint64_t>(env), std::span<const FieldBytes>(fields));
          },
          "env"_a, "data"_a, "One step of one env: data maps every field name to a value of shape field.shape.")
      .def(
          "reserve",
          [](std::shared_ptr<PyWriter> w, int64_t env) {
            Writer& writer = w->get("reserve");
            if (env < 0) throw Error(Errc::env_out_of_range, fmt::format("reserve: env id {} is negative", env));
            auto owned = std::make_unique<PySlot>();
            owned->owner = w;
            {
              std::lock_guard lock(w->mu);
              owned->slot.emplace(writer.reserve(static_cast<uint64_t>(env)));
              w->open_slots.push_back(owned.get());
            }
            PySlot& slot = *owned;
            py::object self = py::cast(std::move(owned));
            const Schema& schema = w->buffer->schema();
            for (std::size_t f = 0; f < schema.size(); ++f) {
              const auto bytes = slot.slot->field(f);
              // a view of the slot's storage; `self` is its base, which keeps the Writer and the mapping alive
              slot.arrays[py::str(schema[f].name)] =
                  py::array(numpy_dtype(schema[f].dtype), field_shape(schema[f], {}), bytes.data(), self);
            }
            return self;
          },
          "env"_a,
          "Reserve the env's next step for zero-copy filling: fill slot[name][...] in place, then commit(). "
          "Do not keep the arrays past the commit: they are views of the ring slot.")
      .def("close", &PyWriter::close,
           "Release the leases now (also done when the Writer is garbage-collected); open reservations are "
           "abandoned.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyWriter& w, py::object, py::object, py::object) {
        w.close();
        return false;
      });

  // ----- Batch
  py::class_<Batch>(m, "Batch",
                    "Sampled sequences: per field an array [rows, sequence_length, *shape], mask (bool [rows, "
                    "sequence_length], True where the step exists), env_ids and starts (int64 [rows]).")
      .def_property_readonly("fields", &Batch::field_dict)
      .def_property_readonly("schema", [](const Batch& b) { return std::make_shared<Schema>(*b.schema); },
                             "the schema of the buffer it was sampled from")
      .def_readonly("mask", &Batch::mask)
      .def_readonly("env_ids", &Batch::env_ids)
      .def_readonly("starts", &Batch::starts, "the global step index of each row's first step")
      .def_readonly("weights", &Batch::weights,
                    "float32 [rows]: the importance weights (N * P)**-beta / max of a prioritized sample; 1 otherwise")
      .def_readonly("rows", &Batch::rows)
      .def_readonly("sequence_length", &Batch::length)
      .def("__getitem__", &Batch::field)
      .def("__contains__", [](const Batch& b, const std::string& n) {
        return std::find(b.names.begin(), b.names.end(), n) != b.names.end();
      })
      .def("keys", [](const Batch& b) { return b.names; })
      .def("__repr__", [](const Batch& b) {
        return fmt::format("<shmreplay.Batch {} rows x {} steps: {}>", b.rows, b.length, fmt::join(b.names, ", "));
      });

  py::class_<EnvSizes>(m, "EnvSizes", "Steps of one env: head (published since creation), replay and online.")
      .def_readonly("head", &EnvSizes::head)
      .def_readonly("replay", &EnvSizes::replay)
      .def_readonly("online", &EnvSizes::online)
      .def("__repr__", [](const EnvSizes& s) {
        return fmt::format("EnvSizes(head={}, replay={}, online={})", s.head, s.replay, s.online);
      });

  py::class_<EpisodeRecord>(m, "EpisodeRecord", "A completed episode, as queued by its writer.")
      .def_readonly("env", &EpisodeRecord::env)
      .def_readonly("first_step", &EpisodeRecord::first_step)
      .def_readonly("length", &EpisodeRecord::length)
      .def_readonly("episode_return", &EpisodeRecord::episode_return)
      .def_property_readonly("end", [](const EpisodeRecord& r) { return std::string(to_string(r.end)); })
      .def("__repr__", [](const EpisodeRecord& r) {
        return fmt::format("EpisodeRecord(env={}, first_step={}, length={}, episode_return={}, end='{}')", r.env,
                           r.first_step, r.length, r.episode_return, to_string(r.end));
      });

  // ----- Sampler
  py::class_<PySampler, std::shared_ptr<PySampler>>(
      m, "Sampler", "The learner's view (one per buffer at a time): samples sequences from the replay view, the "
                    "online queue, or both.")
      .def(py::init([](std::shared_ptr<Buffer> buffer, py::object seed, uint32_t max_retry_rounds) {
             auto s = std::make_shared<PySampler>();
             s->buffer = buffer;
             s->schema = std::make_shared<const Schema>(buffer->schema());
             s->rng.seed(seed_from(seed));
             py::gil_scoped_release release;
             s->sampler.emplace(*buffer, SamplerOptions{.max_retry_rounds = max_retry_rounds});
             return s;
           }),
           "buffer"_a, py::kw_only(), "seed"_a = py::none(), "max_retry_rounds"_a = 10000,
           "Take the learner role of the buffer (LeaseHeld if a live process has it). With seed=, samples are "
           "deterministic for a given buffer state.")
      .def("seed", [](PySampler& s, uint64_t seed) { s.rng.seed(seed); }, "seed"_a)
      .def(
          "sample",
          [](PySampler& s, const std::string& view, std::size_t batch_size, std::size_t sequence_length,
             double power, const std::string& episodes, uint64_t period, uint64_t min_steps, bool prioritized,
             double beta, py::object out) {
            const View v = parse_view(view);
            const SampleOptions o = sample_options(episodes, period, min_steps, prioritized, beta);
            return s.fill("sample", batch_size, sequence_length, out, [&](Sampler& smp, SampleBatch& b) {
              smp.sample(v, batch_size, sequence_length, power, s.rng, b, o);
            });
          },
          "view"_a, "batch_size"_a, "sequence_length"_a, "power"_a = 0.0, py::kw_only(), "episodes"_a = "cross",
          "period"_a = 1, "min_steps"_a = 0, "prioritized"_a = false, "beta"_a = 0.4, "out"_a = py::none(),
          "batch_size sequences of sequence_length steps from view 'replay' or 'online'; each start is weighted by "
          "min(steps left to the head, sequence_length)**power, or with prioritized=True by its priority**alpha "
          "(batch.weights then holds the importance weights for beta). Returns a Batch (out= fills that one).")
      .def(
          "sample_mixed",
          [](PySampler& s, std::size_t replay_batch, std::size_t online_batch, std::size_t sequence_length,
             double power, const std::string& episodes, uint64_t period, uint64_t min_steps, bool prioritized,
             double beta, py::object out) {
            const SampleOptions o = sample_options(episodes, period, min_steps, prioritized, beta);
            return s.fill("sample_mixed", replay_batch + online_batch, sequence_length, out,
                          [&](Sampler& smp, SampleBatch& b) {
                            smp.sample_mixed(replay_batch, online_batch, sequence_length, power, s.rng, b, o);
                          });
          },
          "replay_batch"_a, "online_batch"_a, "sequence_length"_a, "power"_a = 0.0, py::kw_only(),
          "episodes"_a = "cross", "period"_a = 1, "min_steps"_a = 0, "prioritized"_a = false, "beta"_a = 0.4,
          "out"_a = py::none(),
          "replay_batch rows from the replay view, then online_batch rows from the online queue.")
      .def(
          "sample_transitions",
          [](PySampler& s, const std::string& view, std::size_t batch_size, bool prioritized, double beta,
             py::object out) {
            const View v = parse_view(view);
            const SampleOptions o = sample_options("cross", 1, 0, prioritized, beta);
            return s.fill("sample_transitions", batch_size, 1, out, [&](Sampler& smp, SampleBatch& b) {
              smp.sample_transitions(v, batch_size, s.rng, b, o);
            });
          },
          "view"_a, "batch_size"_a, py::kw_only(), "prioritized"_a = false, "beta"_a = 0.4, "out"_a = py::none(),
          "Flat transitions: uniform single steps (a Batch with sequence_length 1); with prioritized=True drawn by "
          "priority**alpha, with importance weights in batch.weights.")
      .def(
          "update_priorities",
          [](PySampler& s, py::object env_ids, py::object steps, py::object priorities) {
            Sampler& smp = s.get("update_priorities");
            const std::vector<uint64_t> ids = env_id_vector("update_priorities", env_ids, s.buffer->num_envs());
            py::array st = py::array::ensure(steps);
            if (!st || st.ndim() != 1 ||
                (st.size() > 0 && std::string("iu").find(st.dtype().kind()) == std::string::npos)) {
              if (!st) PyErr_Clear();
              throw Error(Errc::invalid_argument, "update_priorities: steps must be a 1-d array of integers");
            }
            const auto st64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(st);
            std::vector<uint64_t> step_vec(static_cast<std::size_t>(st64.size()));
            for (std::size_t i = 0; i < step_vec.size(); ++i) {
              if (st64.data()[i] < 0) {
                throw Error(Errc::invalid_argument,
                            fmt::format("update_priorities: step {} at position {} is negative", st64.data()[i], i));
              }
              step_vec[i] = static_cast<uint64_t>(st64.data()[i]);
            }
            if (step_vec.size() != ids.size()) {
              throw Error(Errc::size_mismatch, fmt::format("update_priorities: {} env ids and {} steps", ids.size(),
                                                           step_vec.size()));
            }
            const auto prio = priority_array("update_priorities", priorities, ids.size());
            const std::span<const float> p(prio.data(), ids.size());
            PriorityUpdateResult r;
            {
              py::gil_scoped_release release;
              std::lock_guard lock(s.mu);
              r = smp.update_priorities(ids, step_vec, p);
            }
            return py::make_tuple(r.applied, r.dropped);
          },
          "env_ids"_a, "steps"_a, "priorities"_a,
          "Set the priorities of stored steps (pass batch.env_ids and batch.starts of a sample, with the new "
          "priorities). Returns (applied, dropped): an update for a step a writer has overwritten since is dropped.")
      .def(
          "peek",
          [](PySampler& s, py::object env_ids, py::object out) {
            std::vector<uint64_t> ids;
            if (env_ids.is_none()) {
              ids.resize(s.buffer->num_envs());
              for (uint64_t e = 0; e < ids.size(); ++e) ids[e] = e;
            } else {
              ids = env_id_vector("peek", env_ids, s.buffer->num_envs());
            }
            return s.fill("peek", ids.size(), 1, out, [&](Sampler& smp, SampleBatch& b) { smp.peek(ids, b); });
          },
          "env_ids"_a = py::none(), py::kw_only(), "out"_a = py::none(),
          "The newest step of each env (all envs by default); mask is False for an env with no step.")
      .def(
          "new_batch",
          [](PySampler& s, std::size_t rows, std::size_t sequence_length) {
            if (rows == 0 || sequence_length == 0) {
              throw Error(Errc::invalid_argument,
                          fmt::format("new_batch: rows and sequence_length must be positive, got {} and {}", rows,
                                      sequence_length));
            }
            return Batch::make(s.schema, rows, sequence_length);
          },
          "rows"_a, "sequence_length"_a, "Arrays for out=: made once, filled by every call.")
      .def(
          "wait",
          [](PySampler& s, const std::string& view, uint64_t min_steps, double timeout) {
            const View v = parse_view(view);
            Sampler& smp = s.get("wait");
            if (!(timeout >= 0.0)) {
              throw Error(Errc::invalid_argument, fmt::format("wait: timeout must be >= 0 seconds, got {}", timeout));
            }
            // Slices of at most 100 ms, so that Ctrl-C (a Python signal handler) is seen while waiting.
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
            for (;;) {
              const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now());
              const uint64_t slice = static_cast<uint64_t>(std::clamp<int64_t>(left.count(), 0, 100));
              bool ok = false;
              {
                py::gil_scoped_release release;
                std::lock_guard lock(s.mu);
                ok = smp.wait(v, min_steps, slice);
              }
              if (ok) return true;
              if (PyErr_CheckSignals() != 0) throw py::error_already_set();
              if (std::chrono::steady_clock::now() >= deadline) return false;
            }
          },
          "view"_a, "min_steps"_a, "timeout"_a,
          "Block until view holds at least min_steps steps (True) or timeout seconds pass (False); woken by "
          "writers in any process.")
      .def("reset_online_queue", [](PySampler& s) {
        std::lock_guard lock(s.mu);
        s.get("reset_online_queue").reset_online_queue();
      }, "Empty the online view: it restarts at each env's head.")
      .def("size", [](PySampler& s, const std::string& view) { return s.get("size").size(parse_view(view)); },
           "view"_a, "Steps in the view over all envs.")
      .def("sizes", [](PySampler& s, uint64_t env) { return s.get("sizes").sizes(env); }, "env"_a)
      .def_property_readonly("retries", [](PySampler& s) { return s.get("retries").retries(); },
                             "rows redrawn because a writer overwrote them while they were copied")
      .def_property_readonly("buffer", [](PySampler& s) { return s.buffer; })
      .def(
          "try_update",
          [](PySampler& s, uint64_t env, uint64_t step, const py::dict& data) {
            Sampler& smp = s.get("try_update");
            const auto arrays = field_arrays("try_update", *s.schema, data, true, {});
            const auto fields = arrays.bytes();
            py::gil_scoped_release release;
            std::lock_guard lock(s.mu);
            return smp.try_update(env, step, fields);
          },
          "env"_a, "step"_a, "data"_a,
          "Rewrite fields of stored step `step` of env `env` in place (dejax's update_fn); data maps some field "
          "names to values. False, changing nothing, when the step was overwritten already.")
      .def(
          "update",
          [](PySampler& s, py::object env_ids, py::object steps, const py::dict& data) {
            Sampler& smp = s.get("update");
            const std::vector<uint64_t> ids = env_id_vector("update", env_ids, s.buffer->num_envs());
            auto st = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(steps);
            if (!st || st.ndim() != 1 || static_cast<std::size_t>(st.size()) != ids.size()) {
              throw Error(Errc::size_mismatch, fmt::format("update: steps must be an integer array of {} entries, "
                                                           "one per env id",
                                                           ids.size()));
            }
            const auto n = static_cast<py::ssize_t>(ids.size());
            const auto arrays = field_arrays("update", *s.schema, data, true, {n});
            py::array_t<bool> done(n);
            {
              py::gil_scoped_release release;
              std::lock_guard lock(s.mu);
              std::vector<FieldBytes> row(arrays.arrays.size());
              for (std::size_t i = 0; i < ids.size(); ++i) {
                for (std::size_t f = 0; f < row.size(); ++f) {
                  if (!arrays.given[f]) continue;
                  const std::size_t b = (*s.schema)[f].bytes();
                  row[f] = {static_cast<const std::byte*>(arrays.array(f).data()) + i * b, b};
                }
                const int64_t step = st.data()[i];
                if (step < 0) {
                  throw Error(Errc::invalid_argument, fmt::format("update: step {} at position {} is negative", step, i));
                }
                done.mutable_data()[i] = smp.try_update(ids[i], static_cast<uint64_t>(step), row);
              }
            }
            return done;
          },
          "env_ids"_a, "steps"_a, "data"_a,
          "try_update for many steps: data maps some field names to arrays of shape (len(env_ids), *shape). "
          "Returns a bool array, False where the step was overwritten already.")
      .def(
          "pop_episodes",
          [](PySampler& s, std::size_t max) {
            std::vector<EpisodeRecord> records(max);
            std::lock_guard lock(s.mu);
            records.resize(s.get("pop_episodes").pop_episodes(records));
            return records;
          },
          "max"_a = 1024, "Completed episodes queued by the writers, oldest first per env (buffers with episode "
                          "fields).")
      .def("close", &PySampler::close,
           "Release the learner role now (also done when the Sampler is garbage-collected).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySampler& s, py::object, py::object, py::object) {
        s.close();
        return false;
      });
}

}  // namespace shmreplay::python
