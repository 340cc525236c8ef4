#!/usr/bin/env python3
"""Two kinds of actor processes filling one shmreplay buffer, and a learner drawing transitions from it:

- a Gymnasium actor: ``gymnasium.vector.AsyncVectorEnv`` of CartPole-v1 (same-step autoreset: the final observation
  comes in ``info["final_obs"]``) wrapped in ``shmreplay.gymnasium.ReplayWriter``, env ids [0, 4);
- a PufferLib actor: ``pufferlib.vector.make`` of the same env under PufferLib's emulation (its reset observation
  comes one recv after the end) wrapped in ``shmreplay.pufferlib.ReplayWriter``, env ids [4, 8);
- the learner (this process): ``Transitions(buffer).sample(...)`` gives obs, action, reward, next_obs, terminated,
  truncated. It checks what CartPole guarantees: a terminated transition's next observation is the final one, out
  of bounds (|x| > 2.4 or |angle| > 12 degrees), never a reset observation (all within 0.05).

    python examples/python/actors.py --steps 500

Needs ``pip install "shmreplay[gymnasium,pufferlib]"``. Prints one line per draw and exits 1 if a check fails.
"""
import argparse
import multiprocessing as mp
import os
import sys

import numpy as np

import shmreplay
import shmreplay.gymnasium as sg


def gymnasium_actor(name, steps):
    import gymnasium as gym
    envs = gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4, autoreset_mode="SameStep")
    envs = sg.ReplayWriter(envs, shmreplay.Buffer.open(name), first_env=0)
    obs, _ = envs.reset(seed=1)
    for _ in range(steps):
        obs, *_ = envs.step(envs.action_space.sample())
    envs.close()


def pufferlib_actor(name, steps):
    import gymnasium as gym
    import pufferlib.emulation
    import pufferlib.vector
    import shmreplay.pufferlib as sp

    def creator(buf=None, seed=0):
        return pufferlib.emulation.GymnasiumPufferEnv(env_creator=gym.make, env_args=["CartPole-v1"], buf=buf,
                                                      seed=seed)
    vecenv = pufferlib.vector.make(creator, num_envs=4, backend=pufferlib.vector.Serial)
    vecenv = sp.ReplayWriter(vecenv, shmreplay.Buffer.open(name), first_env=4)
    vecenv.async_reset(seed=2)
    rng = np.random.default_rng(2)
    for _ in range(steps):
        obs, rewards, terminals, truncations, _teacher, infos, env_ids, masks = vecenv.recv()
        vecenv.send(rng.integers(0, 2, len(env_ids)).astype(np.int32))
    vecenv.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=500, help="vector steps per actor")
    p.add_argument("--name", default=f"actors-{os.getpid()}")
    a = p.parse_args()
    import gymnasium as gym
    spec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])  # for the spaces only
    buf = sg.create_buffer(a.name, spec, capacity=4 * a.steps, num_envs=8)
    spec.close()
    try:
        ctx = mp.get_context("spawn")
        actors = [ctx.Process(target=f, args=(a.name, a.steps)) for f in (gymnasium_actor, pufferlib_actor)]
        for actor in actors:
            actor.start()
        for actor in actors:
            actor.join()
        if any(actor.exitcode != 0 for actor in actors):
            print("an actor failed", file=sys.stderr)
            return 1
        transitions = sg.Transitions(buf, seed=0)
        batch = transitions.sample(4096)
        ended = batch["terminated"]
        x, angle = batch["next_obs"][:, 0], batch["next_obs"][:, 2]
        out_of_bounds = (np.abs(x) > 2.4) | (np.abs(angle) > 12 * 2 * np.pi / 360)
        print(f"stored {int(buf.heads().sum())} steps; drew {len(ended)} transitions from envs "
              f"{sorted(set(batch['env_ids'].tolist()))}, {int(ended.sum())} terminated, "
              f"{int(batch['truncated'].sum())} truncated")
        transitions.close()
        if not np.all(out_of_bounds[ended]) or np.any(out_of_bounds[~ended]):
            print("a terminated transition's next observation is not CartPole's final one", file=sys.stderr)
            return 1
        return 0
    finally:
        shmreplay.Buffer.remove(a.name)


if __name__ == "__main__":
    sys.exit(main())
