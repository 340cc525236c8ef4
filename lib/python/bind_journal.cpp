// lib/python/bind_journal.cpp: shmreplay.Journal (shmreplay/journal.hpp): keeps a buffer durable in a chain
// directory within a bound, on a thread of its own (start/stop), or one link at a time (write_link). The thread is
// C++'s and never takes the GIL; start, stop and write_link release it while they wait or write.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <filesystem>
#include <optional>

#include "bindings.hpp"
#include "objects.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/journal.hpp"

namespace shmreplay::python {

using namespace py::literals;

namespace {

// The Python object: the journal until close().
struct PyJournal {
  std::optional<Journal> journal;
  std::string dir;

  Journal& get(const char* op) {
    if (!journal) throw Error(Errc::invalid_argument, fmt::format("Journal.{}: the journal of '{}' is closed", op, dir));
    return *journal;
  }
};

// A writable mapping of the journal's buffer: a Buffer's name opened again (and checked to be the same segment), or
// a buffer's name.
Buffer journal_buffer(py::handle buffer, bool allow_other_owner) {
  if (py::isinstance<Buffer>(buffer)) {
    const auto b = buffer.cast<std::shared_ptr<Buffer>>();
    py::gil_scoped_release release;
    Buffer again = Buffer::open(b->name(), {.allow_other_owner = allow_other_owner});
    if (segment_of(again).header().creation_time_ns != segment_of(*b).header().creation_time_ns) {
      throw Error(Errc::not_found, fmt::format("Journal: the buffer '{}' was removed and created again since this "
                                               "Buffer opened it; open it again",
                                               b->name()));
    }
    return again;
  }
  if (!py::isinstance<py::str>(buffer)) {
    throw Error(Errc::invalid_argument, fmt::format("Journal: buffer must be a shmreplay.Buffer or a buffer's name, "
                                                    "got {}",
                                                    py::str(py::type::of(buffer)).cast<std::string>()));
  }
  const std::string name = buffer.cast<std::string>();
  py::gil_scoped_release release;
  return Buffer::open(name, {.allow_other_owner = allow_other_owner});
}

py::dict link_dict(const JournalLink& l) {
  return py::dict("link"_a = l.link_seq, "steps"_a = l.steps, "file_bytes"_a = l.file_bytes, "whole"_a = l.whole,
                  "seconds"_a = l.seconds, "lag_seconds"_a = l.lag_s, "late"_a = l.late, "error"_a = l.error);
}

}  // namespace

void bind_journal(py::module_& m) {
  py::class_<PyJournal, std::shared_ptr<PyJournal>>(
      m, "Journal",
      "Keeps a buffer durable in a chain directory: every published step is in a synced link at most `bound` seconds "
      "later (docs/design/journal.md). One journal per buffer (LeaseHeld while another lives). start() runs it on a "
      "thread, stop() ends it with a last link; shmreplay.load(dir) restores it.")
      .def(py::init([](py::handle buffer, const std::filesystem::path& dir, double bound, uint32_t keep,
                       double compact_ratio, bool allow_other_owner) {
             auto j = std::make_shared<PyJournal>();
             j->dir = dir.string();
             Buffer b = journal_buffer(buffer, allow_other_owner);
             py::gil_scoped_release release;
             j->journal.emplace(std::move(b), j->dir,
                                JournalOptions{.bound_s = bound, .keep = keep, .compact_ratio = compact_ratio,
                                               .allow_other_owner = allow_other_owner});
             return j;
           }),
           "buffer"_a, "dir"_a, py::kw_only(), "bound"_a = 2.0, "keep"_a = 3, "compact_ratio"_a = 2.0,
           "allow_other_owner"_a = false,
           "Open the buffer (a Buffer, opened again writable, or a name) and take its journal lease (LeaseHeld while "
           "another journal lives). `bound`: seconds within which a published step is durable (0.05 to 86400); "
           "`keep`: links kept as restore points; `compact_ratio`: as save_link's.")
      .def(
          "start", [](PyJournal& j) { j.get("start").start(); },
          "Run the journal on a thread of its own until stop().")
      .def(
          "stop",
          [](PyJournal& j) {
            Journal& journal = j.get("stop");
            py::gil_scoped_release release;
            journal.stop();
          },
          "End the thread after a last link holding every step published before this call (blocks for one link).")
      .def(
          "write_link",
          [](PyJournal& j) {
            Journal& journal = j.get("write_link");
            JournalLink l;
            {
              py::gil_scoped_release release;
              l = journal.write_link();
            }
            return link_dict(l);
          },
          "Write one link now (not while the thread runs); returns what it wrote as a dict.")
      .def_property_readonly(
          "running", [](const PyJournal& j) { return j.journal && j.journal->running(); },
          "whether the journal's thread runs")
      .def_property_readonly(
          "dir", [](const PyJournal& j) { return j.dir; }, "the chain directory")
      .def_property_readonly(
          "bound", [](PyJournal& j) { return j.get("bound").bound_s(); }, "the bound, in seconds")
      .def(
          "stats",
          [](PyJournal& j) {
            const JournalStats s = j.get("stats").stats();
            return py::dict("links"_a = s.links, "failures"_a = s.failures, "late"_a = s.late,
                            "link"_a = s.link_seq, "max_lag_seconds"_a = s.max_lag_s,
                            "estimate_seconds"_a = s.estimate_s, "max_link_seconds"_a = s.max_link_s);
          },
          "What the journal did so far: links, failures, late links, the newest link, the largest lag.")
      .def(
          "close",
          [](PyJournal& j) {
            if (!j.journal) return;
            py::gil_scoped_release release;
            j.journal->stop();
            j.journal.reset();  // releases the lease
          },
          "Stop (with a last link) and give up the journal lease.")
      .def("__enter__",
           [](py::object self) {
             self.cast<PyJournal&>().get("start").start();
             return self;
           })
      .def("__exit__", [](PyJournal& j, py::object, py::object, py::object) {
        if (j.journal) {
          py::gil_scoped_release release;
          j.journal->stop();
          j.journal.reset();
        }
        return false;
      });
}

}  // namespace shmreplay::python
