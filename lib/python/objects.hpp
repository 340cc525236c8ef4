// lib/python/objects.hpp: the C++ objects behind the Python classes Batch, Writer, StepSlot and Sampler: what each
// holds (the library object, its buffer, a mutex taken with the GIL released) and the calls the bindings share.
#pragma once

#include "convert.hpp"
#include "interrupt.hpp"
#include "small_vector.hpp"

namespace shmreplay::python {

/// A PolicyState as Python sees it (Sampler.policy, Buffer.policy): {'version', 'max_staleness' (None: no window),
/// 'publishes'}.
inline py::dict policy_dict(const PolicyState& st) {
  py::dict d;
  d["version"] = st.version;
  d["max_staleness"] = st.max_staleness ? py::object(py::int_(*st.max_staleness)) : py::none();
  d["publishes"] = st.publishes;
  return d;
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
  std::array<std::size_t, kSelectors> selector_rows{};  // rows per selector of the last sample (SampleBatch's)
  uint64_t policy_version = 0;            // the version the last sample drew against (SampleBatch::policy_version)
  uint64_t load_generation = 0;           // the buffer's checkpoint loads then (SampleBatch::load_generation)
  std::optional<uint64_t> policy_floor;   // the oldest version its window admitted; nullopt: no window
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

  // The C++ view of these arrays (made on the first call and kept: the arrays of a Batch never change, so a
  // sample into out= allocates nothing), after checking the schema and that a call of rows x length fits. The
  // schema check is a pointer comparison for a batch made by this Sampler (new_batch, or an earlier sample).
  SampleBatch& borrow(const char* op, const std::shared_ptr<const Schema>& s, std::size_t want_rows,
                      std::size_t want_length) {
    if (schema != s && !(*schema == *s)) {
      throw Error(Errc::schema_mismatch, fmt::format("{}: out= is a batch of schema {}, the buffer's is {}", op,
                                                     schema->to_string(), s->to_string()));
    }
    if (rows != want_rows || length != want_length) {
      throw Error(Errc::size_mismatch, fmt::format("{}: out= holds {} rows x {} steps, this call needs {} x {}", op,
                                                   rows, length, want_rows, want_length));
    }
    check_writeable(op);  // every call: the view below is kept, and a flag can be turned off at any time
    if (!lent) lent = std::make_shared<SampleBatch>(lend());
    return *lent;
  }

  // Whether nothing but this Batch refers to any of its arrays (each array's reference count is 1; read with the GIL
  // held): no view, dict, tensor or buffer export of them is alive, so a sample may fill them again (PySampler's
  // reuse of the batches it made).
  bool arrays_unshared() const noexcept {
    for (const py::array& a : fields) {
      if (Py_REFCNT(a.ptr()) != 1) return false;
    }
    return Py_REFCNT(mask.ptr()) == 1 && Py_REFCNT(env_ids.ptr()) == 1 && Py_REFCNT(starts.ptr()) == 1 &&
           Py_REFCNT(weights.ptr()) == 1;
  }

  // Refuses a batch with a read-only array (its writeable flag turned off), naming it: a sample writes them all.
  void check_writeable(const char* op) const {
    const auto refuse = [&](const std::string& what) {
      throw Error(Errc::invalid_argument,
                  fmt::format("{}: out= {} is read-only (its writeable flag is off); a sample writes every array of "
                              "the batch",
                              op, what));
    };
    for (std::size_t f = 0; f < fields.size(); ++f) {
      if (!fields[f].writeable()) refuse(fmt::format("field '{}'", names[f]));
    }
    if (!mask.writeable()) refuse("'mask'");
    if (!env_ids.writeable()) refuse("'env_ids'");
    if (!starts.writeable()) refuse("'starts'");
    if (!weights.writeable()) refuse("'weights'");
  }

  // borrow()'s view, shared by copies of this Batch (the same arrays), and the mutex that lets one call at a time
  // fill it (taken by PySampler::fill after the Sampler's own: two Samplers' calls into one out= batch from two
  // threads would otherwise prepare the same SampleBatch at once).
  std::shared_ptr<SampleBatch> lent;
  std::shared_ptr<std::mutex> filling = std::make_shared<std::mutex>();

  SampleBatch lend() {
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

  // A Batch of views of this one's first `n` rows (a consuming call's partial batch; the arrays stay this
  // Batch's, so out= keeps taking the full one).
  py::object first_rows(std::size_t n) const {
    const py::slice first(0, static_cast<py::ssize_t>(n), 1);
    const auto head = [&](const py::array& a) { return py::array(a[first]); };
    Batch part;
    part.schema = schema;
    part.names = names;
    for (const py::array& f : fields) part.fields.push_back(head(f));
    part.mask = head(mask);
    part.env_ids = head(env_ids);
    part.starts = head(starts);
    part.weights = head(weights);
    part.selector_rows = selector_rows;
    part.policy_version = policy_version;
    part.load_generation = load_generation;
    part.policy_floor = policy_floor;
    part.rows = n;
    part.length = length;
    return py::cast(std::move(part));
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

// A new Batch of rows x length as a Python object (the shape checked by the caller): a batch that does not fit in
// memory is a MemoryError that names it (new_batch and every sampling call without out=).
inline py::object make_batch_object(const char* op, const std::shared_ptr<const Schema>& schema, std::size_t rows,
                                    std::size_t length) {
  try {
    return py::cast(Batch::make(schema, rows, length));
  } catch (const std::bad_alloc&) {
    const double bytes = static_cast<double>(rows) * static_cast<double>(length) *
                         static_cast<double>(schema->step_bytes() + 1);
    PyErr_SetString(PyExc_MemoryError, fmt::format("{}: no memory for a batch of {} rows x {} steps ({:.3g} bytes)",
                                                   op, rows, length, bytes)
                                           .c_str());
    throw py::error_already_set();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The wrappers' mutexes and the GIL

// The rule that keeps a wrapper's mutex and the GIL from deadlocking: no thread waits for the mutex while holding
// the GIL. Calls that copy or wait release the GIL, then lock; a small push holding the GIL only try_locks. A short
// call made with the GIL held (commit, abandon, close, a setter) locks through this: at once when the mutex is
// free, otherwise it releases the GIL while it waits (another thread may hold the mutex for a long copy or a rate
// limiter wait: the interpreter's other threads keep running meanwhile) and takes the GIL back holding the mutex,
// which cannot deadlock under the rule. Whatever the caller looked up before may have changed while it waited.
inline std::unique_lock<std::mutex> lock_holding_gil(std::mutex& mu) {
  std::unique_lock lock(mu, std::try_to_lock);
  if (!lock.owns_lock()) {
    py::gil_scoped_release release;
    lock.lock();
  }
  return lock;
}

// ---------------------------------------------------------------------------------------------------------------
// Writer and StepSlot

struct PySlot;

struct PyWriter {
  std::shared_ptr<Buffer> buffer;
  std::optional<Writer> writer;
  std::mutex mu;  // waited for only with the GIL released (lock_holding_gil above)
  std::vector<PySlot*> open_slots;  // reservations not yet committed or abandoned (changed under mu)
  // What push_call.cpp compares a data key with, by pointer, to find its field (made on the first push, used and
  // changed with the GIL held): the schema's field names as interned str objects, in schema order (a dict written
  // with literal keys holds these very objects), and for each field the last exact str key found equal to its
  // name by value (a key made at run time, as from f"{prefix}obs", is the same object from push to push when the
  // caller reuses its dict or keys). Both hold their str objects, so a pointer is never reused for another value.
  std::vector<py::object> names;
  std::vector<py::object> seen_keys;

  const std::vector<py::object>& interned_names() {
    if (names.empty()) {
      for (const Field& f : buffer->schema().fields()) {
        names.push_back(py::reinterpret_steal<py::object>(PyUnicode_InternFromString(f.name.c_str())));
        if (!names.back()) throw py::error_already_set();
      }
      seen_keys.resize(names.size());
    }
    return names;
  }

  Writer& get(const char* op) {
    if (!writer) throw Error(Errc::invalid_argument, fmt::format("{}: this Writer is closed", op));
    return *writer;
  }
  void close();

  // The most step data a push copies while holding the GIL (about 3 µs of copying at memory speed).
  static constexpr std::size_t kHoldGilBytes = std::size_t{64} << 10;

  // Runs call(writer) under mu, for a call that writes `bytes` of step data (push, push_one, reserve): with the
  // GIL kept when that is at most kHoldGilBytes and the writer never waits for the rate limiter (such a call takes
  // less time than handing the GIL over and back), unless another thread holds mu; with the GIL released
  // otherwise, and then Ctrl-C ends a wait for the rate limiter (SignalCheck) with nothing written. The Writer is
  // looked up under mu, so a close() from another thread is seen.
  template <class Call>
  void run(const char* op, std::size_t bytes, Call&& call) {
    // (A buffer with a policy-version field, or a consuming queue, may hold a push back too: its pushes always
    // release the GIL, or a learner thread of the same process could never deliver the step the push waits for.)
    if (bytes <= kHoldGilBytes && !get(op).options().wait_for_rate_limit && !buffer->episode_fields().policy_version &&
        !buffer->consuming_queue()) {
      std::unique_lock lock(mu, std::try_to_lock);
      if (lock.owns_lock()) {
        call(get(op));
        return;
      }
    }
    py::gil_scoped_release release;
    const SignalCheck signals;
    std::lock_guard lock(mu);
    call(get(op));
  }
};


struct PySlot {
  std::shared_ptr<PyWriter> owner;
  std::optional<StepSlot> slot;
  // Each field's bytes in the ring slot, taken when the step was reserved. The arrays are made on each access,
  // with the slot's Python object as their base: kept here, they would make a cycle with it that the garbage
  // collector never sees (pybind11's objects are not tracked), and every reservation would keep its Writer (and
  // the leases) to the end of the process.
  SmallVector<std::byte*, 16> field_data;
  // A stacked field's bytes are this slot's own (zeros at first), copied into the Writer's staging area at commit
  // (StepSlot::field of a stacked field), which stores them as frames. The staging area is the Writer's and goes
  // with it at close(), while an array kept past the commit still points where its base (this slot) says: the
  // mapping for a field stored as pushed (the owner holds the Buffer), this memory for a stacked one.
  std::vector<std::byte> stacked_data;
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
  // A view of field f's bytes in the ring slot; `self` (this slot's Python object) is its base, which keeps the
  // Writer and the mapping alive while the view lives.
  py::array array(py::handle self, std::size_t f) const {
    const Field& field = owner->buffer->schema()[f];
    return py::array(numpy_dtype(field.dtype), field_shape(field, {}), field_data[f], self);
  }
  void commit() {
    const auto lock = lock_holding_gil(owner->mu);
    StepSlot& step = get("commit");
    const Schema& schema = owner->buffer->schema();
    for (std::size_t f = 0; f < schema.size(); ++f) {
      if (schema[f].stacked()) std::memcpy(step.field(f).data(), field_data[f], schema[f].bytes());
    }
    step.commit();
    state = "committed";
    forget();
  }
  void abandon() {
    const auto lock = lock_holding_gil(owner->mu);
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
inline void PyWriter::close() {
  const auto lock = lock_holding_gil(mu);
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
  // Changed only with the GIL held (made, or moved out by close()); every call copies it with the GIL held and
  // keeps its copy to the end, so a close() from another thread never destroys the Sampler under a running call.
  std::shared_ptr<Sampler> sampler;
  Rng rng;
  std::mutex mu;  // waited for only with the GIL released (lock_holding_gil above)
  // The batches the last calls without out= made (the newest last), touched only with the GIL held. Such a call
  // fills one of them again when nothing outside this list refers to it or to any of its arrays, so a learner that
  // drops each batch before its next call gets fresh arrays' speed without fresh memory: a new batch over glibc's
  // 32 MiB mmap threshold (or a process's first ones) faults every page in, about 10x the copy itself
  // (docs/benchmarks/python.md, "Sampling without out="). Two, for `batch = sampler.sample(...)` in a loop, where
  // the previous batch is still bound while the next call runs; the memory they keep is freed by close().
  std::vector<py::object> made;
  static constexpr std::size_t kMadeKept = 2;

  // A batch of `made` of rows x length that nothing else refers to (moved to the newest place), or None. The
  // newest first: a caller that drops each batch before its next call gets the same batch every time, whose lines
  // its last fill may have left in the cache (two batches taken in turn held none of a 55 MiB batch's: 1.2-1.3x
  // the time of out= for Atari-like 256 x 8 rows, docs/benchmarks/python.md).
  py::object reusable_batch(std::size_t rows, std::size_t length) {
    for (std::size_t i = made.size(); i-- > 0;) {
      if (Py_REFCNT(made[i].ptr()) != 1) continue;  // the caller (or anything else) still holds it
      const Batch& b = made[i].cast<const Batch&>();
      if (b.rows != rows || b.length != length || !b.arrays_unshared()) continue;
      py::object found = made[i];
      made.erase(made.begin() + static_cast<std::ptrdiff_t>(i));
      made.push_back(found);
      return found;
    }
    return py::none();
  }
  void keep_made(const py::object& batch) {
    if (made.size() == kMadeKept) made.erase(made.begin());
    made.push_back(batch);
  }

  std::shared_ptr<Sampler> get(const char* op) const {
    if (!sampler) throw Error(Errc::invalid_argument, fmt::format("{}: this Sampler is closed", op));
    return sampler;
  }
  // Calls after this one find the Sampler closed; the learner role is released when the calls already running
  // (waited for here, through mu) have finished, normally before close() returns.
  void close() {
    std::shared_ptr<Sampler> closing = std::move(sampler);
    made.clear();  // the kept batches' memory (the caller's own references keep theirs alive)
    py::gil_scoped_release release;
    std::lock_guard lock(mu);
    closing.reset();
  }

  // Runs `body(sampler, batch)` on `out` (or a Batch of rows x length from `made` or new, its shape checked first)
  // with the GIL released; Ctrl-C ends a wait for the rate limiter (SignalCheck). A given out= batch has the shape
  // it was made with (new_batch, or an earlier call), checked then.
  template <class Body>
  py::object fill(const char* op, std::size_t rows, std::size_t length, py::object out, Body&& body) {
    const std::shared_ptr<Sampler> s = get(op);
    py::object result = out;
    if (out.is_none()) {
      Sampler::check_batch_shape(*buffer, op, rows, length);  // a clear error before any array is made
      result = reusable_batch(rows, length);
      if (result.is_none()) {
        result = make_batch_object(op, schema, rows, length);
        keep_made(result);
      }
    } else if (!py::isinstance<Batch>(out)) {
      throw Error(Errc::invalid_argument,
                  fmt::format("{}: out= takes a shmreplay.Batch (from new_batch() or an earlier sample), got a {}", op,
                              py::str(py::type::handle_of(out).attr("__name__")).cast<std::string>()));
    }
    Batch& b = result.cast<Batch&>();
    SampleBatch& sb = b.borrow(op, schema, rows, length);
    auto* weights = static_cast<float*>(b.weights.mutable_data());
    {
      py::gil_scoped_release release;
      const SignalCheck signals;
      std::lock_guard lock(mu);
      std::lock_guard batch_lock(*b.filling);
      body(*s, sb);
      std::copy(sb.weights().begin(), sb.weights().end(), weights);
      b.selector_rows = sb.selector_rows();
      b.policy_version = sb.policy_version();
      b.load_generation = sb.load_generation();
      b.policy_floor = sb.policy_floor();
    }
    if (sb.rows() < rows) return b.first_rows(sb.rows());  // a consuming call's partial batch
    return result;
  }
};

}  // namespace shmreplay::python
