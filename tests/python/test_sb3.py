"""shmreplay.sb3: SB3's replay buffers on a shmreplay segment. Every sampled transition is compared with what was
added for it (the env's observations name env, episode and step), at terminations, truncations and resets, including
the cases of SB3 #934 (timeout bootstrap), SB3 #1853 (the next observation of the newest transition of a full buffer)
and CleanRL #460 (truncation's final observation lost); the same checks fail SB3's own buffer with
optimize_memory_usage, so they can fail."""
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

sb3 = pytest.importorskip("stable_baselines3", reason="shmreplay.sb3 needs stable-baselines3 (the sb3 extra)")
import shmreplay  # noqa: E402
import shmreplay.sb3  # noqa: E402
from stable_baselines3.common import buffers as sb3_buffers  # noqa: E402

from sb3_envs import check, drive, key, make_venv  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def make(cls, venv, size, **kw):
    return cls(size, venv.observation_space, venv.action_space, device="cpu", n_envs=venv.num_envs, **kw)


@pytest.fixture
def buffers():
    made = []
    yield made
    for b in made:
        b.close()


def window(order, rb):
    """The transitions each env's ring can still hold (its capacity, less its episodes' first observations, is a
    lower bound of what it holds; the capacity an upper bound): the keys of the last `capacity` adds per env."""
    cap = rb.buffer.capacity
    return {k for keys in order for k in keys[-cap:]}


@pytest.mark.parametrize("optimize,timeouts", [(False, True), (False, False), (True, False)])
def test_every_sampled_transition_is_the_one_added_at_ends_resets_and_wrap_around(buffers, optimize, timeouts):
    venv = make_venv(3)
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 3 * 20, optimize_memory_usage=optimize,
              handle_timeout_termination=timeouts)
    buffers.append(rb)
    added, order = drive(rb, venv, 200)  # 10 times the ring: wrapped around, many ends of both kinds
    assert sum(a["truncated"] for a in added.values()) > 20 and sum(a["done"] and not a["truncated"]
                                                                    for a in added.values()) > 20
    allowed, seen = window(order, rb), set()
    for _ in range(20):
        s = rb.sample(256)
        assert check(s, added, timeouts, allowed) == []
        seen |= {key(o) for o in s.observations.numpy()}
    newest = {keys[-1] for keys in order}
    assert newest <= seen, "the newest transition of an env was never drawn"


def test_timeout_bootstraps_from_the_terminal_observation_sb3_934(buffers):
    """SB3 #934: with timeouts handled, a truncated transition has done 0 (bootstrap) and the terminal observation
    as next observation, never the reset one."""
    venv = make_venv(2, max_steps=4, p_end=0.0)  # every episode truncated
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 200, handle_timeout_termination=True)
    buffers.append(rb)
    added, _ = drive(rb, venv, 60)
    s = rb.sample(512)
    assert check(s, added, True) == []
    obs, nxt = s.observations.numpy(), s.next_observations.numpy()
    ends = obs[:, 2] == 3
    assert ends.any() and np.all(s.dones.numpy()[ends] == 0) and np.all(nxt[ends, 2] == 4)  # step 4, not a reset


def test_the_newest_transition_of_a_full_buffer_has_its_own_next_observation_sb3_1853(buffers):
    """SB3 #1853: once the buffer is full, the transition added last is drawn with its own next observation."""
    venv = make_venv(1, max_steps=1000, p_end=0.0)
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 8, optimize_memory_usage=True, handle_timeout_termination=False)
    buffers.append(rb)
    added, order = {}, [[]]
    obs = venv.reset()
    for step in range(40):  # full after 8; after every add the newest transition is drawn, and right
        new_obs, rewards, dones, infos = venv.step(np.zeros(1, np.int64))
        rb.add(obs, new_obs, np.zeros(1), rewards, dones, infos)
        added[key(obs[0])] = dict(action=0, reward=float(rewards[0]), next_obs=new_obs[0].copy(), done=False,
                                  truncated=False)
        order[0].append(key(obs[0]))
        obs = new_obs
        s = rb.sample(256)
        assert check(s, added, False, set(order[0][-8:])) == []
        assert order[0][-1] in {key(o) for o in s.observations.numpy()}


