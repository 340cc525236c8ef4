#!/usr/bin/env python3
"""SB3's DQN on an Atari game whose replay buffer actor processes fill too (ALE from PyPI: ale-py ships the ROMs):

- the learner (this process): ``DQN("CnnPolicy", ...)`` on SB3's Atari envs (``make_atari_env``, 4 frames stacked),
  ``replay_buffer_class=shmreplay.sb3.ReplayBuffer`` with ``stack_axis=0`` (each frame stored once) and one writer
  block per process; its own env steps go to the first block, and every ``--sync`` steps it saves its policy to a
  file;
- each actor process: ``shmreplay.sb3.ReplayBuffer.attach(name)``, the same Atari envs, epsilon-greedy actions of
  the newest policy file (random ones before the first), and ``add`` as SB3's DQN calls it (the final observation
  as ``next_obs`` where an episode ended);
- at the end the learner prints the steps each process stored, the buffer's bytes, the training episodes' returns,
  and checks a sample: every transition's next stack is its stack moved on by one frame (``next_obs[:3] ==
  obs[1:]``), whichever process added it.

    python examples/python/sb3_atari.py --game BreakoutNoFrameskip-v4 --steps 20000 --actors 1

Needs ``pip install "shmreplay[sb3,atari]"`` (Stable-Baselines3 and ale-py). Exits 1 if a check fails.
"""
import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np


def make_envs(game, n_envs, seed):
    """SB3's Atari envs as DQN sees them: 84x84 grey frames, 4 stacked, channels first ``(4, 84, 84)``."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage
    gym.register_envs(ale_py)
    return VecTransposeImage(VecFrameStack(make_atari_env(game, n_envs=n_envs, seed=seed), n_stack=4))


def actor(name, game, n_envs, seed, policy_path, epsilon, stop, added):
    """Adds the steps of its own envs to the learner's buffer until ``stop`` is set; ``added``: its count."""
    import torch
    from stable_baselines3 import DQN
    import shmreplay.sb3
    torch.set_num_threads(1)
    rb = shmreplay.sb3.ReplayBuffer.attach(name, device="cpu")
    envs = make_envs(game, n_envs, seed)
    policy = DQN("CnnPolicy", envs, buffer_size=1, device="cpu").policy  # the network the learner's file fills
    rng = np.random.default_rng(seed)
    loaded = None
    obs = envs.reset()
    while not stop.is_set():
        if os.path.exists(policy_path) and os.path.getmtime(policy_path) != loaded:
            loaded = os.path.getmtime(policy_path)
            policy.load_state_dict(torch.load(policy_path, weights_only=True))
        actions = (policy.predict(obs, deterministic=True)[0] if loaded is not None
                   else rng.integers(0, envs.action_space.n, n_envs))
        explore = rng.random(n_envs) < epsilon
        actions[explore] = rng.integers(0, envs.action_space.n, int(explore.sum()))
        new_obs, rewards, dones, infos = envs.step(actions)
        next_obs = new_obs.copy()
        for i, done in enumerate(dones):  # as DQN's _store_transition: the final observation where one ended
            if done and infos[i].get("terminal_observation") is not None:
                next_obs[i] = infos[i]["terminal_observation"]
        rb.add(obs, next_obs, actions, rewards, dones, infos)
        added.value += n_envs
        obs = new_obs
    rb.close()
    envs.close()


def check_sample(rb, batch_size):
    """Every sampled transition's next stack is its stack moved on by one frame; returns the rows that are not."""
    batch = rb.sample(batch_size)
    obs, nxt = batch.observations.numpy(), batch.next_observations.numpy()
    return int((nxt[:, :3] != obs[:, 1:]).reshape(batch_size, -1).any(axis=1).sum())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="BreakoutNoFrameskip-v4")
    parser.add_argument("--steps", type=int, default=20_000, help="the learner's env steps (DQN's budget)")
    parser.add_argument("--actors", type=int, default=1, help="actor processes")
    parser.add_argument("--envs", type=int, default=2, help="envs per process (the learner's and each actor's)")
    parser.add_argument("--buffer-size", type=int, default=50_000, help="transitions, all processes together")
    parser.add_argument("--learning-starts", type=int, default=1000)
    parser.add_argument("--sync", type=int, default=1000, help="learner steps between policy files")
    parser.add_argument("--epsilon", type=float, default=0.1, help="the actors' exploration")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    import shmreplay.sb3
    torch.set_num_threads(1)

    work = tempfile.mkdtemp(prefix="sb3-atari-")
    policy_path = os.path.join(work, "policy.pt")

    class SavePolicy(BaseCallback):
        def _on_step(self):
            if self.n_calls % max(args.sync // args.envs, 1) == 0:
                torch.save(self.model.policy.state_dict(), policy_path + ".tmp")
                os.replace(policy_path + ".tmp", policy_path)
            return True

    # rl-baselines3-zoo's Atari DQN, with a short budget: it starts learning after --learning-starts steps
    model = DQN("CnnPolicy", make_envs(args.game, args.envs, args.seed), learning_rate=1e-4, batch_size=32,
                buffer_size=args.buffer_size, learning_starts=args.learning_starts, train_freq=4,
                target_update_interval=1000, exploration_fraction=0.1, exploration_final_eps=0.01, seed=args.seed,
                device="cpu", replay_buffer_class=shmreplay.sb3.ReplayBuffer,
                replay_buffer_kwargs=dict(writers=1 + args.actors, stack_axis=0))
    rb = model.replay_buffer
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    added = [ctx.Value("q", 0) for _ in range(args.actors)]
    actors = [ctx.Process(target=actor, args=(rb.name, args.game, args.envs, args.seed + 1 + k, policy_path,
                                              args.epsilon, stop, added[k])) for k in range(args.actors)]
    try:
        for p in actors:
            p.start()
        deadline = time.monotonic() + 300
        while not all(a.value for a in added) and time.monotonic() < deadline:  # until every actor has added
            if not all(p.is_alive() for p in actors):
                break
            time.sleep(0.1)
        before = [a.value for a in added]
        start = time.perf_counter()
        model.learn(args.steps, callback=SavePolicy())
        seconds = time.perf_counter() - start
    finally:  # the actors stop however the learner ends
        stop.set()
        for p in actors:
            p.join()
        shutil.rmtree(work, ignore_errors=True)

    returns = [e["r"] for e in model.ep_info_buffer]
    stored = int(rb.buffer.heads().sum())  # steps pushed by every process: transitions and episode starts
    print(f"buffer {rb.name}: {rb.buffer.total_bytes / 1e9:.3f} GB for {args.buffer_size} transitions; "
          f"{stored} steps pushed, {rb.size()} observations held")
    print(f"learner: added {model.num_timesteps} transitions, {model._n_updates} gradient steps in {seconds:.0f} s "
          f"({model.num_timesteps / seconds:.0f} transitions/s)")
    for k in range(args.actors):
        rate = (added[k].value - before[k]) / seconds
        print(f"actor {k + 1}: added {added[k].value} transitions ({rate:.0f} transitions/s while the learner ran)")
    if returns:
        print(f"learner's last {len(returns)} training episodes: mean return {statistics.mean(returns):.2f}")
    bad = check_sample(rb, 256)
    ok = bad == 0 and all(a.value > 0 for a in added) and all(p.exitcode == 0 for p in actors)
    print(f"sample of 256: {bad} transitions whose next stack is not the stack moved on by one frame; "
          f"actors' exit codes {[p.exitcode for p in actors]}: {'ok' if ok else 'FAILED'}")
    rb.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
