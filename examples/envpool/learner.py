"""The learner of the envpool example: samples replay and online rows from the shmreplay buffer that the envpool
actors fill, checks every valid step's stamp, trains the linear actor-critic with V-trace targets (IMPALA; the C++
example's agent) in PyTorch (agent_torch.py, the default) or JAX (agent_jax.py, --framework jax), and publishes its
parameters for the actors.

    python examples/envpool/learner.py --buffer NAME [--framework torch|jax]

Each update: wait for 256 online steps, sample 32 replay + 32 online rows of 16 steps (start weight
min(remaining, 16)), reset the online queue to what that sample saw, one Adam step. Once a second it prints a line; at
the end (SIGTERM, SIGINT or --seconds) one JSON report line (@report).

Several learners (the launcher's --learners K, PyTorch only): K of these processes, rank r of a torch.distributed
group (gloo, on the CPU; the launcher sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE). Rank r takes the buffer's
learner slot r (Sampler(buf, seed=1, rank=r): its own random stream, online view and counters) and samples its share
of the global batch: 32 // K replay and 32 // K online rows, and the first 32 % K ranks one more of each, so that the
ranks' rows add up to one learner's batch. In each update the ranks agree, in one all-reduce, on whether to go on (a
rank asked to stop says so; all stop after the same number of updates, so none is left waiting in a collective) and
on the count of trained steps, which weighs the loss as in one learner's batch; DistributedDataParallel then
all-reduces the gradients and every rank takes the same Adam step. Only rank 0 publishes the parameters and prints
the per-second lines; every rank prints its own @report (its rows, violations, retries). The rate limiter counts
every rank's rows, so the ranks together sample what one learner would."""
import argparse
import importlib
import json
import os
import sys
import time

import numpy as np

import shmreplay
from common import Status, StopFlag, params_path, publish
from vtrace import check_rows


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffer", required=True)
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until SIGTERM)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--entropy", type=float, default=0.01)
    p.add_argument("--replay-rows", type=int, default=32, help="of the global batch (all ranks together)")
    p.add_argument("--online-rows", type=int, default=32, help="of the global batch (all ranks together)")
    p.add_argument("--length", type=int, default=16)
    p.add_argument("--min-replay", type=int, default=2048, help="replay steps to wait for before the first update")
    p.add_argument("--min-online", type=int, default=256,
                   help="online steps to wait for before each update (at most what the rate limiter lets the actors "
                        "push after one update's sample)")
    p.add_argument("--quiet", action="store_true", help="no per-second lines")
    p.add_argument("--framework", choices=("torch", "jax"), default="torch", help="the learner's framework")
    return p.parse_args()


def sample_one_batch(s, batch, replay_rows, online_rows, length, min_online, status, updates):
    """One mixed sample into batch once the online view holds min_online steps, then the reset of the online view
    to what it drew. False when there was nothing to train on yet (too few online steps, or the rate limiter held
    the sample back)."""
    if not s.wait("online", min_online, timeout=0.5):
        status.set("waiting for online steps", have=s.size("online"), need=min_online, updates=updates)
        return False
    try:  # with a rate limiter, wait while the learners are ahead of the actors (checking for SIGTERM)
        s.sample_mixed(replay_rows, online_rows, length, 1.0, rate_limit_timeout=0.5, out=batch)
    except shmreplay.RateLimited as e:
        status.set("held back by the rate limiter", online=s.size("online"), updates=updates, why=str(e))
        return False
    status.set("training", online=s.size("online"), updates=updates)
    # Only the steps this sample could draw leave the online view: the actors' steps published since (the
    # limiter let them in when the sample counted) stay. Resetting to the heads of now dropped them, and a
    # learner descheduled here long enough for the actors to fill the limiter's budget then waited for online
    # steps the limiter held back, while the actors waited for samples (docs/design/rate_limiter.md, "The
    # online queue and the limiter"). Each rank resets its own slot's online view only.
    s.reset_online_queue(to="sampled")
    return True


