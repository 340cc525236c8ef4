"""An envpool actor process: N CartPoles in envpool's async mode, pushing exactly the envs each recv returns into a
shmreplay buffer, under the env ids [first, first + N) that it leases, and acting with the parameters the learner
last published.

    python examples/envpool/actor.py --buffer NAME --first-env 0 --num-envs 16 --batch-size 8

Each recv gives, per returned env, the outcome of its last action (reward, terminated, truncated) and the next
observation. The actor pushes the step (observation acted on, action, logprob, value, reward, done, ...) and
sends the next action. A recv right after an episode ended returns the reset observation (elapsed_step 0): that
is no transition, so nothing is pushed for it. It prints one JSON report line (@report) when it stops (SIGTERM,
SIGINT or --seconds), and every 10 s a @progress line with the episodes that ended since the last one."""
import argparse
import json
import sys
import time

import numpy as np

import shmreplay
from common import NUM_PARAMS, Status, StopFlag, act, checksum, params_path, read_params

PROGRESS_EVERY = 10.0  # seconds between @progress lines


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffer", required=True)
    p.add_argument("--task", default="CartPole-v1")
    p.add_argument("--first-env", type=int, default=0)
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until SIGTERM)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--wait-for-rate-limit", action="store_true",
                   help="pushes wait while the buffer's rate limiter says the actors are ahead of the learner")
    return p.parse_args()


def push_until_taken(writer, env_ids, fields, status, stop, pushed):
    """Pushes the steps, retrying while the rate limiter holds them back (the learner is behind: wait for it);
    False when asked to stop first."""
    while True:
        try:
            writer.push(env_ids, fields)
            return True
        except shmreplay.RateLimited as err:
            status.set("held back by the rate limiter", pushed=pushed, why=str(err))
            status.answer()
            if stop:
                return False


def main():
    a = parse_args()

    stop = StopFlag()
    status = Status(f"actor {a.first_env // max(a.num_envs, 1)}")

    import warnings
    warnings.filterwarnings("ignore", category=UserWarning, module="gymnasium")  # envpool's spaces: float64 bounds
    import envpool  # after the handlers: importing takes a moment
    env = envpool.make(a.task, env_type="gymnasium", num_envs=a.num_envs, batch_size=a.batch_size, seed=a.seed)
    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    # A short timeout, retried below, so that SIGTERM is seen while the limiter holds a push back.
    writer = shmreplay.Writer.range(buf, a.first_env, a.num_envs, wait_for_rate_limit=a.wait_for_rate_limit,
                                    rate_limit_timeout=0.5)
    rng = np.random.default_rng(a.seed)
    params, version_mtime, versions = np.zeros(NUM_PARAMS), 0, 0
    path = params_path(a.buffer)

    n = a.num_envs
    prev_obs = np.zeros((n, 4), np.float32)
    prev_action, prev_logprob, prev_value = np.zeros(n, np.int32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    steps = np.zeros(n, np.uint64)          # pushed per env: the next step's index
    ep_return = np.zeros(n, np.float64)
    returns = []                            # finished episodes' returns
    pushed = recvs = 0
    started = time.monotonic()
    next_params = started
    next_progress, progress_from = started + PROGRESS_EVERY, 0   # returns[progress_from:] not yet reported
    env.async_reset()
    print("@ready", flush=True)
    while not stop and (a.seconds <= 0 or time.monotonic() - started < a.seconds):
        status.answer()
        status.set("stepping the envs", pushed=pushed)
        obs, reward, terminated, truncated, info = env.recv()
        ids = np.asarray(info["env_id"])
        recvs += 1
        real = np.asarray(info["elapsed_step"]) > 0     # not the reset observation of a new episode
        if real.any():
            e = ids[real]
            done = terminated[real] | truncated[real]
            ep_return[e] += reward[real]
            fields = {"obs": prev_obs[e], "action": prev_action[e], "logprob": prev_logprob[e],
                      "reward": reward[real].astype(np.float32), "value": prev_value[e], "done": done,
                      "truncated": truncated[real] & ~terminated[real],
                      "episode_return": np.where(done, ep_return[e], 0).astype(np.float32)}
            stamp = np.stack([e.astype(np.uint64) + np.uint64(a.first_env), steps[e],
                              checksum(e.astype(np.uint64) + np.uint64(a.first_env), steps[e], fields)], axis=1)
            fields["stamp"] = stamp
            if not push_until_taken(writer, e.astype(np.int32) + a.first_env, fields, status, stop, pushed):
                break
            steps[e] += 1
            pushed += len(e)
            for k in e[done]:
                returns.append(float(ep_return[k]))
                ep_return[k] = 0
        now = time.monotonic()
        if now >= next_params:
            fresh, version_mtime = read_params(path, version_mtime)
            if fresh is not None and fresh.shape == (NUM_PARAMS,):
                params, versions = fresh, versions + 1
            next_params = now + 0.1
        if now >= next_progress:  # the learning curve: the episodes that ended in the last PROGRESS_EVERY seconds
            fresh = returns[progress_from:]
            print("@progress " + json.dumps({"t": round(now - started, 1), "episodes": len(fresh),
                                             "return_sum": float(np.sum(fresh))}), flush=True)
            progress_from, next_progress = len(returns), next_progress + PROGRESS_EVERY
        action, logprob, value = act(params, obs, rng)
        prev_obs[ids], prev_action[ids], prev_logprob[ids], prev_value[ids] = obs, action, logprob, value
        env.send(action, ids)
    seconds = time.monotonic() - started
    writer.close()
    report = {"role": "actor", "first_env": a.first_env, "num_envs": n, "seconds": seconds, "pushes": pushed,
              "env_steps_per_s": pushed / seconds, "recvs": recvs, "episodes": len(returns),
              "return_first": float(np.mean(returns[:100])) if returns else None,
              "return_last": float(np.mean(returns[-100:])) if returns else None,
              "param_versions": versions}
    print("@report " + json.dumps(report), flush=True)


if __name__ == "__main__":
    sys.exit(main())
