// lib/python/bind_buffer.cpp: the Python Buffer.
#include "shmreplay/internal/segment.hpp"
#include "bindings.hpp"
#include "objects.hpp"

namespace shmreplay::python {

using namespace py::literals;

using BufferClass = py::class_<Buffer, std::shared_ptr<Buffer>>;

namespace {

// Buffer.create's docstring.
constexpr const char* kCreateDoc =
    "Create a buffer of num_envs rings of capacity steps; schema is a Schema or its text form. With "
    "priority_exponent=alpha every stored step has a priority and prioritized samples draw starts with "
    "probability proportional to priority**alpha. With rate_limit=RateLimit.ratio(...) or "
    "RateLimit.min_size(...), samples per inserted step are kept within an error buffer across processes. "
    "populate='always' faults every page in before the name appears ('auto': when the segment is at most "
    "half of MemAvailable; 'never', the default: the first writer of each page does), calling "
    "populate_progress(done_bytes, total_bytes) after each 64 MiB if given. A stacked field (NAME:DTYPE[SHAPE]"
    ":stack=AXIS) keeps one frame per step; stack_restarts (0: 1 + capacity // 128) is how many steps per env "
    "whose stack does not continue the previous one's (episode starts) its frame rings hold at no loss. "
    "stack_continuity='compare' (the default) checks each pushed stack against the previous step's byte for "
    "byte; 'episodes' trusts the episode flags instead (a push then reads and writes one frame). max_learners "
    "(1 to 64) learner processes may sample it at once, one Sampler per rank (Sampler(buffer, rank=r)). "
    "Compressed fields (NAME:DTYPE[SHAPE]:lz4 or :zstd=LEVEL) keep their records in compressed_bytes bytes, "
    "every compressed field and env together (0: their frames' bytes as pushed over expected_compression, "
    "0 meaning 4); an env whose frames compress worse loses its oldest steps from the view. policy_version names a "
    "scalar integer field holding the version of the policy that produced each step (non-decreasing per env): "
    "learners then publish a version and a staleness window (Sampler.publish_policy) and sample inside it "
    "(max_staleness=), and writers the window left behind wait instead of being discarded. With "
    "max_times_sampled=N (1 to 255; 0, the default, for none) a stored step starts at most N sampled rows in "
    "total, over every learner, and then leaves the views. initial_priority is the priority of a step pushed "
    "without one (None: the running maximum; float('inf'): steps no prioritized draw has returned are drawn "
    "first). With sequence_priority_length=L, prioritized samples of L steps weigh a start by "
    "eta * max + (1 - eta) * mean of its sequence's priority**alpha (sequence_priority_eta=). consuming_queue=True "
    "makes it a queue (Reverb's): each step is delivered once, by sample calls with consume='fifo' or 'random', and "
    "writers wait (Writer queue_timeout) instead of overwriting a step not yet delivered. reanalyse_chunk=C gives "
    "it a reanalyse walk over C-step chunks (Reanalyser).";

// Buffer.create: a new segment from its geometry, schema and options.
void def_buffer_create(BufferClass& c) {
  c.def_static(
          "create",
          [](const std::string& name, Int<"Buffer.create(): num_envs"> num_envs,
             Int<"Buffer.create(): capacity"> capacity, py::object schema, Int<"Buffer.create(): mode", uint32_t> mode,
             bool replace, std::optional<std::string> done, std::optional<std::string> terminated,
             std::optional<std::string> truncated, std::optional<std::string> reward,
             Int<"Buffer.create(): episode_queue_capacity"> episode_queue_capacity,
             std::optional<double> priority_exponent, std::optional<RateLimit> rate_limit,
             const std::string& populate, py::object populate_progress,
             Int<"Buffer.create(): stack_restarts"> stack_restarts, const std::string& stack_continuity,
             Int<"Buffer.create(): max_learners", uint64_t, 1, layout::kMaxLearners> max_learners,
             Int<"Buffer.create(): compressed_bytes"> compressed_bytes, double expected_compression,
             std::optional<std::string> policy_version,
             Int<"Buffer.create(): max_times_sampled"> max_times_sampled, std::optional<double> initial_priority,
             Int<"Buffer.create(): sequence_priority_length"> sequence_priority_length, bool consuming_queue,
             Int<"Buffer.create(): reanalyse_chunk"> reanalyse_chunk) {
            const Schema s = py::isinstance<py::str>(schema) ? Schema::parse(schema.cast<std::string>())
                                                             : schema.cast<Schema>();
            CreateOptions o{.mode = mode, .replace = replace};
            o.episodes = {done.value_or(""), terminated.value_or(""), truncated.value_or(""), reward.value_or("")};
            o.episode_queue_capacity = episode_queue_capacity;
            o.priority_exponent = priority_exponent;
            o.rate_limit = rate_limit;
            o.stack_restarts = stack_restarts;
            o.max_learners = max_learners;
            o.compressed_bytes = compressed_bytes;
            o.expected_compression = expected_compression;
            o.policy_version = policy_version.value_or("");
            o.max_times_sampled = max_times_sampled;
            o.initial_priority = initial_priority;
            o.sequence_priority_length = sequence_priority_length;
            o.consuming_queue = consuming_queue;
            o.reanalyse_chunk = reanalyse_chunk;
            if (stack_continuity == "episodes") {
              o.stack_continuity = StackContinuity::episodes;
            } else if (stack_continuity != "compare") {
              throw Error(Errc::invalid_argument,
                          fmt::format("cannot create '{}': stack_continuity is '{}', expected 'compare' or 'episodes'",
                                      name, stack_continuity));
            }
            o.populate = parse_populate(populate);
            if (!populate_progress.is_none()) {
              if (!PyCallable_Check(populate_progress.ptr())) {
                throw Error(Errc::invalid_argument,
                            fmt::format("cannot create '{}': populate_progress must be a callable (done_bytes, "
                                        "total_bytes), got {}",
                                        name, py::str(py::type::of(populate_progress)).cast<std::string>()));
              }
              // Called from create() with the GIL released: it takes the GIL back for the call. An exception it
              // raises aborts create(), which leaves nothing behind, and reaches the caller.
              o.populate_progress = [&populate_progress](uint64_t done_bytes, uint64_t total_bytes) {
                py::gil_scoped_acquire gil;
                populate_progress(done_bytes, total_bytes);
              };
            }
            py::gil_scoped_release release;  // fallocate, populate and initialise: may take a while for big buffers
            return std::make_shared<Buffer>(Buffer::create(name, num_envs, capacity, s, o));
          },
          "name"_a, "num_envs"_a, "capacity"_a, "schema"_a, py::kw_only(), "mode"_a = 0600, "replace"_a = false,
          "done"_a = py::none(), "terminated"_a = py::none(), "truncated"_a = py::none(), "reward"_a = py::none(),
          "episode_queue_capacity"_a = 0, "priority_exponent"_a = py::none(), "rate_limit"_a = py::none(),
          "populate"_a = "never", "populate_progress"_a = py::none(), "stack_restarts"_a = 0,
          "stack_continuity"_a = "compare", "max_learners"_a = 1, "compressed_bytes"_a = 0,
          "expected_compression"_a = 0.0, "policy_version"_a = py::none(), "max_times_sampled"_a = 0,
          "initial_priority"_a = py::none(), "sequence_priority_length"_a = 0, "consuming_queue"_a = false,
          "reanalyse_chunk"_a = 0, kCreateDoc);
}

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
  def_buffer_create(buffer);
  def_buffer_properties(buffer);
  def_buffer_reads(buffer);
  buffer.def("__repr__", [](const Buffer& b) {
    return fmt::format("<shmreplay.Buffer '{}': {} envs x {} steps of {} bytes; {}>", b.name(), b.num_envs(),
                       b.capacity(), b.schema().step_bytes(), b.schema().to_string());
  });
}

}  // namespace shmreplay::python