def main():
    a = parse_args()

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    role = "learner" if world == 1 else f"learner {rank}"
    stop = StopFlag()
    status = Status(role)
    if world > 1 and a.framework != "torch":
        sys.exit(f"[{role}] several learner ranks need the PyTorch learner (--framework torch)")
    replay_rows, online_rows = share(a.replay_rows, rank, world), share(a.online_rows, rank, world)
    if replay_rows < 1 or online_rows < 1:
        sys.exit(f"[{role}] {world} ranks cannot share {a.replay_rows} replay + {a.online_rows} online rows: each "
                 "rank samples at least one of each")
    group = None
    if world > 1:
        group = Group(rank, world, stop, status)
    agent = importlib.import_module(f"agent_{a.framework}").Agent(
        a.lr, a.entropy, **({"distributed": True} if world > 1 else {}))

    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    min_online = online_steps_to_wait_for(buf, replay_rows + online_rows, a.min_online, role)
    path = params_path(a.buffer)
    if rank == 0:
        publish(path, agent.numpy_params())
    quiet = a.quiet or rank != 0
    updates = rows = violations = 0
    losses = []
    started = time.monotonic()
    last_print = next_publish = started
    with shmreplay.Sampler(buf, seed=1, rank=rank if world > 1 else None) as s:
        print("@ready", flush=True)
        while not stop and not s.wait("replay", a.min_replay, timeout=0.5):
            status.set("waiting for replay steps", have=s.size("replay"), need=a.min_replay)
            status.answer()
        batch = s.new_batch(replay_rows + online_rows, a.length)
        while True:
            status.answer()
            if stop or (a.seconds > 0 and time.monotonic() - started >= a.seconds):
                if group is not None:
                    group.agree(0, stopping=True)  # the others learn it in their next update's all-reduce
                break
            if not sample_one_batch(s, batch, replay_rows, online_rows, a.length, min_online, status, updates):
                continue
            violations += check_rows(batch, buf.heads())  # heads only grow: a row past them now was past then
            rows += batch.rows
            if group is None:
                value_error = agent.update(batch)
            else:
                value_error = agent.update(batch, total=group.agree)
                if value_error is None:  # another rank stops: so do we, after the same number of updates
                    break
            if rank == 0 and time.monotonic() >= next_publish:  # the actors poll every 100 ms: a file per update
                publish(path, agent.numpy_params())                 # is waste
                next_publish = time.monotonic() + 0.02
            updates += 1
            losses.append(value_error)
            now = time.monotonic()
            if not quiet and now - last_print >= 1.0:
                last_print = now
                print(f"[learner] t {now - started:6.1f}s  updates {updates:6d}  value error "
                      f"{np.mean(losses[-50:]):9.3f}  rows/s {rows / (now - started):8.0f}  "
                      f"violations {violations}" + (f" (rank 0 of {world})" if world > 1 else ""), flush=True)
        retries = s.retries
    seconds = time.monotonic() - started
    report = {"role": role, "framework": a.framework, "rank": rank, "learners": world, "seconds": seconds,
              "updates": updates, "rows_sampled": rows, "rows_per_s": rows / seconds,
              "updates_per_s": updates / seconds, "violations": violations, "retries": retries,
              "rows_per_update": replay_rows + online_rows,
              "loss_first": float(np.mean(losses[:50])) if losses else None,
              "loss_last": float(np.mean(losses[-50:])) if losses else None}
    print("@report " + json.dumps(report), flush=True)
    if group is not None:
        group.close()


def share(rows, rank, world):
    """Rank `rank`'s part of `rows` split over `world` ranks: rows // world, and one more for the first
    rows % world ranks (32 rows over 3 ranks: 11, 11, 10)."""
    return rows // world + (1 if rank < rows % world else 0)


class Group:
    """This rank's torch.distributed group (gloo, on the CPU) and the one all-reduce per update in which the ranks
    agree to go on and add up their trained steps. The all-reduce is started asynchronously and polled, so that a
    rank waiting for slower ranks still answers the launcher's watchdog."""

    def __init__(self, rank, world, stop, status):
        import datetime
        import torch
        import torch.distributed as dist
        self.torch, self.dist, self.stop, self.status = torch, dist, stop, status
        self.rank, self.world = rank, world
        status.set("joining the learner group", rank=rank, world_size=world)
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
        self.stopped = False

    def agree(self, trained, stopping=False):
        """The trained steps of every rank's batch, or None when some rank stops (every rank calls this once per
        update, and once more with stopping=True when it stops of its own accord)."""
        if self.stopped:
            return None
        t = self.torch.tensor([float(trained), 1.0 if stopping or self.stop else 0.0], dtype=self.torch.float64)
        work = self.dist.all_reduce(t, async_op=True)
        since = time.monotonic()
        while not work.is_completed():  # polled, sleeping a tenth of the wait so far (0.2 to 20 ms)
            waited = time.monotonic() - since
            self.status.set("waiting for the other learner ranks")
            self.status.answer()
            time.sleep(min(0.02, max(0.0002, waited / 10)))
        work.wait()
        if t[1] > 0:
            self.stopped = True
            return None
        return int(t[0])

    def close(self):
        self.dist.destroy_process_group()


def online_steps_to_wait_for(buf, rows, wanted, role="learner"):
    """At most what the rate limiter lets the actors push after one update's sample: from the upper bound less the
    update's rows, they push at least rows / samples_per_insert steps less one push (at most one step per env)
    before it holds them, and the learner must not wait for more (docs/design/rate_limiter.md, "The online queue and the
    limiter"); `wanted` otherwise. With --samples-per-insert 0.5 that is 64 / 0.5 - 32 = 96 of the 256 asked for.
    With K ranks `rows` is this rank's share: another rank's sample may come before this rank's and its budget be
    pushed before this rank's reset, so only this rank's own rows are sure to let new steps into its online view."""
    limit = buf.rate_limit
    if limit is None or not limit.has_ratio:
        return wanted
    budget = int(rows / limit.samples_per_insert) - buf.num_envs
    if wanted <= budget:
        return wanted
    print(f"[{role}] waiting for {max(1, budget)} online steps per update, not {wanted}: after a sample of {rows} "
          f"rows the rate limiter ({limit.samples_per_insert:g} rows per step) lets the actors push only "
          f"{rows / limit.samples_per_insert:g} steps, less one push", flush=True)
    return max(1, budget)


if __name__ == "__main__":
    sys.exit(main())
