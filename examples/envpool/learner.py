"""The PyTorch learner of the envpool example: samples replay and online rows from the shmreplay buffer that the
envpool actors fill, checks every valid step's stamp, trains the linear actor-critic with V-trace targets
(IMPALA; the C++ example's agent, here with autograd), and publishes its parameters for the actors.

    python examples/envpool/learner.py --buffer NAME

Each update: wait for 256 online steps, sample 32 replay + 32 online rows of 16 steps (start weight
min(remaining, 16)), reset the online queue, one Adam step. Once a second it prints a line; at the end (SIGTERM,
SIGINT or --seconds) one JSON report line (@report)."""
import argparse
import json
import sys
import time

import numpy as np
import torch

import shmreplay
import shmreplay.torch
from common import (GAMMA, NUM_PARAMS, POLICY_FEATURES, VALUE_SCALE, StopFlag, checksum, params_path,
                    policy_features, publish, value_features)



def check_rows(batch, heads):
    """Violations among the valid steps: a stamp naming another env or step, a checksum that does not match, a
    mask that is not a prefix, a row past its env's head."""
    mask, stamp = batch.mask, batch["stamp"]
    length = mask.shape[1]
    steps = batch.starts[:, None].astype(np.uint64) + np.arange(length, dtype=np.uint64)[None, :]
    env = np.broadcast_to(batch.env_ids[:, None].astype(np.uint64), mask.shape)
    sums = checksum(env, steps, {k: batch[k] for k in ("obs", "action", "logprob", "reward", "value", "done",
                                                       "truncated", "episode_return")})
    bad = ((stamp[..., 0] != env) | (stamp[..., 1] != steps) | (stamp[..., 2] != sums)) & mask
    valid = mask.sum(axis=1)
    bad_prefix = np.any(mask != (np.arange(length)[None, :] < valid[:, None]), axis=1)
    past_head = batch.starts + valid > heads[batch.env_ids]
    return int(bad.sum() + bad_prefix.sum() + past_head.sum())


def vtrace_targets(logpi, behaviour_logprob, v, reward, done, mask):
    """V-trace (lambda = 1, rho-bar = c-bar = 1) over rows [B, L], in NumPy: the value targets vs, the policy
    advantages, and which steps are trained (those whose successor is in the row, or that ended an episode)."""
    next_valid = np.concatenate([mask[:, 1:], np.zeros_like(mask[:, :1])], axis=1)
    trained = mask & (done | next_valid)
    rho = np.minimum(1.0, np.exp(logpi - behaviour_logprob))
    v_next = np.concatenate([v[:, 1:], np.zeros_like(v[:, :1])], axis=1) * ~done
    vs = v.copy()
    carry = np.zeros(v.shape[0])          # vs_{t+1} - v_{t+1} along a chain of trained steps
    length = v.shape[1]
    for t in reversed(range(length)):
        chained = trained[:, t] & ~done[:, t] & (trained[:, t + 1] if t + 1 < length else False)
        delta = rho[:, t] * (reward[:, t] + GAMMA * v_next[:, t] - v[:, t])
        vs[:, t] = v[:, t] + delta + GAMMA * rho[:, t] * np.where(chained, carry, 0.0)
        carry = vs[:, t] - v[:, t]
    vs_next = np.concatenate([vs[:, 1:], np.zeros_like(vs[:, :1])], axis=1)
    next_trained = np.concatenate([trained[:, 1:], np.zeros_like(trained[:, :1])], axis=1)
    q = reward + GAMMA * np.where(next_trained & ~done, vs_next, v_next) * ~done
    return vs, rho * (q - v), trained


