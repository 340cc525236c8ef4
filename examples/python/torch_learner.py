#!/usr/bin/env python3
"""A PyTorch learner on a shmreplay buffer filled by the C++ CartPole actors of the main example.

Run it through the launcher, which creates the buffer, starts the C++ actor processes and this learner in
place of the C++ one, and stops everything at the end:

    build/examples/cartpole_run --seconds 30 --learner ".venv/bin/python examples/python/torch_learner.py"

(with the package installed in .venv by pip; tools/demo.sh --cpp --python does all of it). Or attach it
by hand to a running buffer: ``torch_learner.py --buffer NAME``.

What it does, in the learner's loop:
- waits until the replay view holds --min-replay steps, then, per update, waits for --min-online new steps,
  samples --replay-batch rows from the replay view plus --online-batch rows from the online queue
  (``sample_mixed``, into the same preallocated arrays every time: ``out=``), and resets the online queue;
- checks every valid step against its stamp (env id, step index, FNV-1a checksum of the other fields): the
  buffer must never hand back a torn step or a row that crosses into another env or past the head;
- trains a double DQN (a 4-64-64-2 MLP) on every consecutive pair of steps in the rows, using the mask and the
  done/truncated flags, with a target network updated every --target-every updates;
- every --eval-seconds it runs the greedy policy on 32 CartPoles of its own and prints the mean return.

The C++ actors keep acting with the parameters in the launcher's parameter block (a uniform random policy when
no C++ learner publishes), so this is off-policy learning from the buffer: the evaluation return shows what the
network learned. The last line is "@report {json}" for the launcher. SIGINT/SIGTERM stop it cleanly.
"""

import argparse
import json
import math
import signal
import sys
import time

import numpy as np
import torch

import shmreplay

SCHEMA = ("obs:f32[4] action:i32 logprob:f32 reward:f32 value:f32 done:bool truncated:bool episode_return:f32 "
          "stamp:u64[3]")

stop = False


class Adam:
    """Adam over a list of tensors. (torch.optim's first use imports torch._dynamo, which takes seconds, many more
    on a busy 2-core machine, while the launcher's clock runs; this learner does without it.)"""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.b1, self.b2, self.eps, self.t = params, lr, betas[0], betas[1], eps, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self):
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m.mul_(self.b1).add_(p.grad, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(p.grad, p.grad, value=1 - self.b2)
            p.sub_(self.lr * (m / c1) / ((v / c2).sqrt() + self.eps))
            p.grad = None


def on_signal(signum, frame):
    global stop
    stop = True


def say(text):
    try:
        print(text, flush=True)
    except BrokenPipeError:  # the launcher is gone; keep going until its SIGTERM arrives
        pass


# ---------------------------------------------------------------------------------------------------------------
# Checking what the buffer hands back

FNV_OFFSET = np.uint64(1469598103934665603)
FNV_PRIME = np.uint64(1099511628211)


def checksums(batch):
    """FNV-1a over each step's bytes, seeded with its env id and step index, as the C++ actor computes it."""
    stamp = batch["stamp"]
    cells = stamp.shape[0] * stamp.shape[1]
    parts = [stamp[..., 0], stamp[..., 1], batch["obs"], batch["action"], batch["logprob"], batch["reward"],
             batch["value"], batch["done"], batch["truncated"], batch["episode_return"]]
    raw = np.concatenate([np.ascontiguousarray(p).reshape(cells, -1).view(np.uint8) for p in parts], axis=1)
    h = np.full(cells, FNV_OFFSET, dtype=np.uint64)
    for column in raw.T:
        h = (h ^ column.astype(np.uint64)) * FNV_PRIME
    return h.reshape(stamp.shape[:2])


def violations(batch, heads):
    """Steps of the batch that break the contract: each valid step must carry its own env id, its own step index
    (start + t, so rows are consecutive) and an intact checksum; the mask must be a prefix; no row may pass the
    env's head."""
    mask = batch.mask
    length = mask.shape[1]
    stamp = batch["stamp"]
    steps = batch.starts[:, None] + np.arange(length)[None, :]
    bad = (stamp[..., 0] != batch.env_ids[:, None].astype(np.uint64))
    bad |= stamp[..., 1] != steps.astype(np.uint64)
    bad |= stamp[..., 2] != checksums(batch)
    count = int(np.count_nonzero(bad & mask))
    valid = mask.sum(axis=1)
    count += int(np.count_nonzero(mask != (np.arange(length)[None, :] < valid[:, None])))  # not a prefix
    count += int(np.count_nonzero(batch.starts + valid > heads[batch.env_ids]))
    return count


# ---------------------------------------------------------------------------------------------------------------
# Double DQN

def q_network():
    return torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 2))


