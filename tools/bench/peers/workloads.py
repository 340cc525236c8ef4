"""The work every peer is given: the step kinds, the sizes, and the arrays pushed.

A step is a dict of NumPy arrays with the same four fields for every implementation (`obs`, `action`, `reward`,
`done`); a batch of `rows` steps has a leading axis of `rows`. Data for the speed figures is made once and
pushed over and over; data for the correctness probe is made per call (probe.py).

The third step kind, `atari-stacked` (run only when asked for: `run.py --steps atari-stacked`), is the Atari step
with `obs` as envpool gives it, `u8[4,84,84]`, the last 4 frames stacked on axis 0, newest last: shmreplay stores
it stacked (`obs:u8[4,84,84]:stack=0`, one frame per step), the peers as pushed. Its data is a Cycle of batches
whose stacks continue from one batch to the next, as an env's do (stacked_cycle), pushed in turn.
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
STEPS["atari-stacked"] = {"obs": (np.uint8, (4, 84, 84)), "action": (np.int32, ()), "reward": (np.float32, ()),
                          "done": (np.bool_, ())}
SCHEMA_TEXT = {
    "small": "obs:f32[17] action:f32[6] reward:f32 done:bool",
    "atari": "obs:u8[84,84,4] action:i32 reward:f32 done:bool",
    "atari-stacked": "obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool",
}
STACK_DEPTH = 4       # frames per stack (atari-stacked)
STACK_CYCLE = 16      # batches in an atari-stacked Cycle
STACK_RESET_EVERY = 16  # envs e with e % this == 0 begin an episode at the first batch of every cycle

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
        atari = max(1024, int(10**5 * atari_scale * capacity_scale))
        return Config(capacity={"small": max(8192, int(10**6 * capacity_scale)), "atari": atari,
                                "atari-stacked": atari}, **kw)

    @staticmethod
    def quick(**kw):
        kw.setdefault("seconds", 0.02)
        kw.setdefault("trials", 3)
        kw.setdefault("probe_seconds", 0.3)
        return Config(capacity={"small": 8192, "atari": 1024, "atari-stacked": 1024}, **kw)


def step_bytes(step):
    return sum(np.dtype(dt).itemsize * int(np.prod(shape)) for dt, shape in STEPS[step].values())


class Cycle:
    """Batches pushed in turn, one per add call (an adapter's writer calls next_data)."""

    def __init__(self, items):
        self.items, self.at = items, 0

    def next(self):
        item = self.items[self.at]
        self.at = (self.at + 1) % len(self.items)
        return item


def next_data(data):
    """What an add call pushes: `data` itself, or a Cycle's next batch."""
    return data.next() if isinstance(data, Cycle) else data


def stacked_frames(rows, seed=0, cycle=STACK_CYCLE):
    """Env e's frames, (rows, cycle, 84, 84) u8 of random bytes: frame t of the cycle is its newest at step t."""
    return np.random.default_rng(seed).integers(0, 256, size=(rows, cycle, 84, 84), dtype=np.uint8)


def stacked_cycle(rows, seed=0, cycle=STACK_CYCLE):
    """Atari-like steps of `rows` envs whose stacks continue: a Cycle of `cycle` batches; in batch t, env e's obs is
    its frames t-3..t (indices modulo the cycle, so that batch 0 continues batch cycle-1), except that envs with
    e % STACK_RESET_EVERY == 0 begin an episode at batch 0 (three zero frames of padding, then frame 0: envpool's
    convention) and end it at batch cycle-1 (done). The other fields are random."""
    frames = stacked_frames(rows, seed, cycle)
    rng = np.random.default_rng(seed + 1)
    items = []
    for t in range(cycle):
        idx = [(t - STACK_DEPTH + 1 + k) % cycle for k in range(STACK_DEPTH)]
        obs = np.ascontiguousarray(frames[:, idx])
        reset = np.arange(rows) % STACK_RESET_EVERY == 0
        for k in range(STACK_DEPTH):  # the resetting envs' frames from before their episode: padding
            if t - STACK_DEPTH + 1 + k < 0:
                obs[reset, k] = 0
        items.append({"obs": obs, "action": rng.integers(0, 18, size=rows).astype(np.int32),
                      "reward": (rng.integers(0, 3, size=rows) - 1).astype(np.float32),
                      "done": reset & (t == cycle - 1)})
    return Cycle(items)


def batch(step, rows, seed=0):
    """A batch of `rows` random steps, shaped (rows, *field shape) per field (atari-stacked: a Cycle of them)."""
    if step == "atari-stacked":
        return stacked_cycle(rows, seed)
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
    """The first step of a batch, without its leading axis (what a 1-step add passes); for a Cycle, a Cycle of
    every row of every batch in turn (batch by batch, env by env: the order of a 1-step writer's round robin over
    its envs, so that each env's stacks still continue)."""
    if isinstance(step_batch, Cycle):
        return Cycle([{k: v[e] for k, v in b.items()} for b in step_batch.items for e in range(len(b["obs"]))])
    return {k: v[0] for k, v in step_batch.items()}
