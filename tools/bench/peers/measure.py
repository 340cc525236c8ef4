"""How every figure is measured, the same way for each implementation (an adapter, peer_*.py).

- add rate: `writers` writer processes (or, for a one-process peer, the measuring process itself) each push a
  prepared batch of `rows` steps per call in a loop, starting together at a barrier; each times `trials` trials
  of `seconds` (tools/bench/timing.py); a trial's figure is the sum over writers of steps/s.
- sample rate: the process that made the buffer (the learner) times its sample call the same way, with no
  writer or while 2 writer processes push 256 steps per call at full speed.
- creation: seconds from the constructor until the buffer holds its first 256-step batch (so lazy storage and
  JIT compilation are included); footprint: growth of the learner process's resident memory (its
  /proc/self/smaps_rollup Rss, shared and file-backed pages included) once the buffer was filled to capacity
  (the data pushed is made before the first reading, so it is not counted).
- writer processes: forked per figure where the peer's documentation forks (the buffer is inherited); two
  spawned once and reused for every figure where it spawns (the buffer goes to them pickled, per figure).
- probe: 2 writer processes push stamped steps (probe.py) one per call into a buffer of 256 steps while the
  learner samples 256 flat rows per call and counts torn rows.
Each figure is the median over trials, with min and max.
"""
import multiprocessing
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from timing import trial_times  # noqa: E402

import probe  # noqa: E402
import workloads  # noqa: E402


def summary(values):
    """Median, min and max of per-trial figures."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "trials": list(values)}


def rss_bytes():
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                return int(line.split()[1]) * 1024
    return 0


def _writer_loop(adapter, step, rows, widx, mode, barrier, stop, queue, seconds, trials):
    """One writer's part of a figure: measure, load (push until `stop`), or probe (push stamped steps)."""
    try:
        w = adapter.writer(step, rows, widx)
        data = w.prepare(workloads.batch(step, rows, seed=widx))
        barrier.wait(timeout=300)
        if mode == "measure":
            queue.put(("ok", [rows / t for t in trial_times(lambda: w.add(data), seconds, trials)]))
        elif mode == "load":
            queue.put(("ok", None))
            while not stop.is_set():
                w.add(data)
        else:  # probe
            queue.put(("ok", None))
            counter = 0
            while not stop.is_set():
                w.add(w.prepare(probe.stamped(rows, widx + 1, counter)))
                counter += rows
        w.close()
    except Exception as e:  # reported by the parent, never swallowed
        queue.put(("error", f"{type(e).__name__}: {e}"))


def _writer_server(commands, barriers, stop, queue, done):
    """A reused writer process (spawn context): runs one `_writer_loop` per command until it gets None."""
    for command in iter(commands.get, None):
        adapter, step, rows, widx, mode, count, seconds, trials = command
        _writer_loop(adapter, step, rows, widx, mode, barriers[count], stop, queue, seconds, trials)
        done.put(widx)


class _Pool:
    """Two writer processes started once per adapter and reused for every figure: for adapters whose writers are
    spawned (a spawned child imports torch or TensorFlow anew, seconds each), and which therefore receive the
    buffer by pickling with every command."""

    pools = {}

    def __init__(self, ctx):
        self.stop, self.queue, self.done = ctx.Event(), ctx.Queue(), ctx.Queue()
        self.barriers = {1: ctx.Barrier(2), 2: ctx.Barrier(3)}
        self.commands = [ctx.Queue() for _ in range(2)]
        self.procs = [ctx.Process(target=_writer_server, daemon=True,
                                  args=(q, self.barriers, self.stop, self.queue, self.done)) for q in self.commands]
        for p in self.procs:
            p.start()

    @classmethod
    def of(cls, adapter):
        key = type(adapter)
        if key not in cls.pools:
            cls.pools[key] = cls(multiprocessing.get_context(adapter.mp_context))
        return cls.pools[key]