def td_loss(online, target, batch, gamma):
    """Huber TD error over every pair (t, t+1) of consecutive valid steps: bootstrap from step t+1's observation
    unless step t ended its episode by termination; a truncated step (whose successor is a reset) is left out."""
    obs = torch.from_numpy(batch["obs"])
    action = torch.from_numpy(batch["action"]).long()
    reward = torch.from_numpy(batch["reward"])
    done = torch.from_numpy(batch["done"])
    truncated = torch.from_numpy(batch["truncated"])
    mask = torch.from_numpy(batch.mask)
    pair = mask[:, :-1] & mask[:, 1:] & ~truncated[:, :-1]
    q = online(obs[:, :-1]).gather(-1, action[:, :-1, None]).squeeze(-1)
    with torch.no_grad():
        next_obs = obs[:, 1:]
        best = online(next_obs).argmax(-1, keepdim=True)
        bootstrap = target(next_obs).gather(-1, best).squeeze(-1)
        y = reward[:, :-1] + gamma * (~done[:, :-1]).float() * bootstrap
    errors = torch.nn.functional.smooth_l1_loss(q, y, reduction="none")
    return (errors * pair.float()).sum() / pair.float().sum().clamp(min=1.0), int(pair.sum())


# ---------------------------------------------------------------------------------------------------------------
# Evaluation on CartPoles of our own (the physics of examples/cartpole/cartpole.hpp, vectorised)

def evaluate(net, envs=32, max_steps=500, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.uniform(-0.05, 0.05, size=(envs, 4))
    alive = np.ones(envs, dtype=bool)
    returns = np.zeros(envs)
    gravity, masscart, masspole, half_length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass, polemass_length = masscart + masspole, masspole * half_length
    for _ in range(max_steps):
        with torch.no_grad():
            action = net(torch.from_numpy(s.astype(np.float32))).argmax(-1).numpy()
        x, x_dot, theta, theta_dot = s.T
        force = np.where(action == 1, force_mag, -force_mag)
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * sin) / total_mass
        theta_acc = (gravity * sin - cos * temp) / (half_length * (4.0 / 3.0 - masspole * cos ** 2 / total_mass))
        x_acc = temp - polemass_length * theta_acc * cos / total_mass
        s = np.stack([x + tau * x_dot, x_dot + tau * x_acc, theta + tau * theta_dot, theta_dot + tau * theta_acc], 1)
        returns += alive
        alive &= (np.abs(s[:, 0]) <= 2.4) & (np.abs(s[:, 2]) <= 12 * 2 * math.pi / 360)
        if not alive.any():
            break
    return float(returns.mean())


# ---------------------------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--buffer", required=True, help="name of the shmreplay buffer")
    p.add_argument("--replay-batch", type=int, default=48)
    p.add_argument("--online-batch", type=int, default=16)
    p.add_argument("--length", type=int, default=8, help="steps per sampled row")
    p.add_argument("--min-replay", type=int, default=2048)
    p.add_argument("--min-online", type=int, default=64)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--target-every", type=int, default=100)
    p.add_argument("--eval-seconds", type=float, default=3.0)
    p.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: at SIGINT/SIGTERM)")
    p.add_argument("--seed", type=int, default=1)
    o = p.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    torch.manual_seed(o.seed)
    torch.set_num_threads(1)  # leave the other cores to the actors

    buf = shmreplay.Buffer.open(o.buffer, schema=SCHEMA, ready_timeout=10.0)
    online, target = q_network(), q_network()
    target.load_state_dict(online.state_dict())
    optimiser = Adam(list(online.parameters()), o.lr)
    report = {"updates": 0, "rows_sampled": 0, "pairs_trained": 0, "retries": 0, "violations": 0}
    losses, evals = [], []
    start = time.monotonic()

    def done():
        return stop or (o.seconds > 0 and time.monotonic() - start >= o.seconds)

    with shmreplay.Sampler(buf, seed=o.seed) as sampler:
        while not done() and not sampler.wait("replay", o.min_replay, timeout=0.2):
            pass
        say(f"replay holds {sampler.size('replay')} steps: training")
        batch = sampler.new_batch(o.replay_batch + o.online_batch, o.length)  # filled in place by every sample
        last_print = last_eval = time.monotonic()
        window = []
        evals.append(evaluate(online))
        while not done():
            if not sampler.wait("online", o.min_online, timeout=0.2):
                continue
            sampler.sample_mixed(o.replay_batch, o.online_batch, o.length, 1.0, out=batch)
            sampler.reset_online_queue()
            report["violations"] += violations(batch, buf.heads())
            loss, pairs = td_loss(online, target, batch, o.gamma)
            loss.backward()
            optimiser.step()
            report["updates"] += 1
            report["rows_sampled"] += batch.rows
            report["pairs_trained"] += pairs
            window.append(float(loss))
            if report["updates"] % o.target_every == 0:
                target.load_state_dict(online.state_dict())
            now = time.monotonic()
            if now - last_eval >= o.eval_seconds:
                evals.append(evaluate(online))
                last_eval = now
            if now - last_print >= 1.0:
                losses.append(sum(window) / len(window))
                say(f"{now - start:6.1f} s  updates {report['updates']:6d}  td loss {losses[-1]:.4f}  "
                    f"greedy return {evals[-1]:6.1f}  rows/s {report['rows_sampled'] / (now - start):8.0f}  "
                    f"retries {sampler.retries}  violations {report['violations']}")
                window, last_print = [], now
        report["retries"] = sampler.retries
    if window:
        losses.append(sum(window) / len(window))
    evals.append(evaluate(online))
    report.update({"loss_first": losses[0] if losses else 0.0, "loss_last": losses[-1] if losses else 0.0,
                   "eval_return_first": evals[0], "eval_return_last": evals[-1], "eval_return_best": max(evals),
                   "learner": "torch_learner.py"})
    say("@report " + json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
