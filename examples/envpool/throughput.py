"""Atari throughput on real envpool (no learning): K actor processes run Pong-v5 (observations u8[4,84,84], the
last 4 frames of 84x84) in envpool's async mode with random actions and push every step they receive into one
shmreplay buffer; a learner process samples replay + online rows of 16 steps into one preallocated batch and
hands each batch to PyTorch (no copy), as a training step would take it. Prints every process's figures: env
steps/s and bytes pushed/s per actor, rows sampled/s, bytes/s and batches/s for the learner.

    .venv/bin/python examples/envpool/throughput.py --seconds 30
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np

import shmreplay
from common import StopFlag

SCHEMA = "obs:u8[4,84,84] action:i32 reward:f32 done:bool"
stop = False  # a StopFlag once main() runs


def actor(a):
    warnings.filterwarnings("ignore", category=UserWarning, module="gymnasium")
    import envpool
    env = envpool.make(a.task, env_type="gymnasium", num_envs=a.envs_per_worker, batch_size=a.batch_size,
                       seed=a.worker)
    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    first = a.worker * a.envs_per_worker
    writer = shmreplay.Writer.range(buf, first, a.envs_per_worker)
    rng = np.random.default_rng(a.worker)
    n_actions = env.action_space.n
    env.async_reset()
    print("@ready", flush=True)
    pushed, started = 0, time.monotonic()
    while not stop:
        obs, reward, terminated, truncated, info = env.recv()
        ids = np.asarray(info["env_id"])
        writer.push(ids.astype(np.int32) + first, {"obs": obs, "action": np.zeros(len(ids), np.int32),
                                                   "reward": reward.astype(np.float32),
                                                   "done": terminated | truncated})
        pushed += len(ids)
        env.send(rng.integers(0, n_actions, len(ids)).astype(np.int32), ids)
    seconds = time.monotonic() - started
    writer.close()
    step_bytes = buf.step_bytes
    print("@report " + json.dumps({"role": f"actor {a.worker}", "seconds": seconds, "env_steps": pushed,
                                   "env_steps_per_s": pushed / seconds,
                                   "MB_pushed_per_s": pushed * step_bytes / seconds / 1e6}), flush=True)


def learner(a):
    import shmreplay.torch as st  # imports torch
    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    with shmreplay.Sampler(buf, seed=0) as s:
        print("@ready", flush=True)
        while not stop and not s.wait("replay", 64, timeout=0.5):
            pass
        batch = s.new_batch(a.replay_rows + a.online_rows, 16)
        batches = rows = 0
        started = time.monotonic()
        while not stop:
            if not s.wait("online", a.online_rows, timeout=0.5):
                continue
            s.sample_mixed(a.replay_rows, a.online_rows, 16, 1.0, out=batch)
            s.reset_online_queue(to="sampled")  # the steps pushed since the sample stay online
            t = st.as_tensors(batch)
            float(t["obs"][:, 0].float().mean())  # touch what a model's first layer would read
            batches += 1
            rows += batch.rows
        seconds = time.monotonic() - started
        row_bytes = 16 * buf.step_bytes
        print("@report " + json.dumps({"role": "learner", "seconds": seconds, "batches": batches,
                                       "batches_per_s": batches / seconds, "rows_per_s": rows / seconds,
                                       "MB_sampled_per_s": rows * row_bytes / seconds / 1e6,
                                       "retries": s.retries}), flush=True)


def launch(a):
    envs = a.workers * a.envs_per_worker
    name = f"envpool-atari-{os.getpid()}"
    shmreplay.Buffer.create(name, envs, a.capacity, SCHEMA, replace=True)
    me = [sys.executable, os.path.abspath(__file__), "--buffer", name, "--task", a.task,
          "--envs-per-worker", str(a.envs_per_worker), "--batch-size", str(a.batch_size),
          "--replay-rows", str(a.replay_rows), "--online-rows", str(a.online_rows)]
    procs = [subprocess.Popen(me + ["--role", "learner"], stdout=subprocess.PIPE, text=True)]
    procs += [subprocess.Popen(me + ["--role", "actor", "--worker", str(w)], stdout=subprocess.PIPE, text=True)
              for w in range(a.workers)]
    for p in procs:  # wait for every process to be ready, then run for --seconds
        while (line := p.stdout.readline()) and not line.startswith("@ready"):
            pass
    time.sleep(a.seconds)
    for p in procs[1:] + procs[:1]:
        p.send_signal(signal.SIGTERM)
    reports = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        reports += [json.loads(line[8:]) for line in out.splitlines() if line.startswith("@report ")]
    shmreplay.Buffer.remove(name)
    if a.json:
        print(json.dumps(reports, indent=1))
        return 0
    print(f"{a.task}: {a.workers} envpool actors x {a.envs_per_worker} envs (batch {a.batch_size}), "
          f"{a.seconds:g} s, rows of 16 steps of {SCHEMA}\n")
    print("| process | figure |\n|---|---|")
    for r in reports:
        if r["role"].startswith("actor"):
            print(f"| {r['role']} | {r['env_steps_per_s']:.0f} env steps/s, {r['MB_pushed_per_s']:.1f} MB/s pushed |")
        else:
            print(f"| learner | {r['rows_per_s']:.0f} rows/s ({r['MB_sampled_per_s']:.1f} MB/s), "
                  f"{r['batches_per_s']:.1f} batches/s of {a.replay_rows} + {a.online_rows} rows, "
                  f"{r['retries']} retries |")
    return 0 if len(reports) == len(procs) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=["launch", "actor", "learner"], default="launch")
    p.add_argument("--buffer")
    p.add_argument("--task", default="Pong-v5")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--envs-per-worker", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--capacity", type=int, default=1024, help="steps kept per env (28 KB each)")
    p.add_argument("--replay-rows", type=int, default=16)
    p.add_argument("--online-rows", type=int, default=16)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    global stop
    stop = StopFlag()
    return {"launch": launch, "actor": actor, "learner": learner}[a.role](a) or 0


if __name__ == "__main__":
    sys.exit(main())
