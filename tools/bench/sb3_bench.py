#!/usr/bin/env python3
"""shmreplay.sb3 against SB3's own replay buffer, in one process: learning (DQN on CartPole-v1 over seeds, SAC on
Pendulum-v1: the mean return of the last evaluation, same budget), the memory of a 10^6-step Atari DQN buffer, and the
time of ``sample`` (batch 32 and 256, Atari and small observations). Prints Markdown tables (docs/benchmarks/sb3.md).

    .venv/bin/python tools/bench/sb3_bench.py [--dqn-steps 50000] [--sac-steps 10000] [--seeds 0 1 2] [--only NAME]

A run by hand (the learning table: about 20 minutes on 2 cores); CI runs none of it. Torch runs one thread
(--threads): on a shared 2-core machine more threads made the small networks' updates several times slower.
"""
import argparse
import statistics
import time

import numpy as np
import torch
from gymnasium import spaces

import shmreplay
import shmreplay.sb3
from stable_baselines3 import DQN, SAC
from stable_baselines3.common import buffers as sb3_buffers
from stable_baselines3.common.evaluation import evaluate_policy

BUFFERS = {"SB3 ReplayBuffer": None, "shmreplay.sb3.ReplayBuffer": shmreplay.sb3.ReplayBuffer}


def learn(algo, env_id, steps, seed, buffer_class, **kw):
    model = algo("MlpPolicy", env_id, seed=seed, device="cpu", replay_buffer_class=buffer_class, **kw)
    start = time.perf_counter()
    model.learn(steps)
    seconds = time.perf_counter() - start
    mean, _ = evaluate_policy(model, model.get_env(), n_eval_episodes=10, deterministic=True)
    if buffer_class is not None:
        model.replay_buffer.close()
    return mean, seconds


def learning_table(args):
    # rl-baselines3-zoo's hyperparameters for CartPole-v1 (DQN, its budget 5e4 steps) and Pendulum-v1 (SAC, its budget
    # 2e4 steps; the default here is half of that)
    dqn = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
               target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
               exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))
    sac = dict(learning_rate=1e-3, buffer_size=100_000, learning_starts=1000)
    print(f"\n### Learning: mean evaluation return (10 episodes, deterministic) after the same budget\n")
    print("| task | budget | buffer | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean | seconds |")
    print("|---|---|---|" + "---|" * (len(args.seeds) + 2))
    for task, algo, env_id, steps, kw in (("DQN CartPole-v1", DQN, "CartPole-v1", args.dqn_steps, dqn),
                                          ("SAC Pendulum-v1", SAC, "Pendulum-v1", args.sac_steps, sac)):
        for label, cls in BUFFERS.items():
            runs = [learn(algo, env_id, steps, s, cls, **kw) for s in args.seeds]
            returns = [f"{r:.1f}" for r, _ in runs]
            print(f"| {task} | {steps} steps | {label} | " + " | ".join(returns) +
                  f" | {statistics.mean(r for r, _ in runs):.1f} | {sum(t for _, t in runs):.0f} |", flush=True)


ATARI = spaces.Box(0, 255, (4, 84, 84), np.uint8)
SMALL = spaces.Box(-10, 10, (4,), np.float32)


def fill(rb, space, steps, n_envs, episode=1000, seed=0):
    """Atari-like frame stacks (one new frame per step, zero padding at episode starts) or small random vectors."""
    rng = np.random.default_rng(seed)
    obs = np.zeros((n_envs, *space.shape), space.dtype)
    for t in range(steps):
        if space.dtype == np.uint8:
            frame = rng.integers(0, 256, (n_envs, 1, *space.shape[1:]), np.uint8)
            nxt = np.concatenate([obs[:, 1:], frame], axis=1)
        else:
            nxt = rng.standard_normal((n_envs, *space.shape)).astype(space.dtype)
        done = np.full(n_envs, t % episode == episode - 1)
        rb.add(obs, nxt, rng.integers(0, 4, (n_envs, 1)), np.ones(n_envs, np.float32), done,
               [{} for _ in range(n_envs)])
        obs = np.zeros_like(nxt) if done[0] else nxt


