// lib/python/bind_checkpoint.cpp: checkpoints for Python (shmreplay/checkpoint.hpp): the module's save, load, verify,
// save_link and list_links, and Buffer.save; the classes they return are bind_checkpoint_results.cpp's. The
// package's Checkpointer (shmreplay/_checkpointer.py) calls save_link.
//
// Every call releases the GIL while it reads the segment or the files, so writers and the learner of this process
// run on (a save maps nothing writable and never waits for them). On the main thread, Python's signal handlers run
// between chunks of a save or of a verification (Ctrl-C ends it with KeyboardInterrupt; the save's temporary file
// is removed), never while a load writes the target. Off the main thread, with no progress callable, a call never
// takes the GIL until it returns.
#include <pybind11/stl/filesystem.h>

#include <chrono>
#include <filesystem>

#include "bindings.hpp"
#include "checkpoint_results.hpp"
#include "objects.hpp"
#include "shmreplay/checkpoint.hpp"

namespace shmreplay::python {

using namespace py::literals;

namespace {

// A path argument as the library takes it: str, bytes or os.PathLike (the filesystem caster), not empty.
std::string path_text(const char* op, const char* what, const std::filesystem::path& p) {
  if (p.empty()) throw Error(Errc::invalid_argument, fmt::format("{}: {} is empty", op, what));
  return p.string();
}

// The source of a save: a Buffer as it is, or a buffer's name, opened read-only for the call.
std::shared_ptr<Buffer> source_of(const char* op, py::handle buffer, bool allow_other_owner) {
  if (py::isinstance<Buffer>(buffer)) return buffer.cast<std::shared_ptr<Buffer>>();
  if (!py::isinstance<py::str>(buffer)) {
    throw Error(Errc::invalid_argument, fmt::format("{}: buffer must be a shmreplay.Buffer or a buffer's name, got {}",
                                                    op, py::str(py::type::of(buffer)).cast<std::string>()));
  }
  const std::string name = buffer.cast<std::string>();
  py::gil_scoped_release release;
  return std::make_shared<Buffer>(Buffer::open(name, {.read_only = true, .allow_other_owner = allow_other_owner}));
}

// Whether this thread is the interpreter's main thread (the one whose signal handlers run).
bool on_main_thread() {
  const py::module_ threading = py::module_::import("threading");
  const py::object main_ident = threading.attr("main_thread")().attr("ident");
  return main_ident.equal(threading.attr("get_ident")());
}

// The progress function of one call, and the exception a callable raised while a load wrote its target. Made and
// read with the GIL held; its function runs with the GIL released and takes it only when it has something to do:
// - the caller's callable (phase, done_bytes, total_bytes), if any, with the GIL; what it raises ends a save or a
//   verification (a save removes its temporary file) and is raised by the call; while a load writes ("loading"),
//   it is kept and raised once the load is complete, since an existing target must not be left half-loaded;
// - on the main thread, Python's signal handlers, in the phases that leave nothing behind ("saving",
//   "verifying"), at most every 100 ms (as a wait's slices: taking the GIL after each MiB would make the save wait
//   for every other Python thread's switch interval, 6x slower beside a busy thread): Ctrl-C's KeyboardInterrupt
//   ends the call as a raise of the callable would.
class Progress {
 public:
  Progress(const char* op, const py::object& callable) : callable_(callable), signals_(on_main_thread()) {
    if (!callable_.is_none() && !PyCallable_Check(callable_.ptr())) {
      throw Error(Errc::invalid_argument,
                  fmt::format("{}: progress must be a callable (phase, done_bytes, total_bytes), got {}", op,
                              py::str(py::type::of(callable_)).cast<std::string>()));
    }
  }

  // Captures this object by reference: it must outlive the call it is passed to.
  CheckpointProgressFn function() {
    if (callable_.is_none() && !signals_) return {};
    return [this](const CheckpointProgress& p) { report(p); };
  }

  // After the call returned: raises what the callable raised during a load's writing, if anything.
  void raise_deferred() {
    if (deferred_) {
      py::error_already_set e = std::move(*deferred_);
      deferred_.reset();
      throw e;
    }
  }

