"""cpprb's multi-process buffers, as its documentation runs them (Ape-X style: one learner that samples, several
explorer processes that add, the buffer made in the learner with a multiprocessing context and handed to the
explorers, which add without a lock of the whole buffer):

- `MPReplayBuffer`: uniform sampling of flat transitions (cpprb has no sequence sampling);
- `MPPrioritizedReplayBuffer`: prioritized sampling (alpha 0.6, beta 0.4) followed by `update_priorities` of the
  sampled rows, the learner's loop in its documentation.
"""
import importlib.metadata

import numpy as np

import cpprb
import workloads


def env_dict(step):
    return {name: {"shape": shape if shape else 1, "dtype": dt} for name, (dt, shape) in workloads.STEPS[step].items()}


class _Writer:
    def __init__(self, rb, rows):
        self.rb, self.rows = rb, rows

    def prepare(self, data):
        return workloads.one(data) if self.rows == 1 else data

    def add(self, data):
        self.rb.add(**workloads.next_data(data))

    def close(self):
        pass


class Adapter:
    name = "cpprb MPReplayBuffer"
    form = "MPReplayBuffer(ctx=fork) made by the learner, inherited by forked explorer processes that call add"
    multi_process = True
    mp_context = "fork"
    cls = cpprb.MPReplayBuffer
    kinds = ("flat",)
    no_kind = {"seq": "no sequence sampling", "prioritized": "see MPPrioritizedReplayBuffer"}

    def __init__(self):
        self.rb = None

    @staticmethod
    def version():
        return importlib.metadata.version("cpprb")

    def create(self, step, capacity):
        import multiprocessing
        self.rb = self.cls(capacity, env_dict(step), ctx=multiprocessing.get_context("fork"))

    def writer(self, step, rows, widx):
        return _Writer(self.rb, rows)

    def sampler_fn(self, kind):
        if kind == "flat" and "flat" in self.kinds:
            return lambda: self.rb.sample(workloads.FLAT_BATCH)
        return None

    def probe_sampler(self):
        return lambda: self.rb.sample(workloads.FLAT_BATCH)

    def close(self):
        self.rb = None


class PrioritizedAdapter(Adapter):
    name = "cpprb MPPrioritizedReplayBuffer"
    form = ("MPPrioritizedReplayBuffer(ctx=fork) made by the learner, inherited by forked explorer processes; "
            "the learner samples and updates priorities")
    cls = cpprb.MPPrioritizedReplayBuffer
    kinds = ("prioritized",)
    no_kind = {"seq": "no sequence sampling", "flat": "see MPReplayBuffer"}

    def sampler_fn(self, kind):
        if kind != "prioritized":
            return None
        rng = np.random.default_rng(0)

        def sample_and_update():
            b = self.rb.sample(workloads.FLAT_BATCH, beta=0.4)
            self.rb.update_priorities(b["indexes"], rng.random(workloads.FLAT_BATCH) + 0.01)
            return b
        return sample_and_update

    def probe_sampler(self):
        return lambda: self.rb.sample(workloads.FLAT_BATCH, beta=0.4)
