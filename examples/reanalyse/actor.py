"""An envpool actor of the reanalyse example: N CartPoles in envpool's async mode, acting epsilon-greedily with the
Q-network the learner last published, pushing each returned env's step into the buffer under the env ids
[first, first + N) (as examples/envpool/actor.py does, without its stamp), with the derived fields' initial
values: value_target 0 and target_version 0 (never reanalysed).

    python examples/reanalyse/actor.py --buffer NAME --first-env 0 --num-envs 8 --batch-size 4

Epsilon falls linearly from 1 to --final-epsilon over --explore-steps pushed steps. Every 5 s a @progress line
(the episodes that ended since the last one); at the end (SIGTERM, SIGINT or --seconds) one @report line."""
import argparse
import json
import sys
import time

import numpy as np

import shmreplay
from qnet import ParamsFile, Status, StopFlag, params_path, q_values

PROGRESS_EVERY = 5.0


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffer", required=True)
    p.add_argument("--first-env", type=int, default=0)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--explore-steps", type=int, default=20000)
    p.add_argument("--final-epsilon", type=float, default=0.02)
    p.add_argument("--max-steps-per-s", type=float, default=0, help="pace the pushes (0: as fast as it goes)")
    return p.parse_args()


def main():
    a = parse_args()
    stop, status = StopFlag(), Status(f"actor {a.first_env // max(a.num_envs, 1)}")
    import warnings
    warnings.filterwarnings("ignore", category=UserWarning, module="gymnasium")
    import envpool
    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=a.num_envs, batch_size=a.batch_size,
                       seed=a.seed)
    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    writer = shmreplay.Writer.range(buf, a.first_env, a.num_envs)
    rng = np.random.default_rng(a.seed)
    params_file = ParamsFile(params_path(a.buffer))
    n = a.num_envs
    prev_obs, prev_action = np.zeros((n, 4), np.float32), np.zeros(n, np.int32)
    ep_return = np.zeros(n)
    returns, pushed, progress_from = [], 0, 0
    started = time.monotonic()
    next_params, next_progress = started, started + PROGRESS_EVERY
    env.async_reset()
    print("@ready", flush=True)
    while not stop:
        status.answer()
        status.set("stepping the envs", pushed=pushed)
        obs, reward, terminated, truncated, info = env.recv()
        ids = np.asarray(info["env_id"])
        real = np.asarray(info["elapsed_step"]) > 0  # not the reset observation of a new episode
        if real.any():
            e = ids[real]
            done = terminated[real] | truncated[real]
            ep_return[e] += reward[real]
            writer.push(e.astype(np.int32) + a.first_env, {
                "obs": prev_obs[e], "action": prev_action[e], "reward": reward[real].astype(np.float32),
                "done": done, "truncated": truncated[real] & ~terminated[real],
                "episode_return": np.where(done, ep_return[e], 0).astype(np.float32),
                "value_target": np.zeros(len(e), np.float32), "target_version": np.zeros(len(e), np.uint32)})
            pushed += len(e)
            for k in e[done]:
                returns.append(float(ep_return[k]))
                ep_return[k] = 0
        now = time.monotonic()
        if now >= next_params:
            params_file.load()
            next_params = now + 0.1
        if now >= next_progress:
            fresh = returns[progress_from:]
            print("@progress " + json.dumps({"t": round(now - started, 1), "episodes": len(fresh),
                                             "return_sum": float(np.sum(fresh)), "pushed": pushed}), flush=True)
            progress_from, next_progress = len(returns), next_progress + PROGRESS_EVERY
        epsilon = max(a.final_epsilon, 1.0 - pushed / a.explore_steps)
        action = rng.integers(0, 2, len(ids)).astype(np.int32)
        if params_file.params is not None:
            greedy = q_values(params_file.params, obs).argmax(axis=1).astype(np.int32)
            action = np.where(rng.random(len(ids)) < epsilon, action, greedy)
        prev_obs[ids], prev_action[ids] = obs, action
        env.send(action, ids)
        if a.max_steps_per_s > 0:
            ahead = pushed / a.max_steps_per_s - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    seconds = time.monotonic() - started
    writer.close()
    print("@report " + json.dumps({
        "role": "actor", "first_env": a.first_env, "seconds": seconds, "pushes": pushed,
        "env_steps_per_s": pushed / seconds, "episodes": len(returns),
        "return_last": float(np.mean(returns[-100:])) if returns else None,
        "param_versions": params_file.version}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