def memory_table(args):
    n_envs, partial = 8, args.atari_partial
    action = spaces.Discrete(4)
    print(f"\n### Memory of a 10^6-step Atari DQN buffer (obs u8[4,84,84], {n_envs} envs)\n")
    print("| buffer | bytes for 10^6 steps | how measured |")
    print("|---|---|---|")
    for optimize in (False, True):  # 10^6 steps do not fit this machine: 10^5, whose arrays are a tenth
        rb = sb3_buffers.ReplayBuffer(10**5, ATARI, action, "cpu", n_envs=n_envs, optimize_memory_usage=optimize,
                                      handle_timeout_termination=not optimize)
        total = sum(a.nbytes for a in (rb.observations, rb.actions, rb.rewards, rb.dones, rb.timeouts))
        total += rb.next_observations.nbytes if not optimize else 0
        print(f"| SB3, optimize_memory_usage={optimize} | {total * 10 / 1e9:.2f} GB | the arrays' nbytes of a "
              f"10^5-step buffer ({total / 1e9:.2f} GB), x 10 (SB3 fills them as it adds) |", flush=True)
        del rb
    rb = shmreplay.sb3.ReplayBuffer(partial, ATARI, action, "cpu", n_envs=n_envs, stack_axis=0)
    fill(rb, ATARI, partial // n_envs + 10, n_envs)
    per_step = rb.buffer.total_bytes / partial
    print(f"| shmreplay.sb3, stack_axis=0 | {per_step * 1e6 / 1e9:.2f} GB | a {partial}-step buffer filled "
          f"({rb.buffer.total_bytes / 1e9:.3f} GB segment, all reserved at creation), x {10**6 // partial} |")
    rb.close()


def timed(fn, calls):
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def speed_table(args):
    n_envs, steps = 8, args.fill
    print(f"\n### sample(): median seconds per call, {steps * n_envs} transitions stored ({n_envs} envs)\n")
    print("| observation | batch | SB3 ReplayBuffer | SB3, optimize_memory_usage | shmreplay.sb3 | SB3 / ours |")
    print("|---|---|---|---|---|---|")
    for label, space, extra in (("u8[4,84,84]", ATARI, dict(stack_axis=0)), ("f32[4]", SMALL, {})):
        rbs = [sb3_buffers.ReplayBuffer(steps * n_envs, space, spaces.Discrete(4), "cpu", n_envs=n_envs),
               sb3_buffers.ReplayBuffer(steps * n_envs, space, spaces.Discrete(4), "cpu", n_envs=n_envs,
                                        optimize_memory_usage=True, handle_timeout_termination=False),
               shmreplay.sb3.ReplayBuffer(steps * n_envs, space, spaces.Discrete(4), "cpu", n_envs=n_envs, **extra)]
        for rb in rbs:
            fill(rb, space, steps, n_envs)
        for batch in (32, 256):
            t = [timed(lambda rb=rb: rb.sample(batch), args.calls) for rb in rbs]
            print(f"| {label} | {batch} | {t[0] * 1e6:.0f} us | {t[1] * 1e6:.0f} us | {t[2] * 1e6:.0f} us | "
                  f"{t[0] / t[2]:.2f} |", flush=True)
        rbs[2].close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dqn-steps", type=int, default=50_000)
    parser.add_argument("--sac-steps", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--atari-partial", type=int, default=50_000, help="steps of the Atari buffer filled")
    parser.add_argument("--fill", type=int, default=5_000, help="adds before timing sample (each of n_envs envs)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--only", choices=["learning", "memory", "speed"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, table in (("speed", speed_table), ("memory", memory_table), ("learning", learning_table)):
        if args.only in (None, name):
            table(args)


if __name__ == "__main__":
    main()
