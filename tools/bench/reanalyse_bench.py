#!/usr/bin/env python3
"""Reanalyse write-back (issue 48, part 1; docs/design/write_back.md): rows per second that 1, 2 and 4 write-back
processes write back through Sampler.write_back, and the learner's sampling rate beside them against its rate
without them; against the same workflow through a Ray actor that owns a NumPy buffer (the pattern muzero-general
and EfficientZero use: workers call the actor to get batches and to write targets back), built here. One run prints
both, so the ratios compare like with like on one machine.

    <venv with shmreplay>/bin/python tools/bench/reanalyse_bench.py            # a markdown table, ~2 minutes
    ... --quick                                                                  # a smoke run
    ... --json                                                                   # the same as JSON

The workflow, the same on both sides: a writer process pushes steps of ENVS envs (obs f32[OBS], action, reward,
and the derived fields policy_target f32[ACTIONS], value_target, root_value, target_version) at a steady pace; a
learner process samples batches of LEARNER_BATCH rows of UNROLL steps as fast as it can; each write-back process
loops: sample WB_BATCH handles with their observations, compute new targets (a few NumPy operations standing in for
the network: reanalyse's inference runs elsewhere, this measures the buffer), write them back by handle. A write to
a step the ring overwrote since is refused (shmreplay: write_back's rule; the actor: a step id kept per slot and
compared, the same rule). Rates are counted over the measured window after a warm-up; each figure is the median of
--trials runs.
"""
import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid

import numpy as np

ENVS = 16
CAPACITY = 4096  # steps per env
OBS = 64
ACTIONS = 18
LEARNER_BATCH = 256
UNROLL = 5
WB_BATCH = 256
WRITER_PACE_S = 0.002  # one step of every env per pace: 8,000 steps/s
SPEC = (f"obs:f32[{OBS}] action:i32 reward:f32 policy_target:f32[{ACTIONS}]:derived value_target:f32:derived "
        "root_value:f32:derived target_version:i64:derived")
WORKER_COUNTS = (1, 2, 4)


def step_data(envs, steps):
    n = len(envs)
    rng = np.random.default_rng(int(steps[0]))
    return {"obs": rng.standard_normal((n, OBS), dtype=np.float32), "action": (steps % ACTIONS).astype(np.int32),
            "reward": np.ones(n, np.float32), "policy_target": np.full((n, ACTIONS), 1 / ACTIONS, np.float32),
            "value_target": np.zeros(n, np.float32), "root_value": np.zeros(n, np.float32),
            "target_version": np.zeros(n, np.int64)}


def new_targets(obs, version):
    """Stand-in for the network: targets that depend on the observations."""
    logits = obs[:, :ACTIONS]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    value = obs.mean(axis=1)
    return {"policy_target": p.astype(np.float32), "value_target": value.astype(np.float32),
            "root_value": value.astype(np.float32), "target_version": np.full(len(obs), version, np.int64)}


def counted(fn, start_at, warmup_s, measure_s, cpu=False):
    """Runs fn() (which returns rows done) until the window ends; the rows done inside the window per second, and
    with cpu=True also per second of this process's CPU time in the window (what the machine's other load and the
    CPU share the other processes take leave out: the buffer's own interference)."""
    while time.time() < start_at:
        time.sleep(0.001)
    begin, end = start_at + warmup_s, start_at + warmup_s + measure_s
    rows, cpu_begin = 0, None
    while True:
        now = time.time()
        if now >= end:
            break
        if now >= begin and cpu_begin is None:
            cpu_begin = time.process_time()
        n = fn()
        if now >= begin:
            rows += n
    rate = rows / measure_s
    return (rate, rows / max(time.process_time() - cpu_begin, 1e-9)) if cpu else rate


# ----------------------------------------------------------------------------------------------------------------
# shmreplay: processes on one buffer


