"""The work every peer is given: the two step kinds, the sizes, and the arrays pushed.

A step is a dict of NumPy arrays with the same four fields for every implementation (`obs`, `action`, `reward`,
`done`); a batch of `rows` steps has a leading axis of `rows`. Data for the speed figures is made once and
pushed over and over; data for the correctness probe is made per call (probe.py).
"""
from dataclasses import dataclass

import numpy as np

# name -> (field -> (dtype, shape)); the same schemas as tools/bench/python_bench.py and shmreplay_bench.
STEPS = {
    "small": {"obs": (np.float32, (17,)), "action": (np.float32, (6,)), "reward": (np.float32, ()),
              "done": (np.bool_, ())},
    "atari": {"obs": (np.uint8, (84, 84, 4)), "action": (np.int32, ()), "reward": (np.float32, ()),
              "done": (np.bool_, ())},
}
SCHEMA_TEXT = {
    "small": "obs:f32[17] action:f32[6] reward:f32 done:bool",
    "atari": "obs:u8[84,84,4] action:i32 reward:f32 done:bool",
}

ADD_ROWS = (1, 256)          # steps per add call
WRITERS = (1, 2)             # writer processes
FLAT_BATCH = 256             # flat transitions per sample call
SEQ_BATCH, SEQ_LEN = 32, 16  # sequences per sample call, steps per sequence
PROBE_CAPACITY = 256         # the capacity at which cpprb's MPReplayBuffer was seen tearing rows


@dataclass(frozen=True)
class Config:
    """Sizes and timing of one run (the defaults are the full run; `quick()` the smoke run)."""
    capacity: dict            # step kind -> total steps stored (10^6 small, 10^5 Atari x --atari-scale)
    seconds: float = 0.3      # one trial
    trials: int = 5           # trials per figure (the median and the min-max spread are reported)
    probe_seconds: float = 3.0
    steps: tuple = ("small", "atari")

    @staticmethod
    def full(atari_scale=1.0, capacity_scale=1.0, **kw):
        return Config(capacity={"small": max(8192, int(10**6 * capacity_scale)),
                                "atari": max(1024, int(10**5 * atari_scale * capacity_scale))}, **kw)

    @staticmethod
    def quick(**kw):
        kw.setdefault("seconds", 0.02)
        kw.setdefault("trials", 3)
        kw.setdefault("probe_seconds", 0.3)
        return Config(capacity={"small": 8192, "atari": 1024}, **kw)


def step_bytes(step):
    return sum(np.dtype(dt).itemsize * int(np.prod(shape)) for dt, shape in STEPS[step].values())


def batch(step, rows, seed=0):
    """A batch of `rows` random steps, shaped (rows, *field shape) per field."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (dt, shape) in STEPS[step].items():
        full = (rows, *shape)
        if dt == np.bool_:
            out[name] = rng.random(full) < 0.5
        elif np.dtype(dt).kind == "f":
            out[name] = rng.random(full, dtype=np.float32).astype(dt)
        else:
            out[name] = rng.integers(0, 100, size=full).astype(dt)
    return out


def one(step_batch):
    """The first step of a batch, without its leading axis (what a 1-step add passes)."""
    return {k: v[0] for k, v in step_batch.items()}
