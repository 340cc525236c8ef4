"""shmreplay.pufferlib: what PufferLib's vectorized recv() returns (Serial, and Multiprocessing with batches of
some envs at a time, under its env ids), pushed into a buffer. Every stored step of every env is checked against
what the env produced (the final observation on the ending step, the reset observation of the next recv as the next
episode's reset step) and so is every sampled transition."""
import functools

import numpy as np
import pytest

pufferlib = pytest.importorskip("pufferlib", reason="shmreplay.pufferlib needs pufferlib (the pufferlib extra)")
import pufferlib.emulation  # noqa: E402
import pufferlib.vector  # noqa: E402

import shmreplay  # noqa: E402
import shmreplay.pufferlib as sp  # noqa: E402

from actor_envs import Stamped, check_stream, check_transitions, logp, policy  # noqa: E402


def creator(index, buf=None, seed=0):
    return pufferlib.emulation.GymnasiumPufferEnv(env_creator=Stamped, env_args=[index], buf=buf, seed=seed)


def make_vecenv(backend, n=4, **kw):
    creators = [functools.partial(creator, i) for i in range(n)]
    return pufferlib.vector.make(creators, env_args=[[] for _ in range(n)], env_kwargs=[{} for _ in range(n)],
                                 backend=backend, num_envs=n, **kw)


def run(vecenv, recvs, extra=True):
    """recv/send `recvs` times with the policy; returns each env's last observation."""
    last = {}
    vecenv.async_reset(seed=0)
    for _ in range(recvs):
        obs, _r, _d, _t, _ta, _infos, ids, _m = vecenv.recv()
        for row, e in enumerate(ids):
            last[int(e)] = np.array(obs[row])
        vecenv.send(policy(obs).astype(np.int32), extra={"logp": logp(obs)} if extra else None)
    return last


@pytest.mark.parametrize("backend", ["Serial", "Multiprocessing"])
def test_every_stored_step_and_sampled_transition_is_what_the_env_produced(closing, name, backend):
    kw = dict(num_workers=2, batch_size=2) if backend == "Multiprocessing" else {}
    vecenv = make_vecenv(getattr(pufferlib.vector, backend), **kw)
    buf = sp.create_buffer(name, vecenv, 1024, extra=["logp:f32"])
    vecenv = sp.ReplayWriter(vecenv, buf)
    closing.append(vecenv)
    last = run(vecenv, 120)
    assert sorted(last) == [0, 1, 2, 3]
    problems = []
    for e in range(4):
        start, steps = buf.read_steps(e, 0, int(buf.heads()[e]))
        problems += check_stream(steps, e, start, last[e], extra=True)
        assert steps["first"].sum() > 4, f"env {e}: few episodes"
    assert problems == []
    t = sp.Transitions(buf, seed=1)
    closing.append(t)
    for _ in range(5):
        batch = t.sample(256)
        assert check_transitions(batch) == []
    assert np.array_equal(batch["logp"], logp(batch["obs"]))


def test_the_synchronous_reset_and_step_push_too(closing, name):
    vecenv = make_vecenv(pufferlib.vector.Serial, n=2)
    buf = sp.create_buffer(name, vecenv, 64)
    vecenv = sp.ReplayWriter(vecenv, buf)
    closing.append(vecenv)
    obs, _ = vecenv.reset(seed=0)
    for _ in range(30):
        obs, *_ = vecenv.step(policy(obs).astype(np.int32))
    for e in range(2):
        start, steps = buf.read_steps(e, 0, 64)
        assert check_stream(steps, e, start, obs[e]) == []


def test_a_native_puffer_env_is_refused_saying_why(name):
    vecenv = make_vecenv(pufferlib.vector.Serial, n=1)
    buf = sp.create_buffer(name, vecenv, 8)
    vecenv.emulated = False  # what a native PufferEnv's vecenv says
    with pytest.raises(NotImplementedError, match="final observation"):
        sp.ReplayWriter(vecenv, buf)
    vecenv.close()
    assert shmreplay.Buffer.exists(name)


def test_the_actors_example_fills_one_buffer_from_both_kinds_of_actor():
    import os
    import subprocess
    import sys
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "python", "actors.py"), "--steps", "200",
                        "--name", f"actors-test-{os.getpid()}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "from envs [0, 1, 2, 3, 4, 5, 6, 7]" in r.stdout