def shm_writer(name, stop):
    import shmreplay
    buf = shmreplay.Buffer.open(name)
    w = shmreplay.Writer(buf, list(range(ENVS)))
    ids = np.arange(ENVS)
    while not stop.is_set():
        w.push(ids, step_data(ids, np.array([w.head(0)] * ENVS)))
        time.sleep(WRITER_PACE_S)


def shm_learner(name, rank, start_at, warmup_s, measure_s, out):
    import shmreplay
    s = shmreplay.Sampler(shmreplay.Buffer.open(name), rank=rank, seed=rank)
    batch = s.new_batch(LEARNER_BATCH, UNROLL)

    def one():
        s.sample("replay", LEARNER_BATCH, UNROLL, out=batch)
        return LEARNER_BATCH
    out.put(("learner", counted(one, start_at, warmup_s, measure_s, cpu=True)))


def shm_worker(name, rank, start_at, warmup_s, measure_s, out, think_s):
    import shmreplay
    s = shmreplay.Sampler(shmreplay.Buffer.open(name), rank=rank, seed=rank)
    batch = s.new_batch(WB_BATCH, 1)
    refused_rows = [0]

    def one():
        x = s.sample_transitions("replay", WB_BATCH, out=batch)
        targets = new_targets(x["obs"][:, 0], rank)
        if think_s:
            time.sleep(think_s)  # the network's inference, on a GPU: the CPU is free meanwhile
        applied, refused = s.write_back(x.env_ids, x.starts, **targets)
        refused_rows[0] += int(refused.sum())
        return applied
    out.put(("worker", counted(one, start_at, warmup_s, measure_s)))


def run_shm(workers, warmup_s, measure_s, think_s):
    import shmreplay
    name = f"reanalyse-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    buf = shmreplay.Buffer.create(name, ENVS, CAPACITY, SPEC, max_learners=1 + max(WORKER_COUNTS))
    ctx = mp.get_context("fork")
    stop, out = ctx.Event(), ctx.Queue()
    try:
        w = shmreplay.Writer(buf, list(range(ENVS)))
        ids = np.arange(ENVS)
        for s in range(CAPACITY):  # a full ring to start from
            w.push(ids, step_data(ids, np.array([s] * ENVS)))
        w.close()
        start_at = time.time() + 1.0
        procs = [ctx.Process(target=shm_writer, args=(name, stop))]
        procs.append(ctx.Process(target=shm_learner, args=(name, 0, start_at, warmup_s, measure_s, out)))
        procs += [ctx.Process(target=shm_worker, args=(name, 1 + k, start_at, warmup_s, measure_s, out, think_s))
                  for k in range(workers)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60 + warmup_s + measure_s) for _ in range(1 + workers)]
        stop.set()
        for p in procs:
            p.join(timeout=10)
    finally:
        shmreplay.Buffer.remove(name)
    learner = next(r for k, r in results if k == "learner")
    return learner[0], sum(r for k, r in results if k == "worker"), learner[1]


# ----------------------------------------------------------------------------------------------------------------
# The baseline: a Ray actor that owns NumPy arrays


