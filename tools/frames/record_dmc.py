#!/usr/bin/env python3
"""Records DeepMind Control Suite pixels (dm_control, MuJoCo rendering 64x64 RGB off-screen through EGL) into
frames files (frames_file.py), one per task, beside record_atari.py's: the "DMC-like RGB field" of the codec
benchmark (tools/bench/codecs.cpp).

    .venv-dmc/bin/python tools/frames/record_dmc.py [--out build/frames] [--steps 1024] [--tasks cheetah-run,...]

dm_control is not in the project's .venv (it pins its own MuJoCo): `tools/setup.sh --bench` makes .venv-dmc with
it. MuJoCo renders with EGL (MUJOCO_GL=egl, Mesa's software renderer on a machine without a GPU). Per task, one env
steps --steps times under uniform random actions with PlaNet's action repeat (each recorded step is that many
physics steps: cartpole 8, cheetah 4, walker 2), rendering camera 0 after each. An episode (1000 physics steps) ends
with DONE, and the next step, a reset, is a FIRST; stack depth 1 (the pixels are no stack). A file already there
with the same steps is kept; --force records it again.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frames_file  # noqa: E402

TASKS = ("cheetah-run", "walker-walk", "cartpole-swingup")
ACTION_REPEAT = {"cartpole": 8, "cheetah": 4, "walker": 2}
SIZE = 64


def record(task, steps, seed=0):
    """Steps one env of `task` ("domain-task") `steps` times; returns (frames u8[1, steps, 64, 64, 3], flags)."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    from dm_control import suite
    domain, name = task.split("-", 1)
    env = suite.load(domain, name, task_kwargs={"random": seed})
    spec = env.action_spec()
    rng = np.random.default_rng(seed)
    repeat = ACTION_REPEAT.get(domain, 2)
    frames = np.zeros((1, steps, SIZE, SIZE, 3), np.uint8)
    flags = np.zeros((1, steps), np.uint8)
    ts = env.reset()
    flags[0, 0] = frames_file.FIRST
    for t in range(steps):
        if t > 0:
            if ts.last():
                ts = env.reset()
                flags[0, t] |= frames_file.FIRST
            else:
                action = rng.uniform(spec.minimum, spec.maximum)
                for _ in range(repeat):
                    ts = env.step(action)
                    if ts.last():
                        flags[0, t] |= frames_file.DONE
                        break
        frames[0, t] = env.physics.render(SIZE, SIZE, camera_id=0)
    return frames, flags


def ensure(out, tasks=TASKS, steps=1024, seed=0, force=False, log=None):
    """The frames files of `tasks` in `out` (named after the task), recording those missing or of other steps."""
    os.makedirs(out, exist_ok=True)
    paths = []
    for task in tasks:
        path = os.path.join(out, f"{task}.frames")
        head = frames_file.header(path)
        if force or head is None or head["steps"] != steps:
            start = time.monotonic()
            frames, flags = record(task, steps, seed)
            frames_file.write(path, task, frames, flags, 1)
            if log:
                log(f"{task}: {steps} steps in {time.monotonic() - start:.1f} s -> {path}")
        paths.append(path)
    return paths


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="build/frames", help="the folder of the frames files (default build/frames)")
    p.add_argument("--steps", type=int, default=1024, help="steps per task (default 1024)")
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated (default {','.join(TASKS)})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true")
    a = p.parse_args()
    if a.steps < 1:
        p.error(f"--steps {a.steps}: must be at least 1")
    start = time.monotonic()
    ensure(a.out, [t for t in a.tasks.split(",") if t], a.steps, a.seed, a.force,
           log=lambda line: print(line, flush=True))
    print(f"done in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