def vtrace_loss(params, b, entropy_coef):
    """The loss of one batch: V-trace value regression plus the policy gradient with an entropy bonus; and the
    mean squared V-trace error, for the progress lines."""
    mask = b.mask
    f = torch.from_numpy(policy_features(b["obs"]))            # [B, L, 5]
    psi = torch.from_numpy(value_features(b["obs"]))           # [B, L, 15]
    logit = (f @ params[:POLICY_FEATURES]).clamp(-30, 30)
    v = VALUE_SCALE * (psi @ params[POLICY_FEATURES:])
    action = torch.from_numpy(b["action"] == 1)
    logpi = torch.nn.functional.logsigmoid(torch.where(action, logit, -logit))
    vs, advantage, trained = vtrace_targets(logpi.detach().numpy(), b["logprob"].astype(np.float64),
                                            v.detach().numpy(), b["reward"].astype(np.float64),
                                            b["done"] & mask, mask)
    n = max(1, int(trained.sum()))
    w = torch.from_numpy(trained.astype(np.float64)) / n
    value_loss = (((torch.from_numpy(vs) - v) / VALUE_SCALE) ** 2 * w).sum()
    p = torch.sigmoid(logit)
    entropy = -(p * torch.log(p + 1e-12) + (1 - p) * torch.log(1 - p + 1e-12))
    policy_loss = -((torch.from_numpy(advantage / VALUE_SCALE) * logpi + entropy_coef * entropy) * w).sum()
    return value_loss + policy_loss, float(((vs - v.detach().numpy()) ** 2 * trained).sum() / n)


class Adam:
    """Adam on one parameter tensor. (torch.optim's first use imports torch._dynamo, which takes many seconds on a
    busy 2-core machine; a learner that must start fast does without it.)"""

    def __init__(self, param, lr, betas=(0.9, 0.999), eps=1e-8):
        self.param, self.lr, self.b1, self.b2, self.eps = param, lr, betas[0], betas[1], eps
        self.m, self.v, self.t = torch.zeros_like(param), torch.zeros_like(param), 0

    @torch.no_grad()
    def step(self):
        g = self.param.grad
        self.t += 1
        self.m.mul_(self.b1).add_(g, alpha=1 - self.b1)
        self.v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
        m_hat = self.m / (1 - self.b1 ** self.t)
        v_hat = self.v / (1 - self.b2 ** self.t)
        self.param.sub_(self.lr * m_hat / (v_hat.sqrt() + self.eps))
        self.param.grad = None


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
    p.add_argument("--min-online", type=int, default=256, help="online steps to wait for before each update")
    p.add_argument("--quiet", action="store_true", help="no per-second lines")
    a = p.parse_args()

    stop = StopFlag()
    torch.set_num_threads(1)

    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    path = params_path(a.buffer)
    params = torch.zeros(NUM_PARAMS, dtype=torch.float64, requires_grad=True)
    opt = Adam(params, a.lr)
    publish(path, params.detach().numpy())
    updates = rows = violations = 0
    losses = []
    started = time.monotonic()
    last_print = next_publish = started
    with shmreplay.Sampler(buf, seed=1) as s:
        print("@ready", flush=True)
        while not stop and not s.wait("replay", a.min_replay, timeout=0.5):
            pass
        batch = s.new_batch(a.replay_rows + a.online_rows, a.length)
        while not stop and (a.seconds <= 0 or time.monotonic() - started < a.seconds):
            if not s.wait("online", a.min_online, timeout=0.5):
                continue
            s.sample_mixed(a.replay_rows, a.online_rows, a.length, 1.0, out=batch)
            s.reset_online_queue()
            violations += check_rows(batch, buf.heads())  # heads only grow: a row past them now was past then
            loss, value_error = vtrace_loss(params, batch, a.entropy)
            loss.backward()
            opt.step()
            if time.monotonic() >= next_publish:  # the actors poll every 100 ms; a file per update is waste
                publish(path, params.detach().numpy())
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
    report = {"role": "learner", "seconds": seconds, "updates": updates, "rows_sampled": rows,
              "rows_per_s": rows / seconds, "updates_per_s": updates / seconds, "violations": violations,
              "retries": retries, "loss_first": float(np.mean(losses[:50])) if losses else None,
              "loss_last": float(np.mean(losses[-50:])) if losses else None}
    print("@report " + json.dumps(report), flush=True)


if __name__ == "__main__":
    sys.exit(main())