def ray_classes():
    import ray

    @ray.remote
    class ReplayActor:
        """muzero-general's ReplayBuffer / EfficientZero's: the buffer in one actor's memory; everyone calls it."""

        def __init__(self):
            n = ENVS * CAPACITY
            self.obs = np.zeros((n, OBS), np.float32)
            self.action = np.zeros(n, np.int32)
            self.reward = np.zeros(n, np.float32)
            self.policy_target = np.zeros((n, ACTIONS), np.float32)
            self.value_target = np.zeros(n, np.float32)
            self.root_value = np.zeros(n, np.float32)
            self.target_version = np.zeros(n, np.int64)
            self.step_id = np.full(n, -1, np.int64)  # the step each slot holds: the handle check
            self.head = 0
            self.rng = np.random.default_rng(0)

        def push(self, data, count):
            for _ in range(count):
                ids = np.arange(ENVS)
                slots = ids * CAPACITY + self.head % CAPACITY
                d = data
                self.obs[slots], self.action[slots], self.reward[slots] = d["obs"], d["action"], d["reward"]
                self.policy_target[slots], self.value_target[slots] = d["policy_target"], d["value_target"]
                self.root_value[slots], self.target_version[slots] = d["root_value"], d["target_version"]
                self.step_id[slots] = self.head
                self.head += 1

        def sample_handles(self, n):
            slots = self.rng.integers(0, ENVS * min(self.head, CAPACITY), n)
            return slots, self.step_id[slots].copy(), self.obs[slots]

        def write_targets(self, slots, step_ids, targets):
            ok = self.step_id[slots] == step_ids  # refused where the slot holds a newer step now
            s = slots[ok]
            self.policy_target[s] = targets["policy_target"][ok]
            self.value_target[s] = targets["value_target"][ok]
            self.root_value[s] = targets["root_value"][ok]
            self.target_version[s] = targets["target_version"][ok]
            return int(ok.sum())

        def sample_batch(self, rows, length):
            starts = self.rng.integers(0, ENVS * (min(self.head, CAPACITY) - length), rows)
            idx = starts[:, None] + np.arange(length)[None, :]
            return {"obs": self.obs[idx], "action": self.action[idx], "reward": self.reward[idx],
                    "policy_target": self.policy_target[idx], "value_target": self.value_target[idx]}

    @ray.remote
    class Client:
        def run_writer(self, actor, seconds):
            import ray as r
            end = time.time() + seconds
            ids = np.arange(ENVS)
            while time.time() < end:
                r.get(actor.push.remote(step_data(ids, np.zeros(ENVS, np.int64)), 1))
                time.sleep(WRITER_PACE_S)

        def run_learner(self, actor, start_at, warmup_s, measure_s):
            import ray as r

            def one():
                r.get(actor.sample_batch.remote(LEARNER_BATCH, UNROLL))
                return LEARNER_BATCH
            return counted(one, start_at, warmup_s, measure_s)

        def run_worker(self, actor, version, start_at, warmup_s, measure_s, think_s):
            import ray as r

            def one():
                slots, step_ids, obs = r.get(actor.sample_handles.remote(WB_BATCH))
                targets = new_targets(obs, version)
                if think_s:
                    time.sleep(think_s)
                return r.get(actor.write_targets.remote(slots, step_ids, targets))
            return counted(one, start_at, warmup_s, measure_s)

    return ReplayActor, Client


def run_ray(workers, warmup_s, measure_s, think_s, classes):
    import ray
    ReplayActor, Client = classes
    actor = ReplayActor.remote()
    ray.get(actor.push.remote(step_data(np.arange(ENVS), np.zeros(ENVS, np.int64)), CAPACITY))
    clients = [Client.remote() for _ in range(2 + workers)]
    ray.get([c.__ray_ready__.remote() for c in clients])
    start_at = time.time() + 1.0
    total = 1.0 + warmup_s + measure_s + 1.0
    writer = clients[0].run_writer.remote(actor, total)
    learner = clients[1].run_learner.remote(actor, start_at, warmup_s, measure_s)
    wbs = [clients[2 + k].run_worker.remote(actor, 1 + k, start_at, warmup_s, measure_s, think_s)
           for k in range(workers)]
    learner_rate, wb_rates = ray.get(learner), ray.get(wbs)
    ray.get(writer)
    for c in clients + [actor]:
        ray.kill(c)
    return learner_rate, sum(wb_rates), None


# ----------------------------------------------------------------------------------------------------------------


