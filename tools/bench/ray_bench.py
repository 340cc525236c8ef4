#!/usr/bin/env python3
"""What serving a buffer to a remote learner through Ray costs (shmreplay.ray, issue 21): batches per second and
MB/s of ClusterSampler.sample against the same learner sampling the same buffer locally, in one run.

    .venv/bin/python tools/bench/ray_bench.py            # a markdown table, ~2 minutes
    .venv/bin/python tools/bench/ray_bench.py --quick    # a smoke run
    ... --json                                            # the same as JSON

Ray's multi-node test cluster on this machine (ray.cluster_utils.Cluster): the learner (this process) is on the head
node; each buffer and its NodeServer are on a node of their own, each Ray node with its own object store, so a
batch leaves the node's store and is pulled into the learner's (over loopback TCP, as it would over a network
between machines). Rows:
- local: ``Sampler.sample(..., out=)`` in this process, on the buffer of node 1 (the baseline: what a learner on
  the buffer's machine gets);
- a Ray actor call that returns nothing (ping), for scale: a round trip's fixed cost;
- ray, 1 node: ``ClusterSampler.sample`` over node 1's server (one round trip: with one node there is nothing to
  split, so no total is asked for);
- ray, 2 nodes: over node 1's and node 2's servers (two round trips: their totals, then the two parts);
- ray, 2 nodes, learner trains 10 ms per batch: a learner that trains (here: sleeps, which frees the GIL as a GPU
  step does) between samples, without and with ``ClusterSampler.batches`` (the next batch in flight meanwhile):
  batches per second against 100 for training alone.
SHMREPLAY_RAY_INLINE_BYTES=N starts the cluster with Ray's max_direct_call_object_size = N (default 100 KB):
replies up to N bytes then travel inside the call's reply instead of through the object stores.
Start weights power 1 (the replay view, cross). MB/s counts the bytes of the batch's arrays as the learner gets them.
Figures are medians of --trials trials; compare ratios within one run (the machine's 2 cores are shared).
"""
import argparse
import json
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


def batch_bytes(arrays):
    return sum(a.nbytes for a in arrays)


def measure(kind, dirs, seconds, trials):
    schema, envs, capacity, rows, length = STEPS[kind]
    name = f"shmreplay-raybench-{os.getpid()}-{kind}"
    results = []
    # Each node's buffer, filled by the benchmark itself (this process, with the node's directory).
    for k in (1, 2):
        os.environ["SHMREPLAY_SHM_DIR"] = dirs[k]
        fill(shmreplay.Buffer.create(name, envs, capacity, schema), seed=k)
    try:
        os.environ["SHMREPLAY_SHM_DIR"] = dirs[1]
        buf = shmreplay.Buffer.open(name)
        with shmreplay.Sampler(buf, seed=0) as s:
            out = s.new_batch(rows, length)
            nbytes = batch_bytes([*out.fields.values(), out.mask, out.env_ids, out.starts, out.weights])
            times = trial_times(lambda: s.sample("replay", rows, length, 1.0, out=out), seconds, trials)
            results.append(("local", statistics.median(times), nbytes))
        del buf
        servers = {f"node{k}": sr.NodeServer.options(resources={f"node{k}": 1}).remote(name, shm_dir=dirs[k], seed=k)
                   for k in (1, 2)}
        ray.get([h.ping.remote() for h in servers.values()])
        ping = servers["node1"].ping
        times = trial_times(lambda: ray.get(ping.remote()), seconds, trials)
        results.append(("(a Ray actor call that returns nothing)", statistics.median(times), 0))
        for label, nodes in (("ray, 1 node", ["node1"]), ("ray, 2 nodes", ["node1", "node2"])):
            learner = sr.ClusterSampler({n: servers[n] for n in nodes}, seed=0)
            b = learner.sample("replay", rows, length, 1.0)
            nbytes = b.nbytes() - b.node_ids.nbytes  # the same arrays as the local row
            times = trial_times(lambda: learner.sample("replay", rows, length, 1.0), seconds, trials)
            results.append((label, statistics.median(times), nbytes))
        # A learner that trains TRAIN_S per batch (a sleep: the GIL is free, as during a GPU step): sampling in
        # turn with training, and with the next batch in flight meanwhile.
        learner = sr.ClusterSampler(servers, seed=0)

        def train_then_sample():
            time.sleep(TRAIN_S)
            learner.sample("replay", rows, length, 1.0)
        times = trial_times(train_then_sample, seconds, trials)
        results.append((f"ray, 2 nodes, learner trains {TRAIN_S * 1e3:.0f} ms per batch", statistics.median(times),
                        nbytes))
        it = learner.batches("replay", rows, length, 1.0)

        def train_prefetched():
            time.sleep(TRAIN_S)
            next(it)
        times = trial_times(train_prefetched, seconds, trials)
        results.append((f"ray, 2 nodes, learner trains {TRAIN_S * 1e3:.0f} ms per batch, prefetch",
                        statistics.median(times), nbytes))
        learner.close()
        ray.get([h.close.remote() for h in servers.values()])
        for h in servers.values():
            ray.kill(h)
    finally:
        for k in (1, 2):
            os.environ["SHMREPLAY_SHM_DIR"] = dirs[k]
            if shmreplay.Buffer.exists(name):
                shmreplay.Buffer.remove(name)
    base = results[0][1]
    return [{"step": kind, "rows": rows, "length": length, "path": label, "batch_mb": nbytes / 1e6,
             "batches_per_s": 1.0 / t, "mb_per_s": nbytes / t / 1e6, "vs_local": base / t}
            for label, t, nbytes in results]


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
    print("| step | batch | path | batches/s | MB/s | vs local |")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        if r["batch_mb"] == 0:  # the bare actor call: calls per second only
            print(f"| {r['step']} | | {r['path']} | {r['batches_per_s']:.0f} calls/s | | |")
            continue
        print(f"| {r['step']} | {r['rows']} x {r['length']} ({r['batch_mb']:.2f} MB) | {r['path']} | "
              f"{r['batches_per_s']:.0f} | {r['mb_per_s']:.0f} | {r['vs_local']:.3f}x |")


if __name__ == "__main__":
    main()