def test_cleanrl_truncations_keep_their_final_observation_cleanrl_460(buffers):
    """CleanRL #460: CleanRL passes terminations as dones and puts the final observation into next_obs for
    truncations only; with optimize_memory_usage the next add's reset observation must not replace it."""
    venv = make_venv(4, max_steps=5)
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 4 * 30, optimize_memory_usage=True, handle_timeout_termination=False)
    buffers.append(rb)
    added, order = drive(rb, venv, 150, style="cleanrl")
    allowed = window(order, rb)
    truncations = 0
    for _ in range(10):
        s = rb.sample(256)
        assert check(s, added, False, allowed) == []
        truncations += sum(added[key(o)]["truncated"] for o in s.observations.numpy())
    assert truncations > 0


@pytest.mark.parametrize("style", ["sb3", "cleanrl"])
def test_the_checks_find_the_wrong_next_observations_of_sb3s_own_optimized_buffer(style):
    """The same loop into SB3's own buffer with optimize_memory_usage: the check reports wrong next observations
    at episode ends (what the tests above would say of a buffer with these bugs)."""
    venv = make_venv(2, max_steps=5)
    rb = make(sb3_buffers.ReplayBuffer, venv, 2 * 30, optimize_memory_usage=True, handle_timeout_termination=False)
    added, _ = drive(rb, venv, 100, style=style)
    problems = check(rb.sample(512), added, False)
    assert any("next observation" in p for p in problems)


def test_uniform_over_the_stored_transitions_including_the_newest(buffers):
    from scipy import stats
    venv = make_venv(2, max_steps=1000, p_end=0.0)
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 2 * 1000)
    buffers.append(rb)
    added, _ = drive(rb, venv, 15)  # 30 transitions, one reset step per env
    counts = {}
    for _ in range(30):
        for o in rb.sample(1000).observations.numpy():
            counts[key(o)] = counts.get(key(o), 0) + 1
    assert set(counts) == set(added)
    assert stats.chisquare(list(counts.values())).pvalue > 1e-4


def test_an_added_transition_is_the_only_one_drawn_right_after_the_first_add(buffers):
    venv = make_venv(1)
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 100)
    buffers.append(rb)
    added, _ = drive(rb, venv, 1)
    s = rb.sample(16)
    assert check(s, added, True) == [] and len({key(o) for o in s.observations.numpy()}) == 1


def test_n_step_returns_discounts_and_next_observations_follow_sb3s_rule(buffers):
    venv = make_venv(2, max_steps=6, p_end=0.2)
    gamma, n = 0.9, 3
    rb = make(shmreplay.sb3.NStepReplayBuffer, venv, 2 * 50, n_steps=n, gamma=gamma)
    buffers.append(rb)
    added, order = drive(rb, venv, 120)
    follow = {k: (keys[j + 1] if j + 1 < len(keys) else None) for keys in order for j, k in enumerate(keys)}
    s = rb.sample(512)
    for r, o in enumerate(s.observations.numpy()):
        k, ret, steps = key(o), 0.0, 0
        while True:  # SB3's rule: sum up to the first done or timeout (inclusive), or the newest transition
            a = added[k]
            ret += gamma ** steps * a["reward"]
            steps += 1
            if steps == n or a["env_done"] or follow[k] is None:
                break
            k = follow[k]
        a = added[k]
        assert s.rewards[r, 0].item() == pytest.approx(ret, rel=1e-6)
        assert s.discounts[r, 0].item() == pytest.approx(gamma ** steps, rel=1e-6)
        assert np.array_equal(s.next_observations[r].numpy(), a["next_obs"])
        assert s.dones[r, 0].item() == float(a["done"] and not a["truncated"])
    assert rb.sample(4).discounts is not None and shmreplay.sb3.ReplayBuffer.sample.__name__ == "sample"


def test_the_plain_buffer_has_no_discounts_and_refuses_what_sb3_refuses(buffers):
    venv = make_venv(1)
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 50)
    buffers.append(rb)
    drive(rb, venv, 5)
    assert rb.sample(4).discounts is None
    for cls, ours, kw in ((sb3_buffers.ReplayBuffer, shmreplay.sb3.ReplayBuffer, {}),
                          (sb3_buffers.NStepReplayBuffer, shmreplay.sb3.NStepReplayBuffer,
                           dict(handle_timeout_termination=False))):
        with pytest.raises(Exception) as theirs:
            make(cls, venv, 50, optimize_memory_usage=True, **kw)
        with pytest.raises(type(theirs.value)):
            make(ours, venv, 50, optimize_memory_usage=True, **kw)
    buffers.append(make(shmreplay.sb3.ReplayBuffer, venv, 50, optimize_memory_usage=True,
                        handle_timeout_termination=False))


