"""shmreplay.Checkpointer: a chain of checkpoints of one buffer, a link every few seconds, from a background thread.

Who calls it: a training program (the learner's process, or any process that can open the buffer) that wants its
replay buffer to survive a crash of every process, or a reboot: ``shmreplay.load(dir)`` then restores the newest
complete link in one call. Each link is ``shmreplay.save_link`` (lib/python/bind_checkpoint.cpp), which maps the
buffer read-only, never waits for writers or the learner, and releases the GIL while it copies, so the program's
own threads run on.

Threads: every method may be called from any thread, and concurrently. One lock guards the object's state (which
thread runs, whether it is closed, the failure waiting to be raised), read and changed in one step each; a second
lock lets one save run at a time (the background's or save_now's), since a chain's links are numbered in turn.
"""

import atexit
import operator
import os
import threading
import time
import weakref

from . import _shmreplay
from ._errors import InvalidArgument

__all__ = ["Checkpointer"]

# The period's bounds (as the CLI's `save --every`): a period past a day is no schedule a run keeps, and a larger
# number would overflow the thread's waits.
_EVERY_MIN = 0.001
_EVERY_MAX = 86400.0
_KEEP_MAX = 2 ** 32 - 1

# The Checkpointers whose thread may run: stopped at interpreter exit, each after its save in progress, so that no
# save is cut off inside the library when daemon threads are ended.
_started = weakref.WeakSet()
_started_lock = threading.Lock()


@atexit.register
def _stop_all_at_exit():
    with _started_lock:
        running = list(_started)
    for c in running:
        c._stop(raise_error=False)


