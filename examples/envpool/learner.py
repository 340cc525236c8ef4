"""The learner of the envpool example: samples replay and online rows from the shmreplay buffer that the envpool
actors fill, checks every valid step's stamp, trains the linear actor-critic with V-trace targets (IMPALA; the C++
example's agent) in PyTorch (agent_torch.py, the default) or JAX (agent_jax.py, --framework jax), and publishes its
parameters for the actors.

    python examples/envpool/learner.py --buffer NAME [--framework torch|jax]

Each update: wait for 256 online steps, sample 32 replay + 32 online rows of 16 steps (start weight
min(remaining, 16)), reset the online queue to what that sample saw, one Adam step. Once a second it prints a line; at the end (SIGTERM,
SIGINT or --seconds) one JSON report line (@report)."""
import argparse
import importlib
import json
import sys
import time

import numpy as np

import shmreplay
from common import Status, StopFlag, params_path, publish
from vtrace import check_rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffer", required=True)
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until SIGTERM)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--entropy", type=float, default=0.01)
    p.add_argument("--replay-rows", type=int, default=32)
    p.add_argument("--online-rows", type=int, default=32)
    p.add_argument("--length", type=int, default=16)
    p.add_argument("--min-replay", type=int, default=2048, help="replay steps to wait for before the first update")
    p.add_argument("--min-online", type=int, default=256,
                   help="online steps to wait for before each update (at most what the rate limiter lets the actors "
                        "push after one update's sample)")
    p.add_argument("--quiet", action="store_true", help="no per-second lines")
    p.add_argument("--framework", choices=("torch", "jax"), default="torch", help="the learner's framework")
    a = p.parse_args()

    stop = StopFlag()
    status = Status("learner")
    agent = importlib.import_module(f"agent_{a.framework}").Agent(a.lr, a.entropy)

    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    min_online = online_steps_to_wait_for(buf, a.replay_rows + a.online_rows, a.min_online)
    path = params_path(a.buffer)
    publish(path, agent.numpy_params())
    updates = rows = violations = 0
    losses = []
    started = time.monotonic()
    last_print = next_publish = started
    with shmreplay.Sampler(buf, seed=1) as s:
        print("@ready", flush=True)
        while not stop and not s.wait("replay", a.min_replay, timeout=0.5):
            status.set("waiting for replay steps", have=s.size("replay"), need=a.min_replay)
            status.answer()
        batch = s.new_batch(a.replay_rows + a.online_rows, a.length)
        while not stop and (a.seconds <= 0 or time.monotonic() - started < a.seconds):
            status.answer()
            if not s.wait("online", min_online, timeout=0.5):
                status.set("waiting for online steps", have=s.size("online"), need=min_online, updates=updates)
                continue
            try:  # with a rate limiter, wait while the learner is ahead of the actors (checking for SIGTERM)
                s.sample_mixed(a.replay_rows, a.online_rows, a.length, 1.0, rate_limit_timeout=0.5, out=batch)
            except shmreplay.RateLimited as e:
                status.set("held back by the rate limiter", online=s.size("online"), updates=updates, why=str(e))
                continue
            status.set("training", online=s.size("online"), updates=updates)
            # Only the steps this sample could draw leave the online view: the actors' steps published since (the
            # limiter let them in when the sample counted) stay. Resetting to the heads of now dropped them, and a
            # learner descheduled here long enough for the actors to fill the limiter's budget then waited for online
            # steps the limiter held back, while the actors waited for samples (docs/design/rate_limiter.md, "The online queue
            # and the limiter").
            s.reset_online_queue(to="sampled")
            violations += check_rows(batch, buf.heads())  # heads only grow: a row past them now was past then
            value_error = agent.update(batch)
            if time.monotonic() >= next_publish:  # the actors poll every 100 ms; a file per update is waste
                publish(path, agent.numpy_params())
                next_publish = time.monotonic() + 0.02
            updates += 1
            rows += batch.rows
            losses.append(value_error)
            now = time.monotonic()
            if not a.quiet and now - last_print >= 1.0:
                last_print = now
                print(f"[learner] t {now - started:6.1f}s  updates {updates:6d}  value error "
                      f"{np.mean(losses[-50:]):9.3f}  rows/s {rows / (now - started):8.0f}  "
                      f"violations {violations}", flush=True)
        retries = s.retries
    seconds = time.monotonic() - started
    report = {"role": "learner", "framework": a.framework, "seconds": seconds, "updates": updates, "rows_sampled": rows,
              "rows_per_s": rows / seconds, "updates_per_s": updates / seconds, "violations": violations,
              "retries": retries, "loss_first": float(np.mean(losses[:50])) if losses else None,
              "loss_last": float(np.mean(losses[-50:])) if losses else None}
    print("@report " + json.dumps(report), flush=True)


def online_steps_to_wait_for(buf, rows, wanted):
    """At most what the rate limiter lets the actors push after one update's sample: from the upper bound less the
    update's rows, they push at least rows / samples_per_insert steps less one push (at most one step per env)
    before it holds them, and the learner must not wait for more (docs/design/rate_limiter.md, "The online queue and the
    limiter"); `wanted` otherwise. With --samples-per-insert 0.5 that is 64 / 0.5 - 32 = 96 of the 256 asked for."""
    limit = buf.rate_limit
    if limit is None or not limit.has_ratio:
        return wanted
    budget = int(rows / limit.samples_per_insert) - buf.num_envs
    if wanted <= budget:
        return wanted
    print(f"[learner] waiting for {max(1, budget)} online steps per update, not {wanted}: after a sample of {rows} "
          f"rows the rate limiter ({limit.samples_per_insert:g} rows per step) lets the actors push only "
          f"{rows / limit.samples_per_insert:g} steps, less one push", flush=True)
    return max(1, budget)


if __name__ == "__main__":
    sys.exit(main())
