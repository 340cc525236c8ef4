"""Helpers of the shmreplay.sb3 tests: envs whose observations name (env, episode, step) exactly, the loop that adds
what SB3's off-policy algorithms (or CleanRL) add, and the check of sampled transitions against what was added."""
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit


class Counter(gym.Env):
    """Observation [env, episode, step] (float32): every observation of every env is different. Terminates with
    probability `p_end` per step (seeded), else a TimeLimit truncates it. Reward: a function of the observation and
    the action."""

    def __init__(self, index, p_end=0.15, seed=0, frames=None):
        self.index, self.p_end, self.rng = index, p_end, np.random.default_rng(seed * 1000 + index)
        self.frames = frames
        if frames is None:
            self.observation_space = spaces.Box(-1e7, 1e7, (3,), np.float32)
        else:  # one 8x8 frame per step, carrying the same three numbers
            self.observation_space = spaces.Box(0, 255, (8, 8, 1), np.uint8)
        self.action_space = spaces.Discrete(3)
        self.episode, self.t = -1, 0

    def _obs(self):
        if self.frames is None:
            return np.array([self.index, self.episode, self.t], np.float32)
        frame = np.zeros((8, 8, 1), np.uint8)
        frame[0, :3, 0] = [self.index, self.episode % 256, self.t % 256]
        frame[1, 0, 0] = self.episode // 256
        return frame

    def reset(self, *, seed=None, options=None):
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        reward = float(self.index * 100 + self.t + 0.25 * int(action))
        return self._obs(), reward, bool(self.rng.random() < self.p_end), False, {}


def make_venv(n_envs, max_steps=6, p_end=0.15, seed=0, frames=None):
    from stable_baselines3.common.vec_env import DummyVecEnv
    return DummyVecEnv([lambda i=i: TimeLimit(Counter(i, p_end, seed, frames), max_steps) for i in range(n_envs)])


def key(obs):
    return np.asarray(obs).tobytes()


def drive(rb, venv, steps, seed=0, style="sb3"):
    """Adds `steps` vectorized steps to `rb` as SB3's `_store_transition` does ("sb3": next observation replaced by
    `terminal_observation` at every end, `dones` including truncations) or as CleanRL's DQN does ("cleanrl": only
    truncated envs get their final observation, `dones` are the terminations). Returns {obs key: what was added for
    that transition}, and the per-env list of keys in add order."""
    rng = np.random.default_rng(seed)
    added, order = {}, [[] for _ in range(venv.num_envs)]
    obs = venv.reset()
    for _ in range(steps):
        actions = rng.integers(0, 3, venv.num_envs)
        new_obs, rewards, dones, infos = venv.step(actions)
        truncated = np.array([info.get("TimeLimit.truncated", False) for info in infos])
        next_obs = new_obs.copy()
        flags = dones.copy()
        for i, done in enumerate(dones):
            if done and (style == "sb3" or truncated[i]):
                next_obs[i] = infos[i]["terminal_observation"]
        if style == "cleanrl":
            flags = dones & ~truncated
        rb.add(obs, next_obs, actions, rewards, flags, infos)
        for i in range(venv.num_envs):
            k = key(obs[i])
            added[k] = dict(obs=obs[i].copy(), action=int(actions[i]), reward=float(rewards[i]),
                            next_obs=next_obs[i].copy(), done=bool(flags[i]), truncated=bool(truncated[i]),
                            env_done=bool(dones[i]))
            order[i].append(k)
        obs = new_obs
    return added, order


def check(samples, added, handle_timeout_termination, allowed=None):
    """Problems (empty: none) of each sampled transition against what was added for it: action, reward, next
    observation, dones (terminations only when timeouts are handled). `allowed`: the keys that may be drawn."""
    obs = samples.observations.numpy()
    problems = []
    for r in range(len(obs)):
        k = key(obs[r])
        want = added.get(k)
        if want is None:
            problems.append(f"row {r}: observation {obs[r].ravel()[:3]} was never added")
            continue
        if allowed is not None and k not in allowed:
            problems.append(f"row {r}: transition {obs[r].ravel()[:3]} is no longer stored")
        done = want["done"] and not (handle_timeout_termination and want["truncated"])
        got = dict(action=int(samples.actions[r, 0]), reward=float(samples.rewards[r, 0]),
                   next_obs=samples.next_observations[r].numpy(), done=float(samples.dones[r, 0]))
        for name, ok in (("action", got["action"] == want["action"]), ("reward", got["reward"] == want["reward"]),
                         ("next observation", np.array_equal(got["next_obs"], want["next_obs"])),
                         ("done", got["done"] == float(done))):
            if not ok:
                problems.append(f"row {r}: {name} of {obs[r].ravel()[:3]} is {got}, added {want}")
    return problems
