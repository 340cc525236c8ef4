// lib/python/convert.hpp: NumPy and Python values to and from the library's types, for the extension module's
// bindings (bind_*.cpp): dtypes and shapes, field arrays checked against the schema, env id arrays, priorities,
// sample options, 64-byte aligned batch storage. Header-only (inline), so each binding file includes what it uses.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <type_traits>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shmreplay/buffer.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/version.hpp"
#include "shmreplay/wait.hpp"
#include "shmreplay/writer.hpp"
#include "detail/elements.hpp"
#include "int_arg.hpp"

namespace shmreplay::python {

namespace py = pybind11;

// ---------------------------------------------------------------------------------------------------------------
// dtypes and shapes

// The NumPy dtype of each DType (through detail::with_dtype, the one switch over the element types): f16 as
// numpy.float16, bf16 as numpy.uint16 holding the bfloat16 bits (NumPy has no bfloat16), bool as numpy.bool_.
inline py::dtype make_numpy_dtype(DType d) {
  return detail::with_dtype(d, [d](auto tag) -> py::dtype {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_void_v<T>) {
      throw Error(Errc::invalid_argument, fmt::format("unknown dtype {}", static_cast<uint32_t>(d)));
    } else if constexpr (std::is_same_v<T, detail::Float16>) {
      return py::dtype("float16");
    } else if constexpr (std::is_same_v<T, detail::BFloat16>) {
      return py::dtype::of<uint16_t>();
    } else {
      return py::dtype::of<T>();
    }
  });
}

// The dtype objects, made once (at import) and kept for the process: a push compares against them per field. By
// DType's value (1 to DType::boolean; 0 is none).
inline constexpr std::size_t kDTypeSlots = static_cast<std::size_t>(DType::boolean) + 1;
inline std::array<py::handle, kDTypeSlots> g_dtypes;

// The NumPy scalar type of each dtype (numpy.float32, ...; bf16's is numpy.uint16), for push_one's scalar values.
inline std::array<py::handle, kDTypeSlots> g_scalar_types;

// The int32 and int64 dtypes, for the env id fast path.
inline py::handle g_int32;
inline py::handle g_int64;

inline void init_dtypes() {
  for (uint32_t raw = 1; raw < g_dtypes.size(); ++raw) {
    g_dtypes[raw] = make_numpy_dtype(static_cast<DType>(raw)).release();
    g_scalar_types[raw] = py::object(g_dtypes[raw].attr("type")).release();
  }
  g_int32 = py::dtype::of<int32_t>().release();
  g_int64 = py::dtype::of<int64_t>().release();
}

inline py::dtype numpy_dtype(DType d) {
  return py::reinterpret_borrow<py::dtype>(g_dtypes.at(static_cast<uint32_t>(d)));
}

inline std::string dtype_text(const py::dtype& dt) { return py::str(py::handle(dt)).cast<std::string>(); }

