"""The JAX learner of the reanalyse example: a Q-network (qnet.py's MLP) trained towards the value targets the
reanalyse workers wrote back into the sampled steps, publishing its parameters with a version every K updates.

    python examples/reanalyse/learner.py --buffer NAME [--batch 128] [--publish-every 100] [--reanalysed 0.25]

At most --updates-per-step updates per env step the actors pushed (DQN's replay ratio; the learner waits
otherwise). Each update samples one-step rows: a fraction --reanalysed of them from the freshly reanalysed steps (the chunks
completed with the newest target version: the mixture's 'reanalysed' selector, MuZero Unplugged's reanalyse
fraction), the rest uniformly from the replay. The loss is the Huber loss between Q(s, a) and the stored
value_target; a row whose target_version is 0 (never reanalysed) is left out of the loss (weight 0). Every second
it prints the age distribution of the targets it trained on since the last line (its version minus their
target_version: 0, 1, 2-3, 4-7, 8+, and how many were never reanalysed), and at the end one @report line. Every sampled row is checked
(check_rows): the launcher's summary counts the violations."""
import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import shmreplay
from qnet import AGE_BUCKETS, StopFlag, Status, age_bucket_counts, init_params, params_path, publish


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffer", required=True)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--publish-every", type=int, default=100, help="updates between published versions (K)")
    p.add_argument("--reanalysed", type=float, default=0.25, help="fraction of rows from freshly reanalysed steps")
    p.add_argument("--min-replay", type=int, default=1000)
    p.add_argument("--updates-per-step", type=float, default=0.25,
                   help="at most this many updates per env step pushed (DQN's replay ratio; 0: no bound)")
    return p.parse_args()


def _q(params, obs):
    h = jax.nn.relu(obs @ params["w0"] + params["b0"])
    h = jax.nn.relu(h @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def _loss(params, obs, action, target, weight):
    q = jnp.take_along_axis(_q(params, obs), action[:, None], axis=1)[:, 0]
    err = q - target
    huber = jnp.where(jnp.abs(err) < 1.0, 0.5 * err * err, jnp.abs(err) - 0.5)
    return (huber * weight).sum() / jnp.maximum(weight.sum(), 1.0)


@jax.jit
def _adam_step(params, m, v, t, obs, action, target, weight, lr):
    loss, g = jax.value_and_grad(_loss)(params, obs, action, target, weight)
    m = jax.tree_util.tree_map(lambda m_, g_: 0.9 * m_ + 0.1 * g_, m, g)
    v = jax.tree_util.tree_map(lambda v_, g_: 0.999 * v_ + 0.001 * g_ * g_, v, g)
    scale = lr * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
    params = jax.tree_util.tree_map(lambda p, m_, v_: p - scale * m_ / (jnp.sqrt(v_) + 1e-8), params, m, v)
    return params, m, v, loss


def sample(s, a, batch):
    """One batch of one-step rows (the mixture with reanalysed rows once the walk completed a chunk)."""
    if a.reanalysed > 0:
        try:
            return s.sample("replay", a.batch, 1, mixture={"uniform": 1.0 - a.reanalysed, "reanalysed": a.reanalysed},
                            out=batch)
        except shmreplay.EmptyView:  # no fresh step in the view yet: the walk has not completed a chunk
            pass
    return s.sample("replay", a.batch, 1, out=batch)


def check_rows(b, version):
    """Rows that no correct run can show: a target from a version not published yet, a step never reanalysed whose
    value_target is not the pushed 0, or a terminal step whose reanalysed target is not its reward (a write-back
    meant for another step, or a torn row, would show as one of these)."""
    tv, vt = b["target_version"][:, 0].astype(np.int64), b["value_target"][:, 0]
    terminal = b["done"][:, 0] & ~b["truncated"][:, 0]
    bad = (tv > version) | ((tv == 0) & (vt != 0)) | (terminal & (tv > 0) & (vt != b["reward"][:, 0]))
    return int((bad & b.mask[:, 0]).sum())


def main():
    a = parse_args()
    stop, status = StopFlag(), Status("learner")
    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    path = params_path(a.buffer)
    params = {k: jnp.asarray(v) for k, v in init_params(0).items()}
    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    version = 1
    publish(path, params, version)
    updates = rows = trained = violations = 0
    ages, never, losses = [], 0, []
    started = time.monotonic()
    last_print = started
    with shmreplay.Sampler(buf, seed=1) as s:
        print("@ready", flush=True)
        while not stop and not s.wait("replay", a.min_replay, timeout=0.5):
            status.set("waiting for replay steps", have=s.size("replay"), need=a.min_replay)
            status.answer()
        batch = s.new_batch(a.batch, 1)
        while not stop:
            status.answer()
            if a.updates_per_step > 0 and updates >= a.updates_per_step * int(buf.heads().sum()):
                status.set("ahead of the actors", updates=updates)
                time.sleep(0.005)
                continue
            status.set("training", updates=updates, version=version)
            b = sample(s, a, batch)
            tv = b["target_version"][:, 0].astype(np.int64)
            weight = ((tv > 0) & b.mask[:, 0]).astype(np.float32)
            violations += check_rows(b, version)
            ages.extend((version - tv[weight > 0]).tolist())
            never += int((weight == 0).sum())
            params, m, v, loss = _adam_step(params, m, v, updates + 1, jnp.asarray(b["obs"][:, 0]),
                                            jnp.asarray(b["action"][:, 0]), jnp.asarray(b["value_target"][:, 0]),
                                            jnp.asarray(weight), a.lr)
            updates, rows, trained = updates + 1, rows + b.rows, trained + int(weight.sum())
            losses.append(float(loss))
            if updates % a.publish_every == 0:
                version += 1
                publish(path, jax.device_get(params), version)
            now = time.monotonic()
            if now - last_print >= 1.0:
                last_print = now
                counts = age_bucket_counts(ages)
                print(f"[learner] t {now - started:6.1f}s  updates {updates:6d}  version {version:4d}  loss "
                      f"{np.mean(losses[-100:]):7.4f}  target ages " +
                      " ".join(f"{k}:{c}" for k, c in zip(AGE_BUCKETS, counts)) + f"  never:{never}", flush=True)
                ages, never = [], 0
    seconds = time.monotonic() - started
    print("@report " + json.dumps({"role": "learner", "seconds": seconds, "updates": updates, "version": version,
                                   "rows_sampled": rows, "rows_trained": trained, "rows_per_s": rows / seconds,
                                   "violations": violations,
                                   "loss_last": float(np.mean(losses[-100:])) if losses else None}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
