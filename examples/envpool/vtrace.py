"""What the envpool example's learners share, in NumPy: the check of every sampled step's stamp, and V-trace targets
(IMPALA, lambda = 1, rho-bar = c-bar = 1) over rows of sampled sequences."""
import numpy as np

from common import GAMMA, checksum


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
