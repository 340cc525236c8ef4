#!/usr/bin/env python3
"""What serving a buffer to a remote learner through Ray costs (shmreplay.ray, issues 21 and 36): batches per second
and MB/s of ClusterSampler against a bare Ray actor returning the same bytes, both measured in one run.

    .venv/bin/python tools/bench/ray_bench.py            # a markdown table, ~4 minutes
    .venv/bin/python tools/bench/ray_bench.py --quick    # a smoke run
    ... --json                                            # the same as JSON

Ray's multi-node test cluster on this machine (ray.cluster_utils.Cluster): the learner (this process) is on the head
node; each buffer, its NodeServer and a bare actor are on a node of their own, each Ray node with its own object
store, so a reply that goes through the stores leaves the node's store and is pulled into the learner's (over
loopback TCP, as it would over a network between machines). Rows, each with the baseline its ratio is taken
against:
- local: ``Sampler.sample(..., out=)`` in this process, on the buffer of node 1 (what a learner on the buffer's
  machine gets; no ratio);
- bare, 1 actor / 2 actors: a Ray actor on node 1 (and node 2) returning a dict of NumPy arrays of the batch's
  shapes (half each with 2), made once: Ray's own cost of moving those bytes, the baseline of each ray row;
  ``... in 96 KiB pieces``: the same bytes as ``bytes`` objects of 96 KiB (what shmreplay.ray sends a small part
  as, so that Ray carries it inside the reply), for comparison; ``..., 2 calls in flight``: the next call sent
  before the last one's answer is taken, the baseline of the pipelined rows;
- ray, 1 node: ``ClusterSampler.sample`` over node 1's server (nothing to split);
- ray, 2 nodes, cached totals / exact_split: over node 1's and node 2's servers, split by the totals of the last
  answers (one round trip) or weighed first (two);
- ray, 2 nodes, prefetch 2: ``ClusterSampler.batches(prefetch=2)``;
- learner trains 10 ms per batch: a learner that trains (here: sleeps, which frees the GIL as a GPU step does)
  between batches, sampling in turn with training or with ``batches(prefetch=2)``: batches per second against 100
  for training alone (the ratio is against that ceiling).
SHMREPLAY_RAY_INLINE_BYTES=N starts the cluster with Ray's max_direct_call_object_size = N (default 100 KB):
replies up to N bytes then travel inside the call's reply instead of through the object stores.
Start weights power 1 (the replay view, cross). MB/s counts the bytes of the batch's arrays as the learner gets them
(node ids left out). Figures are medians of --trials trials; compare ratios within one run (the machine's 2 cores are
shared).
"""
import argparse
import collections
import json
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import ray
from ray import cluster_utils

import shmreplay
import shmreplay.ray as sr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import trial_times  # noqa: E402

TRAIN_S = 0.010
PIECE_BYTES = 96 << 10  # shmreplay.ray's piece size
STEPS = {
    # kind: (schema, envs, capacity, batch rows, sequence length)
    "small": ("obs:f32[17] action:f32[6] reward:f32 done:bool", 4, 4096, 256, 16),
    "atari": ("obs:u8[84,84,4] action:i32 reward:f32 done:bool", 4, 128, 32, 16),
}


def fill(buf, seed):
    rng = np.random.default_rng(seed)
    envs = list(range(buf.num_envs))
    with shmreplay.Writer(buf, envs) as w:
        for _ in range(buf.capacity):
            data = {}
            for f in buf.schema.fields:
                shape = (len(envs), *f.shape)
                if f.numpy_dtype == np.bool_:
                    data[f.name] = rng.random(shape) < 0.1
                else:
                    data[f.name] = rng.integers(0, 100, size=shape).astype(f.numpy_dtype)
            w.push(envs, data)


