#!/usr/bin/env python3
"""cpprb's `stack_compress` beside shmreplay's stacked field, in one process (docs/benchmarks/pixels.md).

cpprb's ReplayBuffer can keep each frame of a stacked observation once (`stack_compress="obs"`, the stacked axis
last): its storage is a frame array with the observations as a sliding-window view over it, so an add writes the
whole stack into the window and overlapping frames are simply overwritten by the newest add. It exists for the
one-process ReplayBuffer only (not MPReplayBuffer), and it assumes that consecutive adds are consecutive steps of
one env. This script measures, on one env's Atari-like steps (episodes of 150 to 450 steps, each starting with
three zero frames of padding and its first frame, as envpool pads), with the same frames for every buffer:

- cpprb ReplayBuffer, obs stored as pushed (`obs` (84, 84, 4) u8);
- cpprb ReplayBuffer with stack_compress="obs";
- shmreplay with `obs:u8[4,84,84]:stack=0`, one env, its Writer and Sampler in this process;

each: resident memory when full (growth of this process's Rss per stored step), add rate at 1 and 256 steps per
call, sample rate of 256 transitions, and how many stored stacks differ from the stack pushed for that step
(read back whole after one pass of `--steps` steps: cpprb's get_all_transitions, shmreplay's read_steps).

    .venv-peers/bin/python tools/bench/peers/stack_compress.py [--steps 8192] [--seconds 0.3] [--trials 5] [--json F]
"""
import argparse
import gc
import json
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from timing import trial_times  # noqa: E402
from measure import rss_bytes  # noqa: E402

DEPTH = 4
ROWS = 256


