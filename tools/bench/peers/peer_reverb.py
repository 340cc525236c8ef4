"""Reverb (dm-reverb) as its documentation runs it: a `reverb.Server` with its tables in the learner process
(uniform sampler, FIFO remover, max_size = capacity items, MinSize(1) rate limiter), writer processes that
connect a `reverb.Client` to it and write through a `TrajectoryWriter` (`append` a step, then `create_item`),
and the learner sampling through its Python client (`Client.sample`, whole items, stacked into arrays).

Each written step becomes two items, the way one adder feeding two tables does: a one-step transition in table
`flat`, and, once 16 steps are in the writer's history, the 16-step sequence ending at it in table `seq` (period
1, like shmreplay's free start positions). "256 steps per call" appends 256 steps through the same writer in one
call; the writer flushes every 256 steps (without it, a 10^6-step fill left the writers blocked on unconfirmed
items and the run hung: Reverb warns that pending items must be flushed regularly). Writers are spawned (gRPC does not survive fork). Reverb needs TensorFlow 2.15 and NumPy 1.x, so it runs in
its own environment (.venv-reverb).
"""
import importlib.metadata

import numpy as np
import reverb

import workloads


class _Writer:
    def __init__(self, address, rows):
        self.client = reverb.Client(address)
        self.writer = self.client.trajectory_writer(num_keep_alive_refs=workloads.SEQ_LEN)
        self.rows, self.written = rows, 0

    def prepare(self, data):
        return [{k: v[i] for k, v in data.items()} for i in range(len(data["obs"]))]

    def add(self, steps):
        w = self.writer
        for step in steps:
            w.append(step)
            w.create_item("flat", 1.0, {k: w.history[k][-1] for k in step})
            self.written += 1
            if self.written >= workloads.SEQ_LEN:
                w.create_item("seq", 1.0, {k: w.history[k][-workloads.SEQ_LEN:] for k in step})
            if self.written % 256 == 0:  # its documentation: flush regularly, or pending items pile up
                w.flush()

    def close(self):
        self.writer.close()


class Adapter:
    name = "Reverb"
    form = ("reverb.Server in the learner; spawned writer processes with a reverb.Client TrajectoryWriter; "
            "the learner samples with Client.sample")
    multi_process = True
    mp_context = "spawn"
    no_kind = {"prioritized": "not measured (Reverb has prioritized tables; its adapter does not measure it yet)"}

    def __init__(self):
        self.server = self.client = self.address = None

    @staticmethod
    def version():
        return f"dm-reverb {importlib.metadata.version('dm-reverb')}, tensorflow {importlib.metadata.version('tensorflow')}"

    def create(self, step, capacity):
        self.close()
        tables = [reverb.Table(name, reverb.selectors.Uniform(), reverb.selectors.Fifo(), max_size=capacity,
                               rate_limiter=reverb.rate_limiters.MinSize(1)) for name in ("flat", "seq")]
        self.server = reverb.Server(tables=tables)
        self.address = f"localhost:{self.server.port}"
        self.client = reverb.Client(self.address)

    def __getstate__(self):  # what a spawned writer receives
        return {"address": self.address}

    def __setstate__(self, state):
        self.server = self.client = None
        self.address = state["address"]

    def writer(self, step, rows, widx):
        return _Writer(self.address, rows)

    def _sample(self, table, n):
        """n whole items, stacked per field (an item's data is the flattened step: fields in sorted order)."""
        items = list(self.client.sample(table, num_samples=n, emit_timesteps=False))
        names = sorted(workloads.STEPS["small"])
        return {k: np.stack([item.data[i] for item in items]) for i, k in enumerate(names)}

    def sampler_fn(self, kind):
        if kind == "flat":
            return lambda: self._sample("flat", workloads.FLAT_BATCH)
        if kind == "seq":
            return lambda: self._sample("seq", workloads.SEQ_BATCH)
        return None

    def probe_sampler(self):
        return lambda: self._sample("flat", workloads.FLAT_BATCH)

    def close(self):
        if self.server is not None:
            self.server.stop()
        self.server = self.client = None
