"""flashbax (JAX, one process), as its documentation uses it: `make_flat_buffer` for flat transitions and
`make_trajectory_buffer` for sequences, `init` with one step as the prototype, and jitted `add` (state donated)
and `sample`.

- Flat buffer: `max_length` = capacity, `sample_batch_size` 256; `add_batch_size` 256 for 256 steps per call
  (256 envs' steps at once, like shmreplay's 256-env push), a second buffer with `add_batch_size=None` for one
  step per call. Its sample returns (first, second) pairs of consecutive steps.
- Trajectory buffer: `add_batch_size` 256 (1 for one step per call), time axis capacity / 256, 32 sequences of
  16 steps, period 1; adds are [envs, 1 time step, ...].
"""
import importlib.metadata

import flashbax as fbx
import jax

import jax_common
import workloads


class _Writer:
    def __init__(self, owner, rows):
        self.owner, self.rows = owner, rows
        self.add_fn = jax.jit(owner.buffer_for(rows)[0].add, donate_argnums=0)

    def prepare(self, data):
        return jax_common.device(self.owner.shape_for_add(data, self.rows))

    def add(self, data):
        state = self.owner.buffer_for(self.rows)[1]  # the owner's: every writer object adds to the same state
        self.owner.keep(self.rows, jax.block_until_ready(self.add_fn(state, data)))

    def close(self):
        pass


class FlatAdapter:
    name = "flashbax flat buffer"
    form = "one process (functional state in JAX arrays)"
    multi_process = False
    mp_context = "fork"
    no_kind = {"seq": "see flashbax trajectory buffer", "prioritized": "not measured (flashbax has a prioritised "
               "buffer; its adapter does not measure it yet)"}
    trajectory = False

    def __init__(self):
        self.step = self.capacity = None
        self.states = {}

    @staticmethod
    def version():
        return f"flashbax {importlib.metadata.version('flashbax')}, jax {jax.__version__}"

    def make(self, rows):
        cap = self.capacity
        if self.trajectory:
            envs = 256 if rows > 1 else 1
            return fbx.make_trajectory_buffer(add_batch_size=envs, sample_batch_size=workloads.SEQ_BATCH,
                                              sample_sequence_length=workloads.SEQ_LEN, period=1,
                                              min_length_time_axis=workloads.SEQ_LEN,
                                              max_size=max(cap, envs * (workloads.SEQ_LEN + 1)))
        return fbx.make_flat_buffer(max_length=cap, min_length=2, sample_batch_size=workloads.FLAT_BATCH,
                                    add_batch_size=256 if rows > 1 else None)

    def shape_for_add(self, data, rows):
        if self.trajectory:  # [envs, time 1, ...]
            return {k: v[:, None] for k, v in data.items()}
        return workloads.one(data) if rows == 1 else data

    def buffer_for(self, rows):
        key = 256 if rows > 1 else 1
        if key not in self.states:
            buffer = self.make(rows)
            self.states[key] = (buffer, buffer.init(jax_common.device(workloads.one(workloads.batch(self.step, 1)))))
        return self.states[key]

    def keep(self, rows, state):
        key = 256 if rows > 1 else 1
        self.states[key] = (self.states[key][0], state)

    def create(self, step, capacity):
        self.step, self.capacity, self.states = step, capacity, {}
        self.buffer_for(256)

    def writer(self, step, rows, widx):
        return _Writer(self, rows)

    def sampler_fn(self, kind):
        if kind != ("seq" if self.trajectory else "flat"):
            return None
        buffer = self.states[256][0]
        sample = jax.jit(buffer.sample)
        return jax_common.Cycle(sample, lambda: self.states[256][1])

    def close(self):
        self.states = {}


class TrajectoryAdapter(FlatAdapter):
    name = "flashbax trajectory buffer"
    no_kind = {"flat": "see flashbax flat buffer", "prioritized": FlatAdapter.no_kind["prioritized"]}
    trajectory = True