class Writers:
    """`count` writer processes of an adapter running one figure: forked for each figure where the adapter's
    documentation forks (the buffer is inherited), taken from its reused pool where it spawns."""

    def __init__(self, adapter, step, rows, count, mode, seconds=0.0, trials=0):
        self.count = count
        if adapter.mp_context == "spawn":
            self.pool = _Pool.of(adapter)
            self.stop, self.queue = self.pool.stop, self.pool.queue
            self.stop.clear()
            for i in range(count):
                self.pool.commands[i].put((adapter, step, rows, i, mode, count, seconds, trials))
            self.pool.barriers[count].wait(timeout=600)
            self.procs = None
            return
        self.pool = None
        ctx = multiprocessing.get_context(adapter.mp_context)
        barrier, self.stop, self.queue = ctx.Barrier(count + 1), ctx.Event(), ctx.Queue()
        self.procs = [ctx.Process(target=_writer_loop, daemon=True,
                                  args=(adapter, step, rows, i, mode, barrier, self.stop, self.queue,
                                        seconds, trials)) for i in range(count)]
        for p in self.procs:
            p.start()
        barrier.wait(timeout=300)

    def results(self, timeout=600):
        out = []
        for _ in range(self.count):
            status, value = self.queue.get(timeout=timeout)
            if status != "ok":
                raise RuntimeError(f"writer process failed: {value}")
            out.append(value)
        return out

    def close(self):
        self.stop.set()
        if self.pool is not None:
            for _ in range(self.count):
                self.pool.done.get(timeout=300)
            return
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()


def close_pools():
    """Ends the reused writer processes (at the end of a worker)."""
    for pool in _Pool.pools.values():
        for q in pool.commands:
            q.put(None)
        for p in pool.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    _Pool.pools.clear()


def add_rate(adapter, step, rows, writers, cfg):
    """Steps/s added by `writers` writers, `rows` steps per call (a summary over trials)."""
    if not adapter.multi_process:
        w = adapter.writer(step, rows, 0)
        data = w.prepare(workloads.batch(step, rows))
        rates = [rows / t for t in trial_times(lambda: w.add(data), cfg.seconds, cfg.trials)]
        w.close()
        return summary(rates)
    group = Writers(adapter, step, rows, writers, "measure", cfg.seconds, cfg.trials)
    try:
        per_writer = group.results()
    finally:
        group.close()
    return summary([sum(r[i] for r in per_writer) for i in range(cfg.trials)])


def sample_rate(adapter, fn, units, step, writers, cfg):
    """Units (rows or sequences) per second sampled by `fn`, alone or while `writers` writers push 256 steps per
    call."""
    group = Writers(adapter, step, 256, writers, "load") if writers else None
    try:
        if group:
            group.results()
            time.sleep(0.05)
        return summary([units / t for t in trial_times(fn, cfg.seconds, cfg.trials)])
    finally:
        if group:
            group.close()


def create_and_fill(adapter, step, capacity):
    """Creation seconds (until the first 256-step batch is in) and resident bytes after filling to capacity."""
    raw = [workloads.batch(step, 256, seed=i) for i in range(2)]  # made first: not part of the footprint
    before = rss_bytes()
    start = time.perf_counter()
    adapter.create(step, capacity)
    fillers = [adapter.writer(step, 256, i) for i in range(2)]
    data = [f.prepare(r) for f, r in zip(fillers, raw)]
    fillers[0].add(data[0])
    created = time.perf_counter() - start
    for call in range(1, -(-capacity // 256)):
        fillers[call % 2].add(data[call % 2])
    for f in fillers:
        f.close()
    return created, rss_bytes() - before


def probe_run(adapter, seconds):
    """Torn rows among the rows sampled while 2 writer processes push stamped steps one per call."""
    adapter.create("small", workloads.PROBE_CAPACITY)
    first = adapter.writer("small", 1, 0)  # one step from the learner first, as lazy storages need
    first.add(first.prepare(probe.stamped(1, 0, 0)))
    first.close()
    group = Writers(adapter, "small", 1, 2, "probe")
    sample = adapter.probe_sampler()
    torn = checked = 0
    try:
        group.results()
        time.sleep(0.1)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            rows = sample()
            torn += probe.torn_rows(rows)
            checked += len(rows["obs"])
    finally:
        group.close()
        adapter.close()
    return {"torn": torn, "checked": checked}
