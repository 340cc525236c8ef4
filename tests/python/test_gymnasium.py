"""shmreplay.gymnasium: what Gymnasium's vector envs return, pushed in every autoreset mode (next-step, same-step,
disabled), Sync and Async. Every stored step of every env is checked against what the env produced (episodes
ending at different times, by termination, truncation or both; final observations; reset observations), and so is
every sampled transition; the same checks report the mistakes of a writer that takes a reset observation for a next
observation, so they can fail."""
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="shmreplay.gymnasium needs gymnasium (the gymnasium extra)")
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv  # noqa: E402

import shmreplay  # noqa: E402
import shmreplay.gymnasium as sg  # noqa: E402

from actor_envs import Stamped, check_stream, check_transitions, logp, policy  # noqa: E402

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


def make_envs(kind, mode, n=4, first=0):
    fns = [lambda i=i: Stamped(first + i) for i in range(n)]
    cls = SyncVectorEnv if kind == "sync" else AsyncVectorEnv
    return cls(fns, autoreset_mode=mode)


def run(envs, steps, extra=True, reset_every=None):
    """Acts with the policy for `steps` vector steps (resetting ended envs in the disabled mode; all envs every
    `reset_every` steps when given). Returns each env's last observation and the (episode, step) of each
    mid-episode reset."""
    obs, _ = envs.reset(seed=0)
    last = np.array(obs)
    cuts = [set() for _ in range(envs.num_envs)]
    for i in range(steps):
        if reset_every and i and i % reset_every == 0:
            for e in range(envs.num_envs):
                cuts[e].add((int(last[e, 1]), int(last[e, 2])))
            obs, _ = envs.reset()
            last = np.array(obs)
        actions = policy(obs)
        obs, _, terminated, truncated, _ = envs.step(actions, extra={"logp": logp(obs)} if extra else None)
        last = np.array(obs)
        ended = terminated | truncated
        if envs.mode == AutoresetMode.DISABLED and ended.any():
            obs, _ = envs.reset(options={"reset_mask": ended})
            last[ended] = np.asarray(obs)[ended]
    return last, cuts


def check_buffer(buf, last, first=0, extra=True, cuts=None):
    problems = []
    for i in range(len(last)):
        start, steps = buf.read_steps(first + i, 0, int(buf.heads()[first + i]))
        problems += check_stream(steps, first + i, start, last[i], extra, cuts[i] if cuts else ())
    return problems


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_every_stored_step_and_sampled_transition_is_what_the_env_produced(closing, name, kind, mode):
    envs = make_envs(kind, mode)
    buf = sg.create_buffer(name, envs, 1024, extra=["logp:f32"])
    envs = sg.ReplayWriter(envs, buf)
    closing.append(envs)
    last, _ = run(envs, 60)
    assert check_buffer(buf, last) == []
    ends = sum(int(buf.read_steps(e, 0, 1024)[1]["first"].sum()) for e in range(4))
    assert ends > 4 * 6, "few episodes ended"
    t = sg.Transitions(buf, seed=1)
    closing.append(t)
    for _ in range(5):
        batch = t.sample(256)
        assert check_transitions(batch) == []
    assert batch["logp"].dtype == np.float32 and np.array_equal(batch["logp"], logp(batch["obs"]))


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_a_ring_that_wrapped_around_holds_the_newest_steps_exactly(closing, name, mode):
    envs = make_envs("sync", mode, n=3)
    buf = sg.create_buffer(name, envs, 16, extra=["logp:f32"])
    envs = sg.ReplayWriter(envs, buf)
    closing.append(envs)
    last, _ = run(envs, 100)
    assert all(h > 50 for h in buf.heads())
    assert check_buffer(buf, last) == []
    t = sg.Transitions(buf, seed=2)
    closing.append(t)
    assert check_transitions(t.sample(512)) == []


def test_a_reset_in_the_middle_of_episodes_starts_new_ones_and_no_transition_crosses_it(closing, name):
    envs = make_envs("sync", AutoresetMode.NEXT_STEP)
    buf = sg.create_buffer(name, envs, 1024, extra=["logp:f32"])
    envs = sg.ReplayWriter(envs, buf)
    closing.append(envs)
    last, cuts = run(envs, 60, reset_every=7)
    assert check_buffer(buf, last, cuts=cuts) == []
    t = sg.Transitions(buf, seed=3)
    closing.append(t)
    for _ in range(5):
        assert check_transitions(t.sample(256)) == []


def test_several_actors_share_a_buffer_each_under_its_env_ids(closing, name):
    a, b = make_envs("sync", AutoresetMode.SAME_STEP, n=2), make_envs("sync", AutoresetMode.NEXT_STEP, n=3, first=2)
    buf = sg.create_buffer(name, a, 256, num_envs=5)
    a, b = sg.ReplayWriter(a, buf), sg.ReplayWriter(b, shmreplay.Buffer.open(name), first_env=2)
    closing += [a, b]
    last_a, _ = run(a, 30, extra=False)
    last_b, _ = run(b, 30, extra=False)
    assert check_buffer(buf, last_a, extra=False) == [] and check_buffer(buf, last_b, first=2, extra=False) == []
    t = sg.Transitions(name, seed=4)
    closing.append(t)
    batch = t.sample(512)
    assert check_transitions(batch) == [] and set(batch["env_ids"]) == {0, 1, 2, 3, 4}


def test_the_checks_report_a_reset_observation_taken_for_a_next_observation(closing, name):
    """A writer that pushes what same-step mode returns as if the step's observation were the final one (the
    reset observation it is) stores wrong ends: the same checks say so."""
    envs = make_envs("sync", AutoresetMode.SAME_STEP)
    buf = sg.create_buffer(name, envs, 1024, extra=["logp:f32"])
    envs = sg.ReplayWriter(envs, buf)
    envs.mode = AutoresetMode.DISABLED  # pushes the returned observation, as a naive writer would
    closing.append(envs)
    last, _ = run(envs, 40)
    assert any("follows" in p or "ended at" in p for p in check_buffer(buf, last))
    t = sg.Transitions(buf, seed=5)
    closing.append(t)
    assert check_transitions(t.sample(512)) != []


def test_a_buffer_without_the_step_layout_is_refused_naming_the_missing_fields(name):
    envs = make_envs("sync", AutoresetMode.NEXT_STEP, n=1)
    shmreplay.Buffer.create(name, 1, 8, "obs:f32[3] action:i64 reward:f32")
    with pytest.raises(shmreplay.SchemaMismatch, match="terminated, truncated, first"):
        sg.ReplayWriter(envs, shmreplay.Buffer.open(name))
    envs.close()
