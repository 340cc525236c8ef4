#!/usr/bin/env python3
"""Records real Atari frames from envpool into frames files (frames_file.py), one per game, for the codec benchmark
(tools/bench/codecs.cpp) and the tests: nothing of them is kept in git; they are made where they are missing.

    python tools/frames/record_atari.py [--out build/frames] [--envs 4] [--steps 1024] [--games Pong,Breakout,...]

Per game, `envs` envs of envpool's Atari in sync mode step `steps` times under a sticky-random policy (each env keeps
its last action with probability --sticky, else draws one uniformly). The settings are those of CleanRL's envpool
Atari scripts, which the seed's training script ports (shared/seeds/ holds its buffer, not its envpool call):
envpool's standard preprocessing (84x84 gray, frame skip 4, up to 30 no-ops, fire on reset, a stack of 4 frames)
with episodic_life=True and reward_clip=True. The file keeps each step's newest frame with its FIRST and DONE flags;
while recording, every observed stack is checked against the one the file rebuilds (frames_file.stacks), so a file
that is written holds every step's stack exactly. A file already there with the same envs and steps is kept (the
make-if-missing helper: ensure()); --force records it again. Run alone on a 2-core machine, the default (5 games of
4 x 1024 steps) takes about 15 s (docs/benchmarks/compression.md says what was measured).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frames_file  # noqa: E402

GAMES = ("Pong", "Breakout", "MsPacman", "Seaquest", "SpaceInvaders")
DEPTH = 4


def make_env(game, envs, seed):
    """envpool's Atari `game` (e.g. "Pong": task Pong-v5) as CleanRL's envpool scripts make it, in sync mode."""
    import warnings
    warnings.filterwarnings("ignore", category=UserWarning, module="gymnasium")  # envpool's float64 space bounds
    import envpool
    return envpool.make(f"{game}-v5", env_type="gymnasium", num_envs=envs, batch_size=envs, seed=seed,
                        episodic_life=True, reward_clip=True, stack_num=DEPTH, gray_scale=True, img_height=84,
                        img_width=84)


def record(game, envs, steps, seed=0, sticky=0.25, on_step=None):
    """Steps `envs` envs of `game` `steps` times; returns (frames u8[envs, steps, 84, 84, 1], flags u8[envs,
    steps]). Raises RuntimeError where an observed stack is not the one the frames and flags rebuild. `on_step`,
    when given, is called with each step's index and observations (u8[envs, 4, 84, 84], envpool's own array)."""
    env = make_env(game, envs, seed)
    rng = np.random.default_rng(seed)
    actions = env.action_space.n
    frames = np.zeros((envs, steps, 84, 84, 1), np.uint8)
    flags = np.zeros((envs, steps), np.uint8)
    stack = np.zeros((envs, DEPTH, 84, 84), np.uint8)  # each env's stack as the file rebuilds it
    obs, info = env.reset()
    action = rng.integers(0, actions, envs)
    for t in range(steps):
        if t > 0:
            keep = rng.random(envs) < sticky
            action = np.where(keep, action, rng.integers(0, actions, envs))
            obs, _, terminated, truncated, info = env.step(action, np.arange(envs))
            flags[:, t] |= np.where(terminated | truncated, frames_file.DONE, 0).astype(np.uint8)
        ids = np.asarray(info["env_id"])
        if on_step:
            on_step(t, obs)
        if not np.array_equal(ids, np.arange(envs)):
            raise RuntimeError(f"{game}: envpool returned envs {ids.tolist()} in sync mode, expected 0..{envs - 1}")
        first = np.asarray(info["elapsed_step"]) == 0
        flags[first, t] |= frames_file.FIRST
        newest = obs[:, -1]
        frames[:, t, :, :, 0] = newest
        stack[:, :-1] = np.where(first[:, None, None, None], newest[:, None], stack[:, 1:])
        stack[:, -1] = newest
        bad = [e for e in range(envs) if not np.array_equal(stack[e], obs[e])]
        if bad:
            raise RuntimeError(f"{game}: env {bad[0]}'s stack at step {t} is not its last {DEPTH} frames since its "
                               f"reset (flags {flags[bad[0], max(0, t - 4):t + 1].tolist()}): the file could not "
                               f"rebuild it")
    env.close()
    return frames, flags


def path_of(out, game):
    return os.path.join(out, f"{game}.frames")


def ensure(out, games=GAMES, envs=4, steps=1024, seed=0, force=False, log=None):
    """The frames files of `games` in `out`, recording those missing or of another envs or steps. Returns their
    paths; `log` (a callable) gets a line per game recorded, with its seconds."""
    os.makedirs(out, exist_ok=True)
    paths = []
    for game in games:
        path = path_of(out, game)
        head = frames_file.header(path)
        if force or head is None or (head["envs"], head["steps"]) != (envs, steps):
            start = time.monotonic()
            frames, flags = record(game, envs, steps, seed)
            frames_file.write(path, f"{game}-v5", frames, flags, DEPTH)
            if log:
                log(f"{game}: {envs} x {steps} steps in {time.monotonic() - start:.1f} s, "
                    f"{int((flags & frames_file.FIRST).sum())} resets, {int((flags & frames_file.DONE).sum())} dones "
                    f"-> {path}")
        paths.append(path)
    return paths


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="build/frames", help="the folder of the frames files (default build/frames)")
    p.add_argument("--envs", type=int, default=4, help="envs per game (default 4)")
    p.add_argument("--steps", type=int, default=1024, help="steps per env (default 1024)")
    p.add_argument("--games", default=",".join(GAMES), help=f"comma-separated (default {','.join(GAMES)})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="record again even where a file of that size is there")
    a = p.parse_args()
    if a.envs < 1 or a.steps < 1:
        p.error(f"--envs {a.envs} and --steps {a.steps}: both must be at least 1")
    start = time.monotonic()
    ensure(a.out, [g for g in a.games.split(",") if g], a.envs, a.steps, a.seed, a.force,
           log=lambda line: print(line, flush=True))
    print(f"done in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
