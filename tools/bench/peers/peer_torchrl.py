"""TorchRL's replay buffer shared by several processes, as its documentation shows it ("sharing replay buffers
across processes"): a `TensorDictReplayBuffer` on a `LazyMemmapStorage` (memory-mapped files, default scratch
directory), initialised by one `extend` in the learner, then passed to writer processes that `extend` (256 steps
per call) or `add` (one step) it. Writers are started with the spawn method: forked children deadlock in torch's
thread pool on their first write (measured here), and a spawned child receives the buffer by pickling, which
re-maps the same files.

Flat transitions: `sample()` of 256 rows (RandomSampler). Sequences: a second `TensorDictReplayBuffer` on the
same storage with a `SliceSampler(num_slices=32, traj_key="episode")` and batch size 512 (32 slices of 16);
every step carries an int64 `episode` id (the writer's call number, so each 256-step extend is one trajectory),
which the SliceSampler needs and shmreplay's per-env rings do not.
"""
import importlib.metadata

import torch
from tensordict import TensorDict
from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import SliceSampler

import workloads


def to_td(data):
    rows = len(data["obs"])
    return TensorDict({**{k: torch.from_numpy(v) for k, v in data.items()},
                       "episode": torch.zeros(rows, dtype=torch.int64)}, [rows])


class _Writer:
    def __init__(self, rb, rows, widx):
        self.rb, self.rows, self.episode = rb, rows, (widx + 1) << 40

    def prepare(self, data):
        td = to_td(data)
        return td[0] if self.rows == 1 else td

    def add(self, td):
        if self.rows == 1:
            self.rb.add(td)
        else:
            self.episode += 1
            td["episode"].fill_(self.episode)
            self.rb.extend(td)

    def close(self):
        pass


class Adapter:
    name = "TorchRL TensorDictReplayBuffer"
    form = ("TensorDictReplayBuffer(LazyMemmapStorage) extended once by the learner, then pickled to spawned "
            "writer processes that extend/add it")
    multi_process = True
    mp_context = "spawn"
    no_kind = {"prioritized": "not measured (PrioritizedSampler exists; its adapter does not measure it yet)"}

    def __init__(self):
        self.storage = self.rb = self.seq = None

    @staticmethod
    def version():
        return f"torchrl {importlib.metadata.version('torchrl')}, tensordict {importlib.metadata.version('tensordict')}, torch {torch.__version__}"

    def create(self, step, capacity):
        self.storage = LazyMemmapStorage(capacity)
        self.rb = TensorDictReplayBuffer(storage=self.storage, batch_size=workloads.FLAT_BATCH)
        self.seq = TensorDictReplayBuffer(storage=self.storage, batch_size=workloads.SEQ_BATCH * workloads.SEQ_LEN,
                                          sampler=SliceSampler(num_slices=workloads.SEQ_BATCH, traj_key="episode"))

    def __getstate__(self):  # what a spawned writer receives: the buffer (its storage re-maps the same files)
        return {"rb": self.rb}

    def __setstate__(self, state):
        self.storage, self.rb, self.seq = None, state["rb"], None

    def writer(self, step, rows, widx):
        return _Writer(self.rb, rows, widx)

    def sampler_fn(self, kind):
        if kind == "flat":
            return lambda: self.rb.sample()
        if kind == "seq":
            return lambda: self.seq.sample()
        return None

    def probe_sampler(self):
        def sample():
            td = self.rb.sample()
            return {k: td[k].numpy() for k in ("obs", "action", "reward", "done")}
        return sample

    def close(self):
        self.storage = self.rb = self.seq = None
