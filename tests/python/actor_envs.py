"""Helpers of the actor adapter tests (test_gymnasium.py, test_pufferlib.py): an env whose observations name (env,
episode, step) and whose every outcome is a function of them, the policy the tests act with, and the checks of a
stored stream and of sampled transitions against what the env produced."""
import gymnasium as gym
import numpy as np
from gymnasium import spaces


def length(env, episode):
    """The number of steps of episode `episode` of env `env` (2 to 8): episodes end at different times."""
    return 2 + (env * 5 + episode * 3) % 7


def ending(env, episode):
    """(terminated, truncated) of the episode's last step: terminations, truncations and both at once."""
    k = (env + episode) % 5
    return (k != 0, k in (0, 4))


def policy(obs):
    """The action the tests take on an observation [env, episode, step] (rows of them)."""
    obs = np.asarray(obs)
    return (obs[..., 0] + 2 * obs[..., 1] + obs[..., 2]).astype(np.int64) % 3


def reward(env, t, action):
    return float(env * 100 + t + 0.25 * int(action))


def logp(obs):
    """The extra field the tests store with each action: a function of the observation acted on."""
    obs = np.asarray(obs, np.float32)
    return (obs[..., 1] * 0.5 - obs[..., 2]).astype(np.float32)


class Stamped(gym.Env):
    """Observation [env, episode, step] (float32); episode k lasts length(env, k) steps and ends as ending(env, k)
    says; reward(env, step, action)."""

    def __init__(self, index):
        self.index = index
        self.observation_space = spaces.Box(-1e6, 1e6, (3,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.episode, self.t = -1, 0

    def _obs(self):
        return np.array([self.index, self.episode, self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        end = self.t == length(self.index, self.episode)
        terminated, truncated = ending(self.index, self.episode) if end else (False, False)
        return self._obs(), reward(self.index, self.t, action), terminated, truncated, {}


def stamp(obs):
    e, k, t = (int(x) for x in np.asarray(obs).ravel()[:3])
    return e, k, t


def check_stream(steps, env, first_step=0, last_obs=None, extra=False, cut=()):
    """Problems (empty: none) of the steps stored for `env` (read_steps's dict, from `first_step` on): a reset step
    [env, k, 0] starts each episode, each later step is [env, k, t + 1] with the policy's action on [env, k, t], its
    reward and the episode's flags on its last step only, the final observation ends it, episodes follow each
    other; `cut`: the (episode, step) where the test reset an env in the middle of an episode (no flag there).
    `last_obs`: the last observation the env produced, which must be the last step stored."""
    problems = []
    n = len(steps["obs"])
    prev = None
    for j in range(n):
        where = f"env {env} step {first_step + j}"
        e, k, t = stamp(steps["obs"][j])
        flags = (bool(steps["terminated"][j]), bool(steps["truncated"][j]))
        if e != env:
            problems.append(f"{where}: observation of env {e}")
        if steps["first"][j]:
            want_k = None if prev is None else prev[1] + 1
            if t != 0 or (want_k is not None and k != want_k) or flags != (False, False):
                problems.append(f"{where}: reset step {(e, k, t)} flags {flags} after {prev}")
            if prev is not None and prev[2] != length(env, prev[1]) and (prev[1], prev[2]) not in cut:
                problems.append(f"{where}: episode {prev[1]} ended at step {prev[2]}, expected "
                                f"{length(env, prev[1])}")
            prev = (e, k, t)
            continue
        if prev is None:  # the window starts inside an episode: take it as it is
            prev = (e, k, t)
            continue
        if (k, t) != (prev[1], prev[2] + 1):
            problems.append(f"{where}: {(e, k, t)} follows {prev}, expected {(env, prev[1], prev[2] + 1)}")
        action = int(policy(np.array(prev, np.float32)))
        want_flags = ending(env, k) if t == length(env, k) else (False, False)
        got = (int(np.asarray(steps["action"][j]).ravel()[0]), float(steps["reward"][j]), flags)
        if got != (action, reward(env, t, action), want_flags):
            problems.append(f"{where}: {(e, k, t)} has action, reward, flags {got}, expected "
                            f"{(action, reward(env, t, action), want_flags)}")
        if extra and float(steps["logp"][j]) != float(logp(np.array(prev, np.float32))):
            problems.append(f"{where}: logp {steps['logp'][j]} of {(e, k, t)}")
        prev = (e, k, t)
    if last_obs is not None and n and stamp(steps["obs"][-1]) != stamp(last_obs):
        problems.append(f"env {env}: last stored step {stamp(steps['obs'][-1])}, the env's last observation "
                        f"{stamp(last_obs)}")
    return problems


def check_transitions(batch):
    """Problems (empty: none) of sampled transitions: next_obs is the env's next observation of the same episode,
    and action, reward and flags are what the env gave for it."""
    problems = []
    for r in range(len(batch["obs"])):
        e, k, t = stamp(batch["obs"][r])
        action = int(policy(batch["obs"][r]))
        want = ((e, k, t + 1), action, reward(e, t + 1, action),
                ending(e, k) if t + 1 == length(e, k) else (False, False))
        got = (stamp(batch["next_obs"][r]), int(np.asarray(batch["action"][r]).ravel()[0]), float(batch["reward"][r]),
               (bool(batch["terminated"][r]), bool(batch["truncated"][r])))
        if got != want or int(batch["env_ids"][r]) != e:
            problems.append(f"row {r}: transition from {(e, k, t)} is {got} (env id {batch['env_ids'][r]}), "
                            f"expected {want}")
    return problems