 private:
  void report(const CheckpointProgress& p) {
    const bool writing = p.phase == "loading";
    bool check_signals = false;
    if (signals_ && !writing) {  // no signal check while the target is written
      const auto now = std::chrono::steady_clock::now();
      check_signals = now - last_check_ >= kSignalPeriod;
      if (check_signals) last_check_ = now;
    }
    if (callable_.is_none() && !check_signals) return;
    py::gil_scoped_acquire gil;
    if (check_signals && PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (callable_.is_none() || (writing && deferred_)) return;
    try {
      callable_(py::str(p.phase.data(), p.phase.size()), p.done_bytes, p.total_bytes);
    } catch (py::error_already_set& e) {
      if (!writing) throw;
      deferred_.emplace(std::move(e));  // the first one; the callable is not called again
    }
  }

  static constexpr std::chrono::milliseconds kSignalPeriod{100};
  const py::object& callable_;
  const bool signals_;
  std::chrono::steady_clock::time_point last_check_ = std::chrono::steady_clock::now();
  std::optional<py::error_already_set> deferred_;
};

CheckpointInfo save_file(const char* op, const std::shared_ptr<Buffer>& source, const std::filesystem::path& path,
                         bool force, bool decode_compressed, const py::object& progress) {
  const std::string file = path_text(op, "path", path);
  Progress report(op, progress);
  SaveOptions o;
  o.progress = report.function();
  o.force = force;
  o.decode_compressed = decode_compressed;
  py::gil_scoped_release release;
  return save_checkpoint(*source, file, o);
}


}  // namespace

namespace {

// save(), and Buffer.save (added to the Buffer class bound by bind_buffer).
void bind_save(py::module_& m) {
  m.def(
      "save",
      [](py::object buffer, const std::filesystem::path& path, bool force, bool allow_other_owner,
         bool decode_compressed, py::object progress) {
        return save_file("save", source_of("save", buffer, allow_other_owner), path, force, decode_compressed,
                         progress);
      },
      "buffer"_a, "path"_a, py::kw_only(), "force"_a = false, "allow_other_owner"_a = false,
      "decode_compressed"_a = false, "progress"_a = py::none(),
      "Save a buffer (a Buffer, or a buffer's name: opened read-only for the call) to the checkpoint file path, "
      "with everything a run needs to go on: every env's stored steps, heads and online queue, priority weights, "
      "waiting episode records, the rate limiter and the learner's counters. Writers and the learner keep running: "
      "the save never writes the buffer nor waits for them, and the GIL is released while it runs. The file is "
      "written under a temporary name and renamed, so path is either the complete new checkpoint or what it was; "
      "what is at path is replaced only when it is a checkpoint, unless force=True (else AlreadyExists). "
      "Compressed fields are saved as their records; decode_compressed=True saves them as whole decoded steps "
      "(format 2.2's way, for readers older than 2.3). progress(phase, done_bytes, total_bytes) is called after each MiB if given. Returns the CheckpointInfo "
      "of the file.");

  py::handle buffer_class = m.attr("Buffer");
  py::setattr(buffer_class, "save",
              py::cpp_function(
                  [](std::shared_ptr<Buffer> self, const std::filesystem::path& path, bool force,
                     bool decode_compressed, py::object progress) {
                    return save_file("Buffer.save", self, path, force, decode_compressed, progress);
                  },
                  py::name("save"), py::is_method(buffer_class),
                  py::sibling(py::getattr(buffer_class, "save", py::none())),
                  "path"_a, py::kw_only(), "force"_a = false, "decode_compressed"_a = false,
                  "progress"_a = py::none(),
                  "Save this buffer to the checkpoint file path: shmreplay.save(self, path, ...). Returns its "
                  "CheckpointInfo."));
}

// load() and verify(), of a checkpoint file or a chain directory.
void bind_load_verify(py::module_& m) {
  m.def(
      "load",
      [](const std::filesystem::path& path, std::optional<std::string> name, Int<"load(): mode", uint32_t> mode,
         bool allow_mismatch,
         bool allow_other_owner, py::object progress) {
        const std::string file = path_text("load", "path", path);
        Progress report("load", progress);
        const LoadOptions o{.progress = report.function(),
                            .mode = mode,
                            .allow_other_owner = allow_other_owner,
                            .allow_mismatch = allow_mismatch};
        LoadResult r;
        {
          py::gil_scoped_release release;
          const std::string target = name.value_or("");
          r = is_chain_dir(file) ? load_chain(file, target, o) : load_checkpoint(file, target, o);
        }
        report.raise_deferred();
        return r;
      },
      "path"_a, "name"_a = py::none(), py::kw_only(), "mode"_a = 0600, "allow_mismatch"_a = false,
      "allow_other_owner"_a = false, "progress"_a = py::none(),
      "Load the checkpoint file path, or the newest complete link of the chain directory path, into the buffer "
      "name (None: the name it was saved from). The file is verified whole (every checksum) before anything is "
      "written. A new buffer is created with the file's geometry (mode=) and named only once complete, so a "
      "failed or killed load leaves nothing. An existing buffer must have the file's schema, episode fields, envs "
      "and capacity (SchemaMismatch, InvalidArgument), belong to this user (PermissionDenied, unless "
      "allow_other_owner=True, which also takes a chain directory of another user) and have no live writer or "
      "learner (LeaseHeld); differences in priorities, rate "
      "limiter settings or stack continuity are refused (SchemaMismatch naming each) unless allow_mismatch=True. "
      "Returns a LoadResult whose notes say what the load left out or changed (checkpoint.hpp's table).");

  m.def(
      "verify",
      [](const std::filesystem::path& path, py::object progress, bool allow_other_owner) {
        const std::string file = path_text("verify", "path", path);
        Progress report("verify", progress);
        const CheckpointProgressFn fn = report.function();
        VerifyResult r;
        py::gil_scoped_release release;
        r.info = is_chain_dir(file) ? verify_chain(file, &r.notes, fn, allow_other_owner) : verify_checkpoint(file, fn);
        return r;
      },
      "path"_a, py::kw_only(), "progress"_a = py::none(), "allow_other_owner"_a = false,
      "Read and check the whole checkpoint file path (every checksum), or the newest complete link of the chain "
      "directory path and every link it needs; writes nothing. Returns a VerifyResult (info, notes: for a chain, "
      "the newer links skipped and every file not taken; a chain directory of another user only with "
      "allow_other_owner=True). Raises NotFound, NotASegment, VersionMismatch, Truncated or Corrupt, saying "
      "where and what.");
}

// save_link() and list_links(): chains of incremental checkpoints in a directory.
void bind_chain_calls(py::module_& m) {
  m.def(
      "save_link",
      [](py::object buffer, const std::filesystem::path& dir, Int<"save_link(): keep", uint32_t, 1> keep,
         double compact_ratio,
         bool allow_other_owner, py::object progress) {
        const std::string directory = path_text("save_link", "dir", dir);
        if (!(compact_ratio >= 1.0)) {
          throw Error(Errc::invalid_argument,
                      fmt::format("save_link: compact_ratio is {}, expected at least 1.0", compact_ratio));
        }
        const std::shared_ptr<Buffer> source = source_of("save_link", buffer, allow_other_owner);
        Progress report("save_link", progress);
        ChainOptions o;
        o.keep = keep;
        o.compact_ratio = compact_ratio;
        o.allow_other_owner = allow_other_owner;
        o.save.progress = report.function();
        py::gil_scoped_release release;
        return save_link(*source, directory, o);
      },
      "buffer"_a, "dir"_a, py::kw_only(), "keep"_a = 3, "compact_ratio"_a = 2.0, "allow_other_owner"_a = false,
      "progress"_a = py::none(),
      "Write the next link of the chain in directory dir (created if missing): the steps published since the "
      "previous link, or every env's window when the chain starts anew, plus the whole state, as save() does. "
      "Then remove the links that the newest keep links no longer need; when the kept links exceed compact_ratio "
      "times the buffer's window, the next link is whole (a new chain). What was in dir stays loadable whatever "
      "happens; a save into dir while another one runs there is LeaseHeld. The directory and its files must "
      "belong to this user (PermissionDenied) unless allow_other_owner=True, which also takes a buffer of another "
      "user. load(dir) restores the newest complete link. Returns a LinkResult (its notes name the files not "
      "taken).");

  m.def(
      "list_links",
      [](const std::filesystem::path& dir, bool allow_other_owner) {
        const std::string directory = path_text("list_links", "dir", dir);
        py::gil_scoped_release release;
        return list_links(directory, allow_other_owner);
      },
      "dir"_a, py::kw_only(), "allow_other_owner"_a = false,
      "The link files of the chain directory dir, oldest first, as their headers say (a ChainLink each; a file "
      "whose headers fail, of another user or of a chain the directory does not list is listed with its error). "
      "Raises NotFound when dir does not exist, PermissionDenied for another user's directory unless "
      "allow_other_owner=True.");
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  bind_checkpoint_results(m);
  bind_save(m);
  bind_load_verify(m);
  bind_chain_calls(m);
}

}  // namespace shmreplay::python
