#!/usr/bin/env python3
"""What it costs to hand a sampled batch to PyTorch and to JAX: a 256 x 16 Atari-like batch (obs u8[84,84,4],
action i32, reward f32, done bool: 116 MB) turned into tensors / jax arrays, without a copy (shmreplay.torch,
shmreplay.jax) and with one, against a plain copy of the same bytes (np.copyto into arrays made beforehand, the
least a copy costs) measured in the same run. A GPU hand-over (one copy to the device) is measured when torch or
JAX sees one.

    .venv/bin/python tools/bench/handover_bench.py            # a markdown table
    .venv/bin/python tools/bench/handover_bench.py --quick    # a smoke run (small batch, short trials)
    ... --json                                                 # the same as JSON
"""
import argparse
import json
import time

import numpy as np

import shmreplay
from timing import timed

SCHEMA = "obs:u8[84,84,4] action:i32 reward:f32 done:bool"


def torch_figures(batch, seconds, trials):
    """The PyTorch hand-overs of `batch`: (what, copies, seconds) each, or one row saying PyTorch is missing."""
    figures = []
    try:
        import torch

        import shmreplay.torch as st
        torch.set_num_threads(1)
        figures.append(("PyTorch: shmreplay.torch.as_tensors (shared)", "no copy",
                        timed(lambda: st.as_tensors(batch), seconds, trials)))
        figures.append(("PyTorch: torch.from_numpy(array).clone() of each array", "one copy, into new memory",
                        timed(lambda: {k: torch.from_numpy(v).clone() for k, v in batch.fields.items()},
                              seconds, trials)))
        if torch.cuda.is_available():
            def to_cuda():
                st.as_tensors(batch, device="cuda")
                torch.cuda.synchronize()
            figures.append(("PyTorch: as_tensors(device='cuda')", "one copy to the GPU",
                            timed(to_cuda, seconds, trials)))
    except ImportError as e:
        figures.append((f"PyTorch: not installed ({e})", "-", float("nan")))
    return figures


def jax_figures(batch, seconds, trials):
    """The JAX hand-overs of `batch`, as torch_figures."""
    figures = []
    try:
        import jax

        import shmreplay.jax as sj
        figures.append(("JAX: shmreplay.jax.as_arrays (DLPack, shared)", "no copy",
                        timed(lambda: jax.block_until_ready(sj.as_arrays(batch)), seconds, trials)))
        figures.append(("JAX: as_arrays(copy=True)", "one copy, into new memory",
                        timed(lambda: jax.block_until_ready(sj.as_arrays(batch, copy=True)), seconds, trials)))
        gpus = [d for d in jax.devices() if d.platform != "cpu"] if jax.default_backend() != "cpu" else []
        if gpus:
            figures.append(("JAX: as_arrays(device=GPU)", "one copy to the GPU",
                            timed(lambda: jax.block_until_ready(sj.as_arrays(batch, device=gpus[0])), seconds,
                                  trials)))
    except ImportError as e:
        figures.append((f"JAX: not installed ({e})", "-", float("nan")))
    return figures


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: a 16 x 4 batch, short trials")
    p.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--seconds", type=float, default=0.5, help="length of one trial")
    a = p.parse_args()
    rows, length = (16, 4) if a.quick else (256, 16)
    seconds, trials = (0.02, 1) if a.quick else (a.seconds, a.trials)

    name = f"shmreplay-handover-{time.monotonic_ns()}"
    buf = shmreplay.Buffer.create(name, 4, 64, SCHEMA)
    try:
        rng = np.random.default_rng(0)
        with shmreplay.Writer(buf, range(4)) as w:
            for _ in range(64):
                w.push(np.arange(4), {"obs": rng.integers(0, 255, (4, 84, 84, 4), dtype=np.uint8),
                                      "action": np.arange(4), "reward": np.ones(4, np.float32),
                                      "done": np.zeros(4, bool)})
        with shmreplay.Sampler(buf, seed=0) as s:
            batch = s.sample("replay", rows, length)
        arrays = list(batch.fields.values()) + [batch.mask, batch.env_ids, batch.starts]
        nbytes = sum(x.nbytes for x in arrays)
        targets = [np.empty_like(x) for x in arrays]

        def copy_all():
            for dst, src in zip(targets, arrays):
                np.copyto(dst, src)

        figures = [("one copy of the same bytes (np.copyto)", "baseline", timed(copy_all, seconds, trials))]
        figures += torch_figures(batch, seconds, trials) + jax_figures(batch, seconds, trials)
    finally:
        shmreplay.Buffer.remove(name)

    baseline = figures[0][2]
    out = [{"hand-over": f, "copies": c, "seconds": t, "GB/s": nbytes / t / 1e9 if t == t else None,
            "time / one np.copyto": t / baseline if t == t else None, "batch": f"{rows} x {length}",
            "bytes": nbytes} for f, c, t in figures]
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"Hand-over of a {rows} x {length} Atari-like batch ({nbytes / 1e6:.1f} MB), median of {trials} trials\n")
    print("| hand-over | copies | time | time / one np.copyto |")
    print("|---|---|---:|---:|")
    for r in out:
        t = r["seconds"]
        shown = "-" if t != t else (f"{t * 1e6:.1f} µs" if t < 1e-3 else f"{t * 1e3:.2f} ms")
        ratio = "-" if r["time / one np.copyto"] is None else f"{r['time / one np.copyto']:.4f}"
        print(f"| {r['hand-over']} | {r['copies']} | {shown} | {ratio} |")


if __name__ == "__main__":
    main()
