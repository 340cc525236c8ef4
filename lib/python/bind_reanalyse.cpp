// lib/python/bind_reanalyse.cpp: the Python Reanalyser (a reanalyse worker of a buffer's walk) and ReanalyseChunk
// (shmreplay/reanalyse.hpp; docs/design/reanalyse.md).
#include "bindings.hpp"
#include "objects.hpp"

#include <chrono>
#include <cmath>
#include <thread>

#include "shmreplay/reanalyse.hpp"

namespace shmreplay::python {

using namespace py::literals;

namespace {

// The worker and the buffer it keeps alive. Its calls run with the GIL held (a scan is short beside the network
// inference a chunk stands for), so Python threads sharing one Reanalyser take turns.
struct PyReanalyser {
  std::shared_ptr<Buffer> buffer;
  std::optional<Reanalyser> worker;

  Reanalyser& get(const char* op) {
    if (!worker) throw Error(Errc::invalid_argument, fmt::format("Reanalyser.{}: this Reanalyser is closed", op));
    return *worker;
  }
};

ReanalyseOrder parse_order(const std::string& order) {
  for (const ReanalyseOrder o :
       {ReanalyseOrder::oldest_version, ReanalyseOrder::sweep, ReanalyseOrder::largest_return}) {
    if (order == to_string(o)) return o;
  }
  throw Error(Errc::invalid_argument, fmt::format("Reanalyser: order is '{}', expected 'oldest_version', 'sweep' or "
                                                  "'largest_return'",
                                                  order));
}

// next(): try_next polled every millisecond, sleeping with the GIL released; Ctrl-C raises KeyboardInterrupt.
std::optional<ReanalyseChunk> next_chunk(PyReanalyser& r, ReanalyseOrder order, double timeout) {
  if (std::isnan(timeout) || timeout < 0) {
    throw Error(Errc::invalid_argument, fmt::format("Reanalyser.next(): timeout is {}, expected seconds >= 0 (inf: "
                                                    "no limit)",
                                                    timeout));
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (std::optional<ReanalyseChunk> c = r.get("next").try_next(order)) return c;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= timeout) return std::nullopt;
    {
      py::gil_scoped_release release;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
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
      .def_property_readonly("steps", &ReanalyseChunk::steps, "end_step - first_step")
      .def("__repr__", [](const ReanalyseChunk& c) {
        return fmt::format("ReanalyseChunk(env={}, first_step={}, end_step={}, chunk={}, walk_pass={})", c.env,
                           c.first_step, c.end_step, c.chunk, c.pass);
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
          [](PyReanalyser& r, const std::string& order) { return r.get("try_next").try_next(parse_order(order)); },
          "order"_a = "oldest_version",
          "The next due chunk in `order` ('oldest_version': never reanalysed, then the lowest target version; "
          "'sweep': the oldest stored chunk; 'largest_return': the largest reward sum), or None when none is due now.")
      .def(
          "next",
          [](PyReanalyser& r, const std::string& order, double timeout) {
            return next_chunk(r, parse_order(order), timeout);
          },
          "order"_a = "oldest_version", "timeout"_a = std::numeric_limits<double>::infinity(),
          "try_next, polled every millisecond for up to `timeout` seconds (inf: no limit); None at the timeout.")
      .def(
          "complete",
          [](PyReanalyser& r, const ReanalyseChunk& c, Int<"Reanalyser.complete(): target_version"> version) {
            return r.get("complete").complete(c, version);
          },
          "chunk"_a, "target_version"_a,
          "Record that `chunk` was reanalysed with targets of `target_version` and let it go; False when nothing "
          "was recorded (writers overwrote all its steps, or this worker no longer holds it).")
      .def(
          "give_back", [](PyReanalyser& r, const ReanalyseChunk& c) { return r.get("give_back").give_back(c); },
          "chunk"_a, "Let `chunk` go unrecorded (due again in this pass); False when not held.")
      .def_property_readonly(
          "slot", [](PyReanalyser& r) { return r.get("slot").slot(); }, "the walk's worker slot it holds (0 to 63)")
      .def_property_readonly("walk_pass", [](PyReanalyser& r) { return r.get("walk_pass").pass(); },
                             "the walk's pass in progress (from 1)")
      .def_property_readonly(
          "newest_version", [](PyReanalyser& r) { return r.get("newest_version").newest_version(); },
          "the newest target version a completion recorded (None before any)")
      .def("close", [](PyReanalyser& r) { r.worker.reset(); },
           "Give back the chunks it holds and its worker slot (also done when garbage-collected).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyReanalyser& r, py::object, py::object, py::object) {
        r.worker.reset();
        return false;
      });
}

}  // namespace shmreplay::python
