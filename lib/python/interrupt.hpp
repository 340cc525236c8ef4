// lib/python/interrupt.hpp: Ctrl-C during the library's blocking waits. A binding that calls into the library
// with the GIL released, for a call that may wait (a push or reserve of a writer that waits for the rate limiter,
// a sample call, Buffer.open), installs a signal check for the call's duration: between the wait's slices (50 ms)
// it takes the GIL and runs Python's signal handlers; a handler that raises (KeyboardInterrupt from SIGINT) ends
// the wait with that exception, having written nothing, and the binding's caller sees it as raised.
#pragma once

#include <pybind11/pybind11.h>

#include "shmreplay/wait.hpp"

namespace shmreplay::python {

namespace py = pybind11;

// Takes the GIL and runs the pending signal handlers (only the main thread has any); throws the exception one
// raised, which pybind11 restores as the call's Python exception.
inline void check_python_signals(void*) {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// The check for one call, on this thread: `const SignalCheck signals;` beside the gil_scoped_release.
struct SignalCheck : InterruptCheck {
  SignalCheck() noexcept : InterruptCheck(&check_python_signals, nullptr) {}
};

}  // namespace shmreplay::python