class Checkpointer:
    """Saves a buffer as a chain of checkpoints in the directory ``dir``, a link every ``every`` seconds.

    ``buffer`` is a :class:`Buffer` or a buffer's name (then opened read-only, and released by :meth:`close`). A
    background daemon thread calls :func:`save_link` (``keep``, ``compact_ratio`` as there) at once when started,
    then on a fixed schedule, ``every`` seconds apart (a save longer than the period starts the next one at once,
    without catching up), as ``shmreplay save NAME DIR --every S`` does. Writers and the learner never wait for
    it. After a crash, ``shmreplay.load(dir)`` restores the newest complete link: the steps of at most the last
    ``every`` seconds plus one save are lost.

    The background thread adds ``nice`` (default 10; 0 leaves it) to its own nice value (its CPU priority; on
    Linux a thread's own) before its first save, so that on a machine whose cores the writers and the learner keep
    busy, saving leaves them their CPU, and on an idle core it costs nothing; the program's other threads keep
    theirs. :meth:`save_now` saves on the calling thread, at that thread's priority.

    A failed save (a full disk, an unwritable directory) does not stop the schedule: the next one tries again. Its
    exception is :attr:`error`; it is passed to ``on_error(exc)`` (called on the background thread) when given,
    else kept and raised by the next :meth:`stop` or :meth:`close`. An exception that ``on_error`` raises is kept
    and raised in the same way. An exception that ends the thread itself (outside a save) is reported alike: it is
    :attr:`error`, counts in :attr:`failures`, goes to ``on_error`` or is raised by :meth:`stop` or :meth:`close`.

    ``every`` is from 0.001 to 86400 seconds, ``keep`` from 1 to 2**32 - 1, ``nice`` from 0 to 19 (else
    InvalidArgument). ``allow_other_owner=True`` opens a buffer's name that belongs to another user and saves into
    a chain directory of another user (both refused by default: see :func:`save_link`).

    :meth:`start` begins, :meth:`stop` ends the thread (after the save in progress; it may be started again),
    :meth:`close` stops for good. As a context manager it starts on entry and closes on exit. Any method may be
    called from any thread. One saver per directory: a save that meets another one's save into ``dir`` (another
    Checkpointer's, ``shmreplay save --every``) fails with LeaseHeld, a failure as above.
    """

    def __init__(self, buffer, dir, every=60.0, keep=3, *, compact_ratio=2.0, nice=10, on_error=None,
                 allow_other_owner=False):
        every = float(every)
        if not _EVERY_MIN <= every <= _EVERY_MAX:  # NaN fails too
            raise InvalidArgument(f"Checkpointer: every is {every} seconds, expected {_EVERY_MIN:g} to "
                                  f"{_EVERY_MAX:g}")
        keep = operator.index(keep)
        if not 1 <= keep <= _KEEP_MAX:
            raise InvalidArgument(f"Checkpointer: keep is {keep}, expected 1 to {_KEEP_MAX}")
        compact_ratio = float(compact_ratio)
        if not compact_ratio >= 1.0:
            raise InvalidArgument(f"Checkpointer: compact_ratio is {compact_ratio}, expected at least 1.0")
        nice = operator.index(nice)
        if not 0 <= nice <= 19:
            raise InvalidArgument(f"Checkpointer: nice is {nice}, expected 0 to 19")
        if on_error is not None and not callable(on_error):
            raise InvalidArgument(f"Checkpointer: on_error must be a callable (exception), got "
                                  f"{type(on_error).__name__}")
        directory = os.fspath(dir)
        if isinstance(directory, bytes):
            directory = os.fsdecode(directory)
        if not directory:
            raise InvalidArgument("Checkpointer: dir is empty")
        if isinstance(buffer, str):
            buffer = _shmreplay.Buffer.open(buffer, read_only=True, allow_other_owner=allow_other_owner)
        elif not isinstance(buffer, _shmreplay.Buffer):
            raise InvalidArgument(f"Checkpointer: buffer must be a shmreplay.Buffer or a buffer's name, got "
                                  f"{type(buffer).__name__}")
        self._buffer = buffer
        self._allow_other_owner = bool(allow_other_owner)
        self._dir = directory
        self._every = every
        self._keep = keep
        self._compact_ratio = compact_ratio
        self._nice = nice
        self._on_error = on_error
        self._lock = threading.Lock()  # the fields below
        self._save_lock = threading.Lock()  # one save at a time
        self._thread = None  # the running thread, and the event that stops it
        self._stop_event = None
        self._stopping = []  # threads told to stop that may still be saving
        self._closed = False
        self._pending = None  # a failure to raise at stop() (no on_error)
        self._last = None
        self._error = None
        self._saves = 0
        self._failures = 0

    # -- the thread -------------------------------------------------------------------------------------------

    def start(self):
        """Start the background thread; its first link is saved at once. Returns self. Raises InvalidArgument
        when it is running or closed."""
        self._start(if_stopped=False)
        return self

    def _start(self, if_stopped):
        with self._lock:
            if self._closed:
                raise InvalidArgument(f"Checkpointer of '{self._dir}' is closed")
            if self._thread is not None:
                if if_stopped:
                    return
                raise InvalidArgument(f"Checkpointer of '{self._dir}' is already running")
            event = threading.Event()
            thread = threading.Thread(target=self._run, args=(event,), daemon=True,
                                      name=f"shmreplay-checkpointer {self._dir}")
            thread.start()
            self._thread, self._stop_event = thread, event
        with _started_lock:
            _started.add(self)

    def stop(self):
        """Stop the background thread, after the save in progress (the background's or save_now's) is complete.
        Raises the failure kept since the last stop (see the class), once. Does nothing more when not running;
        the thread may be started again."""
        self._stop(raise_error=True)

    def close(self):
        """Stop for good (as :meth:`stop`, raising the same) and release the buffer; later calls do nothing."""
        with self._lock:
            self._closed = True
        try:
            self._stop(raise_error=True)
        finally:
            self._buffer = None

    def _stop(self, raise_error):
        with self._lock:
            thread, event = self._thread, self._stop_event
            self._thread = self._stop_event = None
            if thread is not None:
                self._stopping.append(thread)
            waiting = list(self._stopping)
        if event is not None:
            event.set()
        me = threading.current_thread()
        for t in waiting:
            if t is not me:  # stop() from on_error, on the thread itself: it ends when on_error returns
                t.join()
        if me not in waiting:
            with self._save_lock:  # a save_now in progress on another thread
                pass
        with self._lock:
            self._stopping = [t for t in self._stopping if t.is_alive()]
            error, self._pending = (self._pending, None) if raise_error else (None, self._pending)
        if error is not None:
            raise error

    def _run(self, event):
        try:
            self._schedule(event)
        except Exception as e:  # noqa: BLE001 (the thread ends; the caller sees why, as a failed save's)
            with self._lock:
                self._error = e
                self._failures += 1
            self._report(e)

    def _schedule(self, event):
        if self._nice:
            try:
                os.nice(self._nice)  # this thread's only (Linux: nice(2) sets the calling thread's value)
            except OSError:
                pass  # a priority it cannot lower is no reason not to save
        period = self._every
        next_time = time.monotonic()
        while not event.wait(max(0.0, next_time - time.monotonic())):
            next_time += period
            now = time.monotonic()
            if next_time < now:
                next_time = now  # behind schedule: no saves in a row to catch up
            self._save_in_background()

    def _save_in_background(self):
        try:
            self._save()
        except Exception as e:  # noqa: BLE001 (every failure is the caller's to see)
            self._report(e)

    def _report(self, e):
        """Passes a failure of the background thread to on_error, or keeps it for stop() and close()."""
        if self._on_error is None:
            with self._lock:
                self._pending = e
            return
        try:
            self._on_error(e)
        except Exception as raised:  # noqa: BLE001
            with self._lock:
                self._pending = raised

    def _save(self):
        buffer = self._buffer  # read once: close() may drop it meanwhile
        if buffer is None:
            raise InvalidArgument(f"Checkpointer of '{self._dir}' is closed")
        with self._save_lock:
            try:
                result = _shmreplay.save_link(buffer, self._dir, keep=self._keep, compact_ratio=self._compact_ratio,
                                              allow_other_owner=self._allow_other_owner)
            except Exception as e:
                with self._lock:
                    self._error = e
                    self._failures += 1
                raise
            with self._lock:
                self._last = result
                self._saves += 1
        return result

    # -- on demand ----------------------------------------------------------------------------------------------

    def save_now(self):
        """Save a link now, on the calling thread (after a save in progress), and return its LinkResult; a failure
        is raised here (and is :attr:`error`). The schedule is not moved. Raises InvalidArgument when closed."""
        return self._save()

    # -- state ---------------------------------------------------------------------------------------------------

    @property
    def dir(self):
        """The chain directory."""
        return self._dir

    @property
    def every(self):
        """Seconds between the starts of two scheduled saves."""
        return self._every

    @property
    def keep(self):
        """The newest links kept as restore points."""
        return self._keep

    @property
    def nice(self):
        """What the background thread adds to its nice value before saving (0: nothing)."""
        return self._nice

    @property
    def running(self):
        """Whether the background thread was started and not stopped."""
        with self._lock:
            return self._thread is not None

    @property
    def last(self):
        """The LinkResult of the last link saved, None before the first."""
        return self._last

    @property
    def error(self):
        """The exception of the last failed save, None when none failed."""
        return self._error

    @property
    def saves(self):
        """Links saved so far."""
        return self._saves

    @property
    def failures(self):
        """Saves that failed so far (and the background thread, if an error ended it)."""
        return self._failures

    def __enter__(self):
        """Start (unless running) and return self."""
        self._start(if_stopped=True)
        return self

    def __exit__(self, exc_type, exc, tb):
        """Close; a failure kept is raised unless the block is already raising."""
        if exc_type is None:
            self.close()
        else:
            try:
                self.close()
            except Exception:  # noqa: BLE001 (the block's own exception goes on)
                pass
        return False

    def __repr__(self):
        state = "closed" if self._closed else "running" if self.running else "stopped"
        return (f"<shmreplay.Checkpointer '{self._dir}' every {self._every:g} s, keep {self._keep}: {state}, "
                f"{self._saves} saved, {self._failures} failed>")


Checkpointer.__module__ = "shmreplay"
