// lib/python/bind_buffer.cpp: the Python Buffer.
#include "shmreplay/internal/segment.hpp"
#include "bindings.hpp"
#include "create_options.hpp"
#include "objects.hpp"

namespace shmreplay::python {

using namespace py::literals;

using BufferClass = py::class_<Buffer, std::shared_ptr<Buffer>>;

namespace {

// Buffer.open, remove, exists, and the buffer's properties.
void def_buffer_properties(BufferClass& c) {
  c.def_static(
          "open",
          [](const std::string& name, std::optional<py::object> schema, bool read_only, double ready_timeout,
             bool allow_other_owner) {
            OpenOptions o{.read_only = read_only,
                          .ready_timeout_ms = timeout_ms("ready_timeout", ready_timeout),
                          .allow_other_owner = allow_other_owner};
            if (schema && !schema->is_none()) {
              o.expected_schema = py::isinstance<py::str>(*schema) ? Schema::parse(schema->cast<std::string>())
                                                                   : schema->cast<Schema>();
            }
            py::gil_scoped_release release;
            const SignalCheck signals;  // Ctrl-C while it waits for the creator
            return std::make_shared<Buffer>(Buffer::open(name, o));
          },
          "name"_a, py::kw_only(), "schema"_a = py::none(), "read_only"_a = false, "ready_timeout"_a = 0.0,
          "allow_other_owner"_a = false,
          "Attach to an existing buffer; with schema=, fail with SchemaMismatch unless it is the buffer's. A buffer "
          "whose creator has not finished is waited for up to ready_timeout seconds (inf: no timeout; Ctrl-C "
          "interrupts), then NotReady. A buffer whose file belongs to another user is refused (PermissionDenied, "
          "naming both users) unless allow_other_owner=True: anyone can create a file under a known name in /dev/shm "
          "to read what you push or to feed your learner.")
      .def_static("remove", &Buffer::remove, "name"_a, "Remove a buffer's name; attached processes keep working.")
      .def_static("exists", &Buffer::exists, "name"_a, "Whether a buffer of that name exists (its file does).")
      .def_property_readonly("name", &Buffer::name, "the buffer's name")
      .def_property_readonly("path", &Buffer::path, "its file in the shared-memory directory")
      .def_property_readonly("schema", [](const Buffer& b) { return std::make_shared<Schema>(b.schema()); },
                             "the fields of every step")
      .def_property_readonly("num_envs", &Buffer::num_envs, "envs (one ring of steps each)")
      .def_property_readonly("capacity", &Buffer::capacity, "steps kept per env")
      .def_property_readonly("step_bytes", [](const Buffer& b) { return b.schema().step_bytes(); },
                             "bytes of one step, all fields together")
      .def_property_readonly("total_bytes", &Buffer::total_bytes, "the size of the segment's file")
      .def_property_readonly("stored_data_bytes", [](const Buffer& b) { return stored_data_bytes(b); },
                             "bytes of the step storage as stored: num_envs x capacity x each field's bytes, and "
                             "for a stacked field its frame rings and frame-index words instead (step_bytes is "
                             "a step as pushed)")
      .def_property_readonly("read_only", &Buffer::read_only, "whether this process mapped it read-only")
      .def_property_readonly("owner_uid", &Buffer::owner_uid, "The uid that owns the buffer's file.")
      .def_property_readonly("has_episodes", &Buffer::has_episodes,
                             "whether it was created with episode fields (done, terminated, truncated, reward)")
      .def_property_readonly("stack_continuity",
                             [](const Buffer& b) { return std::string(to_string(b.stack_continuity())); },
                             "how writers tell that a stacked field's stack continues the previous step's: 'compare' "
                             "(byte for byte, the default) or 'episodes' (trust the episode flags)")
      .def_property_readonly("max_learners", &Buffer::max_learners,
                             "Learner processes that may sample it at once, one per rank (max_learners= of create)")
      .def_property_readonly("priority_exponent",
                             [](const Buffer& b) -> std::optional<double> {
                               if (!b.has_priorities()) return std::nullopt;
                               return b.priority_exponent();
                             },
                             "alpha of a buffer with priorities, None without")
      .def_property_readonly("policy_version",
                             [](const Buffer& b) -> std::optional<std::string> {
                               const auto f = b.episode_fields().policy_version;
                               if (!f) return std::nullopt;
                               return b.schema()[*f].name;
                             },
                             "the policy-version field's name (policy_version= of create), None without")
      .def_property_readonly("reanalyse_chunk", &Buffer::reanalyse_chunk,
                             "steps per chunk of the reanalyse walk (reanalyse_chunk= of create); 0 without")
      .def_property_readonly("cold_capacity", &Buffer::cold_capacity,
                             "steps per env kept on disk (cold_capacity= of create); 0 without a cold tier")
      .def_property_readonly("consuming_queue", &Buffer::consuming_queue,
                             "whether it is a consuming queue (consuming_queue= of create): each step delivered once")
      .def_property_readonly("max_times_sampled", &Buffer::max_times_sampled,
                             "the sample cap: sampled rows a stored step may start, over every learner "
                             "(max_times_sampled= of create); 0 without")
      .def_property_readonly("initial_priority", &Buffer::initial_priority,
                             "the priority of a step pushed without one (initial_priority= of create): None for the "
                             "running maximum, inf for never-sampled steps first")
      .def_property_readonly("sequence_priority_length", &Buffer::sequence_priority_length,
                             "L of sequence priorities (sequence_priority_length= of create); 0 without");
}

// The buffer's rate limiter, heads, and read_steps (a copy of stored steps without the learner lease).
void def_buffer_reads(BufferClass& c) {
  c.def_property(
          "rate_limit", [](const Buffer& b) { return b.rate_limit(); },
          [](Buffer& b, std::optional<RateLimit> limit) {
            py::gil_scoped_release release;
            b.set_rate_limit(limit);
          },
          "The rate limiter's settings (a RateLimit, or None). Setting it changes it for every process at once (the "
          "error restarts at the middle of the new bounds); None removes it.")
      .def(
          "rate_limit_state", [](const Buffer& b) { return b.rate_limit_state(); },
          "The rate limiter's settings, counts (inserts, samples, error) and waits, read now.")
      .def_property_readonly(
          "policy", [](const Buffer& b) { return policy_dict(b.policy()); },
          "{'version', 'max_staleness', 'publishes'}: the policy version and staleness window in force, read now")
      .def(
          "set_policy_window",
          [](Buffer& b, std::optional<Int<"Buffer.set_policy_window(): max_staleness">> max_staleness) {
            PolicyState st;
            {
              py::gil_scoped_release release;
              st = b.set_policy_window(max_staleness ? std::optional<uint64_t>(*max_staleness) : std::nullopt);
            }
            return policy_dict(st);
          },
          "max_staleness"_a,
          "Set (an int) or remove (None) the staleness window, keeping the published version, for every process at "
          "once: samples without their own max_staleness draw inside it and held writers re-check at once (what "
          "`shmreplay limit --max-staleness` does; needs no learner slot, never paces). Returns the new policy dict.")
      .def(
          "heads",
          [](const Buffer& b) {
            py::array_t<int64_t> out(static_cast<py::ssize_t>(b.num_envs()));
            for (uint64_t e = 0; e < b.num_envs(); ++e) {
              // acquire: pairs with the writer's release store of head (a step counted here is published)
              out.mutable_data()[e] = static_cast<int64_t>(segment_of(b).env_control(e).head.load(std::memory_order_acquire));
            }
            return out;
          },
          "Steps published per env since creation (int64 array of num_envs).")
      .def(
          "read_steps",
          [](const Buffer& b, Int<"Buffer.read_steps(): env"> env, Int<"Buffer.read_steps(): first_step"> first_step,
             Int<"Buffer.read_steps(): count"> count) {
            StepRecords records;
            {
              py::gil_scoped_release release;
              records = shmreplay::read_steps(b, env, first_step, count);  // this mapping, not the name again
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
          "copied, {field: array ``[steps, *shape]``}).");
}

}  // namespace

void bind_buffer(py::module_& m) {
  // ----- Buffer
  auto buffer = BufferClass(m, "Buffer", "A named replay buffer in POSIX shared memory.");
  add_create_method(buffer);  // create_call.cpp: its options are create_options.hpp's rows
  def_buffer_properties(buffer);
  def_buffer_reads(buffer);
  buffer.def("__repr__", [](const Buffer& b) {
    return fmt::format("<shmreplay.Buffer '{}': {} envs x {} steps of {} bytes; {}>", b.name(), b.num_envs(),
                       b.capacity(), b.schema().step_bytes(), b.schema().to_string());
  });
}

}  // namespace shmreplay::python
