"""shmreplay through its Python module, as a user calls it: `Buffer.create` in the learner, a `Writer` per
writer process on its own env ids (`push` of 256 envs' steps per call, `push_one` for one step), and the
learner's `Sampler.sample_transitions` / `Sampler.sample` into a preallocated batch (`out=`). PrioritizedAdapter:
the same on a buffer created with priorities (alpha 0.6; pushed steps enter at the running maximum), whose learner
samples by priority (beta 0.4) and updates the priorities of the rows it sampled, as cpprb's
MPPrioritizedReplayBuffer adapter does.

The buffer has 512 envs (256 per writer process, what a writer's vectorised env returns per step) of
capacity / 512 steps each; the probe's has 2 envs (one per writer) of 128 steps.
"""
import os

import numpy as np

import shmreplay
import workloads

NAME = "shmreplay"
ENVS_PER_WRITER = 256


class _Writer:
    def __init__(self, name, rows, widx):
        buf = shmreplay.Buffer.open(name)
        self.envs = buf.num_envs // 2  # each of the two writers leases half of the envs
        self.writer = shmreplay.Writer.range(buf, widx * self.envs, self.envs)
        self.rows, self.ids = rows, np.arange(widx * self.envs, widx * self.envs + rows, dtype=np.int32)
        self.next = 0

    def prepare(self, data):
        return workloads.one(data) if self.rows == 1 else data

    def add(self, data):
        data = workloads.next_data(data)
        if self.rows == 1:  # one step per call: round robin over the writer's envs
            self.writer.push_one(int(self.ids[0]) + self.next, data)
            self.next = (self.next + 1) % self.envs
        else:
            self.writer.push(self.ids, data)

    def close(self):
        self.writer.close()


class Adapter:
    name = NAME
    form = "one shared-memory segment; each writer process opens it by name and leases its env ids"
    multi_process = True
    mp_context = "fork"
    no_kind = {"prioritized": "see shmreplay (priorities)"}
    priority_exponent = None

    def __init__(self):
        self.buf = self.sampler = None
        self.seg = f"shmreplay-peers-{os.getpid()}"

    @staticmethod
    def version():
        return shmreplay.__version__

    def create(self, step, capacity):
        num_envs = 2 * ENVS_PER_WRITER
        per_env = max(workloads.SEQ_LEN, -(-capacity // num_envs))
        if capacity <= workloads.PROBE_CAPACITY:  # the probe: 2 envs of 128 steps, one per writer
            num_envs, per_env = 2, capacity // 2
        self.buf = shmreplay.Buffer.create(self.seg, num_envs, per_env, workloads.SCHEMA_TEXT[step], replace=True,
                                           priority_exponent=self.priority_exponent)
        self.sampler = shmreplay.Sampler(self.buf, seed=1)

    def writer(self, step, rows, widx):
        return _Writer(self.seg, rows, widx)

    def sampler_fn(self, kind):
        if kind == "flat":
            out = self.sampler.new_batch(workloads.FLAT_BATCH, 1)
            return lambda: self.sampler.sample_transitions("replay", workloads.FLAT_BATCH, out=out)
        if kind == "seq":
            out = self.sampler.new_batch(workloads.SEQ_BATCH, workloads.SEQ_LEN)
            return lambda: self.sampler.sample("replay", workloads.SEQ_BATCH, workloads.SEQ_LEN, 1.0, out=out)
        return None

    def probe_sampler(self):
        out = self.sampler.new_batch(workloads.FLAT_BATCH, 1)

        def sample():
            b = self.sampler.sample_transitions("replay", workloads.FLAT_BATCH, out=out)
            return {k: b[k][:, 0] for k in ("obs", "action", "reward", "done")}
        return sample

    def close(self):
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
        if self.buf is not None:
            self.buf = None
            shmreplay.Buffer.remove(self.seg)


class PrioritizedAdapter(Adapter):
    name = "shmreplay (priorities)"
    form = Adapter.form + "; created with priorities, the learner samples by priority and updates priorities"
    no_kind = {"flat": "see shmreplay", "seq": "see shmreplay"}
    priority_exponent = 0.6

    def sampler_fn(self, kind):
        if kind != "prioritized":
            return None
        out = self.sampler.new_batch(workloads.FLAT_BATCH, 1)
        rng = np.random.default_rng(0)

        def sample_and_update():
            b = self.sampler.sample_transitions("replay", workloads.FLAT_BATCH, prioritized=True, beta=0.4, out=out)
            self.sampler.update_priorities(b.env_ids, b.starts, rng.random(workloads.FLAT_BATCH) + 0.01)
            return b
        return sample_and_update