@ray.remote(num_cpus=0)
class Bare:
    """The baseline: returns arrays made once (a dict of the batch's shapes, or the same bytes in pieces)."""

    def __init__(self, spec, seed):
        rng = np.random.default_rng(seed)
        self.arrays = {k: rng.integers(0, 100, size=shape).astype(dtype) for k, (shape, dtype) in spec.items()}
        blob = np.concatenate([a.reshape(-1).view(np.uint8) for a in self.arrays.values()])
        self.blob = blob

    def ping(self):
        return True

    def get(self):
        return self.arrays

    def pieces(self, n):
        step = -(-len(self.blob) // n)
        return tuple(self.blob[i * step:(i + 1) * step].tobytes() for i in range(n))


def median_s(fn, seconds, trials):
    return statistics.median(trial_times(fn, seconds, trials))


def in_flight(submit, depth):
    """A function that takes one answer per call with `depth` calls in flight (submit() sends one, returns refs)."""
    pending = collections.deque()

    def step():
        while len(pending) < depth:
            pending.append(submit())
        ray.get(pending.popleft())
    return step


BARE1, BARE2 = "bare, 1 actor", "bare, 2 actors"


def measure_bare(bare1, bare2, nbytes, seconds, trials):
    """The baselines: an empty actor call, and actors that return arrays of the batch's shapes (whole, or in pieces
    as shmreplay.ray sends a part of at most 4 MiB). (path, seconds per batch, bytes, None) each."""
    ping = bare1.ping
    results = [("(a Ray actor call that returns nothing)", median_s(lambda: ray.get(ping.remote()), seconds, trials),
                0, None)]
    results.append((BARE1, median_s(lambda: ray.get(bare1.get.remote()), seconds, trials), nbytes, None))
    results.append((BARE2, median_s(lambda: ray.get([h.get.remote() for h in bare2]), seconds, trials), nbytes,
                    None))
    results.append((f"{BARE2}, 2 calls in flight", median_s(in_flight(lambda: [h.get.remote() for h in bare2], 2),
                                                            seconds, trials), nbytes, None))
    if nbytes <= 4 << 20:  # what shmreplay.ray sends such a part as
        n1, n2 = math.ceil(nbytes / PIECE_BYTES), math.ceil(nbytes / 2 / PIECE_BYTES)
        f1, f2 = bare1.pieces.options(num_returns=n1), [h.pieces.options(num_returns=n2) for h in bare2]
        results.append((f"{BARE1}, in 96 KiB pieces", median_s(lambda: ray.get(f1.remote(n1)), seconds, trials),
                        nbytes, None))
        results.append((f"{BARE2}, in 96 KiB pieces", median_s(lambda: ray.get([x for f in f2 for x in f.remote(n2)]),
                                                                seconds, trials), nbytes, None))
    return results


def measure_cluster(servers, rows, length, nbytes, seconds, trials):
    """ClusterSampler over one node and over two (cached totals, exact_split, prefetch), and a learner that trains
    TRAIN_S per batch (a sleep: the GIL is free, as during a GPU step): sampling in turn with training, and with two
    batches in flight meanwhile. (path, seconds per batch, bytes, baseline path) each."""
    results = []
    one = sr.ClusterSampler({"node1": servers["node1"]}, seed=0)
    results.append(("ray, 1 node", median_s(lambda: one.sample("replay", rows, length, 1.0), seconds, trials),
                    nbytes, BARE1))
    cached = sr.ClusterSampler(servers, seed=0)
    exact = sr.ClusterSampler(servers, seed=0, exact_split=True)
    for label, learner in (("cached totals", cached), ("exact_split", exact)):
        results.append((f"ray, 2 nodes, {label}", median_s(lambda: learner.sample("replay", rows, length, 1.0),
                                                            seconds, trials), nbytes, BARE2))
    for label, learner in (("cached totals", cached), ("exact_split", exact)):
        it = learner.batches("replay", rows, length, 1.0, prefetch=2)
        results.append((f"ray, 2 nodes, {label}, prefetch 2", median_s(lambda: next(it), seconds, trials), nbytes,
                        f"{BARE2}, 2 calls in flight"))

    def train_then_sample():
        time.sleep(TRAIN_S)
        cached.sample("replay", rows, length, 1.0)
    train = f"learner trains {TRAIN_S * 1e3:.0f} ms per batch"
    results.append((f"ray, 2 nodes, cached totals, {train}", median_s(train_then_sample, seconds, trials), nbytes,
                    "training alone"))
    it = cached.batches("replay", rows, length, 1.0, prefetch=2)

    def train_prefetched():
        time.sleep(TRAIN_S)
        next(it)
    results.append((f"ray, 2 nodes, cached totals, prefetch 2, {train}", median_s(train_prefetched, seconds,
                                                                                    trials), nbytes,
                    "training alone"))
    for learner in (one, cached, exact):
        learner.close()
    return results


def table_rows(kind, rows, length, results):
    """The results as the table's rows, each with its ratio to its baseline (and to the pieces' baseline)."""
    per_batch = {label: t for label, t, _, _ in results}
    per_batch["training alone"] = TRAIN_S
    out = []
    for label, t, nbytes, base in results:
        in_pieces = f"{base}, in 96 KiB pieces" if base in (BARE1, BARE2) and f"{base}, in 96 KiB pieces" in per_batch \
            else None
        out.append({"step": kind, "rows": rows, "length": length, "path": label, "batch_mb": nbytes / 1e6,
                    "batches_per_s": 1.0 / t, "mb_per_s": nbytes / t / 1e6, "baseline": base,
                    "vs_baseline": per_batch[base] / t if base else None,
                    "vs_pieces": per_batch[in_pieces] / t if in_pieces else None})
    return out


def measure(kind, dirs, seconds, trials):
    schema, envs, capacity, rows, length = STEPS[kind]
    name = f"shmreplay-raybench-{os.getpid()}-{kind}"
    results = []  # (path, seconds per batch, bytes, baseline path or None)
    for k in (1, 2):
        os.environ["SHMREPLAY_SHM_DIR"] = dirs[k]
        fill(shmreplay.Buffer.create(name, envs, capacity, schema), seed=k)
    try:
        os.environ["SHMREPLAY_SHM_DIR"] = dirs[1]
        buf = shmreplay.Buffer.open(name)
        with shmreplay.Sampler(buf, seed=0) as s:
            out = s.new_batch(rows, length)
            nbytes = sum(a.nbytes for a in [*out.fields.values(), out.mask, out.env_ids, out.starts, out.weights])
            results.append(("local", median_s(lambda: s.sample("replay", rows, length, 1.0, out=out), seconds, trials),
                            nbytes, None))
        del buf
        servers = {f"node{k}": sr.NodeServer.options(resources={f"node{k}": 1}).remote(name, shm_dir=dirs[k], seed=k)
                   for k in (1, 2)}
        part = ray.get(servers["node1"].sample.remote("replay", rows, length, 1.0))
        spec = {key: (a.shape, a.dtype) for key, a in part.items()}
        half = {key: ((shape[0] // 2, *shape[1:]), dtype) for key, (shape, dtype) in spec.items()}
        bare1 = Bare.options(resources={"node1": 1}).remote(spec, 1)
        bare2 = [Bare.options(resources={f"node{k}": 1}).remote(half, k) for k in (1, 2)]
        ray.get([h.ping.remote() for h in [*servers.values(), bare1, *bare2]])
        results += measure_bare(bare1, bare2, nbytes, seconds, trials)
        results += measure_cluster(servers, rows, length, nbytes, seconds, trials)
        ray.get([h.close.remote() for h in servers.values()])
        for h in [*servers.values(), bare1, *bare2]:
            ray.kill(h)
    finally:
        for k in (1, 2):
            os.environ["SHMREPLAY_SHM_DIR"] = dirs[k]
            if shmreplay.Buffer.exists(name):
                shmreplay.Buffer.remove(name)
    return table_rows(kind, rows, length, results)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: short trials")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds per trial")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--step", action="append", choices=sorted(STEPS), help="step kinds (default: both)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.trials = 0.2, 1
    dirs = [tempfile.mkdtemp(prefix=f"shmreplay-raybench-node{k}-", dir="/dev/shm") for k in range(3)]
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    store = 1 << 30  # per node (Ray's default is 30% of the memory, in /dev/shm)
    head = {"num_cpus": 1, "include_dashboard": False, "object_store_memory": store}
    if os.environ.get("SHMREPLAY_RAY_INLINE_BYTES"):  # replies up to this size travel inside the call, not the store
        head["_system_config"] = {"max_direct_call_object_size": int(os.environ["SHMREPLAY_RAY_INLINE_BYTES"])}
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args=head)
    for k in (1, 2):
        cluster.add_node(num_cpus=1, resources={f"node{k}": 10}, object_store_memory=store)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        rows = [r for kind in (args.step or ["small", "atari"]) for r in measure(kind, dirs, args.seconds, args.trials)]
    finally:
        ray.shutdown()
        cluster.shutdown()
        for d in dirs:
            os.rmdir(d)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| step | batch | path | batches/s | MB/s | ratio | against | vs the same in 96 KiB pieces |")
    print("|---|---|---|---:|---:|---:|---|---:|")
    for r in rows:
        if r["batch_mb"] == 0:  # the bare actor call: calls per second only
            print(f"| {r['step']} | | {r['path']} | {r['batches_per_s']:,.0f} calls/s | | | | |")
            continue
        ratio, pieces = (f"{r[k]:.2f}" if r[k] is not None else "" for k in ("vs_baseline", "vs_pieces"))
        print(f"| {r['step']} | {r['rows']} x {r['length']} ({r['batch_mb']:.2f} MB) | {r['path']} | "
              f"{r['batches_per_s']:,.0f} | {r['mb_per_s']:,.0f} | {ratio} | {r['baseline'] or ''} | {pieces} |")


if __name__ == "__main__":
    main()
