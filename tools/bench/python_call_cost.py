#!/usr/bin/env python3
"""What one call costs from Python, on the small (MuJoCo-like, 97-byte) step: Writer.push of 16 envs, push_one,
Sampler.sample_transitions and sample with out=, against the cheapest bound call (Sampler.size), and the same push
made from C++ in this process (the module's _push_repeated: one conversion, then the C++ push in a loop), in one
run. Each figure is a timeit loop of the call as a user writes it (about 10 ns of loop per call).

    .venv/bin/python tools/bench/python_call_cost.py                 # a markdown table, ~15 s
    .venv/bin/python tools/bench/python_call_cost.py --capacity 65536 # 16 envs x 65536 steps (10^6, out of cache)
    ... --quick                                                      # a smoke run

The last line is the push's ratio, Python over C++ per step, the median of interleaved trials. The C++ side of
the sampling calls on the same geometry is tools/bench/sample_cost.cpp (shmreplay_bench_sample_cost --size N:
transitions rows/s). Medians of --trials trials; compare within one run.
"""

import argparse
import os
import sys

import numpy as np

import shmreplay
from timing import interleaved_ratio, timed_statement

SMALL = "obs:f32[17] action:f32[6] reward:f32 done:bool"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny trials: a smoke run")
    p.add_argument("--capacity", type=int, default=1024, help="steps per env (16 envs); default 1024 (in cache)")
    p.add_argument("--seconds", type=float, default=0.3, help="one trial")
    p.add_argument("--trials", type=int, default=5)
    o = p.parse_args()
    if o.quick:
        o.seconds, o.trials = 0.02, 1
    num_envs = 16
    name = f"shmreplay-callcost-{os.getpid()}"
    schema = shmreplay.Schema.parse(SMALL)
    buf = shmreplay.Buffer.create(name, num_envs, o.capacity, schema, replace=True)
    rows = []
    try:
        writer = shmreplay.Writer(buf, list(range(num_envs)))
        rng = np.random.default_rng(0)
        data = {f.name: rng.random((num_envs, *f.shape)).astype(f.numpy_dtype) for f in schema.fields}
        one = {k: v[0] for k, v in data.items()}
        ids = np.arange(num_envs, dtype=np.int32)
        for _ in range(o.capacity):
            writer.push(ids, data)
        sampler = shmreplay.Sampler(buf, seed=1)
        flat = sampler.new_batch(256, 1)
        seq = sampler.new_batch(32, 16)

        names = dict(push_repeated=shmreplay._shmreplay._push_repeated, writer=writer, sampler=sampler, ids=ids, data=data, one=one, flat=flat, seq=seq)

        def add(label, statement, units, unit):
            t = timed_statement(statement, names, o.seconds, o.trials)
            rows.append((label, t * 1e6, t * 1e9 / units, unit))

        add("Sampler.size('replay') (the cheapest bound call)", "sampler.size('replay')", 1, "call")
        add("Writer.push, 16 envs", "writer.push(ids, data)", num_envs, "step")
        add("the same push from C++ (_push_repeated, 1000 per call)", "push_repeated(writer, ids, data, 1000)",
            num_envs * 1000, "step")
        add("Writer.push_one", "writer.push_one(3, one)", 1, "step")
        add("Sampler.sample_transitions('replay', 256, out=)", "sampler.sample_transitions('replay', 256, out=flat)",
            256, "row")
        add("Sampler.sample('replay', 256, 1, out=)", "sampler.sample('replay', 256, 1, out=flat)", 256, "row")
        add("Sampler.sample('replay', 32, 16, 1.0, out=)", "sampler.sample('replay', 32, 16, 1.0, out=seq)", 32, "row")
        push_ratio = interleaved_ratio("writer.push(ids, data)", num_envs, "push_repeated(writer, ids, data, 1000)",
                                       num_envs * 1000, names, o.seconds, o.trials)
        sampler.close()
        writer.close()
    finally:
        shmreplay.Buffer.remove(name)
    print(f"16 envs x {o.capacity} steps of `{SMALL}`\n")
    print("| call | us/call | ns per unit |\n|---|---:|---:|")
    for label, us, ns, unit in rows:
        print(f"| {label} | {us:.2f} | {ns:.0f} per {unit} |")
    print(f"\nWriter.push of 16 envs from Python / the same push from C++, per step (median of {o.trials} interleaved "
          f"trials): {push_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
