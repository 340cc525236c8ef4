#!/usr/bin/env python3
"""What the Python module adds to a push and a sample, against plain NumPy doing the same copies in the same
process (the cost a hand-written NumPy replay buffer pays), measured in one run.

    .venv/bin/python tools/bench/python_bench.py            # a markdown table, ~20 s
    .venv/bin/python tools/bench/python_bench.py --quick    # a smoke run (~1 s)
    ... --json                                               # the same as JSON

Baselines, on the same shapes and bytes:
- push: the batch's arrays written into a [num_envs][capacity][...] NumPy ring at each env's head (fancy-index
  assignment per field, the head bookkeeping in NumPy), which is what a NumPy buffer's ``add`` does;
- sample: rows of `length` steps gathered from that ring at random (env, start) positions with ``np.take`` into
  preallocated arrays (no mask, no weights, no validation), which is the least a NumPy buffer's ``sample`` does.
Ours: ``Writer.push`` of the same arrays, and ``Sampler.sample(..., out=)`` (start weights power 1, mask,
validation against writers). Figures are medians of --trials trials; ratios within one run are what to compare.
"""

import argparse
import json
import os
import sys

import numpy as np

import shmreplay
from timing import timed

STEPS = {
    "small": "obs:f32[17] action:f32[6] reward:f32 done:bool",
    "atari": "obs:u8[84,84,4] action:i32 reward:f32 done:bool",
}


def batch_arrays(schema, rows, rng):
    out = {}
    for f in schema.fields:
        shape = (rows, *f.shape)
        if f.numpy_dtype == np.bool_:
            out[f.name] = rng.random(shape) < 0.5
        elif f.numpy_dtype.kind == "f":
            out[f.name] = rng.random(shape, dtype=np.float32).astype(f.numpy_dtype)
        else:
            out[f.name] = rng.integers(0, 100, size=shape).astype(f.numpy_dtype)
    return out


class NumpyRing:
    """The baseline: per field an array [num_envs, capacity, *shape] and per env a head, all in NumPy."""

    def __init__(self, schema, num_envs, capacity):
        self.capacity = capacity
        self.fields = {f.name: np.zeros((num_envs, capacity, *f.shape), f.numpy_dtype) for f in schema.fields}
        self.flat = {k: v.reshape(num_envs * capacity, *v.shape[2:]) for k, v in self.fields.items()}
        self.heads = np.zeros(num_envs, np.int64)

    def push(self, env_ids, data):
        slots = self.heads[env_ids] % self.capacity
        for name, array in self.fields.items():
            array[env_ids, slots] = data[name]
        self.heads[env_ids] += 1

    def sample(self, rng, rows, length, out):
        envs = rng.integers(0, len(self.heads), rows)
        starts = rng.integers(0, self.capacity - length + 1, rows)
        index = (envs * self.capacity + starts)[:, None] + np.arange(length)[None, :]
        for name, flat in self.flat.items():
            np.take(flat, index, axis=0, out=out[name])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes and trials: a smoke run")
    p.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    p.add_argument("--seconds", type=float, default=0.3, help="one trial")
    p.add_argument("--trials", type=int, default=5)
    o = p.parse_args()
    if o.quick:
        o.seconds, o.trials = 0.02, 1
    num_envs, push_rows = 16, 16
    capacity = {"small": 4096 if o.quick else 65536, "atari": 64 if o.quick else 1024}
    rows, length = (32, 8) if o.quick else (256, 16)
    rng = np.random.default_rng(0)
    results = []
    for kind, spec in STEPS.items():
        name = f"shmreplay-pybench-{os.getpid()}-{kind}"
        schema = shmreplay.Schema.parse(spec)
        buf = shmreplay.Buffer.create(name, num_envs, capacity[kind], schema, replace=True)
        try:
            writer = shmreplay.Writer(buf, list(range(num_envs)))
            ring = NumpyRing(schema, num_envs, capacity[kind])
            data = batch_arrays(schema, push_rows, rng)
            ids = np.arange(num_envs, dtype=np.int32)
            rng.shuffle(ids)
            step_bytes = schema.step_bytes
            for _ in range(capacity[kind]):  # fill both, so samples read real rings
                writer.push(ids, data)
                ring.push(ids, data)
            ours = timed(lambda: writer.push(ids, data), o.seconds, o.trials)
            base = timed(lambda: ring.push(ids, data), o.seconds, o.trials)
            results.append({"figure": f"{kind} push, {push_rows} envs per call", "unit": "us/call",
                            "ours": ours * 1e6, "numpy": base * 1e6, "bytes": push_rows * step_bytes,
                            "ours_gbs": push_rows * step_bytes / ours / 1e9})
            sampler = shmreplay.Sampler(buf, seed=1)
            out = sampler.new_batch(rows, length)
            plain = {f.name: np.empty((rows, length, *f.shape), f.numpy_dtype) for f in schema.fields}
            srng = np.random.default_rng(1)
            ours = timed(lambda: sampler.sample("replay", rows, length, 1.0, out=out), o.seconds, o.trials)
            base = timed(lambda: ring.sample(srng, rows, length, plain), o.seconds, o.trials)
            results.append({"figure": f"{kind} sample {rows} x {length}, out=", "unit": "us/call",
                            "ours": ours * 1e6, "numpy": base * 1e6, "bytes": rows * length * step_bytes,
                            "ours_gbs": rows * length * step_bytes / ours / 1e9})
            fresh = timed(lambda: sampler.sample("replay", rows, length, 1.0), o.seconds, o.trials)
            results.append({"figure": f"{kind} sample {rows} x {length}, new arrays", "unit": "us/call",
                            "ours": fresh * 1e6, "numpy": base * 1e6, "bytes": rows * length * step_bytes,
                            "ours_gbs": rows * length * step_bytes / fresh / 1e9})
            sampler.close()
            writer.close()
        finally:
            shmreplay.Buffer.remove(name)
    if o.json:
        print(json.dumps(results, indent=2))
        return 0
    print("| figure | ours (us/call) | NumPy ring (us/call) | NumPy/ours | ours (GB/s) |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['figure']} | {r['ours']:,.1f} | {r['numpy']:,.1f} | {r['numpy'] / r['ours']:.2f}x | "
              f"{r['ours_gbs']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
