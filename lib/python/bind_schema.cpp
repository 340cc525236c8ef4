// lib/python/bind_schema.cpp: the Python Field and Schema.
#include "bindings.hpp"
#include "objects.hpp"

namespace shmreplay::python {

using namespace py::literals;

namespace {

// The Field class: its constructor from the text form's parts, its properties.
void bind_field(py::module_& m) {
  py::class_<Field>(m, "Field", "One named field of a step: a dtype and a shape (empty for a scalar).")
      .def(py::init([](const std::string& name, const std::string& dtype, const std::vector<Int<"Field(): shape">>& shape,
                       std::optional<Int<"Field(): stack_axis", int64_t>> stack_axis,
                       std::optional<std::string> codec, bool derived) {
             Field f = make_field(name, dtype, std::vector<uint64_t>(shape.begin(), shape.end()),
                                  stack_axis ? std::optional<int64_t>(*stack_axis) : std::nullopt);
             // The text form's options (":lz4", ":zstd=LEVEL", ":derived"), read by the schema's own parser.
             if (codec || derived) {
               f = Schema::parse(fmt::format("{}{}{}", f.to_string(), codec ? ":" + *codec : std::string(),
                                             derived ? ":derived" : ""))[0];
             }
             return f;
           }),
           "name"_a, "dtype"_a, "shape"_a = std::vector<uint64_t>{}, py::kw_only(),
           "stack_axis"_a = py::none(), "codec"_a = py::none(), "derived"_a = false,
           "A field: name, dtype as text (u8 i8 u16 i16 u32 i32 u64 i64 f16 bf16 f32 f64 bool), shape. With "
           "stack_axis, the field is a stack of shape[stack_axis] frames along that axis, newest last (-1: the last "
           "axis): pushed and sampled whole, stored one frame per step. With codec ('lz4', 'zstd' or 'zstd=LEVEL'), "
           "its frames are kept compressed and decoded byte-exact when read. With derived=True, a value reanalyse "
           "recomputes: Sampler.write_back rewrites it (and only derived fields) by handle.")
      .def_readonly("name", &Field::name, "the field's name")
      .def_property_readonly("dtype", [](const Field& f) { return std::string(dtype_name(f.dtype)); },
                             "the dtype as text: 'f32', 'u8', 'bool', ...")
      .def_property_readonly("shape", [](const Field& f) {
        py::tuple t(f.shape.size());
        for (std::size_t i = 0; i < f.shape.size(); ++i) t[i] = f.shape[i];
        return t;
      }, "the shape as a tuple (() for a scalar)")
      .def_property_readonly("numpy_dtype", [](const Field& f) { return numpy_dtype(f.dtype); },
                             "the NumPy dtype of its arrays (bf16: uint16 holding the bfloat16 bits)")
      .def_property_readonly("elements", &Field::elements, "elements per step: the product of the shape")
      .def_property_readonly("bytes", &Field::bytes, "bytes per step")
      .def_property_readonly("stack_axis", [](const Field& f) -> std::optional<uint32_t> { return f.stack_axis; },
                             "the stacked axis (frames along it, newest last), or None for a field stored as pushed")
      .def_property_readonly("stack_depth", &Field::stack_depth,
                             "frames per stack: shape[stack_axis] (1 for a field that is not stacked)")
      .def_property_readonly("frame_bytes", &Field::frame_bytes,
                             "bytes of one frame: bytes / stack_depth (what the buffer stores per step)")
      .def_property_readonly("codec",
                             [](const Field& f) -> std::optional<std::string> {
                               if (f.codec == Codec::lz4) return "lz4";
                               if (f.codec == Codec::zstd) return "zstd";
                               return std::nullopt;
                             },
                             "the codec its frames are kept with, 'lz4' or 'zstd', or None for a field stored as "
                             "pushed")
      .def_property_readonly("codec_level", [](const Field& f) { return f.codec_level; },
                             "zstd's level (-7 to 19, not 0) for a 'zstd' field; 0 otherwise")
      .def_readonly("derived", &Field::derived,
                    "whether the field is derived (':derived'): the only kind Sampler.write_back rewrites")
      .def("__str__", &Field::to_string)
      .def("__repr__", [](const Field& f) { return fmt::format("shmreplay.Field('{}')", f.to_string()); })
      .def(py::self == py::self);
}

}  // namespace

void bind_schema(py::module_& m) {
  bind_field(m);
  py::class_<Schema, std::shared_ptr<Schema>>(m, "Schema", "The ordered fields of every step of a buffer.")
      .def(py::init([](const std::vector<Field>& fields) { return std::make_shared<Schema>(fields); }), "fields"_a)
      .def_static("parse", [](const std::string& spec) { return std::make_shared<Schema>(Schema::parse(spec)); },
                  "spec"_a, "Parse the text form, e.g. 'obs:f32[4] action:i32 reward:f32 done:bool'.")
      .def_property_readonly("fields", &Schema::fields, "the Field objects, in order")
      .def_property_readonly("names", [](const Schema& s) {
        std::vector<std::string> n;
        for (const Field& f : s.fields()) n.push_back(f.name);
        return n;
      }, "the field names, in order")
      .def_property_readonly("step_bytes", &Schema::step_bytes, "bytes of one step, all fields together")
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
}

}  // namespace shmreplay::python