inline std::string shape_text(std::span<const py::ssize_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

inline std::vector<py::ssize_t> field_shape(const Field& f, std::initializer_list<py::ssize_t> leading) {
  std::vector<py::ssize_t> shape(leading);
  for (uint64_t d : f.shape) shape.push_back(static_cast<py::ssize_t>(d));
  return shape;
}

inline std::span<const py::ssize_t> shape_of(const py::array& a) {
  return {a.shape(), static_cast<std::size_t>(a.ndim())};
}

inline bool has_shape(const py::array& a, std::initializer_list<py::ssize_t> leading, const Field& f) {
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
inline void check_integer_range(const char* op, const Field& f, const py::array& a, const py::dtype& want) {
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
inline py::array field_array(const char* op, const Field& f, py::handle value,
                             std::initializer_list<py::ssize_t> leading) {
  // The common case first, in a few dozen instructions (the general path below costs about 800: NumPy's
  // PyArray_FromAny, dtype equivalence, several dtype references): a C-contiguous ndarray of exactly the field's
  // dtype object (NumPy's builtin dtypes are singletons) and shape.
  if (py::isinstance<py::array>(value)) {
    const auto* proxy = py::detail::array_proxy(value.ptr());
    if (proxy->descr == g_dtypes[static_cast<uint32_t>(f.dtype)].ptr() && (proxy->flags & py::array::c_style) &&
        has_shape(py::reinterpret_borrow<py::array>(value), leading, f)) {
      return py::reinterpret_borrow<py::array>(value);
    }
  }
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
  using namespace py::literals;
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

// The schema index of the field named by `key` (a str), or a clear error for a non-str key or an unknown name.
inline std::size_t field_index(const char* op, const Schema& schema, py::handle key) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_Check(key.ptr()) ? PyUnicode_AsUTF8AndSize(key.ptr(), &size) : nullptr;
  if (text == nullptr) {
    PyErr_Clear();
    throw Error(Errc::invalid_argument,
                fmt::format("{}: field names must be str, got {}", op, py::repr(key).cast<std::string>()));
  }
  const std::string_view name(text, static_cast<std::size_t>(size));
  const auto f = schema.find(name);
  if (!f) {
    throw Error(Errc::invalid_argument,
                fmt::format("{}: '{}' is not a field of the schema ({})", op, name, schema.to_string()));
  }
  return *f;
}

// The error for a call whose data names only the fields f with given(f) true.
template <class Given>
[[noreturn]] void throw_missing_fields(const char* op, const Schema& schema, Given&& given) {
  std::string missing;
  for (std::size_t f = 0; f < schema.size(); ++f) {
    if (!given(f)) missing += (missing.empty() ? "'" : ", '") + schema[f].name + "'";
  }
  throw Error(Errc::size_mismatch,
              fmt::format("{}: no data for field {} (the schema is {})", op, missing, schema.to_string()));
}

inline FieldArrays field_arrays(const char* op, const Schema& schema, const py::dict& data, bool partial,
                         std::initializer_list<py::ssize_t> leading) {
  FieldArrays out{std::vector<py::object>(schema.size()), std::vector<bool>(schema.size(), false)};
  for (auto [key, value] : data) {
    const std::size_t f = field_index(op, schema, key);
    out.arrays[f] = field_array(op, schema[f], value, leading);
    out.given[f] = true;
  }
  if (!partial && std::find(out.given.begin(), out.given.end(), false) != out.given.end()) {
    throw_missing_fields(op, schema, [&](std::size_t f) { return out.given[f]; });
  }
  return out;
}

// Env id `v` (a signed or unsigned integer) at position `i` of a call's ids, checked against the buffer's envs.
template <class Int>
uint64_t checked_env_id(const char* op, Int v, std::size_t i, uint64_t num_envs) {
  static_assert(std::is_integral_v<Int>);
  if ((std::is_signed_v<Int> && v < 0) || static_cast<uint64_t>(v) >= num_envs) {
    throw Error(Errc::env_out_of_range, fmt::format("{}: env id {} at position {} is out of range: the buffer has "
                                                    "envs 0 to {}",
                                                    op, v, i, num_envs - 1));
  }
  return static_cast<uint64_t>(v);
}

// An env id array (any integer dtype, any layout) as uint64 ids; negative ids are env_out_of_range.
inline std::vector<uint64_t> env_id_vector(const char* op, py::handle ids, uint64_t num_envs) {
  const auto check = [&](int64_t v, std::size_t i) { return checked_env_id(op, v, i, num_envs); };
  // The common case first: a 1-d C-contiguous int32 (envpool's) or int64 ndarray, read in place.
  if (py::isinstance<py::array>(ids)) {
    const auto* proxy = py::detail::array_proxy(ids.ptr());
    const bool i32 = proxy->descr == g_int32.ptr();
    if ((i32 || proxy->descr == g_int64.ptr()) && proxy->nd == 1 && (proxy->flags & py::array::c_style)) {
      std::vector<uint64_t> out(static_cast<std::size_t>(proxy->dimensions[0]));
      for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = check(i32 ? reinterpret_cast<const int32_t*>(proxy->data)[i]
                           : reinterpret_cast<const int64_t*>(proxy->data)[i], i);
      }
      return out;
    }
  }
  py::array a = py::array::ensure(ids);
  if (!a || a.ndim() != 1 || (a.size() > 0 && std::string("iu").find(a.dtype().kind()) == std::string::npos)) {
    if (!a) PyErr_Clear();
    throw Error(Errc::invalid_argument,
                fmt::format("{}: env ids must be a 1-d array (or sequence) of integers{}", op,
                            a ? fmt::format(", got {} of shape {}", dtype_text(a.dtype()), shape_text(shape_of(a)))
                              : ""));
  }
  // Unsigned ids are read as uint64, so that one past int64's range is reported as the value it is.
  if (a.dtype().kind() == 'u') {
    const auto typed = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    std::vector<uint64_t> out(static_cast<std::size_t>(typed.size()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = checked_env_id(op, typed.data()[i], i, num_envs);
    return out;
  }
  // int32 (envpool's) and int64 are read in place; other integer types are converted once.
  const bool i32 = a.dtype().equal(py::dtype::of<int32_t>()) && (a.flags() & py::array::c_style);
  py::array typed = i32 ? a : py::array(py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a));
  std::vector<uint64_t> out(static_cast<std::size_t>(typed.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = check(i32 ? static_cast<const int32_t*>(typed.data())[i] : static_cast<const int64_t*>(typed.data())[i], i);
  }
  return out;
}

// The `n` step indices of `steps` (a 1-d array or sequence of integers, one per env id; none negative), for the
// calls that name stored steps (update, update_priorities), or a clear error.
inline std::vector<uint64_t> step_vector(const char* op, py::handle steps, std::size_t n) {
  py::array a = py::array::ensure(steps);
  if (!a || a.ndim() != 1 || (a.size() > 0 && std::string("iu").find(a.dtype().kind()) == std::string::npos)) {
    if (!a) PyErr_Clear();
    throw Error(Errc::invalid_argument, fmt::format("{}: steps must be a 1-d array (or sequence) of integers", op));
  }
  if (static_cast<std::size_t>(a.size()) != n) {
    throw Error(Errc::size_mismatch, fmt::format("{}: {} steps for {} env ids; expected one per env id", op,
                                                 a.size(), n));
  }
  std::vector<uint64_t> out(n);
  if (a.dtype().kind() == 'u') {  // read as uint64: every value is a step index (one not stored is the call's to report)
    const auto typed = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    std::copy_n(typed.data(), n, out.begin());
    return out;
  }
  const auto typed = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  for (std::size_t i = 0; i < n; ++i) {
    if (typed.data()[i] < 0) {
      throw Error(Errc::invalid_argument,
                  fmt::format("{}: step {} at position {} is negative", op, typed.data()[i], i));
    }
    out[i] = static_cast<uint64_t>(typed.data()[i]);
  }
  return out;
}

inline View parse_view(const std::string& v) {
  if (v == "replay") return View::replay;
  if (v == "online") return View::online;
  throw Error(Errc::invalid_argument, fmt::format("unknown view '{}': expected 'replay' or 'online'", v));
}

inline OnlineReset parse_online_reset(const std::string& v) {
  if (v == "now") return OnlineReset::now;
  if (v == "sampled") return OnlineReset::sampled;
  throw Error(Errc::invalid_argument,
              fmt::format("reset_online_queue: unknown to='{}': expected 'now' or 'sampled'", v));
}

inline Populate parse_populate(const std::string& v) {
  if (v == "never") return Populate::never;
  if (v == "always") return Populate::always;
  if (v == "auto") return Populate::automatic;
  throw Error(Errc::invalid_argument,
              fmt::format("unknown populate mode '{}': expected 'never', 'always' or 'auto'", v));
}

// The episodes modes' Python names (SampleOptions::episodes).
inline constexpr std::array<std::pair<Episodes, const char*>, 3> kEpisodesNames = {
    {{Episodes::cross, "cross"}, {Episodes::stop, "stop"}, {Episodes::within, "within"}}};

inline const char* episodes_name(Episodes e) {
  for (const auto& [mode, name] : kEpisodesNames) {
    if (mode == e) return name;
  }
  return "?";
}

inline Episodes parse_episodes(const std::string& v) {
  for (const auto& [mode, name] : kEpisodesNames) {
    if (v == name) return mode;
  }
  throw Error(Errc::invalid_argument,
              fmt::format("unknown episodes mode '{}': expected 'cross', 'stop' or 'within'", v));
}

// A float as Python's repr writes it (0.4, 10.0, inf): a signature's default.
inline std::string python_float_text(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", v);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

// ---------------------------------------------------------------------------------------------------------------
// Schema

inline Field make_field(const std::string& name, const std::string& dtype, std::vector<uint64_t> shape,
                        std::optional<int64_t> stack_axis) {
  const auto d = parse_dtype(dtype);
  if (!d) {
    std::vector<std::string_view> names;  // every dtype's spelling (schema.hpp), in DType order
    for (uint32_t raw = 0; raw < g_dtypes.size(); ++raw) {
      if (is_dtype(raw)) names.push_back(dtype_name(static_cast<DType>(raw)));
    }
    throw Error(Errc::invalid_schema, fmt::format("field '{}': unknown dtype '{}' (expected one of {})", name, dtype,
                                                  fmt::join(names, " ")));
  }
  Field f{name, *d, std::move(shape), std::nullopt};
  if (stack_axis) {  // -1 is the last axis, as in NumPy; the Schema checks the rest
    const auto ndim = static_cast<int64_t>(f.shape.size());
    const int64_t axis = *stack_axis < 0 ? *stack_axis + ndim : *stack_axis;
    if (axis < 0 || axis >= ndim) {
      throw Error(Errc::invalid_schema, fmt::format("field '{}': stack_axis {} is not an axis of shape {}", name,
                                                    *stack_axis, f.shape_string()));
    }
    f.stack_axis = static_cast<uint32_t>(axis);
  }
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// Batch storage

// Where every array of a Batch starts: a multiple of 64 bytes. JAX's CPU client takes an array through DLPack
// without a copy only when its data is 64-byte aligned (it copies otherwise; NumPy's own allocations are only
// 16-byte aligned), and 64 is also a cache line, so no two arrays of a batch share one.
inline constexpr std::size_t kBatchAlignment = 64;

// An uninitialised C-contiguous array of `shape` whose data starts on a kBatchAlignment boundary; the memory
// belongs to a capsule that is the array's base, freed when the last array or view of it goes.
inline py::array aligned_array(const py::dtype& dtype, const std::vector<py::ssize_t>& shape) {
  std::size_t bytes = static_cast<std::size_t>(dtype.itemsize());
  for (py::ssize_t d : shape) bytes *= static_cast<std::size_t>(d);
  bytes = std::max<std::size_t>(kBatchAlignment, (bytes + kBatchAlignment - 1) / kBatchAlignment * kBatchAlignment);
  void* data = std::aligned_alloc(kBatchAlignment, bytes);
  if (data == nullptr) throw std::bad_alloc();
  py::capsule owner(data, [](void* p) { std::free(p); });
  return py::array(dtype, shape, std::vector<py::ssize_t>{}, data, owner);
}

// A timeout in seconds as whole milliseconds, the library's unit: rounded, and saturated at kWaitForever, which
// float('inf') (and any timeout of 2^64 ms or more, 585 million years) gives: a wait without end, in slices that
// Ctrl-C interrupts. NaN and negative timeouts are refused.
inline uint64_t timeout_ms(const char* what, double seconds) {
  if (!(seconds >= 0)) {
    throw Error(Errc::invalid_argument,
                fmt::format("{} is {}, expected a number of seconds >= 0 (inf: no timeout)", what, seconds));
  }
  const double ms = seconds * 1000.0 + 0.5;
  // 2^64 exactly; every double below it converts to uint64_t without overflow.
  return ms >= 18446744073709551616.0 ? kWaitForever : static_cast<uint64_t>(ms);
}

// The other way, for properties: kWaitForever reads as float('inf').
inline double timeout_seconds(uint64_t ms) {
  return ms == kWaitForever ? std::numeric_limits<double>::infinity() : static_cast<double>(ms) / 1e3;
}

inline WriterOptions writer_options(bool wait_for_rate_limit, double rate_limit_timeout, double policy_timeout = 10.0,
                                    double queue_timeout = 10.0) {
  return WriterOptions{.wait_for_rate_limit = wait_for_rate_limit,
                       .rate_limit_timeout_ms = timeout_ms("rate_limit_timeout", rate_limit_timeout),
                       .policy_timeout_ms = timeout_ms("policy_timeout", policy_timeout),
                       .queue_timeout_ms = timeout_ms("queue_timeout", queue_timeout)};
}

// A 1-d array of `n` float32 priorities (converted once from any real dtype), or a clear error. A value past
// float32's range is refused here, as given: converted, it would be reported as "inf" (the library checks the rest,
// detail/protocol/priorities.hpp, priority_fits, with the same words).
inline py::array_t<float, py::array::c_style | py::array::forcecast> priority_array(const char* op, py::handle p,
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
  if (a.dtype().kind() == 'f' && a.itemsize() > 4) {
    const auto given = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(a);
    for (std::size_t i = 0; i < n; ++i) {
      const double v = given.data()[i];
      if (std::isfinite(v) && std::fabs(v) > std::numeric_limits<float>::max()) {
        throw Error(Errc::invalid_argument,
                    fmt::format("{}: priority {} (position {}) {}", op, v, i,
                                v < 0 ? std::string("is not a finite number >= 0")
                                      : fmt::format("is past {}, the largest priority (priorities are float32)",
                                                    std::numeric_limits<float>::max())));
      }
    }
  }
  return py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
}

/// A seed argument: None (a random one) or an integer from 0 to 2**64 - 1 (checked_int; `what` names it).
inline uint64_t seed_from(const char* what, const py::object& seed) {
  if (seed.is_none()) {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }
  return checked_int<uint64_t>(what, seed, 0, std::numeric_limits<uint64_t>::max());
}

}  // namespace shmreplay::python
