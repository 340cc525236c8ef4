"""A sample without out= against one with it, through Python (docs/benchmarks/python.md, "Sampling without out="):
what a call that makes (or reuses) its Batch costs beside one that fills a batch made beforehand, and the page
faults per call (getrusage), for Atari-like rows stored as pushed and stacked.

    PYTHONPATH=build/python .venv/bin/python tools/bench/sample_reuse_bench.py [--rounds 5] [--calls 20]

Per schema: 4 envs x 2048 steps (--steps) of continuing stacks of random 84x84 frames (each step one new frame, as
an Atari env gives them), 256-row uniform draws of 1 and 8 steps; 3 warm-up calls of each kind, then `rounds` rounds
of `calls` calls of each kind, in turn: without out= with the previous batch still bound (`b = sampler.sample(...)`
in a loop: two batches alternate), without out= with each batch dropped at once (one batch filled again), with out=,
and with out= of two batches in turn (what the first kind does, without the reuse: the cost of touching twice the
memory). Printed: the median of the rounds' medians [their range] in µs, the ratios to out=, and the median page
faults per call without out= (the larger of the two kinds)."""
import argparse
import os
import resource
import statistics as st
import time

import numpy as np

import shmreplay

SCHEMAS = {
    "atari": "obs:u8[4,84,84] action:i32 reward:f32 done:bool",
    "atari-stacked": "obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool",
}
ENVS, ROWS = 4, 256


def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def fill(buf, steps):
    rng = np.random.default_rng(0)
    stack = rng.integers(0, 256, (ENVS, 4, 84, 84), dtype=np.uint8)
    rest = {"action": np.zeros(ENVS, np.int32), "reward": np.zeros(ENVS, np.float32), "done": np.zeros(ENVS, bool)}
    with shmreplay.Writer(buf, list(range(ENVS))) as w:
        for _ in range(steps):
            stack = np.concatenate([stack[:, 1:], rng.integers(0, 256, (ENVS, 1, 84, 84), dtype=np.uint8)], axis=1)
            w.push(np.arange(ENVS), {"obs": stack, **rest})


def measure(s, length, rounds, calls):
    out = s.new_batch(ROWS, length)
    pair = [s.new_batch(ROWS, length), s.new_batch(ROWS, length)]
    calls_of = {"new": lambda: s.sample("replay", ROWS, length, 0.0),
                "dropped": lambda: s.sample("replay", ROWS, length, 0.0),
                "out": lambda: s.sample("replay", ROWS, length, 0.0, out=out),
                "out2": lambda: s.sample("replay", ROWS, length, 0.0, out=pair.append(pair.pop(0)) or pair[0])}
    medians = {k: [] for k in calls_of}
    per_call = {k: [] for k in calls_of}
    for k, call in calls_of.items():
        for _ in range(3):
            b = call()
    for _ in range(rounds):
        for k, call in calls_of.items():
            times = []
            before = faults()
            b = None
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                if k == "new":  # bound as a learner's loop binds it: the previous batch is held during the call
                    b = call()
                else:  # dropped at once: the next call fills the same batch again
                    call()
                times.append(time.perf_counter_ns() - t0)
            del b
            medians[k].append(st.median(times) / 1e3)
            per_call[k].append((faults() - before) / calls)
    return medians, per_call, sum(a.nbytes for a in out.fields.values())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--schemas", default=",".join(SCHEMAS), help="of: " + ", ".join(SCHEMAS))
    p.add_argument("--lengths", default="1,8")
    p.add_argument("--steps", type=int, default=2048, help="steps per env (the capacity)")
    o = p.parse_args()
    print(f"{'schema':14s} {'batch':>8s} {'MiB':>5s} {'without out= µs':>22s} {'ratio':>6s} {'(dropped) µs':>22s} "
          f"{'ratio':>6s} {'with out= µs':>22s} {'out= of 2 µs':>22s} {'ratio':>6s} {'faults/call':>11s}")
    for tag in o.schemas.split(","):
        name = f"reuse-bench-{tag}-{os.getpid()}"
        buf = shmreplay.Buffer.create(name, ENVS, o.steps, SCHEMAS[tag])
        try:
            fill(buf, o.steps)
            with shmreplay.Sampler(buf, seed=0) as s:
                for length in (int(x) for x in o.lengths.split(",")):
                    medians, per_call, nbytes = measure(s, length, o.rounds, o.calls)
                    m = {k: st.median(v) for k, v in medians.items()}
                    span = {k: f"{m[k]:,.0f} [{min(v):,.0f}-{max(v):,.0f}]" for k, v in medians.items()}
                    fault = max(st.median(per_call["new"]), st.median(per_call["dropped"]))
                    print(f"{tag:14s} {ROWS:>4d} x {length:<2d} {nbytes / 2**20:5.1f} {span['new']:>22s} "
                          f"{m['new'] / m['out']:5.2f}x {span['dropped']:>22s} {m['dropped'] / m['out']:5.2f}x "
                          f"{span['out']:>22s} {span['out2']:>22s} {m['out2'] / m['out']:5.2f}x {fault:11.0f}")
        finally:
            del buf
            shmreplay.Buffer.remove(name)


if __name__ == "__main__":
    main()
