"""What the checkpoint tests share (test_checkpoint.py, test_checkpointer.py): a buffer with every kind of state a
checkpoint holds, its steps, and a wait for a background thread."""
import time

import numpy as np

import shmreplay

SCHEMA = "obs:f32[3] act:i32 done:bool reward:f32"
DEADLINE = 60.0  # seconds a test waits for a background thread to get somewhere before it fails


def make_buffer(name, **options):
    """2 envs x 8 steps of SCHEMA with episodes, priorities (alpha 0.6) and a rate limiter, unless overridden."""
    kw = dict(done="done", reward="reward", episode_queue_capacity=8, priority_exponent=0.6,
              rate_limit=shmreplay.RateLimit.ratio(1.0, 1, 1000.0))
    kw.update(options)
    return shmreplay.Buffer.create(name, 2, 8, SCHEMA, **kw)


def push_steps(writer, env_ids, first, count):
    """Steps first .. first + count - 1 of each env: obs [env, step, step / 2], act step * 10 + env, done every 4th,
    reward step, priority step + 1 (the 1.0 fixture's steps)."""
    for step in range(first, first + count):
        n = len(env_ids)
        writer.push(np.array(env_ids), {
            "obs": np.array([[e, step, step * 0.5] for e in env_ids], np.float32),
            "act": np.array([step * 10 + e for e in env_ids], np.int32),
            "done": np.full(n, step % 4 == 3),
            "reward": np.full(n, step, np.float32),
        }, np.full(n, step + 1.0))


def wait_until(condition, what):
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"waited {DEADLINE} s for {what}"
        time.sleep(0.01)
