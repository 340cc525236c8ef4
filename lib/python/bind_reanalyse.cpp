// lib/python/bind_reanalyse.cpp: the Python Reanalyser (a reanalyse worker of a buffer's walk) and ReanalyseChunk
// (shmreplay/reanalyse.hpp; docs/design/reanalyse.md).
#include "bindings.hpp"
#include "objects.hpp"

#include <cmath>
#include <mutex>

#include "interrupt.hpp"
#include "shmreplay/reanalyse.hpp"

namespace shmreplay::python {

using namespace py::literals;

namespace {

// The worker and the buffer it keeps alive. One call at a time: next() sleeps with the GIL released, so each call
// takes `busy` (having released the GIL first: a sleeping next() takes the GIL for its Ctrl-C check) and Python
// threads sharing one Reanalyser take turns, a call waiting for a sleeping next() to return.
struct PyReanalyser {
  std::shared_ptr<Buffer> buffer;
  std::optional<Reanalyser> worker;
  std::mutex busy;

  Reanalyser& get(const char* op) {
    if (!worker) throw Error(Errc::invalid_argument, fmt::format("Reanalyser.{}: this Reanalyser is closed", op));
    return *worker;
  }
};

// Runs `f` holding `r.busy`, with the GIL released (f must not touch Python objects).
template <class F>
auto one_at_a_time(PyReanalyser& r, F&& f) {
  py::gil_scoped_release release;
  const std::lock_guard<std::mutex> lock(r.busy);
  return f();
}

ReanalyseOrder parse_order(const std::string& order) {
  for (const ReanalyseOrder o :
       {ReanalyseOrder::oldest_version, ReanalyseOrder::sweep, ReanalyseOrder::largest_return}) {
    if (order == to_string(o)) return o;
  }
  throw Error(Errc::invalid_argument, fmt::format("Reanalyser: order is '{}', expected 'oldest_version', 'sweep' or "
                                                  "'largest_return'",
                                                  order));
}

// next(): Reanalyser::next with the GIL released; Ctrl-C raises KeyboardInterrupt within a re-check period.
std::optional<ReanalyseChunk> next_chunk(PyReanalyser& r, ReanalyseOrder order, double timeout) {
  if (std::isnan(timeout) || timeout < 0) {
    throw Error(Errc::invalid_argument, fmt::format("Reanalyser.next(): timeout is {}, expected seconds >= 0 (inf: "
                                                    "no limit)",
                                                    timeout));
  }
  const uint64_t ms = timeout_ms("timeout", timeout);
  const int64_t limit = ms >= static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(ms);
  return one_at_a_time(r, [&] {
    const SignalCheck signals;
    return r.get("next").next(order, limit);
  });
}

void bind_chunk(py::module_& m) {
  py::class_<ReanalyseChunk>(m, "ReanalyseChunk",
                             "A chunk a Reanalyser holds: env's steps [first_step, end_step), its chunk index and the "
                             "walk's pass it was handed in.")
      .def_readonly("env", &ReanalyseChunk::env, "the env whose steps these are")
      .def_readonly("first_step", &ReanalyseChunk::first_step,
                    "the chunk's first step still stored when it was handed out (a global step index)")
      .def_readonly("end_step", &ReanalyseChunk::end_step, "one past the chunk's last step")
      .def_readonly("chunk", &ReanalyseChunk::chunk, "the chunk index k: steps [k C, (k + 1) C) before the clip")
      .def_readonly("walk_pass", &ReanalyseChunk::pass, "the walk's pass it was handed in (from 1)")
      .def_readonly("load_generation", &ReanalyseChunk::load_generation,
                    "the buffer's checkpoint-load generation when it was handed out: "
                    "Sampler.write_back(load_generation=) refuses the chunk's rows when a load came since")
      .def_property_readonly("steps", &ReanalyseChunk::steps, "end_step - first_step")
      .def("__repr__", [](const ReanalyseChunk& c) {
        return fmt::format("ReanalyseChunk(env={}, first_step={}, end_step={}, chunk={}, walk_pass={}, "
                           "load_generation={})",
                           c.env, c.first_step, c.end_step, c.chunk, c.pass, c.load_generation);
      });
}

}  // namespace

void bind_reanalyse(py::module_& m) {
  bind_chunk(m);
  py::class_<PyReanalyser, std::shared_ptr<PyReanalyser>>(
      m, "Reanalyser",
      "A reanalyse worker of a buffer created with reanalyse_chunk=C: next() hands it a chunk of stored steps no "
      "other worker holds, each chunk once per pass of the walk; complete() records the target version it used. A "
      "worker killed holding chunks loses them to the next worker (handed again in the same pass).")
      .def(py::init([](std::shared_ptr<Buffer> buffer) {
             auto r = std::make_shared<PyReanalyser>();
             r->buffer = buffer;
             r->worker.emplace(*buffer);
             return r;
           }),
           "buffer"_a, "Take one of the walk's 64 worker slots (LeaseHeld when live workers hold every one).")
      .def(
          "try_next",
          [](PyReanalyser& r, const std::string& order) {
            const ReanalyseOrder o = parse_order(order);
            return one_at_a_time(r, [&] { return r.get("try_next").try_next(o); });
          },
          "order"_a = "oldest_version",
          "The next due chunk in `order` ('oldest_version': never reanalysed, then the lowest target version; "
          "'sweep': the oldest stored chunk; 'largest_return': the largest reward sum), or None when none is due now.")
      .def(
          "next",
          [](PyReanalyser& r, const std::string& order, double timeout) {
            return next_chunk(r, parse_order(order), timeout);
          },
          "order"_a = "oldest_version", "timeout"_a = std::numeric_limits<double>::infinity(),
          "try_next, blocking for up to `timeout` seconds (inf: no limit) until a chunk is due; None at the timeout. "
          "Sleeps on the walk's futex word (woken by a writer filling a chunk, a completion, a give-back, a dead "
          "worker's repair) with the GIL released; Ctrl-C raises KeyboardInterrupt.")
      .def(
          "complete",
          [](PyReanalyser& r, const ReanalyseChunk& c, Int<"Reanalyser.complete(): target_version"> version) {
            const uint64_t v = version;
            return one_at_a_time(r, [&] { return r.get("complete").complete(c, v); });
          },
          "chunk"_a, "target_version"_a,
          "Record that `chunk` was reanalysed with targets of `target_version` and let it go; False when nothing "
          "was recorded (writers overwrote all its steps, or this worker no longer holds it).")
      .def(
          "give_back",
          [](PyReanalyser& r, const ReanalyseChunk& c) {
            return one_at_a_time(r, [&] { return r.get("give_back").give_back(c); });
          },
          "chunk"_a, "Let `chunk` go unrecorded (due again in this pass); False when not held.")
      .def_property_readonly(
          "slot", [](PyReanalyser& r) { return r.get("slot").slot(); }, "the walk's worker slot it holds (0 to 63)")
      .def_property_readonly("walk_pass", [](PyReanalyser& r) { return r.get("walk_pass").pass(); },
                             "the walk's pass in progress (from 1)")
      .def_property_readonly(
          "newest_version", [](PyReanalyser& r) { return r.get("newest_version").newest_version(); },
          "the newest target version a completion recorded (None before any)")
      .def("close", [](PyReanalyser& r) { one_at_a_time(r, [&] { r.worker.reset(); }); },
           "Give back the chunks it holds and its worker slot (also done when garbage-collected).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyReanalyser& r, py::object, py::object, py::object) {
        one_at_a_time(r, [&] { r.worker.reset(); });
        return false;
      });
}

}  // namespace shmreplay::python