def interleaved(run, counts, trials):
    """Per worker count: the median learner and write-back rates over `trials`, and the median of each trial's
    learner rate over the same trial's rate alone (count 0). Each trial runs every count in turn, so a drift of the
    machine's load between trials (its cores are shared) cancels out of the ratios."""
    runs = {k: [] for k in counts}
    for _ in range(trials):
        for k in counts:
            runs[k].append(run(k))
    out = {}
    for k in counts:
        ratios = [r[0] / alone[0] for r, alone in zip(runs[k], runs[0])]
        cpu = [r[2] / alone[2] for r, alone in zip(runs[k], runs[0]) if r[2] is not None]
        out[k] = (statistics.median(r[0] for r in runs[k]), statistics.median(r[1] for r in runs[k]),
                  statistics.median(ratios), statistics.median(cpu) if cpu else None)
    return out


def table(shm, actor):
    """The rows of one table: per worker count, both sides' write-back and learner rates."""
    rows = []
    for k in WORKER_COUNTS:
        rows.append({"workers": k, "shm_write_back_rows_s": shm[k][1], "shm_learner_rows_s": shm[k][0],
                     "shm_learner_vs_alone": shm[k][2], "shm_learner_per_cpu_vs_alone": shm[k][3],
                     "actor_write_back_rows_s": actor[k][1],
                     "actor_learner_rows_s": actor[k][0], "actor_learner_vs_alone": actor[k][2],
                     "write_back_vs_actor": shm[k][1] / actor[k][1]})
    return {"learner_alone_rows_s": {"shmreplay": shm[0][0], "actor": actor[0][0]}, "rows": rows}


def print_table(title, t):
    alone = t["learner_alone_rows_s"]
    print(f"{title}. Learner alone (rows/s): shmreplay {alone['shmreplay']:,.0f}, Ray actor {alone['actor']:,.0f}.\n")
    print("| write-back processes | shmreplay write-back rows/s | learner rows/s (vs alone) | learner rows per CPU "
          "second, vs alone | Ray actor write-back rows/s | actor's learner rows/s (vs alone) | write-back: "
          "shmreplay / actor |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in t["rows"]:
        print(f"| {r['workers']} | {r['shm_write_back_rows_s']:,.0f} | {r['shm_learner_rows_s']:,.0f} "
              f"({r['shm_learner_vs_alone']:.0%}) | {r['shm_learner_per_cpu_vs_alone']:.0%} | "
              f"{r['actor_write_back_rows_s']:,.0f} | "
              f"{r['actor_learner_rows_s']:,.0f} ({r['actor_learner_vs_alone']:.0%}) | "
              f"{r['write_back_vs_actor']:.1f}x |")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: short windows, one trial")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown tables")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--think-ms", type=float, default=20.0,
                        help="the paced table's inference time per write-back batch (a sleep: a GPU's time)")
    args = parser.parse_args()
    warmup_s, measure_s, trials = (0.3, 1.0, 1) if args.quick else (1.0, 4.0, args.trials)
    counts = (0,) + WORKER_COUNTS
    runs = {}
    for label, think_s in (("flat out", 0.0), ("paced", args.think_ms / 1000)):
        runs[label] = {"think_s": think_s,
                       "shm": interleaved(lambda k, t=think_s: run_shm(k, warmup_s, measure_s, t), counts, trials)}
    import ray
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    classes = ray_classes()
    for label, run in runs.items():
        run["actor"] = interleaved(lambda k, t=run["think_s"]: run_ray(k, warmup_s, measure_s, t, classes), counts,
                                   trials)
    ray.shutdown()
    result = {"cpus": os.cpu_count(), "trials": trials, "measure_s": measure_s,
              "tables": {label: dict(table(r["shm"], r["actor"]), think_s=r["think_s"]) for label, r in runs.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{os.cpu_count()} CPUs, {trials} trial(s) of {measure_s:.0f} s each, medians; a learner's rate against its "
          f"rate alone is the median of each trial's ratio.\n")
    for label, t in result["tables"].items():
        title = ("Flat out: write-back processes that only sample and write back" if label == "flat out" else
                 f"Paced: each write-back batch waits {t['think_s'] * 1000:.0f} ms for inference (a sleep)")
        print_table(title, t)


if __name__ == "__main__":
    sys.exit(main())