def test_a_name_is_kept_and_a_private_one_given_when_omitted(buffers, name):
    venv = make_venv(1)
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 50, name=name)
    buffers.append(rb)
    other = make(shmreplay.sb3.ReplayBuffer, venv, 50)
    buffers.append(other)
    assert rb.name == name and shmreplay.Buffer.exists(name) and other.name != name
    rb.close()
    assert not shmreplay.Buffer.exists(name) and not os.path.exists(rb.buffer.path + "+sb3")


def run_python(code, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_attach_from_another_process_whose_adds_fill_the_same_buffer(buffers, name):
    venv = make_venv(2, seed=1)
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 2 * 2 * 100, name=name, writers=2)
    buffers.append(rb)
    added, _ = drive(rb, venv, 30, seed=1)
    done = run_python(f"""
        import pickle, sys, shmreplay.sb3
        from sb3_envs import drive, make_venv
        rb = shmreplay.sb3.ReplayBuffer.attach({name!r})
        venv = make_venv(2, seed=2)
        for e in venv.envs: e.unwrapped.index += 10   # this process's envs are 10 and 11
        added, _ = drive(rb, venv, 30, seed=2)
        print(pickle.dumps(added).hex())
    """)
    assert done.returncode == 0, done.stderr
    added.update(pickle.loads(bytes.fromhex(done.stdout.strip())))
    s = rb.sample(1024)
    assert check(s, added, True) == []
    assert set(s.observations.numpy()[:, 0].astype(int)) == {0, 1, 10, 11}
    assert shmreplay.Buffer.exists(name)  # the attached process's end leaves it