def make_steps(n, seed=0):
    """n consecutive steps of one env: stacks (n, 4, 84, 84) and (n, 84, 84, 4), and the other fields. Step 0
    begins an episode, so that the sequence repeats as whole episodes."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, size=(n, 84, 84), dtype=np.uint8)
    chw = np.zeros((n, DEPTH, 84, 84), np.uint8)
    done = np.zeros(n, np.bool_)
    t = 0
    while t < n:
        length = min(int(rng.integers(150, 451)), n - t)
        for j in range(length):
            for k in range(DEPTH):
                src = j - DEPTH + 1 + k
                if src >= 0:
                    chw[t + j, k] = frames[t + src]
        done[t + length - 1] = True
        t += length
    hwc = np.ascontiguousarray(np.moveaxis(chw, 1, -1))
    other = {"action": rng.integers(0, 18, size=n).astype(np.int32),
             "reward": (rng.integers(0, 3, size=n) - 1).astype(np.float32), "done": done}
    return chw, hwc, other, int(done.sum())


class Cpprb:
    def __init__(self, n, compress):
        import cpprb
        self.rb = cpprb.ReplayBuffer(n, {"obs": {"shape": (84, 84, DEPTH), "dtype": np.uint8},
                                         "action": {"dtype": np.int32}, "reward": {"dtype": np.float32},
                                         "done": {"dtype": np.bool_}},
                                     stack_compress="obs" if compress else None)
        self.name = "cpprb ReplayBuffer" + (", stack_compress" if compress else "")

    def add(self, obs_hwc, obs_chw, other, lo, hi):
        if hi - lo == 1:
            self.rb.add(obs=obs_hwc[lo], **{k: v[lo] for k, v in other.items()})
        else:
            self.rb.add(obs=obs_hwc[lo:hi], **{k: v[lo:hi] for k, v in other.items()})

    def stored_obs_chw(self):
        return np.moveaxis(self.rb.get_all_transitions()["obs"].reshape(-1, 84, 84, DEPTH), -1, 1)

    def sampler(self):
        return lambda: self.rb.sample(ROWS)

    def close(self):
        self.rb = None


class Shmreplay:
    def __init__(self, n, compress):
        import shmreplay
        self.seg = f"shmreplay-stack-compress-{os.getpid()}"
        self.buf = shmreplay.Buffer.create(self.seg, 1, n, "obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool",
                                           replace=True)
        self.writer = shmreplay.Writer.range(self.buf, 0, 1)
        self.smp = shmreplay.Sampler(self.buf, seed=1)
        self.out = self.smp.new_batch(ROWS, 1)
        self.ids = np.zeros(ROWS, np.int32)  # push(ids) needs one id per row: only for 1-row pushes here
        self.name = "shmreplay, obs:u8[4,84,84]:stack=0"

    def add(self, obs_hwc, obs_chw, other, lo, hi):
        # One env: consecutive steps go in one push_one each (a push writes one step per env).
        for i in range(lo, hi):
            self.writer.push_one(0, {"obs": obs_chw[i], "action": other["action"][i], "reward": other["reward"][i],
                                     "done": other["done"][i]})

    def stored_obs_chw(self):
        first, steps = self.buf.read_steps(0, 0, self.buf.capacity)
        assert first == 0, first
        return steps["obs"]

    def sampler(self):
        return lambda: self.smp.sample_transitions("replay", ROWS, out=self.out)

    def close(self):
        import shmreplay
        self.smp.close()
        self.writer.close()
        self.buf = None
        shmreplay.Buffer.remove(self.seg)


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(cls, compress, n, chw, hwc, other, o):
    gc.collect()
    before = rss_bytes()
    b = cls(n, compress)
    for lo in range(0, n, ROWS):  # one pass, 256 steps per call
        b.add(hwc, chw, other, lo, min(n, lo + ROWS))
    rss = rss_bytes() - before
    stored = b.stored_obs_chw()
    wrong = int((stored.reshape(len(stored), -1) != chw[:len(stored)].reshape(len(stored), -1)).any(axis=1).sum())
    fig = {"name": b.name, "rss_bytes_per_step": rss / n, "wrong_stacks": wrong, "checked": len(stored)}
    at = [0]

    def add(rows):
        lo = at[0]
        hi = lo + rows
        b.add(hwc, chw, other, lo, hi)
        at[0] = 0 if hi + rows > n else hi

    for rows in (1, ROWS):
        at[0] = 0
        fig[f"add {rows}/call"] = summary([rows / t for t in trial_times(lambda: add(rows), o.seconds, o.trials)])
    fig["sample 256"] = summary([ROWS / t for t in trial_times(b.sampler(), o.seconds, o.trials)])
    b.close()
    return fig


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=8192, help="capacity and steps of the pass (default 8192)")
    p.add_argument("--seconds", type=float, default=0.3)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--json", metavar="FILE")
    o = p.parse_args()
    n = o.steps // ROWS * ROWS
    chw, hwc, other, episodes = make_steps(n)
    figs = [measure(Cpprb, False, n, chw, hwc, other, o), measure(Cpprb, True, n, chw, hwc, other, o),
            measure(Shmreplay, True, n, chw, hwc, other, o)]
    import cpprb  # noqa: F401
    import importlib.metadata
    print(f"One env's {n} Atari-like steps in {episodes} episodes (150 to 450 steps, zero padding), obs 4 stacked "
          f"84x84 u8 frames; cpprb {importlib.metadata.version('cpprb')}; {o.trials} trials of {o.seconds} s; "
          "rates: median (min-max).\n")
    print("| buffer | resident bytes per step | add 1/call steps/s | add 256/call steps/s | sample 256 rows/s | "
          "stacks that differ from the pushed one |\n|---|---:|---:|---:|---:|---:|")

    def rate(f):
        return f"{f['median'] / 1e3:.1f}k ({f['min'] / 1e3:.1f}k-{f['max'] / 1e3:.1f}k)"
    for f in figs:
        print(f"| {f['name']} | {f['rss_bytes_per_step']:.0f} | {rate(f['add 1/call'])} | {rate(f['add 256/call'])} | "
              f"{rate(f['sample 256'])} | {f['wrong_stacks']} of {f['checked']} |")
    if o.json:
        with open(o.json, "w") as fh:
            json.dump({"steps": n, "episodes": episodes, "figures": figs}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
