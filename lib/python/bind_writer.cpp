// lib/python/bind_writer.cpp: the Python StepSlot and Writer.
#include "bindings.hpp"
#include "objects.hpp"

namespace shmreplay::python {

using namespace py::literals;

using WriterClass = py::class_<PyWriter, std::shared_ptr<PyWriter>>;

namespace {

// StepSlot: a reserved step, filled in place and committed (Writer.reserve).
void bind_step_slot(py::module_& m) {
  py::class_<PySlot>(m, "StepSlot",
                     "A reserved step: fill its arrays in place (they are views of the shared memory), then "
                     "commit. As a context manager it commits on a normal exit and abandons on an exception.")
      .def_property_readonly("env", [](PySlot& s) { return s.get("env").env(); }, "the env whose step this is")
      .def_property_readonly("step", [](PySlot& s) { return s.get("step").step(); },
                             "the global index of the step being written")
      .def_property_readonly("fields",
                             [](py::object self) {
                               const PySlot& s = self.cast<const PySlot&>();
                               const Schema& schema = s.owner->buffer->schema();
                               py::dict d;
                               for (std::size_t f = 0; f < schema.size(); ++f) {
                                 d[py::str(schema[f].name)] = s.array(self, f);
                               }
                               return d;
                             },
                             "{name: array}: writable views of the step's ring slot (a stacked field's: of "
                             "memory of the slot's own, stored as frames at commit), valid until commit or abandon")
      .def_property_readonly("schema", [](PySlot& s) { return std::make_shared<Schema>(s.owner->buffer->schema()); },
                             "the schema of the buffer the slot belongs to")
      .def("__getitem__", [](py::object self, const std::string& name) {
        const PySlot& s = self.cast<const PySlot&>();
        const Schema& schema = s.owner->buffer->schema();
        for (std::size_t f = 0; f < schema.size(); ++f) {
          if (schema[f].name == name) return s.array(self, f);
        }
        throw py::key_error(fmt::format("'{}' is not a field of this step", name));
      })
      .def("commit", &PySlot::commit, "Publish the step: samplers can see it from now on.")
      .def("set_priority", [](PySlot& s, double p) { s.get("set_priority").set_priority(p); }, "priority"_a,
           "The step's priority, set when it is committed (a buffer with priorities; without a call it enters at "
           "the running maximum). A finite float32 >= 0 whose priority**alpha is a finite float32, else "
           "InvalidArgument naming the value as given.")
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
}

// The waits' settings: whether pushes wait for the rate limiter, and how long each wait lasts.
void def_writer_waits(WriterClass& c) {
  c.def_property(
          "wait_for_rate_limit", [](PyWriter& w) { return w.get("wait_for_rate_limit").options().wait_for_rate_limit; },
          [](PyWriter& w, bool on) {
            const auto lock = lock_holding_gil(w.mu);
            WriterOptions o = w.get("wait_for_rate_limit").options();
            o.wait_for_rate_limit = on;
            w.get("wait_for_rate_limit").set_options(o);
          },
          "whether pushes wait for the buffer's rate limiter (a writer that timed out can set it False and go on)")
      .def_property(
          "rate_limit_timeout",
          [](PyWriter& w) { return timeout_seconds(w.get("rate_limit_timeout").options().rate_limit_timeout_ms); },
          [](PyWriter& w, double seconds) {
            const auto lock = lock_holding_gil(w.mu);
            Writer& writer = w.get("rate_limit_timeout");
            WriterOptions o = writer.options();
            o.rate_limit_timeout_ms = writer_options(true, seconds).rate_limit_timeout_ms;
            writer.set_options(o);
          },
          "seconds a push waits for the rate limiter before RateLimited (inf: no timeout; Ctrl-C interrupts a wait)")
      .def_property(
          "policy_timeout",
          [](PyWriter& w) { return timeout_seconds(w.get("policy_timeout").options().policy_timeout_ms); },
          [](PyWriter& w, double seconds) {
            const auto lock = lock_holding_gil(w.mu);
            Writer& writer = w.get("policy_timeout");
            WriterOptions o = writer.options();
            o.policy_timeout_ms = timeout_ms("policy_timeout", seconds);
            writer.set_options(o);
          },
          "seconds a push whose policy version the learners' window has left behind waits for a wider window "
          "before RateLimited (0: at once; inf: no timeout; Ctrl-C interrupts a wait)")
      .def_property(
          "queue_timeout",
          [](PyWriter& w) { return timeout_seconds(w.get("queue_timeout").options().queue_timeout_ms); },
          [](PyWriter& w, double seconds) {
            const auto lock = lock_holding_gil(w.mu);
            Writer& writer = w.get("queue_timeout");
            WriterOptions o = writer.options();
            o.queue_timeout_ms = timeout_ms("queue_timeout", seconds);
            writer.set_options(o);
          },
          "in a consuming queue, seconds a push waits for a learner to consume the step in its ring slot before "
          "RateLimited (0: at once; inf: no timeout; Ctrl-C interrupts a wait)");
}

// Writer.range, and the writer's envs, buffer, takeovers, restarts and heads.
void def_writer_properties(WriterClass& c) {
  c.def_static(
          "range",
          [](std::shared_ptr<Buffer> buffer, Int<"Writer.range(): first"> first, Int<"Writer.range(): count"> count,
             bool wait_for_rate_limit,
             double rate_limit_timeout, double policy_timeout, double queue_timeout) {
            auto w = std::make_shared<PyWriter>();
            w->buffer = buffer;
            const WriterOptions o =
                writer_options(wait_for_rate_limit, rate_limit_timeout, policy_timeout, queue_timeout);
            py::gil_scoped_release release;
            w->writer.emplace(Writer::range(*buffer, first, count, o));
            return w;
          },
          "buffer"_a, "first"_a, "count"_a, py::kw_only(), "wait_for_rate_limit"_a = false,
          "rate_limit_timeout"_a = 10.0, "policy_timeout"_a = 10.0, "queue_timeout"_a = 10.0,
          "Lease env ids first .. first+count-1.")
      .def_property_readonly("env_ids",
                             [](PyWriter& w) {
                               const auto& ids = w.get("env_ids").env_ids();
                               py::array_t<int64_t> out(static_cast<py::ssize_t>(ids.size()));
                               std::copy(ids.begin(), ids.end(), out.mutable_data());
                               return out;
                             },
                             "int64 array of the envs this Writer leases, in the order given")
      .def_property_readonly("buffer", [](PyWriter& w) { return w.buffer; }, "the Buffer it pushes to")
      .def_property_readonly("takeovers", [](PyWriter& w) { return w.get("takeovers").takeovers(); },
                             "leases taken over from dead processes")
      .def_property_readonly(
          "stack_flagless_restarts",
          [](PyWriter& w) { return w.get("stack_flagless_restarts").stack_flagless_restarts(); },
          "under stack_continuity='episodes': steps inside an episode whose stack the rule's spot check (one step "
          "in 256) found not to continue the previous step's though no flag said so; above 0, the env restarts "
          "stacks without flags and some stacks between the checks were stored wrong (use 'compare')")
      .def("head", [](PyWriter& w, Int<"Writer.head(): env"> env) { return w.get("head").head(env); }, "env"_a,
           "Steps this env has published.");
}

// Writer.reserve: a step to fill in place.
void def_writer_reserve(WriterClass& c) {
  c.def(
          "reserve",
          [](std::shared_ptr<PyWriter> w, Int<"Writer.reserve(): env", int64_t> env_arg) {
            const int64_t env = env_arg;
            w->get("reserve");
            if (env < 0) throw Error(Errc::env_out_of_range, fmt::format("reserve: env id {} is negative", env));
            auto owned = std::make_unique<PySlot>();
            owned->owner = w;
            const Schema& schema = w->buffer->schema();
            // The fields' addresses are taken under mu, while the Writer is known to be open: once run() lets mu
            // go, and before it has the GIL back, a close() from another thread can abandon the slot and destroy
            // the Writer (the mapping stays: the slot's owner holds the Buffer).
            owned->field_data.resize(schema.size());
            uint64_t stacked_bytes = 0;
            for (const Field& f : schema.fields()) stacked_bytes += f.stacked() ? f.bytes() : 0;
            owned->stacked_data.resize(static_cast<std::size_t>(stacked_bytes));  // before the reservation: may throw
            w->run("reserve", 0, [&](Writer& writer) {  // as a push of no bytes: waits without the GIL
              owned->slot.emplace(writer.reserve(static_cast<uint64_t>(env)));
              w->open_slots.push_back(owned.get());
              std::byte* stacked = owned->stacked_data.data();
              for (std::size_t f = 0; f < schema.size(); ++f) {
                if (schema[f].stacked()) {  // filled here, copied to the Writer at commit (PySlot::stacked_data)
                  owned->field_data[f] = stacked;
                  stacked += schema[f].bytes();
                } else {
                  owned->field_data[f] = owned->slot->field(f).data();
                }
              }
            });
            PySlot& slot = *owned;
            py::object self = py::cast(std::move(owned));
            // A close() since the reservation abandoned the slot (close and the slot change with the GIL held, so
            // the slot returned here is open): the caller learns it now rather than at commit.
            if (!slot.slot) throw Error(Errc::invalid_argument, "reserve: this Writer is closed");
            return self;
          },
          "env"_a,
          "Reserve the env's next step for zero-copy filling: fill slot[name][...] in place, then commit(). "
          "Do not keep the arrays past the commit: they are views of the ring slot (a stacked field's: of the "
          "slot's own memory, stored as frames at commit). A close() from another thread that overtakes the "
          "reservation makes it raise InvalidArgument (this Writer is closed).");
}

}  // namespace

void bind_writer(py::module_& m) {
  bind_step_slot(m);

  // ----- Writer
  auto writer = WriterClass(
      m, "Writer", "An env worker's view: it leases env ids for this process and pushes their steps.")
      .def(py::init([](std::shared_ptr<Buffer> buffer, py::object env_ids, bool wait_for_rate_limit,
                       double rate_limit_timeout, double policy_timeout, double queue_timeout) {
             auto w = std::make_shared<PyWriter>();
             w->buffer = buffer;
             const std::vector<uint64_t> ids = env_id_vector("Writer", env_ids, buffer->num_envs());
             const WriterOptions o =
                 writer_options(wait_for_rate_limit, rate_limit_timeout, policy_timeout, queue_timeout);
             py::gil_scoped_release release;
             w->writer.emplace(*buffer, ids, o);
             return w;
           }),
           "buffer"_a, "env_ids"_a, py::kw_only(), "wait_for_rate_limit"_a = false, "rate_limit_timeout"_a = 10.0,
           "policy_timeout"_a = 10.0, "queue_timeout"_a = 10.0,
           "Lease env_ids; LeaseHeld names the owner's pid when another process has one. With "
           "wait_for_rate_limit=True, pushes wait (up to rate_limit_timeout seconds, then RateLimited; inf: no "
           "timeout; Ctrl-C raises KeyboardInterrupt within 50 ms, with nothing pushed) while the buffer's rate "
           "limiter holds inserts back; by default a writer never waits for it. In a buffer with a policy-version "
           "field, a push whose version the learners' window has left behind waits up to policy_timeout seconds "
           "for a wider window (then RateLimited, with nothing pushed). In a consuming queue, a push whose ring slot "
           "holds a step not yet delivered waits up to queue_timeout seconds (then RateLimited, nothing pushed).")
      .def("close", &PyWriter::close,
           "Release the leases now (also done when the Writer is garbage-collected); open reservations are "
           "abandoned.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyWriter& w, py::object, py::object, py::object) {
        w.close();
        return false;
      });
  def_writer_properties(writer);
  def_writer_waits(writer);
  def_writer_reserve(writer);
  add_push_methods(m, writer);  // push and push_one (push_call.cpp)
}

}  // namespace shmreplay::python
