#!/usr/bin/env python3
"""shmreplay.torchrl's SharedStorage against TorchRL's LazyTensorStorage and LazyMemmapStorage, in one process,
through TorchRL's TensorDictReplayBuffer with its default (uniform) sampler: the median time of ``rb.sample()``
(batch 32 and 256) for Atari-like (u8[4,84,84]) and small (f32[8]) observations. Prints a Markdown table
(docs/benchmarks/torchrl.md).

    .venv/bin/python tools/bench/torchrl_bench.py [--atari-steps 4000] [--small-steps 40000] [--calls 200]

A run by hand (a minute or two); CI runs none of it.
"""
import argparse
import statistics
import tempfile
import time

import torch
from tensordict import TensorDict
from torchrl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer

import shmreplay.torchrl as st

ENVS = 8


def chunk(shape, dtype, t0, length):
    """[ENVS, length] transitions in TorchRL's layout (observation, action, next observation, reward, done)."""
    n = ENVS * length
    if dtype == torch.uint8:
        obs = torch.randint(0, 256, (ENVS, length, *shape), dtype=torch.uint8)
    else:
        obs = torch.randn(ENVS, length, *shape)
    done = (torch.arange(t0, t0 + length) % 1000 == 999)[None, :].expand(ENVS, length)
    return TensorDict({"observation": obs, "action": torch.randint(0, 6, (ENVS, length)),
                       ("next", "observation"): obs, ("next", "reward"): torch.rand(ENVS, length),
                       ("next", "done"): done, ("next", "terminated"): done,
                       ("next", "truncated"): torch.zeros_like(done)}, [ENVS, length]) if n else None


def make(kind, size, work):
    if kind == "LazyTensorStorage":
        return TensorDictReplayBuffer(storage=LazyTensorStorage(size), batch_size=1), None
    if kind == "LazyMemmapStorage":
        return TensorDictReplayBuffer(storage=LazyMemmapStorage(size, scratch_dir=work), batch_size=1), None
    storage = st.SharedStorage(size, num_envs=ENVS)
    return TensorDictReplayBuffer(storage=storage, writer=st.SharedWriter(), batch_size=1), storage


def median_us(rb, batch, calls):
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        rb.sample(batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--atari-steps", type=int, default=4000, help="transitions stored (Atari-like)")
    p.add_argument("--small-steps", type=int, default=40000, help="transitions stored (small observations)")
    p.add_argument("--calls", type=int, default=200)
    a = p.parse_args()
    torch.set_num_threads(1)
    kinds = ["LazyTensorStorage", "LazyMemmapStorage", "shmreplay SharedStorage"]
    print("| observation | batch | " + " | ".join(kinds) + " | LazyTensor / ours | LazyMemmap / ours |")
    print("|---|---|" + "---|" * (len(kinds) + 2))
    for shape, dtype, steps, label in (((4, 84, 84), torch.uint8, a.atari_steps, "u8[4,84,84]"),
                                       ((8,), torch.float32, a.small_steps, "f32[8]")):
        rows = {32: {}, 256: {}}
        for kind in kinds:
            with tempfile.TemporaryDirectory(prefix="torchrl-bench-") as work:
                rb, storage = make(kind, steps, work)
                for t0 in range(0, steps // ENVS, 100):
                    td = chunk(shape, dtype, t0, min(100, steps // ENVS - t0))
                    rb.extend(td if storage is not None else td.reshape(-1))  # ours: [envs, T], one stream each
                for batch in rows:
                    median_us(rb, batch, 10)  # warm up
                    rows[batch][kind] = median_us(rb, batch, a.calls)
                if storage is not None:
                    storage.close()
                del rb
        for batch, r in rows.items():
            ours = r[kinds[2]]
            print(f"| {label} | {batch} | " + " | ".join(f"{r[k]:.0f} us" for k in kinds) +
                  f" | {r[kinds[0]] / ours:.2f} | {r[kinds[1]] / ours:.2f} |", flush=True)


if __name__ == "__main__":
    main()
