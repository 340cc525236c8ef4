#!/usr/bin/env python3
"""The actor adapters' cost: env steps per second of a vector env wrapped in shmreplay.gymnasium.ReplayWriter or
shmreplay.pufferlib.ReplayWriter (every step pushed into a buffer) against the same vector env bare, in one process
and one run. Trials alternate bare and wrapped (each starting with an unseeded reset), and each rate is the median
of the trials; the actions are drawn before timing, so neither loop pays for them. Prints a Markdown table
(docs/benchmarks/actors.md).

    .venv/bin/python tools/bench/actors_bench.py [--steps 2000] [--trials 5] [--envs 8]

Cases: CartPole-v1 (obs f32[4]) under Gymnasium's SyncVectorEnv and AsyncVectorEnv and PufferLib's Serial backend;
Breakout (ALE, Gymnasium's AtariPreprocessing and 4 frames stacked: obs u8[4,84,84], stored with stack_axis=0, one
frame per step) under SyncVectorEnv and PufferLib's Serial backend, when the atari extra is installed
(``pip install "shmreplay[atari]"``: ale-py, and OpenCV for AtariPreprocessing; without them those rows say so).
A run by hand (a minute or two); CI runs only a smoke run (tests/python/test_bench.py).
"""
import argparse
import os
import statistics
import time

import gymnasium as gym
import numpy as np

import shmreplay
import shmreplay.gymnasium as sg


def cartpole():
    return gym.make("CartPole-v1")


def breakout():
    import ale_py
    gym.register_envs(ale_py)
    env = gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


def rate(loop, steps):
    """Env steps per second of one ``loop(steps)`` (it returns the env steps it made)."""
    start = time.perf_counter()
    n = loop(steps)
    return n / (time.perf_counter() - start)


def gymnasium_loops(envs, actions, writer):
    def run(env):
        def loop(steps):
            env.reset()
            for t in range(steps):
                env.step(actions[t % len(actions)])
            return steps * envs.num_envs
        return loop
    return run(envs), run(writer)


def pufferlib_loops(vecenv, actions, writer):
    def run(env):
        def loop(steps):
            env.async_reset(None)
            for t in range(steps):
                env.recv()
                env.send(actions[t % len(actions)])
            return steps * vecenv.num_agents
        return loop
    return run(vecenv), run(writer)


def gymnasium_case(make, mode, n_envs, stack_axis, name):
    vector = gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv
    envs = vector([make] * n_envs)
    buf = sg.create_buffer(name, envs, capacity=10_000, stack_axis=stack_axis)
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, envs.single_action_space.n, n_envs) for _ in range(256)]
    envs.reset(seed=0)  # seeded once: a seeded reset of an ALE env reloads its ROM, which would dominate a trial
    writer = sg.ReplayWriter(envs, buf)
    return writer, buf, gymnasium_loops(envs, actions, writer)


def pufferlib_case(make, n_envs, stack_axis, name):
    import pufferlib.emulation
    import pufferlib.vector
    import shmreplay.pufferlib as sp

    def creator(buf=None, seed=0):
        return pufferlib.emulation.GymnasiumPufferEnv(env_creator=make, buf=buf, seed=seed)
    vecenv = pufferlib.vector.make(creator, num_envs=n_envs, backend=pufferlib.vector.Serial)
    buf = sp.create_buffer(name, vecenv, capacity=10_000, stack_axis=stack_axis)
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, vecenv.single_action_space.n, vecenv.num_agents).astype(np.int32)
               for _ in range(256)]
    vecenv.async_reset(0)  # seeded once, as above
    vecenv.recv()
    writer = sp.ReplayWriter(vecenv, buf)
    return writer, buf, pufferlib_loops(vecenv, actions, writer)


CASES = (  # adapter, env, obs, the case's maker (envs, stack_axis, buffer name), stack_axis
    ("Gymnasium SyncVectorEnv", "CartPole-v1", "f32[4]", lambda *a: gymnasium_case(cartpole, "sync", *a), None),
    ("Gymnasium AsyncVectorEnv", "CartPole-v1", "f32[4]", lambda *a: gymnasium_case(cartpole, "async", *a), None),
    ("PufferLib Serial", "CartPole-v1", "f32[4]", lambda *a: pufferlib_case(cartpole, *a), None),
    ("Gymnasium SyncVectorEnv", "Breakout", "u8[4,84,84]", lambda *a: gymnasium_case(breakout, "sync", *a), 0),
    ("PufferLib Serial", "Breakout", "u8[4,84,84]", lambda *a: pufferlib_case(breakout, *a), 0))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="vector steps per trial (CartPole; Atari a quarter)")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--envs", type=int, default=8)
    args = parser.parse_args()
    print(f"\n### Env steps per second: bare vector env against ReplayWriter (every step pushed), {args.envs} envs, "
          f"median of {args.trials} trials\n")
    print("| adapter | env | obs | bare | with ReplayWriter | wrapped / bare |")
    print("|---|---|---|---|---|---|")
    for k, (adapter, env, obs, case, stack_axis) in enumerate(CASES):
        steps = args.steps if env == "CartPole-v1" else max(args.steps // 4, 1)
        try:
            writer, buf, (bare, wrapped) = case(args.envs, stack_axis, f"actors-bench-{os.getpid()}-{k}")
        except (ImportError, gym.error.DependencyNotInstalled) as e:  # ale-py, or OpenCV for AtariPreprocessing
            print(f"| {adapter} | {env} | {obs} | not run: {str(e).splitlines()[0]} | | |", flush=True)
            continue
        try:
            bare_rates, wrapped_rates = [], []
            for _ in range(args.trials):  # alternate, so that the machine's load falls on both alike
                bare_rates.append(rate(bare, steps))
                wrapped_rates.append(rate(wrapped, steps))
            b, w = statistics.median(bare_rates), statistics.median(wrapped_rates)
            print(f"| {adapter} | {env} | {obs} | {b:,.0f} | {w:,.0f} | {w / b:.2f} |", flush=True)
        finally:
            writer.close()
            shmreplay.Buffer.remove(buf.name)


if __name__ == "__main__":
    main()
