"""SB3's NStepReplayBuffer and DictReplayBuffer on the same segment as shmreplay.sb3.ReplayBuffer."""
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.type_aliases import DictReplayBufferSamples

from ._buffers import ReplayBuffer


class NStepReplayBuffer(ReplayBuffer):
    """SB3's NStepReplayBuffer (2.7+): ``n_steps`` and ``gamma`` (keywords, or ``replay_buffer_kwargs``); each
    sample is an n-step transition whose rewards are summed with discounts ``gamma**i`` up to the first ``done`` or
    timeout (inclusive), the newest stored step, or an episode's start that no ``done`` announced; ``discounts`` is
    ``gamma**k`` for the k steps summed, and ``next_observations``/``dones`` are the k-th step's."""

    def __init__(self, *args, n_steps=3, gamma=0.99, **kwargs):
        if int(n_steps) < 1:
            raise ValueError(f"shmreplay.sb3: n_steps is {n_steps}, expected at least 1")
        self.n_steps, self.gamma = int(n_steps), float(gamma)
        super().__init__(*args, **kwargs)
        if self.optimize_memory_usage:  # as SB3's own, which refuses it
            raise NotImplementedError("NStepReplayBuffer doesn't support optimize_memory_usage=True")

    def _subclass_options(self):
        return {"n_steps": self.n_steps, "gamma": self.gamma}

    def sample(self, batch_size, env=None):
        n = self.n_steps
        fields, mask = self._draw(batch_size, n + 1)
        valid = mask[:, 1:] & ~fields["first"][:, 1:]               # step j + 1 ends a transition of this row
        ends = fields["done"][:, 1:] | fields["timeout"][:, 1:]
        after_end = np.zeros_like(ends)
        after_end[:, 1:] = np.logical_or.accumulate(ends[:, :-1], axis=1)
        included = np.logical_and.accumulate(valid, axis=1) & ~after_end  # [rows, n]: transitions summed
        k = included.sum(axis=1)                                           # >= 1: the first pair is a transition
        rewards = self._normalize_reward(fields["reward"][:, 1:], env).astype(np.float32)
        discounts = (self.gamma ** np.arange(n, dtype=np.float32)).astype(np.float32)
        returns = (rewards * discounts * included).sum(axis=1, keepdims=True, dtype=np.float32)
        rows = np.arange(len(k))
        dones = (fields["done"][rows, k] & ~fields["timeout"][rows, k]).astype(np.float32).reshape(-1, 1)
        target_discounts = (np.float32(self.gamma) ** k.astype(np.float32)).astype(np.float32).reshape(-1, 1)
        return self._samples(self._normalize_obs(self._obs_at(fields, 0), env), fields["action"][:, 1],
                             self._normalize_obs(self._obs_at(fields, k), env), dones, returns,
                             discounts=target_discounts)


class DictReplayBuffer(ReplayBuffer):
    """SB3's DictReplayBuffer: observations are dicts (``spaces.Dict``), one segment field per key, each stored
    once; ``sample`` returns ``DictReplayBufferSamples``. ``stack_axis`` may be a dict {key: axis}."""

    def _check_options(self, optimize_memory_usage, handle_timeout_termination):
        if not isinstance(self.observation_space, spaces.Dict):
            raise TypeError(f"DictReplayBuffer must be used with Dict obs space only, not "
                            f"{type(self.observation_space).__name__}")
        if optimize_memory_usage:  # as SB3's own, which refuses it
            raise AssertionError("DictReplayBuffer does not support optimize_memory_usage")

    def _obs_keys(self):
        return list(self.observation_space.spaces.items())

    def _obs_field(self, i):
        return f"obs{i}"

    @staticmethod
    def _shape_of(space):
        from stable_baselines3.common.preprocessing import get_obs_shape
        return get_obs_shape(space)

    def _join_obs(self, arrays):
        return {key: a for (key, _), a in zip(self._obs_keys(), arrays)}

    def _samples(self, obs, actions, next_obs, dones, rewards, discounts=None):
        t = self._tensor
        return DictReplayBufferSamples(
            observations={k: t(v) for k, v in obs.items()}, actions=t(actions),
            next_observations={k: t(v) for k, v in next_obs.items()}, dones=t(dones), rewards=t(rewards))