def test_save_and_load_replay_buffer_carry_the_data_to_a_new_process(buffers, tmp_path):
    from stable_baselines3 import DQN
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=500, learning_starts=50, train_freq=4,
                replay_buffer_class=shmreplay.sb3.ReplayBuffer, policy_kwargs=dict(net_arch=[16]), seed=0,
                device="cpu")
    model.learn(120)
    buffers.append(model.replay_buffer)
    path = tmp_path / "rb.pkl"
    model.save_replay_buffer(path)
    heads = model.replay_buffer.buffer.heads().tolist()
    done = run_python(f"""
        import shmreplay, shmreplay.sb3
        from stable_baselines3 import DQN
        model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=shmreplay.sb3.ReplayBuffer, device="cpu")
        model.load_replay_buffer({str(path)!r})
        rb = model.replay_buffer
        assert isinstance(rb, shmreplay.sb3.ReplayBuffer) and rb.buffer.heads().tolist() == {heads}
        s = rb.sample(64)
        print(s.observations.shape[0], rb.name != {model.replay_buffer.name!r})
        model.learn(60, reset_num_timesteps=False)
    """, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["64", "True"]


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_a_buffer_never_closed_leaves_nothing_in_dev_shm_when_its_process_ends(how):
    done = run_python(f"""
        import os, signal, sys, shmreplay.sb3
        from stable_baselines3 import DQN
        model = DQN("MlpPolicy", "CartPole-v1", buffer_size=1000, learning_starts=10,
                    replay_buffer_class=shmreplay.sb3.ReplayBuffer, device="cpu")
        model.learn(30)
        print(model.replay_buffer.buffer.path, flush=True)
        if {how!r} == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    path = done.stdout.strip()
    assert path.startswith(os.environ.get("SHMREPLAY_SHM_DIR") or "/dev/shm"), done.stderr
    import time
    deadline = time.monotonic() + 20
    while (os.path.exists(path) or os.path.exists(path + "+sb3")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(path) and not os.path.exists(path + "+sb3")


@pytest.mark.parametrize("algo,env_id", [("DQN", "CartPole-v1"), ("SAC", "Pendulum-v1"), ("TD3", "Pendulum-v1")])
def test_sb3_algorithms_learn_from_it_as_replay_buffer_class(buffers, algo, env_id):
    import stable_baselines3
    cls = getattr(stable_baselines3, algo)
    model = cls("MlpPolicy", env_id, buffer_size=1000, learning_starts=64, batch_size=32, seed=0, device="cpu",
                policy_kwargs=dict(net_arch=[16]), replay_buffer_class=shmreplay.sb3.ReplayBuffer)
    buffers.append(model.replay_buffer)
    model.learn(200)
    assert isinstance(model.replay_buffer, shmreplay.sb3.ReplayBuffer) and model.replay_buffer.size() >= 200
    assert model.logger.name_to_value.get("train/n_updates", 1) > 0


def test_n_step_through_replay_buffer_kwargs_and_a_second_learn_with_optimize_memory_usage(buffers):
    from stable_baselines3 import DQN
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=1000, learning_starts=32, seed=0, device="cpu",
                policy_kwargs=dict(net_arch=[16]), replay_buffer_class=shmreplay.sb3.NStepReplayBuffer,
                replay_buffer_kwargs=dict(n_steps=3, gamma=0.95))
    buffers.append(model.replay_buffer)
    model.learn(100)
    assert model.replay_buffer.n_steps == 3 and model.replay_buffer.sample(8).discounts is not None
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=1000, learning_starts=32, seed=0, device="cpu",
                optimize_memory_usage=True, replay_buffer_kwargs=dict(handle_timeout_termination=False),
                policy_kwargs=dict(net_arch=[16]), replay_buffer_class=shmreplay.sb3.ReplayBuffer)
    buffers.append(model.replay_buffer)
    model.learn(100)
    model.learn(100)  # SB3 marks the last trajectory ended (dones[pos] = True): the next add starts afresh


def test_dict_observations_are_stored_once_per_key_and_sampled_as_added(buffers):
    from gymnasium import spaces
    from stable_baselines3.common.vec_env import VecEnvWrapper

    class AsDict(VecEnvWrapper):  # {"x": the counter observation, "y": its step as int64}
        def __init__(self, venv):
            space = spaces.Dict({"x": venv.observation_space, "y": spaces.Box(0, 10**6, (1,), np.int64)})
            super().__init__(venv, observation_space=space)

        def to_dict(self, obs):
            return {"x": obs, "y": obs[:, 2:3].astype(np.int64) * 7}

        def reset(self):
            return self.to_dict(self.venv.reset())

        def step_wait(self):
            obs, rewards, dones, infos = self.venv.step_wait()
            for info in infos:
                if "terminal_observation" in info:
                    info["terminal_observation"] = {k: v[0] for k, v in
                                                    self.to_dict(info["terminal_observation"][None]).items()}
            return self.to_dict(obs), rewards, dones, infos

    venv = AsDict(make_venv(2))
    rb = make(shmreplay.sb3.DictReplayBuffer, venv, 2 * 40)
    buffers.append(rb)
    obs = venv.reset()
    truth = {}
    for _ in range(100):
        new_obs, rewards, dones, infos = venv.step(np.ones(2, np.int64))
        next_obs = {k: v.copy() for k, v in new_obs.items()}
        for i, d in enumerate(dones):
            if d:
                for k in next_obs:
                    next_obs[k][i] = infos[i]["terminal_observation"][k]
        rb.add(obs, next_obs, np.ones(2), rewards, dones, infos)
        for i in range(2):
            truth[key(obs["x"][i])] = (next_obs["x"][i].copy(), next_obs["y"][i].copy(), float(rewards[i]))
        obs = new_obs
    s = rb.sample(256)
    for r in range(256):
        nx, ny, reward = truth[key(s.observations["x"][r].numpy())]
        assert np.array_equal(s.next_observations["x"][r].numpy(), nx)
        assert np.array_equal(s.next_observations["y"][r].numpy(), ny) and s.rewards[r, 0].item() == reward
        assert s.observations["y"][r].item() == s.observations["x"][r, 2].item() * 7


def test_frame_stacks_of_sb3s_atari_wrappers_are_stored_one_frame_per_step(buffers):
    """VecFrameStack then VecTransposeImage, as SB3 wraps Atari: (4, 8, 8) stacks, stacked on axis 0."""
    from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage
    venv = VecTransposeImage(VecFrameStack(make_venv(2, max_steps=30, p_end=0.02, frames=True), 4))
    assert venv.observation_space.shape == (4, 8, 8)
    rb = make(shmreplay.sb3.ReplayBuffer, venv, 2 * 200, stack_axis=0)
    flat = make(shmreplay.sb3.ReplayBuffer, venv, 2 * 200)
    buffers += [rb, flat]
    added, order = drive(rb, venv, 300)
    assert rb.buffer.schema["obs"].stack_depth == 4
    assert rb.buffer.stored_data_bytes < 0.5 * flat.buffer.stored_data_bytes
    for _ in range(5):
        assert check(rb.sample(256), added, True, window(order, rb)) == []
